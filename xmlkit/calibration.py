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

rank_maps(scores, ranks, relevant, levels): one such map per rank of each
row's best-scored labels, fitted together, non-decreasing in the score and
non-increasing in the rank (the default of a Calibration's first ranks).

map_rows(S, cmap, decimals): a score matrix's entries mapped, each row's
ranking kept as it is in the file written with `decimals` decimals (see
its doc), so that P@k, nDCG@k and PSP@k of the mapped scores are the raw
scores'.

Calibration: the map and the label sets it decides (per-label thresholds
on the probabilities, fitted for micro-F1; see fit_thresholds), as a model
folder keeps them (calibration.npz). A model with its calibration, fitted on
validation rows or on rows held out at training, and a folder's
calibration: xmlkit.models.calibrated (this module knows no model).
"""
import warnings

import numpy as np

from xmlkit.errors import InvalidParameterError, XmlkitError


class IsotonicMap:
    """A monotone map from scores to probabilities (see the module doc)."""

    def __init__(self, x, y):
        self.x = np.asarray(x, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)

    @classmethod
    def fit(cls, scores, relevant):
        """The isotonic map of `relevant` (bool or 0/1) on `scores`."""
        from xmlkit._ext.isotonic import pav
        s, r = _scores_and_outcomes(scores, relevant)
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


def _scores_and_outcomes(scores, relevant):
    """(scores, outcomes) as flat float64 arrays, checked: as many of each,
    at least one, the scores finite (XmlkitError)."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(relevant, dtype=np.float64).ravel()
    if s.shape != y.shape or not len(s):
        raise XmlkitError(f"calibration: {len(s)} scores and {len(y)} outcomes; "
                          "needs as many, at least one")
    if not np.all(np.isfinite(s)):
        raise XmlkitError("calibration: scores contain NaN or inf")
    return s, y


def _row_order(S, unit):
    """A Rows' entries in each row's raw order as written (the raw score
    times `unit`, rounded, descending; ties to the lower label: scores equal
    once written tie): (order, written, rows, first of its row, rank from
    0), the last four in that order."""
    written = np.rint(S.data.astype(np.float64) * unit)
    rows = np.repeat(np.arange(S.shape[0], dtype=np.int64), np.diff(S.indptr))
    order = _rows_descending(written, rows, S.indices, S.shape[1])
    written, rows = written[order], rows[order]
    first = np.r_[True, rows[1:] != rows[:-1]][:len(rows)]
    at = np.arange(len(rows))
    rank = at - np.maximum.accumulate(np.where(first, at, 0))
    return order, written, rows, first, rank


def _rows_descending(written, rows, labels, n_labels):
    """The order of entries (row ids `rows` non-decreasing) by row, then
    `written` (whole numbers) descending, then label: one sort of the
    whole-number key (row, top value less the value, label) where it fits
    62 bits, a three-key sort otherwise."""
    if len(written):
        top, span = written.max(), written.max() - written.min() + 1
        if span * (int(rows[-1]) + 1) * max(int(n_labels), 1) < 2.0 ** 62:
            key = (rows * np.int64(span) + (top - written).astype(np.int64)) * int(n_labels)
            return np.argsort(key + labels, kind="stable")
    return np.lexsort((labels, -written, rows))


def _by_rank(cmap, deep, rank, scores):
    """The probabilities of `scores` whose rows' ranks are `rank`: each by
    `cmap`, or by the map of the last band of `deep` ((rank r, IsotonicMap),
    ...) that its rank reaches."""
    values = cmap.apply(scores)
    for r, m in deep:
        later = rank >= r
        values[later] = m.apply(scores[later])
    return values


def map_rows(S, cmap, decimals=6, deep=()):
    """The scores of CSR matrix S (a row's top k) mapped by `cmap` (an
    IsotonicMap), or, for `deep` = ((rank r, IsotonicMap), ...), ranks from
    0 increasing, those at a row's rank r or later by the map of the last r
    they reach, each row keeping its ranking once written with `decimals`
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
    order, written, rows, first, rank = _row_order(S, unit)
    grid = np.rint(_by_rank(cmap, deep, rank, written / unit) * unit).astype(np.int64)
    # steps: one grid step per strict drop of the raw score within a row
    drop = np.r_[0, (written[1:] < written[:-1]) & ~first[1:]][:len(rows)].astype(np.int64)
    steps = np.cumsum(drop)
    steps -= np.maximum.accumulate(np.where(first, steps, 0))
    # a running minimum of grid + steps within each row (rows apart by more
    # than any value: the minimum starts again at each row), less the steps
    apart = unit + len(written) + 1
    kept = np.minimum.accumulate(grid + steps - rows * apart) + rows * apart - steps
    # and at least one step above each strict drop still to come in the row
    # (values that would meet at 0 stay apart: a few millionths above it)
    last = np.r_[first[1:], True][:len(rows)]
    below = np.repeat(steps[last], np.bincount(rows, minlength=S.shape[0])[rows[last]]) - steps
    out = np.empty(len(written), dtype=np.float32)
    out[order] = np.maximum(kept, below) / unit
    return like(template, Rows(S.indptr, S.indices, out, S.shape))


#: the array file of a model folder holding its calibration
CALIBRATION = "calibration"
#: the ranks (each row's k best-scored labels) a map is fitted on, by default
FIT_RANKS = 5
#: the best-scored labels per row among which label sets are chosen
CANDIDATES = 50
#: the prior precisions of a label's shift of the global threshold (logit
#: scale) that choose_prior tries: labels with few candidates keep about the
#: global threshold; the first, no shift at all
SHIFT_PRIORS = (1e12, 100.0, 20.0, 5.0)
SHIFT_PRIOR = 20.0
#: fewer relevant labels, or fewer others, than this among the rows' k best
#: leave a map too rough to trust: Calibration.fit warns
FEW_OUTCOMES = 50
#: the bins of equal counts the scores are cut into for the maps by rank
#: (rank_maps; docs/algorithms.md: the choice)
SCORE_BINS = 64
#: what a calibrated model gives: probabilities, or label sets
DECISIONS = ("scores", "threshold")


def _logit(p):
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def _best_cut(p, relevant, n_relevant):
    """(t, F1): the cut t over probabilities p (keep p >= t) of the best
    micro-F1 2·TP / (n_relevant + kept), ties kept together."""
    order = np.argsort(-p)      # (the order within ties: no cut falls inside them)
    ps, tp = p[order], np.cumsum(relevant[order])
    f1 = 2 * tp / (n_relevant + np.arange(1, len(ps) + 1))
    f1[:-1][ps[1:] == ps[:-1]] = -1         # (a cut only between distinct values)
    i = int(np.argmax(f1))
    return float(ps[i]), float(f1[i])


def fit_thresholds(p, relevant, labels, n_relevant, n_labels, prior=SHIFT_PRIOR):
    """Per-label thresholds on calibrated probabilities for the micro-F1 of
    the label sets, from held-out candidates (probability p, relevant,
    label) and the rows' number of relevant labels (found or not).

    With probabilities that are right, the best sets for micro-F1 keep the
    labels of probability above one cut (half the best F1: Lipton, Elkan &
    Naryanaswamy 2014); a label whose probabilities run high or low is
    corrected by a shift b_l of its log-odds, the maximum a posteriori of
    logit(q) = logit(p) + b_l under a Gaussian prior of precision `prior`
    (Newton steps, all labels at once), so that a label with few held-out
    candidates keeps about the global cut. The cut c is then the best
    micro-F1 cut of the shifted probabilities, and label l's threshold on
    the calibrated probability is sigmoid(logit(c) − b_l).
    Returns (thresholds: float64 array of n_labels, c)."""
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(relevant, dtype=np.float64)
    z = _logit(p)
    b = np.zeros(n_labels)
    for _ in range(20):
        q = 1 / (1 + np.exp(-(z + b[labels])))
        grad = np.bincount(labels, y - q, minlength=n_labels) - prior * b
        hess = np.bincount(labels, q * (1 - q), minlength=n_labels) + prior
        step = grad / hess
        b += step
        if np.max(np.abs(step), initial=0) < 1e-9:
            break
    q = 1 / (1 + np.exp(-(z + b[labels])))
    c, _ = _best_cut(q, y, n_relevant) if len(q) else (1.0, 0.0)
    return 1 / (1 + np.exp(-(_logit(c) - b))), c


def choose_prior(p, relevant, labels, rows, row_relevant, n_labels, priors=SHIFT_PRIORS):
    """The prior of fit_thresholds whose sets have the best micro-F1 under
    2-fold cross-validation over the held-out rows (even and odd rows: the
    thresholds fitted on one half, counted on the other); ties to the
    earlier prior (the stronger: shifts only where they pay)."""
    y = np.asarray(relevant, dtype=np.float64)
    half = rows % 2
    totals = [np.bincount(np.arange(len(row_relevant)) % 2, weights=row_relevant,
                          minlength=2)[h] for h in (0, 1)]
    best, chosen = -1.0, priors[0]
    for prior in priors:
        tp = kept = 0.0
        for h in (0, 1):
            fit, use = half != h, half == h
            th, _ = fit_thresholds(p[fit], y[fit], labels[fit], totals[1 - h], n_labels, prior)
            keep = p[use] >= th[labels[use]]
            tp += y[use][keep].sum()
            kept += keep.sum()
        f1 = 2 * tp / (sum(totals) + kept) if sum(totals) + kept else 0.0
        if f1 > best + 1e-12:
            best, chosen = f1, prior
    return chosen


def rank_maps(scores, ranks, relevant, levels, bins=SCORE_BINS):
    """The maps of each row's first `levels` ranks, one per rank, fitted
    together: the probability p(s, r) of relevance at score s and rank r
    (from 0) non-decreasing in s and non-increasing in r, so that within a
    row, where a label ranked before another scores at least as much, it is
    at least as probable (each row's ranking kept by the maps themselves).

    The scores are cut into `bins` bins of equal counts (their quantiles),
    and the grid of (rank, bin) cells, each its share of relevant entries
    weighted by its count, gets its least-squares fit under both orders
    (xmlkit._ext.isotonic.pav_grid; an empty cell weighs next to nothing).
    Each rank's map has a knot per run of bins of one fitted value: their
    mean score and that value. Returns ((rank, IsotonicMap), ...) from rank
    0, a rank without entries, or with the map of the rank before it,
    left out (the rank before's map serves it)."""
    from xmlkit._ext.isotonic import pav_grid
    s, y = _scores_and_outcomes(scores, relevant)
    r = np.asarray(ranks, dtype=np.int64).ravel()
    if len(r) != len(s):
        raise XmlkitError(f"calibration: {len(s)} scores and {len(r)} ranks; needs as many")
    G = int(min(int(levels), r.max() + 1))      # (no more levels than ranks seen)
    edges = np.unique(np.quantile(s, np.linspace(0, 1, int(bins) + 1)[1:-1]))
    B = len(edges) + 1
    cell = np.minimum(r, G - 1) * B + np.searchsorted(edges, s, side="right")
    count = np.bincount(cell, minlength=G * B).reshape(G, B)
    hits = np.bincount(cell, weights=y, minlength=G * B).reshape(G, B)
    total = np.bincount(cell, weights=s, minlength=G * B).reshape(G, B)
    seen = count > 0
    fit, _ = pav_grid(np.where(seen, hits / np.maximum(count, 1), y.mean()),
                      np.where(seen, count, 1e-9))
    fit = np.clip(fit, 0.0, 1.0)
    maps = []
    for g in range(G):
        v, w, sx = fit[g][seen[g]], count[g][seen[g]], total[g][seen[g]]
        if not len(v):
            continue
        new = np.r_[True, v[1:] != v[:-1]]        # (each run's first bin)
        run = np.cumsum(new) - 1
        m = IsotonicMap(np.bincount(run, weights=sx) / np.bincount(run, weights=w), v[new])
        if maps and np.array_equal(m.x, maps[-1][1].x) and np.array_equal(m.y, maps[-1][1].y):
            continue
        maps.append((g, m))
    return tuple(maps)


def bands(k, candidates):
    """The ranks (from 0) where each map but the first starts: k, 2k, 4k,
    ... below `candidates` (a row's k best, the next k, then bands twice
    as deep as the one before; docs/algorithms.md: at one score, a label
    ranked lower is less often relevant)."""
    starts, r = [], int(k)
    while r < int(candidates):
        starts.append(r)
        r *= 2
    return starts


class Calibration:
    """A model's calibration: `map` (IsotonicMap: scores to probabilities)
    of each row's best-scored label and `deep`, ((rank, IsotonicMap), ...),
    ranks increasing, the maps of the labels ranked after it (a label by
    the map of the last rank it reaches: one per rank up to k, then the
    bands; empty: `map` throughout), per-label `thresholds` and the global
    cut `threshold` they shift (probabilities; fit_thresholds), the ranks
    `k` the first maps were fitted on and the `candidates` per row label
    sets are chosen from."""

    def __init__(self, cmap, thresholds, threshold, k=FIT_RANKS, candidates=CANDIDATES,
                 deep=()):
        self.map = cmap
        self.deep = tuple(deep)
        self.thresholds = np.asarray(thresholds, dtype=np.float64)
        self.threshold = float(threshold)
        self.k = int(k)
        self.candidates = int(candidates)

    @classmethod
    def fit(cls, Y, S, k=FIT_RANKS, candidates=CANDIDATES, banded=True, prior=None,
            by_rank=True, bins=SCORE_BINS):
        """The calibration of scores S (CSR: each row's `candidates` best, or
        more) of held-out rows against their labels Y: a map per rank of
        each row's top k, fitted together (rank_maps, the scores in `bins`
        bins; `map` the first's, the others first in `deep`), or one map of
        them all where not `by_rank`; then in `deep` the maps of the bands
        of its next best up to `candidates` (bands(); a band no row reaches
        has no map; none when not `banded`); the thresholds on the
        probabilities of all of these, with the shift prior choose_prior
        chooses, or `prior`."""
        from xmlkit.csr import Rows
        from xmlkit.metrics import binary_rows, top_k_entries
        Y = binary_rows(Y, "true labels")
        labels, s, ranks, hit, rows = top_k_entries(Y, S, max(int(k), int(candidates)),
                                                   with_rows=True)
        top = ranks < int(k)
        if not top.any():
            raise XmlkitError("calibration: the model scored no label of these rows")
        found = int(np.count_nonzero(hit[top]))
        others = int(np.count_nonzero(top)) - found
        if min(found, others) < FEW_OUTCOMES:
            warnings.warn(f"calibration: the map rests on {found} relevant and "
                          f"{others} other labels among the {int(k)} best of "
                          f"{Y.shape[0]} rows: too few for steady probabilities (a few hundred "
                          "rows or more make them steady)", stacklevel=2)
        if by_rank:
            (_, cmap), *deep = rank_maps(s[top], ranks[top], hit[top], k, bins)
        else:
            cmap, deep = IsotonicMap.fit(s[top], hit[top]), []
        starts = np.array([0] + (bands(k, candidates) if banded else []))
        band = np.searchsorted(starts, ranks, side="right") - 1
        deep += [(int(starts[b]), IsotonicMap.fit(s[band == b], hit[band == b]))
                 for b in range(1, len(starts)) if np.any(band == b)]
        # (the candidates' probabilities as predict gives them, in their order)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=Y.shape[0]))])
        p = map_rows(Rows(indptr, labels, s.astype(np.float32), Y.shape), cmap,
                     deep=deep).data.astype(np.float64)
        if prior is None:
            prior = choose_prior(p, hit, labels, rows, np.diff(Y.indptr), Y.shape[1])
        thresholds, c = fit_thresholds(p, hit, labels, Y.nnz, Y.shape[1], prior)
        return cls(cmap, thresholds, c, k, candidates, deep)

    def knots(self):
        """A line on the maps' knots, for logs."""
        first = [(0, self.map)] + [(r, m) for r, m in self.deep if r < self.k]
        deep = "".join(f", {len(m.x)} from rank {r + 1}" for r, m in self.deep if r >= self.k)
        if len(first) == 1:
            return f"{len(self.map.x)} knots for each row's {self.k} best{deep}"
        return (f"{'/'.join(str(len(m.x)) for _, m in first)} knots from ranks "
                f"{'/'.join(str(r + 1) for r, _ in first)}{deep}")

    def probabilities(self, S):
        """The scores S (CSR, Rows or scipy) as probabilities (map_rows)."""
        return map_rows(S, self.map, deep=self.deep)

    def apply(self, scores, ranks):
        """The probabilities of `scores` at those ranks in their rows (from
        0), each by its rank's map, without map_rows' hold on the ranking."""
        return _by_rank(self.map, self.deep, np.asarray(ranks),
                        np.asarray(scores, dtype=np.float64))

    def scoring_k(self, decision, threshold=None, k=None):
        """The k to score for `decision` (label sets without a k: the
        candidates), once decision and threshold are checked
        (InvalidParameterError naming the one at fault)."""
        if decision not in DECISIONS:
            raise InvalidParameterError(
                "decision", f"Calibrated: decision must be one of {DECISIONS}, got {decision!r}")
        if threshold is not None and decision != DECISIONS[1]:
            raise InvalidParameterError(("threshold", "decision"),
                                        "Calibrated: threshold goes with decision=threshold")
        if threshold is not None and not 0 <= threshold <= 1:
            raise InvalidParameterError(
                "threshold", f"Calibrated: threshold must be a probability in [0, 1], "
                             f"got {threshold}")
        return self.candidates if decision == DECISIONS[1] and k is None else k

    def decide(self, S, decision, threshold=None):
        """Scores S as `decision` asks: "scores", their probabilities;
        "threshold", the label sets of those (label_sets)."""
        P = self.probabilities(S)
        return P if decision == DECISIONS[0] else self.label_sets(P, threshold)

    def label_sets(self, P, threshold=None):
        """The entries of probabilities P (CSR) kept as label sets: those at
        or above their label's threshold, or above `threshold` when given;
        a matrix of P's kind with the probabilities as values."""
        from xmlkit.csr import Rows, as_rows, like
        R = as_rows(P, "probabilities")
        cut = self.thresholds[R.indices] if threshold is None else float(threshold)
        keep = R.data >= cut
        rows = np.repeat(np.arange(R.shape[0]), np.diff(R.indptr))[keep]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=R.shape[0]))])
        return like(P, Rows(indptr.astype(R.indptr.dtype), R.indices[keep], R.data[keep],
                            R.shape))

    def arrays(self):
        """The calibration as a model folder stores it."""
        deep = {}
        if self.deep:
            # (the bands' knots one after the other, each band's first at ptr)
            deep = {"deep_ranks": np.array([r for r, _ in self.deep], dtype=np.int64),
                    "deep_ptr": np.cumsum([0] + [len(m.x) for _, m in self.deep]),
                    "deep_x": np.concatenate([m.x for _, m in self.deep]),
                    "deep_y": np.concatenate([m.y for _, m in self.deep])}
        return {**self.map.arrays(), **deep, "thresholds": self.thresholds,
                "threshold": np.array([self.threshold]),
                "ranks": np.array([self.k, self.candidates], dtype=np.int64)}

    @classmethod
    def from_arrays(cls, arrays, n_labels, where="the calibration"):
        """The calibration of stored arrays, checked against a model of
        n_labels labels (XmlkitError naming `where`)."""
        cmap = IsotonicMap.from_arrays(arrays, where)
        deep = _deep_maps(arrays, where) if any(
            key.startswith("deep_") for key in arrays) else ()
        try:
            th = np.asarray(arrays["thresholds"], dtype=np.float64)
            c = np.asarray(arrays["threshold"], dtype=np.float64)
            ranks = np.asarray(arrays["ranks"])
        except (KeyError, TypeError, ValueError):
            raise XmlkitError(f"{where}: the calibration's thresholds are missing") from None
        ok = (th.shape == (n_labels,) and c.shape == (1,) and ranks.shape == (2,)
              and ranks.dtype.kind == "i" and np.all(ranks >= 1) and np.all(ranks < 2 ** 31)
              and np.all((th >= 0) & (th <= 1)) and 0 <= c[0] <= 1)
        if not ok:
            raise XmlkitError(f"{where}: the calibration's thresholds are damaged (one per "
                              f"label of {n_labels}, probabilities in [0, 1])")
        return cls(cmap, th, c[0], ranks[0], ranks[1], deep)


