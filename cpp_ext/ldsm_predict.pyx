# LdSM prediction: a point descends every tree to possibly several leaves
# (every child whose regressor margin is >= threshold, else the first child
# at the maximum margin); its score is the mean over trees of the mean of
# the reached leaves' normalized label histograms.

from libc.stdint cimport int32_t, int64_t
from libc.math cimport INFINITY
from libcpp.vector cimport vector
from libcpp.utility cimport pair

cimport numpy as cnp

from sparse_rows cimport array_copy, emit_top

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


def predict_rows(const int64_t[::1] X_indptr, const int32_t[::1] X_indices,
                 const float[::1] X_data, int64_t r0, int64_t r1, int64_t d, double bias,
                 const int32_t[::1] roots, int M, const int32_t[::1] first_child,
                 const int32_t[::1] reg_row, const int64_t[::1] reg_ptr,
                 const int32_t[::1] reg_idx, const float[::1] reg_val,
                 const int64_t[::1] dense_id, const float[:, ::1] dense,
                 const int64_t[::1] l_ptr, const int32_t[::1] l_idx, const float[::1] l_val,
                 int64_t n_labels, double threshold, int topk):
    """Scores of rows r0..r1-1 as CSR pieces (indptr from 0, indices, data),
    labels ascending, the topk best per row when topk > 0. X holds the points
    without the bias; d counts the bias column (index d - 1). Node ids index
    the concatenated forest; regressor rows of node n: reg_row[n] .. + M - 1;
    dense_id[row] >= 0 names the row of `dense` holding that regressor densely."""
    cdef vector[int64_t] out_ptr
    cdef vector[int32_t] out_idx
    cdef vector[float] out_val
    cdef int32_t di = 0
    cdef float df = 0
    cdef const int32_t* xi = &X_indices[0] if X_indices.shape[0] else &di
    cdef const float* xv = &X_data[0] if X_data.shape[0] else &df
    cdef const int32_t* ri = &reg_idx[0] if reg_idx.shape[0] else &di
    cdef const float* rv = &reg_val[0] if reg_val.shape[0] else &df
    cdef const int32_t* li = &l_idx[0] if l_idx.shape[0] else &di
    cdef const float* lv = &l_val[0] if l_val.shape[0] else &df
    cdef const float* dp = &dense[0, 0] if dense.shape[0] else &df
    cdef int64_t zero = 0
    cdef const int64_t* did = &dense_id[0] if dense_id.shape[0] else &zero
    if roots.shape[0] < 1:
        raise ValueError("no trees")
    out_ptr.push_back(0)
    with nogil:
        _predict(&X_indptr[0], xi, xv, r0, r1, d, bias, &roots[0], roots.shape[0], M,
                 &first_child[0], &reg_row[0], &reg_ptr[0], ri, rv, did, dp, &l_ptr[0], li,
                 lv, n_labels, threshold, topk, out_ptr, out_idx, out_val)
    return (array_copy(out_ptr.data(), out_ptr.size(), cnp.NPY_INT64),
            array_copy(out_idx.data(), out_idx.size(), cnp.NPY_INT32),
            array_copy(out_val.data(), out_val.size(), cnp.NPY_FLOAT32))
