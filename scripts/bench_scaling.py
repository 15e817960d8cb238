"""FastXML scaling: train and predict wall time, peak memory and model size
over training-set sizes, on synthetic power-law data (make_synthetic.py),
with the curves as a PNG plot.

    python scripts/bench_scaling.py [--sizes 10000 30000 100000 300000 1000000]
        [--labels-ratio 10] [--features 100000] [--test-points 10000]
        [--trees 10] [--threads 2] [--markdown results/scaling.md] [--plot results/scaling.png]
        (and the step options of benchlib.cli)

Size N has N/10 labels (1M points: 100k labels), 100k features and a fixed
test set of 10,000 points from the same generator (seed 0). Each size is
three steps (records in work/scaling/): generate the data, `xml-train -t 10
-T 2` (timed, alone), `xml-predict -T 2` + `xml-eval` (timed, alone). Times
are whole-command wall seconds. Memory: the peak of the largest process and
the sampled sum over the process tree (see benchlib.py); FastXML grows its
trees in threads of one process, so the two differ only by sampling. The plot needs
matplotlib (pip install .[bench]); without it the table is still written.
"""
import math
from pathlib import Path

import benchlib
from benchlib import HERE, WORK, Step, load, run_rss

WORK_S = WORK / "scaling"


def generate_commands(step):
    k = step.kw
    return [["python", HERE / "make_synthetic.py", k["prefix"], "--points", k["n"], "--labels",
             k["labels"], "--features", k["features"], "--test-points", k["test_points"],
             "--seed", 0]]


def generate(step):
    r = run_rss(benchlib.command(generate_commands(step)[0]))
    return {"generate_s": r["wall"], "generate_rss": r["rss_mb"]}


generate.commands = generate_commands


def sizes(a):
    return [(n, max(1, n // a.labels_ratio)) for n in a.sizes]


def steps(a):
    out = []
    for n, L in sizes(a):
        prefix = WORK_S / f"syn{n}"
        data = Step(WORK_S / f"syn{n}.data.json", generate, [HERE / "make_synthetic.py"],
                    prefix=prefix, n=n, labels=L, features=a.features,
                    test_points=a.test_points)
        cfg = {"name": f"syn{n}", "label": f"{n}", "set": None,
               "train_file": Path(f"{prefix}_train.txt"), "test_file": Path(f"{prefix}_test.txt"),
               "deps": [data.target], "train_args": ["-t", a.trees]}
        out += [data, *benchlib.model_steps(cfg, WORK_S, [0], [0], [a.threads])]
    return out


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install .[bench]): no plot written."
    from xmlkit.atomic import atomic_path
    n = [r["n"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.loglog(n, [r["train_s"] for r in rows], "o-", label="train (10 trees, 2 threads)")
    ax1.loglog(n, [r["predict_s"] for r in rows], "s-", label="predict 10k points")
    ref = rows[0]["train_s"]
    ax1.loglog(n, [ref * (x / n[0]) * math.log(x) / math.log(n[0]) for x in n], ":",
               color="gray", label="N log N from the smallest")
    ax1.set_xlabel("training points (labels = N/10)")
    ax1.set_ylabel("wall seconds")
    ax1.legend(fontsize=8)
    ax1.grid(True, which="both", alpha=0.3)
    ax2.loglog(n, [r["train_tree_rss"] for r in rows], "o-",
               label="peak RSS, xml-train (sum over its processes)")
    ax2.loglog(n, [r["train_rss"] for r in rows], "o--",
               label="peak RSS, xml-train (largest process)")
    ax2.loglog(n, [r["predict_rss"] for r in rows], "s-", label="peak RSS, xml-predict")
    ax2.loglog(n, [r["model_mb"] for r in rows], "^-", label="model folder")
    ax2.set_xlabel("training points (labels = N/10)")
    ax2.set_ylabel("MB")
    ax2.legend(fontsize=8)
    ax2.grid(True, which="both", alpha=0.3)
    fig.suptitle("xmlkit FastXML on synthetic power-law data (2 cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return f"Plot: {path.name}."


def render(a, st):
    gen = [load(s.target) for s in st if s.action is generate]
    ev = [load(s.target) for s in st if s.action is benchlib.predict_eval]
    rows = [{"n": n, "labels": L, **g, **e} for (n, L), g, e in zip(sizes(a), gen, ev)]
    out = [f"FastXML ({a.trees} trees, defaults otherwise, -T {a.threads}) on synthetic data "
           f"(make_synthetic.py, seed 0): N training points, N/{a.labels_ratio} labels with "
           f"power-law frequencies, {a.features} features, ~5 labels and ~38 non-zero "
           f"features per point; {a.test_points} test points. Wall seconds of the whole "
           "command; peak RSS train: largest process / sum over the process tree (the trees "
           "grow in threads of one process: the two differ only by sampling).", "",
           "| N | labels | train s | train µs / point / tree | peak RSS train MB | predict s "
           "| predict ms / point | peak RSS predict MB | model MB | P@1/3/5 |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['n']:,} | {r['labels']:,} | {r['train_s']:.1f} | "
                   f"{1e6 * r['train_s'] / r['n'] / a.trees:.1f} | {r['train_rss']:.0f} / "
                   f"{r['train_tree_rss']:.0f} | "
                   f"{r['predict_s']:.1f} | {1e3 * r['predict_s'] / a.test_points:.3f} | "
                   f"{r['predict_rss']:.0f} | {r['model_mb']:.0f} | "
                   f"{r['P@1']:.2f}/{r['P@3']:.2f}/{r['P@5']:.2f} |")
    if a.markdown:
        out += ["", plot(rows, a.plot)]
    return "\n".join(out) + "\n"


def add_args(ap):
    ap.add_argument("--sizes", nargs="+", type=int,
                    default=[10_000, 30_000, 100_000, 300_000, 1_000_000])
    ap.add_argument("--labels-ratio", type=int, default=10, help="labels = points / this")
    ap.add_argument("--features", type=int, default=100_000)
    ap.add_argument("--test-points", type=int, default=10_000)
    ap.add_argument("--trees", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plot", type=Path, default=HERE / "results" / "scaling.png")


if __name__ == "__main__":
    benchlib.cli(__doc__, "scaling", add_args, steps, render)
