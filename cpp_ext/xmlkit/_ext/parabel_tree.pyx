# Parabel's growth, node by node (Prabhu et al., WWW 2018): a node's labels
# are split by (balanced) spherical k-means over their centroids
# (parabel_cluster.LabelKmeans), and the
# node trains one L2-regularised linear classifier per child (an internal
# node) or per label (a leaf) over the points that carry one of its labels,
# by dual coordinate descent (liblinear's L2R_L2LOSS_SVC_DUAL and
# L2R_LR_DUAL, no shrinking).
#
# The classifiers of a node are trained together, a block of them at a time:
# the block's weights are a dense (local features x block) matrix, so that a
# point's margins for every classifier of the block are one pass over its
# non-zeros, each reading a contiguous row of the block, and its updates one
# more. Each classifier follows its own coordinate-descent path (its own dual
# variables and stopping test) along one random order of the points per pass.
#
# A node's random stream is seeded from (seed, tree, node), so that a tree
# does not depend on which thread grows which node.

from libc.math cimport fabs, log, sqrt
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libcpp.vector cimport vector

cimport numpy as cnp

cdef extern from "xk_wide.h":
    void xk_rows_dot(int64_t lo, int64_t hi, const int32_t* f, const float* v, const float* W,
                     int64_t bw, int64_t na, float* z) noexcept nogil
    void xk_rows_axpy(int64_t lo, int64_t hi, const int32_t* f, const float* v, float* W,
                      int64_t bw, int64_t na, const float* d) noexcept nogil


import numpy as np
from xmlkit._ext.parabel_groups import col_type
from xmlkit._ext.parabel_cluster cimport LabelKmeans, rand_below
from sparse_rows cimport add_label_rows, csr_pieces, fill_vector, mt19937, padded, sort, tree_seed

cnp.import_array()

cdef enum:
    # a block's dense weights take at most BLOCK_BYTES (local features x
    # classifiers floats), with MIN_BLOCK to MAX_BLOCK classifiers
    BLOCK_BYTES = 8388608
    MIN_BLOCK = 8
    MAX_BLOCK = 128
    # a point's update touches only the columns that moved when fewer than
    # 1 / SPARSE_STEP of the block's did (else the whole rows, vectorised)
    SPARSE_STEP = 4
    # a node's rows and weights (scratch, 8 bytes an entry) are kept for the
    # next node up to KEEP_BYTES, else given back: the few large nodes of a
    # tree's top do not hold their memory while the rest of it grows
    KEEP_BYTES = 4194304
    # Newton steps at most per coordinate (logistic loss), as liblinear
    MAX_INNER = 100

#: (classifiers trained together at most, bytes of their dense weights): what
#: a node's solver holds (xmlkit.models.parabel checks the memory for it)
BLOCK = (MAX_BLOCK, BLOCK_BYTES)

ctypedef fused any_col:
    # a classifier's index within its node, as the tree stores it (col_type)
    uint8_t
    uint16_t
    int32_t


def node_seed(uint64_t seed, uint64_t tree, uint64_t node):
    """The seed of node `node` of tree `tree` (its k-means start and solver
    orders): the root's is node_seed(seed, tree, 0)."""
    return tree_seed(tree_seed(seed, tree), node)


def child_seed(uint64_t parent, uint64_t child):
    """The seed of child `child` (0, 1, ...) of the node seeded `parent`."""
    return tree_seed(parent, child + 1)


def label_centroids(const int64_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
                    const int64_t[::1] lp, const int32_t[::1] li, int64_t n_features,
                    double threshold):
    """The centroid of each label: the sum of the rows (xp, xi, xv: CSR, unit
    rows without the bias) of its points (lp, li: the points of each label),
    scaled to unit length, entries of magnitude <= threshold dropped: CSR
    pieces (indptr, indices ascending, data)."""
    cdef vector[int64_t] ptr
    cdef vector[int32_t] idx
    cdef vector[float] val
    with nogil:
        _centroids(&xp[0], &xi[0], &xv[0], &lp[0], &li[0], lp.shape[0] - 1, n_features,
                   threshold, ptr, idx, val)
    return csr_pieces(ptr, idx, val)


