"""A bare CSR matrix (index pointers, indices, values, shape) that the
command-line paths pass around instead of ``scipy.sparse.csr_matrix``.

Importing scipy.sparse costs ~0.15 s, a quarter of a whole ``xml-predict``
run on Bibtex; the readers, the writer and the predictors accept a
:class:`Rows` or any scipy sparse matrix, and scipy is imported only when a
scipy matrix is asked for (:meth:`Rows.to_scipy`) or given.
"""
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


def unit_rows(R):
    """Rows scaled to unit L2 length (empty rows stay empty)."""
    counts = np.diff(R.indptr)
    sq = np.bincount(np.repeat(np.arange(R.shape[0]), counts),
                     weights=R.data.astype(np.float64) ** 2, minlength=R.shape[0])
    scale = 1 / np.sqrt(np.where(sq > 0, sq, 1))
    return Rows(R.indptr, R.indices, (R.data * np.repeat(scale, counts)).astype(np.float32),
                R.shape)
