"""Models stored as one array file (the embedding and the linear one-vs-all)
whose scores are computed densely by blocks of rows: the shared save/load
and the block loop that keeps only the selected entries of each block."""
import numpy as np

from xmlkit.csr import Rows, stack_rows
from xmlkit.errors import XmlkitError
from xmlkit.models.family import ModelBase

ROW_BLOCK = 2048      # points scored at once (fewer with many labels:
BLOCK_ENTRIES = 1 << 22   # at most this many dense scores per block, 32 MB)


MIN_POSITIVES = 5      # labels with fewer hold-out positives use the pooled threshold
#: labels whose hold-out probabilities are computed at a time for the thresholds
THRESHOLD_COLUMNS = 1024


def best_f1(scores, truth):
    """For each column: the best F1 over cuts of the points ranked by score
    (F1(r) = 2 TP(r) / (r + P)), on dense blocks (points × labels)."""
    order = np.argsort(-scores, axis=0, kind="stable")
    tp = np.cumsum(np.take_along_axis(truth, order, axis=0), axis=0)
    r = np.arange(1, scores.shape[0] + 1)[:, None]
    pos = truth.sum(axis=0)
    f1 = 2 * tp / (r + pos[None, :])
    return f1.max(axis=0), pos


def fit_thresholds_blocked(probabilities, Y, n_labels, columns=None):
    """Per-label thresholds F*_l / 2 from hold-out truth Y (csr, n × L) and
    their probabilities, asked for `columns` labels at a time as dense
    blocks (probabilities(c0, c1): n × (c1 - c0)), so that memory stays
    O(n × columns) at many labels. Labels with fewer than MIN_POSITIVES
    hold-out positives get the pooled (micro) F*/2: the best F1 of a rule
    "score >= s" over every (point, label) pair, s among the positives'
    scores (a cut elsewhere only adds negatives)."""
    L = n_labels
    columns = columns or L
    Yc = Y.tocsc()
    f_star, pos = np.zeros(L), np.zeros(L)
    pos_scores = []
    for c0 in range(0, L, columns):
        c1 = min(L, c0 + columns)
        P = probabilities(c0, c1)
        T = Yc[:, c0:c1].toarray().astype(np.float64)
        f_star[c0:c1], pos[c0:c1] = best_f1(P, T)
        pos_scores.append(P[T > 0])
    s = np.sort(np.concatenate(pos_scores))[::-1]           # positives, best first
    if len(s) == 0:
        return np.where(pos >= MIN_POSITIVES, f_star / 2, 0.0)
    # pairs scored >= each positive's score: a second pass over the blocks
    at_least = np.zeros(len(s), np.int64)
    for c0 in range(0, L, columns):
        flat = np.sort(probabilities(c0, min(L, c0 + columns)), axis=None)
        at_least += flat.size - np.searchsorted(flat, s, side="left")
    tp = np.searchsorted(-s, -s, side="right")              # positives scored >= s_i
    pooled = np.max(2 * tp / (at_least + len(s)))
    return np.where(pos >= MIN_POSITIVES, f_star / 2, pooled / 2)


def sigmoid(z):
    """1 / (1 + e^-z) elementwise, without overflow (the one logistic
    function of the array models)."""
    return 0.5 * (1 + np.tanh(0.5 * z))


def coo_rows(rows, cols, vals, shape):
    """Rows from (row, column, value) triples."""
    order = np.lexsort((cols, rows))
    ptr = np.zeros(shape[0] + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=shape[0]), out=ptr[1:])
    return Rows(ptr, cols[order].astype(np.int32), vals[order].astype(np.float32), shape)


def top_k_mask(P, k):
    """The k best entries of each row of P, ties to the lower column."""
    order = np.argsort(-P, axis=1, kind="stable")[:, :k]
    keep = np.zeros_like(P, dtype=bool)
    np.put_along_axis(keep, order, True, axis=1)
    return keep


def selector(k=None, threshold=None):
    """The entries a block keeps: those >= threshold (a number, or one per
    column), else the k best of each row, else all of them."""
    if threshold is not None:
        return lambda P: P >= threshold
    if k is not None:
        return lambda P: top_k_mask(P, k) if k < P.shape[1] else np.ones_like(P, dtype=bool)
    return lambda P: np.ones_like(P, dtype=bool)


def scored_blocks(n, n_cols, probabilities, select, progress=None):
    """Rows n × n_cols from dense blocks: probabilities(r0, r1) gives the
    block, select(P) the boolean mask of the entries to keep."""
    parts = []
    step = max(1, min(ROW_BLOCK, BLOCK_ENTRIES // max(1, n_cols)))
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        P = probabilities(r0, r1)
        r, c = np.nonzero(select(P))
        part = coo_rows(r, c, P[r, c], (r1 - r0, n_cols))
        parts.append((part.indptr, part.indices, part.data))
        if progress is not None:
            progress(r1 - r0)
    return stack_rows(parts, (n, n_cols))


class ArrayModel(ModelBase):
    """A model whose state is `self.arrays_`, saved as `<ARRAYS>.npz`; a
    subclass sets ARRAYS and checks loaded arrays in _check_arrays."""

    ARRAYS = None
    MIN_POINTS = 2

    def _require_fitted(self):
        if getattr(self, "arrays_", None) is None:
            raise XmlkitError("the model is not trained (fit or load it first)")

    def fit(self, X, Y):
        """Fit the model; returns self."""
        X, Y = self.start_fit(X, Y)
        self._fit_arrays(X, Y)
        return self

    def _fit_arrays(self, X, Y, progress=None, log=None, executor=None):
        """The fit after start_fit (also by fit_parts, for xmlkit.driver): set
        arrays_; progress(n) as work is done, log(message); `executor`
        (xmlkit.cluster) runs the family's tasks, if it has any."""
        raise NotImplementedError

    def _check_arrays(self, a, name):
        """Raise XmlkitError (naming file `name`) unless the arrays `a` read
        from disk are complete and consistent with the model's shapes."""
        raise NotImplementedError

    # -- the folder protocol (xmlkit.models.protocol): one part,
    # the whole model, trained again by a rerun
    PART = "array file"

    def part_keys(self):
        return [self.ARRAYS]

    def part_file(self, key):
        return key

    def fit_parts(self, X, Y, todo, after=None, progress=None, log=None, executor=None):
        if not todo:
            return
        self._fit_arrays(X, Y, progress, log, executor)
        if after is not None:
            after(self.ARRAYS, self.arrays_)
        yield self.ARRAYS, self.arrays_

    def encode_part(self, arrays, compact=False):
        return arrays

    def decode_part(self, arrays, name):
        arrays = dict(arrays)
        self._check_arrays(arrays, name)
        return arrays

    def parts(self):
        return {self.ARRAYS: self.arrays_}

    def set_parts(self, parts):
        self.arrays_ = parts.get(self.ARRAYS)

    def require_whole(self):
        self._require_fitted()