cdef void _centroids(const int64_t* xp, const int32_t* xi, const float* xv, const int64_t* lp,
                     const int32_t* li, int64_t L, int64_t D, double threshold,
                     vector[int64_t]& ptr, vector[int32_t]& idx,
                     vector[float]& val) except * nogil:
    cdef vector[double] acc
    cdef vector[signed char] mark
    cdef vector[int32_t] touched
    cdef int64_t l, a, n_touched
    cdef int32_t f
    cdef double norm
    acc.resize(D + 1, 0.0)
    mark.resize(D + 1, 0)
    touched.resize(D + 1)
    ptr.push_back(0)
    for l in range(L):
        n_touched = add_label_rows(xp, xi, xv, &li[lp[l]], lp[l + 1] - lp[l], 1.0, acc.data(),
                                   mark.data(), touched.data())
        norm = 0
        for a in range(n_touched):
            norm += acc[touched[a]] * acc[touched[a]]
        norm = sqrt(norm) if norm > 0 else 1.0
        for a in range(n_touched):
            f = touched[a]
            if fabs(acc[f] / norm) > threshold:
                idx.push_back(f)
                val.push_back(<float> (acc[f] / norm))
            acc[f] = 0
            mark[f] = 0
        ptr.push_back(idx.size())


cdef class ParabelData:
    """The training data of a Parabel forest, shared (read-only) by every
    node of every tree. Members: see parabel_tree.pxd."""

    def __init__(self, xp, xi, xv, xs, float bias, yp, yi, lp, li, cp, ci, cv, int64_t d,
                 int64_t L):
        """xp, xi, xv: the feature rows (CSR, indices ascending, below d - 1),
        each scaled by xs (float64: a row's unit length) and given the bias
        column d - 1, of value `bias`, as they are read; yp, yi: the labels of
        each point; lp, li: the points of each label, ascending; cp, ci, cv:
        the label centroids (label_centroids)."""
        self.xp = np.ascontiguousarray(xp, dtype=np.int64)
        self.xi, self.xv = padded(xi, np.int32), padded(xv, np.float32)
        self.xs = padded(xs, np.float64)
        self.bias = bias
        self.yp = np.ascontiguousarray(yp, dtype=np.int64)
        self.yi = padded(yi, np.int32)
        self.lp = np.ascontiguousarray(lp, dtype=np.int64)
        self.li = padded(li, np.int32)
        self.cp = np.ascontiguousarray(cp, dtype=np.int64)
        self.ci, self.cv = padded(ci, np.int32), padded(cv, np.float32)
        self.n = self.xp.shape[0] - 1
        self.d = d
        self.L = L
        if self.yp.shape[0] != self.n + 1 or self.lp.shape[0] != L + 1 \
                or self.cp.shape[0] != L + 1 or np.shape(xs)[0] != self.n:
            raise ValueError("the arrays disagree in length")


cdef int _lay_out(ParabelNode node, any_col* col, int32_t* feat,
                  float* val) except -1 nogil:
    """A node's rows (wp, wi: local features, wv) laid out feature-major into
    (feat: global features, col, val), by a counting sort over the local
    features (ascending as the global ones), stable in the classifiers."""
    cdef int64_t nf = node.feats.size(), j, q, k, f
    fill_vector(node.count, nf + 1, 0)
    for q in range(<int64_t> node.wi.size()):
        node.count[node.wi[q] + 1] += 1
    for f in range(nf):
        node.count[f + 1] += node.count[f]
    for j in range(<int64_t> node.wp.size() - 1):
        for q in range(node.wp[j], node.wp[j + 1]):
            f = node.wi[q]
            k = node.count[f]
            node.count[f] = k + 1
            feat[k] = node.feats[f]
            col[k] = <any_col> j
            val[k] = node.wv[q]
    return 0


