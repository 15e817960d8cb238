"""FastXML at scale, side by side with the C++ tool: the 100k and 1M
synthetic sets (make_synthetic.py, seed 0: N points, N/10 labels, 100k
features, 10k test points), 10 trees, defaults otherwise.

    python scripts/bench_scale.py [--sizes 100000 1000000] [--threads 2]
        [--rounds 3] [--big-rounds 1] [--trees 10] [--cpp-bin DIR]
        [--markdown results/scale.md]  (and the step options of benchlib.cli)

Per size one timed step: `rounds` rounds (sets of 1M points and more:
`--big-rounds`), each the C++ tool's training, then xmlkit's, then both
predictions (alternating, whole commands; see benchlib.side_by_side),
then both score files scored by xml-eval. Without the C++ tool's binaries
(--cpp-bin or $XMLKIT_CPP_BIN) the steps are skipped with a note.
"""
from pathlib import Path

import benchlib
from bench_scaling import generate
from benchlib import HERE, WORK, Step

WORK_S = WORK / "scale"
BIG = 1_000_000


def data_step(n):
    """The step making the synthetic set of n points; its files' prefix."""
    prefix = WORK_S / f"syn{n}"
    return Step(WORK_S / f"syn{n}.data.json", generate, [HERE / "make_synthetic.py"],
                prefix=prefix, n=n, labels=n // 10, features=100000, test_points=10000), prefix


def configs(a):
    out = []
    for n in a.sizes:
        data, prefix = data_step(n)
        out.append((data, {
            "name": f"syn{n}", "label": f"synthetic {n:,} points", "set": None,
            "train_file": Path(f"{prefix}_train.txt"), "test_file": Path(f"{prefix}_test.txt"),
            "deps": [data.target], "train_args": ["-t", a.trees],
            "cpp_train": ["fastXML_train", "$X", "$Y", "$model", "-T", "$T", "-s", "0", "-t",
                          a.trees, "-b", "1.0", "-c", "1.0", "-m", "10", "-l", "10", "-q", "1"],
            "cpp_predict": ["fastXML_predict", "$test_X", "$scores", "$model", "-T", "$T",
                            "-q", "1"],
            "rounds": a.big_rounds if n >= BIG else a.rounds}))
    return out


def add_args(ap):
    ap.add_argument("--sizes", nargs="+", type=int, default=[100000, 1000000])
    ap.add_argument("--threads", nargs="+", type=int, default=[2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--big-rounds", type=int, default=1,
                    help=f"rounds for sets of {BIG:,} points and more")
    ap.add_argument("--trees", type=int, default=10)


def floor_step():
    return Step(WORK_S / "import_floor.json", benchlib.import_floors, [])


def steps(a):
    out = []
    for data, cfg in configs(a):
        out += [data, *benchlib.side_by_side_steps(cfg, WORK_S, a.threads, cfg["rounds"])]
    return out + [floor_step()]


def render(a, st):
    cfgs = [c for _, c in configs(a)]
    sbs = [{**benchlib.load(s.target), "config": s.kw["tag"].rsplit("_T", 1)[0]}
           for s in st if s.action is benchlib.side_by_side]
    return (f"FastXML, {a.trees} trees, defaults otherwise, on synthetic sets "
            "(make_synthetic.py, seed 0; N points, N/10 labels, 100000 features, 10000 "
            "test points).\n\n" + benchlib.side_by_side_report(
                cfgs, sbs, benchlib.load(floor_step().target)
                if floor_step().target.exists() else None))


if __name__ == "__main__":
    benchlib.cli(__doc__, "scale", add_args, steps, render)
