# Prediction with ensembles of sparse linear-split trees (FastXML family).
#
# Each point is routed down every tree (w·x >= 0 -> first child), and the
# label distributions of the leaves it reaches are averaged over the trees.
#
# Routing runs a tree at a time over a block of points, as the C++ tool does:
# each internal node holds the block's points that reach it, computes their
# margins and hands them to its children. A node's weights are either
# scattered into a dense vector once for all its points (cost: the row's
# length plus the points' non-zeros), or, when only a few points reach a
# long row, looked up feature by feature (cost: the points' non-zeros times
# the log of the row's length). Both give the same margin, summed in the
# point's feature order, so that scores do not depend on the block a point
# is scored in (threads, pieces, Dask blocks).

from libc.math cimport log2
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

    def __init__(self, roots, child, w_ptr, w_idx, w_val, l_ptr, l_idx, l_val,
                 int64_t n_features, int64_t n_labels, double bias, bint ascending=False):
        n_nodes = np.shape(child)[0]
        if np.shape(roots)[0] < 1:
            raise ValueError("no trees")
        if np.shape(w_ptr)[0] != n_nodes + 1 or np.shape(l_ptr)[0] != n_nodes + 1:
            raise ValueError("node arrays of different lengths")
        self.roots = np.ascontiguousarray(roots, dtype=np.int32)
        self.child = np.ascontiguousarray(child, dtype=np.int32)
        self.w_ptr = np.ascontiguousarray(w_ptr, dtype=np.int64)
        self.l_ptr = np.ascontiguousarray(l_ptr, dtype=np.int64)
        # (entry arrays padded to one element: &a[0] is then always valid)
        self.w_idx = padded(w_idx, np.int32)
        self.w_val = padded(w_val, np.float32)
        self.l_idx = padded(l_idx, np.int32)
        self.l_val = padded(l_val, np.float32)
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


cdef struct Span:
    int32_t node                         # a node of the tree being routed
    int64_t lo, hi                       # its points: order[lo:hi]


cdef void _route(ForestKernel f, Py_ssize_t t, const indptr_t* xp, const int32_t* xi,
                 const float* xv, int64_t r0, int64_t n, vector[int32_t]& leaf,
                 vector[float]& dense, vector[int32_t]& order, vector[int32_t]& spare,
                 vector[Span]& todo) except + nogil:
    """leaf[i * n_trees + t] = the leaf of tree t that point r0 + i reaches,
    for i < n. `dense` (n_features + 1 zeros) is left zeroed; `order`,
    `spare` and `todo` are scratch space."""
    cdef int64_t i, j, e, lo, hi, a, b, row_len, entries
    cdef int32_t node, p
    cdef int64_t nf = f.n_features
    cdef Py_ssize_t n_trees = f.roots.shape[0]
    cdef double margin, bias = f.bias
    cdef bint scatter
    cdef const int32_t* child = &f.child[0, 0]
    cdef const int64_t* wp = &f.w_ptr[0]
    cdef const int32_t* wi = &f.w_idx[0]
    cdef const float* wv = &f.w_val[0]
    cdef float* w = dense.data()
    order.resize(n)
    spare.resize(n)
    for i in range(n):
        order[i] = <int32_t> i
    todo.clear()
    todo.push_back(Span(f.roots[t], 0, n))
    while todo.size():
        node, lo, hi = todo.back().node, todo.back().lo, todo.back().hi
        todo.pop_back()
        if lo == hi:
            continue
        if child[2 * node] < 0:
            for i in range(lo, hi):
                leaf[order[i] * n_trees + t] = node
            continue
        row_len = wp[node + 1] - wp[node]
        entries = 0
        for i in range(lo, hi):
            entries += xp[r0 + order[i] + 1] - xp[r0 + order[i]] + 1
        # scatter the row once, or look each of the points' features up in it
        scatter = not f.ascending or 2 * row_len <= entries * log2(<double> row_len + 2)
        if scatter:
            for j in range(wp[node], wp[node + 1]):
                w[wi[j]] = wv[j]
        a, b = lo, hi
        for i in range(lo, hi):
            p = order[i]
            margin = 0.0
            if scatter:
                for e in range(xp[r0 + p], xp[r0 + p + 1]):
                    margin += <double> w[xi[e]] * xv[e]
                margin += <double> w[nf] * bias
            else:
                for e in range(xp[r0 + p], xp[r0 + p + 1]):
                    margin += _weight_of(wi, wv, wp[node], wp[node + 1], xi[e]) * xv[e]
                margin += _weight_of(wi, wv, wp[node], wp[node + 1], <int32_t> nf) * bias
            # first child's points to the front, the second's to the back
            if margin >= 0:
                spare[a] = p
                a += 1
            else:
                b -= 1
                spare[b] = p
        if scatter:
            for j in range(wp[node], wp[node + 1]):
                w[wi[j]] = 0.0
        for i in range(lo, hi):
            order[i] = spare[i]
        todo.push_back(Span(child[2 * node + 1], a, hi))
        todo.push_back(Span(child[2 * node], lo, a))


cdef void _predict(ForestKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                   int64_t r0, int64_t r1, int topk, RowsOut& out) except + nogil:
    """ForestKernel.predict_rows without the GIL: route the block through
    each tree, then add up each point's leaves, tree by tree."""
    cdef vector[double] acc
    cdef vector[float] dense
    cdef vector[int32_t] leaf, order, spare, touched
    cdef vector[Span] todo
    cdef vector[pair[double, int32_t]] ranked
    cdef vector[pair[int32_t, float]] sel
    cdef int64_t i, j, k, n = r1 - r0
    cdef Py_ssize_t t, n_trees = f.roots.shape[0]
    cdef int32_t node, l
    cdef double inv_t = 1.0 / n_trees
    cdef const int64_t* lp = &f.l_ptr[0]
    cdef const int32_t* li = &f.l_idx[0]
    cdef const float* lv = &f.l_val[0]
    dense.assign(f.n_features + 1, 0.0)
    leaf.resize(n * n_trees)
    for t in range(n_trees):
        _route(f, t, xp, xi, xv, r0, n, leaf, dense, order, spare, todo)
    acc.assign(f.n_labels, 0.0)
    for i in range(n):
        touched.clear()
        for t in range(n_trees):
            node = leaf[i * n_trees + t]
            for j in range(lp[node], lp[node + 1]):
                l = li[j]
                if acc[l] == 0.0:
                    touched.push_back(l)
                acc[l] += lv[j]
        ranked.clear()
        for k in range(<int64_t> touched.size()):
            l = touched[k]
            ranked.push_back(pair[double, int32_t](-<double> (<float> (acc[l] * inv_t)), l))
            acc[l] = 0.0
        emit_top(ranked, topk, sel, out)


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
