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

import numpy as np
from sparse_rows cimport check_row_range, csr_pieces, emit_top, padded

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


cdef class TailKernel:
    """The tail classifiers of a PfastreXML model, by feature, and the
    re-ranking of tree scores with them. Read-only once built."""
    cdef const int64_t[::1] mu_ptr       # labels using feature f: mu_ptr[f] .. mu_ptr[f + 1] - 1
    cdef const int32_t[::1] mu_labels    # label of each centroid entry
    cdef const float[::1] mu_values      # value of each centroid entry
    cdef const double[::1] mu_sqnorm     # ||mu_l||^2 of each label
    cdef int64_t n_features              # feature columns (row n_features of mu: the bias)
    cdef int64_t n_labels                # label columns
    cdef double bias                     # value of the bias feature
    cdef double gamma                    # sharpness of the tail classifiers
    cdef double alpha                    # weight of the tree scores

    def __init__(self, mu_ptr, mu_labels, mu_values, double bias, double gamma, double alpha,
                 int64_t n_labels):
        self.mu_ptr = np.ascontiguousarray(mu_ptr, dtype=np.int64)
        self.n_features = self.mu_ptr.shape[0] - 2
        if self.n_features < 0:
            raise ValueError("mu_ptr needs n_features + 2 entries")
        self.mu_labels = padded(mu_labels, np.int32)
        self.mu_values = padded(mu_values, np.float32)
        lab = np.asarray(mu_labels, dtype=np.int32)
        val = np.asarray(mu_values, dtype=np.float64)
        self.mu_sqnorm = padded(np.bincount(lab, weights=val ** 2, minlength=n_labels),
                                 np.float64)
        self.n_labels = n_labels
        self.bias = bias
        self.gamma = gamma
        self.alpha = alpha

    def rerank_rows(self, const int64_t[::1] X_indptr, X_indices, X_data,
                    const int64_t[::1] S_indptr, S_indices, S_data, int64_t r0, int64_t r1,
                    int k):
        """Re-ranked scores of rows r0..r1-1 as CSR pieces (indptr from 0,
        indices, data), labels ascending, the k best per row when k > 0
        (ties: lower label first). X: the points without their bias feature
        (column indices < n_features); S: their tree scores (the labels to
        re-rank)."""
        cdef const int32_t[::1] xi = padded(X_indices, np.int32)
        cdef const float[::1] xv = padded(X_data, np.float32)
        cdef const int32_t[::1] si = padded(S_indices, np.int32)
        cdef const float[::1] sv = padded(S_data, np.float32)
        cdef vector[int64_t] out_ptr
        cdef vector[int32_t] out_idx
        cdef vector[float] out_val
        check_row_range(X_indptr.shape[0] - 1, r0, r1)
        check_row_range(S_indptr.shape[0] - 1, r0, r1)
        out_ptr.push_back(0)
        with nogil:
            _rerank(&X_indptr[0], &xi[0], &xv[0], self.bias, self.n_features, &self.mu_ptr[0],
                    &self.mu_labels[0], &self.mu_values[0], &self.mu_sqnorm[0], self.n_labels,
                    &S_indptr[0], &si[0], &sv[0], r0, r1, self.gamma, self.alpha, k,
                    out_ptr, out_idx, out_val)
        return csr_pieces(out_ptr, out_idx, out_val)