cdef class ParabelNode:
    """Trains the nodes of Parabel trees, one node a call, on one thread (a
    thread keeps its own). Members: see parabel_tree.pxd."""

    def __init__(self, ParabelData data, int arity, bint balanced, double cluster_eps, int loss,
                 double C, int max_iter, double tol, double threshold):
        self.arity = arity
        self.balanced = balanced
        self.cluster_eps = cluster_eps
        self.km = LabelKmeans()
        self.loss = loss
        self.C = C
        self.max_iter = max_iter
        self.tol = tol
        self.threshold = threshold
        self.n_trn = data.n
        self.pmap.resize(data.n, -1)
        self.fmap.resize(data.d, -1)
        self.lmap.resize(data.L, -1)

    def node(self, ParabelData data, labels, uint32_t seed, bint leaf):
        """Train a node of labels `labels` (int32, ascending): a leaf, one
        classifier per label; else the labels clustered into children, one
        classifier per child. Returns (the classifier of each label: its
        own, or its child's; the number of classifiers; their weights as the
        tree stores a node's group: feature-major, features ascending, each
        feature's weights in classifier order, as (feature int32, classifier
        of col_type(number of classifiers), value float32))."""
        cdef const int32_t[::1] lab = padded(labels, np.int32)
        cdef int64_t m = np.shape(labels)[0]
        group_arr = np.zeros(max(m, 1), np.int32)
        cdef int32_t[::1] group = group_arr
        cdef int64_t j, n_cls = 0
        self.wp.clear(); self.wi.clear(); self.wv.clear()
        with nogil:
            self.rng.seed(seed)
            self._gather(data, &lab[0], m)
            if leaf:
                for j in range(m):
                    group[j] = <int32_t> j
            else:
                self._cluster(data, &lab[0], m, &group[0])
            for j in range(m):
                if group[j] + 1 > n_cls:
                    n_cls = group[j] + 1
            self._targets(data, &lab[0], m, &group[0])
            self._solve(n_cls)
        n_w = self.wi.size()
        feat_a, val_a = np.empty(max(n_w, 1), np.int32), np.empty(max(n_w, 1), np.float32)
        col_a = np.empty(max(n_w, 1), col_type(n_cls))
        cdef int32_t[::1] feat = feat_a
        cdef float[::1] val = val_a
        cdef void* col = cnp.PyArray_DATA(col_a)
        cdef int col_bytes = col_a.dtype.itemsize
        with nogil:
            if col_bytes == 1:
                _lay_out(self, <uint8_t*> col, &feat[0], &val[0])
            elif col_bytes == 2:
                _lay_out(self, <uint16_t*> col, &feat[0], &val[0])
            else:
                _lay_out(self, <int32_t*> col, &feat[0], &val[0])
            self._release()
            if self.ri.capacity() * 8 > KEEP_BYTES:
                self.rp.clear(); self.ri.clear(); self.rv.clear(); self.sq.clear()
                self.rp.shrink_to_fit(); self.ri.shrink_to_fit(); self.rv.shrink_to_fit()
                self.sq.shrink_to_fit()
            if self.wi.capacity() * 8 > KEEP_BYTES:
                self.wp.clear(); self.wi.clear(); self.wv.clear()
                self.wp.shrink_to_fit(); self.wi.shrink_to_fit(); self.wv.shrink_to_fit()
        return group_arr[:m], int(n_cls), feat_a[:n_w], col_a[:n_w], val_a[:n_w]

    cdef void _gather(self, ParabelData data, const int32_t* labels, int64_t m) except * nogil:
        """The node's points (those of its labels) and their features, as
        local rows (pts, feats, rp, ri, rv, sq)."""
        cdef int64_t j, q, r, a, nnz = 0
        cdef int32_t p, f
        cdef double s
        cdef float v
        self.pts.clear()
        self.feats.clear()
        for j in range(m):
            for q in range(data.lp[labels[j]], data.lp[labels[j] + 1]):
                p = data.li[q]
                if self.pmap[p] < 0:
                    self.pmap[p] = 0
                    self.pts.push_back(p)
        sort(self.pts.begin(), self.pts.end())
        for a in range(<int64_t> self.pts.size()):
            p = self.pts[a]
            self.pmap[p] = <int32_t> a
            nnz += data.xp[p + 1] - data.xp[p] + 1
            for r in range(data.xp[p], data.xp[p + 1]):
                f = data.xi[r]
                if self.fmap[f] < 0:
                    self.fmap[f] = 0
                    self.feats.push_back(f)
        if self.pts.size():
            self.feats.push_back(<int32_t> (data.d - 1))        # (every row's bias)
        sort(self.feats.begin(), self.feats.end())
        for a in range(<int64_t> self.feats.size()):
            self.fmap[self.feats[a]] = <int32_t> a
        self.rp.clear(); self.ri.clear(); self.rv.clear(); self.sq.clear()
        # (their sizes known: no growth by doubling, which held the old rows
        # beside the new and left up to twice the room)
        self.rp.reserve(self.pts.size() + 1); self.sq.reserve(self.pts.size())
        self.ri.reserve(nnz); self.rv.reserve(nnz)
        self.rp.push_back(0)
        for a in range(<int64_t> self.pts.size()):
            p = self.pts[a]
            s = 0
            for r in range(data.xp[p], data.xp[p + 1]):
                v = <float> (<double> data.xv[r] * data.xs[p])
                self.ri.push_back(self.fmap[data.xi[r]])
                self.rv.push_back(v)
                s += <double> v * v
            self.ri.push_back(self.fmap[data.d - 1])
            self.rv.push_back(data.bias)
            s += <double> data.bias * data.bias
            self.rp.push_back(self.ri.size())
            self.sq.push_back(<float> s)

    cdef void _release(self) noexcept nogil:
        """Reset the marks the node set."""
        cdef size_t a
        for a in range(self.pts.size()):
            self.pmap[self.pts[a]] = -1
        for a in range(self.feats.size()):
            self.fmap[self.feats[a]] = -1

    cdef void _targets(self, ParabelData data, const int32_t* labels, int64_t m,
                       const int32_t* group) except * nogil:
        """tp, ti: for each local point, the classifiers it is a positive of
        (the groups of its labels in the node), ascending."""
        cdef int64_t j, a, q, start
        cdef int32_t p, g
        for j in range(m):
            self.lmap[labels[j]] = group[j]
        self.tp.clear(); self.ti.clear()
        self.tp.push_back(0)
        for a in range(<int64_t> self.pts.size()):
            p = self.pts[a]
            start = self.ti.size()
            for q in range(data.yp[p], data.yp[p + 1]):
                g = self.lmap[data.yi[q]]
                if g >= 0:
                    self.ti.push_back(g)
            sort(self.ti.begin() + start, self.ti.end())
            # (distinct groups: several labels of a point may share a child)
            j = start
            for q in range(start, <int64_t> self.ti.size()):
                if q == start or self.ti[q] != self.ti[q - 1]:
                    self.ti[j] = self.ti[q]
                    j += 1
            self.ti.resize(j)
            self.tp.push_back(j)
        for j in range(m):
            self.lmap[labels[j]] = -1

    cdef void _solve(self, int64_t n_cls) except * nogil:
        """Train the n_cls classifiers of the node, a block at a time, and
        append their thresholded weights (local features) to wp, wi, wv."""
        cdef int64_t nf = self.feats.size(), n = self.pts.size()
        cdef int64_t bw, b0, j, f
        cdef vector[float] W
        cdef float v
        if self.wp.size() == 0:
            self.wp.push_back(0)
        bw = BLOCK_BYTES // (4 * (nf if nf > 0 else 1))
        bw = MIN_BLOCK if bw < MIN_BLOCK else (MAX_BLOCK if bw > MAX_BLOCK else bw)
        if bw > n_cls:
            bw = n_cls
        b0 = 0
        while b0 < n_cls:
            if b0 + bw > n_cls:
                bw = n_cls - b0
            fill_vector(W, nf * bw, 0.0)
            if n > 0:
                _coordinate_descent(self, b0, bw, W)
            for j in range(bw):
                for f in range(nf):
                    v = W[f * bw + j]
                    if fabs(v) > self.threshold:
                        self.wi.push_back(<int32_t> f)
                        self.wv.push_back(v)
                self.wp.push_back(self.wi.size())
            b0 += bw

    cdef void _cluster(self, ParabelData data, const int32_t* labels, int64_t m,
                       int32_t* group) except * nogil:
        """group[j]: the child of label j (LabelKmeans.split)."""
        self.km.split(&data.cp[0], &data.ci[0], &data.cv[0], self.fmap.data(),
                      self.feats.size(), labels, m, self.arity, self.balanced,
                      self.cluster_eps, self.rng, group)


