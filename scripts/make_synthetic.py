"""Synthetic extreme multi-label data in the XC format, for scaling runs.

    python scripts/make_synthetic.py OUT_PREFIX --points 100000 --labels 10000
        [--features 100000] [--test-points N] [--label-exponent 1.0] [--labels-per-point 5]
        [--feature-exponent 1.0] [--label-features 15] [--features-per-label 6]
        [--noise-features 20] [--tfidf] [--seed 0]

writes OUT_PREFIX_train.txt and OUT_PREFIX_test.txt (header ``N D L``; lines
``l1,l2,... f:v f:v ...``, 0-based). The generative model:

- label frequencies follow a power law: label of rank r is drawn with
  probability proportional to r^-label_exponent (ids shuffled by the seed);
  a point has 1 + Poisson(labels_per_point - 1) distinct labels;
- features are words of a power-law vocabulary (rank r ~ r^-feature_exponent);
  each label owns `label_features` words drawn from that vocabulary, and a
  point draws `features_per_label` words from each of its labels' sets plus
  `noise_features` background words from the whole vocabulary; a feature's
  value is its count in the point (a bag of words). So features depend on
  the labels, tail labels have their own words, and frequent words are shared.
- with --tfidf the counts become tf-idf values as text pipelines make them:
  (1 + ln count) * (ln((1 + N) / (1 + df)) + 1), each row scaled to unit
  length (df over the training points), for look-alikes of tf-idf text sets.

Needs xmlkit installed (pip install .). Everything is vectorised (no Python
loop over points); 1M points x 100k labels take about 30 s and 3.5 GB. Same
options and seed, same files.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

from xmlkit.csr import Rows
from xmlkit.io import write_dataset


def power_law_sampler(n, exponent, rng, shuffle=True):
    """A function drawing `size` ids in [0, n) with P(rank r) ~ r^-exponent."""
    cdf = np.cumsum(np.arange(1, n + 1, dtype=np.float64) ** -exponent)
    cdf /= cdf[-1]
    ids = rng.permutation(n).astype(np.int64) if shuffle else np.arange(n, dtype=np.int64)

    def draw(size):
        r = np.searchsorted(cdf, rng.random(size), side="right")
        return ids[np.minimum(r, n - 1)]
    return draw


def csr_from_pairs(rows, cols, n_rows, n_cols, counts):
    """CSR of (row, col) pairs: duplicates merged (summed when `counts`, else 1)."""
    key = rows.astype(np.int64) * n_cols + cols
    key, mult = np.unique(key, return_counts=True)
    r = key // n_cols
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=n_rows), out=indptr[1:])
    data = mult.astype(np.float32) if counts else np.ones(len(key), dtype=np.float32)
    return Rows(indptr, (key % n_cols).astype(np.int32), data, (n_rows, n_cols))


def generate(n, L, D, a):
    rng = np.random.default_rng(a.seed)
    draw_label = power_law_sampler(L, a.label_exponent, rng)
    draw_word = power_law_sampler(D, a.feature_exponent, rng)
    label_words = draw_word(L * a.label_features).reshape(L, a.label_features)

    k = 1 + rng.poisson(max(0.0, a.labels_per_point - 1), size=n)
    k = np.minimum(k, L)
    y_rows = np.repeat(np.arange(n, dtype=np.int64), k)
    Y = csr_from_pairs(y_rows, draw_label(len(y_rows)), n, L, counts=False)

    # words of each (point, label) pair, then background words
    pair_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(Y.indptr))
    pair_labels = Y.indices.astype(np.int64)
    m = a.features_per_label
    pick = rng.integers(0, a.label_features, size=(len(pair_labels), m))
    words = label_words[pair_labels[:, None], pick].ravel()
    rows = np.repeat(pair_rows, m)
    noise_rows = np.repeat(np.arange(n, dtype=np.int64), a.noise_features)
    X = csr_from_pairs(np.concatenate([rows, noise_rows]),
                       np.concatenate([words, draw_word(len(noise_rows))]), n, D, counts=True)
    return X, Y


def tfidf(X, n_train):
    """X's counts as sublinear tf-idf with smooth idf (document frequencies
    of the first n_train rows), every row of unit Euclidean length."""
    df = np.bincount(X.indices[:X.indptr[n_train]], minlength=X.shape[1])
    idf = np.log((1.0 + n_train) / (1.0 + df)) + 1.0
    val = (1.0 + np.log(X.data.astype(np.float64))) * idf[X.indices]
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    norm = np.sqrt(np.bincount(rows, weights=val * val, minlength=X.shape[0]))
    val /= np.where(norm > 0, norm, 1.0)[rows]
    return Rows(X.indptr, X.indices, val.astype(np.float32), X.shape)


def split(M, n_train):
    p = M.indptr
    train = Rows(p[:n_train + 1].copy(), M.indices[:p[n_train]], M.data[:p[n_train]],
                 (n_train, M.shape[1]))
    tp = p[n_train:] - p[n_train]
    test = Rows(tp, M.indices[p[n_train]:], M.data[p[n_train]:],
                (M.shape[0] - n_train, M.shape[1]))
    return train, test


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_prefix", type=Path)
    ap.add_argument("--points", type=int, required=True, help="training points")
    ap.add_argument("--labels", type=int, required=True)
    ap.add_argument("--features", type=int, default=100_000)
    ap.add_argument("--test-points", type=int, default=None,
                    help="test points (default: 10%% of --points)")
    ap.add_argument("--label-exponent", type=float, default=1.0)
    ap.add_argument("--labels-per-point", type=float, default=5.0)
    ap.add_argument("--feature-exponent", type=float, default=1.0)
    ap.add_argument("--label-features", type=int, default=15)
    ap.add_argument("--features-per-label", type=int, default=6)
    ap.add_argument("--noise-features", type=int, default=20)
    ap.add_argument("--tfidf", action="store_true",
                    help="tf-idf values, rows of unit length, instead of counts")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    n_test = a.test_points if a.test_points is not None else max(1, a.points // 10)
    if min(a.points, a.labels, a.features, a.label_features, a.features_per_label) < 1 \
            or n_test < 1 or a.noise_features < 0:
        ap.error("sizes must be positive")
    X, Y = generate(a.points + n_test, a.labels, a.features, a)
    if a.tfidf:
        X = tfidf(X, a.points)
    a.out_prefix.parent.mkdir(parents=True, exist_ok=True)
    for part, (x, y) in zip(("train", "test"), zip(split(X, a.points), split(Y, a.points))):
        write_dataset(f"{a.out_prefix}_{part}.txt", x, y)
    print(f"{a.out_prefix}_{{train,test}}.txt: {a.points}+{n_test} points, "
          f"{a.features} features ({X.nnz / X.shape[0]:.1f} per point), {a.labels} labels "
          f"({Y.nnz / Y.shape[0]:.2f} per point, "
          f"{np.count_nonzero(np.bincount(Y.indices, minlength=a.labels))} used)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
