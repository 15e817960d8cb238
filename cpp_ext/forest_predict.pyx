# Prediction with ensembles of sparse linear-split trees (FastXML family).
#
# Each point is routed down every tree (w·x >= 0 -> first child), and the
# label distributions of the leaves it reaches are averaged over the trees.

from libc.stdint cimport int32_t, int64_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair

cimport numpy as cnp

import numpy as np
from sparse_rows cimport RowsOut, emit_top, indptr_t, padded, rows_in, rows_open, rows_pieces

cnp.import_array()


cdef class ForestKernel:
    """Routes points down every tree and averages the label distributions of
    the leaves they reach. Built from a packed forest (see
    xmlkit.models.forest.PackedForest); read-only. Members: see
    xmlkit/_ext/forest_predict.pxd."""

    def __init__(self, roots, child, w_ptr, w_idx, w_val, dense_id, dense, l_ptr, l_idx,
                 l_val, int64_t n_features, int64_t n_labels, double bias,
                 bint ascending=False):
        n_nodes = np.shape(child)[0]
        if np.shape(roots)[0] < 1:
            raise ValueError("no trees")
        if np.shape(w_ptr)[0] != n_nodes + 1 or np.shape(l_ptr)[0] != n_nodes + 1 or \
                np.shape(dense_id)[0] != n_nodes:
            raise ValueError("node arrays of different lengths")
        self.roots = np.ascontiguousarray(roots, dtype=np.int32)
        self.child = np.ascontiguousarray(child, dtype=np.int32)
        self.w_ptr = np.ascontiguousarray(w_ptr, dtype=np.int64)
        self.dense_id = np.ascontiguousarray(dense_id, dtype=np.int64)
        self.l_ptr = np.ascontiguousarray(l_ptr, dtype=np.int64)
        # (entry arrays padded to one element: &a[0] is then always valid)
        self.w_idx = padded(w_idx, np.int32)
        self.w_val = padded(w_val, np.float32)
        self.l_idx = padded(l_idx, np.int32)
        self.l_val = padded(l_val, np.float32)
        d = np.ascontiguousarray(dense, dtype=np.float32).reshape(-1, n_features + 1)
        self.dense = d if d.shape[0] else np.zeros((1, n_features + 1), np.float32)
        self.n_features = n_features
        self.n_labels = n_labels
        self.bias = bias
        self.ascending = ascending

    def predict_rows(self, X, int64_t r0, int64_t r1, int k):
        """Scores of rows r0..r1-1 of X (CSR; indices < n_features) as CSR
        pieces (indptr from 0, indices, data): the mean over trees of the
        reached leaves' label values, labels ascending, only the k best per
        row when k > 0 (ties: lower label first)."""
        return self._rows(*rows_in(X, r0, r1), r0, r1, k)

    def _rows(self, const indptr_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
              int64_t r0, int64_t r1, int k):
        cdef RowsOut out
        rows_open(out)
        with nogil:
            _predict(self, &xp[0], &xi[0], &xv[0], r0, r1, k, out)
        return rows_pieces(out)


# A weight row longer than SEARCH_RATIO times the point's entries is searched
# (log of the row per entry of the point) rather than scanned.
cdef enum:
    SEARCH_RATIO = 16


cdef inline double _weight_of(const int32_t* wi, const float* wv, int64_t lo, int64_t hi,
                              int32_t feature) noexcept nogil:
    """The weight of `feature` in the ascending entries wi[lo:hi], or 0."""
    cdef int64_t mid, end = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if wi[mid] < feature:
            lo = mid + 1
        else:
            hi = mid
    return wv[lo] if lo < end and wi[lo] == feature else 0.0


cdef void _predict(ForestKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                   int64_t r0, int64_t r1, int topk, RowsOut& out) except + nogil:
    """ForestKernel.predict_rows without the GIL."""
    cdef vector[double] x, acc
    cdef vector[int32_t] touched
    cdef vector[pair[double, int32_t]] order
    cdef vector[pair[int32_t, float]] sel
    cdef int64_t r, j, k, d, nf = f.n_features
    cdef const float* row
    cdef Py_ssize_t t, n_trees = f.roots.shape[0]
    cdef int32_t node, l
    cdef double margin, inv_t = 1.0 / n_trees, bias = f.bias
    cdef const int32_t* child = &f.child[0, 0]
    cdef const int64_t* wp = &f.w_ptr[0]
    cdef const int32_t* wi = &f.w_idx[0]
    cdef const float* wv = &f.w_val[0]
    cdef const int64_t* lp = &f.l_ptr[0]
    cdef const int32_t* li = &f.l_idx[0]
    cdef const float* lv = &f.l_val[0]
    x.assign(nf + 1, 0.0)
    acc.assign(f.n_labels, 0.0)
    x[nf] = bias
    for r in range(r0, r1):
        for j in range(xp[r], xp[r + 1]):
            x[xi[j]] = xv[j]
        touched.clear()
        for t in range(n_trees):
            node = f.roots[t]
            while child[2 * node] >= 0:
                margin = 0.0
                d = f.dense_id[node]
                if d >= 0:
                    # long weight row kept dense: cost follows the point's
                    # non-zeros, not the row's
                    row = &f.dense[d, 0]
                    for j in range(xp[r], xp[r + 1]):
                        margin += row[xi[j]] * xv[j]
                    margin += row[nf] * bias
                elif f.ascending and \
                        wp[node + 1] - wp[node] > SEARCH_RATIO * (xp[r + 1] - xp[r] + 1):
                    # a row much longer than the point: look the point's
                    # features up in it (indices ascending, the bias last);
                    # the same sum, in the same order, as the dense path
                    for j in range(xp[r], xp[r + 1]):
                        margin += _weight_of(wi, wv, wp[node], wp[node + 1], xi[j]) * xv[j]
                    margin += _weight_of(wi, wv, wp[node], wp[node + 1], <int32_t> nf) * bias
                else:
                    for j in range(wp[node], wp[node + 1]):
                        margin += wv[j] * x[wi[j]]
                node = child[2 * node] if margin >= 0 else child[2 * node + 1]
            for j in range(lp[node], lp[node + 1]):
                l = li[j]
                if acc[l] == 0.0:
                    touched.push_back(l)
                acc[l] += lv[j]
        for j in range(xp[r], xp[r + 1]):
            x[xi[j]] = 0.0
        order.clear()
        for k in range(<int64_t> touched.size()):
            l = touched[k]
            order.push_back(pair[double, int32_t](-<double> (<float> (acc[l] * inv_t)), l))
            acc[l] = 0.0
        emit_top(order, topk, sel, out)



def scatter_rows(const int64_t[::1] ptr, const int32_t[::1] idx, const float[::1] val,
                 const int64_t[::1] rows, float[:, ::1] out):
    """out[k, idx[j]] = val[j] for the entries j of CSR row rows[k] (out
    zero-filled by the caller): dense copies of long weight rows."""
    cdef Py_ssize_t k
    cdef int64_t j
    if out.shape[0] != rows.shape[0]:
        raise ValueError("one output row per selected row")
    with nogil:
        for k in range(rows.shape[0]):
            for j in range(ptr[rows[k]], ptr[rows[k] + 1]):
                out[k, idx[j]] = val[j]
