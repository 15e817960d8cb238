"""Prediction by threads, side by side with the C++ tool, on whatever machine
runs it: xml-predict and fastXML_predict on the synthetic sets of `scale`
(make_synthetic.py, seed 0; N points, N/10 labels, 100000 features, 10000
test points), 32 trees on 100k points and 16 on 1M, FastXML defaults.

    python scripts/bench_predict_scaling.py [--sizes 100000 1000000]
        [--trees 32 16] [--threads 1 2 ...] [--big-threads ...] [--rounds 3]
        [--big-rounds 3] [--cpp-bin DIR] [--markdown results/predict_scaling.md]
        (and the step options of benchlib.cli)

Per size, untimed steps make the data (shared with `scale`) and the two
models (xml-train and fastXML_train at every core); then one timed step:
a first run of each tool (not counted: both models in the page cache), then
`rounds` rounds, each running, for every thread count (1, 2, 4, ... up to
the machine's cores; sets of 1M points and more: `--big-threads`, by
default the cores alone), the C++ tool's prediction, then xmlkit's
(alternating, whole commands, wall time and VmHWM); then, once,
xml-predict at -T 1 with its phases marked (XMLKIT_PROFILE: the serial
share is the command's wall time outside its scoring phase: interpreter,
imports, opening the model, reading the first rows, closing), the time to
open the model in a process (warm page cache, median of 5), a one-line
file's whole command (median of 3) and the model's bytes on disk. Then the
layouts (mapped, the default; compact, deflated, as before format 3):
bytes, open time, a prediction's wall time and peak memory, and the size
of the mapped folder as a zstd tar (`tar --zstd`, when there). Last, one
document at a time: a Bibtex model (50 trees, the README's) answering 2000
documents through a streaming `xml-predict - - MODEL` (one line written,
its answer read, then the next) and through the API (`model.predict` of a
one-row matrix): per-document latency, p50 and p99 after the first.

Without the C++ tool's binaries (--cpp-bin or $XMLKIT_CPP_BIN) its columns
are left out with a note. The machine's cores and processor head the
tables: results from another machine go to another file (--markdown).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib
from bench_scale import data_step
from benchlib import HERE, WORK, Step

WORK_P = WORK / "predict_scaling"
BIG = 1_000_000
CPP_TRAIN = ["-s", "0", "-b", "1.0", "-c", "1.0", "-m", "10", "-l", "10", "-q", "1"]


def cores():
    return os.cpu_count() or 1


def doubling(n):
    """1, 2, 4, ... up to n, and n."""
    out, t = [], 1
    while t < n:
        out.append(t)
        t *= 2
    return out + [n]


def exe(name):
    """A command of this environment (xml-*: beside this Python, else on PATH)."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


def run(argv, env=None):
    """benchlib.run_rss of a command line, with extra environment `env`."""
    argv = [exe(a) if str(a).startswith("xml-") else str(a) for a in argv]
    if env:
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
    try:
        return benchlib.run_rss(argv)
    finally:
        if env:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


# -- steps

def sets(a):
    out = []
    for n, trees in zip(a.sizes, a.trees):
        data, prefix = data_step(n)
        out.append({"n": n, "trees": trees, "data": data, "prefix": prefix,
                    "name": f"syn{n}_t{trees}"})
    return out


def train_xmlkit(step):
    k = step.kw
    shutil.rmtree(k["model"], ignore_errors=True)
    r = run(["xml-train", k["train"], k["model"], "-t", k["trees"], "-T", cores(), "-q"])
    return {"train_s": r["wall"], "mb": benchlib.folder_mb(k["model"])}


train_xmlkit.commands = lambda step: [["xml-train", Path(step.kw["train"]),
                                       Path(step.kw["model"]), "-t", step.kw["trees"], "-T",
                                       "<cores>", "-q"]]


