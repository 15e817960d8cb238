# Prediction with ensembles of sparse linear-split trees (FastXML family).
#
# Each point is routed down every tree (w·x >= 0 -> first child), and the
# label distributions of the leaves it reaches are averaged over the trees.
#
# Routing runs a tree at a time over a block of points, as the C++ tool does:
# each internal node holds the block's points that reach it, computes their
# margins and hands them to its children. A node's weights are either
# scattered into a dense vector once for all its points (cost: the row's
# length plus the points' non-zeros), or, when only a few points reach a
# long row, looked up feature by feature (cost: the points' non-zeros times
# the log of the row's length). Both give the same margin, summed in the
# point's feature order, so that scores do not depend on the block a point
# is scored in (threads, pieces, Dask blocks).

from libc.math cimport log2
from libc.stdint cimport int32_t, int64_t, uint32_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair

cimport numpy as cnp

import numpy as np
from sparse_rows cimport (RowsOut, check_row_range, emit_top, indptr_t, padded, rows_in,
                          rows_open, rows_pieces)

cnp.import_array()


cdef class ForestKernel:
    """Routes points down every tree and averages the label distributions of
    the leaves they reach. Built from a packed forest (see
    xmlkit.models.forest.PackedForest); read-only. Members: see
    forest_predict.pxd."""

    def __init__(self, roots, child, w_ptr, w_idx, w_val, l_ptr, l_idx, l_val,
                 int64_t n_features, int64_t n_labels, double bias, bint ascending=False):
        n_nodes = np.shape(child)[0]
        if np.shape(roots)[0] < 1:
            raise ValueError("no trees")
        if np.shape(w_ptr)[0] != n_nodes + 1 or np.shape(l_ptr)[0] != n_nodes + 1:
            raise ValueError("node arrays of different lengths")
        self.roots = np.ascontiguousarray(roots, dtype=np.int32)
        self.child = np.ascontiguousarray(child, dtype=np.int32)
        self.w_ptr = np.ascontiguousarray(w_ptr, dtype=np.int64)
        self.l_ptr = np.ascontiguousarray(l_ptr, dtype=np.int64)
        # (entry arrays padded to one element: &a[0] is then always valid)
        self.w_idx = padded(w_idx, np.int32)
        self.w_val = padded(w_val, np.float32)
        self.l_idx = padded(l_idx, np.int32)
        self.l_val = padded(l_val, np.float32)
        self.n_features = n_features
        self.n_labels = n_labels
        self.bias = bias
        self.ascending = ascending

    def predict_rows(self, X, int64_t r0, int64_t r1, int k):
        """Scores of rows r0..r1-1 of X (CSR; indices < n_features) as CSR
        pieces (indptr from 0, indices, data): the mean over trees of the
        reached leaves' label values, labels ascending, only the k best per
        row when k > 0 (ties: lower label first)."""
        return self._rows(*rows_in(X, r0, r1), r0, r1, k)

    def _rows(self, const indptr_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
              int64_t r0, int64_t r1, int k):
        cdef RowsOut out
        rows_open(out)
        with nogil:
            _predict(self, &xp[0], &xi[0], &xv[0], r0, r1, k, out)
        return rows_pieces(out)

    def route_rows(self, X, int64_t r0, int64_t r1):
        """The leaves (node ids) that rows r0..r1-1 of X reach: an int32
        array (r1 - r0, n_trees)."""
        return self._leaves(*rows_in(X, r0, r1), r0, r1)

    def _leaves(self, const indptr_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
                int64_t r0, int64_t r1):
        cdef Py_ssize_t t, n_trees = self.roots.shape[0]
        cdef vector[int32_t] leaf
        with nogil:
            _route_all(self, &xp[0], &xi[0], &xv[0], r0, r1 - r0, leaf)
        out = np.empty((r1 - r0, n_trees), np.int32)
        cdef int32_t[:, ::1] o = out
        cdef int64_t i
        for i in range(r1 - r0):
            for t in range(n_trees):
                o[i, t] = leaf[i * n_trees + t]
        return out


