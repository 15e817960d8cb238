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
 * xk_shrink_row_uncounted  the same, without the count
 * xk_hinge_probs p[k] = e^(-s - max(0, 1 - z[k])^2) as floats, k < n: a
 *               Parabel leaf's label probabilities (squared hinge)
 */
#ifndef XK_WIDE_H
#define XK_WIDE_H

#include <stdint.h>
#include <string.h>
#include <math.h>

/* (unused: each kernel includes the whole header and uses a few) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#  define XK_WIDE __attribute__((target_clones("avx2", "default"), unused))
#elif defined(__GNUC__)
#  define XK_WIDE __attribute__((unused))
#else
#  define XK_WIDE
#endif
/* a body shared by two of them, inlined into each (its flags constants there) */
#if defined(__GNUC__)
#  define XK_WIDE_INLINE inline __attribute__((always_inline, unused))
#else
#  define XK_WIDE_INLINE __forceinline
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

/* (inlined into both below, `count` a constant there) */
static XK_WIDE_INLINE int64_t xk_shrink_row_body(
        double* w, double* acc, int64_t K, double scale, double sub, double x, int count) {
    int64_t kept = 0;
    for (int64_t k = 0; k < K; k++) {
        const double v = w[k];
        double m = fabs(v) - sub;
        m = m > 0.0 ? m : 0.0;
        const double u = copysign(m * scale, v);
        w[k] = u;
        acc[k] += x * u;
        if (count)
            kept += u != 0.0;
    }
    return kept;
}

XK_WIDE static int64_t xk_shrink_row(double* w, double* acc, int64_t K, double scale,
                                     double sub, double x) {
    return xk_shrink_row_body(w, acc, K, scale, sub, x, 1);
}

XK_WIDE static void xk_shrink_row_uncounted(double* w, double* acc, int64_t K, double scale,
                                            double sub, double x) {
    xk_shrink_row_body(w, acc, K, scale, sub, x, 0);
}

/* e^t for a leaf's label (t = -s - max(0, 1 - z)^2 <= 0, s the leaf's
 * -log-score): 2^j e^r with j = t / ln 2 rounded (by adding and taking
 * away 1.5 x 2^52) and r = t - j ln 2 (ln 2 in two parts: j ln2_hi is
 * exact) within ln 2 / 2 of 0; e^r by its Taylor polynomial of degree 7
 * (relative error below 1e-8, far under the float written: the float is
 * libm's or one unit apart); 2^j put in the exponent bits (j read from the
 * bits of the sum that rounded it). t below -110
 * (e^t under the least float) counts as -110: 0 is written. Written for the
 * compiler to vectorise: no call, no branch (max(a, 0) as (a + |a|) / 2),
 * integers only in 64-bit lanes. */
XK_WIDE static void xk_hinge_probs(const double* z, int64_t n, double s, float* p) {
    const double shift = 6755399441055744.0;          /* 1.5 x 2^52 */
    for (int64_t k = 0; k < n; k++) {
        double u = 1.0 - z[k];
        u = 0.5 * (u + fabs(u));                        /* max(u, 0), exactly */
        double c = -s - u * u + 110.0;
        const double t = 0.5 * (c + fabs(c)) - 110.0;   /* max(t, -110) */
        const double y = t * 1.4426950408889634 + shift;
        const double jf = y - shift;
        const double r = (t - jf * 6.93147180369123816490e-01) - jf * 1.90821492927058770002e-10;
        const double e = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (
            1.0 / 120 + r * (1.0 / 720 + r * (1.0 / 5040)))))));
        int64_t yb;                 /* y's bits: shift's plus j (j: -160 .. 0) */
        memcpy(&yb, &y, sizeof yb);
        const int64_t bits = (yb - 0x4338000000000000LL + 1023) * ((int64_t) 1 << 52);
        double scale;
        memcpy(&scale, &bits, sizeof scale);
        p[k] = (float) (e * scale);
    }
}

#endif
