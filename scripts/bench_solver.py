"""FastXML's node solver: how its stopping rules trade work for accuracy.

    python scripts/bench_solver.py [--configs bibtex delicious] [--seeds 0 ... 9]
        [--markdown results/solver.md]  (and the step options of benchlib.cli)

Each setting of the separator solver (xmlkit._ext.fastxml_tree.NodeSeparator)
grows 50 trees (-m 10 -l 10 -b 1 -c 1) per seed on 2 threads through the
kernel API in-process, then scores the test set (P@k, PSP@k with the
training set's propensities). Reported per setting: the solver's passes
over the entries of the nodes' problems per tree (entries visited by the
gradient, Hessian and coordinate passes, over nnz(X)), Newton steps per
node, the wall time of growing (not a whole command: see fastxml.md and
scale.md for those), and the means over seeds with standard errors.
"""
import queue
import time
from concurrent.futures import ThreadPoolExecutor

import benchlib
from benchlib import WORK, Step, data_file, load, mean, sd

WORK_S = WORK / "solver"
#: name -> NodeSeparator keywords; "C++ rules" is the C++ tool's setting
SETTINGS = {
    "C++ rules (max_newton 10, zero start)": {"max_newton": 10},
    "max_newton 3, zero start": {"max_newton": 3},
    "max_newton 3, warm start (default)": {"max_newton": 3, "warm": True},
    "max_newton 10, warm start": {"max_newton": 10, "warm": True},
    "max_newton 4, max_inner 4, zero start": {"max_newton": 4, "max_inner": 4},
    "tolerance 0.03, zero start": {"max_newton": 10, "eps": 0.03},
}
COLUMNS = ["P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5"]


def grow_and_score(step):
    from xmlkit.io import read_dataset
    from xmlkit.metrics import inverse_propensity, ranking_metrics
    from xmlkit.models.fastxml import _as_training_csr
    from xmlkit.models.forest import PackedForest
    from xmlkit._ext.fastxml_tree import NdcgPartition, NodeSeparator, TreeGrower
    k = step.kw
    X, Y = read_dataset(k["train"])
    Xt, Yt = read_dataset(k["test"])
    Xg, Yg = _as_training_csr(X, "f", X.shape[1]), _as_training_csr(Y, "l", Y.shape[1])
    idle = queue.SimpleQueue()
    for _ in range(2):
        idle.put(TreeGrower(Xg, Yg, NdcgPartition(True),
                            NodeSeparator(1.0, 1.0, "newglmnet", **SETTINGS[k["setting"]]),
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
    S = PackedForest(trees, X.shape[1], Y.shape[1], 1.0).predict(Xt, 5)
    import scipy.sparse as sp
    S = sp.csr_matrix((S.data, S.indices, S.indptr), shape=S.shape)
    m = ranking_metrics(Yt, S, ks=(1, 3, 5), inv_prop=inverse_propensity(Y))
    return {"setting": k["setting"], "seed": k["seed"], "grow_s": seconds,
            "passes": sum(w["visits"] for w in work) / k["trees"] / X.nnz,
            "newton": sum(w["newtons"] for w in work) / sum(w["solves"] for w in work),
            **{c: 100 * float(m[c]) for c in COLUMNS}}


def add_args(ap):
    ap.add_argument("--configs", nargs="+", default=["bibtex", "delicious"])
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    ap.add_argument("--trees", type=int, default=50)


def steps(a):
    out = []
    for name in a.configs:
        train, test = data_file(name, "train"), data_file(name, "test")
        for i, setting in enumerate(SETTINGS):
            for seed in a.seeds:
                out.append(Step(WORK_S / f"{name}_{i}_s{seed}.json", grow_and_score,
                                [train, test], timed=True, setting=setting, seed=seed,
                                trees=a.trees, train=train, test=test, config=name))
    return out


def render(a, st):
    out = ["FastXML's node solver, 50 trees (-m 10 -l 10 -b 1 -c 1) per seed, grown on 2 "
           "threads through the kernel API; passes: entries of the node problems visited "
           "(gradient, Hessian, coordinate passes) per tree, over nnz(X); grow s: mean wall "
           "seconds of growing the 50 trees; accuracy: mean over seeds (standard error).", "",
           "| set | setting | seeds | passes / tree | Newton steps / node | grow s | "
           + " | ".join(COLUMNS) + " |", "|" + "---|" * (6 + len(COLUMNS))]
    for name in a.configs:
        for setting in SETTINGS:
            r = [load(s.target) for s in st if s.kw["config"] == name
                 and s.kw["setting"] == setting]
            cells = [f"{mean([x[c] for x in r]):.2f} ({sd([x[c] for x in r]) / len(r) ** 0.5:.2f})"
                     for c in COLUMNS]
            out.append(f"| {name} | {setting} | {len(r)} | {mean([x['passes'] for x in r]):.1f} "
                       f"| {mean([x['newton'] for x in r]):.2f} | "
                       f"{mean([x['grow_s'] for x in r]):.2f} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    benchlib.cli(__doc__, "solver", add_args, steps, render)
