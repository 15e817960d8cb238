"""Ranking metrics of the Extreme Classification repository.

Definitions follow the repository's Matlab tools (``get_all_metrics``):

* Only stored score entries are ranked; a row with fewer than k stored scores
  simply has fewer hits. Ties: **higher score first, then lower label index**.
* Every test point counts in every mean; a point without true labels adds 0.
* ``P@k``      = mean_i |top_k(i) ∩ y_i| / k
* ``nDCG@k``   = mean_i Σ_{r≤k} rel_ir / log2(r+1)  /  Σ_{r≤min(k,|y_i|)} 1/log2(r+1)
* ``R@k``      = mean_i |top_k(i) ∩ y_i| / |y_i|
* ``PSP@k``    = Σ_i Σ_{r≤k} q·rel / k  divided by the same sum for the best
  achievable ranking (each point's true labels by decreasing q): a ratio of
  averages, in [0, 1].
* ``PSnDCG@k`` = Σ_i Σ_{r≤k} q·rel / log2(r+1), divided likewise (the Matlab
  normaliser Σ_{r≤k} 1/log2(r+1) is the same for every point and cancels).

True labels are binary: a stored non-zero entry is relevant.
q are inverse propensities (:func:`inverse_propensity`).

Calibration of the top-k scores (:func:`calibration`), ``ECE@k``: the n
stored entries of the points' top k (score s, relevant or not y), sorted by
score (ties in row, then rank order), cut into ECE_BINS bins of equal mass
(bin b: sorted positions ⌊b·n/B⌋ to ⌊(b+1)·n/B⌋ − 1), and
ECE@k = Σ_b |Σ_{j∈b} (y_j − s_j)| / n, the mass-weighted gap between each
bin's mean score and its fraction of relevant labels. It reads scores as
probabilities: 0 for a perfectly calibrated model.
"""
import numpy as np

from xmlkit.csr import Rows, summed_duplicates, without_zeros
from xmlkit.errors import XmlkitError

__all__ = [
    "PROPENSITY_PRESETS",
    "propensity_ab",
    "DEFAULT_KS",
    "inverse_propensity",
    "top_k",
    "ranking_metrics",
    "precision_at_k",
    "ndcg_at_k",
    "recall_at_k",
    "psprecision_at_k",
    "psndcg_at_k",
    "label_sets",
    "set_metrics",
    "frequency_bins",
    "binned_precision",
    "calibration",
    "calibrations",
    "top_entries",
    "ECE_BINS",
]

#: (A, B) of the propensity model, per data-set family (Jain et al., 2016).
PROPENSITY_PRESETS = {"default": (0.55, 1.5), "wikipedia": (0.5, 0.4), "amazon": (0.6, 2.6)}
DEFAULT_KS = (1, 3, 5)
#: equal-mass bins of ECE@k and of the reliability diagram
ECE_BINS = 10


def propensity_ab(preset="default", A=None, B=None):
    """(A, B) of the propensity model: the preset's, each replaced when given."""
    if preset not in PROPENSITY_PRESETS:
        raise XmlkitError(f"unknown propensity preset {preset!r} (known: "
                          f"{', '.join(sorted(PROPENSITY_PRESETS))})")
    a, b = PROPENSITY_PRESETS[preset]
    a = a if A is None else float(A)
    b = b if B is None else float(B)
    if not (np.isfinite(a) and a > 0 and np.isfinite(b) and b > -1):
        raise XmlkitError(f"the propensity model needs A > 0 and B > -1, got A={a}, B={b}")
    return a, b


#: the largest inverse propensity taken (a propensity of 1e-12): above it
#: the weighted sums of training and of PSP@k lose all precision in float32
#: and may overflow
MAX_INV_PROPENSITY = 1e12