def train_cpp(step):
    k = step.kw
    files = benchlib.cpp_files(Path(k["train"]))
    benchlib.cpp_files(Path(k["test"]))
    shutil.rmtree(k["model"], ignore_errors=True)
    Path(k["model"]).mkdir(parents=True)
    r = run([benchlib.cpp_bin() / "fastXML_train", files["X"], files["Y"], k["model"],
             "-T", cores(), "-t", k["trees"], *CPP_TRAIN])
    return {"train_s": r["wall"], "mb": benchlib.folder_mb(k["model"])}


train_cpp.commands = lambda step: [["$XMLKIT_CPP_BIN/fastXML_train", "<train>_X.txt",
                                    "<train>_Y.txt", Path(step.kw["model"]), "-T", "<cores>",
                                    "-t", step.kw["trees"], *CPP_TRAIN]]


def side_by_side(step):
    """Rounds of the C++ tool's and xmlkit's predictions at each thread count,
    alternating; then the serial share, open time, one line and bytes."""
    k = step.kw
    test = Path(k["test"])
    out = Path(tempfile.mkdtemp(dir=WORK_P))
    cpp_x = benchlib.cpp_files(test)["X"] if k["cpp"] else None
    runs = {"cpp": {}, "xmlkit": {}}
    try:
        # a first run of each, not counted: both models in the page cache
        if cpp_x is not None:
            run([benchlib.cpp_bin() / "fastXML_predict", cpp_x, out / "c.txt", k["cpp_model"],
                 "-T", max(k["threads"]), "-q", "1"])
        run(["xml-predict", test, out / "x.txt", k["model"], "-T", max(k["threads"]), "-q"])
        for _ in range(k["rounds"]):
            for T in k["threads"]:
                if cpp_x is not None:
                    r = run([benchlib.cpp_bin() / "fastXML_predict", cpp_x, out / "c.txt",
                             k["cpp_model"], "-T", T, "-q", "1"])
                    runs["cpp"].setdefault(str(T), []).append([r["wall"], r["hwm_mb"]])
                r = run(["xml-predict", test, out / "x.txt", k["model"], "-T", T, "-q"])
                runs["xmlkit"].setdefault(str(T), []).append([r["wall"], r["hwm_mb"]])
        acc = {}
        for tool, scores in (("xmlkit", out / "x.txt"), ("cpp", out / "c.txt")):
            if scores.exists():
                r = run(["xml-eval", scores, test, "--json", "-q"])
                acc[tool] = {m: json.loads(r["stdout"])["metrics"][m]
                             for m in ("P@1", "P@3", "P@5")}
        profile = serial_share(test, k["model"], out)
        one = out / "one.txt"
        with open(test) as f, open(one, "w") as g:
            n, d, labels = f.readline().split()
            g.write(f"1 {d} {labels}\n{f.readline()}")
        one_line = median([run(["xml-predict", one, out / "o.txt", k["model"], "-T", cores(),
                                "-q"])["wall"] for _ in range(3)])
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"runs": runs, "acc": acc, "serial": profile, "open_ms": open_ms(k["model"]),
            "one_line_s": one_line, "model_mb": benchlib.folder_mb(k["model"]),
            "cpp_mb": benchlib.folder_mb(k["cpp_model"]) if k["cpp"] else None}


side_by_side.commands = lambda step: [
    ["$XMLKIT_CPP_BIN/fastXML_predict", "<test>_X.txt", "<scores>", Path(step.kw["cpp_model"]),
     "-T", "<T>", "-q", "1"],
    ["xml-predict", Path(step.kw["test"]), "<scores>", Path(step.kw["model"]), "-T", "<T>", "-q"],
    ["XMLKIT_PROFILE=<file>", "xml-predict", Path(step.kw["test"]), "<scores>",
     Path(step.kw["model"]), "-T", "1", "-q"]]


def serial_share(test, model, out):
    """xml-predict -T 1 with its phases marked (median of 3 by wall time)."""
    runs = []
    for _ in range(3):
        prof = out / "profile.json"
        r = run(["xml-predict", test, out / "x.txt", model, "-T", 1, "-q"],
                env={"XMLKIT_PROFILE": str(prof)})
        m = json.loads(prof.read_text())
        scoring = m["scored"] - m["first_piece"]
        runs.append({"wall": r["wall"], "scoring": scoring, **m})
    r = sorted(runs, key=lambda x: x["wall"])[1]
    return {**r, "serial": r["wall"] - r["scoring"]}


