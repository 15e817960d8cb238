"""Label-popularity baseline: every test point gets the training label frequencies.

    python scripts/popularity_baseline.py TRAIN TEST SCORES [-k 100]

TRAIN and TEST are XC single-file data sets; SCORES is written as an XC score
matrix (top k labels per point). This is the trivial reference row of the
results tables (what any real model must beat), not a model.
"""
import argparse

import numpy as np
import scipy.sparse as sp

from xmlkit.io import read_dataset, write_matrix


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("train")
    ap.add_argument("test")
    ap.add_argument("scores")
    ap.add_argument("-k", type=int, default=100)
    a = ap.parse_args()
    _, Y = read_dataset(a.train)
    Xt, _ = read_dataset(a.test)
    freq = np.asarray(Y.sum(axis=0)).ravel() / Y.shape[0]
    keep = np.sort(np.argsort(-freq, kind="stable")[: a.k])
    n = Xt.shape[0]
    S = sp.csr_matrix((np.tile(freq[keep], n).astype(np.float32), np.tile(keep, n),
                       np.arange(0, n * len(keep) + 1, len(keep))), shape=(n, Y.shape[1]))
    write_matrix(a.scores, S)


if __name__ == "__main__":
    main()
