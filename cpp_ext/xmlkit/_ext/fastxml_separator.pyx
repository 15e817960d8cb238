# FastXML's splitter: the hyperplane that separates a node's two sides, a
# class-balanced L1-regularised logistic regression, which then routes the
# points (w.x >= 0: first child).
#
# Separators are fitted by xmlkit's own solver (fastxml_solver) on the
# node's points gathered feature-major. solver="liblinear" calls
# liblinear-official's L1R_LR instead, through the function pointers of the
# shared library that the `liblinear` Python package loads (bound once by
# bind_liblinear). That solver shuffles coordinates with the C library's
# global rand(): every solve is preceded by srand(<seed drawn from the
# tree's own generator>), which makes a tree deterministic only while one
# thread of a process trains at a time (xmlkit then grows parallel trees in
# separate processes). State: fastxml_separator.pxd.

from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.stdlib cimport srand, free
from libc.math cimport fabs, INFINITY
from libc.string cimport memcpy
from libcpp.vector cimport vector
from libcpp.utility cimport pair

from sparse_rows cimport mt19937, sort
from xmlkit._ext.fastxml_common cimport _gather, _give_back, _release, _resize, LARGE_NODE, xk_slots
from xmlkit._ext.fastxml_solver cimport SeparatorSolver


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


cdef class NodeSeparator:
    """The FastXML splitter: a class-balanced L1-regularised logistic
    regression separates a node's two sides (by xmlkit's SeparatorSolver, or
    by liblinear's L1R_LR with solver="liblinear"); its weights, rounded as
    stored, then route the points (w.x >= 0: first child), which is the
    split. Members: see fastxml_separator.pxd."""

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
                    vector[float]& w_val, xk_slots* root=NULL) except -1 nogil:
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

    cdef int _fit(self, const int32_t* pts, int64_t n, int64_t nf, int64_t n_pos,
                  vector[signed char]& sign, mt19937& rng, xk_slots* root) except -1 nogil:
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
        return 0

    cdef int _fit_liblinear(self, const int32_t* pts, int64_t n, int64_t nf, int64_t n_pos,
                            vector[signed char]& sign, mt19937& rng) except -1 nogil:
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
        return 0

    cdef bint _route(self, const int32_t* pts, int64_t n, int64_t nf, const double* u,
                     vector[signed char]& sign, vector[int32_t]& w_idx,
                     vector[float]& w_val) except -1 nogil:
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

