# FastXML tree growth: nDCG-optimising splits, each separated by a
# class-balanced L1-regularised logistic regression.
#
# A tree is grown in one nogil call. Nodes are numbered as the C++ tool does:
# root 0; when node i splits, its positive child gets the next index, then its
# negative child; nodes are processed in index order.
#
# Separators are fitted by xmlkit's own solver (SeparatorSolver below:
# newGLMNET, Yuan, Ho & Lin, JMLR 2012, with the C++ tool's stopping rules)
# on the node's points gathered feature-major. It keeps all its state in the
# object and draws coordinate shuffles from a generator seeded by the tree's
# own, so trees grow in threads and a tree is the same whatever the thread
# count.
#
# solver="liblinear" calls liblinear-official's L1R_LR instead, through the
# function pointers of the shared library that the `liblinear` Python package
# loads (bound once by bind_liblinear). That solver shuffles coordinates with
# the C library's global rand(): every solve is preceded by srand(<seed drawn
# from the tree's own generator>), which makes a tree deterministic only while
# one thread of a process trains at a time (xmlkit then grows parallel trees
# in separate processes).

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport srand, free
from libc.math cimport log2, fabs, exp, log1p, rint, frexp, ldexp, INFINITY
from libc.string cimport memcpy, memset
from libcpp cimport bool as cbool
from libcpp.vector cimport vector
from libcpp.utility cimport pair
from libcpp.algorithm cimport sort, partial_sort

import numpy as np
cimport numpy as cnp

from sparse_rows cimport array_copy, mt19937, tree_seed

cnp.import_array()

cdef extern from *:
    """
    #include <cstdint>
    // Ask the cache for the row of point pts[a + XK_AHEAD] (its start in
    // idx, and in val when not NULL) and for the row pointer of point
    // pts[a + 2 XK_AHEAD], in a pass over the rows of the points pts[0:n]:
    // a node's points are spread over X, and without it each row waits
    // for memory. (In C, always inlined: GCC drops a call to a function
    // whose only effect is a prefetch before it would inline it.)
    #define XK_AHEAD 4
    static inline __attribute__((always_inline)) void xk_fetch_ahead(
            const int32_t* pts, int64_t a, int64_t n, const int64_t* ptr,
            const int32_t* idx, const float* val) {
        if (a + 2 * XK_AHEAD < n) __builtin_prefetch(&ptr[pts[a + 2 * XK_AHEAD]]);
        if (a + XK_AHEAD < n) {
            int64_t e = ptr[pts[a + XK_AHEAD]];
            __builtin_prefetch(&idx[e]);
            if (val) __builtin_prefetch(&val[e]);
        }
    }
    """
    void _fetch_ahead "xk_fetch_ahead" (const int32_t* pts, int64_t a, int64_t n,
                                        const int64_t* ptr, const int32_t* idx,
                                        const float* val) noexcept nogil


# ---- liblinear's C ABI (linear.h of liblinear >= 2.44) -------------------

ctypedef ll_model* (*ll_train_t)(const ll_problem*, const ll_parameter*) noexcept nogil
ctypedef void (*ll_free_t)(ll_model*) noexcept nogil
ctypedef void (*ll_print_fn)(const char*) noexcept nogil
ctypedef void (*ll_set_print_t)(ll_print_fn) noexcept nogil

cdef ll_train_t ll_train = NULL
cdef ll_free_t ll_free = NULL
cdef int L1R_LR = 6


cdef void _quiet(const char* s) noexcept nogil:
    pass


def struct_layout():
    """Sizes and field offsets of the liblinear structs as compiled here."""
    cdef ll_parameter p
    cdef ll_model m
    cdef ll_problem q
    cdef char* bp = <char*> &p
    cdef char* bm = <char*> &m
    cdef char* bq = <char*> &q
    return {
        "parameter": (sizeof(ll_parameter), {
            "eps": <char*> &p.eps - bp, "C": <char*> &p.C - bp,
            "weight": <char*> &p.weight - bp, "init_sol": <char*> &p.init_sol - bp,
            "regularize_bias": <char*> &p.regularize_bias - bp,
            "w_recalc": <char*> &p.w_recalc - bp}),
        "model": (sizeof(ll_model), {
            "nr_class": <char*> &m.nr_class - bm, "w": <char*> &m.w - bm,
            "label": <char*> &m.label - bm}),
        "problem": (sizeof(ll_problem), {
            "y": <char*> &q.y - bq, "x": <char*> &q.x - bq, "bias": <char*> &q.bias - bq}),
        "feature_node": (sizeof(ll_node), {}),
    }


def bind_liblinear(size_t train_addr, size_t free_addr, size_t set_print_addr):
    """Bind liblinear's train / free_model_content and silence its output.

    (Not free_and_destroy_model: it also frees param.weight_label and
    param.weight, which point into our own memory.)"""
    global ll_train, ll_free
    ll_train = <ll_train_t> train_addr
    ll_free = <ll_free_t> free_addr
    (<ll_set_print_t> set_print_addr)(_quiet)


cdef inline double round_weight(double w) noexcept nogil:
    """w as a float32 rounded to 16 mantissa bits (relative error <= 7.7e-6,
    about the 6 significant digits of the C++ tool's model files). Models
    store their weights so, and byte planes of such floats compress well."""
    cdef float f = <float> w
    cdef uint32_t bits
    memcpy(&bits, &f, 4)
    if (bits & 0x7F800000U) != 0x7F800000U:
        bits = (bits + 0x40U) & 0xFFFFFF80U
    memcpy(&f, &bits, 4)
    return f


cdef inline uint64_t _xorshift(uint64_t* state) noexcept nogil:
    """The next 32 random bits of a xorshift64* generator (Vigna 2016: the
    high half of its output); state must not be 0."""
    cdef uint64_t x = state[0]
    x ^= x >> 12
    x ^= x << 25
    x ^= x >> 27
    state[0] = x
    return (x * <uint64_t> 0x2545F4914F6CDD1DULL) >> 32


cdef inline double _sigmoid_softplus(double z, double* sp) noexcept nogil:
    """sigmoid(z), and softplus(z) = log(1 + e^z) into sp, both without
    overflow (one exp, one log1p)."""
    cdef double e
    if z >= 0:
        e = exp(-z)
        sp[0] = z + log1p(e)
        return 1.0 / (1.0 + e)
    e = exp(z)
    sp[0] = log1p(e)
    return e / (1.0 + e)


cdef inline double _dot_gather(const float* v, const int32_t* idx, const double* a,
                                const double* x, int64_t e0, int64_t e1) noexcept nogil:
    """sum of v[e] * a[idx[e]] * x[idx[e]] for e in [e0, e1), in four
    independent partial sums (a single running sum waits on each addition's
    latency)."""
    cdef double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0
    cdef int64_t e = e0
    cdef int32_t i0, i1, i2, i3
    while e + 4 <= e1:
        i0 = idx[e]
        i1 = idx[e + 1]
        i2 = idx[e + 2]
        i3 = idx[e + 3]
        s0 += v[e] * a[i0] * x[i0]
        s1 += v[e + 1] * a[i1] * x[i1]
        s2 += v[e + 2] * a[i2] * x[i2]
        s3 += v[e + 3] * a[i3] * x[i3]
        e += 4
    while e < e1:
        i0 = idx[e]
        s0 += v[e] * a[i0] * x[i0]
        e += 1
    return (s0 + s1) + (s2 + s3)


cdef inline void _scatter_add(const float* v, const int32_t* idx, double* x,
                              int64_t e0, int64_t e1, double z) noexcept nogil:
    """x[idx[e]] += v[e] * z for e in [e0, e1) (the indices of one column are
    distinct, so the two updates of a step are independent)."""
    cdef int64_t e = e0
    while e + 2 <= e1:
        x[idx[e]] += v[e] * z
        x[idx[e + 1]] += v[e + 1] * z
        e += 2
    if e < e1:
        x[idx[e]] += v[e] * z


ctypedef fused _Scratch:
    vector[int32_t]
    vector[int64_t]
    vector[uint64_t]
    vector[float]
    vector[double]
    vector[signed char]
    vector[ll_node]
    vector[ll_node*]
    vector[xk_col]


cdef inline void _give_back(_Scratch& v, int64_t n) noexcept nogil:
    """Give back v's memory (its entries go too) when it has room for more
    than twice n entries: call before v is sized to n. Nodes shrink level by
    level: scratch sized for the root would otherwise stay at that size for
    the whole tree, and in every thread (the root's feature columns are as
    large as X)."""
    if <int64_t> v.capacity() > 2 * n + 1024:
        v.clear()
        v.shrink_to_fit()


#: points above which a node's scratch is given back as soon as it is used:
#: reallocating it costs little beside the node's own work, and threads at
#: large nodes at once (the first trees' roots) then do not also hold it
cdef int64_t LARGE_NODE = 1 << 15


cdef inline void _resize(_Scratch& v, int64_t n) noexcept nogil:
    """v.resize(n) for scratch whose entries are all written afterwards,
    after _give_back."""
    _give_back(v, n)
    v.resize(n)


cdef object _take(_Scratch& v, int typenum):
    """v's entries as a new numpy array of type `typenum`; v's memory is given
    back at once (a tree's vectors are then held once, not twice)."""
    out = array_copy(v.data(), v.size(), typenum)
    _give_back(v, 0)
    return out


cdef inline double _grad_hess(const int32_t* pt, const float* val, const double* r,
                              const double* D, int64_t e, int64_t e1, double nu,
                              double* h) noexcept nogil:
    """The loss gradient of the column of entries [e, e1) (points pt, values
    val; per-point loss derivatives r and D), and into h the Hessian
    diagonal (+ nu), in one pass (two partial sums each: see _dot_gather)."""
    cdef double g0 = 0.0, g1 = 0.0, h0 = 0.0, h1 = 0.0, v0, v1
    cdef int32_t p0, p1
    while e + 2 <= e1:
        p0 = pt[e]
        p1 = pt[e + 1]
        v0 = val[e]
        v1 = val[e + 1]
        g0 += v0 * r[p0]
        g1 += v1 * r[p1]
        h0 += v0 * v0 * D[p0]
        h1 += v1 * v1 * D[p1]
        e += 2
    if e < e1:
        v0 = val[e]
        g0 += v0 * r[pt[e]]
        h0 += v0 * v0 * D[pt[e]]
    h[0] = h0 + (h1 + nu)
    return g0 + g1