cdef inline float _svc_step(double zj, double y, double* alpha, double diag, double qd,
                            double* pgmax, double* pgmin) noexcept nogil:
    """One dual coordinate step of the squared-hinge SVC for a point of
    margin zj and label y (liblinear's L2R_L2LOSS_SVC_DUAL, no shrinking):
    returns the step of the weights along the point."""
    cdef double G = y * zj - 1 + alpha[0] * diag
    cdef double PG = G
    cdef double old
    if alpha[0] == 0 and G > 0:
        PG = 0
    if PG > pgmax[0]:
        pgmax[0] = PG
    if PG < pgmin[0]:
        pgmin[0] = PG
    if fabs(PG) > 1e-12:
        old = alpha[0]
        alpha[0] = old - G / qd
        if alpha[0] < 0:
            alpha[0] = 0
        return <float> ((alpha[0] - old) * y)
    return 0


cdef inline float _lr_step(double zj, double y, double* a1, double* a2, double xisq, double C,
                           double innereps, int64_t* newton, double* gmax) noexcept nogil:
    """One dual coordinate step of the logistic regression for a point of
    margin zj and label y (liblinear's L2R_LR_DUAL: a1 = alpha, a2 = C -
    alpha, Newton steps on the sub-problem): returns the step of the weights
    along the point."""
    cdef double b = y * zj, sign = 1, old, z, gp, gpp, tmpz
    cdef double* p1 = a1
    cdef double* p2 = a2
    cdef int inner = 0
    if 0.5 * xisq * (a2[0] - a1[0]) + b < 0:
        p1, p2, sign = a2, a1, -1
    old = p1[0]
    z = old
    if C - z < 0.5 * C:
        z = 0.1 * z
    gp = xisq * (z - old) + sign * b + log(z / (C - z))
    if fabs(gp) > gmax[0]:
        gmax[0] = fabs(gp)
    while inner <= MAX_INNER:
        if fabs(gp) < innereps:
            break
        gpp = xisq + C / (C - z) / z
        tmpz = z - gp / gpp
        z = z * 0.1 if tmpz <= 0 else tmpz
        gp = xisq * (z - old) + sign * b + log(z / (C - z))
        newton[0] += 1
        inner += 1
    if inner > 0:
        p1[0] = z
        p2[0] = C - z
        return <float> (sign * (z - old) * y)
    return 0


