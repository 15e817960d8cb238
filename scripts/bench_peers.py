"""xmlkit against the libraries a user would pick instead, on the same files
in one run: P@1/3/5, train and predict wall time, peak RSS and model size.

    python scripts/bench_peers.py [--sets bibtex delicious] [--models ...] [--threads 2]
        [--markdown results/peers.md] (and the step options of benchlib.cli)

Models: xmlkit FastXML, LdSM, Linear and Parabel (their defaults, on the
rows as read) and Parabel's wide trees (Bonsai: arity 100, unbalanced, depth
3); napkinXC PLT (napkinxc, its defaults), omikuji Parabel (omikuji, its
defaults) and Bonsai (its defaults with cluster k 100, unbalanced, max depth
3), PECOS XR-Linear (libpecos, its defaults: PIFA label features,
hierarchical k-means tree), LibMultiLabel's linear one-vs-rest (its default
liblinear options) and a scikit-learn one-vs-rest linear SVM (LinearSVC,
C = 1, the liblinear L2-loss SVC of anchors.md) as the baseline, on rows
L2-normalised once before (as for the peers' figures in
../shared/specs/anchors.md). napkinXC, omikuji and scikit-learn come from
`pip install .[bench]`; PECOS and LibMultiLabel cannot share xmlkit's
environment (numpy < 2, and a `liblinear` module of their own) and run in
virtual environments of their own, made by `make -C scripts peer-venvs`
(make_peer_venvs.sh; in $XMLKIT_PEER_VENVS, default work/venvs), through
peer_worker.py. A peer that is not installed is skipped and the table says
so. Everything uses 2 threads (LibMultiLabel picks its own: one per core).

Wide trees, repeated: omikuji cannot be seeded, so one run of it is one
draw (its manpages P@1 moved by 1.4 between tables). On the sets in
REPEATED, a step of its own runs omikuji-Bonsai RUNS times and xmlkit's
wide trees with seeds 0 .. RUNS - 1 (each a worker process, as below) and
the report compares the means (the issue's bar: xmlkit's P@1 at least
omikuji-Bonsai's - 0.3).

Each (set, model) is a timed step (record in work/peers/) that runs the model
in its own process (`bench_peers.py --worker MODEL SET`): the data are read
first (not timed; omikuji's API trains from a file path, so its train time
includes reading the file), then fit and predict (top 5) are timed through
each library's Python API. Peak RSS: after fit, and of the whole process
(wait4). Model size: the saved folder (xmlkit: its model folder; napkinXC:
its output folder; omikuji: Model.save; scikit-learn: the pickle, which is
how it saves).
"""
import json
import sys
import tempfile
from pathlib import Path

import benchlib
from benchlib import WORK, Step, data_file, folder_mb, load, run_rss
from peer_worker import timed

MODELS = ["xmlkit-fastxml", "xmlkit-ldsm", "xmlkit-linear", "xmlkit-parabel", "xmlkit-bonsai",
          "napkinxc-plt", "omikuji-parabel", "omikuji-bonsai", "pecos-xrlinear",
          "libmultilabel-1vsrest", "sklearn-ovr-svm"]
NEEDS = {"napkinxc-plt": "napkinxc", "omikuji-parabel": "omikuji", "omikuji-bonsai": "omikuji",
         "sklearn-ovr-svm": "sklearn"}
# the wide trees of Bonsai (Khandelwal et al. 2019) in each library's terms
BONSAI = {"xmlkit": {"arity": 100, "balanced": False, "max_depth": 3},
          "omikuji": {"cluster_k": 100, "cluster_balanced": False, "max_depth": 3}}
# the wide trees compared as means over runs (omikuji cannot be seeded)
REPEATED, RUNS, BONSAI_MARGIN = ("manpages", "debtags"), 10, 0.3
# peers in a virtual environment of their own (make_peer_venvs.sh), by its name
VENVS = {"pecos-xrlinear": "pecos", "libmultilabel-1vsrest": "libmultilabel"}


def top5_matrix(rows, shape):
    """Ranked label lists (best first) as a score matrix for ranking_metrics."""
    import numpy as np
    import scipy.sparse as sp
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    idx = np.fromiter((l for r in rows for l in r), dtype=np.int64, count=indptr[-1])
    val = np.fromiter((5 - i for r in rows for i in range(len(r))), dtype=np.float64,
                      count=indptr[-1])
    return sp.csr_matrix((val, idx, indptr), shape=shape)


