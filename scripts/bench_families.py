"""Every family with its defaults on every data set, next to FastXML.

    python scripts/bench_families.py [--seeds 0 1] [--out results/families.md]

Data: every set in ../shared/data (Bibtex, Delicious, Yeast, Corel5k) and two
synthetic ones made here with fixed seeds: a dense, non-negative,
unnormalised set (72 features, 6 labels, emotions-like) and a many-label
power-law set (scripts/make_synthetic.py: 10k points, 10k features, 2000
labels). Each family is fitted through the Python API with its defaults
(threads 2 for the tree families) for each seed; the table gives the mean
P@1/3/5 over the seeds and the mean training time, so that a family that
fails on data unlike the sets it was tuned on shows up as a gap to FastXML.
"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import benchlib
import xmlkit
from xmlkit.io import read_dataset
from xmlkit.metrics import ranking_metrics

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
FAMILIES = [("FastXML", xmlkit.FastXML, {"threads": 2}),
            ("PfastreXML", xmlkit.PfastreXML, {"threads": 2}),
            ("LdSM", xmlkit.LdSM, {"threads": 2}),
            ("Embed", xmlkit.Embed, {}),
            ("Linear", xmlkit.Linear, {})]


def dense_set(seed=0, n=900, d=72, L=6, scale=10.0):
    """Dense non-negative features: a common profile plus one per label."""
    rng = np.random.default_rng(seed)
    mu, base = rng.gamma(2.0, 1.0, (L, d)), rng.gamma(2.0, 1.0, d)
    Y = (rng.random((n, L)) < 0.3).astype(np.float32)
    Y[Y.sum(1) == 0, 0] = 1
    X = np.abs(base + Y @ mu + rng.normal(0, 1.5, (n, d))) * scale
    X, Y = sp.csr_matrix(X.astype(np.float32)), sp.csr_matrix(Y)
    cut = 2 * n // 3
    return X[:cut], Y[:cut], X[cut:], Y[cut:]


def many_label_set(work):
    prefix = Path(work) / "many"
    subprocess.run([sys.executable, str(HERE / "make_synthetic.py"), str(prefix),
                    "--points", "10000", "--labels", "2000", "--features", "10000",
                    "--test-points", "2000", "--seed", "0"], check=True,
                   stdout=subprocess.DEVNULL)
    return read_dataset(f"{prefix}_train.txt") + read_dataset(f"{prefix}_test.txt")


def data_sets(work):
    for name in ("bibtex", "delicious", "yeast", "corel5k"):
        folder = DATA / name
        if not folder.is_dir():
            print(f"{folder}: missing, skipped", file=sys.stderr)
            continue
        yield name, read_dataset(folder / f"{name}_train.txt.xz") + \
            read_dataset(folder / f"{name}_test.txt.xz")
    yield "synthetic dense (72 features, 6 labels)", dense_set()
    yield "synthetic many-label (2000 labels)", many_label_set(work)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "families.md")
    args = ap.parse_args()
    lines = ["Every family with its defaults (trees: 2 threads), mean over seeds "
             f"{args.seeds}: P@1/3/5 in percent, training seconds. Made by "
             "`python scripts/bench_families.py`.", ""]
    with tempfile.TemporaryDirectory() as work:
        for name, (X, Y, Xt, Yt) in data_sets(work):
            lines += [f"### {name} (N {X.shape[0]}, D {X.shape[1]}, L {Y.shape[1]})", "",
                      "| family | P@1/3/5 | vs FastXML P@1 | train s |", "|---|---|---|---|"]
            base = None
            for label, cls, kw in FAMILIES:
                scores, seconds = [], []
                for seed in args.seeds:
                    start = time.perf_counter()
                    model = cls(seed=seed, **kw).fit(X, Y)
                    seconds.append(time.perf_counter() - start)
                    r = ranking_metrics(Yt, model.predict(Xt, k=5), (1, 3, 5))
                    scores.append([100 * r[f"P@{k}"] for k in (1, 3, 5)])
                p = np.mean(scores, axis=0)
                base = p[0] if base is None else base
                lines.append(f"| {label} | {p[0]:.2f}/{p[1]:.2f}/{p[2]:.2f} | "
                             f"{p[0] - base:+.2f} | {np.mean(seconds):.1f} |")
                print(f"{name} {label}: P@1 {p[0]:.2f} ({np.mean(seconds):.1f} s)",
                      file=sys.stderr, flush=True)
            lines.append("")
    benchlib.save("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