cdef class LeafSums:
    """The leaves a block of points reached, a tree at a time, for scores
    added up at the end (what the C++ tool's score matrix is for): of each
    tree added, the points' leaves and the label rows of the leaves they
    reached (renumbered), nothing else of the tree. That is at most the
    points' leaf entries per tree, and less where points share leaves,
    against running sums per point that hold every label met with their
    vectors' slack. Scores are added up tree by tree in double as
    ForestKernel adds them: the same scores, byte for byte. Members: see
    forest_predict.pxd."""

    def __init__(self, int64_t n_rows, int64_t n_labels, int64_t n_trees):
        if n_rows < 0 or n_labels < 1 or n_trees < 1:
            raise ValueError("rows, labels or trees out of range")
        self.n_rows, self.n_labels, self.n_trees = n_rows, n_labels, n_trees
        self.added = 0
        self.leaf.assign(n_rows * n_trees, 0)
        self.lp.resize(n_trees)
        self.li.resize(n_trees)
        self.lv.resize(n_trees)

    def add_tree(self, l_ptr, l_idx, l_val, const int32_t[::1] leaves):
        """Add the next tree: its leaf rows l_ptr, l_idx, l_val (by node
        id) and leaves[i], the node point i reached (i < n_rows)."""
        if self.added == self.n_trees:
            raise ValueError("every tree is already added")
        if leaves.shape[0] != self.n_rows:
            raise ValueError("one leaf per row")
        cdef const int64_t[::1] lp = np.ascontiguousarray(l_ptr, dtype=np.int64)
        cdef const int32_t[::1] li = padded(l_idx, np.int32)
        cdef const float[::1] lv = padded(l_val, np.float32)
        cdef int64_t n_nodes = lp.shape[0] - 1
        if n_nodes < 1 or np.shape(l_idx)[0] != np.shape(l_val)[0]:
            raise ValueError("leaf rows malformed")
        if self.n_rows and (np.min(leaves) < 0 or np.max(leaves) >= n_nodes):
            raise ValueError("leaf ids outside the tree")
        cdef int64_t n_entries = np.shape(l_idx)[0]
        cdef int bad
        with nogil:
            bad = _add_tree(self, &lp[0], &li[0], &lv[0], n_entries, n_nodes, &leaves[0])
        if bad == 1:
            raise ValueError("leaf rows malformed")
        if bad == 2:
            raise ValueError("labels outside the model's")
        self.added += 1

    def score_rows(self, int64_t r0, int64_t r1, int k):
        """Scores of rows r0..r1-1 (the mean over the trees; every tree
        added) as CSR pieces, as ForestKernel.predict_rows."""
        cdef RowsOut out
        cdef vector[const int64_t*] lp
        cdef vector[const int32_t*] li
        cdef vector[const float*] lv
        cdef Py_ssize_t t
        check_row_range(self.n_rows, r0, r1)
        if self.added != self.n_trees:
            raise ValueError(f"{self.added} of the {self.n_trees} trees added")
        for t in range(self.n_trees):
            lp.push_back(self.lp[t].data())
            li.push_back(self.li[t].data())
            lv.push_back(self.lv[t].data())
        rows_open(out)
        with nogil:
            _accumulate(lp.data(), li.data(), lv.data(), self.n_labels,
                        self.leaf.data() + r0 * self.n_trees, r1 - r0, self.n_trees, k, out)
        return rows_pieces(out)


cdef int _add_tree(LeafSums s, const int64_t* lp, const int32_t* li, const float* lv,
                   int64_t n_entries, int64_t n_nodes, const int32_t* leaves) noexcept nogil:
    """LeafSums.add_tree without the GIL: the leaves reached, renumbered in
    the order first met, and their label rows (exact sizes). Returns 0, 1
    for a reached leaf's row outside the entries, 2 for a label outside
    the model's."""
    cdef int64_t t = s.added, i, j, q, m = 0
    cdef int32_t node
    cdef vector[int32_t] new_id
    cdef vector[int32_t] met
    new_id.assign(n_nodes, -1)
    for i in range(s.n_rows):
        node = leaves[i]
        if new_id[node] < 0:
            new_id[node] = <int32_t> met.size()
            met.push_back(node)
        s.leaf[i * s.n_trees + t] = new_id[node]
    m = met.size()
    s.lp[t].resize(m + 1)
    s.lp[t][0] = 0
    for q in range(m):
        node = met[q]
        if not 0 <= lp[node] <= lp[node + 1] <= n_entries:
            return 1
        s.lp[t][q + 1] = s.lp[t][q] + lp[node + 1] - lp[node]
    # (one entry more: data() is then valid for a tree whose leaves are empty)
    s.li[t].resize(s.lp[t][m] + 1)
    s.lv[t].resize(s.lp[t][m] + 1)
    for q in range(m):
        node = met[q]
        i = s.lp[t][q]
        for j in range(lp[node], lp[node + 1]):
            if not 0 <= li[j] < s.n_labels:
                return 2
            s.li[t][i] = li[j]
            s.lv[t][i] = lv[j]
            i += 1
    return 0