def run_xmlkit(cls, X, Y, Xt, tmp, threads, **params):
    m = cls(**params, **({"threads": threads} if "threads" in cls.param_defaults() else {}))
    out = timed(lambda: m.fit(X, Y), lambda: m.predict(Xt, k=5))
    m.save(tmp / "model")
    return (*out, folder_mb(tmp / "model"))


def run_napkinxc(X, Y, Xt, tmp, threads):
    from napkinxc.models import PLT
    labels = [Y.indices[Y.indptr[i]:Y.indptr[i + 1]].tolist() for i in range(Y.shape[0])]
    m = PLT(str(tmp / "plt"), threads=threads, seed=0)
    pred, *times = timed(lambda: m.fit(X, labels), lambda: m.predict(Xt, top_k=5))
    return (top5_matrix(pred, (Xt.shape[0], Y.shape[1])), *times, folder_mb(tmp / "plt"))


def run_omikuji(X, Y, Xt, tmp, threads, **hyper):
    import omikuji
    from xmlkit.io import write_dataset
    train_path = tmp / "train_unit_rows.txt"   # omikuji trains from a file
    write_dataset(train_path, X, Y)
    model = []
    h = omikuji.Model.default_hyper_param()
    for key, value in hyper.items():
        setattr(h, key, value)

    def fit():
        model.append(omikuji.Model.train_on_data(str(train_path), h, n_threads=threads))

    def predict():
        model[0].init_prediction_thread_pool(threads)
        pred = []
        for i in range(Xt.shape[0]):  # omikuji predicts one example per call
            s, e = Xt.indptr[i], Xt.indptr[i + 1]
            pairs = list(zip(Xt.indices[s:e].tolist(), Xt.data[s:e].tolist()))
            pred.append([label for label, _ in model[0].predict(pairs, top_k=5)])
        return pred
    pred, *times = timed(fit, predict)
    model[0].save(str(tmp / "omikuji"))
    return (top5_matrix(pred, (Xt.shape[0], Y.shape[1])), *times, folder_mb(tmp / "omikuji"))


def run_sklearn(X, Y, Xt, tmp, threads):
    import pickle

    import numpy as np
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.svm import LinearSVC
    m = OneVsRestClassifier(LinearSVC(C=1.0, dual=True), n_jobs=threads)
    top, *times = timed(lambda: m.fit(X, Y), lambda: np.argsort(
        -m.decision_function(Xt), axis=1, kind="stable")[:, :5])
    (tmp / "model.pkl").write_bytes(pickle.dumps(m))
    return (top5_matrix(top.tolist(), (Xt.shape[0], Y.shape[1])), *times,
            folder_mb(tmp / "model.pkl"))


def worker(model, name, threads, seed=None):
    """Run one model on one set in this process; print its record as JSON
    (seed: xmlkit's, when given; the peers' own otherwise)."""
    import xmlkit
    from xmlkit.io import read_dataset
    from xmlkit.metrics import ranking_metrics
    train, test = data_file(name, "train"), data_file(name, "test")
    X, Y = read_dataset(train)
    Xt, Yt = read_dataset(test)
    if not model.startswith("xmlkit-"):
        X, Xt = unit(X), unit(Xt)   # as for the peers' figures in anchors.md
    with tempfile.TemporaryDirectory(prefix="xmlkit_peers_") as tmp:
        tmp = Path(tmp)
        if model.startswith("xmlkit-"):
            cls = {"fastxml": xmlkit.FastXML, "ldsm": xmlkit.LdSM, "linear": xmlkit.Linear,
                   "parabel": xmlkit.Parabel, "bonsai": xmlkit.Parabel}[model[len("xmlkit-"):]]
            out = run_xmlkit(cls, X, Y, Xt, tmp, threads,
                             **(BONSAI["xmlkit"] if model == "xmlkit-bonsai" else {}),
                             **({} if seed is None else {"seed": seed}))
        elif model == "napkinxc-plt":
            out = run_napkinxc(X, Y, Xt, tmp, threads)
        elif model.startswith("omikuji-"):
            out = run_omikuji(X, Y, Xt, tmp, threads,
                              **(BONSAI["omikuji"] if model == "omikuji-bonsai" else {}))
        else:
            out = run_sklearn(X, Y, Xt, tmp, threads)
    S, fit_s, fit_rss, predict_s, model_mb = out
    r = ranking_metrics(Yt, S, (1, 3, 5))
    print(json.dumps({"train_s": fit_s, "train_rss": fit_rss, "predict_s": predict_s,
                      "model_mb": model_mb, **{k: 100 * v for k, v in r.items()}}))


