/* Loops over a few dozen to a few hundred adjacent floats or doubles that
 * the kernels run most, built twice where the compiler and the system can
 * choose at load time (GCC on x86-64 Linux: target_clones): for the
 * baseline x86-64 (SSE2, what the wheel targets) and for AVX2, picked when
 * the processor has it. Each lane does the same operations in the same
 * order in both (no FMA: AVX2 alone has none; no sum across lanes), so the
 * results are the same bits on every processor; only their speed differs.
 * Elsewhere, one plain build of each.
 *
 * xk_rows_dot   z[k] = sum over q of v[q] * W[f[q] * bw + k], k < na (each
 *               sum in q order)
 * xk_rows_axpy  W[f[q] * bw + k] += v[q] * d[k] for every q, k < na
 * xk_rows_dotd  acc[k] += x * row[k], k < K, in doubles
 * xk_rows_dotf  the same in floats
 * xk_shrink_row w[k] = sign(w[k]) max(0, |w[k]| - sub) scale (the elastic
 *               net's catch-up), then acc[k] += x * w[k], k < K, in doubles;
 *               returns how many w[k] are not 0
 */
#ifndef XK_WIDE_H
#define XK_WIDE_H

#include <stdint.h>
#include <math.h>

/* (unused: each kernel includes the whole header and uses a few) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#  define XK_WIDE __attribute__((target_clones("avx2", "default"), unused))
#elif defined(__GNUC__)
#  define XK_WIDE __attribute__((unused))
#else
#  define XK_WIDE
#endif

XK_WIDE static void xk_rows_dot(int64_t lo, int64_t hi, const int32_t* f, const float* v,
                                const float* W, int64_t bw, int64_t na, float* z) {
    for (int64_t k = 0; k < na; k++)
        z[k] = 0;
    for (int64_t q = lo; q < hi; q++) {
        const float* row = W + (int64_t) f[q] * bw;
        const float x = v[q];
        for (int64_t k = 0; k < na; k++)
            z[k] += x * row[k];
    }
}

XK_WIDE static void xk_rows_axpy(int64_t lo, int64_t hi, const int32_t* f, const float* v,
                                 float* W, int64_t bw, int64_t na, const float* d) {
    for (int64_t q = lo; q < hi; q++) {
        float* row = W + (int64_t) f[q] * bw;
        const float x = v[q];
        for (int64_t k = 0; k < na; k++)
            row[k] += x * d[k];
    }
}

XK_WIDE static void xk_rows_dotd(double* acc, const double* row, double x, int64_t K) {
    for (int64_t k = 0; k < K; k++)
        acc[k] += x * row[k];
}

XK_WIDE static void xk_rows_dotf(float* acc, const float* row, float x, int64_t K) {
    for (int64_t k = 0; k < K; k++)
        acc[k] += x * row[k];
}

XK_WIDE static int64_t xk_shrink_row(double* w, double* acc, int64_t K, double scale,
                                     double sub, double x) {
    int64_t kept = 0;
    for (int64_t k = 0; k < K; k++) {
        const double v = w[k];
        double m = fabs(v) - sub;
        m = m > 0.0 ? m : 0.0;
        const double u = copysign(m * scale, v);
        w[k] = u;
        acc[k] += x * u;
        kept += u != 0.0;
    }
    return kept;
}

#endif