cdef inline pair[double, int32_t] _ranked(double total, double inv_t, int32_t l) noexcept nogil:
    """The emit_top entry of label l summed to `total` over trees: its mean
    (1 / n_trees = inv_t) as the float32 written out, negated (best first).
    ForestKernel and ScoreSums both rank by it: the same scores."""
    return pair[double, int32_t](-<double> (<float> (total * inv_t)), l)


cdef inline double _weight_of(const int32_t* wi, const float* wv, int64_t lo, int64_t hi,
                              int32_t feature) noexcept nogil:
    """The weight of `feature` in the ascending entries wi[lo:hi], or 0."""
    cdef int64_t mid, end = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if wi[mid] < feature:
            lo = mid + 1
        else:
            hi = mid
    return wv[lo] if lo < end and wi[lo] == feature else 0.0


cdef struct Span:
    int32_t node                         # a node of the tree being routed
    int64_t lo, hi                       # its points: order[lo:hi]


cdef void _route(ForestKernel f, Py_ssize_t t, const indptr_t* xp, const int32_t* xi,
                 const float* xv, int64_t r0, int64_t n, vector[int32_t]& leaf,
                 vector[float]& dense, vector[int32_t]& order, vector[int32_t]& spare,
                 vector[Span]& todo) except + nogil:
    """leaf[i * n_trees + t] = the leaf of tree t that point r0 + i reaches,
    for i < n. `dense` (n_features + 1 zeros) is left zeroed; `order`,
    `spare` and `todo` are scratch space."""
    cdef int64_t i, j, e, lo, hi, a, b, row_len, entries
    cdef int32_t node, p
    cdef int64_t nf = f.n_features
    cdef Py_ssize_t n_trees = f.roots.shape[0]
    cdef double margin, bias = f.bias
    cdef bint scatter
    cdef const int32_t* child = &f.child[0, 0]
    cdef const int64_t* wp = &f.w_ptr[0]
    cdef const int32_t* wi = &f.w_idx[0]
    cdef const float* wv = &f.w_val[0]
    cdef float* w = dense.data()
    order.resize(n)
    spare.resize(n)
    for i in range(n):
        order[i] = <int32_t> i
    todo.clear()
    todo.push_back(Span(f.roots[t], 0, n))
    while todo.size():
        node, lo, hi = todo.back().node, todo.back().lo, todo.back().hi
        todo.pop_back()
        if lo == hi:
            continue
        if child[2 * node] < 0:
            for i in range(lo, hi):
                leaf[order[i] * n_trees + t] = node
            continue
        row_len = wp[node + 1] - wp[node]
        entries = 0
        for i in range(lo, hi):
            entries += xp[r0 + order[i] + 1] - xp[r0 + order[i]] + 1
        # scatter the row once, or look each of the points' features up in it
        scatter = not f.ascending or 2 * row_len <= entries * log2(<double> row_len + 2)
        if scatter:
            for j in range(wp[node], wp[node + 1]):
                w[wi[j]] = wv[j]
        a, b = lo, hi
        for i in range(lo, hi):
            p = order[i]
            margin = 0.0
            if scatter:
                for e in range(xp[r0 + p], xp[r0 + p + 1]):
                    margin += <double> w[xi[e]] * xv[e]
                margin += <double> w[nf] * bias
            else:
                for e in range(xp[r0 + p], xp[r0 + p + 1]):
                    margin += _weight_of(wi, wv, wp[node], wp[node + 1], xi[e]) * xv[e]
                margin += _weight_of(wi, wv, wp[node], wp[node + 1], <int32_t> nf) * bias
            # first child's points to the front, the second's to the back
            if margin >= 0:
                spare[a] = p
                a += 1
            else:
                b -= 1
                spare[b] = p
        if scatter:
            for j in range(wp[node], wp[node + 1]):
                w[wi[j]] = 0.0
        for i in range(lo, hi):
            order[i] = spare[i]
        todo.push_back(Span(child[2 * node + 1], a, hi))
        todo.push_back(Span(child[2 * node], lo, a))


