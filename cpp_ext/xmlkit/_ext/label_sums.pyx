# Sums of dense rows by label: for the embedding's output layer, the
# (labels x features) product YᵀΦ accumulated block of points by block
# without a temporary of its size.

from libc.stdint cimport int32_t, int64_t
from libcpp.vector cimport vector

import numpy as np

from sparse_rows cimport add_label_rows, indptr_t


def add_rows_by_label(float[:, ::1] acc, const double[:, ::1] rows,
                      const indptr_t[::1] yp, const int32_t[::1] yi):
    """acc[j] += rows[i] for every label j of row i (labels: CSR yp, yi over
    the rows of `rows`); acc is float32 (half the memory of the sums of a
    model's size; each addition rounded once). Raises ValueError on shapes
    that disagree or a label outside acc."""
    cdef int64_t n = rows.shape[0], f = rows.shape[1], L = acc.shape[0]
    cdef int64_t i, q, c
    cdef int32_t j
    if yp.shape[0] != n + 1 or acc.shape[1] != f:
        raise ValueError("rows, labels and the accumulator disagree in shape")
    if yp[n] > yi.shape[0] or (n and yp[0] != 0):
        raise ValueError("label pointers out of range")
    for q in range(yi.shape[0] if n else 0):
        if yi[q] < 0 or yi[q] >= L:
            raise ValueError(f"label {yi[q]} outside 0..{L - 1}")
    with nogil:
        for i in range(n):
            for q in range(yp[i], yp[i + 1]):
                j = yi[q]
                for c in range(f):
                    acc[j, c] = <float> (acc[j, c] + rows[i, c])


def centroids_by_label(const int64_t[::1] xp, const int32_t[::1] xi, const double[::1] xb,
                       const int64_t[::1] lptr, const int32_t[::1] lpts, int64_t n_features):
    """PfastreXML's tail classifiers: for each label l, the mean of the rows
    (CSR xp, xi and their values xb, float64; the bias column already among
    them) of the points carrying it (label l's points: lpts[lptr[l]:lptr[l +
    1]], ascending), as CSR over the n_features columns (ptr int64, labels
    int32, values float32).

    Each mean is added up over the points in ascending order, each term
    (1 / count) * value, and a column whose sum is exactly 0 is left out:
    what scipy's sparse product gave (the earlier code), to the bit."""
    cdef int64_t n = xp.shape[0] - 1, n_labels = lptr.shape[0] - 1, l, k, nnz = 0
    cdef int32_t f
    cdef double c
    if lptr[n_labels] > lpts.shape[0] or (
            lptr[n_labels] and (np.min(lpts[:lptr[n_labels]]) < 0
                                or np.max(lpts[:lptr[n_labels]]) >= n)):
        raise ValueError("a label's point outside 0..n - 1")
    if xp[n] and (np.min(xi[:xp[n]]) < 0 or np.max(xi[:xp[n]]) >= n_features):
        raise ValueError("a feature outside 0..n_features - 1")
    cdef double[::1] acc = np.zeros(max(n_features, 1))
    cdef int32_t[::1] touched = np.empty(max(n_features, 1), dtype=np.int32)
    cdef signed char[::1] seen = np.zeros(max(n_features, 1), dtype=np.int8)
    cdef int64_t n_touched
    cdef int64_t[::1] counts_f = np.zeros(max(n_features, 1) + 1, dtype=np.int64)
    # the non-zero sums label by label (features ascending), counted per
    # feature; then put in order by feature (labels ascending within one)
    cdef vector[int32_t] ent_f
    cdef vector[int32_t] ent_l
    cdef vector[double] ent_v
    with nogil:
        for l in range(n_labels):
            if lptr[l + 1] == lptr[l]:
                continue
            c = 1.0 / <double> (lptr[l + 1] - lptr[l])
            n_touched = add_label_rows(&xp[0], &xi[0], &xb[0], &lpts[lptr[l]],
                                       lptr[l + 1] - lptr[l], c, &acc[0], &seen[0],
                                       &touched[0])
            for k in range(n_touched):
                f = touched[k]
                if acc[f] != 0.0:
                    ent_f.push_back(f)
                    ent_l.push_back(<int32_t> l)
                    ent_v.push_back(acc[f])
                    counts_f[f + 1] += 1
                acc[f] = 0.0
                seen[f] = 0
    nnz = ent_f.size()
    ptr = np.cumsum(counts_f, dtype=np.int64)
    cdef int64_t[::1] pos = ptr[:-1].copy()
    labels = np.empty(nnz, dtype=np.int32)
    values = np.empty(nnz, dtype=np.float32)
    cdef int32_t[::1] lab = labels
    cdef float[::1] val = values
    with nogil:
        for k in range(nnz):
            f = ent_f[k]
            lab[pos[f]] = ent_l[k]
            val[pos[f]] = <float> ent_v[k]
            pos[f] += 1
    return ptr[:n_features + 1], labels, values
