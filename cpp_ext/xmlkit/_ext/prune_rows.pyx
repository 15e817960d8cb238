# PrunEX (Khandagale & Babbar): per row, optional tf-idf weighting
# (log(1 + count) * idf), scaling to unit L2 length, then removal of the
# entries whose magnitude is <= threshold; the min_keep largest entries of a
# row are always kept (so no point loses all its features). With rescale the
# kept entries are scaled to unit length again (the weights divided by the
# norm of the kept ones: a row that keeps all is the same bits either way).

from libc.stdint cimport int32_t, int64_t
from libc.math cimport fabs, log1p, sqrt
from libcpp.vector cimport vector
from libcpp.utility cimport pair

import numpy as np
cimport numpy as cnp

from sparse_rows cimport array_copy, fill_vector, partial_sort

cnp.import_array()


cdef int64_t _prune(const int64_t* xp, const int32_t* xi, const float* xv,
                    int64_t n_rows, const double* idf, bint tfidf, double threshold,
                    int min_keep, bint rescale, vector[int64_t]& out_ptr, vector[int32_t]& out_idx,
                    vector[float]& out_val, int64_t* stats) except * nogil:
    """Returns -1, or the first row holding a negative count (tf-idf mode).
    stats: 0 rows the threshold emptied, 1 of them refilled by min_keep,
    2 rows without any non-zero weight."""
    cdef vector[double] w
    cdef vector[char] keep
    cdef vector[pair[double, int64_t]] order
    cdef int64_t r, j, n, kept, nonzero, k, want
    cdef double norm, v, kept_norm
    for r in range(n_rows):
        n = xp[r + 1] - xp[r]
        w.resize(n)
        fill_vector(keep, n, 0)
        norm = 0.0
        nonzero = 0
        for j in range(n):
            v = xv[xp[r] + j]
            if tfidf:
                if v < 0:
                    return r
                v = log1p(v) * idf[xi[xp[r] + j]]
            w[j] = v
            norm += v * v
            if v != 0:
                nonzero += 1
        if nonzero == 0:
            stats[2] += 1
            out_ptr.push_back(out_idx.size())
            continue
        norm = sqrt(norm)
        kept = 0
        for j in range(n):
            if fabs(w[j] / norm) > threshold:
                keep[j] = 1
                kept += 1
        if kept == 0:
            stats[0] += 1
        want = min_keep if min_keep < nonzero else nonzero
        if kept < want:
            # the `want` largest magnitudes (ties: the earlier feature)
            order.clear()
            for j in range(n):
                if w[j] != 0:
                    order.push_back(pair[double, int64_t](-fabs(w[j] / norm), j))
            partial_sort(order.begin(), order.begin() + want, order.end())
            for k in range(want):
                keep[order[k].second] = 1
            if kept == 0:
                stats[1] += 1
        if rescale:
            kept_norm = 0.0
            for j in range(n):
                if keep[j]:
                    kept_norm += w[j] * w[j]
            norm = sqrt(kept_norm)
        for j in range(n):
            if keep[j]:
                out_idx.push_back(xi[xp[r] + j])
                out_val.push_back(<float> (w[j] / norm))
        out_ptr.push_back(out_idx.size())
    return -1


def prune_rows(const int64_t[::1] indptr, const int32_t[::1] indices, const float[::1] data,
               idf, bint tfidf, double threshold, int min_keep, bint rescale):
    """PrunEX on CSR rows: returns (indptr int64, indices int32, data float32,
    stats) with stats = {"emptied", "saved", "no_weight"}; the kept entries
    of a row at unit length again when rescale; raises
    ValueError naming the row (0-based) that holds a negative count when
    tfidf. `idf` (float64, one per column) is used only when tfidf."""
    cdef vector[int64_t] out_ptr
    cdef vector[int32_t] out_idx
    cdef vector[float] out_val
    cdef int64_t n_rows = indptr.shape[0] - 1
    cdef int64_t stats[3]
    cdef const double[::1] idf_v
    cdef const double* idf_p = NULL
    cdef int32_t di = 0
    cdef float df = 0
    cdef double dd = 0
    cdef const int32_t* xi = &indices[0] if indices.shape[0] else &di
    cdef const float* xv = &data[0] if data.shape[0] else &df
    cdef int64_t bad
    if tfidf:
        idf_v = np.ascontiguousarray(idf, dtype=np.float64)
        if indices.shape[0] and np.asarray(indices).max() >= idf_v.shape[0]:
            raise ValueError("a column index is beyond the idf vector")
        idf_p = &idf_v[0] if idf_v.shape[0] else &dd
    if min_keep < 0:
        raise ValueError("min_keep must be >= 0")
    stats[0] = stats[1] = stats[2] = 0
    out_ptr.push_back(0)
    with nogil:
        bad = _prune(&indptr[0], xi, xv, n_rows, idf_p, tfidf, threshold, min_keep, rescale,
                     out_ptr, out_idx, out_val, stats)
    if bad >= 0:
        raise ValueError(f"row {bad} holds a negative count")
    return (array_copy(out_ptr.data(), out_ptr.size(), cnp.NPY_INT64),
            array_copy(out_idx.data(), out_idx.size(), cnp.NPY_INT32),
            array_copy(out_val.data(), out_val.size(), cnp.NPY_FLOAT32),
            {"emptied": stats[0], "saved": stats[1], "no_weight": stats[2]})
