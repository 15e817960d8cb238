"""Shared parts of the benchmarks: run xml-train / xml-predict / xml-eval as a
user does, measure wall time and memory, and build every benchmark as a list
of steps that `make` can resume.

Steps. A benchmark script declares its work as steps (:class:`Step`): each
writes one JSON record under ``work/<bench>/`` (atomically, last), after the
files it makes (model folders, score files, pruned or synthetic data), and
names the records or data files it needs. ``bench_X.py --makefile F`` writes
these steps as make rules, which ``scripts/Makefile`` includes: an interrupted
``make`` resumes at the first missing record and ``make -j2`` runs independent
steps side by side. Steps whose times are reported are *timed*: they take an
exclusive lock (``work/.timing.lock``), the others a shared one, so under
``make -j2`` a timed step never shares the machine with another step. Run
without ``--step``, a script runs its missing steps in order, then writes
its report (``--markdown``); ``--report-only`` only renders the records.

Tree-model tables (FastXML, PfastreXML): a table is a list of configurations:
a data set, the xml-train and xml-predict arguments, the C++ tool's accuracy
from ../shared/specs/anchors.md and the acceptance targets. For each
configuration and seed the commands run at every thread count for the timing
seeds, at the largest one only for the other seeds (the models do not depend
on the thread count). Accuracy is the mean over all seeds: the spread
between seeds (P@1 sd ~0.35 on Bibtex) is larger than the gaps the targets
measure.

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
HWM_S = 0.05      # VmHWM sampling period (one small /proc read)
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


def hwm_kb(pid):
    """Peak resident set size of one process since its exec (VmHWM)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def run_rss(cmd):
    """Run a command; its wall time, the child's own ru_maxrss (MB) from
    wait4 (which counts the forked Python parent's pages before exec, so it
    is never below the parent's size), the sampled peak RSS of its process
    tree, the sampled high-water mark of the command's own process since its
    exec (VmHWM, last seen before exit), and its stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    peak = [0]
    hwm = [0]
    done = threading.Event()

    def sample():
        tick = 0
        while not done.is_set():
            if tick % round(SAMPLE_S / HWM_S) == 0:
                peak[0] = max(peak[0], sum(rss_kb(p) for p in tree_pids(proc.pid)))
            hwm[0] = max(hwm[0], hwm_kb(proc.pid))
            tick += 1
            done.wait(HWM_S)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    err_chunks = []   # stderr is drained by a thread: a chatty command would fill the
    drain = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()),
                             daemon=True)   # pipe and block while stdout is read
    drain.start()
    out = proc.stdout.read()
    drain.join()
    err = err_chunks[0]
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed: {err.decode().strip()}")
    return {"wall": wall, "rss_mb": usage.ru_maxrss / 1024, "tree_rss_mb": peak[0] / 1024,
            "hwm_mb": hwm[0] / 1024, "stdout": out.decode()}


def folder_mb(path):
    """Size in MB of a file, or of every file under a folder."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def data_file(name, part):
    """Path of an XC file decompressed to plain text (the C++ tools read plain
    text): ``work/data/<name>_<part>.txt``; made by :func:`ensure_data` or by
    the Makefile's pattern rule (which calls this module)."""
    return WORK / "data" / f"{name}_{part}.txt"


def ensure_data(path):
    """Decompress ``<set>/<file>.txt.xz`` of ../shared/data to `path` (a
    :func:`data_file` path) unless it is there."""
    path = Path(path)
    if path.exists():
        return path
    src = DATA / path.stem.split("_")[0] / f"{path.name}.xz"
    path.parent.mkdir(parents=True, exist_ok=True)
    from xmlkit.atomic import atomic_path
    with lzma.open(src, "rb") as f, atomic_path(path) as tmp, open(tmp, "wb") as g:
        shutil.copyfileobj(f, g, 1 << 20)
    return path


def cpp_bin():
    """Folder of the C++ tools' binaries (fastXML_train, PfastreXML_train,
    ...): --cpp-bin, else $XMLKIT_CPP_BIN; None when not given or missing.
    They are built beside the project from the tools' public source; xmlkit
    holds none of their code."""
    path = CPP_BIN or os.environ.get("XMLKIT_CPP_BIN")
    return Path(path).absolute() if path and Path(path).is_dir() else None


CPP_BIN = None
CPP_MISSING = ("C++ tools not found (give --cpp-bin DIR or set XMLKIT_CPP_BIN to the folder "
               "of fastXML_train etc.): side-by-side timings skipped.")


