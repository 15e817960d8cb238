"""FastXML's node solver: how its stopping rules trade work for accuracy.

    python scripts/bench_solver.py [--configs bibtex delicious syn100000]
        [--seeds 0 ... 9] [--syn-seeds 5] [--markdown results/solver.md]
        (and the step options of benchlib.cli)

Each setting of the separator solver (xmlkit._ext.fastxml_separator.NodeSeparator)
grows 50 trees (-m 10 -l 10 -b 1 -c 1) per seed on 2 threads through the
kernel API in-process (10 trees per seed, seeds 0-4, on the synthetic
set of 100k points that bench_scale.py makes), then scores the test set
(P@k, PSP@k with the training set's propensities). Reported per setting: the solver's passes
over the entries of the nodes' problems per tree (entries visited by the
gradient, Hessian and coordinate passes, over nnz(X)), Newton steps per
node, the wall time of growing (not a whole command: see fastxml.md and
scale.md for those), and the means over seeds with standard errors.
"""
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import benchlib
from benchlib import WORK, Step, data_file, load, mean, sd

WORK_S = WORK / "solver"
#: name -> NodeSeparator keywords, each with the number its records are
#: filed under; "C++ rules" is the C++ tool's setting (NodeSeparator's own
#: defaults: tolerance 0.01, 10 Newton steps from zero)
SETTINGS = {
    "C++ rules (tol 0.01, max_newton 10, zero start)": (0, {}),
    "max_newton 3, zero start": (1, {"max_newton": 3}),
    "max_newton 3, warm start (an earlier default)": (2, {"max_newton": 3, "warm": True}),
    "max_newton 10, warm start": (3, {"warm": True}),
    "max_newton 4, max_inner 4, zero start": (4, {"max_newton": 4, "max_inner": 4}),
    "tol 0.03, zero start (the previous default)": (5, {"eps": 0.03}),
    "tol 0.05, zero start": (6, {"eps": 0.05}),
    "tol 0.03, max_newton 3 below 4096 points (default)": (
        7, {"eps": 0.03, "max_newton_small": 3, "small_node": 4096}),
}
#: the sets: (trees per seed, settings measured), by default over seeds 0-9;
#: the synthetic set (bench_scale.py's 100k points) with fewer trees and seeds
CONFIGS = {
    "bibtex": (50, [k for k in SETTINGS if SETTINGS[k][0] != 6]),
    "delicious": (50, [k for k in SETTINGS if SETTINGS[k][0] != 6]),
    "syn100000": (10, [k for k in SETTINGS if SETTINGS[k][0] in (0, 1, 2, 5, 6, 7)]),
}
SYN_SEEDS = 5
COLUMNS = ["P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5"]


def grow_and_score(step):
    from xmlkit.io import read_dataset
    from xmlkit.metrics import inverse_propensity, ranking_metrics
    from xmlkit.models.fastxml import _as_training_csr
    from xmlkit.models.forest import Forest
    from xmlkit._ext.fastxml_partition import NdcgPartition
    from xmlkit._ext.fastxml_separator import NodeSeparator
    from xmlkit._ext.fastxml_tree import TreeGrower
    k = step.kw
    X, Y = read_dataset(k["train"])
    Xt, Yt = read_dataset(k["test"])
    Xg, Yg = _as_training_csr(X, "f", X.shape[1]), _as_training_csr(Y, "l", Y.shape[1])
    idle = queue.SimpleQueue()
    for _ in range(2):
        idle.put(TreeGrower(Xg, Yg, NdcgPartition(True),
                            NodeSeparator(1.0, 1.0, "newglmnet", **SETTINGS[k["setting"]][1]),
                            max_leaf=10, labels_per_leaf=10))

    def grow(t):
        g = idle.get()
        try:
            return g.grow(k["seed"], t)
        finally:
            idle.put(g)
    start = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        trees = list(pool.map(grow, range(k["trees"])))
    seconds = time.perf_counter() - start
    work = [idle.get().solver_work() for _ in range(2)]
    S = Forest(trees, X.shape[1], Y.shape[1], 1.0).predict(Xt, 5)
    import scipy.sparse as sp
    S = sp.csr_matrix((S.data, S.indices, S.indptr), shape=S.shape)
    m = ranking_metrics(Yt, S, ks=(1, 3, 5), inv_prop=inverse_propensity(Y))
    return {"setting": k["setting"], "seed": k["seed"], "grow_s": seconds,
            "passes": sum(w["visits"] for w in work) / k["trees"] / X.nnz,
            "newton": sum(w["newtons"] for w in work) / sum(w["solves"] for w in work),
            **{c: 100 * float(m[c]) for c in COLUMNS}}


def add_args(ap):
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    ap.add_argument("--syn-seeds", type=int, default=SYN_SEEDS,
                    help="seeds 0 .. N-1 on the synthetic set")


def steps(a):
    out = []
    for name in a.configs:
        trees, settings = CONFIGS[name]
        if name.startswith("syn"):
            from bench_scale import data_step
            data, prefix = data_step(int(name[3:]))
            out.append(data)
            train, test = Path(f"{prefix}_train.txt"), Path(f"{prefix}_test.txt")
            seeds, deps = range(a.syn_seeds), [data.target]
        else:
            train, test = data_file(name, "train"), data_file(name, "test")
            seeds, deps = a.seeds, [train, test]
        for setting in settings:
            for seed in seeds:
                out.append(Step(WORK_S / f"{name}_{SETTINGS[setting][0]}_s{seed}.json",
                                grow_and_score, deps, timed=True, setting=setting, seed=seed,
                                trees=trees, train=train, test=test, config=name))
    return out


def render(a, st):
    out = ["FastXML's node solver (-m 10 -l 10 -b 1 -c 1), grown on 2 threads through the "
           "kernel API: 50 trees per seed on Bibtex and Delicious, 10 on the 100k-point "
           "synthetic set (bench_scale.py's); passes: entries of the node problems visited "
           "(gradient, Hessian, coordinate passes) per tree, over nnz(X); grow s: mean wall "
           "seconds of growing a seed's trees; accuracy: mean over seeds (standard error).", "",
           "| set | setting | seeds | passes / tree | Newton steps / node | grow s | "
           + " | ".join(COLUMNS) + " |", "|" + "---|" * (6 + len(COLUMNS))]
    for name in a.configs:
        for setting in CONFIGS[name][1]:
            r = [load(s.target) for s in st if s.action is grow_and_score
                 and s.kw["config"] == name and s.kw["setting"] == setting]
            cells = [f"{mean([x[c] for x in r]):.2f} ({sd([x[c] for x in r]) / len(r) ** 0.5:.2f})"
                     for c in COLUMNS]
            out.append(f"| {name} | {setting} | {len(r)} | {mean([x['passes'] for x in r]):.1f} "
                       f"| {mean([x['newton'] for x in r]):.2f} | "
                       f"{mean([x['grow_s'] for x in r]):.2f} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    benchlib.cli(__doc__, "solver", add_args, steps, render)