def inverse_propensity(Y_train, A=0.55, B=1.5):
    """q_l = 1 + (ln N − 1)(B + 1)^A (N_l + B)^(−A), N = training points,
    N_l = training points carrying label l (computed by logarithms, so that
    a large A does not overflow on the way); A and B whose q is not finite,
    not positive or above MAX_INV_PROPENSITY for some label are refused."""
    if isinstance(Y_train, Rows):
        # (the points holding each label without scipy, which a PfastreXML
        # training would otherwise import for this alone)
        Y = summed_duplicates(Y_train)
        labels = Y.indices[Y.data != 0]
    else:
        Y = binary_csr(Y_train, "training labels", strict=False)
        labels = Y.indices
    n = Y.shape[0]
    if n == 0:
        raise XmlkitError("inverse propensities need at least one training point")
    counts = np.bincount(labels, minlength=Y.shape[1]).astype(np.float64)
    with np.errstate(all="ignore"):
        q = 1.0 + (np.log(n) - 1.0) * np.exp(A * (np.log1p(B) - np.log(counts + B)))
    bad = ~(np.isfinite(q) & (q > 0) & (q <= MAX_INV_PROPENSITY))
    if bad.any():
        l = int(np.argmax(bad))
        raise XmlkitError(f"the propensity model with A={A:g}, B={B:g} gives label {l} "
                          f"(in {int(counts[l])} of {n} training points) the inverse "
                          f"propensity {q[l]:.6g}, which is not a finite number from 0 to "
                          f"{MAX_INV_PROPENSITY:g}; choose other A and B", param="propensity_a")
    return q


def binary_csr(Y, name, strict=True):
    """Y as a csr matrix of its stored non-zero entries; `strict`: refused
    unless every one is 1 (a truth matrix; training labels and predicted
    label sets, which may carry their scores, count where entries are)."""
    import scipy.sparse as sp   # here, not at import: xml-predict never needs it
    if isinstance(Y, Rows):
        Y = Y.to_scipy()
    if not sp.issparse(Y):
        Y = sp.csr_matrix(np.asarray(Y))
    Y = sp.csr_matrix(Y, copy=True)
    Y.eliminate_zeros()
    Y.sum_duplicates()
    if strict:
        _refuse_non_binary(Y.data, Y.indptr, name)
    Y.sort_indices()
    Y.indices = Y.indices.astype(np.int32, copy=False)
    return Y


def binary_rows(Y, name):
    """binary_csr(Y, name) as xmlkit.csr.Rows (its indptr, indices and
    shape are what the calibration's functions read), without importing
    scipy when Y is a Rows: a validation file read by xml-calibrate."""
    if not isinstance(Y, Rows):
        Y = binary_csr(Y, name)
        return Rows(Y.indptr, Y.indices, Y.data, Y.shape)
    Y = without_zeros(summed_duplicates(Y))
    _refuse_non_binary(Y.data, Y.indptr, name)
    return Rows(Y.indptr, np.ascontiguousarray(Y.indices, dtype=np.int32), Y.data, Y.shape)


def _refuse_non_binary(data, indptr, name):
    """XmlkitError unless every stored value of a truth matrix is 1."""
    if len(data) and not np.all(data == 1):
        first = int(np.flatnonzero(data != 1)[0])
        row = int(np.searchsorted(indptr, first, side="right")) - 1
        raise XmlkitError(f"{name} must be 0/1, but row {row} holds {data[first]:g} "
                          "(scores given as the truth?)")


def _scores_csr(scores):
    """Scores as CSR with float32 data; a dense array ranks every entry."""
    if isinstance(scores, Rows):     # (sorted rows: no scipy for xml-calibrate's scores)
        R = summed_duplicates(scores)
        return _checked_scores(R.indptr, R.indices, R.data, R.shape)
    import scipy.sparse as sp
    if sp.issparse(scores):
        S = sp.csr_matrix(scores)
        if not S.has_canonical_format:
            S = S.copy()
            S.sum_duplicates()
    else:
        dense = np.asarray(scores, dtype=np.float32)
        if dense.ndim != 2:
            raise XmlkitError("scores must be a 2-d array or a sparse matrix")
        n, m = dense.shape
        S = sp.csr_matrix((dense.ravel(), np.tile(np.arange(m, dtype=np.int32), n),
                           np.arange(0, n * m + 1, m, dtype=np.int64)), shape=(n, m))
    return _checked_scores(S.indptr, S.indices, S.data, S.shape)


def _checked_scores(indptr, indices, data, shape):
    """_scores_csr's arrays, contiguous, the scores float32 and finite."""
    data = np.ascontiguousarray(data, dtype=np.float32)
    if not np.all(np.isfinite(data)):
        raise XmlkitError("scores contain NaN or inf")
    return indptr, np.ascontiguousarray(indices, dtype=np.int32), data, shape


