# FastXML tree growth (nDCG-optimising splits, L1 logistic regression
# separators through liblinear-official's C library).
#
# A tree is grown in one nogil call. Nodes are numbered as the C++ tool does:
# root 0; when node i splits, its positive child gets the next index, then its
# negative child; nodes are processed in index order.
#
# liblinear is called through the function pointers of the shared library
# that the `liblinear` Python package loads (bound once by bind_liblinear),
# on problems built directly from CSR arrays. Its L1R_LR solver shuffles
# coordinates with the C library's global rand(): every solve is preceded by
# srand(<seed drawn from the tree's own generator>), which makes a tree
# deterministic as long as one thread of a process trains at a time (xmlkit
# runs parallel trees in separate processes for that reason).

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport srand, free
from libc.math cimport log2, fabs
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

cdef struct ll_node:
    int index
    double value

cdef struct ll_problem:
    int l
    int n
    double* y
    ll_node** x
    double bias

cdef struct ll_parameter:
    int solver_type
    double eps
    double C
    int nr_weight
    int* weight_label
    double* weight
    double p
    double nu
    double* init_sol
    int regularize_bias
    cbool w_recalc

cdef struct ll_model:
    ll_parameter param
    int nr_class
    int nr_feature
    double* w
    int* label
    double bias
    double rho

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


