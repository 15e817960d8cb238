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
    decimals (xml-predict's score files: 6): in a row's raw order as written
    (the raw score with `decimals` decimals descending, ties to the lower
    label, as xmlkit.metrics ranks a score file), a mapped
    value is rounded to the grid of 10^-decimals and lowered, where needed,
    to one grid step below the value ranked before it when the raw score is
    strictly lower, or to that value when the raw scores are equal, and
    raised, where needed, to as many steps above 0 as strict drops follow it
    in the row. A probability moves by at most k − 1 grid steps. Returns a matrix of
    S's kind (xmlkit.csr.Rows or scipy CSR) and structure, float32 values."""
    from xmlkit.csr import Rows, as_rows, like
    template, S = S, as_rows(S, "scores")
    unit = 10 ** int(decimals)
    # (the raw order is the written raw scores': scores equal once written tie)
    written = np.rint(S.data.astype(np.float64) * unit)
    n_rows = S.shape[0]
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(S.indptr))
    order = np.lexsort((S.indices, -written, rows))
    written, rows = written[order], rows[order]
    grid = np.rint(cmap.apply(written / unit) * unit).astype(np.int64)
    # steps: one grid step per strict drop of the raw score within a row
    first = np.r_[True, rows[1:] != rows[:-1]]
    drop = np.r_[0, (written[1:] < written[:-1]) & ~first[1:]].astype(np.int64)
    steps = np.cumsum(drop)
    steps -= np.maximum.accumulate(np.where(first, steps, 0))
    # a running minimum of grid + steps within each row (rows apart by more
    # than any value: the minimum starts again at each row), less the steps
    apart = unit + len(written) + 1
    kept = np.minimum.accumulate(grid + steps - rows * apart) + rows * apart - steps
    # and at least one step above each strict drop still to come in the row
    # (values that would meet at 0 stay apart: a few millionths above it)
    last = np.r_[first[1:], True]
    below = np.repeat(steps[last], np.bincount(rows, minlength=S.shape[0])[rows[last]]) - steps
    out = np.empty(len(written), dtype=np.float32)
    out[order] = np.maximum(kept, below) / unit
    return like(template, Rows(S.indptr, S.indices, out, S.shape))


#: the array file of a model folder holding its calibration map
CALIBRATION = "calibration"


def fit_on_data(model, X, Y, k=5, **predict_kwargs):
    """(map, S): the IsotonicMap of `model`'s top-k scores S of rows X
    against their labels Y (rows the model was not trained on);
    predict_kwargs go to model.predict."""
    from xmlkit.metrics import top_entries
    if "decision" in model.PREDICT_PARAMS:
        # (the family's declared decision: its ranked scores, not label sets)
        predict_kwargs.setdefault("decision", model.predict_defaults()["decision"])
    S = model.predict(X, k=int(k), **predict_kwargs)
    scores, relevant = top_entries(Y, S, k)
    if not len(scores):
        raise XmlkitError("calibration: the model scored no label of these rows")
    return IsotonicMap.fit(scores, relevant), S


def folder_calibration(folder):
    """The IsotonicMap kept in model folder `folder`, or None (a folder
    without one, or not an xmlkit folder); checked against its record."""
    from pathlib import Path
    from xmlkit import store
    if not store.is_model_folder(folder):
        return None
    manifest = store.read_manifest(folder)
    if f"{CALIBRATION}.npz" not in (store.records(manifest) or {}):
        return None
    return IsotonicMap.from_arrays(store.load_arrays(folder, CALIBRATION, manifest),
                                   Path(folder) / f"{CALIBRATION}.npz")


def save_to_folder(folder, cmap):
    """Keep `cmap` in model folder `folder` (under its lock), replacing a
    map it held."""
    from xmlkit import store
    with store.folder_lock(folder):
        manifest = store.read_manifest(folder)
        store.save_arrays(folder, CALIBRATION, cmap.arrays(), manifest)
        store.record_files(folder, [CALIBRATION])


def drop_from_folder(folder):
    """Remove the map of a folder whose model changes (call under its
    lock): True when there was one."""
    from xmlkit import store
    return bool(store.forget_files(folder, [CALIBRATION]))
