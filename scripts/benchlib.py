"""Shared parts of the tree-model benchmarks (bench_fastxml.py,
bench_pfastrexml.py): run xml-train / xml-predict / xml-eval as a user does,
measure wall time and memory, and write the markdown report.

A benchmark is a list of configurations: a data set, the xml-train and
xml-predict arguments, the C++ tool's figures from ../shared/specs/anchors.md
and the acceptance targets. For each configuration and seed the commands run
at every thread count for the timing seeds, at the largest one only for the
other seeds (the models do not depend on the thread count). Accuracy is the
mean over all seeds: the spread between seeds (P@1 sd ~0.35 on Bibtex) is
larger than the gaps the targets measure.

Wall time is the whole command (process start, reading, work, writing), as
for the C++ figures. Memory: peak RSS of the largest process (getrusage of
the child) and the peak sum of the RSS of the process tree (sampled every
0.25 s; pages that forked workers share with their parent count twice).
"""
import json
import lzma
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
SAMPLE_S = 0.25   # memory sampling period (cheap, so it does not slow the run)
BIN = Path(sys.executable).parent
METRICS = [f"{m}@{k}" for m in ("P", "nDCG", "PSP", "PSnDCG") for k in (1, 3, 5)]


def tree_pids(root):
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return pids


def rss_kb(pid):
    """Resident set size of one process (cheap: /proc/<pid>/statm)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_KB
    except (OSError, IndexError, ValueError):
        return 0


def run_rss(cmd):
    """Run a command; its wall time, the child's own ru_maxrss (MB) from
    wait4, the sampled peak RSS of its process tree, and its stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], sum(rss_kb(p) for p in tree_pids(proc.pid)))
            done.wait(SAMPLE_S)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed: {err.decode().strip()}")
    return {"wall": wall, "rss_mb": usage.ru_maxrss / 1024, "tree_rss_mb": peak[0] / 1024,
            "stdout": out.decode()}


def folder_mb(folder):
    return sum(p.stat().st_size for p in Path(folder).iterdir()) / 1e6


def plain_copy(data_dir, work, name, part):
    """The XC file decompressed to plain text (the C++ tools read plain text)."""
    dst = work / f"{name}_{part}.txt"
    if not dst.exists():
        with lzma.open(data_dir / name / f"{name}_{part}.txt.xz", "rb") as f, \
                open(dst, "wb") as g:
            shutil.copyfileobj(f, g, 1 << 20)
    return dst


def mean(xs):
    return sum(xs) / len(xs)


def sd(xs):
    m = mean(xs)
    return (sum((x - m) ** 2 for x in xs) / max(1, len(xs) - 1)) ** 0.5


def variants(cfg):
    """The (name, label, xml-predict arguments) a configuration's models are
    scored with: by default one, else its "variants" (e.g. with and without
    re-ranking, from the same trained model)."""
    if "variants" not in cfg:
        return [(cfg["name"], cfg["label"], cfg.get("predict_args", []))]
    return [(f"{cfg['name']}{suffix}", f"{cfg['label']}{label}", args)
            for suffix, label, args, *_ in cfg["variants"]]


def report_entries(configs):
    """One report row per scored variant, with the configuration's figures."""
    out = []
    for c in configs:
        for i, (name, label, _) in enumerate(variants(c)):
            extra = c["variants"][i][3] if "variants" in c and len(c["variants"][i]) > 3 else {}
            out.append({**c, "name": name, "label": label, **extra})
    return out


def run_config(cfg, data_dir, work, seeds, timing_seeds, threads):
    """Rows of measurements for one configuration over seeds and threads."""
    name = cfg["set"]
    train, test = plain_copy(data_dir, work, name, "train"), plain_copy(data_dir, work, name, "test")
    rows = []
    for seed in seeds:
        for T in (threads if seed in timing_seeds else [max(threads)]):
            tag = f"{cfg['name']}_s{seed}_T{T}"
            model = work / tag
            tr = run_rss([BIN / "xml-train", train, model, "-T", T, "--seed", seed, "-q",
                          *cfg["train_args"]])
            for vname, _, pargs in variants(cfg):
                scores = work / f"{tag}{vname}.scores"
                pr = run_rss([BIN / "xml-predict", test, scores, model, "-T", T, "-q", *pargs])
                ev = run_rss([BIN / "xml-eval", scores, test, "--train-labels", train,
                              "--json", "-q"])
                m = json.loads(ev["stdout"])["metrics"]
                rows.append({"config": vname, "seed": seed, "T": T, "train_s": tr["wall"],
                             "train_rss": tr["rss_mb"], "train_tree_rss": tr["tree_rss_mb"],
                             "predict_s": pr["wall"], "predict_rss": pr["rss_mb"],
                             "model_mb": folder_mb(model), **{k: m[k] for k in METRICS}})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                scores.unlink()
            shutil.rmtree(model)
    return rows


