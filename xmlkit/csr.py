"""A bare CSR matrix (index pointers, indices, values, shape) that the
command-line paths pass around instead of ``scipy.sparse.csr_matrix``.

Importing scipy.sparse is a large share of a short ``xml-predict`` run;
the readers, the writer and the predictors accept a
:class:`Rows` or any scipy sparse matrix, and scipy is imported only when a
scipy matrix is asked for (:meth:`Rows.to_scipy`) or given.
"""
import collections
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from xmlkit.errors import XmlkitError


class Rows:
    """CSR arrays with sorted column indices: ``indptr`` (int32/int64),
    ``indices`` (int32), ``data`` (float32), ``shape`` (n_rows, n_cols)."""

    __slots__ = ("indptr", "indices", "data", "shape")

    def __init__(self, indptr, indices, data, shape):
        self.indptr, self.indices, self.data = indptr, indices, data
        self.shape = (int(shape[0]), int(shape[1]))

    @property
    def nnz(self):
        return int(self.indptr[-1])

    def to_scipy(self):
        """The same matrix as a ``scipy.sparse.csr_matrix`` (no copy)."""
        import scipy.sparse as sp
        M = sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape, copy=False)
        M.has_sorted_indices = True
        return M


def as_rows(M, name="matrix", dtype=np.float32):
    """A :class:`Rows` view of a Rows, a scipy sparse matrix or a dense array:
    sorted indices, contiguous int32 indices and ``dtype`` values."""
    if isinstance(M, Rows):
        if M.indices.dtype == np.int32 and M.data.dtype == dtype:
            return M
        return Rows(M.indptr, M.indices.astype(np.int32), M.data.astype(dtype), M.shape)
    import scipy.sparse as sp
    if not sp.issparse(M):
        M = np.asarray(M)
        if M.ndim != 2:
            raise XmlkitError(f"{name}: expected a 2-d matrix, got {M.ndim} dimension(s)")
    M = sp.csr_matrix(M)
    if not M.has_sorted_indices:
        M = M.sorted_indices()
    if M.indptr.dtype not in (np.int32, np.int64):
        raise XmlkitError(f"{name}: unsupported index type {M.indptr.dtype}")
    return Rows(np.ascontiguousarray(M.indptr), np.ascontiguousarray(M.indices, dtype=np.int32),
                np.ascontiguousarray(M.data, dtype=dtype), M.shape)


def summed_duplicates(R):
    """Rows R (sorted rows) with the duplicate entries of a row added up, as
    scipy's sum_duplicates does: R itself when it has none (scipy is
    imported only when it has)."""
    if R.nnz < 2:
        return R
    same = R.indices[1:] == R.indices[:-1]        # entry j + 1 repeats entry j
    starts = R.indptr[1:-1]
    same[starts[(starts > 0) & (starts < R.nnz)] - 1] = False    # not across rows
    if not same.any():
        return R
    S = R.to_scipy().copy()
    S.sum_duplicates()
    return Rows(S.indptr.astype(np.int64), S.indices.astype(np.int32), S.data, S.shape)


