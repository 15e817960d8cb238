"""FastXML benchmark: accuracy, train/predict wall time, peak memory and model
size of xmlkit's FastXML, through the command line as a user runs it, next
to the original C++ tool's figures measured on this machine class
(../shared/specs/anchors.md).

    python scripts/bench_fastxml.py [--data ../shared/data] [--sets bibtex delicious]
                                    [--seeds 0 1 ... 9] [--timing-seeds 0 1 2]
                                    [--threads 1 2] [--trees 50]
                                    [--markdown results/fastxml.md]

For each data set and seed it runs `xml-train` (50 trees, -m 10 -l 10 -b 1
-c 1), `xml-predict` and `xml-eval` on the XC files decompressed to plain
text first (the C++ tools read plain text too): at every thread count for
the timing seeds, at the largest one only for the other seeds (the trees do
not depend on the thread count). Accuracy is the mean over all seeds: the
spread between seeds (P@1 sd ~0.35 on Bibtex) is larger than the gaps the
targets measure, so a 3-seed mean is a noisy estimate.
Wall time is the whole command (process start, reading, work, writing), as
for the C++ figures. Memory: peak RSS of the largest process (getrusage of
the child) and the peak sum of the RSS of the process tree (sampled every
0.25 s; pages that forked workers share with their parent count twice).
"""
import argparse
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
SAMPLE_S = 0.25   # memory sampling period (cheap, so it does not slow the run)
BIN = Path(sys.executable).parent

# The C++ FastXML v2 tool on this machine class (anchors.md): train and
# predict seconds at T=1 and T=2 (first of the two runs listed), model MB.
CPP = {
    "bibtex": {"P": (64.02, 39.81, 29.07), "train": {1: 20.4, 2: 9.8},
               "predict": {1: 2.5, 2: 1.4}, "rss": (12, 8), "model_mb": 35.4},
    "delicious": {"P": (70.20, 64.82, 60.26), "train": {1: 36.9, 2: 18.1},
                  "predict": {1: 3.5, 2: 1.4}, "rss": (15, 9), "model_mb": 78.0},
}
TARGET_P = {"bibtex": (63.7, 39.5, 28.8), "delicious": (69.9, 64.5, 60.0)}


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
    """Like run, plus the child's own ru_maxrss (MB) from wait4."""
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


def decompress(src, dst):
    with lzma.open(src, "rb") as f, open(dst, "wb") as g:
        shutil.copyfileobj(f, g, 1 << 20)


def bench_set(name, data_dir, work, seeds, timing_seeds, threads, n_trees):
    train_xz = data_dir / name / f"{name}_train.txt.xz"
    test_xz = data_dir / name / f"{name}_test.txt.xz"
    train, test = work / f"{name}_train.txt", work / f"{name}_test.txt"
    decompress(train_xz, train)
    decompress(test_xz, test)
    rows = []
    for seed in seeds:
        for T in (threads if seed in timing_seeds else [max(threads)]):
            model = work / f"{name}_s{seed}_T{T}"
            scores = work / f"{name}_s{seed}_T{T}.scores"
            tr = run_rss([BIN / "xml-train", train, model, "-t", n_trees, "-T", T,
                          "--seed", seed, "-m", 10, "-l", 10, "-b", 1.0, "-c", 1.0, "-q"])
            pr = run_rss([BIN / "xml-predict", test, scores, model, "-T", T, "-q"])
            ev = run_rss([BIN / "xml-eval", scores, test, "--train-labels", train, "--json",
                          "-q"])
            m = json.loads(ev["stdout"])["metrics"]
            rows.append({"set": name, "seed": seed, "T": T, "train_s": tr["wall"],
                         "train_rss": tr["rss_mb"], "train_tree_rss": tr["tree_rss_mb"],
                         "predict_s": pr["wall"], "predict_rss": pr["rss_mb"],
                         "model_mb": folder_mb(model),
                         **{f"{k}@{c}": m[f"{k}@{c}"] for k in ("P", "nDCG", "PSP")
                            for c in (1, 3, 5)}})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            shutil.rmtree(model)
            scores.unlink()
    return rows


def mean(xs):
    return sum(xs) / len(xs)