def top_k(scores, k):
    """(labels, scores) of the k best stored entries per row (N×k each,
    padded with label −1 / score 0), ties broken by lower label index."""
    if int(k) < 1:
        raise XmlkitError(f"k must be at least 1, not {k}")
    indptr, indices, data, _ = _scores_csr(scores)
    from xmlkit._ext.ranking import top_k
    return top_k(indptr, indices, data, int(k))


def ranking_metrics(Y_true, scores, ks=DEFAULT_KS, inv_prop=None):
    """All ranking metrics at once, as fractions: ``{"P@1": …, "nDCG@1": …,
    "R@1": …}`` plus ``PSP@k`` and ``PSnDCG@k`` when ``inv_prop`` is given.

    ``scores`` may be sparse (only stored entries are ranked) or dense.
    """
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise XmlkitError("k values must be positive integers")
    Y = binary_csr(Y_true, "true labels")
    indptr, indices, data, shape = _scores_csr(scores)
    if shape != Y.shape:
        raise XmlkitError(f"scores are {shape[0]}×{shape[1]} but true labels "
                          f"{Y.shape[0]}×{Y.shape[1]}")
    if inv_prop is not None:
        inv_prop = np.asarray(inv_prop, dtype=np.float64)
        if inv_prop.shape != (Y.shape[1],):
            raise XmlkitError(f"{len(inv_prop)} inverse propensities for {Y.shape[1]} labels")
    # (no row ranks more than L labels: beyond k = L every sum stays as it
    # is at L, and P@k is the hits at L over k; so k is cut to L where the
    # top labels are taken, whatever k is asked for)
    K = min(ks[-1], max(1, Y.shape[1]))
    from xmlkit._ext.ranking import ROWS, ranking_sums, top_k
    top, _ = top_k(indptr, indices, data, K)
    acc = ranking_sums(top, Y.indptr, Y.indices, Y.shape[1], inv_prop)
    n = max(Y.shape[0], 1)
    out = {}
    # (the kernel's rows by name: a mean over points, or a ratio's
    # numerator and denominator, which need propensities)
    for row, name in enumerate(ROWS):
        if name.endswith(" den") or (name.endswith(" num") and inv_prop is None):
            continue
        for k in ks:
            at = min(k, K) - 1
            if name.endswith(" num"):
                d = acc[ROWS.index(name[:-4] + " den"), at]
                value = acc[row, at] / d if d > 0 else float("nan")
            else:
                value = acc[row, at] / n
                value = value * K / k if name == "P" and k > K else value
            out[f"{name.removesuffix(' num')}@{k}"] = float(value)
    return out


def _one(metric, Y_true, scores, k, inv_prop=None):
    ks = range(1, int(k) + 1)
    m = ranking_metrics(Y_true, scores, ks, inv_prop)
    return np.array([m[f"{metric}@{j}"] for j in ks])


def precision_at_k(Y_true, scores, k=5):
    """P@1..k as an array."""
    return _one("P", Y_true, scores, k)


def ndcg_at_k(Y_true, scores, k=5):
    """nDCG@1..k as an array."""
    return _one("nDCG", Y_true, scores, k)


def recall_at_k(Y_true, scores, k=5):
    """R@1..k as an array."""
    return _one("R", Y_true, scores, k)


def psprecision_at_k(Y_true, scores, inv_prop, k=5):
    """PSP@1..k as an array."""
    return _one("PSP", Y_true, scores, k, inv_prop)


def psndcg_at_k(Y_true, scores, inv_prop, k=5):
    """PSnDCG@1..k as an array."""
    return _one("PSnDCG", Y_true, scores, k, inv_prop)


def label_sets(scores, threshold=None):
    """Predicted label sets (binary csr) from a score matrix: the stored
    entries with score >= threshold, or every stored entry (threshold None)."""
    import scipy.sparse as sp
    indptr, indices, data, shape = _scores_csr(scores)
    keep = np.ones(len(data), bool) if threshold is None else data >= threshold
    rows = np.repeat(np.arange(shape[0]), np.diff(indptr))[keep]
    return sp.csr_matrix((np.ones(int(keep.sum()), np.float32), (rows, indices[keep])),
                         shape=shape)   # _scores_csr is canonical: no duplicates to merge


