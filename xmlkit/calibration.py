"""Calibration maps: from a model's scores to the probability that a label
is relevant (the building block of calibrated predictions).

IsotonicMap.fit(scores, relevant) fits the isotonic regression of relevance
(0/1) on score: the non-decreasing step function closest to the outcomes in
least squares (pool-adjacent-violators, xmlkit._ext.isotonic, over the
distinct scores weighted by their counts). The map keeps one knot per step:
the step's mean score and its fraction of relevant labels, both strictly
increasing from knot to knot. apply(scores) interpolates linearly between
the knots (strictly increasing there: labels of one step keep their order,
as a step function would not) and is flat beyond the first and last knot:
scores there tie, and keeping a row's order among them is the caller's.

The knots are two float64 arrays (`arrays()` / `from_arrays()`), checked
when read back: finite, of one length, strictly increasing, values in
[0, 1].

map_rows(S, cmap, decimals): a score matrix's entries mapped, each row's
ranking kept as it is in the file written with `decimals` decimals (see
its doc), so that P@k, nDCG@k and PSP@k of the mapped scores are the raw
scores'.
"""
import numpy as np

from xmlkit.errors import XmlkitError


class IsotonicMap:
    """A monotone map from scores to probabilities (see the module doc)."""

    def __init__(self, x, y):
        self.x = np.asarray(x, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)

    @classmethod
    def fit(cls, scores, relevant):
        """The isotonic map of `relevant` (bool or 0/1) on `scores`."""
        from xmlkit._ext.isotonic import pav
        s = np.asarray(scores, dtype=np.float64).ravel()
        r = np.asarray(relevant, dtype=np.float64).ravel()
        if s.shape != r.shape or not len(s):
            raise XmlkitError(f"calibration: {len(s)} scores and {len(r)} outcomes; "
                              "needs as many, at least one")
        if not np.all(np.isfinite(s)):
            raise XmlkitError("calibration: scores contain NaN or inf")
        # (the distinct scores, each with its count and its number relevant)
        xs, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
        hits = np.bincount(inverse, weights=r, minlength=len(xs))
        ends, means = pav(hits / counts, counts)
        starts = np.concatenate([[0], ends[:-1]])
        cw = np.concatenate([[0.0], np.cumsum(counts * xs)])
        cn = np.concatenate([[0], np.cumsum(counts)])
        knot_x = (cw[ends] - cw[starts]) / (cn[ends] - cn[starts])
        return cls(knot_x, means)

    def apply(self, scores):
        """The probabilities of `scores` (any shape; float64)."""
        return np.interp(np.asarray(scores, dtype=np.float64), self.x, self.y)

    def arrays(self):
        """The knots, as a model folder stores them."""
        return {"x": self.x, "y": self.y}

    @classmethod
    def from_arrays(cls, arrays, where="the calibration"):
        """The map of stored knots, checked (XmlkitError naming `where`)."""
        try:
            x = np.asarray(arrays["x"], dtype=np.float64)
            y = np.asarray(arrays["y"], dtype=np.float64)
        except (KeyError, TypeError, ValueError):
            raise XmlkitError(f"{where}: the calibration's knots are missing") from None
        ok = (x.ndim == 1 and x.shape == y.shape and len(x) > 0
              and np.all(np.isfinite(x)) and np.all(np.isfinite(y))
              and np.all(np.diff(x) > 0) and np.all(np.diff(y) > 0)
              and y[0] >= 0 and y[-1] <= 1)
        if not ok:
            raise XmlkitError(f"{where}: the calibration's knots are damaged (they must be "
                              "finite, strictly increasing, with values in [0, 1])")
        return cls(x, y)


def map_rows(S, cmap, decimals=6):
    """The scores of CSR matrix S (a row's top k) mapped by `cmap` (an
    IsotonicMap), each row keeping its ranking once written with `decimals`
    decimals (xml-predict's score files: 6): in a row's raw order (score
    descending, ties to the lower label, as xmlkit.metrics ranks), a mapped
    value is rounded to the grid of 10^-decimals and lowered, where needed,
    to one grid step below the value ranked before it when the raw score is
    strictly lower, or to that value when the raw scores are equal. A
    probability moves by at most k − 1 grid steps; only where the map gives
    fewer than that above 0 do values meet at 0 and tie. Returns a new CSR
    matrix of float32 values, S's structure."""
    import scipy.sparse as sp
    S = sp.csr_matrix(S)
    raw = S.data.astype(np.float64)
    n_rows = S.shape[0]
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(S.indptr))
    order = np.lexsort((S.indices, -raw, rows))
    raw, rows = raw[order], rows[order]
    unit = 10 ** int(decimals)
    grid = np.rint(cmap.apply(raw) * unit).astype(np.int64)
    # steps: one grid step per strict drop of the raw score within a row
    first = np.r_[True, rows[1:] != rows[:-1]]
    drop = np.r_[0, (raw[1:] < raw[:-1]) & ~first[1:]].astype(np.int64)
    steps = np.cumsum(drop)
    steps -= np.maximum.accumulate(np.where(first, steps, 0))
    # a running minimum of grid + steps within each row (rows apart by more
    # than any value: the minimum starts again at each row), less the steps
    apart = unit + len(raw) + 1
    kept = np.minimum.accumulate(grid + steps - rows * apart) + rows * apart - steps
    out = np.empty(len(raw), dtype=np.float32)
    out[order] = np.maximum(kept, 0) / unit
    return sp.csr_matrix((out, S.indices.copy(), S.indptr.copy()), shape=S.shape)