def entry_ranks(S, rows, labels):
    """The rank (from 0, as map_rows ranks a row) of each (row, label) entry
    of scores S (CSR) in its row."""
    from xmlkit.csr import Rows, as_rows
    from xmlkit.explanation import score_at
    R = as_rows(S, "scores")
    order, _, _, _, rank = _row_order(R, 10 ** 6)
    ranks = np.empty(len(rank), dtype=np.float64)
    ranks[order] = rank
    return score_at(Rows(R.indptr, R.indices, ranks, R.shape), rows, labels).astype(np.int64)


def _deep_maps(arrays, where):
    """The bands of stored arrays (Calibration.arrays), checked."""
    try:
        r = np.asarray(arrays["deep_ranks"])
        ptr = np.asarray(arrays["deep_ptr"])
        x, y = arrays["deep_x"], arrays["deep_y"]
    except (KeyError, TypeError, ValueError):
        raise XmlkitError(f"{where}: the calibration's bands are missing") from None
    ok = (r.ndim == 1 and len(r) > 0 and r.dtype.kind == "i" and ptr.dtype.kind == "i"
          and ptr.shape == (len(r) + 1,) and np.all(r >= 1) and np.all(r < 2 ** 31)
          and np.all(np.diff(r) > 0) and ptr[0] == 0 and np.all(np.diff(ptr) > 0)
          and np.ndim(x) == 1 and ptr[-1] == len(x))
    if not ok:
        raise XmlkitError(f"{where}: the calibration's bands are damaged (starting ranks "
                          "increasing, one knot or more each)")
    return tuple((int(r[b]), IsotonicMap.from_arrays(
        {"x": x[ptr[b]:ptr[b + 1]], "y": np.asarray(y)[ptr[b]:ptr[b + 1]]}, where))
        for b in range(len(r)))
