# Products of dense rows by a dense matrix whose every entry is summed in one
# fixed order, for the embedding's random features and label scores: a row's
# product is the same bits alone or in any batch, on any number of threads
# and on every processor. (A BLAS's product is not: its summation order
# follows the batch's shape, its thread count and the processor's kernels.)

from libc.stdint cimport int64_t

import numpy as np

cdef extern from "xk_wide.h":
    void xk_rows_dotd(double* acc, const double* row, double x, int64_t K) noexcept nogil
    void xk_rows_dotf(float* acc, const float* row, float x, int64_t K) noexcept nogil


ctypedef fused real:
    float
    double


cdef void _times(const real* A, const real* B, real* C, int64_t n, int64_t K,
                 int64_t N) noexcept nogil:
    """C (n x N) = A (n x K) B (K x N), row-major: C[i, j] = sum over k
    ascending of A[i, k] B[k, j], each product and sum rounded once (no
    fused multiply-add)."""
    cdef int64_t i, k, j
    cdef real* c
    for i in range(n):
        c = &C[i * N]
        for j in range(N):
            c[j] = 0
        for k in range(K):
            if real is float:
                xk_rows_dotf(c, &B[k * N], A[i * K + k], N)
            else:
                xk_rows_dotd(c, &B[k * N], A[i * K + k], N)


def rows_times(A, B):
    """A @ B for 2-d float32 or float64 arrays (B converted to A's type),
    each entry summed over A's columns in order: see the module's note. A
    new C-contiguous array of A's type."""
    A = np.ascontiguousarray(A)
    if A.dtype != np.float32:
        A = np.ascontiguousarray(A, dtype=np.float64)
    B = np.ascontiguousarray(B, dtype=A.dtype)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"shapes {A.shape} and {B.shape} do not multiply")
    C = np.empty((A.shape[0], B.shape[1]), A.dtype)
    if A.dtype == np.float32:
        _run_f(A, B, C)
    else:
        _run_d(A, B, C)
    return C


cdef _run_f(const float[:, ::1] A, const float[:, ::1] B, float[:, ::1] C):
    if C.shape[0] == 0 or C.shape[1] == 0:
        return
    if A.shape[1] == 0:
        C[:, :] = 0
        return
    with nogil:
        _times(&A[0, 0], &B[0, 0], &C[0, 0], A.shape[0], A.shape[1], B.shape[1])


cdef _run_d(const double[:, ::1] A, const double[:, ::1] B, double[:, ::1] C):
    if C.shape[0] == 0 or C.shape[1] == 0:
        return
    if A.shape[1] == 0:
        C[:, :] = 0
        return
    with nogil:
        _times(&A[0, 0], &B[0, 0], &C[0, 0], A.shape[0], A.shape[1], B.shape[1])