cdef void _route_all(ForestKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                     int64_t r0, int64_t n, vector[int32_t]& leaf) except + nogil:
    """leaf[i * n_trees + t] = the leaf of tree t that point r0 + i reaches,
    for every tree t and i < n (leaf is resized)."""
    cdef vector[float] dense
    cdef vector[int32_t] order, spare
    cdef vector[Span] todo
    cdef Py_ssize_t t, n_trees = f.roots.shape[0]
    dense.assign(f.n_features + 1, 0.0)
    leaf.resize(n * n_trees)
    for t in range(n_trees):
        _route(f, t, xp, xi, xv, r0, n, leaf, dense, order, spare, todo)


cdef void _accumulate(const int64_t** lp, const int32_t** li, const float** lv,
                      int64_t n_labels, const int32_t* leaf, int64_t n, Py_ssize_t n_trees,
                      int topk, RowsOut& out) except + nogil:
    """One output row per point i < n: the mean over trees t of the label
    values of leaf leaf[i * n_trees + t] (whose label row is
    lp[t][leaf] .. lp[t][leaf + 1] - 1 of li[t], lv[t]), added tree by tree."""
    cdef vector[double] acc
    cdef vector[char] seen
    cdef vector[int32_t] touched
    cdef vector[pair[double, int32_t]] ranked
    cdef vector[pair[int32_t, float]] sel
    cdef int64_t i, j, k
    cdef Py_ssize_t t
    cdef int32_t node, l
    cdef double inv_t = 1.0 / n_trees
    acc.assign(n_labels, 0.0)
    seen.assign(n_labels, 0)
    for i in range(n):
        touched.clear()
        for t in range(n_trees):
            node = leaf[i * n_trees + t]
            for j in range(lp[t][node], lp[t][node + 1]):
                l = li[t][j]
                if not seen[l]:
                    seen[l] = 1
                    touched.push_back(l)
                acc[l] += lv[t][j]
        ranked.clear()
        for k in range(<int64_t> touched.size()):
            l = touched[k]
            ranked.push_back(_ranked(acc[l], inv_t, l))
            acc[l] = 0.0
            seen[l] = 0
        emit_top(ranked, topk, sel, out)


cdef void _predict(ForestKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                   int64_t r0, int64_t r1, int topk, RowsOut& out) except + nogil:
    """ForestKernel.predict_rows without the GIL: route the block through
    each tree, then add up each point's leaves, tree by tree (node ids are
    global: every tree reads the same leaf rows)."""
    cdef vector[int32_t] leaf
    cdef Py_ssize_t n_trees = f.roots.shape[0]
    cdef vector[const int64_t*] lp
    cdef vector[const int32_t*] li
    cdef vector[const float*] lv
    lp.assign(n_trees, &f.l_ptr[0])
    li.assign(n_trees, &f.l_idx[0])
    lv.assign(n_trees, &f.l_val[0])
    _route_all(f, xp, xi, xv, r0, r1 - r0, leaf)
    _accumulate(lp.data(), li.data(), lv.data(), f.n_labels, leaf.data(), r1 - r0, n_trees,
                topk, out)


def ascending_rows(const int64_t[::1] ptr, const int32_t[::1] idx):
    """Whether the indices of every CSR row (pointers `ptr` into `idx`) are
    strictly ascending; pointers outside idx: ValueError."""
    cdef Py_ssize_t r, n_rows = ptr.shape[0] - 1
    cdef int64_t j, n = idx.shape[0]
    cdef bint up = True
    for r in range(n_rows):
        if not 0 <= ptr[r] <= ptr[r + 1] <= n:
            raise ValueError("row pointers outside the entries")
    with nogil:
        for r in range(n_rows):
            for j in range(ptr[r] + 1, ptr[r + 1]):
                if idx[j] <= idx[j - 1]:
                    up = False
                    break
            if not up:
                break
    return bool(up)


