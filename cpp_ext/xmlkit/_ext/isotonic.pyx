"""Isotonic regression by pool-adjacent-violators (PAV).

pav(y, w): the non-decreasing sequence closest to y in weighted least
squares (weights w > 0), y taken in its given order (the caller sorts by
the predictor). One pass: each value joins the run of blocks as a block of
its own, and while the last block's mean is at most the one before it, the
two are pooled (weighted means). Pooling equal means too leaves blocks of
strictly increasing means.

Returns (ends, means): block b covers positions ends[b-1] (0 for b = 0) to
ends[b] - 1; means[b] is its weighted mean. O(n) time, O(blocks) memory.
"""
from libc.stdint cimport int64_t
from libcpp.vector cimport vector

import numpy as np


cdef int64_t _pav(const double* y, const double* w, int64_t n, vector[double]& sw,
                  vector[double]& swy, vector[int64_t]& ends) except -1 nogil:
    """The blocks of y[0:n] into sw (weights), swy (weighted sums) and ends;
    returns their number."""
    cdef int64_t i, m = 0
    for i in range(n):
        sw[m] = w[i]
        swy[m] = w[i] * y[i]
        ends[m] = i + 1
        m += 1
        # pool while the last mean is not above the one before it
        # (a/b <= c/d with b, d > 0  <=>  a*d <= c*b)
        while m > 1 and swy[m - 1] * sw[m - 2] <= swy[m - 2] * sw[m - 1]:
            sw[m - 2] += sw[m - 1]
            swy[m - 2] += swy[m - 1]
            ends[m - 2] = ends[m - 1]
            m -= 1
    return m


def pav(y, w):
    """(ends, means) of the isotonic fit of y with weights w (see the module
    doc). y, w: 1-d, of one length, finite, w > 0."""
    cdef const double[::1] yv = np.ascontiguousarray(y, dtype=np.float64)
    cdef const double[::1] wv = np.ascontiguousarray(w, dtype=np.float64)
    cdef int64_t n = yv.shape[0]
    if wv.shape[0] != n:
        raise ValueError(f"pav: {n} values but {wv.shape[0]} weights")
    if n and not (np.all(np.isfinite(yv)) and np.all(np.isfinite(wv)) and np.min(wv) > 0):
        raise ValueError("pav: values must be finite and weights finite and positive")
    cdef vector[double] sw, swy
    cdef vector[int64_t] ends
    sw.resize(n)
    swy.resize(n)
    ends.resize(n)
    cdef int64_t m
    with nogil:
        m = _pav(&yv[0] if n else NULL, &wv[0] if n else NULL, n, sw, swy, ends)
    out_ends = np.empty(m, dtype=np.int64)
    out_means = np.empty(m, dtype=np.float64)
    cdef int64_t[::1] oe = out_ends
    cdef double[::1] om = out_means
    cdef int64_t b
    for b in range(m):
        oe[b] = ends[b]
        om[b] = swy[b] / sw[b]
    return out_ends, out_means


cdef int _fit_line(const double* z, const double* w, int64_t n, int64_t stride,
                   bint down, double* out, vector[double]& y, vector[double]& wt,
                   vector[double]& sw, vector[double]& swy,
                   vector[int64_t]& ends) except -1 nogil:
    """The isotonic fit of the n values z[0], z[stride], ... (weights w
    alike), non-decreasing, or non-increasing where `down`, into out (same
    stride)."""
    cdef int64_t i, j, b, m, start
    for i in range(n):
        j = (n - 1 - i) if down else i
        y[i] = z[j * stride]
        wt[i] = w[j * stride]
    m = _pav(&y[0], &wt[0], n, sw, swy, ends)
    start = 0
    for b in range(m):
        for i in range(start, ends[b]):
            j = (n - 1 - i) if down else i
            out[j * stride] = swy[b] / sw[b]
        start = ends[b]
    return 0


def pav_grid(y, w, int max_iter=1000, double tol=1e-10):
    """The grid closest to y (G×B) in weighted least squares (weights w > 0)
    that is non-decreasing along each row and non-increasing down each
    column: Dykstra's alternating projections, onto the rows' isotonic fits
    (pav) and the columns' antitonic ones, until no value moves by more
    than `tol` (at most `max_iter` rounds), then each row's isotonic fit of
    the result, so that the rows hold exactly (the columns to within tol).
    Returns (fit, rounds)."""
    X_ = np.array(y, dtype=np.float64, order="C")     # (a copy: the fit, in place)
    cdef double[:, ::1] X = X_
    cdef const double[:, ::1] W = np.ascontiguousarray(w, dtype=np.float64)
    cdef Py_ssize_t G = X.shape[0], B = X.shape[1]
    if W.shape[0] != G or W.shape[1] != B:
        raise ValueError("pav_grid: values and weights of different shapes")
    if G * B and not (np.all(np.isfinite(X_)) and np.all(np.isfinite(W)) and np.min(W) > 0):
        raise ValueError("pav_grid: values must be finite and weights finite and positive")
    cdef double[:, ::1] P = np.zeros((G, B))
    cdef double[:, ::1] Q = np.zeros((G, B))
    cdef double[:, ::1] Z = np.zeros((G, B))
    cdef double[:, ::1] X1 = np.zeros((G, B))
    cdef Py_ssize_t n = max(G, B)
    cdef vector[double] yb, wb, sw, swy
    cdef vector[int64_t] ends
    yb.resize(n)
    wb.resize(n)
    sw.resize(n)
    swy.resize(n)
    ends.resize(n)
    cdef Py_ssize_t g, b
    cdef int rounds = 0
    cdef double moved, d
    if G * B == 0:
        return X_, 0
    with nogil:
        while rounds < max_iter:
            rounds += 1
            for g in range(G):
                for b in range(B):
                    Z[g, b] = X[g, b] + P[g, b]
                _fit_line(&Z[g, 0], &W[g, 0], B, 1, False, &X1[g, 0], yb, wb, sw, swy, ends)
                for b in range(B):
                    P[g, b] = Z[g, b] - X1[g, b]
            for g in range(G):
                for b in range(B):
                    Z[g, b] = X1[g, b] + Q[g, b]
            moved = 0
            for b in range(B):
                _fit_line(&Z[0, b], &W[0, b], G, B, True, &X1[0, b], yb, wb, sw, swy, ends)
            for g in range(G):
                for b in range(B):
                    Q[g, b] = Z[g, b] - X1[g, b]
                    d = X1[g, b] - X[g, b]
                    if d < 0:
                        d = -d
                    if d > moved:
                        moved = d
                    X[g, b] = X1[g, b]
            if moved <= tol:
                break
        for g in range(G):
            for b in range(B):
                Z[g, b] = X[g, b]
            _fit_line(&Z[g, 0], &W[g, 0], B, 1, False, &X[g, 0], yb, wb, sw, swy, ends)
    return X_, rounds
