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
# object and draws coordinate shuffles from the tree's own generator, so
# trees grow in threads and a tree is the same whatever the thread count.
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
from libc.math cimport log2, fabs, exp, log1p, INFINITY
from libc.string cimport memcpy
from libcpp cimport bool as cbool
from libcpp.vector cimport vector
from libcpp.utility cimport pair
from libcpp.algorithm cimport sort, partial_sort

import numpy as np
cimport numpy as cnp

from sparse_rows cimport array_copy, mt19937, tree_seed

cnp.import_array()


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


cdef inline void _swap(vector[int32_t]& v, int64_t i, int64_t j) noexcept nogil:
    cdef int32_t t = v[i]
    v[i] = v[j]
    v[j] = t


cdef inline double _violation(double g, double wj, double margin, bint* shrink) noexcept nogil:
    """How far weight j is from optimal for |w_j| + a loss with derivative g
    at w_j: the magnitude of the minimum-norm subgradient. shrink := w_j is 0
    and g lies inside (-1 + margin, 1 - margin), so that it will likely stay
    0 (LIBLINEAR's shrinking test, margin = last maximum violation / n)."""
    shrink[0] = False
    if wj > 0:
        return fabs(g + 1.0)
    if wj < 0:
        return fabs(g - 1.0)
    if g + 1.0 < 0:
        return -(g + 1.0)
    if g - 1.0 > 0:
        return g - 1.0
    shrink[0] = g + 1.0 > margin and g - 1.0 < -margin
    return 0.0