def scatter_rows(const int64_t[::1] ptr, const int32_t[::1] idx, const float[::1] val,
                 const int64_t[::1] rows, float[:, ::1] out):
    """out[k, idx[j]] = val[j] for the entries j of CSR row rows[k] (out
    zero-filled by the caller): dense copies of long weight rows."""
    cdef Py_ssize_t k
    cdef int64_t j
    if out.shape[0] != rows.shape[0]:
        raise ValueError("one output row per selected row")
    with nogil:
        for k in range(rows.shape[0]):
            for j in range(ptr[rows[k]], ptr[rows[k] + 1]):
                out[k, idx[j]] = val[j]


# Trees are stored as byte planes (see xmlkit.models.forest.encode_tree):
# these encode them in one pass, without the temporaries of numpy's way (a
# tree of the 1M-point set holds ~10M weights); decoding reads the planes'
# bytes into the values a piece at a time (forest._unplaned), then
# add_row_deltas turns the index differences back into indices.

def plane_floats(const float[::1] values):
    """Byte planes (4, n) of float32 values: row b holds byte b of each
    value, in the machine's order."""
    cdef Py_ssize_t j, n = values.shape[0]
    out = np.empty((4, n), np.uint8)
    cdef unsigned char[:, ::1] o = out
    cdef const unsigned char* b
    with nogil:
        for j in range(n):
            b = <const unsigned char*> &values[j]
            o[0, j], o[1, j], o[2, j], o[3, j] = b[0], b[1], b[2], b[3]
    return out


def plane_row_deltas(const int64_t[::1] ptr, const int32_t[::1] idx):
    """Byte planes (4, n) of the int32 indices of CSR rows (pointers `ptr`),
    each stored as its difference to the previous index of its row (a row's
    first index as it is): undone by add_row_deltas on the values."""
    cdef Py_ssize_t r, n_rows = ptr.shape[0] - 1
    cdef int64_t j, n = idx.shape[0]
    cdef int32_t d
    cdef const unsigned char* b = <const unsigned char*> &d
    if n_rows < 0 or ptr[0] != 0 or ptr[n_rows] != n:
        raise ValueError("row pointers do not cover the entries")
    for r in range(n_rows):
        if ptr[r + 1] < ptr[r]:
            raise ValueError("row pointers decrease")
    out = np.empty((4, n), np.uint8)
    cdef unsigned char[:, ::1] o = out
    with nogil:
        for r in range(n_rows):
            for j in range(ptr[r], ptr[r + 1]):
                d = idx[j] if j == ptr[r] else <int32_t> (<uint32_t> idx[j] - <uint32_t> idx[j - 1])
                o[0, j], o[1, j], o[2, j], o[3, j] = b[0], b[1], b[2], b[3]
    return out


def add_row_deltas(const int64_t[::1] ptr, int32_t[::1] idx):
    """In place: idx holds, per CSR row (pointers `ptr`), differences to the
    previous index of the row (a row's first index as it is); they become
    the indices. Raises ValueError when an index leaves 0..2^31-1 or the
    pointers do not cover the entries."""
    cdef Py_ssize_t r, n_rows = ptr.shape[0] - 1
    cdef int64_t j, n = idx.shape[0], acc
    cdef bint bad = n_rows < 0 or ptr[0] != 0 or ptr[n_rows] != n
    if bad:
        raise ValueError("row pointers do not cover the entries")
    with nogil:
        for r in range(n_rows):
            if ptr[r + 1] < ptr[r]:
                bad = True
                break
            acc = 0
            for j in range(ptr[r], ptr[r + 1]):
                acc = idx[j] if j == ptr[r] else acc + idx[j]
                if acc < 0 or acc > 2147483647:
                    bad = True
                    break
                idx[j] = <int32_t> acc
            if bad:
                break
    if bad:
        raise ValueError("an index outside 0..2^31-1")