cdef inline double _violation(double g, double wj, double margin, bint* shrink) noexcept nogil:
    """How far weight j is from optimal for |w_j| + a loss with derivative g
    at w_j: the magnitude of the minimum-norm subgradient. shrink := w_j is 0
    and g lies inside (-1 + margin, 1 - margin), so that it will likely stay
    0 (LIBLINEAR's shrinking test, margin = last maximum violation / n)."""
    cdef double over
    if wj > 0:
        shrink[0] = False
        return fabs(g + 1.0)
    if wj < 0:
        shrink[0] = False
        return fabs(g - 1.0)
    # (|g| - 1 is -(g + 1) for g < -1 and g - 1 for g > 1, bit for bit)
    over = fabs(g) - 1.0
    shrink[0] = over < -margin
    return over if over > 0 else 0.0


cdef class SeparatorSolver:
    """L1-regularised logistic regression with per-point costs by newGLMNET
    (Yuan, Ho & Lin, JMLR 2012): Newton steps on the smooth loss, each
    direction found by randomised coordinate descent on the quadratic model
    plus the L1 term, then an Armijo backtracking line search.

        minimise  ||w||_1 + sum_a C_a log(1 + exp(-y_a w.x_a))

    The caller sets the problem with fill() (n points, nf columns gathered
    feature-major into col_ptr / col_pt / col_val, labels y, costs cw) and
    calls solve(); the
    solution is in w, the margins w.x_a in u. Defaults are the C++ FastXML
    tool's: 10 Newton iterations, 10 coordinate-descent passes each, 20
    halvings, stop once the L1 norm of the minimum-norm subgradient is at
    most eps times its value at w = 0, and LIBLINEAR-style shrinking.
    With small_node > 0, a problem of fewer than small_node points takes
    at most min(max_newton, max_newton_small) Newton iterations.
    Members: see fastxml_tree.pxd.
    """
    def __init__(self, int max_newton=10, int max_inner=10, int max_halvings=20,
                 double eps=0.01, bint warm=False, int max_newton_small=10,
                 int64_t small_node=0):
        self.max_newton = max_newton
        self.max_newton_small = max_newton_small
        self.small_node = small_node
        self.max_inner = max_inner
        self.max_halvings = max_halvings
        self.eps = eps
        self.warm = warm

    cdef void fill(self, const int32_t* pts, int64_t n, const int64_t* xp, const int32_t* xi,
                   const float* xv, const int32_t* fmap, int64_t* lcount, int64_t nf,
                   double bias, bint with_bias, const signed char* sign,
                   double cpos, double cneg) noexcept nogil:
        """Set the problem: the points pts[0:n] of the CSR rows (xp, xi, xv),
        column i as local column fmap[i] (local column k holds lcount[k] of
        the points' entries; lcount is zeroed on return), then with
        `with_bias` a last column of value `bias` for every point; labels
        from sign (> 0: +1 with cost cpos, else -1 with cost cneg).
        The loss gradient and Hessian diagonal at w = 0 are added up into
        grad0 and hdiag0 in the same pass (point by point, so in each
        column's entry order): the first Newton step from zero needs no
        pass of its own."""
        cdef int64_t a, j, k, pos, ncol = nf + (1 if with_bias else 0)
        cdef int32_t p
        cdef double rg, dh, gb = 0.0, hb = 0.0
        cdef float v
        cdef xk_col* c
        cdef xk_col* acc
        cdef int64_t* cp
        cdef int32_t* cpt
        cdef float* cval
        self.n = n
        self.nf = ncol
        _resize(self.col_ptr, ncol + 1)
        _resize(self.acc, nf)
        cp = self.col_ptr.data()
        acc = self.acc.data()
        cp[0] = 0
        for k in range(nf):
            cp[k + 1] = cp[k] + lcount[k]
            acc[k].pos = cp[k]
            acc[k].g = 0.0
            acc[k].h = 0.0
            lcount[k] = 0
        if with_bias:
            cp[ncol] = cp[nf] + n
        _resize(self.col_pt, cp[ncol])
        _resize(self.col_val, cp[ncol])
        cpt = self.col_pt.data()
        cval = self.col_val.data()
        self._labels(n, ncol, sign, cpos, cneg)
        for a in range(n):
            _fetch_ahead(pts, a, n, xp, xi, xv)
            p = pts[a]
            # the loss derivatives at u = 0: r_a = -y_a C_a / 2, D_a = C_a / 4
            rg = -0.5 * self.y[a] * self.cw[a]
            dh = 0.25 * self.cw[a]
            for j in range(xp[p], xp[p + 1]):
                c = &acc[fmap[xi[j]]]
                pos = c.pos
                v = xv[j]
                cpt[pos] = <int32_t> a
                cval[pos] = v
                c.pos = pos + 1
                c.g += rg * v
                c.h += dh * v * v
            if with_bias:
                pos = cp[nf] + a
                cpt[pos] = <int32_t> a
                cval[pos] = <float> bias
                gb += rg * <float> bias
                hb += dh * <float> bias * <float> bias
        for k in range(nf):
            self.grad0[k] = acc[k].g
            self.hdiag0[k] = acc[k].h
        if with_bias:
            self.grad0[nf] = gb
            self.hdiag0[nf] = hb
        if nf > LARGE_NODE:
            # (a node of that many columns is large: its column state goes
            # now, as large nodes' per-point scratch does in let_go)
            _give_back(self.acc, 0)
        self.visits += cp[ncol]     # (the pass of the derivatives at 0)
        self.cptr = cp
        self.cpt = cpt
        self.cval = cval

    cdef void _labels(self, int64_t n, int64_t ncol, const signed char* sign, double cpos,
                      double cneg) noexcept nogil:
        """Labels y and costs cw of the n points from sign (> 0: +1 with cost
        cpos, else -1 with cost cneg); grad0 and hdiag0 sized for ncol
        columns (their entries are for the caller to set)."""
        cdef int64_t a
        _resize(self.y, n)
        _resize(self.cw, n)
        for a in range(n):
            if sign[a] > 0:
                self.y[a] = 1
                self.cw[a] = cpos
            else:
                self.y[a] = -1
                self.cw[a] = cneg
        _resize(self.grad0, ncol)
        _resize(self.hdiag0, ncol)

    cdef void lend(self, xk_slots* root) noexcept nogil:
        """Hand the problem's columns (just filled) over to `root`, the
        shared copy of the roots' columns: the solver goes on reading them
        there (a swap moves the buffers, not the entries)."""
        self.col_ptr.swap(root.root_ptr)
        self.col_pt.swap(root.root_pt)
        self.col_val.swap(root.root_val)

    cdef void borrow(self, xk_slots* root, int64_t n, const signed char* sign, double cpos,
                     double cneg) noexcept nogil:
        """Set the problem as fill() would for the points whose columns
        `root` holds (a root's: built by another solver's fill, then lend),
        with labels from sign (see fill). The derivatives at w = 0 are
        added up column by column, each in its entries' (the points')
        order, as fill adds them: the same sums."""
        cdef int64_t a, e, k, ncol = <int64_t> root.root_ptr.size() - 1
        cdef double v
        cdef double* g0
        cdef double* h0
        cdef double* rg
        cdef double* dh
        cdef const int64_t* cp = root.root_ptr.data()
        cdef const int32_t* ct = root.root_pt.data()
        cdef const float* cv = root.root_val.data()
        self.n = n
        self.nf = ncol
        self._labels(n, ncol, sign, cpos, cneg)
        _resize(self.r, n)
        _resize(self.D, n)
        rg = self.r.data()        # (scratch here: solve() sets r and D anew)
        dh = self.D.data()
        for a in range(n):
            # the loss derivatives at u = 0, as in fill
            rg[a] = -0.5 * self.y[a] * self.cw[a]
            dh[a] = 0.25 * self.cw[a]
        g0 = self.grad0.data()
        h0 = self.hdiag0.data()
        for k in range(ncol):
            g0[k] = 0.0
            h0[k] = 0.0
            for e in range(cp[k], cp[k + 1]):
                a = ct[e]
                v = cv[e]
                g0[k] += rg[a] * v
                h0[k] += dh[a] * v * v
        self.visits += cp[ncol]
        self.cptr = cp
        self.cpt = ct
        self.cval = cv

    cdef void let_go(self) noexcept nogil:
        """Give back the problem's columns and per-point vectors (after a
        large node: see LARGE_NODE)."""
        _give_back(self.col_pt, 0)
        _give_back(self.col_val, 0)
        _give_back(self.u, 0)
        _give_back(self.xTd, 0)
        _give_back(self.r, 0)
        _give_back(self.D, 0)
        _give_back(self.lossv, 0)
        _give_back(self.tq, 0)
        _give_back(self.tsp, 0)
        _give_back(self.cw, 0)

    cdef void _point_terms(self, bint trial) noexcept nogil:
        """r, D and the loss terms at the margins u: from the line search's
        last trial (`trial`: its q and softplus, at u + xTd = the new u), or
        computed from u."""
        cdef int64_t a
        cdef double z, q, sp, c
        for a in range(self.n):
            c = self.cw[a]
            if trial:
                q = self.tq[a]
                sp = self.tsp[a]
            else:
                z = -self.y[a] * self.u[a]      # loss = C softplus(z)
                q = _sigmoid_softplus(z, &sp)   # probability of the wrong side
            self.r[a] = -self.y[a] * c * q
            self.D[a] = c * q * (1.0 - q)
            self.lossv[a] = c * sp

    cdef double _warm_start(self) noexcept nogil:
        """Start from w = t d instead of 0: d is the proximal-gradient step
        at 0 (the loss gradient soft-thresholded by the L1 term; with the
        class-balanced costs, the difference of the two sides' mean rows,
        shrunk), t >= 0 minimises the objective along d (1-d Newton steps on
        the margins, O(n) each). Sets w, u and the point terms; returns the
        L1 norm of the minimum-norm subgradient at 0 (the stopping rule's
        reference, as from a cold start). The gradient at 0 is grad0 (filled
        with the columns by fill); one pass over d's columns for the margins
        of d."""
        cdef int64_t n = self.n, nf = self.nf, a, j
        cdef double g, dnorm = 0.0, t = 0.0, f1, f2, m, q, sp, step
        cdef int it
        for a in range(n):
            self.xTd[a] = 0.0
        for j in range(nf):
            g = self.grad0[j]
            if g + 1.0 < 0:
                self.w[j] = -(g + 1.0)
            elif g - 1.0 > 0:
                self.w[j] = -(g - 1.0)
            else:
                continue
            dnorm += fabs(self.w[j])      # (= the subgradient's violation at 0)
            _scatter_add(self.cval, self.cpt, self.xTd.data(), self.cptr[j],
                         self.cptr[j + 1], self.w[j])
            self.visits += self.cptr[j + 1] - self.cptr[j]
        if dnorm == 0:
            return 0.0
        # minimise t |d|_1 + sum_a C_a softplus(-y_a t m_a) over t >= 0 (convex)
        for it in range(20):
            f1 = dnorm
            f2 = 0.0
            for a in range(n):
                m = self.y[a] * self.xTd[a]
                q = _sigmoid_softplus(-t * m, &sp)
                f1 -= self.cw[a] * m * q
                f2 += self.cw[a] * m * m * q * (1.0 - q)
            if f2 <= 0:
                break
            step = f1 / f2
            if t - step < 0:
                step = t * 0.5 if f1 > 0 else 0.0
                if step == 0:
                    break
            t -= step
            if fabs(step) <= 1e-3 * t:
                break
        for j in range(nf):
            self.w[j] *= t
        for a in range(n):
            self.u[a] = t * self.xTd[a]
        self._point_terms(False)
        return dnorm

    cdef int solve(self, mt19937& rng) noexcept nogil:
        """Solve the problem held in the object; returns the Newton iterations."""
        cdef int max_newton = self.max_newton
        if self.n < self.small_node and self.max_newton_small < max_newton:
            max_newton = self.max_newton_small
        cdef int64_t n = self.n, nf = self.nf
        cdef int64_t a, j, e, s, active, qp
        cdef int newton = 0, inner, halvings
        cdef double nu = 1e-12, sigma = 0.01, inf = INFINITY
        cdef double inner_eps = 1.0, gmax_old = inf, qp_gmax_old, gmax_new, gnorm1
        cdef double gnorm1_init = 0.0, qp_gmax_new, qp_gnorm1, g, h, gp, gn, viol, z
        cdef double w_norm = 0.0, w_norm_new, w_norm_rest, delta, cond, wj
        cdef bint shrink
        _give_back(self.w, nf)
        self.w.assign(nf, 0.0)
        _resize(self.wpd, nf)
        _resize(self.grad, nf)
        _resize(self.hdiag, nf)
        _resize(self.index, nf)
        _give_back(self.u, n)
        self.u.assign(n, 0.0)
        _resize(self.xTd, n)
        _resize(self.r, n)
        _resize(self.D, n)
        _resize(self.lossv, n)
        _resize(self.tq, n)
        _resize(self.tsp, n)
        self._point_terms(False)
        # (the vectors' data as local pointers: the compiler cannot keep
        # members in registers across the stores of the loops below)
        cdef double* w = self.w.data()
        cdef double* wpd = self.wpd.data()
        cdef double* grad = self.grad.data()
        cdef double* hdiag = self.hdiag.data()
        cdef int32_t* index = self.index.data()
        cdef double* u = self.u.data()
        cdef double* xTd = self.xTd.data()
        cdef const double* D = self.D.data()
        cdef const double* r = self.r.data()
        cdef const double* cw = self.cw.data()
        cdef const double* lossv = self.lossv.data()
        cdef double* tq = self.tq.data()
        cdef double* tsp = self.tsp.data()
        cdef const signed char* y = self.y.data()
        cdef const int64_t* cptr = self.cptr
        cdef const int32_t* cpt = self.cpt
        cdef const float* cval = self.cval
        cdef int64_t visits = 0
        cdef int32_t tmp
        for j in range(nf):
            index[j] = <int32_t> j
        self.last_inner = 0
        if self.warm:
            gnorm1_init = self._warm_start()
            for j in range(nf):
                w_norm += fabs(w[j])
        for j in range(nf):
            wpd[j] = w[j]
        cdef const double* grad0 = self.grad0.data()
        cdef const double* hdiag0 = self.hdiag0.data()
        cdef bint at_zero = not self.warm
        # coordinate orders: a xorshift64* generator seeded from the tree's
        # (a third of the cost of drawing each from the Mersenne twister)
        cdef uint64_t xs = (<uint64_t> rng() << 32) | rng() | 1
        while newton < max_newton:
            # -- gradient and Hessian diagonal (from fill at w = 0); outer
            # shrinking
            gmax_new = 0.0
            gnorm1 = 0.0
            active = nf
            s = 0
            while s < active:
                j = index[s]
                if at_zero:
                    g = grad0[j]
                    hdiag[j] = hdiag0[j] + nu
                else:
                    g = _grad_hess(cpt, cval, r, D, cptr[j], cptr[j + 1], nu, &hdiag[j])
                    visits += cptr[j + 1] - cptr[j]
                grad[j] = g
                viol = _violation(g, w[j], gmax_old / n, &shrink)
                if shrink:
                    active -= 1
                    index[s] = index[active]
                    index[active] = <int32_t> j
                    continue
                if viol > gmax_new:
                    gmax_new = viol
                gnorm1 += viol
                s += 1
            if newton == 0 and not self.warm:
                gnorm1_init = gnorm1
            if gnorm1 <= self.eps * gnorm1_init:
                break

            # -- direction: coordinate descent on the quadratic model (wpd
            # equals w here; only the active columns [0, active) move)
            for a in range(n):
                xTd[a] = 0.0
            inner = 0
            qp_gmax_old = inf
            qp = active
            while inner < self.max_inner:
                qp_gmax_new = 0.0
                qp_gnorm1 = 0.0
                # (a uniform draw from [0, qp - s) by multiply and shift)
                for s in range(qp):
                    e = s + <int64_t> ((_xorshift(&xs) * <uint64_t> (qp - s)) >> 32)
                    tmp = index[s]
                    index[s] = index[e]
                    index[e] = tmp
                s = 0
                while s < qp:
                    j = index[s]
                    h = hdiag[j]
                    wj = wpd[j]
                    g = grad[j] + (wj - w[j]) * nu + _dot_gather(
                        cval, cpt, D, xTd, cptr[j], cptr[j + 1])
                    visits += cptr[j + 1] - cptr[j]
                    viol = _violation(g, wj, qp_gmax_old / n, &shrink)
                    if shrink:
                        qp -= 1
                        index[s] = index[qp]
                        index[qp] = <int32_t> j
                        continue
                    gp = g + 1.0
                    gn = g - 1.0
                    if viol > qp_gmax_new:
                        qp_gmax_new = viol
                    qp_gnorm1 += viol
                    s += 1
                    if gp < h * wj:
                        z = -gp / h
                    elif gn > h * wj:
                        z = -gn / h
                    else:
                        z = -wj
                    if fabs(z) < 1e-12:
                        continue
                    if z > 10.0:
                        z = 10.0
                    elif z < -10.0:
                        z = -10.0
                    wpd[j] = wj + z
                    _scatter_add(cval, cpt, xTd, cptr[j], cptr[j + 1], z)
                inner += 1
                if qp_gnorm1 <= inner_eps * gnorm1_init:
                    if qp == active:
                        break
                    qp = active          # converged on the shrunk set: check them all
                    qp_gmax_old = inf
                    continue
                qp_gmax_old = qp_gmax_new
            self.last_inner += inner

            # -- line search along d (which is 0 outside the active columns)
            delta = 0.0
            w_norm_rest = w_norm
            w_norm_new = 0.0
            for s in range(active):
                j = index[s]
                delta += grad[j] * (wpd[j] - w[j])
                w_norm_rest -= fabs(w[j])
                w_norm_new += fabs(wpd[j])
            w_norm_new += w_norm_rest
            delta += w_norm_new - w_norm
            halvings = 0
            while halvings < self.max_halvings:
                cond = w_norm_new - w_norm - sigma * delta
                for a in range(n):
                    tq[a] = _sigmoid_softplus(-y[a] * (u[a] + xTd[a]), &tsp[a])
                    cond += cw[a] * tsp[a] - lossv[a]
                if cond <= 0:
                    break
                w_norm_new = 0.0
                for s in range(active):
                    j = index[s]
                    wpd[j] = (w[j] + wpd[j]) * 0.5
                    w_norm_new += fabs(wpd[j])
                w_norm_new += w_norm_rest
                delta *= 0.5
                for a in range(n):
                    xTd[a] *= 0.5
                halvings += 1
            if halvings < self.max_halvings:
                at_zero = False
                w_norm = w_norm_new
                for s in range(active):
                    j = index[s]
                    w[j] = wpd[j]
                for a in range(n):
                    u[a] += xTd[a]
                self._point_terms(True)
            else:
                for s in range(active):
                    j = index[s]
                    wpd[j] = w[j]
            if inner == 1:
                inner_eps *= 0.25
            newton += 1
            gmax_old = gmax_new
        self.visits += visits
        self.last_newton = newton
        self.newtons += newton
        self.solves += 1
        return newton

    def solve_csr(self, X_indptr, X_indices, X_data, y, double cost_pos, double cost_neg,
                  uint64_t seed=0):
        """Solve for points given as CSR rows (tests and experiments): labels y
        (+1/-1), cost cost_pos for y = +1 and cost_neg for y = -1. Returns the
        weights."""
        cdef const int64_t[::1] xp = np.ascontiguousarray(X_indptr, dtype=np.int64)
        cdef const int32_t[::1] xi = np.ascontiguousarray(X_indices, dtype=np.int32)
        cdef const float[::1] xv = np.ascontiguousarray(X_data, dtype=np.float32)
        cdef const signed char[::1] yy = np.ascontiguousarray(y, dtype=np.int8)
        cdef int64_t n = xp.shape[0] - 1, nf
        cdef mt19937 rng
        if yy.shape[0] != n:
            raise ValueError("y and X have different numbers of rows")
        if xi.shape[0] and (np.min(xi) < 0):
            raise ValueError("negative column index")
        nf = (int(np.max(xi)) + 1) if xi.shape[0] else 0
        cdef const int32_t[::1] pts = np.arange(max(n, 1), dtype=np.int32)
        cdef const int32_t[::1] ident = np.arange(max(nf, 1), dtype=np.int32)
        cdef int64_t[::1] lcount = np.bincount(np.asarray(xi), minlength=max(nf, 1)).astype(np.int64)
        self.fill(&pts[0], n, &xp[0], &xi[0] if xi.shape[0] else NULL,
                  &xv[0] if xv.shape[0] else NULL, &ident[0], &lcount[0], nf,
                  0.0, False, <const signed char*> &yy[0] if n else NULL, cost_pos, cost_neg)
        rng.seed(<uint32_t> seed)
        with nogil:
            self.solve(rng)
        return np.asarray(<double[:nf]> self.w.data()).copy() if nf else np.zeros(0)