def _fmt(v, digits=2):
    return "–" if v is None else f"{v:.{digits}f}"


def report(title, configs, rows, seeds, timing_seeds, threads, columns):
    """Markdown: accuracy (mean over seeds, next to the C++ tool and the
    target), per-seed values, then times, memory and model size."""
    T_acc = max(threads)
    out = [f"{title} Accuracy: mean over seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} models "
           f"per row); times: seeds {timing_seeds}, wall seconds of the whole command, ratios "
           "against the C++ tool (anchors.md, first of its two runs).", ""]
    head = ["setting"] + columns + [f"{columns[0]} sd", "C++ tool", "target"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in configs:
        r = [x for x in rows if x["config"] == c["name"] and x["T"] == T_acc]
        if not r:
            continue
        cells = [_fmt(mean([x[k] for x in r])) for k in columns]
        cells.append(_fmt(sd([x[columns[0]] for x in r])))
        cpp = c.get("cpp", {}).get("acc")
        target = c.get("target")
        cells.append(cpp or "–")
        cells.append(target or "–")
        out.append(f"| {c['label']} | " + " | ".join(cells) + " |")
    out.append("")
    head = ["setting", "seed"] + columns[:3]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in configs:
        for seed in seeds:
            x = next((x for x in rows if x["config"] == c["name"] and x["seed"] == seed
                      and x["T"] == T_acc), None)
            if x:
                out.append(f"| {c['label']} | {seed} | "
                           + " | ".join(_fmt(x[k]) for k in columns[:3]) + " |")
    out.append("")
    out.append("| setting | T | train s | × C++ | predict s | × C++ | train speed-up vs T=1 | "
               "peak RSS MB train (largest process / all processes) | peak RSS MB predict | "
               "model MB | × C++ |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    timed = [x for x in rows if x["seed"] in timing_seeds]
    for c in configs:
        cpp = c.get("cpp", {})
        base = [x["train_s"] for x in timed if x["config"] == c["name"] and x["T"] == 1]
        for T in threads:
            r = [x for x in timed if x["config"] == c["name"] and x["T"] == T]
            if not r:
                continue
            tr, pr = mean([x["train_s"] for x in r]), mean([x["predict_s"] for x in r])
            mb = mean([x["model_mb"] for x in r])

            def ratio(v, ref):
                return _fmt(v / ref) if ref else "–"
            out.append(
                f"| {c['label']} | {T} | {tr:.1f} | {ratio(tr, cpp.get('train', {}).get(T))} | "
                f"{pr:.2f} | {ratio(pr, cpp.get('predict', {}).get(T))} | "
                f"{_fmt(mean(base) / tr) if base else '–'} | "
                f"{max(x['train_rss'] for x in r):.0f} / "
                f"{max(x['train_tree_rss'] for x in r):.0f} | "
                f"{max(x['predict_rss'] for x in r):.0f} | {mb:.1f} | "
                f"{ratio(mb, cpp.get('model_mb'))} |")
    return "\n".join(out) + "\n"


def save(text, path):
    if path:
        from xmlkit.atomic import atomic_path
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            Path(tmp).write_text(text)


def add_common_args(ap, default_configs):
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--configs", nargs="+", default=default_configs, choices=default_configs,
                    help="settings to run")
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    ap.add_argument("--timing-seeds", nargs="+", type=int, default=[0, 1, 2],
                    help="seeds also run at every thread count (the rest: at the largest)")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--trees", type=int, default=50)
    ap.add_argument("--markdown", type=Path, help="also write the tables to this file")


def main(doc, configs, title, columns):
    """Command line of a benchmark script over `configs` (a list of dicts)."""
    import argparse
    import tempfile
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_common_args(ap, [c["name"] for c in configs])
    a = ap.parse_args()
    chosen = [c for c in configs if c["name"] in a.configs]
    timing = [t for t in a.timing_seeds if t in a.seeds]
    rows = []
    with tempfile.TemporaryDirectory(prefix="xmlkit_bench_") as tmp:
        for c in chosen:
            c = dict(c, train_args=["-t", a.trees, *c["train_args"]])
            rows += run_config(c, a.data, Path(tmp), a.seeds, timing, a.threads)
    text = report(title.format(trees=a.trees), report_entries(chosen), rows, a.seeds, timing,
                  a.threads, columns)
    print(text)
    save(text, a.markdown)