def open_ms(model):
    """Milliseconds to open the model in a process (median of 5, warm cache)."""
    code = ("import time, xmlkit.models; t = time.perf_counter(); "
            "xmlkit.models.load_model(%r); print(time.perf_counter() - t)" % str(model))
    subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    return 1000 * median([float(subprocess.run([sys.executable, "-c", code],
                                               capture_output=True, check=True,
                                               text=True).stdout) for _ in range(5)])


def layouts(step):
    """The mapped model against its compact copy: bytes, open time, a
    prediction at the cores' threads (wall, VmHWM); the zstd tar's bytes."""
    k = step.kw
    compact = WORK_P / f"{k['name']}.compact"
    code = ("import xmlkit; from xmlkit.models.folders import save_folder; "
            f"save_folder(xmlkit.load_model({str(k['model'])!r}), {str(compact)!r}, "
            "compact=True)")
    shutil.rmtree(compact, ignore_errors=True)
    subprocess.run([sys.executable, "-c", code], check=True)
    out = {}
    with tempfile.TemporaryDirectory(dir=WORK_P) as tmp:
        for name, folder in (("mapped", Path(k["model"])), ("compact", compact)):
            runs = [run(["xml-predict", k["test"], Path(tmp) / "s.txt", folder, "-T", cores(),
                         "-q"]) for _ in range(3)]
            r = sorted(runs, key=lambda x: x["wall"])[1]
            out[name] = {"mb": benchlib.folder_mb(folder), "open_ms": open_ms(folder),
                         "predict_s": r["wall"], "hwm_mb": r["hwm_mb"]}
        if shutil.which("zstd"):
            tar = Path(tmp) / "m.tar.zst"
            t = time.perf_counter()
            model = Path(k["model"]).resolve()
            subprocess.run(["tar", "--zstd", "-cf", tar, "-C", model.parent, model.name],
                           check=True)
            out["mapped_tar_zst"] = {"mb": tar.stat().st_size / 1e6,
                                     "s": time.perf_counter() - t}
    shutil.rmtree(compact, ignore_errors=True)
    return out


LATENCY = r'''
import json, subprocess, sys, time
import numpy as np
import xmlkit
from xmlkit.io import read_xc
from xmlkit.csr import Rows
xml_predict, model, test, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
lines = [l.rstrip("\n") for l in open(test)]
d = lines[0].split()[1]
rows = [lines[1 + i % (len(lines) - 1)].partition(" ")[2] for i in range(n)]
def q(xs):
    s = sorted(1000 * x for x in xs[1:])
    return {"p50": s[len(s) // 2], "p99": s[int(0.99 * (len(s) - 1))], "first": 1000 * xs[0]}
p = subprocess.Popen([xml_predict, "-", "-", model, "-k", "5", "-q"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE)
p.stdin.write(f"{n} {d}\n".encode()); p.stdin.flush(); p.stdout.readline()
lat = []
for r in rows:
    t = time.perf_counter()
    p.stdin.write((r + "\n").encode()); p.stdin.flush(); p.stdout.readline()
    lat.append(time.perf_counter() - t)
p.stdin.close(); p.wait()
m = xmlkit.load_model(model)
R = read_xc(test).feature_rows
one = []
for i in range(n):
    j = i % R.shape[0]
    a, b = R.indptr[j], R.indptr[j + 1]
    one.append(Rows(np.array([0, b - a]), R.indices[a:b], R.data[a:b], (1, R.shape[1])).to_scipy())
api = []
for x in one:
    t = time.perf_counter(); m.predict(x, k=5); api.append(time.perf_counter() - t)
print(json.dumps({"stream": q(lat), "api": q(api), "n": n}))
'''


