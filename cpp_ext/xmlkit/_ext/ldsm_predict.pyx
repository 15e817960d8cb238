# LdSM prediction: a point descends every tree to possibly several leaves
# (every child whose regressor margin is >= threshold, else the first child
# at the maximum margin); its score is the mean over trees of the mean of
# the reached leaves' label values (a label's share of the leaf's training
# points; folders written before adagrad_prior existed hold histograms
# normalized to sum 1). A row the leaves give fewer than k labels is filled
# up to k from the forest's label marginal (labels by the sum of the leaves'
# values), each filled label scored below every label the leaves gave.

from libc.stdint cimport int32_t, int64_t
from libc.math cimport INFINITY
from libcpp.vector cimport vector
from libcpp.utility cimport pair

cimport numpy as cnp

import numpy as np
from sparse_rows cimport (RowsOut, TopScratch, emit_scores, fill_vector, indptr_t, padded, rows_in,
                          rows_open, rows_pieces)

cnp.import_array()


cdef int _reach(const LdsmTree* tv, int M, int64_t d, double bias, double threshold,
                const int32_t* xi, const float* xv, int64_t q0, int64_t q1, const float* x,
                vector[int32_t]& stack, vector[int32_t]& leaves) except -1 nogil:
    """leaves := the leaves of tree tv that the row reaches (its entries
    xi, xv[q0:q1], also dense in x, whose last entry is the bias): every
    child whose margin is >= threshold, else the first child at the maximum
    margin; leaves in the order of a depth-first walk."""
    cdef int j, best
    cdef int32_t node
    cdef int64_t row, dr, q
    cdef double z, zmax
    cdef bint any_
    cdef const float* drow
    leaves.clear()
    stack.clear()
    stack.push_back(0)
    while stack.size():
        node = stack.back()
        stack.pop_back()
        if tv.first_child[node] < 0:
            leaves.push_back(node)
            continue
        any_ = False
        best = 0
        zmax = -INFINITY
        # children pushed in reverse so that they are visited in order
        for j in range(M - 1, -1, -1):
            row = tv.reg_row[node] + j
            z = 0
            dr = tv.dense_id[row]
            if dr >= 0:
                drow = tv.dense + dr * d
                for q in range(q0, q1):
                    z += drow[xi[q]] * xv[q]
                z += drow[d - 1] * bias
            else:
                for q in range(tv.reg_ptr[row], tv.reg_ptr[row + 1]):
                    z += tv.reg_val[q] * x[tv.reg_idx[q]]
            if z >= zmax:
                zmax, best = z, j
            if z >= threshold:
                stack.push_back(tv.first_child[node] + j)
                any_ = True
        if not any_:
            stack.push_back(tv.first_child[node] + best)
    return 0


cdef int _emit(LdsmKernel f, vector[double]& acc, vector[int32_t]& touched, int topk,
               vector[int32_t]& labs, vector[float]& vals, TopScratch& top,
               RowsOut& out) except -1 nogil:
    """Write the row whose label scores acc holds (at the labels `touched`),
    filled up to topk labels from the forest's marginal, each filled label
    below every label the leaves gave; acc is zero again after."""
    cdef const int32_t* fill = &f.fill_idx[0]
    cdef const float* fill_val = &f.fill_val[0]
    cdef size_t a, n_fill = <size_t> f.n_fill
    cdef int32_t lab
    cdef float score
    cdef double lowest = INFINITY, floor
    labs.clear()
    vals.clear()
    for a in range(touched.size()):
        lab = touched[a]
        score = <float> acc[lab]
        labs.push_back(lab)
        vals.push_back(score)
        if score < lowest:
            lowest = score
    if topk > 0 and labs.size() < <size_t> topk:
        # below half the row's lowest score (1e-3 when the leaves gave none)
        floor = 0.5 * lowest if touched.size() else 1e-3
        a = 0
        while labs.size() < <size_t> topk and a < n_fill:
            lab = fill[a]
            if acc[lab] == 0:
                score = <float> (floor * fill_val[a])
                labs.push_back(lab)
                vals.push_back(score)
            a += 1
    for a in range(touched.size()):
        acc[touched[a]] = 0
    emit_scores(labs.data(), vals.data(), labs.size(), topk, False, top, out)
    return 0


