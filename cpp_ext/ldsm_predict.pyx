# LdSM prediction: a point descends every tree to possibly several leaves
# (every child whose regressor margin is >= threshold, else the first child
# at the maximum margin); its score is the mean over trees of the mean of
# the reached leaves' normalized label histograms.

from libc.stdint cimport int32_t, int64_t
from libc.math cimport INFINITY
from libcpp.vector cimport vector
from libcpp.utility cimport pair

cimport numpy as cnp

import numpy as np
from sparse_rows cimport check_row_range, csr_pieces, emit_top, padded

cnp.import_array()


cdef void _predict(const int64_t* xp, const int32_t* xi, const float* xv, int64_t r0,
                   int64_t r1, int64_t d, double bias, const int32_t* roots, int n_trees,
                   int M, const int32_t* first_child, const int32_t* reg_row,
                   const int64_t* rp, const int32_t* ri, const float* rv,
                   const int64_t* dense_id, const float* dense,
                   const int64_t* lp, const int32_t* li, const float* lv,
                   int64_t n_labels, double threshold, int topk,
                   vector[int64_t]& out_ptr, vector[int32_t]& out_idx,
                   vector[float]& out_val) noexcept nogil:
    cdef vector[float] x
    cdef vector[double] acc
    cdef vector[int32_t] stack, leaves, touched
    cdef vector[pair[double, int32_t]] items
    cdef vector[pair[int32_t, float]] sel
    cdef int64_t r, q, row, dr
    cdef int t, j, best
    cdef int32_t node, lab
    cdef size_t a
    cdef double z, zmax, share
    cdef bint any_
    cdef const float* drow
    x.assign(d, 0.0)
    acc.assign(n_labels, 0.0)
    for r in range(r0, r1):
        for q in range(xp[r], xp[r + 1]):
            x[xi[q]] = xv[q]
        x[d - 1] = bias
        touched.clear()
        for t in range(n_trees):
            leaves.clear()
            stack.clear()
            stack.push_back(roots[t])
            while stack.size():
                node = stack.back()
                stack.pop_back()
                if first_child[node] < 0:
                    leaves.push_back(node)
                    continue
                any_ = False
                best = 0
                zmax = -INFINITY
                # children pushed in reverse so that they are visited in order
                for j in range(M - 1, -1, -1):
                    row = reg_row[node] + j
                    z = 0
                    dr = dense_id[row]
                    if dr >= 0:
                        drow = dense + dr * d
                        for q in range(xp[r], xp[r + 1]):
                            z += drow[xi[q]] * xv[q]
                        z += drow[d - 1] * bias
                    else:
                        for q in range(rp[row], rp[row + 1]):
                            z += rv[q] * x[ri[q]]
                    if z >= zmax:
                        zmax, best = z, j
                    if z >= threshold:
                        stack.push_back(first_child[node] + j)
                        any_ = True
                if not any_:
                    stack.push_back(first_child[node] + best)
            share = 1.0 / (leaves.size() * n_trees)
            for a in range(leaves.size()):
                for q in range(lp[leaves[a]], lp[leaves[a] + 1]):
                    lab = li[q]
                    if acc[lab] == 0:
                        touched.push_back(lab)
                    acc[lab] += lv[q] * share
        for q in range(xp[r], xp[r + 1]):
            x[xi[q]] = 0
        items.clear()
        for a in range(touched.size()):
            lab = touched[a]
            items.push_back(pair[double, int32_t](-<double> (<float> acc[lab]), lab))
            acc[lab] = 0
        emit_top(items, topk, sel, out_idx, out_val)
        out_ptr.push_back(out_idx.size())


cdef class LdsmKernel:
    """A packed LdSM forest (trees concatenated: node ids index these
    arrays) and the descent of points through it. Read-only once built."""
    cdef const int32_t[::1] roots        # root node of each tree
    cdef const int32_t[::1] first_child  # first of a node's M consecutive children, -1 at leaves
    cdef const int32_t[::1] reg_row      # first of a node's M regressor rows, -1 at leaves
    cdef const int64_t[::1] reg_ptr      # entries of regressor row j: reg_ptr[j] .. reg_ptr[j + 1] - 1
    cdef const int32_t[::1] reg_idx      # feature of each regressor entry (d - 1: the bias)
    cdef const float[::1] reg_val        # value of each regressor entry
    cdef const int64_t[::1] dense_id     # row of `dense` holding regressor row j, or -1
    cdef const float[:, ::1] dense       # long regressor rows as dense rows (d wide)
    cdef const int64_t[::1] l_ptr        # histogram of leaf i: l_ptr[i] .. l_ptr[i + 1] - 1
    cdef const int32_t[::1] l_idx        # label of each histogram entry
    cdef const float[::1] l_val          # normalized count of each histogram entry
    cdef int M                           # children per internal node
    cdef int64_t d                       # feature columns with the bias column (index d - 1)
    cdef double bias                     # value of the bias feature
    cdef int64_t n_labels                # label columns
    cdef double threshold                # a child whose margin is >= this is visited

    def __init__(self, f, int M, int64_t d, double bias, int64_t n_labels, double threshold):
        """f: the packed arrays (xmlkit.models.ldsm.LdSM._pack)."""
        if np.shape(f["roots"])[0] < 1:
            raise ValueError("no trees")
        self.roots = np.ascontiguousarray(f["roots"], dtype=np.int32)
        self.first_child = np.ascontiguousarray(f["first_child"], dtype=np.int32)
        self.reg_row = np.ascontiguousarray(f["reg_row"], dtype=np.int32)
        self.reg_ptr = np.ascontiguousarray(f["reg_ptr"], dtype=np.int64)
        self.reg_idx = padded(f["reg_idx"], np.int32)
        self.reg_val = padded(f["reg_val"], np.float32)
        self.dense_id = padded(f["dense_id"], np.int64)
        dense = np.ascontiguousarray(f["dense"], dtype=np.float32).reshape(-1, d)
        self.dense = dense if dense.shape[0] else np.zeros((1, d), np.float32)
        self.l_ptr = np.ascontiguousarray(f["l_ptr"], dtype=np.int64)
        self.l_idx = padded(f["l_idx"], np.int32)
        self.l_val = padded(f["l_val"], np.float32)
        self.M = M
        self.d = d
        self.bias = bias
        self.n_labels = n_labels
        self.threshold = threshold

    def predict_rows(self, const int64_t[::1] X_indptr, X_indices, X_data, int64_t r0,
                     int64_t r1, int k):
        """Scores of rows r0..r1-1 of X (the points without the bias) as CSR
        pieces (indptr from 0, indices, data), labels ascending, the k best per
        row when k > 0."""
        cdef const int32_t[::1] xi = padded(X_indices, np.int32)
        cdef const float[::1] xv = padded(X_data, np.float32)
        cdef vector[int64_t] out_ptr
        cdef vector[int32_t] out_idx
        cdef vector[float] out_val
        check_row_range(X_indptr.shape[0] - 1, r0, r1)
        out_ptr.push_back(0)
        with nogil:
            _predict(&X_indptr[0], &xi[0], &xv[0], r0, r1, self.d, self.bias, &self.roots[0],
                     self.roots.shape[0], self.M, &self.first_child[0], &self.reg_row[0],
                     &self.reg_ptr[0], &self.reg_idx[0], &self.reg_val[0], &self.dense_id[0],
                     &self.dense[0, 0], &self.l_ptr[0], &self.l_idx[0], &self.l_val[0],
                     self.n_labels, self.threshold, k, out_ptr, out_idx, out_val)
        return csr_pieces(out_ptr, out_idx, out_val)