def sd(xs):
    m = mean(xs)
    return (sum((x - m) ** 2 for x in xs) / max(1, len(xs) - 1)) ** 0.5


def report(rows, sets, seeds, timing_seeds, threads, n_trees):
    T_acc = max(threads)
    out = [f"FastXML, {n_trees} trees, -m 10 -l 10 -b 1 -c 1. Accuracy: mean over seeds "
           f"{seeds[0]}..{seeds[-1]} ({len(seeds)} models per set); times: seeds "
           f"{timing_seeds}, wall seconds of the whole command, ratios against the C++ tool "
           "(anchors.md, first of its two runs).", ""]
    out.append("| data | P@1 | P@1 sd | P@3 | P@5 | nDCG@3 | nDCG@5 | PSP@1 | PSP@3 | PSP@5 | "
               "C++ P@1/3/5 | target P@1/3/5 |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in sets:
        r = [x for x in rows if x["set"] == s and x["T"] == T_acc]
        cells = [f"{mean([x[k] for x in r]):.2f}" for k in
                 ("P@1", "P@3", "P@5", "nDCG@3", "nDCG@5", "PSP@1", "PSP@3", "PSP@5")]
        cells.insert(1, f"{sd([x['P@1'] for x in r]):.2f}")
        out.append(f"| {s} | " + " | ".join(cells) + f" | {'/'.join(map(str, CPP[s]['P']))} | "
                   f"{'/'.join(map(str, TARGET_P[s]))} |")
    out.append("")
    per_seed = ["| data | seed | P@1 | P@3 | P@5 |", "|---|---|---|---|---|"]
    for s in sets:
        for seed in seeds:
            x = next(x for x in rows if x["set"] == s and x["seed"] == seed
                     and x["T"] == T_acc)
            per_seed.append(f"| {s} | {seed} | {x['P@1']:.2f} | {x['P@3']:.2f} | "
                            f"{x['P@5']:.2f} |")
    out += per_seed + [""]
    out.append("| data | T | train s | × C++ | predict s | × C++ | train speed-up vs T=1 | "
               "peak RSS MB train (largest process / all processes) | peak RSS MB predict | "
               "model MB | × C++ |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    timed = [x for x in rows if x["seed"] in timing_seeds]
    for s in sets:
        base = mean([x["train_s"] for x in timed if x["set"] == s and x["T"] == 1]) \
            if 1 in threads else None
        for T in threads:
            r = [x for x in timed if x["set"] == s and x["T"] == T]
            tr, pr = mean([x["train_s"] for x in r]), mean([x["predict_s"] for x in r])
            mb = mean([x["model_mb"] for x in r])
            c = CPP[s]
            speed = f"{base / tr:.2f}" if base else "–"
            out.append(
                f"| {s} | {T} | {tr:.1f} | {tr / c['train'][T]:.2f} | {pr:.2f} | "
                f"{pr / c['predict'][T]:.2f} | {speed} | "
                f"{max(x['train_rss'] for x in r):.0f} / {max(x['train_tree_rss'] for x in r):.0f} | "
                f"{max(x['predict_rss'] for x in r):.0f} | {mb:.1f} | {mb / c['model_mb']:.2f} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    ap.add_argument("--sets", nargs="+", default=["bibtex", "delicious"], choices=sorted(CPP))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    ap.add_argument("--timing-seeds", nargs="+", type=int, default=[0, 1, 2],
                    help="seeds also run at every thread count (the rest: at the largest)")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--trees", type=int, default=50)
    ap.add_argument("--markdown", type=Path, help="also write the tables to this file")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_fastxml_") as tmp:
        rows = []
        for s in a.sets:
            rows += bench_set(s, a.data, Path(tmp), a.seeds, a.timing_seeds, a.threads, a.trees)
    text = report(rows, a.sets, a.seeds, [t for t in a.timing_seeds if t in a.seeds],
                  a.threads, a.trees)
    print(text)
    if a.markdown:
        from xmlkit.atomic import atomic_path
        a.markdown.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(a.markdown) as tmp:
            Path(tmp).write_text(text)


if __name__ == "__main__":
    main()