def without_zeros(R):
    """Rows R with its explicitly stored zeros dropped (R itself when it
    holds none)."""
    if not R.nnz or R.data.all():
        return R
    keep = R.data != 0
    counts = np.bincount(np.repeat(np.arange(R.shape[0]), np.diff(R.indptr))[keep],
                         minlength=R.shape[0])
    ptr = np.zeros(R.shape[0] + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    return Rows(ptr, R.indices[keep], R.data[keep], R.shape)


def model_rows(X, n_features):
    """X (what as_rows takes) as Rows of "the data", refused when it has more
    features than the model's n_features: what every predict starts with."""
    R = as_rows(X, "the data")
    if R.shape[1] > n_features:
        raise XmlkitError(f"the data have {R.shape[1]} features but the model was "
                          f"trained on {n_features}")
    return R


def like(template, rows):
    """``rows`` as the kind of matrix ``template`` is: a Rows for a Rows,
    else a scipy csr_matrix (what the Python API returns)."""
    return rows if isinstance(template, Rows) else rows.to_scipy()


def row_scales(R):
    """What scales each row to unit L2 length (float64; 1 for an empty row)."""
    sq = np.bincount(np.repeat(np.arange(R.shape[0]), np.diff(R.indptr)),
                     weights=R.data.astype(np.float64) ** 2, minlength=R.shape[0])
    return 1 / np.sqrt(np.where(sq > 0, sq, 1))


def unit_rows(R, scale=None):
    """Rows scaled to unit L2 length (empty rows stay empty); scale: their
    row_scales, when known."""
    scale = row_scales(R) if scale is None else scale
    return Rows(R.indptr, R.indices,
                (R.data * np.repeat(scale, np.diff(R.indptr))).astype(np.float32), R.shape)


def with_bias(R, bias):
    """CSR arrays of R with a last column `bias` appended (numpy only)."""
    n, d = R.shape
    counts = np.diff(R.indptr) + 1
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    idx = np.empty(ptr[-1], np.int32)
    val = np.empty(ptr[-1], np.float32)
    last = ptr[1:] - 1
    mask = np.ones(ptr[-1], bool)
    mask[last] = False
    idx[mask], val[mask] = R.indices, R.data
    idx[last], val[last] = d, bias
    return ptr, idx, val


def transpose_rows(R, n_cols):
    """CSR arrays of the transpose of Rows R (numpy only, stable: the rows of
    a column ascending): (ptr int64, row indices int32, values)."""
    order = np.argsort(R.indices, kind="stable")
    rows = np.repeat(np.arange(R.shape[0], dtype=np.int32), np.diff(R.indptr))
    ptr = np.zeros(n_cols + 1, np.int64)
    np.cumsum(np.bincount(R.indices, minlength=n_cols), out=ptr[1:])
    return ptr, rows[order], R.data[order]


# -- blocks of rows: scoring in chunks on threads, stacking the pieces
#: rows a scoring kernel handles per call
CHUNK_ROWS = 256
#: weight rows with at least n_cols / DENSE_FRACTION entries get dense copies
DENSE_FRACTION = 4


def cap_rows(R, k):
    """Rows R keeping the k best entries of each row (ties to the lower
    column), in their order: a label set cut to its k most likely labels."""
    from xmlkit._ext.ranking import cap_rows as capped
    if np.diff(R.indptr).max(initial=0) <= k:
        return R
    ptr, idx, val = capped(R.indptr, np.ascontiguousarray(R.indices, dtype=np.int32),
                           np.ascontiguousarray(R.data, dtype=np.float32), int(k))
    return Rows(ptr, idx, val, R.shape)


def row_blocks(n, size):
    """(r0, r1) of the blocks of `size` rows covering rows 0..n-1."""
    return [(r, min(n, r + size)) for r in range(0, n, size)]


def score_rows(run, n, n_cols, threads=1, progress=None, chunk=CHUNK_ROWS):
    """Rows 0..n-1 scored in chunks of `chunk` rows by `run(r0, r1)` (a nogil
    kernel returning CSR pieces), on `threads` threads; the pieces stacked
    into one Rows n × n_cols. `progress(rows)` after each chunk."""
    return stack_rows(list(piece_rows(run, n, threads, progress, chunk)), (n, n_cols))


def piece_rows(run, n, threads=1, progress=None, chunk=CHUNK_ROWS, finish=None, ahead=2):
    """The chunks of score_rows one by one, in order: finish(r0, r1, run(r0,
    r1)) (default: the CSR pieces) made on the threads, at most `ahead`
    chunks per thread ahead of the one the caller holds, so that a caller
    writing each as it comes holds a few chunks, not all the rows."""
    def one(b):
        out = run(*b)
        if finish is not None:
            out = finish(b[0], b[1], out)
        if progress is not None:
            progress(b[1] - b[0])
        return out
    bounds = row_blocks(n, chunk)
    if threads < 2 or len(bounds) < 2:
        for b in bounds:
            yield one(b)
        return
    made = collections.deque()
    with ThreadPoolExecutor(threads) as pool:
        try:
            for b in bounds:
                made.append(pool.submit(one, b))
                if len(made) > ahead * threads:
                    yield made.popleft().result()
            while made:
                yield made.popleft().result()
        finally:                # (a caller gone or a chunk failed: start no more)
            for f in made:
                f.cancel()


def stack_rows(parts, shape):
    """One Rows of `shape` from CSR pieces (indptr from 0, indices, data) of
    consecutive row blocks, in order."""
    if not parts:
        return Rows(np.zeros(shape[0] + 1, np.int64), np.zeros(0, np.int32),
                    np.zeros(0, np.float32), shape)
    ptrs, off = [np.zeros(1, np.int64)], 0
    for p in parts:
        ptrs.append(p[0][1:] + off)
        off += len(p[1])
    return Rows(np.concatenate(ptrs), np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]), shape)


def rows_ascending(ptr, idx):
    """Whether the indices of every CSR row are strictly ascending (xmlkit's
    trees are; a C++ tool's file need not be). In one pass, without
    temporaries the size of the tree."""
    from xmlkit._ext.forest_predict import ascending_rows
    return ascending_rows(np.ascontiguousarray(ptr, dtype=np.int64),
                          np.ascontiguousarray(idx, dtype=np.int32))


def dense_rows(ptr, idx, val, n_cols, fraction=DENSE_FRACTION, eligible=None):
    """Dense copies of the CSR weight rows holding at least n_cols/fraction
    entries (the nodes near the roots), so that routing a point through them
    costs the point's non-zeros, not the row's; at most doubles their memory.
    `eligible` (bool per row) restricts the copies further.
    Returns (dense_id: row -> its dense row or -1, dense float32 matrix)."""
    counts = np.diff(ptr)
    long_rows = counts * fraction >= n_cols
    if eligible is not None:
        long_rows &= eligible
    rows = np.flatnonzero(long_rows).astype(np.int64)
    dense_id = np.full(len(counts), -1, dtype=np.int64)
    dense_id[rows] = np.arange(len(rows))
    dense = np.zeros((len(rows), n_cols), dtype=np.float32)
    from xmlkit._ext.forest_predict import scatter_rows
    scatter_rows(np.ascontiguousarray(ptr, dtype=np.int64), idx, val, rows, dense)
    return dense_id, dense
