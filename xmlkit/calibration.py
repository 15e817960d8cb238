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
