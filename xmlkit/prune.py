"""PrunEX data pruning (Khandagale & Babbar, ESANN 2019).

Optionally weight raw term counts by tf-idf, tf = log(1 + count) and
idf_j = log(1 + N / n_j) (N rows, n_j rows where feature j is non-zero, both
from the training set), scale every row to unit L2 length, then drop the
entries whose magnitude is <= threshold. ``min_keep`` keeps each row's K
largest entries anyway, so that no point loses all its features. Labels and
row order are untouched. ``rescale`` (the default) scales the kept entries
of each row to unit length again; the paper leaves them as they were in the
unit row (``rescale=False``), which shortens most the rows that lose most.
FastXML's node separators are not scale-free: on the man pages at 0.07, 74%
of the non-zeros removed, its P@1 drops 1.7 below the unpruned rows without
rescaling and 0.15 with it; PfastreXML and embed measured the same either
way, and Parabel and linear (unit_rows) scale their rows themselves
(docs/algorithms.md).
"""
import numpy as np

from xmlkit.csr import Rows, as_rows, like
from xmlkit.errors import XmlkitError

#: the paper's threshold, "effective for most datasets"
DEFAULT_THRESHOLD = 0.07
DEFAULT_MIN_KEEP = 1
DEFAULT_RESCALE = True


def fit_idf(X):
    """idf_j = log(1 + N / n_j), n_j = rows of X where feature j is non-zero;
    0 for features no row has (they are dropped by the transform)."""
    R = as_rows(X, "features")
    n = R.shape[0]
    if n == 0:
        raise XmlkitError("idf needs at least one row")
    df = np.bincount(R.indices[R.data != 0], minlength=R.shape[1]).astype(np.float64)
    return np.log1p(np.divide(n, df, out=np.zeros_like(df), where=df > 0)) * (df > 0)


def prune(X, threshold=DEFAULT_THRESHOLD, tfidf=True, idf=None, min_keep=DEFAULT_MIN_KEEP,
          rescale=DEFAULT_RESCALE):
    """Prune the rows of X (Rows or scipy sparse, N×D).

    With ``tfidf``, X holds non-negative term counts; ``idf`` (length D) is
    computed from X when not given (the training set), and a test set must
    be transformed with the training idf. ``rescale``: the kept entries of
    each row scaled to unit length again (False: their values in the unit
    row, as the paper). Returns ``(X_pruned, idf, stats)``:
    X_pruned of the kind of X, idf (None without tfidf), and stats with
    nnz before/after, the rows the threshold emptied ("emptied"), how many of
    them ``min_keep`` saved ("saved") and rows without any non-zero
    weight ("no_weight": empty rows, or only features of idf 0).
    """
    from xmlkit._ext.prune_rows import prune_rows
    if not (np.isfinite(threshold) and threshold >= 0):
        raise XmlkitError(f"the threshold must be a finite number >= 0, not {threshold}")
    if int(min_keep) != min_keep or min_keep < 0:
        raise XmlkitError(f"min_keep must be a whole number >= 0, not {min_keep}")
    R = as_rows(X, "features")
    if not np.all(np.isfinite(R.data)):
        raise XmlkitError("the features contain NaN or inf")
    if tfidf:
        idf = fit_idf(R) if idf is None else np.asarray(idf, dtype=np.float64)
        if idf.shape != (R.shape[1],):
            raise XmlkitError(f"the idf has {idf.size} values but the data have "
                              f"{R.shape[1]} features")
    else:
        idf = None
    try:
        ptr, idx, val, stats = prune_rows(R.indptr.astype(np.int64, copy=False), R.indices,
                                          R.data, idf, bool(tfidf), float(threshold),
                                          int(min_keep), bool(rescale))
    except ValueError as exc:
        raise XmlkitError(f"tf-idf needs non-negative term counts: {exc} (use tfidf=False "
                          "for data that are already weighted)", param="tfidf") from None
    stats = {"rows": R.shape[0], "nnz_before": R.nnz, "nnz_after": int(ptr[-1]), **stats}
    stats["removed_fraction"] = 1 - stats["nnz_after"] / stats["nnz_before"] \
        if stats["nnz_before"] else 0.0
    return like(X, Rows(ptr, idx, val, R.shape)), idf, stats