cdef int64_t _gather(const int32_t* pts, int64_t n, const int64_t* ptr, const int32_t* idx,
                     vector[int32_t]& local, vector[int32_t]& act, int32_t* buf,
                     int64_t* lcount) noexcept nogil:
    """The distinct column indices of the rows of points pts[0:n] into `act`;
    local[i] := position of i in act (all other entries of `local` stay -1;
    _release resets them). `act` is ascending, or with `lcount` (not NULL)
    in order of first appearance (the separator's weights are put in index
    order at the end), and then lcount[local[i]] += the number of rows
    holding i.
    buf: scratch of len(local) + 1 entries (every entry is written to
    buf[len(act)], also once len(act) is len(local)). Returns len(act).

    (Without a branch on whether an index is new: which it is cannot be
    predicted, and the mispredictions were most of the pass's time.)"""
    cdef int64_t a, j, k, m = 0
    cdef int32_t p, i, l
    cdef bint new
    cdef int32_t* loc = local.data()
    for a in range(n):
        _fetch_ahead(pts, a, n, ptr, idx, NULL)
        p = pts[a]
        for j in range(ptr[p], ptr[p + 1]):
            i = idx[j]
            l = loc[i]
            new = l < 0
            buf[m] = i
            l = <int32_t> m if new else l
            loc[i] = l
            m += new
            if lcount != NULL:
                lcount[l] += 1
    act.assign(buf, buf + m)
    if lcount == NULL:
        if <int64_t> local.size() <= 16 * m:
            # (a scan of the marks in index order beats sorting when the
            # columns are few beside the distinct ones)
            k = 0
            for i in range(<int32_t> local.size()):
                if loc[i] >= 0:
                    act[k] = i
                    loc[i] = <int32_t> k
                    k += 1
        else:
            sort(act.begin(), act.end())
            for k in range(m):
                loc[act[k]] = <int32_t> k
    return m