def cpp_files(xc_path):
    """The C++ tools' inputs made from an XC single-file data set: feature
    and label matrices (`N D`, `N L`), and for training sets the inverse
    propensities (A = 0.55, B = 1.5). Feature values are written with 9
    significant digits, so both tools read the same float32 values."""
    xc_path = Path(xc_path)
    out = {k: xc_path.with_name(f"{xc_path.stem}_{k}.txt") for k in ("X", "Y", "inv_prop")}
    if not all(p.exists() for p in out.values()):
        from xmlkit.io import read_dataset, write_inv_propensity, write_matrix
        from xmlkit.metrics import inverse_propensity
        X, Y = read_dataset(ensure_data(xc_path))
        write_matrix(out["X"], X, precision=9, fixed=False)
        write_matrix(out["Y"], Y, precision=0)
        write_inv_propensity(out["inv_prop"], inverse_propensity(Y))
    return out


def side_by_side_steps(cfg, work, threads, rounds):
    """One timed step per configuration and thread count: `rounds` rounds,
    each running the C++ tool's training, then xmlkit's, then both
    predictions (alternating, so both see the same machine state); none for
    a configuration without the C++ tool's commands."""
    if cpp_bin() is None or "cpp_train" not in cfg:
        return []
    train = cfg.get("train_file") or data_file(cfg["set"], "train")
    test = cfg.get("test_file") or data_file(cfg["set"], "test")
    return [Step(work / f"{cfg['name']}_T{T}.sbs.json", side_by_side,
                 cfg.get("deps") or [train, test],
                 timed=True,
                 cfg={k: cfg[k] for k in ("train_args", "cpp_train", "cpp_predict",
                                          "predict_args") if k in cfg},
                 train=train, test=test, T=T, rounds=rounds, tag=f"{cfg['name']}_T{T}")
            for T in threads]


def substitute(argv, subst):
    """A command template with its "$name" words replaced by subst[name]."""
    return [subst.get(a[1:], a) if str(a).startswith("$") else a for a in argv]


def _sbs_commands(step):
    k, c, T = step.kw, step.kw["cfg"], step.kw["T"]
    base = step.target.parent / f"{k['tag']}.sbs"
    tr, te = cpp_files(k["train"]), cpp_files(k["test"])
    subst = {"X": tr["X"], "Y": tr["Y"], "inv_prop": tr["inv_prop"], "model": base / "cpp.model",
             "test_X": te["X"], "scores": base / "cpp.scores", "T": T}
    bin_ = cpp_bin()

    def fill(argv):
        return [bin_ / argv[0], *substitute(argv[1:], subst)]
    return {
        "cpp_train": fill(c["cpp_train"]),
        "xmlkit_train": ["xml-train", k["train"], base / "xmlkit.model", "-T", T, "-q",
                         *c["train_args"]],
        "cpp_predict": fill(c["cpp_predict"]),
        "xmlkit_predict": ["xml-predict", k["test"], base / "xmlkit.scores", base / "xmlkit.model",
                           "-T", T, "-q", *c.get("predict_args", [])],
    }, base


def import_floor_mb(module):
    """Peak RSS (MB) of a Python process that only imports `module` (an
    xmlkit command's module: the interpreter, numpy, click and xmlkit), the
    memory every run of that command starts from: its own VmHWM (getrusage
    would count the forking parent's pages, which Linux carries over exec)."""
    r = run_rss([sys.executable, "-c", f"import {module}; print([l.split()[1] for l in "
                 "open('/proc/self/status') if l.startswith('VmHWM:')][0])"])
    return int(r["stdout"]) / 1024


def side_by_side(step):
    """Alternate the C++ tool and xmlkit, train then predict, `rounds` times;
    wall time (whole command) and peak RSS of each run."""
    cmds, base = _sbs_commands(step)
    runs = {k: [] for k in cmds}
    acc = {}
    for _ in range(step.kw["rounds"]):
        if base.exists():
            shutil.rmtree(base)
        (base / "cpp.model").mkdir(parents=True)      # the C++ tools want it to exist
        for key, argv in cmds.items():
            r = run_rss(command(argv))
            runs[key].append({"wall": r["wall"], "hwm": r["hwm_mb"], "tree_rss": r["tree_rss_mb"]})
        for tool in ("cpp", "xmlkit"):                # (the models are the same every round)
            acc[tool] = evaluate(base / f"{tool}.scores", step.kw["test"], step.kw["train"])
    shutil.rmtree(base)
    return {"T": step.kw["T"], "runs": runs, "acc": acc}