cdef void _predict(LdsmKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                   int64_t r0, int64_t r1, int topk, RowsOut& out) except * nogil:
    """LdsmKernel.predict_rows without the GIL."""
    cdef int64_t d = f.d, n_labels = f.n_labels
    cdef int n_trees = <int> f.trees.size()
    cdef const LdsmTree* tv
    cdef vector[float] x
    cdef vector[double] acc
    cdef vector[int32_t] stack, leaves, touched, labs
    cdef vector[float] vals
    cdef TopScratch top
    cdef int64_t r, q
    cdef int t
    cdef int32_t lab
    cdef size_t a
    cdef double share
    fill_vector(x, d, 0.0)
    fill_vector(acc, n_labels, 0.0)
    for r in range(r0, r1):
        for q in range(xp[r], xp[r + 1]):
            x[xi[q]] = xv[q]
        x[d - 1] = f.bias
        touched.clear()
        for t in range(n_trees):
            tv = &f.trees[t]
            _reach(tv, f.M, d, f.bias, f.threshold, xi, xv, xp[r], xp[r + 1], x.data(),
                   stack, leaves)
            share = 1.0 / (leaves.size() * n_trees)
            for a in range(leaves.size()):
                for q in range(tv.l_ptr[leaves[a]], tv.l_ptr[leaves[a] + 1]):
                    lab = tv.l_idx[q]
                    if acc[lab] == 0:
                        touched.push_back(lab)
                    acc[lab] += tv.l_val[q] * share
        for q in range(xp[r], xp[r + 1]):
            x[xi[q]] = 0
        _emit(f, acc, touched, topk, labs, vals, top, out)


cdef class LdsmKernel:
    """An LdSM forest: each tree's arrays read where they lie (a tree's dict
    of arrays: in memory, or views of its mapped file, checked), with dense
    copies of its long regressor rows, and the descent of points through
    it. Read-only once built. Members: see ldsm_predict.pxd."""

    def __init__(self, trees, fill_idx, fill_val, int M, int64_t d, double bias,
                 int64_t n_labels, double threshold):
        """trees: dicts of first_child, reg_row, reg_ptr, reg_idx, reg_val,
        l_ptr, l_idx, l_val (see xmlkit.models.ldsm) and dense_id, dense
        (xmlkit.models.ldsm.dense_regressors); fill_idx, fill_val: the
        forest's label marginal (xmlkit.models.ldsm.label_marginal)."""
        cdef LdsmTree v
        cdef const int32_t[::1] fc, rr, ri, li
        cdef const int64_t[::1] rp, di, lp
        cdef const float[::1] rv, lv
        cdef const float[:, ::1] dense
        if not trees:
            raise ValueError("no trees")
        self.refs = []
        for tree in trees:
            fc = np.ascontiguousarray(tree["first_child"], dtype=np.int32)
            rr = np.ascontiguousarray(tree["reg_row"], dtype=np.int32)
            rp = np.ascontiguousarray(tree["reg_ptr"], dtype=np.int64)
            ri, rv = padded(tree["reg_idx"], np.int32), padded(tree["reg_val"], np.float32)
            di = padded(tree["dense_id"], np.int64)
            dense = np.ascontiguousarray(tree["dense"], dtype=np.float32).reshape(-1, d) \
                if np.size(tree["dense"]) else np.zeros((1, d), np.float32)
            lp = np.ascontiguousarray(tree["l_ptr"], dtype=np.int64)
            li, lv = padded(tree["l_idx"], np.int32), padded(tree["l_val"], np.float32)
            if fc.shape[0] < 1 or rr.shape[0] != fc.shape[0] or lp.shape[0] != fc.shape[0] + 1 \
                    or di.shape[0] < rp.shape[0] - 1:
                raise ValueError("a tree's arrays disagree in length")
            self.refs.append((fc, rr, rp, ri, rv, di, dense, lp, li, lv))
            v.first_child, v.reg_row, v.reg_ptr, v.reg_idx, v.reg_val = (&fc[0], &rr[0], &rp[0],
                                                                         &ri[0], &rv[0])
            v.dense_id, v.dense, v.l_ptr, v.l_idx, v.l_val = (&di[0], &dense[0, 0], &lp[0],
                                                              &li[0], &lv[0])
            self.trees.push_back(v)
        self.n_fill = np.shape(fill_idx)[0]
        self.fill_idx = padded(fill_idx, np.int32)
        self.fill_val = padded(fill_val, np.float32)
        self.M = M
        self.d = d
        self.bias = bias
        self.n_labels = n_labels
        self.threshold = threshold

    def predict_rows(self, X, int64_t r0, int64_t r1, int k):
        """Scores of rows r0..r1-1 of X (CSR; the points without the bias) as
        CSR pieces (indptr from 0, indices, data), labels ascending, the k
        best per row when k > 0."""
        return self._rows(*rows_in(X, r0, r1), r0, r1, k)

    def _rows(self, const indptr_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
              int64_t r0, int64_t r1, int k):
        cdef RowsOut out
        rows_open(out)
        with nogil:
            _predict(self, &xp[0], &xi[0], &xv[0], r0, r1, k, out)
        return rows_pieces(out)