cdef inline void _release(vector[int32_t]& local, vector[int32_t]& act) noexcept nogil:
    """Undo _gather's numbering: local[i] := -1 for the indices in act."""
    cdef int64_t k
    for k in range(<int64_t> act.size()):
        local[act[k]] = -1


cdef inline void _add_row(double* sums, const int32_t* idx, const float* val, int64_t e0,
                          int64_t e1, double scale, double unit) noexcept nogil:
    """sums[idx[e]] += the multiple of `unit` nearest scale * val[e] * unit,
    for e in [e0, e1) (`scale` is a term's factor over the unit; see
    NdcgPartition.partition: sums of such multiples are exact)."""
    cdef int64_t e
    for e in range(e0, e1):
        sums[idx[e]] += rint(scale * val[e]) * unit


cdef inline void _move_row(double* dst, double* src, const int32_t* idx, const float* val,
                           int64_t e0, int64_t e1, double scale, double unit) noexcept nogil:
    """_add_row to dst, and the same terms taken from src."""
    cdef int64_t e
    cdef double q
    for e in range(e0, e1):
        q = rint(scale * val[e]) * unit
        dst[idx[e]] += q
        src[idx[e]] -= q


cdef inline void _gain_sums2(const float* v, const int32_t* idx, const double* g, int64_t a0,
                             int64_t a1, int64_t b0, int64_t b1, double* out) noexcept nogil:
    """out[0] := sum of v[e] * g[idx[e]] over [a0, a1), out[1] := the same over
    [b0, b1): each one running sum in entry order, the two interleaved (each
    addition waits on its own sum's last one only)."""
    cdef double sa = 0.0, sb = 0.0
    cdef int64_t k, both = min(a1 - a0, b1 - b0)
    for k in range(both):
        sa += v[a0 + k] * g[idx[a0 + k]]
        sb += v[b0 + k] * g[idx[b0 + k]]
    for k in range(a0 + both, a1):
        sa += v[k] * g[idx[k]]
    for k in range(b0 + both, b1):
        sb += v[k] * g[idx[k]]
    out[0] = sa
    out[1] = sb


cdef inline uint64_t _rank_key(double s, int64_t l) noexcept nogil:
    """The sort key of label l with sum s (see NdcgPartition._rank)."""
    cdef float f
    cdef uint32_t bits = 0
    if s > 0:
        f = <float> s
        memcpy(&bits, &f, 4)
    return ((<uint64_t> (0xFFFFFFFFU - bits)) << 32) | <uint64_t> l


cdef inline bint _equal_sums(const uint64_t* kv, const double* s, int64_t a,
                             int64_t b) noexcept nogil:
    """Whether the labels of keys kv[a:b] all have the same sum: then keys
    sorted on their lower bits (the label) are in the exact order already
    (labels seen at one point only tie so, and often)."""
    cdef double s0 = s[kv[a] & 0xFFFFFFFFULL]
    cdef int64_t k
    for k in range(a + 1, b):
        if s[kv[k] & 0xFFFFFFFFULL] != s0:
            return False
    return True


cdef void _radix_sort_high(uint64_t* a, int64_t n, vector[uint64_t]& tmp) noexcept nogil:
    """Sort a[0:n] by the upper 32 bits, stably (entries with equal upper
    bits keep their order): least-significant-digit radix sort, a byte per
    pass, passes where every entry has the same byte skipped. On keys
    already ascending in their lower 32 bits this is the full 64-bit sort."""
    cdef int64_t i, b, c, total
    cdef int64_t count[4][256]
    cdef int pas
    cdef uint64_t* src = a
    cdef uint64_t* dst
    cdef uint64_t* t
    if n < 2:
        return
    _resize(tmp, n)
    dst = tmp.data()
    memset(count, 0, sizeof(count))
    for i in range(n):
        for pas in range(4):
            count[pas][(src[i] >> (32 + 8 * pas)) & 0xFF] += 1
    for pas in range(4):
        if count[pas][(src[0] >> (32 + 8 * pas)) & 0xFF] == n:
            continue
        total = 0
        for b in range(256):
            c = count[pas][b]
            count[pas][b] = total
            total += c
        for i in range(n):
            b = (src[i] >> (32 + 8 * pas)) & 0xFF
            dst[count[pas][b]] = src[i]
            count[pas][b] += 1
        t = src
        src = dst
        dst = t
    if src != a:
        memcpy(a, src, n * sizeof(uint64_t))


