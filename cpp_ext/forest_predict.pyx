# Prediction with ensembles of sparse linear-split trees (FastXML family).
#
# Each point is routed down every tree (w·x >= 0 -> first child), and the
# label distributions of the leaves it reaches are averaged over the trees.

from libc.stdint cimport int32_t, int64_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair

cimport numpy as cnp

from sparse_rows cimport array_copy, emit_top

cnp.import_array()


cdef void _predict(const int64_t* xp, const int32_t* xi, const float* xv,
                   int64_t r0, int64_t r1,
                   const int32_t* roots, int n_trees, const int32_t* child,
                   const int64_t* wp, const int32_t* wi, const float* wv,
                   const int64_t* dense_id, const float* dense,
                   const int64_t* lp, const int32_t* li, const float* lv,
                   int64_t n_features, int64_t n_labels, double bias, int topk,
                   vector[int64_t]& out_ptr, vector[int32_t]& out_idx,
                   vector[float]& out_val) noexcept nogil:
    cdef vector[double] x, acc
    cdef vector[int32_t] touched
    cdef vector[pair[double, int32_t]] order
    cdef vector[pair[int32_t, float]] sel
    cdef int64_t r, j, k, d
    cdef const float* row
    cdef int t
    cdef int32_t node, l
    cdef double margin, inv_t = 1.0 / n_trees
    x.assign(n_features + 1, 0.0)
    acc.assign(n_labels, 0.0)
    x[n_features] = bias
    for r in range(r0, r1):
        for j in range(xp[r], xp[r + 1]):
            x[xi[j]] = xv[j]
        touched.clear()
        for t in range(n_trees):
            node = roots[t]
            while child[2 * node] >= 0:
                margin = 0.0
                d = dense_id[node]
                if d >= 0:
                    # long weight row kept dense: cost follows the point's
                    # non-zeros, not the row's
                    row = dense + d * (n_features + 1)
                    for j in range(xp[r], xp[r + 1]):
                        margin += row[xi[j]] * xv[j]
                    margin += row[n_features] * bias
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
        emit_top(order, topk, sel, out_idx, out_val)
        out_ptr.push_back(out_idx.size())


def predict_rows(const int64_t[::1] X_indptr, const int32_t[::1] X_indices,
                 const float[::1] X_data, int64_t r0, int64_t r1,
                 const int32_t[::1] roots, const int32_t[:, ::1] child,
                 const int64_t[::1] w_ptr, const int32_t[::1] w_idx, const float[::1] w_val,
                 const int64_t[::1] dense_id, const float[:, ::1] dense,
                 const int64_t[::1] l_ptr, const int32_t[::1] l_idx, const float[::1] l_val,
                 int64_t n_features, int64_t n_labels, double bias, int topk):
    """Scores of rows r0..r1-1 as CSR pieces (indptr from 0, indices, data):
    dense_id[node] >= 0 names the row of `dense` (n_features + 1 columns)
    holding that node's weights densely (used instead of w_* for it);
    the mean over trees of the reached leaves' label values, labels ascending,
    only the topk best per row when topk > 0 (ties: lower label first).
    Node ids in `child` and `roots` index the concatenated forest arrays."""
    cdef vector[int64_t] out_ptr
    cdef vector[int32_t] out_idx
    cdef vector[float] out_val
    cdef int n_trees = roots.shape[0]
    cdef int32_t di = 0
    cdef float df = 0
    cdef const int32_t* xi = &X_indices[0] if X_indices.shape[0] else &di
    cdef const float* xv = &X_data[0] if X_data.shape[0] else &df
    cdef const int32_t* wi = &w_idx[0] if w_idx.shape[0] else &di
    cdef const float* wv = &w_val[0] if w_val.shape[0] else &df
    cdef const int32_t* li = &l_idx[0] if l_idx.shape[0] else &di
    cdef const float* lv = &l_val[0] if l_val.shape[0] else &df
    cdef const float* dp = &dense[0, 0] if dense.shape[0] else &df
    if n_trees < 1:
        raise ValueError("no trees")
    out_ptr.push_back(0)
    with nogil:
        _predict(&X_indptr[0], xi, xv, r0, r1, &roots[0], n_trees, &child[0, 0],
                 &w_ptr[0], wi, wv, &dense_id[0], dp, &l_ptr[0], li, lv, n_features, n_labels, bias, topk,
                 out_ptr, out_idx, out_val)
    return (array_copy(out_ptr.data(), out_ptr.size(), cnp.NPY_INT64),
            array_copy(out_idx.data(), out_idx.size(), cnp.NPY_INT32),
            array_copy(out_val.data(), out_val.size(), cnp.NPY_FLOAT32))


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