cdef class SeparatorSolver:
    """L1-regularised logistic regression with per-point costs by newGLMNET
    (Yuan, Ho & Lin, JMLR 2012): Newton steps on the smooth loss, each
    direction found by randomised coordinate descent on the quadratic model
    plus the L1 term, then an Armijo backtracking line search.

        minimise  ||w||_1 + sum_a C_a log(1 + exp(-y_a w.x_a))

    The caller fills the problem (n points, nf columns given feature-major in
    col_ptr / col_pt / col_val, labels y, costs cw) and calls solve(); the
    solution is in w, the margins w.x_a in u. Defaults are the C++ FastXML
    tool's: 10 Newton iterations, 10 coordinate-descent passes each, 20
    halvings, stop once the L1 norm of the minimum-norm subgradient is at
    most eps times its value at w = 0, and LIBLINEAR-style shrinking.
    Members: see xmlkit/_ext/fastxml_tree.pxd.
    """
    def __init__(self, int max_newton=10, int max_inner=10, int max_halvings=20,
                 double eps=0.01, bint warm=False):
        self.max_newton = max_newton
        self.max_inner = max_inner
        self.max_halvings = max_halvings
        self.eps = eps
        self.warm = warm

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

    cdef inline double _column_grad(self, int64_t j) noexcept nogil:
        """The loss gradient in column j (two partial sums: see _dot_gather)."""
        cdef int64_t e = self.col_ptr[j], e1 = self.col_ptr[j + 1]
        cdef const int32_t* pt = self.col_pt.data()
        cdef const float* val = self.col_val.data()
        cdef const double* r = self.r.data()
        cdef double g0 = 0.0, g1 = 0.0
        while e + 2 <= e1:
            g0 += val[e] * r[pt[e]]
            g1 += val[e + 1] * r[pt[e + 1]]
            e += 2
        if e < e1:
            g0 += val[e] * r[pt[e]]
        return g0 + g1

    cdef inline double _column_hess(self, int64_t j, double nu) noexcept nogil:
        """The Hessian diagonal (+ nu) in column j."""
        cdef int64_t e = self.col_ptr[j], e1 = self.col_ptr[j + 1]
        cdef const int32_t* pt = self.col_pt.data()
        cdef const float* val = self.col_val.data()
        cdef const double* D = self.D.data()
        cdef double h0 = 0.0, h1 = 0.0
        while e + 2 <= e1:
            h0 += val[e] * val[e] * D[pt[e]]
            h1 += val[e + 1] * val[e + 1] * D[pt[e + 1]]
            e += 2
        if e < e1:
            h0 += val[e] * val[e] * D[pt[e]]
        return h0 + (h1 + nu)

    cdef double _warm_start(self) noexcept nogil:
        """Start from w = t d instead of 0: d is the proximal-gradient step
        at 0 (the loss gradient soft-thresholded by the L1 term; with the
        class-balanced costs, the difference of the two sides' mean rows,
        shrunk), t >= 0 minimises the objective along d (1-d Newton steps on
        the margins, O(n) each). Sets w, u and the point terms; returns the
        L1 norm of the minimum-norm subgradient at 0 (the stopping rule's
        reference, as from a cold start). One pass over the entries for the
        gradient, one for the margins of d."""
        cdef int64_t n = self.n, nf = self.nf, a, j
        cdef double g, dnorm = 0.0, t = 0.0, f1, f2, m, q, sp, step
        cdef int it
        for a in range(n):
            self.xTd[a] = 0.0
        for j in range(nf):
            g = self._column_grad(j)
            self.visits += self.col_ptr[j + 1] - self.col_ptr[j]
            if g + 1.0 < 0:
                self.w[j] = -(g + 1.0)
            elif g - 1.0 > 0:
                self.w[j] = -(g - 1.0)
            else:
                continue
            dnorm += fabs(self.w[j])      # (= the subgradient's violation at 0)
            _scatter_add(self.col_val.data(), self.col_pt.data(), self.xTd.data(),
                         self.col_ptr[j], self.col_ptr[j + 1], self.w[j])
            self.visits += self.col_ptr[j + 1] - self.col_ptr[j]
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
        cdef int64_t n = self.n, nf = self.nf
        cdef int64_t a, j, e, s, active, qp
        cdef int newton = 0, inner, halvings
        cdef double nu = 1e-12, sigma = 0.01, inf = INFINITY
        cdef double inner_eps = 1.0, gmax_old = inf, qp_gmax_old, gmax_new, gnorm1
        cdef double gnorm1_init = 0.0, qp_gmax_new, qp_gnorm1, g, h, gp, gn, viol, z
        cdef double w_norm = 0.0, w_norm_new, delta, cond, wj
        cdef bint shrink
        self.w.assign(nf, 0.0)
        self.wpd.resize(nf)
        self.grad.resize(nf)
        self.hdiag.resize(nf)
        self.index.resize(nf)
        self.u.assign(n, 0.0)
        self.xTd.resize(n)
        self.r.resize(n)
        self.D.resize(n)
        self.lossv.resize(n)
        self.tq.resize(n)
        self.tsp.resize(n)
        self._point_terms(False)
        for j in range(nf):
            self.index[j] = <int32_t> j
        self.last_inner = 0
        if self.warm:
            gnorm1_init = self._warm_start()
            for j in range(nf):
                w_norm += fabs(self.w[j])
        while newton < self.max_newton:
            # -- gradient and Hessian diagonal; outer shrinking
            gmax_new = 0.0
            gnorm1 = 0.0
            active = nf
            s = 0
            while s < active:
                j = self.index[s]
                g = self._column_grad(j)
                self.visits += self.col_ptr[j + 1] - self.col_ptr[j]
                self.grad[j] = g
                viol = _violation(g, self.w[j], gmax_old / n, &shrink)
                if shrink:
                    active -= 1
                    _swap(self.index, s, active)
                    continue
                # (the Hessian only where the coordinate passes will look)
                self.hdiag[j] = self._column_hess(j, nu)
                self.visits += self.col_ptr[j + 1] - self.col_ptr[j]
                if viol > gmax_new:
                    gmax_new = viol
                gnorm1 += viol
                s += 1
            if newton == 0 and not self.warm:
                gnorm1_init = gnorm1
            if gnorm1 <= self.eps * gnorm1_init:
                break

            # -- direction: coordinate descent on the quadratic model
            for j in range(nf):
                self.wpd[j] = self.w[j]
            for a in range(n):
                self.xTd[a] = 0.0
            inner = 0
            qp_gmax_old = inf
            qp = active
            while inner < self.max_inner:
                qp_gmax_new = 0.0
                qp_gnorm1 = 0.0
                for s in range(qp):
                    _swap(self.index, s, s + <int64_t> (rng() % <uint32_t> (qp - s)))
                s = 0
                while s < qp:
                    j = self.index[s]
                    h = self.hdiag[j]
                    g = self.grad[j] + (self.wpd[j] - self.w[j]) * nu + _dot_gather(
                        self.col_val.data(), self.col_pt.data(), self.D.data(), self.xTd.data(),
                        self.col_ptr[j], self.col_ptr[j + 1])
                    wj = self.wpd[j]
                    self.visits += self.col_ptr[j + 1] - self.col_ptr[j]
                    viol = _violation(g, wj, qp_gmax_old / n, &shrink)
                    if shrink:
                        qp -= 1
                        _swap(self.index, s, qp)
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
                    self.wpd[j] = wj + z
                    _scatter_add(self.col_val.data(), self.col_pt.data(), self.xTd.data(),
                                 self.col_ptr[j], self.col_ptr[j + 1], z)
                inner += 1
                if qp_gnorm1 <= inner_eps * gnorm1_init:
                    if qp == active:
                        break
                    qp = active          # converged on the shrunk set: check them all
                    qp_gmax_old = inf
                    continue
                qp_gmax_old = qp_gmax_new
            self.last_inner += inner

            # -- line search along d
            delta = 0.0
            w_norm_new = 0.0
            for j in range(nf):
                delta += self.grad[j] * (self.wpd[j] - self.w[j])
                w_norm_new += fabs(self.wpd[j])
            delta += w_norm_new - w_norm
            halvings = 0
            while halvings < self.max_halvings:
                cond = w_norm_new - w_norm - sigma * delta
                for a in range(n):
                    self.tq[a] = _sigmoid_softplus(-self.y[a] * (self.u[a] + self.xTd[a]),
                                                   &self.tsp[a])
                    cond += self.cw[a] * self.tsp[a] - self.lossv[a]
                if cond <= 0:
                    break
                w_norm_new = 0.0
                for j in range(nf):
                    self.wpd[j] = (self.w[j] + self.wpd[j]) * 0.5
                    w_norm_new += fabs(self.wpd[j])
                delta *= 0.5
                for a in range(n):
                    self.xTd[a] *= 0.5
                halvings += 1
            if halvings < self.max_halvings:
                w_norm = w_norm_new
                for j in range(nf):
                    self.w[j] = self.wpd[j]
                for a in range(n):
                    self.u[a] += self.xTd[a]
                self._point_terms(True)
            if inner == 1:
                inner_eps *= 0.25
            newton += 1
            gmax_old = gmax_new
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
        cdef int64_t n = xp.shape[0] - 1, nf, a, j, c
        cdef mt19937 rng
        if yy.shape[0] != n:
            raise ValueError("y and X have different numbers of rows")
        if xi.shape[0] and (np.min(xi) < 0):
            raise ValueError("negative column index")
        nf = (int(np.max(xi)) + 1) if xi.shape[0] else 0
        self.n = n
        self.nf = nf
        self.col_ptr.clear()
        self.col_ptr.resize(nf + 1, 0)
        for j in range(xp[n]):
            self.col_ptr[xi[j] + 1] += 1
        for j in range(nf):
            self.col_ptr[j + 1] += self.col_ptr[j]
        self.col_pt.resize(xp[n])
        self.col_val.resize(xp[n])
        fill = np.asarray(<int64_t[:nf + 1]> self.col_ptr.data()).copy()
        cdef int64_t[::1] f = fill
        self.y.resize(n)
        self.cw.resize(n)
        for a in range(n):
            if yy[a] > 0:
                self.y[a] = 1
                self.cw[a] = cost_pos
            else:
                self.y[a] = -1
                self.cw[a] = cost_neg
            for j in range(xp[a], xp[a + 1]):
                c = xi[j]
                self.col_pt[f[c]] = <int32_t> a
                self.col_val[f[c]] = xv[j]
                f[c] += 1
        rng.seed(<uint32_t> seed)
        with nogil:
            self.solve(rng)
        return np.asarray(<double[:nf]> self.w.data()).copy() if nf else np.zeros(0)