cdef class NdcgPartition:
    """The FastXML split criterion: a node's points are given random sides,
    then sides and per-side label rankings alternate, each maximising the
    summed nDCG over the ranking of all labels (points move to the side whose
    ranking serves their labels better), until the objective gains less than
    1e-6. Members: see fastxml_tree.pxd."""

    def __init__(self, bint use_idcg=True):
        self.use_idcg = use_idcg
        self.n_labels = -1

    cdef void reset(self, int64_t n_labels):
        """Size the tables for n_labels label columns."""
        cdef int64_t r
        self.n_labels = n_labels
        self.disc.resize(n_labels + 2)
        self.cs.resize(n_labels + 2)
        self.cs[0] = 1.0
        for r in range(n_labels + 1):
            self.disc[r] = 1.0 / log2(r + 2.0)
        for r in range(1, n_labels + 2):
            self.cs[r] = (self.cs[r - 1] if r > 1 else 0.0) + self.disc[r - 1]
        if not self.use_idcg:
            for r in range(n_labels + 2):
                self.cs[r] = 1.0
        self.lmap.clear()
        self.lmap.resize(n_labels, -1)
        self.gbuf.resize(n_labels + 1)

    def rank_labels(self, sums, previous_sums=None):
        """The ranks _rank gives the labels with these sums (tests): from
        scratch, or as a step of an alternation after a step whose sums
        were `previous_sums` (ranked from scratch first)."""
        cdef int64_t m = len(sums), k
        cdef vector[double] s, so
        cdef vector[int32_t] r, order
        s.resize(m)
        r.resize(m)
        for k in range(m):
            s[k] = sums[k]
        if previous_sums is not None:
            if len(previous_sums) != m:
                raise ValueError("previous_sums and sums differ in length")
            so.resize(m)
            for k in range(m):
                so[k] = previous_sums[k]
            self._rank(so, NULL, r, order, m)
            self._rank(s, so.data(), r, order, m)
        else:
            self._rank(s, NULL, r, order, m)
        return np.array([r[k] for k in range(m)], dtype=np.int32)

    def sides(self, Y_indptr, Y_indices, Y_data, int64_t n_labels, uint32_t seed):
        """The partition of the points of the label rows Y (CSR), as one node
        (tests): (the random sides it starts from, the sides it returns),
        each an int8 array of +1 / -1, with its generator seeded by `seed`."""
        cdef const int64_t[::1] yp = np.ascontiguousarray(Y_indptr, dtype=np.int64)
        cdef const int32_t[::1] yi = np.ascontiguousarray(Y_indices, dtype=np.int32)
        cdef const float[::1] yv = np.ascontiguousarray(Y_data, dtype=np.float32)
        cdef int64_t n = yp.shape[0] - 1, a
        cdef const int32_t[::1] pts = np.arange(max(n, 1), dtype=np.int32)
        cdef vector[signed char] sign
        cdef mt19937 rng, first
        if n < 1 or yi.shape[0] != yp[n] or yv.shape[0] != yp[n]:
            raise ValueError("Y is not a CSR matrix of one row or more")
        if yi.shape[0] and (np.min(yi) < 0 or np.max(yi) >= n_labels):
            raise ValueError("a label index is out of range")
        self.reset(n_labels)
        rng.seed(seed)
        first = rng
        start = np.array([1 if (first() & 1) else -1 for a in range(n)], dtype=np.int8)
        with nogil:
            self.partition(&pts[0], n, &yp[0], &yi[0], &yv[0], sign, rng)
        return start, np.array([sign[a] for a in range(n)], dtype=np.int8)

    cdef int64_t partition(self, const int32_t* pts, int64_t n, const int64_t* yp,
                           const int32_t* yi, const float* yv, vector[signed char]& sign,
                           mt19937& rng) noexcept nogil:
        """Sides of the points pts[0:n] (label rows of Y: yp, yi, yv) into
        sign[0:n] (+1 / -1); returns how many are on the + side (0 when the
        points carry no label: then no random numbers are drawn)."""
        cdef int64_t a, b, q, j, k, m, n_pos, step, moved
        cdef int32_t p
        cdef double obj, prev, delta
        cdef double d2[2]
        cdef const int64_t* ptr
        cdef double* sp
        cdef double* sn
        cdef double* gain
        cdef float* lval
        cdef int32_t* lidx
        cdef signed char sg
        cdef bint last
        cdef double total = 0.0, unit, row
        cdef int expo

        # -- active labels, local label rows, per-point nDCG normaliser
        m = _gather(pts, n, yp, yi, self.lmap, self.act_l, self.gbuf.data(), NULL)
        if m == 0:
            return 0
        _resize(self.ly_ptr, n + 1)
        self.ly_ptr[0] = 0
        for a in range(n):
            p = pts[a]
            self.ly_ptr[a + 1] = self.ly_ptr[a] + (yp[p + 1] - yp[p])
        _resize(self.ly_idx, self.ly_ptr[n])
        _resize(self.ly_val, self.ly_ptr[n])
        _resize(self.inorm, n)
        _resize(sign, n)
        lidx = self.ly_idx.data()
        lval = self.ly_val.data()
        k = 0
        for a in range(n):
            _fetch_ahead(pts, a, n, yp, yi, yv)
            p = pts[a]
            for j in range(yp[p], yp[p + 1]):
                lidx[k] = self.lmap[yi[j]]
                lval[k] = yv[j]
                k += 1
            self.inorm[a] = 1.0 / self.cs[yp[p + 1] - yp[p]]
            # (typed temporaries: Cython mistypes `x if c else y` stored
            # through a vector reference)
            sg = 1 if (rng() & 1) else -1
            sign[a] = sg
        _release(self.lmap, self.act_l)

        # -- the side sums are kept exact, so that they follow the points that
        # move instead of being added up anew at every step (and equal sums
        # tie exactly, whatever order they were added in): each term
        # inorm * value is rounded to a multiple of a power of two, `unit`,
        # chosen so that all the terms together stay below 2^52 units, which
        # doubles add without rounding
        for a in range(n):
            row = 0.0
            for j in range(self.ly_ptr[a], self.ly_ptr[a + 1]):
                row += fabs(lval[j])
            total += row * self.inorm[a]
        expo = 0
        if total > 0:
            frexp(total, &expo)             # total < 2^expo
            expo = min(51 - expo, 960)      # (1 / unit finite beside any inorm)
        unit = ldexp(1.0, -expo)

        # -- the alternation; each step's side sums are the step before's,
        # updated by the points that changed sides
        _give_back(self.sp, m)
        self.sp.assign(m, 0.0)
        _give_back(self.sn, m)
        self.sn.assign(m, 0.0)
        _resize(self.spo, m)
        _resize(self.sno, m)
        _resize(self.rp, m)
        _resize(self.rn, m)
        _resize(self.gain, m)
        sp = self.sp.data()
        sn = self.sn.data()
        for a in range(n):
            _add_row(sp if sign[a] > 0 else sn, lidx, lval, self.ly_ptr[a],
                     self.ly_ptr[a + 1], ldexp(self.inorm[a], expo), unit)
        prev = -2.0
        step = 0
        while True:
            # (the first reassignment moves about half the points: the step
            # after it is ranked from scratch too; later steps re-place the
            # labels whose sums changed since the step before)
            self._rank(self.sp, <const double*> NULL if step < 2 else self.spo.data(),
                       self.rp, self.op, m)
            self._rank(self.sn, <const double*> NULL if step < 2 else self.sno.data(),
                       self.rn, self.on, m)
            step += 1
            obj = 0.0
            for k in range(m):
                obj += self.disc[self.rp[k]] * sp[k] + self.disc[self.rn[k]] * sn[k]
                self.gain[k] = self.disc[self.rp[k]] - self.disc[self.rn[k]]
            obj /= n
            # (this step's sums are kept for the next step's ranking; the
            # next step's start from them)
            self.sp.swap(self.spo)
            self.sn.swap(self.sno)
            sp = self.sp.data()
            sn = self.sn.data()
            memcpy(sp, self.spo.data(), m * sizeof(double))
            memcpy(sn, self.sno.data(), m * sizeof(double))
            last = obj - prev < 1e-6
            gain = self.gain.data()
            ptr = self.ly_ptr.data()
            moved = 0
            a = 0
            while a < n:
                # (the gains of two points at a time: b is the point after them)
                b = a + 2 if a + 1 < n else a + 1
                _gain_sums2(lval, lidx, gain, ptr[a], ptr[a + 1], ptr[a + 1], ptr[b], d2)
                for q in range(b - a):
                    delta = d2[q]
                    # (selects, not branches: a point's side is not predictable)
                    sg = sign[a]
                    if (sg > 0 and delta < 0) or (sg < 0 and delta > 0):
                        sign[a] = -sg
                        moved += 1
                        if not last:
                            _move_row(sn if sg > 0 else sp, sp if sg > 0 else sn, lidx,
                                      lval, ptr[a], ptr[a + 1],
                                      ldexp(self.inorm[a], expo), unit)
                    a += 1
            # (no point moved: the next step would rank the same sums the
            # same way, gain nothing and move nobody, so it is skipped)
            if last or moved == 0:
                break
            prev = obj
        n_pos = 0
        for a in range(n):
            n_pos += sign[a] > 0
        # the node's label rows are not needed by the separator, which runs
        # next and, on large nodes, holds the most memory: given back now
        # when large (the next node is at most this one's size)
        if n > LARGE_NODE:
            _give_back(self.ly_ptr, 0)
            _give_back(self.ly_idx, 0)
            _give_back(self.ly_val, 0)
            _give_back(self.inorm, 0)
        return n_pos

    cdef void _rank(self, vector[double]& s, const double* so, vector[int32_t]& r,
                    vector[int32_t]& order, int64_t m) noexcept nogil:
        """Rank labels by decreasing sum, ties to the lower local index; labels
        with a sum that is not positive follow in index order: r[l] := rank
        of l, and order[k] := the label of rank k. That order is total, so
        the ranks do not depend on how they were found:

        - from scratch (so NULL): labels are sorted as 64-bit keys packing
          the sum rounded to float32 (whose bit pattern orders like the
          value for positive floats; inverted, so that ascending keys are
          decreasing sums; all ones for a sum that is not positive) above
          the label. Rounding is monotone, so only runs of equal float32
          sums can be out of the exact order: those are re-sorted on the
          double sums.
        - from the previous step (so: the sums `order` holds the order of):
          the labels whose sum changed (some of the points with them
          changed sides) are sorted on their new sums and merged into the
          others, which keep their order. That costs a pass over the labels
          and a sort of the changed ones; when more than a quarter changed,
          the full sort runs instead."""
        cdef int64_t k
        cdef const double* sv = s.data()
        if so == NULL or not self._merge_changed(sv, so, order, m):
            self._sort_all(sv, order, m)
        for k in range(m):
            r[order[k]] = <int32_t> k

    cdef bint _merge_changed(self, const double* sv, const double* so, vector[int32_t]& order,
                             int64_t m) noexcept nogil:
        """_rank after a step: order := the labels by sums sv, from `order`,
        their order by the sums so of the step before. False (order
        untouched) when more than a quarter of the sums changed."""
        cdef int64_t k, j = 0, c, out = 0, l
        cdef double v
        cdef int32_t* od
        cdef int32_t* nw
        self.order.clear()
        for l in range(m):
            if sv[l] != so[l]:
                v = sv[l] if sv[l] > 0 else 0.0
                self.order.push_back(pair[double, int32_t](-v, <int32_t> l))
                if <int64_t> self.order.size() * 4 > m:
                    return False
        c = self.order.size()
        sort(self.order.begin(), self.order.end())
        _resize(self.merged, m)
        od = order.data()
        nw = self.merged.data()
        for k in range(m):
            l = od[k]
            if sv[l] != so[l]:
                continue
            v = -(sv[l] if sv[l] > 0 else 0.0)
            while j < c and (self.order[j].first < v or (
                    self.order[j].first == v and self.order[j].second < l)):
                nw[out] = self.order[j].second
                out += 1
                j += 1
            nw[out] = <int32_t> l
            out += 1
        while j < c:
            nw[out] = self.order[j].second
            out += 1
            j += 1
        order.swap(self.merged)
        return True

    cdef void _sort_all(self, const double* sv, vector[int32_t]& order, int64_t m) noexcept nogil:
        """_rank from scratch: order := the labels by sums sv."""
        cdef int64_t k, j, c, a, b, l
        cdef int32_t* od
        cdef uint64_t* kv
        _resize(self.keys, m)
        _resize(order, m + 1)       # (the passes below write one entry past the end)
        kv = self.keys.data()
        od = order.data()
        # keys of the labels with a positive sum, in label order (so that a
        # stable sort on the sums is the full sort); the others go last
        c = 0
        for l in range(m):
            kv[c] = _rank_key(sv[l], l)
            c += sv[l] > 0
        j = c
        for l in range(m):
            od[j] = <int32_t> l
            j += not sv[l] > 0
        order.resize(m)
        if c >= 64:
            _radix_sort_high(kv, c, self.keys_tmp)
        else:
            sort(kv, kv + c)
        a = 0
        while a < c:
            b = a + 1
            while b < c and (kv[b] >> 32) == (kv[a] >> 32):
                b += 1
            if b - a > 1 and not _equal_sums(kv, sv, a, b):
                self.order.clear()
                for k in range(a, b):
                    l = <int64_t> (kv[k] & 0xFFFFFFFFULL)
                    self.order.push_back(pair[double, int32_t](-sv[l], <int32_t> l))
                sort(self.order.begin(), self.order.end())
                for k in range(a, b):
                    order[k] = self.order[k - a].second
            else:
                for k in range(a, b):
                    order[k] = <int32_t> (kv[k] & 0xFFFFFFFFULL)
            a = b