def latency(step):
    import lzma
    k = step.kw
    model = WORK_P / "bibtex50.model"
    shutil.rmtree(model, ignore_errors=True)
    run(["xml-train", k["train"], model, "-T", cores(), "-q"])
    with lzma.open(k["test_xz"], "rb") as f, open(k["test"], "wb") as g:
        shutil.copyfileobj(f, g)
    r = subprocess.run([sys.executable, "-c", LATENCY, exe("xml-predict"), str(model),
                        str(k["test"]), str(k["n"])], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


latency.commands = lambda step: [["printf 'N D\\nrow\\n...' |", "xml-predict", "-", "-",
                                  "<bibtex50.model>", "-k", "5", "-q"]]


def steps(a):
    out = []
    cpp = benchlib.cpp_bin() is not None
    for s in sets(a):
        train, test = Path(f"{s['prefix']}_train.txt"), Path(f"{s['prefix']}_test.txt")
        xm = Step(WORK_P / f"{s['name']}.xmlkit.json", train_xmlkit, [s["data"].target],
                  train=str(train), test=str(test), trees=s["trees"],
                  model=str(WORK_P / f"{s['name']}.xmlkit"))
        deps = [xm.target]
        out += [s["data"], xm]
        if cpp:
            cm = Step(WORK_P / f"{s['name']}.cpp.json", train_cpp, [s["data"].target],
                      train=str(train), test=str(test), trees=s["trees"],
                      model=str(WORK_P / f"{s['name']}.cpp"))
            out.append(cm)
            deps.append(cm.target)
        big = s["n"] >= BIG
        threads = a.big_threads if big and a.big_threads else [cores()] if big else a.threads
        out.append(Step(WORK_P / f"{s['name']}.sbs.json", side_by_side, deps, timed=True,
                        test=str(test), model=xm.kw["model"],
                        cpp_model=str(WORK_P / f"{s['name']}.cpp"), cpp=cpp,
                        threads=threads or doubling(cores()),
                        rounds=a.big_rounds if big else a.rounds, cores=cores()))
        if a.layouts:
            out.append(Step(WORK_P / f"{s['name']}.layouts.json", layouts, [xm.target],
                            timed=True, name=s["name"], model=xm.kw["model"], test=str(test)))
    if a.latency:
        # (the README's model: the bundled Bibtex sample, 50 trees)
        train = HERE.parent / "data_samples" / "bibtex_train.txt.xz"
        test_xz = HERE.parent / "data_samples" / "bibtex_test.txt.xz"
        out.append(Step(WORK_P / "latency.json", latency, [train, test_xz], timed=True,
                        train=str(train), test_xz=str(test_xz),
                        test=str(WORK_P / "bibtex_test.txt"), n=a.latency))
    return out


def add_args(ap):
    ap.add_argument("--sizes", nargs="+", type=int, default=[100000, 1000000])
    ap.add_argument("--trees", nargs="+", type=int, default=[32, 16])
    ap.add_argument("--threads", nargs="+", type=int, default=None,
                    help="thread counts (default: 1, 2, 4, ... up to the cores)")
    ap.add_argument("--big-threads", nargs="+", type=int, default=None,
                    help=f"thread counts on sets of {BIG:,} points and more "
                         "(default: the cores)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--big-rounds", type=int, default=3)
    ap.add_argument("--no-layouts", dest="layouts", action="store_false")
    ap.add_argument("--latency", type=int, default=2000,
                    help="documents of the one-at-a-time test (0: none)")


# -- report

def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cores()} cores ({cpu})"