def import_floors(step):
    """Step: the import floor (import_floor_mb) of xml-train and xml-predict."""
    return {kind: import_floor_mb(f"xmlkit.cli.{kind}") for kind in ("train", "predict")}


import_floors.commands = lambda step: [
    ["python", "-c", f"'import xmlkit.cli.{kind}; print(open(\"/proc/self/status\").read())'"]
    for kind in ("train", "predict")]


def evaluate(scores, test, train):
    """xml-eval of a score file: {metric: percent}."""
    r = run_rss(command(["xml-eval", scores, test, "--train-labels", train, "--json", "-q"]))
    m = json.loads(r["stdout"])["metrics"]
    return {k: m[k] for k in METRICS}


def cpp_accuracy_steps(cfg, work, seeds, trees):
    """The C++ tool's own seeds, for the accuracy comparison: its tree t is
    seeded by t, so its seed s is the trees s*trees .. (s+1)*trees - 1
    (-s s*trees -t trees); trained at -T 2 (a tree does not depend on the
    thread count), scored by xml-eval as xmlkit's models are."""
    if cpp_bin() is None or "cpp_train" not in cfg:
        return []
    train, test = data_file(cfg["set"], "train"), data_file(cfg["set"], "test")
    return [Step(work / f"{cfg['name']}_cpp_s{seed}.eval.json", cpp_train_eval, [train, test],
                 cfg={k: cfg[k] for k in ("cpp_train", "cpp_predict")}, train=train, test=test,
                 seed=seed, trees=trees, tag=f"{cfg['name']}_cpp_s{seed}")
            for seed in seeds]


def _cpp_seed_commands(step):
    k = step.kw
    tr, te = cpp_files(k["train"]), cpp_files(k["test"])
    base = step.target.parent / k["tag"]
    subst = {"X": tr["X"], "Y": tr["Y"], "model": base / "cpp.model", "test_X": te["X"],
             "scores": base / "cpp.scores", "T": 2}
    train = substitute(k["cfg"]["cpp_train"], subst)
    train[train.index("-s") + 1] = k["seed"] * k["trees"]
    train[train.index("-t") + 1] = k["trees"]
    pred = substitute(k["cfg"]["cpp_predict"], subst)
    return train, pred, base


def cpp_train_eval(step):
    train, pred, base = _cpp_seed_commands(step)
    if base.exists():
        shutil.rmtree(base)
    (base / "cpp.model").mkdir(parents=True)
    bin_ = cpp_bin()
    tr = run_rss([bin_ / train[0], *train[1:]])
    run_rss([bin_ / pred[0], *pred[1:]])
    m = evaluate(base / "cpp.scores", step.kw["test"], step.kw["train"])
    shutil.rmtree(base)
    return {"seed": step.kw["seed"], "train_s": tr["wall"], **m}


cpp_train_eval.commands = lambda step: [["$XMLKIT_CPP_BIN/" + str(c[0]), *c[1:]]
                                        for c in _cpp_seed_commands(step)[:2]]


def accuracy_comparison(configs, rows, cpp_rows, columns, T_acc, margin=0.1):
    """Markdown: per setting and metric the C++ tool's mean over its seeds
    and xmlkit's over its seeds, each with its standard error, the
    difference, and whether xmlkit is at least the C++ mean - margin."""
    if not cpp_rows:
        return ""
    out = ["", f"Accuracy against the C++ tool's own seeds (both means over the seeds run, "
           f"standard errors in brackets; xmlkit at -T {T_acc}): the difference xmlkit − C++, "
           f"and whether xmlkit ≥ C++ − {margin}.", "",
           "| setting | metric | C++ mean (se) | xmlkit mean (se) | difference | ≥ C++ − "
           f"{margin} |", "|---|---|---|---|---|---|"]
    for c in configs:
        cp = [x for x in cpp_rows if x["config"] == c["name"]]
        xm = [x for x in rows if x["config"] == c["name"] and x["T"] == T_acc]
        if not cp or not xm:
            continue
        for k in columns:
            a, b = [x[k] for x in cp], [x[k] for x in xm]
            se_a, se_b = sd(a) / len(a) ** 0.5, sd(b) / len(b) ** 0.5
            d = mean(b) - mean(a)
            out.append(f"| {c['label']} ({len(a)} / {len(b)} seeds) | {k} | {mean(a):.2f} "
                       f"({se_a:.2f}) | {mean(b):.2f} ({se_b:.2f}) | {d:+.2f} | "
                       f"{'yes' if d >= -margin - 1e-9 else 'no'} |")
    return "\n".join(out) + "\n"