cdef class NodeSeparator:
    """The FastXML splitter: a class-balanced L1-regularised logistic
    regression separates a node's two sides (by xmlkit's SeparatorSolver, or
    by liblinear's L1R_LR with solver="liblinear"); its weights, rounded as
    stored, then route the points (w.x >= 0: first child), which is the
    split. Members: see fastxml_tree.pxd."""

    def __init__(self, double bias=1.0, double cost=1.0, solver="newglmnet",
                 double eps=0.01, int max_newton=10, int max_inner=10, bint warm=False,
                 int max_newton_small=10, int64_t small_node=0):
        if solver not in ("newglmnet", "liblinear"):
            raise ValueError(f"unknown solver {solver!r}")
        self.use_liblinear = solver == "liblinear"
        if self.use_liblinear and ll_train == NULL:
            raise RuntimeError("liblinear is not bound (call bind_liblinear first)")
        self.solver = SeparatorSolver(max_newton, max_inner, 20, eps, warm, max_newton_small,
                                      small_node)
        self.bias = bias
        self.cost = cost
        self.eps = eps
        self.n_features = -1

    cdef void reset(self, const int64_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
                    int64_t n_features):
        """Work on the training features X (CSR) of n_features columns."""
        cdef int64_t k
        self.xp = xp
        self.xi = xi
        self.xv = xv
        self.n_features = n_features
        self.xmax = 0.0
        for k in range(xv.shape[0]):
            if fabs(xv[k]) > self.xmax:
                self.xmax = fabs(xv[k])
        self.fmap.clear()
        self.fmap.resize(n_features + 1, -1)
        self.gbuf.resize(n_features + 2)
        self.lcount.clear()
        self.lcount.resize(n_features + 1, 0)

    cdef bint split(self, const int32_t* pts, int64_t n, int64_t n_pos,
                    vector[signed char]& sign, mt19937& rng, vector[int32_t]& w_idx,
                    vector[float]& w_val, xk_slots* root=NULL) noexcept nogil:
        """Separate the points pts[0:n] by their sides sign[0:n] (n_pos on
        the + side); sign := the side of the fitted hyperplane. When both
        sides are non-empty, appends its non-zero weights (by feature, the
        bias as feature n_features) to w_idx / w_val and returns True.
        `root` (xmlkit's solver only): the node is a root, whose columns
        the roots separated at once share through the gate's copy (see
        LargeNodeGate)."""
        cdef int64_t nf
        cdef bint ok
        cdef int64_t* counts = NULL
        if not self.use_liblinear:
            counts = self.lcount.data()
        nf = _gather(pts, n, &self.xp[0], &self.xi[0], self.fmap, self.act_f, self.gbuf.data(),
                     counts)
        if self.use_liblinear:
            self._fit_liblinear(pts, n, nf, n_pos, sign, rng)
            ok = self._route(pts, n, nf, NULL, sign, w_idx, w_val)
        else:
            self._fit(pts, n, nf, n_pos, sign, rng, root)
            ok = self._route(pts, n, nf, self.solver.u.data(), sign, w_idx, w_val)
            if n > LARGE_NODE:
                self.solver.let_go()
        _release(self.fmap, self.act_f)
        return ok

    cdef void _fit(self, const int32_t* pts, int64_t n, int64_t nf, int64_t n_pos,
                   vector[signed char]& sign, mt19937& rng, xk_slots* root) noexcept nogil:
        """Class-balanced L1-regularised logistic regression on the node by
        xmlkit's solver into wvec (local feature order, bias last); a root
        (`root` not NULL: see split) on the gate's shared copy of its
        columns, built here when there is none."""
        cdef int64_t k
        cdef double cpos = self.cost * n / <double> n_pos
        cdef double cneg = self.cost * n / <double> (n - n_pos)
        if root == NULL or root.take_root(n):
            self.solver.fill(pts, n, &self.xp[0], &self.xi[0], &self.xv[0], self.fmap.data(),
                             self.lcount.data(), nf, self.bias, True,
                             sign.data(), cpos, cneg)
            if root != NULL:
                self.solver.lend(root)
                root.root_built()
        else:
            # (the gather counted the columns' entries for a fill)
            for k in range(nf):
                self.lcount[k] = 0
            self.solver.borrow(root, n, sign.data(), cpos, cneg)
        self.solver.solve(rng)
        if root != NULL:
            root.give_root(n)
        self.wvec.resize(nf + 1)
        for k in range(nf + 1):
            self.wvec[k] = round_weight(self.solver.w[k])

    cdef void _fit_liblinear(self, const int32_t* pts, int64_t n, int64_t nf, int64_t n_pos,
                             vector[signed char]& sign, mt19937& rng) noexcept nogil:
        """Class-balanced L1R_LR by liblinear into wvec (local feature order,
        bias last)."""
        cdef int64_t a, j, k
        cdef int32_t p
        cdef ll_problem prob
        cdef ll_parameter par
        cdef ll_model* model
        cdef int[2] wlabel
        cdef double[2] wweight
        cdef ll_node node
        _give_back(self.xbuf, 0)     # (filled by push_back; rarely smaller than before)
        self.xbuf.clear()
        _resize(self.yvec, n)
        _resize(self.xrows, n)
        for a in range(n):
            p = pts[a]
            for j in range(self.xp[p], self.xp[p + 1]):
                node.index = self.fmap[self.xi[j]] + 1
                node.value = self.xv[j]
                self.xbuf.push_back(node)
            node.index = <int> nf + 1
            node.value = self.bias
            self.xbuf.push_back(node)
            node.index = -1
            node.value = 0.0
            self.xbuf.push_back(node)
            self.yvec[a] = 1.0 if sign[a] > 0 else -1.0
        k = 0
        for a in range(n):
            p = pts[a]
            self.xrows[a] = &self.xbuf[k]
            k += self.xp[p + 1] - self.xp[p] + 2
        prob.l = <int> n
        prob.n = <int> nf + 1
        prob.y = self.yvec.data()
        prob.x = self.xrows.data()
        prob.bias = -1.0
        wlabel[0] = 1
        wlabel[1] = -1
        wweight[0] = n / <double> n_pos
        wweight[1] = n / <double> (n - n_pos)
        par.solver_type = L1R_LR
        # liblinear scales its stopping tolerance by min(n+, n-)/n; undo that
        # so that, as in the C++ tool, the solve stops once the subgradient
        # norm falls below eps times its initial value
        par.eps = self.eps * n / <double> min(n_pos, n - n_pos)
        par.C = self.cost
        par.nr_weight = 2
        par.weight_label = wlabel
        par.weight = wweight
        par.p = 0.1
        par.nu = 0.5
        par.init_sol = NULL
        par.regularize_bias = 1
        par.w_recalc = False
        srand(rng())
        model = ll_train(&prob, &par)
        self.wvec.resize(nf + 1)
        for k in range(nf + 1):
            self.wvec[k] = round_weight(model.w[k] if model.label[0] == 1 else -model.w[k])
        ll_free(model)
        free(model)

    cdef bint _route(self, const int32_t* pts, int64_t n, int64_t nf, const double* u,
                     vector[signed char]& sign, vector[int32_t]& w_idx,
                     vector[float]& w_val) noexcept nogil:
        """sign := side of the stored (rounded) hyperplane wvec for each point
        (w.x >= 0 is +, as at prediction). Stores the weights and returns True
        when both sides are non-empty.

        u (or NULL): the solver's margins of the points under its unrounded
        weights. Rounding moves a weight by at most 7.7e-6 of itself (see
        round_weight), so a margin moves by at most 7.7e-6 sum_j |w_j x_j|
        <= 7.7e-6 (|w|_1 max|x| + |w_bias bias|): a point whose |u| is above
        2e-5 (|w|_1 max|x| + |w_bias bias|), more than twice that bound, is
        on the side of u's sign, and only the others are routed through
        their rows."""
        cdef int64_t a, j, k, n_new = 0
        cdef int32_t p
        cdef double margin, sure = INFINITY
        cdef signed char sg
        cdef const int64_t* xp = &self.xp[0]
        cdef const int32_t* xi = &self.xi[0]
        cdef const float* xv = &self.xv[0]
        cdef const int32_t* fmap = self.fmap.data()
        cdef const double* wvec = self.wvec.data()
        cdef double wbias = wvec[nf] * self.bias
        if u != NULL:
            sure = 0.0
            for k in range(nf):
                sure += fabs(wvec[k])
            sure = 2e-5 * (sure * self.xmax + fabs(wbias))
        for a in range(n):
            if u != NULL and fabs(u[a]) > sure:
                sg = 1 if u[a] > 0 else -1
                sign[a] = sg
                n_new += u[a] > 0
                continue
            p = pts[a]
            margin = 0.0
            for j in range(xp[p], xp[p + 1]):
                margin += wvec[fmap[xi[j]]] * xv[j]
            margin += wbias
            sg = 1 if margin >= 0 else -1
            sign[a] = sg
            n_new += margin >= 0
        if n_new == 0 or n_new == n:
            return False
        self.wsel.clear()
        for k in range(nf):
            if fabs(self.wvec[k]) > 1e-16:
                self.wsel.push_back(pair[int32_t, float](self.act_f[k], <float> self.wvec[k]))
        sort(self.wsel.begin(), self.wsel.end())
        if fabs(self.wvec[nf]) > 1e-16:
            self.wsel.push_back(pair[int32_t, float](<int32_t> self.n_features,
                                                     <float> self.wvec[nf]))
        for k in range(<int64_t> self.wsel.size()):
            w_idx.push_back(self.wsel[k].first)
            w_val.push_back(self.wsel[k].second)
        return True