def render(a, st):
    recs = {s.target.name: benchlib.load(s.target) for s in st}
    out = [f"Machine: {machine()}; xml-predict against fastXML_predict (the C++ tool, "
           "built beside the project), whole commands, alternating, medians of the "
           "rounds; peak RSS is VmHWM.", ""]
    for s in sets(a):
        sbs = recs.get(f"{s['name']}.sbs.json")
        if not sbs:
            continue
        out += [f"**{s['n']:,} points, {s['trees']} trees** (xmlkit model "
                f"{sbs['model_mb']:.0f} MB on disk"
                + (f", the C++ tool's {sbs['cpp_mb']:.0f} MB" if sbs.get("cpp_mb") else "")
                + ")", "",
                "| -T | rounds | C++ s | xmlkit s | time ratio | C++ MB | xmlkit MB | peak ratio |",
                "|---|---|---|---|---|---|---|---|"]
        for T, xr in sbs["runs"]["xmlkit"].items():
            cr = sbs["runs"]["cpp"].get(T)
            xw, xm = median([r[0] for r in xr]), max(r[1] for r in xr)
            if cr:
                cw, cm = median([r[0] for r in cr]), max(r[1] for r in cr)
                out.append(f"| {T} | {len(xr)} | {cw:.2f} | {xw:.2f} | {xw / cw:.3f} | "
                           f"{cm:.0f} | {xm:.0f} | {xm / cm:.2f} |")
            else:
                out.append(f"| {T} | {len(xr)} | – | {xw:.2f} | – | – | {xm:.0f} | – |")
        one = {int(T): median([r[0] for r in v]) for T, v in sbs["runs"]["xmlkit"].items()}
        if 1 in one and len(one) > 1:
            top = max(one)
            out.append(f"\nxmlkit from 1 to {top} threads: {one[1] / one[top]:.2f}× faster"
                       + (lambda c: f" (the C++ tool: {c[1] / c[top]:.2f}×)" if c else "")(
                           {int(T): median([r[0] for r in v])
                            for T, v in sbs["runs"]["cpp"].items()} if
                           "1" in sbs["runs"]["cpp"] else None) + ".")
        p = sbs["serial"]
        out += ["", f"Serial share at -T 1: {p['serial']:.3f} s of {p['wall']:.3f} s "
                f"({100 * p['serial'] / p['wall']:.0f}%): to main() {p['main']:.3f} s "
                "(interpreter and imports), opening the model "
                f"{p['opened'] - p['main']:.3f} s, reading the first rows "
                f"{p['first_piece'] - p['opened']:.3f} s, after the last row "
                f"{p['wall'] - p['scored']:.3f} s; scoring (on the thread) "
                f"{p['scoring']:.3f} s. Opening the model in a process: "
                f"{sbs['open_ms']:.1f} ms (warm page cache). A one-line file, whole command "
                f"at -T {cores()}: {sbs['one_line_s']:.2f} s. P@1/3/5: "
                + "; ".join(f"{t} " + "/".join(f"{v:.2f}" for v in m.values())
                            for t, m in sbs["acc"].items()) + ".", ""]
        lay = recs.get(f"{s['name']}.layouts.json")
        if lay:
            out += [f"Layouts ({s['name']}, predicting at -T {cores()}, median of 3):", "",
                    "| layout | MB on disk | open ms | predict s | peak MB |",
                    "|---|---|---|---|---|"]
            for name in ("mapped", "compact"):
                x = lay[name]
                out.append(f"| {name} | {x['mb']:.0f} | {x['open_ms']:.0f} | "
                           f"{x['predict_s']:.2f} | {x['hwm_mb']:.0f} |")
            if "mapped_tar_zst" in lay:
                z = lay["mapped_tar_zst"]
                out.append(f"| mapped, as a zstd tar (`tar --zstd`) | {z['mb']:.0f} | – | – | "
                           f"– |\n\n(the tar took {z['s']:.1f} s)")
            out.append("")
    lat = recs.get("latency.json")
    if lat:
        out += [f"One document at a time (Bibtex, 50 trees, {lat['n']} documents, k = 5), "
                "milliseconds per document after the first:", "",
                "| through | p50 | p99 | first |", "|---|---|---|---|",
                *(f"| {name} | {lat[key]['p50']:.3f} | {lat[key]['p99']:.3f} | "
                  f"{lat[key]['first']:.1f} |"
                  for name, key in (("streaming xml-predict (a line in, its answer out)",
                                     "stream"), ("API, model.predict of one row", "api"))), ""]
    if not any(r["runs"]["cpp"] for name, r in recs.items() if name.endswith(".sbs.json")):
        out.append(benchlib.CPP_MISSING)
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    benchlib.cli(__doc__, "predict_scaling", add_args, steps, render)
