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