cdef class LargeNodeGate:
    """Lets the growers of one fit separate large nodes at once only while
    those nodes hold at most `slots` times the training points between
    them. A node is large when it holds more than a quarter of the training
    points and more than LARGE_NODE points: in practice the roots on sets
    of more than 32768 points, and their children (about half the points
    each) on sets of more than about 65536; no node on smaller sets. A
    large node's separator holds a copy of its points' entries of X (the
    node's columns: X's size at the root) and per-point and per-feature
    work space, and gives them back when done: its memory follows its
    points. So at one slot a root is separated without another large node,
    two children of roots (half the points each) together. The roots of a
    fit's trees are alike (all the points, in order): the roots separated
    at once share one copy of their columns, built by the first of them
    (SeparatorSolver.fill, then lend; the others borrow it), and it counts
    once. The threads' trees start together: on a 100k-point set at `-T 2`
    two roots, each with its own copy, were most of the training peak. A
    grower waits only before a large node's separator (its partition runs
    before), and trees stay the same: the gate orders work and shares
    columns, it does not change them. `min_points` (tests) replaces the
    threshold; `keep_root` (tests) keeps the roots' copy, and the points it
    holds, once built: every later root borrows it."""

    def __init__(self, int64_t n_points, long slots=1, min_points=None, bint keep_root=False):
        if slots < 1:
            raise ValueError("a gate needs a slot")
        self.n_points = n_points
        self.slots.keep_root = keep_root
        self.slots.budget = slots * max(n_points, 1)
        self.min_points = (max(LARGE_NODE, n_points // 4) if min_points is None
                           else min_points)

    @property
    def most_at_once(self):
        """The most separators that ever passed the gate at once."""
        return self.slots.most_count

    @property
    def most_points(self):
        """The most points that the separators past the gate held at once
        (a shared root copy counted once): at most `slots` times the
        training points."""
        return self.slots.most_held

    @property
    def roots_shared(self):
        """Roots separated on a copy of their columns that another root's
        separator built."""
        return self.slots.root_shared


cdef inline bint _labelled(const int32_t* pts, int64_t n, const int64_t* yp) noexcept nogil:
    """Whether any of the points pts[0:n] has a label."""
    cdef int64_t a
    for a in range(n):
        if yp[pts[a] + 1] > yp[pts[a]]:
            return True
    return False


#: random numbers a separator (xmlkit's solver: SeparatorSolver.solve) draws
#: from the tree's stream
cdef int64_t SEP_DRAWS = 2


cdef class Crew:
    """The growers of one fit, as a crew: a grower growing a tree opens each
    level of two or more nodes to the others, and a grower without a tree
    of its own (help()) grows nodes of the open levels until the trees the
    crew expects are done. Threads that would idle (fewer trees left than
    threads) so work on the trees still growing; the trees are the same
    however their nodes were shared out (see TreeGrower._grow)."""

    def __init__(self, long trees=0):
        # (the helpers wait until `trees` grow() calls have ended)
        self.c.expect(trees)

    def stop(self):
        """Let the helpers go now (their current node is finished first)."""
        with nogil:
            self.c.stop()

    @property
    def helped(self):
        """Nodes grown by helpers so far."""
        return self.c.helped


cdef class TreeGrower:
    """Grows FastXML trees on one training set: nodes are split by
    `criterion` (an NdcgPartition) and `separator` (a NodeSeparator) until
    they hold at most max_leaf points; a leaf keeps the labels_per_leaf
    largest means of its points' label values.

    X and Y are CSR matrices (anything with indptr, indices, data and shape;
    X without the bias feature, which the separator appends). Label values
    are used as they are (1 for plain data; PfastreXML passes
    propensity-weighted values). The grower, criterion and separator hold
    state: one set per thread. The growers of one fit may share a
    LargeNodeGate and a Crew (then help() grows nodes of the others' trees;
    with plan_splits False, tests, levels opened to the crew are planned as
    if no node were split, so that nodes are grown again from corrected
    places). Members: see fastxml_tree.pxd.
    """

    def __init__(self, X, Y, NdcgPartition criterion, NodeSeparator separator, *,
                 int max_leaf=10, int labels_per_leaf=10, LargeNodeGate gate=None,
                 Crew crew=None, bint plan_splits=True):
        cdef int64_t n_features = X.shape[1]
        xp = np.ascontiguousarray(X.indptr, dtype=np.int64)
        if xp.shape[0] < 1:
            raise ValueError("X has no index pointer")
        self.yp = np.ascontiguousarray(Y.indptr, dtype=np.int64)
        self.yi = np.ascontiguousarray(Y.indices, dtype=np.int32)
        self.yv = np.ascontiguousarray(Y.data, dtype=np.float32)
        self.n_points = xp.shape[0] - 1
        if self.yp.shape[0] - 1 != self.n_points:
            raise ValueError("X and Y have different numbers of rows")
        self.n_labels = Y.shape[1]
        self.max_leaf = max_leaf
        self.labels_per_leaf = labels_per_leaf
        self.criterion = criterion
        self.separator = separator
        self.gate = gate
        self.crew = crew
        if crew is not None and separator.use_liblinear:
            raise ValueError("liblinear separators draw from the C library's generator: "
                             "they cannot be grown by a crew")
        self.plan_splits = plan_splits
        self.rng_board = NULL
        criterion.reset(self.n_labels)
        separator.reset(xp, np.ascontiguousarray(X.indices, dtype=np.int32),
                        np.ascontiguousarray(X.data, dtype=np.float32), n_features)
        self.acc.resize(self.n_labels, 0.0)
        self.seen.resize(self.n_labels, 0)

    def held_bytes(self):
        """Bytes of memory the grower's vectors hold (their capacities), with
        its criterion's, separator's and solver's: between trees, scratch
        sized for the last nodes, not for the root (tests)."""
        cdef NdcgPartition c = self.criterion
        cdef NodeSeparator sep = self.separator
        cdef SeparatorSolver s = sep.solver
        return int(
            self.child.capacity() * 4 + self.depth.capacity() * 4 + self.start.capacity() * 8
            + self.stop.capacity() * 8 + self.w_ptr.capacity() * 8 + self.l_ptr.capacity() * 8
            + self.w_idx.capacity() * 4 + self.l_idx.capacity() * 4
            + self.w_val.capacity() * 4 + self.l_val.capacity() * 4
            + self.pts.capacity() * 4 + self.tmp_pts.capacity() * 4 + self.sign.capacity()
            + self.acc.capacity() * 8 + self.seen.capacity() + self.act_l.capacity() * 4
            + self.order.capacity() * 16 + self.side.capacity()
            + (self.lv_off.capacity() + self.lv_draws.capacity() + self.lv_plan.capacity()
               + self.lv_wend.capacity() + self.lv_lend.capacity()) * 8
            + self.lv_split.capacity()
            + c.lmap.capacity() * 4 + c.act_l.capacity() * 4 + c.gbuf.capacity() * 4
            + c.ly_ptr.capacity() * 8
            + c.ly_idx.capacity() * 4 + c.ly_val.capacity() * 4 + c.inorm.capacity() * 8
            + (c.sp.capacity() + c.sn.capacity() + c.spo.capacity() + c.sno.capacity()
               + c.gain.capacity()) * 8
            + (c.rp.capacity() + c.rn.capacity() + c.op.capacity() + c.on.capacity()
               + c.merged.capacity()) * 4
            + (c.keys.capacity() + c.keys_tmp.capacity()) * 8 + c.order.capacity() * 16
            + sep.fmap.capacity() * 4 + sep.act_f.capacity() * 4 + sep.gbuf.capacity() * 4
            + sep.lcount.capacity() * 8 + s.acc.capacity() * sizeof(xk_col)
            + sep.wvec.capacity() * 8 + sep.wsel.capacity() * 8
            + sep.xbuf.capacity() * sizeof(ll_node) + sep.xrows.capacity() * 8
            + sep.yvec.capacity() * 8
            + s.col_ptr.capacity() * 8 + s.col_pt.capacity() * 4 + s.col_val.capacity() * 4
            + s.y.capacity() + s.cw.capacity() * 8 + s.index.capacity() * 4
            + (s.w.capacity() + s.u.capacity() + s.r.capacity() + s.D.capacity()
               + s.lossv.capacity() + s.tq.capacity() + s.tsp.capacity() + s.wpd.capacity()
               + s.xTd.capacity() + s.grad.capacity() + s.grad0.capacity() + s.hdiag0.capacity()
               + s.hdiag.capacity()) * 8)

    def solver_work(self):
        """What xmlkit's separator solver did since this grower was made:
        {"solves", "newtons" (iterations), "visits" (entries of the node
        problems visited by gradient, Hessian and coordinate passes)}."""
        cdef SeparatorSolver s = self.separator.solver
        return {"solves": s.solves, "newtons": s.newtons, "visits": s.visits}

    def grow(self, uint64_t seed, uint64_t tree):
        """Grow tree number `tree`; returns its arrays (see xmlkit.models.forest)."""
        try:
            with nogil:
                self._grow(tree_seed(seed, tree))
        finally:
            if self.crew is not None:
                self.crew.c.tree_done()
        # (one vector copied and freed after the other: the tree is held once)
        return {"child": _take(self.child, cnp.NPY_INT32).reshape(-1, 2),
                "depth": _take(self.depth, cnp.NPY_INT32),
                "w_ptr": _take(self.w_ptr, cnp.NPY_INT64),
                "w_idx": _take(self.w_idx, cnp.NPY_INT32),
                "w_val": _take(self.w_val, cnp.NPY_FLOAT32),
                "l_ptr": _take(self.l_ptr, cnp.NPY_INT64),
                "l_idx": _take(self.l_idx, cnp.NPY_INT32),
                "l_val": _take(self.l_val, cnp.NPY_FLOAT32)}

    def help(self):
        """Grow nodes of the trees the other growers of this grower's crew
        are growing, until none of the trees the crew expects is left (or
        the crew is stopped): what a thread without a tree of its own does."""
        cdef void* b
        cdef long i
        if self.crew is None:
            raise ValueError("a grower without a crew has no one to help")
        with nogil:
            while self.crew.c.claim(&b, &i):
                try:
                    self._slot_task(<const xk_board*> b, i)
                finally:
                    self.crew.c.done(b)

    cdef void _grow(self, uint32_t seed) except + nogil:
        """The tree of random stream `seed`, level by level. A level's nodes
        are independent (disjoint points, and node i of the level draws its
        random numbers from a known place in the tree's stream), so any
        grower of the crew may grow any of them; the tree is the one that
        growing the nodes one after the other in breadth-first order makes."""
        cdef int64_t i, total
        self.rng_base.seed(seed)
        self.board.base = 0
        self.board.gen += 1     # (never reset: levels of two trees are told apart)
        self.child.clear(); self.depth.clear(); self.start.clear(); self.stop.clear()
        self.w_ptr.clear(); self.w_idx.clear(); self.w_val.clear()
        self.l_ptr.clear(); self.l_idx.clear(); self.l_val.clear()
        self.w_ptr.push_back(0)
        self.l_ptr.push_back(0)
        self.pts.resize(self.n_points)
        for i in range(self.n_points):
            self.pts[i] = <int32_t> i
        self.side.resize(self.n_points)
        self._add_node(0, self.n_points, 0)
        self.board.first = 0
        while self.board.first < <int64_t> self.depth.size():
            self._run_level()
            total = 0
            for i in range(self.board.n_nodes):
                total += self.lv_draws[i]
            self._commit_level()
            if (self.rng_board == &self.board and self.rng_gen == self.board.gen
                    and self.rng_pos == self.board.base + total):
                self.rng_base = self.rng        # (5 kB, against a draw per point)
            else:
                self.rng_base.discard(total)
            self.board.base += total
            self.board.first += self.board.n_nodes
            self.board.gen += 1
        # (the level tables hold one level's results: given back with the tree)
        self.lv_wi.clear(); self.lv_wi.shrink_to_fit()
        self.lv_wv.clear(); self.lv_wv.shrink_to_fit()
        self.lv_li.clear(); self.lv_li.shrink_to_fit()
        self.lv_lv.clear(); self.lv_lv.shrink_to_fit()

    cdef void _run_level(self) noexcept nogil:
        """Grow the nodes board.first .. depth.size() - 1 (one level).

        Alone, the grower grows them one after the other, each drawing its
        random numbers where the one before it stopped. When the crew has a
        helper waiting, the level is opened to the crew: each node's place
        in the random stream is then planned from the nodes before it, as if
        each node of more than max_leaf points with labels were split (its
        partition draws a number per point, its separator SEP_DRAWS). A
        node whose partition leaves a side empty draws fewer: the nodes
        after it are grown again from their corrected places (a few nodes
        in a hundred on Delicious)."""
        cdef int64_t n = <int64_t> self.depth.size() - self.board.first
        cdef int64_t i, k, o, node
        self.board.n_nodes = n
        self.lv_off.resize(n)
        self.lv_draws.resize(n)
        self.lv_split.resize(n)
        self.board.rng_base = &self.rng_base
        self.board.pts = self.pts.data()
        self.board.side = self.side.data()
        self.board.start = self.start.data()
        self.board.stop = self.stop.data()
        self.board.off = self.lv_off.data()
        self.board.draws = self.lv_draws.data()
        self.board.split = self.lv_split.data()
        self.board.wi = &self.lv_wi
        self.board.wv = &self.lv_wv
        self.board.li = &self.lv_li
        self.board.lv = &self.lv_lv
        self.board.shared = self.crew is not None and n > 1 and self.crew.c.wanted()
        if not self.board.shared:
            self.lv_wend.resize(n)
            self.lv_lend.resize(n)
            o = self.board.base
            for i in range(n):
                self.lv_off[i] = o
                self._task(&self.board, i, self.w_idx, self.w_val, self.l_idx, self.l_val)
                o += self.lv_draws[i]
                self.lv_wend[i] = self.w_idx.size()
                self.lv_lend[i] = self.l_idx.size()
            return
        # (the nodes' results go to the level tables, in any order)
        self.lv_plan.resize(n)
        self.lv_wi.resize(n)
        self.lv_wv.resize(n)
        self.lv_li.resize(n)
        self.lv_lv.resize(n)
        o = self.board.base
        for i in range(n):
            node = self.board.first + i
            self.lv_plan[i] = 0
            if (self.stop[node] - self.start[node] > self.max_leaf
                    and _labelled(&self.pts[self.start[node]],
                                  self.stop[node] - self.start[node], &self.yp[0])):
                self.lv_plan[i] = (self.stop[node] - self.start[node]
                                   + (SEP_DRAWS if self.plan_splits else 0))
            self.lv_off[i] = o
            o += self.lv_plan[i]
        k = 0
        while k < n:
            self.crew.c.publish(&self.board, k, n)
            try:
                while True:
                    i = self.crew.c.claim_own(&self.board)
                    if i < 0:
                        break
                    try:
                        self._slot_task(&self.board, i)
                    finally:
                        self.crew.c.done(&self.board)
            finally:
                self.crew.c.finish(&self.board)
            # the first node that drew other than planned: the nodes after
            # it again, from their corrected places
            while k < n and self.lv_draws[k] == self.lv_plan[k]:
                k += 1
            if k < n:
                self.lv_plan[k] = self.lv_draws[k]
                o = self.lv_off[k] + self.lv_plan[k]
                for i in range(k + 1, n):
                    self.lv_off[i] = o
                    o += self.lv_plan[i]
                k += 1

    cdef void _slot_task(self, const xk_board* b, int64_t i) noexcept nogil:
        """_task with node i's results into its entries of the level tables."""
        b.wi[0][i].clear()
        b.wv[0][i].clear()
        b.li[0][i].clear()
        b.lv[0][i].clear()
        self._task(b, i, b.wi[0][i], b.wv[0][i], b.li[0][i], b.lv[0][i])

    cdef void _commit_level(self) noexcept nogil:
        """Append the level's results to the tree in node order: a split
        node's points are reordered (+ side first, both sides in node order)
        and its children added; then each node's weights or leaf labels."""
        cdef int64_t i, node, s, e, a, k, n_pos
        for i in range(self.board.n_nodes):
            node = self.board.first + i
            if self.lv_split[i]:
                s = self.start[node]
                e = self.stop[node]
                self.tmp_pts.clear()
                n_pos = 0
                for a in range(s, e):
                    if self.side[a] > 0:
                        self.pts[s + n_pos] = self.pts[a]
                        n_pos += 1
                    else:
                        self.tmp_pts.push_back(self.pts[a])
                for a in range(e - s - n_pos):
                    self.pts[s + n_pos + a] = self.tmp_pts[a]
                k = self.depth.size()
                self.child[2 * node] = <int32_t> k
                self.child[2 * node + 1] = <int32_t> (k + 1)
                self._add_node(s, s + n_pos, self.depth[node] + 1)
                self._add_node(s + n_pos, e, self.depth[node] + 1)
            if self.board.shared:
                self.w_idx.insert(self.w_idx.end(), self.lv_wi[i].begin(), self.lv_wi[i].end())
                self.w_val.insert(self.w_val.end(), self.lv_wv[i].begin(), self.lv_wv[i].end())
                self.l_idx.insert(self.l_idx.end(), self.lv_li[i].begin(), self.lv_li[i].end())
                self.l_val.insert(self.l_val.end(), self.lv_lv[i].begin(), self.lv_lv[i].end())
                self.w_ptr.push_back(self.w_idx.size())
                self.l_ptr.push_back(self.l_idx.size())
            else:
                self.w_ptr.push_back(self.lv_wend[i])
                self.l_ptr.push_back(self.lv_lend[i])

    cdef void _task(self, const xk_board* b, int64_t i, vector[int32_t]& wi,
                    vector[float]& wv, vector[int32_t]& li,
                    vector[float]& lv) noexcept nogil:
        """Grow node i of level b (of this grower's tree or another's) with
        this grower's criterion, separator and scratch: split it when it
        holds more than max_leaf points and the partition and then the
        separator leave two non-empty sides (its weights are appended to
        wi, wv), else make it a leaf (its labels appended to li, lv)."""
        cdef int64_t s = b.start[b.first + i], e = b.stop[b.first + i]
        cdef int64_t n = e - s, a, n_pos
        cdef const int32_t* pts = b.pts + s
        cdef bint gated, split = False
        b.draws[i] = 0
        b.split[i] = False
        if n > self.max_leaf:
            # the generator to the node's place in the tree's stream
            if self.rng_board != b or self.rng_gen != b.gen or self.rng_pos > b.off[i]:
                self.rng = b.rng_base[0]
                self.rng_pos = b.base
                self.rng_board = b
                self.rng_gen = b.gen
            self.rng.discard(b.off[i] - self.rng_pos)
            self.rng_pos = b.off[i]
            n_pos = self.criterion.partition(pts, n, &self.yp[0], &self.yi[0], &self.yv[0],
                                             self.sign, self.rng)
            # (a partition draws a number per point when the points have labels)
            if n_pos > 0 or _labelled(pts, n, &self.yp[0]):
                b.draws[i] = n
            if 0 < n_pos < n:
                gated = self.gate is not None and n > self.gate.min_points
                if gated and n == self.gate.n_points and not self.separator.use_liblinear:
                    # a root: its columns shared with the roots separated at once
                    split = self.separator.split(pts, n, n_pos, self.sign, self.rng, wi, wv,
                                                 &self.gate.slots)
                else:
                    if gated:
                        self.gate.slots.take(n)
                    split = self.separator.split(pts, n, n_pos, self.sign, self.rng, wi, wv)
                    if gated:
                        self.gate.slots.give(n)
                b.draws[i] += SEP_DRAWS
            self.rng_pos += b.draws[i]
        if split:
            for a in range(n):
                b.side[s + a] = self.sign[a]
            b.split[i] = True
        else:
            self._leaf(pts, n, li, lv)

    cdef void _add_node(self, int64_t s, int64_t e, int32_t d) noexcept nogil:
        self.child.push_back(-1)
        self.child.push_back(-1)
        self.depth.push_back(d)
        self.start.push_back(s)
        self.stop.push_back(e)

    cdef void _leaf(self, const int32_t* pts, int64_t n, vector[int32_t]& li,
                    vector[float]& lv) noexcept nogil:
        """Mean label vector of the points pts[0:n], top labels_per_leaf kept
        (appended to li, lv by label)."""
        cdef int64_t a, j, k, m
        cdef int32_t p, l
        self.act_l.clear()
        for a in range(n):
            p = pts[a]
            for j in range(self.yp[p], self.yp[p + 1]):
                l = self.yi[j]
                if not self.seen[l]:
                    self.seen[l] = 1
                    self.act_l.push_back(l)
                self.acc[l] += self.yv[j]
        self.order.clear()
        for k in range(<int64_t> self.act_l.size()):
            l = self.act_l[k]
            self.order.push_back(pair[double, int32_t](-self.acc[l] / n, l))
            self.acc[l] = 0.0
            self.seen[l] = 0
        m = min(<int64_t> self.order.size(), <int64_t> self.labels_per_leaf)
        partial_sort(self.order.begin(), self.order.begin() + m, self.order.end())
        # keep the m best, stored by label index
        self.tmp_pts.clear()
        for k in range(m):
            self.tmp_pts.push_back(self.order[k].second)
            self.acc[self.order[k].second] = -self.order[k].first
        sort(self.tmp_pts.begin(), self.tmp_pts.end())
        for k in range(m):
            l = self.tmp_pts[k]
            li.push_back(l)
            lv.push_back(<float> self.acc[l])
            self.acc[l] = 0.0
