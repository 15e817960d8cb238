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
from sparse_rows cimport (RowsOut, TopScratch, emit_scores, fill_vector, indptr_t, padded, rows_in,
                          rows_open, rows_pieces)

cnp.import_array()


cdef void _rerank(TailKernel t, const indptr_t* xp, const int32_t* xi, const float* xv,
                  const int64_t* sp, const int32_t* si, const float* sv,
                  int64_t r0, int64_t r1, int topk, RowsOut& out) except * nogil:
    """TailKernel.rerank_rows without the GIL."""
    cdef double bias = t.bias, gamma = t.gamma, alpha = t.alpha
    cdef int64_t n_features = t.n_features, n_labels = t.n_labels
    cdef const int64_t* mp = &t.mu_ptr[0]
    cdef const int32_t* ml = &t.mu_labels[0]
    cdef const float* mv = &t.mu_values[0]
    cdef const double* sqnorm = &t.mu_sqnorm[0]
    cdef vector[double] dot
    cdef vector[int32_t] labs
    cdef vector[float] vals
    cdef TopScratch top
    cdef int64_t r, j, m, f
    cdef int32_t l
    cdef double norm, v, d2, tail, score
    fill_vector(dot, n_labels, 0.0)
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
        labs.clear()
        vals.clear()
        for j in range(sp[r], sp[r + 1]):
            l = si[j]
            d2 = sqnorm[l] + 1.0 - 2.0 * (dot[l] / norm if norm > 0 else 0.0)
            tail = 1.0 / (1.0 + exp(gamma * d2))
            score = pow(<double> sv[j], alpha) * pow(tail, 1.0 - alpha)
            labs.push_back(l)
            vals.push_back(<float> score)
        if norm > 0:
            for j in range(xp[r], xp[r + 1] + 1):
                f = xi[j] if j < xp[r + 1] else n_features
                for m in range(mp[f], mp[f + 1]):
                    dot[ml[m]] = 0.0
        emit_scores(labs.data(), vals.data(), labs.size(), topk, False, top, out)


cdef class TailKernel:
    """The tail classifiers of a PfastreXML model, by feature, and the
    re-ranking of tree scores with them. Read-only once built. Members: see
    the .pxd."""

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

    def rerank_rows(self, X, S, int64_t r0, int64_t r1, int k):
        """Re-ranked scores of rows r0..r1-1 as CSR pieces (indptr from 0,
        indices, data), labels ascending, the k best per row when k > 0
        (ties: lower label first). X: the points without their bias feature
        (CSR, column indices < n_features); S: their tree scores (CSR, the
        labels to re-rank)."""
        sp, si, sv = rows_in(S, r0, r1)
        return self._rows(*rows_in(X, r0, r1), np.asarray(sp, dtype=np.int64), si, sv,
                          r0, r1, k)

    def _rows(self, const indptr_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
              const int64_t[::1] sp, const int32_t[::1] si, const float[::1] sv,
              int64_t r0, int64_t r1, int k):
        cdef RowsOut out
        rows_open(out)
        with nogil:
            _rerank(self, &xp[0], &xi[0], &xv[0], &sp[0], &si[0], &sv[0], r0, r1, k, out)
        return rows_pieces(out)