cdef int64_t _gather(const int32_t* pts, int64_t n, const int64_t* ptr, const int32_t* idx,
                     vector[int32_t]& local, vector[int32_t]& act,
                     int64_t* fcount) noexcept nogil:
    """The distinct column indices of the rows of points pts[0:n] into `act`;
    local[i] := position of i in act (all other entries of `local` stay -1;
    _release resets them). `act` is ascending, or with `fcount` (not NULL)
    in order of first appearance (the separator's weights are put in index
    order at the end), and then fcount[i] += the number of rows holding i.
    Returns len(act)."""
    cdef int64_t a, j, k
    cdef int32_t p, i
    act.clear()
    for a in range(n):
        p = pts[a]
        for j in range(ptr[p], ptr[p + 1]):
            i = idx[j]
            if local[i] < 0:
                local[i] = <int32_t> act.size()
                act.push_back(i)
            if fcount != NULL:
                fcount[i] += 1
    if fcount == NULL:
        sort(act.begin(), act.end())
        for k in range(<int64_t> act.size()):
            local[act[k]] = <int32_t> k
    return act.size()


cdef inline void _release(vector[int32_t]& local, vector[int32_t]& act) noexcept nogil:
    """Undo _gather's numbering: local[i] := -1 for the indices in act."""
    cdef int64_t k
    for k in range(<int64_t> act.size()):
        local[act[k]] = -1