cdef void _coordinate_descent(ParabelNode node, int64_t b0, int64_t bw,
                              vector[float]& W) except * nogil:
    """Train classifiers b0 .. b0 + bw - 1 of the node together: W (local
    features x bw) their weights. Each pass visits the points in a new
    random order; a classifier stops once its own test passes (squared
    hinge: the projected gradient's range <= tol; logistic: its largest
    |gradient| < tol), all stop after max_iter passes. The classifiers still
    training hold the first `na` columns of W (col: the classifier in each
    column), moved there when a quarter of them have stopped, and put back in
    order at the end; a point's margins and updates cover those columns only."""
    cdef int64_t n = node.pts.size()
    cdef bint lr = node.loss == 1
    cdef double C = node.C * node.n_trn / n if lr else node.C
    cdef double diag = 0.5 / node.C
    cdef double a0 = 0.001 * C if 0.001 * C < 1e-8 else 1e-8
    cdef double innereps_min = 1e-8 if 1e-8 < node.tol else node.tol
    cdef vector[int32_t] perm, col, moved
    cdef vector[double] alpha, pgmax, pgmin, innereps
    cdef vector[float] y, z, delta
    cdef vector[char] done
    cdef vector[int64_t] newton
    cdef int64_t nf = node.feats.size(), na = bw, it, s, i, j, q, t, k, left
    cdef float v, z0, z1
    cdef float* row
    cdef bint packed = False
    perm.resize(n)
    alpha.resize(n * bw * (2 if lr else 1), 0.0)
    y.resize(bw); z.resize(bw); delta.resize(bw)
    done.resize(bw, 0); pgmax.resize(bw); pgmin.resize(bw)
    innereps.resize(bw, 1e-2); newton.resize(bw)
    for j in range(bw):
        col.push_back(<int32_t> j)
    for i in range(n):
        perm[i] = <int32_t> i
        if lr:
            _signs(node, i, b0, bw, y)
            for j in range(bw):
                alpha[2 * (i * bw + j)] = a0
                alpha[2 * (i * bw + j) + 1] = C - a0
                delta[j] = y[j] * a0
            _axpy(node, i, bw, bw, delta, W)
    for it in range(node.max_iter):
        for i in range(n):
            k = i + rand_below(node.rng, n - i)
            perm[i], perm[k] = perm[k], perm[i]
        for j in range(bw):
            pgmax[j], pgmin[j], newton[j] = (0 if lr else -1e300), 1e300, 0
        for s in range(n):
            i = perm[s]
            _solver_ahead(perm.data(), s, n, node.rp.data(), node.ri.data(), node.rv.data(),
                          node.tp.data(), node.ti.data(), node.sq.data(), alpha.data(),
                          bw * (2 if lr else 1))
            _margins(node, i, bw, na, W, z)
            _signs(node, i, b0, bw, y)
            moved.clear()
            for k in range(na):
                j = col[k]
                if done[j]:
                    delta[k] = 0
                elif lr:
                    delta[k] = _lr_step(z[k], y[j], &alpha[2 * (i * bw + j)],
                                        &alpha[2 * (i * bw + j) + 1], node.sq[i], C,
                                        innereps[j], &newton[j], &pgmax[j])
                else:
                    delta[k] = _svc_step(z[k], y[j], &alpha[i * bw + j], diag,
                                         node.sq[i] + diag, &pgmax[j], &pgmin[j])
                if delta[k] != 0:
                    moved.push_back(<int32_t> k)
            if <int64_t> moved.size() * SPARSE_STEP < na:    # (a few moved: their columns)
                for q in range(node.rp[i], node.rp[i + 1]):
                    row = &W[node.ri[q] * bw]
                    v = node.rv[q]
                    for t in range(<int64_t> moved.size()):
                        row[moved[t]] += v * delta[moved[t]]
            elif moved.size() > 0:
                _axpy(node, i, bw, na, delta, W)
        left = 0
        for k in range(na):
            j = col[k]
            if done[j]:
                continue
            if (lr and pgmax[j] < node.tol) or (not lr and pgmax[j] - pgmin[j] <= node.tol):
                done[j] = 1
            else:
                left += 1
                if lr and newton[j] <= n // 10:
                    innereps[j] = 0.1 * innereps[j]
                    if innereps[j] < innereps_min:
                        innereps[j] = innereps_min
        if left == 0:
            break
        if 4 * left <= 3 * na:
            _pack(W, nf, bw, na, col, done, z)
            na, packed = left, True
    if packed:
        _unpack(W, nf, bw, col, delta)


