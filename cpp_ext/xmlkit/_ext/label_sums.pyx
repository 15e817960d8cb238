# Sums of dense rows by label: for the embedding's output layer, the
# (labels x features) product YᵀΦ accumulated block of points by block
# without a temporary of its size.

from libc.stdint cimport int32_t, int64_t

from sparse_rows cimport indptr_t


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