cdef class NdcgPartition:
    """The FastXML split criterion: a node's points are given random sides,
    then sides and per-side label rankings alternate, each maximising the
    summed nDCG over the ranking of all labels (points move to the side whose
    ranking serves their labels better), until the objective gains less than
    1e-6. Members: see xmlkit/_ext/fastxml_tree.pxd."""

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

    cdef int64_t partition(self, const int32_t* pts, int64_t n, const int64_t* yp,
                           const int32_t* yi, const float* yv, vector[signed char]& sign,
                           mt19937& rng) noexcept nogil:
        """Sides of the points pts[0:n] (label rows of Y: yp, yi, yv) into
        sign[0:n] (+1 / -1); returns how many are on the + side (0 when the
        points carry no label: then no random numbers are drawn)."""
        cdef int64_t a, j, k, m, n_pos
        cdef int32_t p
        cdef double obj, prev, delta
        cdef signed char sg

        # -- active labels, local label rows, per-point nDCG normaliser
        m = _gather(pts, n, yp, yi, self.lmap, self.act_l, NULL)
        if m == 0:
            return 0
        self.ly_ptr.resize(n + 1)
        self.ly_idx.clear()
        self.ly_val.clear()
        self.inorm.resize(n)
        sign.resize(n)
        self.ly_ptr[0] = 0
        for a in range(n):
            p = pts[a]
            for j in range(yp[p], yp[p + 1]):
                self.ly_idx.push_back(self.lmap[yi[j]])
                self.ly_val.push_back(yv[j])
            self.ly_ptr[a + 1] = self.ly_idx.size()
            self.inorm[a] = 1.0 / self.cs[yp[p + 1] - yp[p]]
            # (typed temporaries: Cython mistypes `x if c else y` stored
            # through a vector reference)
            sg = 1 if (rng() & 1) else -1
            sign[a] = sg
        _release(self.lmap, self.act_l)

        # -- the alternation
        self.sp.resize(m)
        self.sn.resize(m)
        self.rp.resize(m)
        self.rn.resize(m)
        self.gain.resize(m)
        prev = -2.0
        while True:
            for k in range(m):
                self.sp[k] = 0.0
                self.sn[k] = 0.0
            for a in range(n):
                if sign[a] > 0:
                    for j in range(self.ly_ptr[a], self.ly_ptr[a + 1]):
                        self.sp[self.ly_idx[j]] += self.inorm[a] * self.ly_val[j]
                else:
                    for j in range(self.ly_ptr[a], self.ly_ptr[a + 1]):
                        self.sn[self.ly_idx[j]] += self.inorm[a] * self.ly_val[j]
            self._rank(self.sp, self.rp, self.op, m, prev == -2.0)
            self._rank(self.sn, self.rn, self.on, m, prev == -2.0)
            obj = 0.0
            for k in range(m):
                obj += self.disc[self.rp[k]] * self.sp[k] + self.disc[self.rn[k]] * self.sn[k]
                self.gain[k] = self.disc[self.rp[k]] - self.disc[self.rn[k]]
            obj /= n
            for a in range(n):
                delta = 0.0
                for j in range(self.ly_ptr[a], self.ly_ptr[a + 1]):
                    delta += self.ly_val[j] * self.gain[self.ly_idx[j]]
                if delta > 0:
                    sign[a] = 1
                elif delta < 0:
                    sign[a] = -1
            if obj - prev < 1e-6:
                break
            prev = obj
        n_pos = 0
        for a in range(n):
            n_pos += sign[a] > 0
        return n_pos

    cdef void _rank(self, vector[double]& s, vector[int32_t]& r, vector[int32_t]& order,
                    int64_t m, bint first) noexcept nogil:
        """Rank labels by decreasing sum, ties to the lower local index; labels
        with a zero sum follow in index order: r[l] := rank of l, and
        order[k] := the label of rank k.

        After the first step of an alternation the previous `order` is
        nearly right (few points change sides), so it is re-sorted by
        insertion, which costs the number of moves; past a budget of 8 moves
        per label the full sort below takes over. Both give the same total
        order, so the ranks do not depend on which ran."""
        cdef int64_t k, q, moves = 0
        cdef int32_t l
        cdef double key
        cdef pair[double, int32_t]* kv
        cdef pair[double, int32_t] item
        if not first:
            # (sort key, label) in the previous order: negated sums (0 when
            # not positive), so that ascending pairs are the rank order
            self.order.resize(m)
            kv = self.order.data()
            for k in range(m):
                l = order[k]
                key = -s[l] if s[l] > 0 else 0.0
                kv[k].first = key
                kv[k].second = l
            for k in range(1, m):
                item = kv[k]
                q = k
                while q > 0 and item < kv[q - 1]:
                    kv[q] = kv[q - 1]
                    q -= 1
                kv[q] = item
                moves += k - q
                if moves > 8 * m:
                    break
            else:
                for k in range(m):
                    order[k] = kv[k].second
                    r[kv[k].second] = <int32_t> k
                return
        self._rank_sorted(s, r, m)
        order.resize(m)
        for k in range(m):
            order[r[k]] = <int32_t> k

    cdef void _rank_sorted(self, vector[double]& s, vector[int32_t]& r,
                           int64_t m) noexcept nogil:
        """_rank by sorting.

        Fast path: sort 64-bit keys packing the sum rounded to float32 (whose
        bit pattern orders like the value for positive floats) above the
        index; rounding is monotone, so only runs of equal float32 keys can be
        out of the exact order, and those are re-sorted on the double sums."""
        cdef int64_t l, k, a, b, n
        cdef float f
        cdef uint32_t bits
        self.keys.clear()
        for l in range(m):
            if s[l] > 0:
                f = <float> s[l]
                memcpy(&bits, &f, 4)
                self.keys.push_back(((<uint64_t> (0xFFFFFFFFU - bits)) << 32) | <uint64_t> l)
        sort(self.keys.begin(), self.keys.end())
        n = <int64_t> self.keys.size()
        a = 0
        while a < n:
            b = a + 1
            while b < n and (self.keys[b] >> 32) == (self.keys[a] >> 32):
                b += 1
            if b - a > 1:
                self.order.clear()
                for k in range(a, b):
                    l = <int64_t> (self.keys[k] & 0xFFFFFFFFULL)
                    self.order.push_back(pair[double, int32_t](-s[l], <int32_t> l))
                sort(self.order.begin(), self.order.end())
                for k in range(a, b):
                    r[self.order[k - a].second] = <int32_t> k
            else:
                r[<int64_t> (self.keys[a] & 0xFFFFFFFFULL)] = <int32_t> a
            a = b
        k = n
        for l in range(m):
            if not s[l] > 0:
                r[l] = <int32_t> k
                k += 1


