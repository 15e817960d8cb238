# PfastreXML tail-label re-ranking.
#
# A point's tree scores s_l (the kept top-n labels) are combined with a tail
# classifier t_l = 1 / (1 + exp(gamma * ||x^ - mu_l||^2)), x^ the point with
# its bias feature, scaled to unit length, and mu_l the centroid of the unit
# training points carrying label l: score = s_l^alpha * t_l^(1 - alpha).
#
# ||x^ - mu_l||^2 = 1 + ||mu_l||^2 - 2 mu_l.x^. The centroids are stored by
# feature (CSR over features: for feature f, the labels whose centroid uses
# it), so mu.x^ for all labels costs the point's non-zeros times the labels
# per feature, not the centroids' sizes.

from libc.stdint cimport int32_t, int64_t
from libc.math cimport exp, pow, sqrt
from libcpp.vector cimport vector
from libcpp.utility cimport pair

cimport numpy as cnp

from sparse_rows cimport array_copy, emit_top

cnp.import_array()


cdef void _rerank(const int64_t* xp, const int32_t* xi, const float* xv, double bias,
                  int64_t n_features, const int64_t* mp, const int32_t* ml,
                  const float* mv, const double* sqnorm, int64_t n_labels,
                  const int64_t* sp, const int32_t* si, const float* sv,
                  int64_t r0, int64_t r1, double gamma, double alpha, int topk,
                  vector[int64_t]& out_ptr, vector[int32_t]& out_idx,
                  vector[float]& out_val) noexcept nogil:
    cdef vector[double] dot
    cdef vector[pair[double, int32_t]] items
    cdef vector[pair[int32_t, float]] sel
    cdef int64_t r, j, m, f
    cdef int32_t l
    cdef double norm, v, d2, tail, score
    dot.assign(n_labels, 0.0)
    for r in range(r0, r1):
        norm = bias * bias
        for j in range(xp[r], xp[r + 1]):
            norm += <double> xv[j] * xv[j]
        norm = sqrt(norm)
        if norm > 0:
            for j in range(xp[r], xp[r + 1] + 1):
                if j < xp[r + 1]:
                    f, v = xi[j], xv[j]
                else:
                    f, v = n_features, bias
                if v == 0:
                    continue
                for m in range(mp[f], mp[f + 1]):
                    dot[ml[m]] += mv[m] * v
        items.clear()
        for j in range(sp[r], sp[r + 1]):
            l = si[j]
            d2 = sqnorm[l] + 1.0 - 2.0 * (dot[l] / norm if norm > 0 else 0.0)
            tail = 1.0 / (1.0 + exp(gamma * d2))
            score = pow(<double> sv[j], alpha) * pow(tail, 1.0 - alpha)
            items.push_back(pair[double, int32_t](-<double> (<float> score), l))
        if norm > 0:
            for j in range(xp[r], xp[r + 1] + 1):
                f = xi[j] if j < xp[r + 1] else n_features
                for m in range(mp[f], mp[f + 1]):
                    dot[ml[m]] = 0.0
        emit_top(items, topk, sel, out_idx, out_val)
        out_ptr.push_back(out_idx.size())


def rerank_rows(const int64_t[::1] X_indptr, const int32_t[::1] X_indices,
                const float[::1] X_data, double bias,
                const int64_t[::1] mu_ptr, const int32_t[::1] mu_labels,
                const float[::1] mu_values, const double[::1] mu_sqnorm,
                const int64_t[::1] S_indptr, const int32_t[::1] S_indices,
                const float[::1] S_data, int64_t r0, int64_t r1,
                double gamma, double alpha, int topk):
    """Re-ranked scores of rows r0..r1-1 as CSR pieces (indptr from 0,
    indices, data), labels ascending, the topk best per row when topk > 0
    (ties: lower label first). X: the points without their bias feature
    (column indices < n_features = mu_ptr.shape[0] - 2); mu_*: the label
    centroids by feature, n_features + 1 rows (the last is the bias);
    mu_sqnorm[l] = ||mu_l||^2; S: the points' tree scores (the labels to
    re-rank)."""
    cdef vector[int64_t] out_ptr
    cdef vector[int32_t] out_idx
    cdef vector[float] out_val
    cdef int64_t n_features = mu_ptr.shape[0] - 2
    cdef int64_t n_labels = mu_sqnorm.shape[0]
    cdef int32_t di = 0
    cdef float df = 0
    cdef const int32_t* xi = &X_indices[0] if X_indices.shape[0] else &di
    cdef const float* xv = &X_data[0] if X_data.shape[0] else &df
    cdef const int32_t* ml = &mu_labels[0] if mu_labels.shape[0] else &di
    cdef const float* mv = &mu_values[0] if mu_values.shape[0] else &df
    cdef const int32_t* si = &S_indices[0] if S_indices.shape[0] else &di
    cdef const float* sv = &S_data[0] if S_data.shape[0] else &df
    cdef double dd = 0
    cdef const double* sq = &mu_sqnorm[0] if n_labels else &dd
    if n_features < 0:
        raise ValueError("mu_ptr needs n_features + 2 entries")
    if not (0 <= r0 <= r1 <= X_indptr.shape[0] - 1 and r1 <= S_indptr.shape[0] - 1):
        raise ValueError("row range out of bounds")
    out_ptr.push_back(0)
    with nogil:
        _rerank(&X_indptr[0], xi, xv, bias, n_features, &mu_ptr[0], ml, mv, sq, n_labels,
                &S_indptr[0], si, sv, r0, r1, gamma, alpha, topk, out_ptr, out_idx, out_val)
    return (array_copy(out_ptr.data(), out_ptr.size(), cnp.NPY_INT64),
            array_copy(out_idx.data(), out_idx.size(), cnp.NPY_INT32),
            array_copy(out_val.data(), out_val.size(), cnp.NPY_FLOAT32))