def unit(X):
    from xmlkit.csr import as_rows, unit_rows
    return unit_rows(as_rows(X)).to_scipy()


def installed(module):
    import importlib.util
    return importlib.util.find_spec(module) is not None


def venv_python(model):
    """The Python of `model`'s own virtual environment (VENVS)."""
    import os
    venvs = Path(os.environ.get("XMLKIT_PEER_VENVS") or WORK / "venvs")
    return venvs / VENVS[model] / "bin" / "python"


def run_in_venv(step):
    """A VENVS peer: the rows written for it (unit rows, as for every peer),
    peer_worker.py run by its own Python, its top 5 scored here."""
    import numpy as np
    import scipy.sparse as sp
    from xmlkit.io import read_dataset
    from xmlkit.metrics import ranking_metrics
    k = step.kw
    python = venv_python(k["model"])
    if not python.exists():
        return {"skipped": f"no virtual environment at {python} (make -C scripts peer-venvs)"}
    X, Y = read_dataset(data_file(k["set"], "train"))
    Xt, Yt = read_dataset(data_file(k["set"], "test"))
    with tempfile.TemporaryDirectory(prefix="xmlkit_peers_") as tmp:
        tmp = Path(tmp)
        for name, M in (("X", unit(X)), ("Y", Y), ("Xt", unit(Xt))):
            sp.save_npz(tmp / f"{name}.npz", sp.csr_matrix(M))
        r = run_rss([python, Path(__file__).resolve().with_name("peer_worker.py"), k["model"],
                     tmp, k["threads"]])
        top = np.load(tmp / "top.npy")
    record = worker_record(r)
    S = top5_matrix([[l for l in row if l >= 0] for row in top.tolist()], Yt.shape)
    metrics = ranking_metrics(Yt, S, (1, 3, 5))
    return {**record, "process_rss": r["rss_mb"], **{m: 100 * v for m, v in metrics.items()}}


def run(step):
    k = step.kw
    if k["model"] in VENVS:
        return run_in_venv(step)
    need = NEEDS.get(k["model"])
    if need and not installed(need):
        return {"skipped": f"{need} is not installed (pip install .[bench])"}
    r = run_rss([sys.executable, Path(__file__).resolve(), "--worker", k["model"], k["set"],
                 k["threads"]])
    return {**worker_record(r), "process_rss": r["rss_mb"], "version": version(need)}


def worker_record(r):
    """A worker's record: the last line of its output (run_rss's result), as
    JSON (a library may print to stdout too, before it)."""
    return json.loads(r["stdout"].strip().splitlines()[-1])


def run_repeated(step):
    """The wide trees on one set, RUNS times each: omikuji-Bonsai (unseeded:
    each run a draw) and xmlkit-bonsai with seeds 0 .. RUNS - 1, alternately,
    each in a worker process; per run P@1/3/5 and fit seconds."""
    k = step.kw
    if not installed("omikuji"):
        return {"skipped": "omikuji is not installed (pip install .[bench])"}
    runs = {"xmlkit-bonsai": [], "omikuji-bonsai": []}
    for i in range(k["runs"]):
        for model in runs:
            r = run_rss([sys.executable, Path(__file__).resolve(), "--worker", model, k["set"],
                         k["threads"], i])
            rec = worker_record(r)
            runs[model].append({m: rec[m] for m in ("P@1", "P@3", "P@5", "train_s")})
    return {"runs": runs, "version": version("omikuji")}


def version(module):
    if not module:
        import xmlkit
        return xmlkit.__version__
    from importlib.metadata import version as v
    return v({"sklearn": "scikit-learn"}.get(module, module))


def steps(a):
    return [*(Step(WORK / "peers" / f"{name}_{model}.json", run,
                   [data_file(name, "train"), data_file(name, "test")], timed=True,
                   model=model, set=name, threads=a.threads)
              for name in a.sets for model in a.models),
            *(Step(WORK / "peers" / f"{name}_bonsai_repeated.json", run_repeated,
                   [data_file(name, "train"), data_file(name, "test")], timed=True,
                   set=name, threads=a.threads, runs=RUNS)
              for name in a.sets if name in REPEATED
              and {"xmlkit-bonsai", "omikuji-bonsai"} <= set(a.models))]