cdef class NodeSeparator:
    """The FastXML splitter: a class-balanced L1-regularised logistic
    regression separates a node's two sides (by xmlkit's SeparatorSolver, or
    by liblinear's L1R_LR with solver="liblinear"); its weights, rounded as
    stored, then route the points (w.x >= 0: first child), which is the
    split. Members: see xmlkit/_ext/fastxml_tree.pxd."""

    def __init__(self, double bias=1.0, double cost=1.0, solver="newglmnet",
                 double eps=0.01, int max_newton=10, int max_inner=10, bint warm=False):
        if solver not in ("newglmnet", "liblinear"):
            raise ValueError(f"unknown solver {solver!r}")
        self.use_liblinear = solver == "liblinear"
        if self.use_liblinear and ll_train == NULL:
            raise RuntimeError("liblinear is not bound (call bind_liblinear first)")
        self.solver = SeparatorSolver(max_newton, max_inner, 20, eps, warm)
        self.bias = bias
        self.cost = cost
        self.eps = eps
        self.n_features = -1

    cdef void reset(self, const int64_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
                    int64_t n_features):
        """Work on the training features X (CSR) of n_features columns."""
        self.xp = xp
        self.xi = xi
        self.xv = xv
        self.n_features = n_features
        self.fmap.clear()
        self.fmap.resize(n_features + 1, -1)
        self.fcount.clear()
        self.fcount.resize(n_features + 1, 0)

    cdef bint split(self, const int32_t* pts, int64_t n, int64_t n_pos,
                    vector[signed char]& sign, mt19937& rng, vector[int32_t]& w_idx,
                    vector[float]& w_val) noexcept nogil:
        """Separate the points pts[0:n] by their sides sign[0:n] (n_pos on
        the + side); sign := the side of the fitted hyperplane. When both
        sides are non-empty, appends its non-zero weights (by feature, the
        bias as feature n_features) to w_idx / w_val and returns True."""
        cdef int64_t nf
        cdef bint ok
        cdef int64_t* counts = NULL
        if not self.use_liblinear:
            counts = self.fcount.data()
        nf = _gather(pts, n, &self.xp[0], &self.xi[0], self.fmap, self.act_f, counts)
        if self.use_liblinear:
            self._fit_liblinear(pts, n, nf, n_pos, sign, rng)
        else:
            self._fit(pts, n, nf, n_pos, sign, rng)
        ok = self._route(pts, n, nf, sign, w_idx, w_val)
        _release(self.fmap, self.act_f)
        return ok

    cdef void _fit(self, const int32_t* pts, int64_t n, int64_t nf, int64_t n_pos,
                   vector[signed char]& sign, mt19937& rng) noexcept nogil:
        """Class-balanced L1-regularised logistic regression on the node by
        xmlkit's solver into wvec (local feature order, bias last)."""
        cdef int64_t a, j, k, pos
        cdef int32_t p
        cdef double cpos = self.cost * n / <double> n_pos
        cdef double cneg = self.cost * n / <double> (n - n_pos)
        # the node's points feature-major: counts per local column, then fill
        self.solver.n = n
        self.solver.nf = nf + 1
        self.solver.col_ptr.resize(nf + 2)
        self.solver.col_ptr[0] = 0
        for k in range(nf):
            self.solver.col_ptr[k + 1] = self.solver.col_ptr[k] + self.fcount[self.act_f[k]]
            self.fcount[self.act_f[k]] = self.solver.col_ptr[k]
        self.solver.col_ptr[nf + 1] = self.solver.col_ptr[nf] + n
        self.solver.col_pt.resize(self.solver.col_ptr[nf + 1])
        self.solver.col_val.resize(self.solver.col_ptr[nf + 1])
        self.solver.y.resize(n)
        self.solver.cw.resize(n)
        for a in range(n):
            p = pts[a]
            for j in range(self.xp[p], self.xp[p + 1]):
                k = self.xi[j]
                pos = self.fcount[k]
                self.solver.col_pt[pos] = <int32_t> a
                self.solver.col_val[pos] = self.xv[j]
                self.fcount[k] = pos + 1
            pos = self.solver.col_ptr[nf] + a
            self.solver.col_pt[pos] = <int32_t> a
            self.solver.col_val[pos] = <float> self.bias
            if sign[a] > 0:
                self.solver.y[a] = 1
                self.solver.cw[a] = cpos
            else:
                self.solver.y[a] = -1
                self.solver.cw[a] = cneg
        for k in range(nf):
            self.fcount[self.act_f[k]] = 0
        self.solver.solve(rng)
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
        self.xbuf.clear()
        self.yvec.resize(n)
        self.xrows.resize(n)
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

    cdef bint _route(self, const int32_t* pts, int64_t n, int64_t nf,
                     vector[signed char]& sign, vector[int32_t]& w_idx,
                     vector[float]& w_val) noexcept nogil:
        """sign := side of the stored (rounded) hyperplane wvec for each point
        (w.x >= 0 is +, as at prediction). Stores the weights and returns True
        when both sides are non-empty."""
        cdef int64_t a, j, k, n_new = 0
        cdef int32_t p
        cdef double margin
        cdef signed char sg
        for a in range(n):
            p = pts[a]
            margin = 0.0
            for j in range(self.xp[p], self.xp[p + 1]):
                margin += self.wvec[self.fmap[self.xi[j]]] * self.xv[j]
            margin += self.wvec[nf] * self.bias
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