cdef inline void _margins(ParabelNode node, int64_t i, int64_t bw, int64_t na,
                          vector[float]& W, vector[float]& z) noexcept nogil:
    """z[k] = w_k . x_i for W's first na columns (rows bw wide), summed over
    the point's non-zeros in order."""
    cdef int64_t q, k
    cdef float v, z0 = 0, z1 = 0
    cdef float* row
    if bw == 2 and na == 2:                     # (two sums in registers: a split node)
        for q in range(node.rp[i], node.rp[i + 1]):
            row = &W[node.ri[q] * 2]
            v = node.rv[q]
            z0 += v * row[0]
            z1 += v * row[1]
        z[0], z[1] = z0, z1
        return
    xk_rows_dot(node.rp[i], node.rp[i + 1], node.ri.data(), node.rv.data(), W.data(), bw, na,
                z.data())


cdef void _unpack(vector[float]& W, int64_t nf, int64_t bw, const vector[int32_t]& col,
                  vector[float]& tmp) noexcept nogil:
    """Put W's columns back in classifier order (col: the classifier in each)."""
    cdef int64_t f, k
    for f in range(nf):
        for k in range(bw):
            tmp[col[k]] = W[f * bw + k]
        for k in range(bw):
            W[f * bw + k] = tmp[k]