def repeated_report(st):
    """The wide trees' means over runs (run_repeated), or nothing."""
    from benchlib import mean, sd
    out = []
    for s in st:
        r = load(s.target)
        if "skipped" in r:
            out.append(f"| {s.kw['set']} | skipped: {r['skipped']} | | | | |")
            continue
        x, o = r["runs"]["xmlkit-bonsai"], r["runs"]["omikuji-bonsai"]

        def cell(runs):
            means = " / ".join(f"{mean([u[m] for u in runs]):.2f}" for m in ("P@1", "P@3", "P@5"))
            fit = mean([u["train_s"] for u in runs])
            return f"{means} ({sd([u['P@1'] for u in runs]):.2f}; {fit:.1f} s)"
        diff = mean([u["P@1"] for u in x]) - mean([u["P@1"] for u in o])
        out.append(f"| {s.kw['set']} | {len(x)} / {len(o)} | {cell(x)} | {cell(o)} | "
                   f"{diff:+.2f} | {'yes' if diff >= -BONSAI_MARGIN else 'no'} |")
    if not out:
        return []
    return ["", "Wide trees, repeated: xmlkit-bonsai with seeds 0 .. n − 1 against "
            "omikuji-bonsai run n times (it cannot be seeded: each run is a draw), "
            f"alternately, {st[0].kw['threads']} threads, the settings above; means of "
            "P@1 / P@3 / P@5 (the sd of P@1; the mean fit seconds); the difference of the "
            f"P@1 means, and whether xmlkit's is at least omikuji's − {BONSAI_MARGIN}.", "",
            "| data | runs (xmlkit / omikuji) | xmlkit-bonsai | omikuji-bonsai | P@1 "
            f"difference | ≥ omikuji − {BONSAI_MARGIN} |", "|---|---|---|---|---|---|", *out]


def render(a, st):
    out = [f"Peers on the XC splits, {a.threads} threads, each library's defaults (xmlkit: "
           "FastXML 50 trees, LdSM 6 trees, Linear elastic net with its auto epochs, Parabel 3 "
           "trees; napkinXC PLT; omikuji Parabel; PECOS XR-Linear; LibMultiLabel linear "
           "one-vs-rest; scikit-learn OneVsRest LinearSVC C = 1), and Bonsai's wide trees "
           "(xmlkit-bonsai: Parabel --arity 100 --unbalanced --max-depth 3; omikuji-bonsai: "
           "cluster k 100, unbalanced, max depth 3). Train / predict: wall "
           "seconds of fit / predict (top 5) through the Python API, reading the data "
           "excluded (except omikuji, which trains from a file); peers on unit rows. "
           "Peak RSS: after fit / "
           "whole process.", "",
           "| data | model | version | P@1 | P@3 | P@5 | train s | predict s | peak RSS MB "
           "(fit / process) | model MB |", "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    rep = [s for s in st if "runs" in s.kw]
    for s in (s for s in st if "runs" not in s.kw):
        r = load(s.target)
        name, model = s.kw["set"], s.kw["model"]
        if "skipped" in r:
            out.append(f"| {name} | {model} | – | skipped: {r['skipped']} | | | | | | |")
            notes.append(f"{model}: {r['skipped']}")
            continue
        out.append(f"| {name} | {model} | {r['version']} | {r['P@1']:.2f} | {r['P@3']:.2f} | "
                   f"{r['P@5']:.2f} | {r['train_s']:.1f} | {r['predict_s']:.2f} | "
                   f"{r['train_rss']:.0f} / {r['process_rss']:.0f} | {r['model_mb']:.1f} |")
    if notes:
        out += ["", "Skipped (not faked): " + "; ".join(sorted(set(notes))) + "."]
    out += repeated_report(rep)
    return "\n".join(out) + "\n"


def add_args(ap):
    ap.add_argument("--sets", nargs="+", default=["bibtex", "delicious", "manpages", "debtags"])
    ap.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    ap.add_argument("--threads", type=int, default=2)


if __name__ == "__main__":
    if len(sys.argv) in (5, 6) and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]),
               int(sys.argv[5]) if len(sys.argv) == 6 else None)
    else:
        benchlib.cli(__doc__, "peers", add_args, steps, render)