cdef class TreeGrower:
    """Grows FastXML trees on one training set: nodes are split by
    `criterion` (an NdcgPartition) and `separator` (a NodeSeparator) until
    they hold at most max_leaf points; a leaf keeps the labels_per_leaf
    largest means of its points' label values.

    X and Y are CSR matrices (anything with indptr, indices, data and shape;
    X without the bias feature, which the separator appends). Label values
    are used as they are (1 for plain data; PfastreXML passes
    propensity-weighted values). The grower, criterion and separator hold
    state: one set per thread. Members: see xmlkit/_ext/fastxml_tree.pxd.
    """

    def __init__(self, X, Y, NdcgPartition criterion, NodeSeparator separator, *,
                 int max_leaf=10, int labels_per_leaf=10):
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
        criterion.reset(self.n_labels)
        separator.reset(xp, np.ascontiguousarray(X.indices, dtype=np.int32),
                        np.ascontiguousarray(X.data, dtype=np.float32), n_features)
        self.acc.resize(self.n_labels, 0.0)
        self.seen.resize(self.n_labels, 0)

    def solver_work(self):
        """What xmlkit's separator solver did since this grower was made:
        {"solves", "newtons" (iterations), "visits" (entries of the node
        problems visited by gradient, Hessian and coordinate passes)}."""
        cdef SeparatorSolver s = self.separator.solver
        return {"solves": s.solves, "newtons": s.newtons, "visits": s.visits}

    def grow(self, uint64_t seed, uint64_t tree):
        """Grow tree number `tree`; returns its arrays (see xmlkit.models.forest)."""
        with nogil:
            self._grow(tree_seed(seed, tree))
        out = {
            "child": array_copy(self.child.data(), self.child.size(), cnp.NPY_INT32).reshape(-1, 2),
            "depth": array_copy(self.depth.data(), self.depth.size(), cnp.NPY_INT32),
            "w_ptr": array_copy(self.w_ptr.data(), self.w_ptr.size(), cnp.NPY_INT64),
            "w_idx": array_copy(self.w_idx.data(), self.w_idx.size(), cnp.NPY_INT32),
            "w_val": array_copy(self.w_val.data(), self.w_val.size(), cnp.NPY_FLOAT32),
            "l_ptr": array_copy(self.l_ptr.data(), self.l_ptr.size(), cnp.NPY_INT64),
            "l_idx": array_copy(self.l_idx.data(), self.l_idx.size(), cnp.NPY_INT32),
            "l_val": array_copy(self.l_val.data(), self.l_val.size(), cnp.NPY_FLOAT32),
        }
        return out

    cdef void _grow(self, uint32_t seed) except + nogil:
        cdef mt19937 rng
        cdef int64_t i, s, e
        rng.seed(seed)
        self.child.clear(); self.depth.clear(); self.start.clear(); self.stop.clear()
        self.w_ptr.clear(); self.w_idx.clear(); self.w_val.clear()
        self.l_ptr.clear(); self.l_idx.clear(); self.l_val.clear()
        self.w_ptr.push_back(0)
        self.l_ptr.push_back(0)
        self.pts.resize(self.n_points)
        for i in range(self.n_points):
            self.pts[i] = <int32_t> i
        self._add_node(0, self.n_points, 0)
        i = 0
        while i < <int64_t> self.depth.size():
            s = self.start[i]
            e = self.stop[i]
            if e - s <= self.max_leaf or not self._split(i, rng):
                self._leaf(i)
            self.w_ptr.push_back(self.w_idx.size())
            self.l_ptr.push_back(self.l_idx.size())
            i += 1

    cdef void _add_node(self, int64_t s, int64_t e, int32_t d) noexcept nogil:
        self.child.push_back(-1)
        self.child.push_back(-1)
        self.depth.push_back(d)
        self.start.push_back(s)
        self.stop.push_back(e)

    cdef void _leaf(self, int64_t node) noexcept nogil:
        """Mean label vector of the node's points, top labels_per_leaf kept."""
        cdef int64_t s = self.start[node], e = self.stop[node], n = e - s
        cdef int64_t a, j, k, m
        cdef int32_t p, l
        self.act_l.clear()
        for a in range(s, e):
            p = self.pts[a]
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
            self.l_idx.push_back(l)
            self.l_val.push_back(<float> self.acc[l])
            self.acc[l] = 0.0

    cdef bint _split(self, int64_t node, mt19937& rng) noexcept nogil:
        """Split node into two children (positive side first, both in node
        order); False when either side would be empty."""
        cdef int64_t s = self.start[node], e = self.stop[node], n = e - s
        cdef int64_t a, k, n_pos
        cdef const int32_t* pts = &self.pts[s]
        n_pos = self.criterion.partition(pts, n, &self.yp[0], &self.yi[0], &self.yv[0],
                                         self.sign, rng)
        if n_pos == 0 or n_pos == n:
            return False
        if not self.separator.split(pts, n, n_pos, self.sign, rng, self.w_idx, self.w_val):
            return False
        self.tmp_pts.clear()
        n_pos = 0
        for a in range(n):
            if self.sign[a] > 0:
                self.pts[s + n_pos] = self.pts[s + a]
                n_pos += 1
            else:
                self.tmp_pts.push_back(self.pts[s + a])
        for a in range(n - n_pos):
            self.pts[s + n_pos + a] = self.tmp_pts[a]
        k = self.depth.size()
        self.child[2 * node] = <int32_t> k
        self.child[2 * node + 1] = <int32_t> (k + 1)
        self._add_node(s, s + n_pos, self.depth[node] + 1)
        self._add_node(s + n_pos, e, self.depth[node] + 1)
        return True