cdef int _pack(vector[float]& W, int64_t nf, int64_t bw, int64_t na, vector[int32_t]& col,
               const vector[char]& done, vector[float]& tmp) except -1 nogil:
    """Move the classifiers still training among W's first na columns before
    the stopped ones (each group in its order), in every row and in col."""
    cdef int64_t f, k, at
    cdef vector[int64_t] order
    cdef vector[int32_t] old
    old.assign(col.begin(), col.end())
    for k in range(na):
        if not done[col[k]]:
            order.push_back(k)
    for k in range(na):
        if done[col[k]]:
            order.push_back(k)
    for k in range(na):
        col[k] = old[order[k]]
    for f in range(nf):
        for k in range(na):
            tmp[k] = W[f * bw + order[k]]
        for k in range(na):
            W[f * bw + k] = tmp[k]
    return 0


cdef inline void _signs(ParabelNode node, int64_t i, int64_t b0, int64_t bw,
                        vector[float]& y) noexcept nogil:
    """y[j]: +1 when local point i is a positive of classifier b0 + j, else -1."""
    cdef int64_t j, q, t
    for j in range(bw):
        y[j] = -1
    for q in range(node.tp[i], node.tp[i + 1]):
        t = node.ti[q] - b0
        if 0 <= t < bw:
            y[t] = 1


cdef inline void _axpy(ParabelNode node, int64_t i, int64_t bw, int64_t na,
                       vector[float]& delta, vector[float]& W) noexcept nogil:
    """W += x_i delta over W's first na columns (rows bw wide): each non-zero
    of local point i adds delta to its row."""
    cdef int64_t q
    cdef float d0, d1
    cdef float* row
    if bw == 2 and na == 2:                     # (a split node: two columns, inline)
        d0, d1 = delta[0], delta[1]
        for q in range(node.rp[i], node.rp[i + 1]):
            row = &W[node.ri[q] * 2]
            row[0] += node.rv[q] * d0
            row[1] += node.rv[q] * d1
        return
    xk_rows_axpy(node.rp[i], node.rp[i + 1], node.ri.data(), node.rv.data(), W.data(), bw, na,
                 delta.data())
