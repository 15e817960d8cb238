# FastXML's node separator solver: L1-regularised logistic regression by
# newGLMNET (Yuan, Ho & Lin, JMLR 2012), with the C++ tool's stopping rules,
# on a node's points gathered feature-major. It keeps all its state in the
# object and draws coordinate shuffles from a generator seeded by the tree's
# own, so trees grow in threads and a tree is the same whatever the thread
# count. State: fastxml_solver.pxd; its caller: fastxml_separator.

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.math cimport fabs, exp, log1p, INFINITY

import numpy as np

from sparse_rows cimport fill_vector, mt19937
from xmlkit._ext.fastxml_common cimport _fetch_ahead, _give_back, _resize, LARGE_NODE, xk_slots

#: the ridge added to the Hessian's diagonal
cdef double NU = 1e-12
#: the line search's sufficient decrease (Armijo's constant)
cdef double SIGMA = 0.01


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
    Members: see fastxml_solver.pxd.
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

    cdef int fill(self, const int32_t* pts, int64_t n, const int64_t* xp, const int32_t* xi,
                  const float* xv, const int32_t* fmap, int64_t* lcount, int64_t nf,
                  double bias, bint with_bias, const signed char* sign,
                  double cpos, double cneg) except -1 nogil:
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
        return 0

    cdef int _labels(self, int64_t n, int64_t ncol, const signed char* sign, double cpos,
                     double cneg) except -1 nogil:
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
        return 0

    cdef void lend(self, xk_slots* root) noexcept nogil:
        """Hand the problem's columns (just filled) over to `root`, the
        shared copy of the roots' columns: the solver goes on reading them
        there (a swap moves the buffers, not the entries)."""
        self.col_ptr.swap(root.root_ptr)
        self.col_pt.swap(root.root_pt)
        self.col_val.swap(root.root_val)

    cdef int borrow(self, xk_slots* root, int64_t n, const signed char* sign, double cpos,
                    double cneg) except -1 nogil:
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
        return 0

    cdef int let_go(self) except -1 nogil:
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
        return 0

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

    cdef int solve(self, mt19937& rng) except -1 nogil:
        """Solve the problem held in the object; returns the Newton iterations.
        Each iteration: the gradient with outer shrinking (_gradient), a
        direction by coordinate descent (_direction), a line search along it
        (_line_search)."""
        cdef int max_newton = self.max_newton
        if self.n < self.small_node and self.max_newton_small < max_newton:
            max_newton = self.max_newton_small
        cdef int64_t j, active
        cdef int newton = 0, inner
        cdef double inner_eps = 1.0, gmax_old = INFINITY, gmax_new = 0.0, gnorm1 = 0.0
        cdef double gnorm1_init = 0.0, w_norm = 0.0
        cdef bint at_zero = not self.warm
        self._start()
        if self.warm:
            gnorm1_init = self._warm_start()
            for j in range(self.nf):
                w_norm += fabs(self.w[j])
        for j in range(self.nf):
            self.wpd[j] = self.w[j]
        # coordinate orders: a xorshift64* generator seeded from the tree's
        # (a third of the cost of drawing each from the Mersenne twister)
        cdef uint64_t xs = (<uint64_t> rng() << 32) | rng() | 1
        while newton < max_newton:
            active = self._gradient(at_zero, gmax_old, &gmax_new, &gnorm1)
            if newton == 0 and not self.warm:
                gnorm1_init = gnorm1
            if gnorm1 <= self.eps * gnorm1_init:
                break
            inner = self._direction(active, inner_eps * gnorm1_init, &xs)
            self.last_inner += inner
            if self._line_search(active, &w_norm):
                at_zero = False
            if inner == 1:
                inner_eps *= 0.25
            newton += 1
            gmax_old = gmax_new
        self.last_newton = newton
        self.newtons += newton
        self.solves += 1
        return newton

    cdef int _start(self) except -1 nogil:
        """Size the solution and work space for the problem held: w = 0,
        margins u = 0 and the point terms there; every column active."""
        cdef int64_t n = self.n, nf = self.nf, j
        _give_back(self.w, nf)
        fill_vector(self.w, nf, 0.0)
        _resize(self.wpd, nf)
        _resize(self.grad, nf)
        _resize(self.hdiag, nf)
        _resize(self.index, nf)
        _give_back(self.u, n)
        fill_vector(self.u, n, 0.0)
        _resize(self.xTd, n)
        _resize(self.r, n)
        _resize(self.D, n)
        _resize(self.lossv, n)
        _resize(self.tq, n)
        _resize(self.tsp, n)
        self._point_terms(False)
        for j in range(nf):
            self.index[j] = <int32_t> j
        self.last_inner = 0
        return 0

    cdef int64_t _gradient(self, bint at_zero, double gmax_old, double* gmax,
                           double* gnorm) noexcept nogil:
        """Gradient and Hessian diagonal of the loss at w (at_zero: fill's
        sums at w = 0) over the active columns, which outer shrinking
        reorders: returns how many stay active (index[0:active]); gmax := the
        largest violation of the optimality condition, gnorm := their sum
        (the minimum-norm subgradient's L1 norm). gmax_old: the step
        before's gmax (the shrinking margin)."""
        # (the vectors' data as local pointers, here and in the other
        # sections: the compiler cannot keep members in registers across
        # the stores of the loops)
        cdef int64_t n = self.n, active = self.nf, s = 0, j, visits = 0
        cdef double g, viol, gmax_new = 0.0, gnorm1 = 0.0
        cdef bint shrink
        cdef const double* w = self.w.data()
        cdef double* grad = self.grad.data()
        cdef double* hdiag = self.hdiag.data()
        cdef int32_t* index = self.index.data()
        cdef const double* D = self.D.data()
        cdef const double* r = self.r.data()
        cdef const double* grad0 = self.grad0.data()
        cdef const double* hdiag0 = self.hdiag0.data()
        cdef const int64_t* cptr = self.cptr
        cdef const int32_t* cpt = self.cpt
        cdef const float* cval = self.cval
        while s < active:
            j = index[s]
            if at_zero:
                g = grad0[j]
                hdiag[j] = hdiag0[j] + NU
            else:
                g = _grad_hess(cpt, cval, r, D, cptr[j], cptr[j + 1], NU, &hdiag[j])
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
        self.visits += visits
        gmax[0] = gmax_new
        gnorm[0] = gnorm1
        return active

    cdef int _direction(self, int64_t active, double stop, uint64_t* xs) noexcept nogil:
        """The Newton direction: randomised coordinate descent on the
        quadratic model plus the L1 term, over the active columns (wpd
        equals w on entry; only index[0:active] move), with inner shrinking;
        xTd := d.x_a. Stops once the inner violations sum to at most `stop`
        over all the active columns, or after max_inner passes; returns the
        passes. xs: the coordinate orders' generator state."""
        cdef int64_t n = self.n, qp = active, s, e, j, a, visits = 0
        cdef int inner = 0
        cdef int32_t tmp
        cdef double qp_gmax_old = INFINITY, qp_gmax_new, qp_gnorm1, g, h, gp, gn, viol, z, wj
        cdef bint shrink
        cdef const double* w = self.w.data()
        cdef double* wpd = self.wpd.data()
        cdef const double* grad = self.grad.data()
        cdef const double* hdiag = self.hdiag.data()
        cdef int32_t* index = self.index.data()
        cdef double* xTd = self.xTd.data()
        cdef const double* D = self.D.data()
        cdef const int64_t* cptr = self.cptr
        cdef const int32_t* cpt = self.cpt
        cdef const float* cval = self.cval
        for a in range(n):
            xTd[a] = 0.0
        while inner < self.max_inner:
            qp_gmax_new = 0.0
            qp_gnorm1 = 0.0
            # (a uniform draw from [0, qp - s) by multiply and shift)
            for s in range(qp):
                e = s + <int64_t> ((_xorshift(xs) * <uint64_t> (qp - s)) >> 32)
                tmp = index[s]
                index[s] = index[e]
                index[e] = tmp
            s = 0
            while s < qp:
                j = index[s]
                h = hdiag[j]
                wj = wpd[j]
                g = grad[j] + (wj - w[j]) * NU + _dot_gather(
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
            if qp_gnorm1 <= stop:
                if qp == active:
                    break
                qp = active          # converged on the shrunk set: check them all
                qp_gmax_old = INFINITY
                continue
            qp_gmax_old = qp_gmax_new
        self.visits += visits
        return inner

    cdef bint _line_search(self, int64_t active, double* w_norm) noexcept nogil:
        """Armijo backtracking along d = wpd - w (0 outside the active
        columns): halve d until the objective falls by at least sigma times
        its predicted decrease, at most max_halvings times. Taken: w := wpd,
        u += xTd, the point terms at the new u, w_norm := |w|_1, returns
        True; else wpd := w, returns False."""
        cdef int64_t n = self.n, s, j, a
        cdef int halvings = 0
        cdef double delta = 0.0, w_norm_rest = w_norm[0], w_norm_new = 0.0, cond
        cdef double* w = self.w.data()
        cdef double* wpd = self.wpd.data()
        cdef const double* grad = self.grad.data()
        cdef const int32_t* index = self.index.data()
        cdef double* u = self.u.data()
        cdef double* xTd = self.xTd.data()
        cdef const double* cw = self.cw.data()
        cdef const double* lossv = self.lossv.data()
        cdef double* tq = self.tq.data()
        cdef double* tsp = self.tsp.data()
        cdef const signed char* y = self.y.data()
        for s in range(active):
            j = index[s]
            delta += grad[j] * (wpd[j] - w[j])
            w_norm_rest -= fabs(w[j])
            w_norm_new += fabs(wpd[j])
        w_norm_new += w_norm_rest
        delta += w_norm_new - w_norm[0]
        while halvings < self.max_halvings:
            cond = w_norm_new - w_norm[0] - SIGMA * delta
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
        if halvings >= self.max_halvings:
            for s in range(active):
                j = index[s]
                wpd[j] = w[j]
            return False
        w_norm[0] = w_norm_new
        for s in range(active):
            j = index[s]
            w[j] = wpd[j]
        for a in range(n):
            u[a] += xTd[a]
        self._point_terms(True)
        return True

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