def set_metrics(Y_true, Y_pred):
    """Metrics of predicted label sets (binary, N×L) against the truth, as
    fractions: Hamming loss (wrong decisions / N·L), micro-F1 (2TP / (2TP + FP
    + FN) over all decisions), macro-F1 (mean over labels of the same per
    label) and example-F1 (mean over points of 2|y ∩ ŷ| / (|y| + |ŷ|)). A
    label or point with neither true nor predicted entries has F1 = 1 (the
    convention of mulan's F-measure: nothing to find, nothing wrong)."""
    Y = binary_csr(Y_true, "true labels")
    P = binary_csr(Y_pred, "predicted labels", strict=False)   # (any stored entry)
    if P.shape != Y.shape:
        raise XmlkitError(f"predictions are {P.shape[0]}×{P.shape[1]} but true labels "
                          f"{Y.shape[0]}×{Y.shape[1]}")
    n, L = Y.shape
    P.data[:] = 1
    Y.data[:] = 1
    hit = Y.multiply(P).tocsr()
    tp_l = np.asarray(hit.sum(axis=0)).ravel()
    true_l = np.asarray(Y.sum(axis=0)).ravel()
    pred_l = np.asarray(P.sum(axis=0)).ravel()
    tp, n_true, n_pred = tp_l.sum(), true_l.sum(), pred_l.sum()
    den_l = true_l + pred_l
    f1_l = np.where(den_l > 0, 2 * tp_l / np.maximum(den_l, 1), 1.0)
    tp_i = np.asarray(hit.sum(axis=1)).ravel()
    den_i = np.diff(Y.indptr) + np.diff(P.indptr)
    f1_i = np.where(den_i > 0, 2 * tp_i / np.maximum(den_i, 1), 1.0)
    return {"hamming_loss": float((n_true + n_pred - 2 * tp) / max(1, n * L)),
            "micro_f1": float(2 * tp / (n_true + n_pred)) if n_true + n_pred else 1.0,
            "macro_f1": float(f1_l.mean()) if L else float("nan"),
            "example_f1": float(f1_i.mean()) if n else float("nan")}


def frequency_bins(Y_train, n_bins=10):
    """Labels grouped by training frequency: bin of each label (0 = the
    rarest labels) and the bins' label counts and frequency ranges. Labels
    are sorted by frequency (ties by label index) and cut into n_bins groups
    of (nearly) equal numbers of labels."""
    Y = binary_csr(Y_train, "training labels", strict=False)
    freq = np.bincount(Y.indices, minlength=Y.shape[1])
    L = Y.shape[1]
    n_bins = max(1, min(int(n_bins), L))
    order = np.lexsort((np.arange(L), freq))
    bounds = np.linspace(0, L, n_bins + 1).round().astype(np.int64)
    bins = np.empty(L, np.int64)
    info = []
    for b in range(n_bins):
        members = order[bounds[b]:bounds[b + 1]]
        bins[members] = b
        info.append({"labels": int(len(members)), "min_freq": int(freq[members].min()),
                     "max_freq": int(freq[members].max()),
                     "train_positives": int(freq[members].sum())})
    return bins, info


def binned_precision(Y_true, scores, bins, n_bins, k, inv_prop=None):
    """What each bin of labels contributes to P@k (and PSP@k): the hits in
    the top k whose label is in bin b, over N·k (for PSP@k weighted by q and
    over the best achievable sum, as :func:`ranking_metrics`). Summed over
    the bins they give P@k and PSP@k. Returns {"P@k": array, "PSP@k": array
    or None, "hits": array of hit counts}."""
    k = int(k)
    Y = binary_csr(Y_true, "true labels")
    N = Y.shape[0]
    labels, _, _, hit = top_k_entries(Y, scores, k)
    hit_labels = labels[hit]
    b = np.asarray(bins)[hit_labels]
    hits = np.bincount(b, minlength=n_bins)
    out = {"hits": hits, "P@k": hits / (max(N, 1) * k), "PSP@k": None}
    if inv_prop is not None:
        q = np.asarray(inv_prop, dtype=np.float64)
        gained = np.bincount(b, weights=q[hit_labels], minlength=n_bins)
        # the best achievable: each point's k true labels of largest q
        row_of = np.repeat(np.arange(N), np.diff(Y.indptr))
        qs = q[Y.indices]
        order = np.lexsort((-qs, row_of))                  # by row, then q descending
        rank = np.arange(len(order)) - np.repeat(Y.indptr[:-1], np.diff(Y.indptr))
        den = float(qs[order][rank < k].sum())
        out["PSP@k"] = gained / den if den > 0 else np.full(n_bins, np.nan)
    return out