def _sbs_shown(step):
    """The commands of a side-by-side round, the C++ binaries as $XMLKIT_CPP_BIN/NAME."""
    cmds = _sbs_commands(step)[0]
    for k in ("cpp_train", "cpp_predict"):
        cmds[k] = ["$XMLKIT_CPP_BIN/" + cmds[k][0].name, *cmds[k][1:]]
    return [cmds[k] for k in ("cpp_train", "xmlkit_train", "cpp_predict", "xmlkit_predict")]


side_by_side.commands = _sbs_shown


def median(xs):
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def side_by_side_report(configs, records, floor=None):
    """Markdown table of the side-by-side steps: per setting and thread count
    the median wall time of each tool, the ratio of the medians (xmlkit / C++)
    and the range of the per-round ratios, and the peak RSS of both; with
    `floor` (import_floors' record), how much of xmlkit's peaks it is."""
    if cpp_bin() is None and not records:
        return CPP_MISSING + "\n"
    out = ["Side by side with the C++ tool, measured in the same run: per round the C++ "
           "command, then xmlkit's (train, then predict), whole-command wall time; ratio = "
           "xmlkit / C++ (below 1: xmlkit is faster), median over rounds, with the lowest and "
           "highest per-round ratio. Peak RSS of training and of prediction: the process's "
           "high-water mark (VmHWM, sampled every 0.05 s), largest over rounds, C++ / xmlkit "
           "and their ratio. P@k: both tools' models of that run, scored by xml-eval.", "",
           "| setting | T | rounds | train s C++ | train s xmlkit | train ratio (range) | "
           "predict s C++ | predict s xmlkit | predict ratio (range) | train peak RSS MB "
           "(C++ / xmlkit, ratio) | predict peak RSS MB (C++ / xmlkit, ratio) | "
           "P@1/3/5 of that run (C++ / xmlkit) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in configs:
        for r in (x for x in records if x["config"] == c["name"]):
            runs = r["runs"]

            def cell(kind):
                cp = [x["wall"] for x in runs[f"cpp_{kind}"]]
                xm = [x["wall"] for x in runs[f"xmlkit_{kind}"]]
                ratios = [b / a for a, b in zip(cp, xm)]
                return (f"{median(cp):.2f} | {median(xm):.2f} | {median(xm) / median(cp):.2f} "
                        f"({min(ratios):.2f}–{max(ratios):.2f})")
            def rss(kind):
                a, b = (max(x["hwm"] for x in runs[f"{t}_{kind}"]) for t in ("cpp", "xmlkit"))
                return f"{a:.0f} / {b:.0f}, {b / a:.2f}"

            def p(tool):
                m = r.get("acc", {}).get(tool)
                return "/".join(f"{m[f'P@{k}']:.2f}" for k in (1, 3, 5)) if m else "–"
            out.append(f"| {c['label']} | {r['T']} | {len(runs['cpp_train'])} | {cell('train')} "
                       f"| {cell('predict')} | {rss('train')} | {rss('predict')} "
                       f"| {p('cpp')} / {p('xmlkit')} |")
    if floor:
        f = floor
        out += ["", f"Of xmlkit's peak RSS, {f['train']:.0f} MB (xml-train) and "
                f"{f['predict']:.0f} MB (xml-predict) are the commands' imports alone "
                "(Python, numpy, click, xmlkit: `python -c 'import xmlkit.cli.train'`, its "
                "VmHWM), a floor the C++ tools do not carry; above that floor "
                "xmlkit held " + "; ".join(
                    f"{lab} {kind} {_peak(r, 'xmlkit', kind) - f[kind]:.0f} MB "
                    f"(C++ {_peak(r, 'cpp', kind):.0f})"
                    for lab, r in ((f"{c['label']} T{x['T']}", x) for c in configs
                                   for x in records if x["config"] == c["name"])
                    for kind in ("train", "predict")) + "."]
    return "\n".join(out) + "\n"


def _peak(record, tool, kind):
    return max(x["hwm"] for x in record["runs"][f"{tool}_{kind}"])


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


def model_steps(cfg, work, seeds, timing_seeds, threads):
    """Steps of one configuration: per seed and thread count, xml-train (the
    model folder and its record), then per scored variant xml-predict and
    xml-eval (the score file and a record with times and metrics). The data
    are the set's XC files, or cfg's "train_file"/"test_file" made by the
    steps whose records are cfg's "deps"."""
    train = cfg.get("train_file") or data_file(cfg["set"], "train")
    test = cfg.get("test_file") or data_file(cfg["set"], "test")
    extra = cfg.get("deps", [])
    out = []
    for seed in seeds:
        for T in (threads if seed in timing_seeds else [max(threads)]):
            tag = f"{cfg['name']}_s{seed}_T{T}"
            model = work / f"{tag}.model"
            timed = seed in timing_seeds
            train_rec = Step(work / f"{tag}.train.json", train_model, extra or [train],
                             timed=timed,
                             cmd=[train, model, "-T", T, "--seed", seed, *cfg["train_args"]])
            out.append(train_rec)
            for vname, _, pargs in variants(cfg):
                suffix = vname[len(cfg["name"]):]
                out.append(Step(work / f"{tag}{suffix}.eval.json", predict_eval,
                                [train_rec.target, *([] if extra else [test])],
                                timed=timed, model=model,
                                scores=work / f"{tag}{suffix}.scores", test=test,
                                train=train, args=[*pargs, "-T", T],
                                row={"config": vname, "seed": seed, "T": T}))
    return out


def command(argv):
    """An argv as the steps write it (``xml-train ...``, ``python script ...``)
    made runnable: the commands of this Python's environment."""
    head = str(argv[0])
    exe = sys.executable if head == "python" else BIN / head if head.startswith("xml-") else head
    return [exe, *argv[1:]]


def shown(argv):
    """A command line as the report shows it: paths relative to scripts/."""
    def one(x):
        return _rel(x) if isinstance(x, Path) else str(x)
    return " ".join(one(x) for x in argv)


def train_commands(step):
    return [["xml-train", *step.kw["cmd"], "-q"]]


def train_model(step):
    """xml-train into a fresh model folder; its wall time, memory and size."""
    model = Path(step.kw["cmd"][1])
    if model.exists():
        shutil.rmtree(model)
    tr = run_rss(command(train_commands(step)[0]))
    return {"train_s": tr["wall"], "train_rss": tr["rss_mb"],
            "train_tree_rss": tr["tree_rss_mb"], "model_mb": folder_mb(model)}


def predict_commands(step):
    k = step.kw
    return [["xml-predict", k["test"], k["scores"], k["model"], "-q", *k["args"]],
            ["xml-eval", k["scores"], k["test"], "--train-labels", k["train"], "--json", "-q"]]


def predict_eval(step):
    """xml-predict into a score file, then xml-eval (P@k ... PSnDCG@k)."""
    pr, ev = (run_rss(command(c)) for c in predict_commands(step))
    m = json.loads(ev["stdout"])["metrics"]
    return {**step.kw["row"], **load(step.deps[0]), "predict_s": pr["wall"],
            "predict_rss": pr["rss_mb"], **{x: m[x] for x in METRICS}}


train_model.commands = train_commands
predict_eval.commands = predict_commands


def commands_section(name, steps):
    """The report's footer: how to rebuild it, and the exact command lines of
    the first step of each kind (the others differ in seed, threads, setting
    and file names; steps without commands run the Python API in-process)."""
    out = ["", "Commands: `make -C scripts " + name + "` runs every step as `python bench_"
           + name + ".py --step work/" + name + "/<record>.json` (then `--report-only`)."]
    seen = set()
    lines = []
    for s in steps:
        fn = getattr(s.action, "commands", None)
        if fn is None or s.action in seen:
            continue
        seen.add(s.action)
        lines += [f"    {shown(c)}" for c in fn(s)]
    if lines:
        out += ["First step of each kind (others differ in seed, threads, setting and file "
                "names):", ""] + lines
    if any(getattr(s.action, "commands", None) is None for s in steps):
        out += ["", "Steps without a command line here fit and score through the Python "
                "API in-process (see the script's docstring)."]
    return "\n".join(out) + "\n"


def _fmt(v, digits=2):
    return "–" if v is None else f"{v:.{digits}f}"


def report(title, configs, rows, seeds, timing_seeds, threads, columns):
    """Markdown: accuracy (mean over seeds, next to the C++ tool and the
    target), per-seed values, then times, memory and model size."""
    T_acc = max(threads)
    out = [f"{title} Accuracy: mean over seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} models "
           f"per row), next to the C++ tool's (anchors.md); times: seeds {timing_seeds}, wall "
           "seconds of the whole command (ratios to the C++ tool: the side-by-side table).", ""]
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
    out.append("| setting | T | train s | predict s | train speed-up vs T=1 | "
               "peak RSS MB train (largest process / all processes) | peak RSS MB predict | "
               "model MB |")
    out.append("|---|---|---|---|---|---|---|---|")
    timed = [x for x in rows if x["seed"] in timing_seeds]
    for c in configs:
        base = [x["train_s"] for x in timed if x["config"] == c["name"] and x["T"] == 1]
        for T in threads:
            r = [x for x in timed if x["config"] == c["name"] and x["T"] == T]
            if not r:
                continue
            tr, pr = mean([x["train_s"] for x in r]), mean([x["predict_s"] for x in r])
            mb = mean([x["model_mb"] for x in r])
            out.append(
                f"| {c['label']} | {T} | {tr:.1f} | {pr:.2f} | "
                f"{_fmt(mean(base) / tr) if base else '–'} | "
                f"{max(x['train_rss'] for x in r):.0f} / "
                f"{max(x['train_tree_rss'] for x in r):.0f} | "
                f"{max(x['predict_rss'] for x in r):.0f} | {mb:.1f} |")
    return "\n".join(out) + "\n"


def save(text, path):
    if path:
        from xmlkit.atomic import atomic_path
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            Path(tmp).write_text(text)


def load(path):
    return json.loads(Path(path).read_text())


def _plain(o):
    """JSON for numpy scalars (their Python value) and paths (their text)."""
    return o.item() if hasattr(o, "item") else str(o)


class Step:
    """One unit of benchmark work: ``action(step)`` makes its files and
    returns the record (a dict) that is written to ``target`` (JSON), last,
    with the library id of the code it measured (provenance.library_id).
    ``deps``: records or data files it needs; ``timed``: its times are
    reported (it runs alone, see the module's docstring); ``kw``: its
    parameters (JSON-able, so a step is the same in every process)."""

    def __init__(self, target, action, deps=(), timed=False, **kw):
        self.target, self.action, self.deps = Path(target), action, [Path(d) for d in deps]
        self.timed, self.kw = timed, kw

    def run(self):
        import fcntl
        for d in self.deps:
            if d.parent == WORK / "data":
                ensure_data(d)
            elif not d.exists():
                sys.exit(f"{self.target}: needs {d}, which is not made yet")
        self.target.parent.mkdir(parents=True, exist_ok=True)
        WORK.mkdir(parents=True, exist_ok=True)
        from provenance import library_id
        library = library_id()              # (the code the step measures: before it runs)
        with open(WORK / ".timing.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if self.timed else fcntl.LOCK_SH)
            record = self.action(self)
        if isinstance(record, dict):
            record = {**record, "library": library}
        text = json.dumps(record, default=_plain)
        save(text + "\n", self.target)
        print(f"{self.target.name}: {text[:300]}", file=sys.stderr, flush=True)


WORK = HERE / "work"


def _rel(path):
    # (abspath, not resolve: a data file linked into work/ is shown by its
    # name there, not by the target of the link)
    return os.path.relpath(os.path.abspath(path), HERE)


def makefile_rules(script, steps, results):
    """Make rules: one per step (its record), one for the results file."""
    out = [f"# generated by {script} --makefile; do not edit"]
    cmd = f"$(PYTHON) {script}"
    for st in steps:
        deps = " ".join(_rel(d) for d in st.deps)
        out += [f"{_rel(st.target)}: {deps} {script} benchlib.py",
                f"\t{cmd} --step {_rel(st.target)}"]
    out += [f"{results}: {' '.join(_rel(st.target) for st in steps)}",
            f"\t{cmd} --report-only --markdown $@", ""]
    return "\n".join(out)


def cli(doc, name, add_args, make_steps, make_report):
    """The command line of a benchmark script: `make_steps(args)` lists its
    steps, `make_report(args, steps)` renders the markdown from their records.

        bench_NAME.py [options]                 run the missing steps, report
        bench_NAME.py --step TARGET             run one step (make does this)
        bench_NAME.py --report-only [--markdown F]
        bench_NAME.py --makefile F              the make rules of the steps
    """
    import argparse
    global DATA
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--markdown", type=Path, help="also write the tables to this file")
    ap.add_argument("--step", type=Path, help="run only the step writing this record")
    ap.add_argument("--report-only", action="store_true",
                    help="only render the report from the records")
    ap.add_argument("--makefile", type=Path, help="write the make rules of the steps")
    ap.add_argument("--redo", action="store_true", help="run every step, made or not")
    add_args(ap)
    ap.add_argument("--cpp-bin", type=Path,
                    help="folder of the C++ tools' binaries, for side-by-side timings "
                         "(default: $XMLKIT_CPP_BIN; skipped with a note when absent)")
    a = ap.parse_args()
    DATA = a.data
    global CPP_BIN
    CPP_BIN = a.cpp_bin
    steps = make_steps(a)
    if a.makefile:
        save(makefile_rules(Path(sys.argv[0]).name, steps, f"results/{name}.md"), a.makefile)
        return
    if a.step:
        want = a.step.resolve()
        match = [s for s in steps if s.target.resolve() == want]
        if not match:
            sys.exit(f"{a.step}: not a step of this benchmark")
        match[0].run()
        return
    if not a.report_only:
        for s in steps:
            if a.redo or not s.target.exists():
                s.run()
    missing = [s.target for s in steps if not s.target.exists()]
    if missing:
        sys.exit(f"{len(missing)} records missing, first {missing[0]}; run the steps first")
    text = make_report(a, steps) + commands_section(name, steps)
    print(text)
    save(text, a.markdown)


def add_model_args(ap, default_configs, trees=50):
    ap.add_argument("--configs", nargs="+", default=default_configs, choices=default_configs,
                    help="settings to run")
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    ap.add_argument("--timing-seeds", nargs="+", type=int, default=[0, 1, 2],
                    help="seeds also run at every thread count (the rest: at the largest)")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--trees", type=int, default=trees)
    ap.add_argument("--rounds", type=int, default=3,
                    help="side-by-side rounds (C++ tool and xmlkit alternately)")


def main(doc, name, configs, title, columns, trees=50):
    """Command line of a tree-model benchmark over `configs` (a list of dicts);
    `trees` the default of --trees."""
    def chosen(a):
        return [dict(c, train_args=["-t", a.trees, *c["train_args"]]) for c in configs
                if c["name"] in a.configs]

    def timing(a):
        return [t for t in a.timing_seeds if t in a.seeds]

    def steps(a):
        # (a config may bring steps of its own first, "steps", and run fewer
        # seeds, "seeds", or rounds, "rounds")
        out = []
        for c in chosen(a):
            seeds = [s for s in a.seeds if s in c.get("seeds", a.seeds)]
            out += (list(c.get("steps", []))
                    + model_steps(c, WORK / name, seeds, [t for t in timing(a) if t in seeds],
                                  a.threads)
                    + side_by_side_steps(c, WORK / name, a.threads, c.get("rounds", a.rounds))
                    + (cpp_accuracy_steps(c, WORK / name, seeds, a.trees)
                       if c.get("cpp_seeds") else []))
        return out

    def render(a, st):
        rows = [load(s.target) for s in st if s.action is predict_eval]
        sbs = [{**load(s.target), "config": s.kw["tag"].rsplit("_T", 1)[0]}
               for s in st if s.action is side_by_side]
        cpp_rows = [{**load(s.target), "config": s.kw["tag"].rsplit("_cpp_", 1)[0]}
                    for s in st if s.action is cpp_train_eval]
        return (report(title.format(trees=a.trees), report_entries(chosen(a)), rows, a.seeds,
                       timing(a), a.threads, columns)
                + accuracy_comparison(report_entries(chosen(a)), rows, cpp_rows,
                                      ["P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5"],
                                      max(a.threads)) + "\n"
                + side_by_side_report(chosen(a), sbs))
    cli(doc, name, lambda ap: add_model_args(ap, [c["name"] for c in configs], trees), steps,
        render)


if __name__ == "__main__":
    # python benchlib.py data work/data/bibtex_train.txt (the Makefile's data rule)
    if len(sys.argv) == 3 and sys.argv[1] == "data":
        ensure_data(Path(sys.argv[2]).resolve())
    else:
        sys.exit("usage: python benchlib.py data work/data/<set>_<part>.txt")