cdef class TreeGrower:
    """Grows FastXML trees on one training set (features X, labels Y as CSR).

    Label values are used as they are (1 for plain data; PfastreXML passes
    propensity-weighted values). The bias feature (index n_features, value
    `bias`) is appended implicitly to every point.
    """
    cdef const int64_t[::1] xp
    cdef const int32_t[::1] xi
    cdef const float[::1] xv
    cdef const int64_t[::1] yp
    cdef const int32_t[::1] yi
    cdef const float[::1] yv
    cdef int64_t n_points, n_features, n_labels
    cdef int max_leaf, labels_per_leaf
    cdef double bias, cost
    cdef bint use_idcg
    cdef double eps

    # per-tree output
    cdef vector[int32_t] child
    cdef vector[int32_t] depth
    cdef vector[int64_t] start, stop
    cdef vector[int64_t] w_ptr, l_ptr
    cdef vector[int32_t] w_idx, l_idx
    cdef vector[float] w_val, l_val
    # work space
    cdef vector[int32_t] pts, tmp_pts
    cdef vector[int32_t] fmap, lmap, act_f, act_l
    cdef vector[signed char] sign
    cdef vector[double] inorm, sp, sn, gain, disc, cs, acc, wvec
    cdef vector[int32_t] rp, rn
    cdef vector[int64_t] ly_ptr
    cdef vector[int32_t] ly_idx
    cdef vector[double] ly_val
    cdef vector[pair[double, int32_t]] order
    cdef vector[uint64_t] keys
    cdef vector[ll_node] xbuf
    cdef vector[ll_node*] xrows
    cdef vector[double] yvec

    def __init__(self, X_indptr, X_indices, X_data, Y_indptr, Y_indices, Y_data,
                 int64_t n_features, int64_t n_labels, int max_leaf, int labels_per_leaf,
                 double bias, double cost, bint use_idcg=True, double eps=0.01):
        if ll_train == NULL:
            raise RuntimeError("liblinear is not bound (call bind_liblinear first)")
        self.xp = np.ascontiguousarray(X_indptr, dtype=np.int64)
        self.xi = np.ascontiguousarray(X_indices, dtype=np.int32)
        self.xv = np.ascontiguousarray(X_data, dtype=np.float32)
        self.yp = np.ascontiguousarray(Y_indptr, dtype=np.int64)
        self.yi = np.ascontiguousarray(Y_indices, dtype=np.int32)
        self.yv = np.ascontiguousarray(Y_data, dtype=np.float32)
        self.n_points = self.xp.shape[0] - 1
        if self.yp.shape[0] - 1 != self.n_points:
            raise ValueError("X and Y have different numbers of rows")
        self.n_features = n_features
        self.n_labels = n_labels
        self.max_leaf = max_leaf
        self.labels_per_leaf = labels_per_leaf
        self.bias = bias
        self.cost = cost
        self.use_idcg = use_idcg
        self.eps = eps
        cdef int64_t r
        self.disc.resize(n_labels + 2)
        self.cs.resize(n_labels + 2)
        self.cs[0] = 1.0
        for r in range(n_labels + 1):
            self.disc[r] = 1.0 / log2(r + 2.0)
        for r in range(1, n_labels + 2):
            self.cs[r] = (self.cs[r - 1] if r > 1 else 0.0) + self.disc[r - 1]
        if not use_idcg:
            for r in range(n_labels + 2):
                self.cs[r] = 1.0
        self.fmap.assign(n_features + 1, -1)
        self.lmap.assign(n_labels, -1)
        self.acc.assign(n_labels, 0.0)

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

    cdef void _grow(self, uint32_t seed) noexcept nogil:
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

    cdef inline void _add_node(self, int64_t s, int64_t e, int32_t d) noexcept nogil:
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
                if self.acc[l] == 0.0 and self.lmap[l] < 0:
                    self.lmap[l] = 0
                    self.act_l.push_back(l)
                self.acc[l] += self.yv[j]
        self.order.clear()
        for k in range(<int64_t> self.act_l.size()):
            l = self.act_l[k]
            self.order.push_back(pair[double, int32_t](-self.acc[l] / n, l))
            self.acc[l] = 0.0
            self.lmap[l] = -1
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

    cdef void _rank(self, vector[double]& s, vector[int32_t]& r, int64_t m) noexcept nogil:
        """Rank labels by decreasing sum, ties to the lower local index; labels
        with a zero sum follow in index order.

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

    cdef int64_t _gather(self, int64_t s, int64_t e, const int64_t[::1] ptr,
                         const int32_t[::1] idx, vector[int32_t]& local,
                         vector[int32_t]& act) noexcept nogil:
        """The distinct column indices of the rows of points pts[s:e] into
        `act`, ascending; local[i] := position of i in act (all other entries
        of `local` stay -1; _release resets them). Returns len(act)."""
        cdef int64_t a, j, k
        cdef int32_t p, i
        act.clear()
        for a in range(s, e):
            p = self.pts[a]
            for j in range(ptr[p], ptr[p + 1]):
                i = idx[j]
                if local[i] < 0:
                    local[i] = 0
                    act.push_back(i)
        sort(act.begin(), act.end())
        for k in range(<int64_t> act.size()):
            local[act[k]] = <int32_t> k
        return act.size()

    cdef bint _split(self, int64_t node, mt19937& rng) noexcept nogil:
        cdef int64_t s = self.start[node], e = self.stop[node], n = e - s
        cdef int64_t a, j, k, m, nf, n_pos
        cdef int32_t p
        cdef double obj, prev, delta
        cdef signed char sg
        cdef bint ok

        # -- active labels, local label rows, per-point nDCG normaliser
        m = self._gather(s, e, self.yp, self.yi, self.lmap, self.act_l)
        if m == 0:
            return False
        self.ly_ptr.resize(n + 1)
        self.ly_idx.clear()
        self.ly_val.clear()
        self.inorm.resize(n)
        self.sign.resize(n)
        self.ly_ptr[0] = 0
        for a in range(n):
            p = self.pts[s + a]
            for j in range(self.yp[p], self.yp[p + 1]):
                self.ly_idx.push_back(self.lmap[self.yi[j]])
                self.ly_val.push_back(self.yv[j])
            self.ly_ptr[a + 1] = self.ly_idx.size()
            self.inorm[a] = 1.0 / self.cs[self.yp[p + 1] - self.yp[p]]
            # (typed temporaries: Cython mistypes `x if c else y` stored
            # through a vector reference)
            sg = 1 if (rng() & 1) else -1
            self.sign[a] = sg
        _release(self.lmap, self.act_l)

        # -- nDCG alternation
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
                if self.sign[a] > 0:
                    for j in range(self.ly_ptr[a], self.ly_ptr[a + 1]):
                        self.sp[self.ly_idx[j]] += self.inorm[a] * self.ly_val[j]
                else:
                    for j in range(self.ly_ptr[a], self.ly_ptr[a + 1]):
                        self.sn[self.ly_idx[j]] += self.inorm[a] * self.ly_val[j]
            self._rank(self.sp, self.rp, m)
            self._rank(self.sn, self.rn, m)
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
                    self.sign[a] = 1
                elif delta < 0:
                    self.sign[a] = -1
            if obj - prev < 1e-6:
                break
            prev = obj
        n_pos = 0
        for a in range(n):
            n_pos += self.sign[a] > 0
        if n_pos == 0 or n_pos == n:
            return False

        # -- L1-regularised logistic regression on the node's active features
        nf = self._gather(s, e, self.xp, self.xi, self.fmap, self.act_f)
        ok = self._solve(s, n, nf, n_pos, rng)
        _release(self.fmap, self.act_f)
        if not ok:
            return False

        # -- children: positive side first, both in node order
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

    cdef bint _solve(self, int64_t s, int64_t n, int64_t nf, int64_t n_pos,
                     mt19937& rng) noexcept nogil:
        """Class-balanced L1R_LR on the node; sign := side of w·x (>= 0 is +).
        Stores the weights and returns True when both sides are non-empty."""
        cdef int64_t a, j, k, row_len, n_new
        cdef int32_t p
        cdef ll_problem prob
        cdef ll_parameter par
        cdef ll_model* model
        cdef int[2] wlabel
        cdef double[2] wweight
        cdef double margin
        cdef signed char sg
        cdef ll_node node
        self.xbuf.clear()
        self.yvec.resize(n)
        self.xrows.resize(n)
        for a in range(n):
            p = self.pts[s + a]
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
            self.yvec[a] = 1.0 if self.sign[a] > 0 else -1.0
        k = 0
        for a in range(n):
            p = self.pts[s + a]
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
        # route the node's points by the learnt hyperplane
        n_new = 0
        k = 0
        for a in range(n):
            p = self.pts[s + a]
            margin = 0.0
            row_len = self.xp[p + 1] - self.xp[p] + 1
            for j in range(row_len):
                margin += self.wvec[self.xbuf[k + j].index - 1] * self.xbuf[k + j].value
            k += row_len + 1
            sg = 1 if margin >= 0 else -1
            self.sign[a] = sg
            n_new += margin >= 0
        if n_new == 0 or n_new == n:
            return False
        for k in range(nf + 1):
            if fabs(self.wvec[k]) > 1e-16:
                self.w_idx.push_back(self.act_f[k] if k < nf else <int32_t> self.n_features)
                self.w_val.push_back(<float> self.wvec[k])
        return True


cdef inline void _release(vector[int32_t]& local, vector[int32_t]& act) noexcept nogil:
    """Undo _gather's numbering: local[i] := -1 for the indices in act."""
    cdef int64_t k
    for k in range(<int64_t> act.size()):
        local[act[k]] = -1