def top_k_entries(Y, scores, k, with_rows=False):
    """The stored entries of each point's top k, in row then rank order:
    (labels, scores, ranks from 0, relevant) arrays, and their rows with
    with_rows. Y: the truth as binary_csr or binary_rows gives it (rows sorted)."""
    N, L = Y.shape
    kc = min(int(k), max(1, L))         # (no row ranks more: see ranking_metrics)
    indptr, indices, data, shape = _scores_csr(scores)
    if shape != Y.shape:
        raise XmlkitError(f"scores are {shape[0]}×{shape[1]} but true labels {N}×{L}")
    from xmlkit._ext.ranking import top_k as top_of_rows
    top, val = top_of_rows(indptr, indices, data, kc)
    labels = top.ravel().astype(np.int64)
    stored = labels >= 0
    rows = np.repeat(np.arange(N, dtype=np.int64), kc)[stored]
    ranks = np.tile(np.arange(kc), N)[stored]
    labels = labels[stored]
    # (relevant: the entry's (row, label) key among the truth's, sorted keys)
    truth = np.repeat(np.arange(N, dtype=np.int64), np.diff(Y.indptr)) * L + Y.indices
    keys = rows * L + labels
    at = np.minimum(np.searchsorted(truth, keys), max(len(truth) - 1, 0))
    hit = truth[at] == keys if len(truth) else np.zeros(len(keys), bool)
    if with_rows:
        return labels, val.ravel()[stored], ranks, hit, rows
    return labels, val.ravel()[stored], ranks, hit


def top_entries(Y_true, scores, k):
    """(scores, relevant) of the stored entries of each point's top k, in
    row then rank order: what a calibration map is fitted on."""
    _, s, _, hit = top_k_entries(binary_rows(Y_true, "true labels"), scores, k)
    return s, hit


def calibration(Y_true, scores, k=5, n_bins=ECE_BINS):
    """ECE@k of the scores (see the module doc) and the bins behind it, the
    points of a reliability diagram: {"ECE": fraction (NaN without stored
    entries), "k": k, "bins": [{"n", "mean_score", "relevant"}, ...]}, the
    bins by increasing score."""
    return calibrations(Y_true, scores, [k], n_bins)[int(k)]


def calibrations(Y_true, scores, ks, n_bins=ECE_BINS):
    """calibration(Y_true, scores, k, n_bins) for each k of `ks`: k -> result,
    the top entries found once."""
    Y = binary_rows(Y_true, "true labels")
    ks = sorted({int(k) for k in ks})
    _, s_all, ranks, y_all = top_k_entries(Y, scores, ks[-1])
    # (sorted once: a stable sort keeps ties in row, then rank order, and
    # so does taking the entries of ranks below k from it)
    order = np.argsort(s_all, kind="stable")
    s_all, y_all, ranks = s_all[order].astype(np.float64), y_all[order], ranks[order]
    out = {}
    for k in ks:
        keep = ranks < k
        s, y = s_all[keep], y_all[keep].astype(np.float64)
        n = len(s)
        edges = (np.arange(int(n_bins) + 1) * n) // int(n_bins)
        sum_s = np.diff(np.concatenate([[0.0], np.cumsum(s)])[edges])
        sum_y = np.diff(np.concatenate([[0.0], np.cumsum(y)])[edges])
        counts = np.diff(edges)
        bins = [{"n": int(c), "mean_score": float(a / c), "relevant": float(b / c)}
                for a, b, c in zip(sum_s, sum_y, counts) if c > 0]
        out[k] = {"ECE": float(np.abs(sum_y - sum_s).sum() / n) if n else float("nan"),
                  "k": k, "bins": bins}
    return out
