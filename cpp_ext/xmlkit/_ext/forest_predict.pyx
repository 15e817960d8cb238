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
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair

cimport numpy as cnp

cdef enum:
    # a lone point's margin at a node is the row's dot product with it when
    # the row is at most this many times the lookups' cost (a dot product
    # entry is a sequential multiply-add, a lookup step a branch)
    DOT_COST = 8
    # weight rows of at least n_features / DENSE_FRACTION entries get dense
    # copies when their tree is made ready (at most twice their own bytes)
    DENSE_FRACTION = 4
    # ... and only when a dense row (n_features + 1 floats) is at most
    # 128 KiB: on wide feature spaces the copies would cost more memory
    # than the lookups they save
    DENSE_MAX_FEATURES = 32768
    # what a kernel function returns when a block of a tree's file fails
    # its check (ForestKernel.failed says which tree)
    DAMAGED = -2


class DamagedTree(ValueError):
    """A block of tree `args[0]`'s file failed its check while it was read."""

import numpy as np
from sparse_rows cimport (RowsOut, TopScratch, check_row_range, emit_scores, indptr_t, padded, rows_in,
                          rows_open, rows_pieces)
from xmlkit._ext.file_check cimport BlockFile, blocks_need

cdef extern from "xk_portable.h":
    # a block's flag (see file_check: set once, by any thread)
    uint8_t xk_flag_get(const uint8_t* p) nogil

cnp.import_array()


cdef class ForestKernel:
    """Routes points down trees and averages the label distributions of the
    leaves they reach. Built from each tree's arrays where they lie (a
    tree's dict of arrays: in memory, or views of its mapped file), which it
    reads without copying them; read-only. A tree is routed only once it is
    marked ready (its contents checked: `ready`). Members: see
    forest_predict.pxd."""

    def __init__(self, trees, int64_t n_features, int64_t n_labels, double bias, blocks=None):
        """trees: dicts of child, w_ptr, w_idx, w_val, l_ptr, l_idx, l_val
        (see xmlkit.models.forest); their shapes are checked here, their
        contents by whoever marks them ready, or, for a tree whose entry in
        `blocks` is (BlockFile, spans) (the checks of its mapped file and
        the byte spans of its arrays there), as the kernel reads them: a
        block of the file is checked before any of its bytes is used."""
        cdef TreeView v
        cdef const int32_t[:, ::1] child
        cdef const int64_t[::1] wp, lp
        cdef const int32_t[::1] wi, li
        cdef const float[::1] wv, lv
        if not trees:
            raise ValueError("no trees")
        self.n_features, self.n_labels, self.bias = n_features, n_labels, bias
        self.refs = []
        self.failed = -1
        blocks = blocks or [None] * len(trees)
        for tree, checked in zip(trees, blocks):
            child = tree["child"]
            wp, wi, wv = tree["w_ptr"], padded(tree["w_idx"], np.int32), \
                padded(tree["w_val"], np.float32)
            lp, li, lv = tree["l_ptr"], padded(tree["l_idx"], np.int32), \
                padded(tree["l_val"], np.float32)
            n = child.shape[0]
            if (n < 1 or child.shape[1] != 2 or wp.shape[0] != n + 1 or lp.shape[0] != n + 1
                    or np.shape(tree["w_idx"]) != np.shape(tree["w_val"])
                    or np.shape(tree["l_idx"]) != np.shape(tree["l_val"])):
                raise ValueError("a tree's arrays disagree in length")
            self.refs.append((child, wp, wi, wv, lp, li, lv))
            self.dense_ids.push_back(vector[int64_t]())
            self.dense_rows.push_back(vector[float]())
            v.child, v.wp, v.wi, v.wv = &child[0, 0], &wp[0], &wi[0], &wv[0]
            v.lp, v.li, v.lv = &lp[0], &li[0], &lv[0]
            v.n_nodes = n
            v.n_w, v.n_le = len(tree["w_idx"]), len(tree["l_idx"])
            v.ascending = False
            v.ready = False
            v.dense_id = NULL
            v.dense = NULL
            v.blk = NULL
            if checked is not None:
                bf, spans = checked
                v.blk = &(<BlockFile> bf).b
                v.o_child, v.o_wp, v.o_wi, v.o_wv = (spans["child"][0], spans["w_ptr"][0],
                                                     spans["w_idx"][0], spans["w_val"][0])
                v.o_lp, v.o_li, v.o_lv = spans["l_ptr"][0], spans["l_idx"][0], spans["l_val"][0]
                self.refs.append(bf)
            self.trees.push_back(v)

    def ready(self, Py_ssize_t t, bint ascending):
        """Mark tree t ready to route: its contents are checked (child links
        form a tree, pointers cover their entries, indices in range, values
        finite); `ascending`: every weight row strictly ascending (a row may
        then be searched instead of scattered). Its long weight rows (at
        least a DENSE_FRACTION-th of the features) get dense copies here."""
        cdef int r
        if not 0 <= t < <Py_ssize_t> self.trees.size():
            raise IndexError(t)
        if self.trees[t].ready:
            return
        with nogil:
            r = _densify(self, t)
        self._raise(r, t)
        self.trees[t].ascending = ascending
        self.trees[t].ready = True

    cdef int _raise(self, int code, Py_ssize_t t) except -1:
        """DamagedTree when a kernel function returned DAMAGED (for tree t,
        or the one it recorded when t < 0)."""
        if code == DAMAGED:
            raise DamagedTree(t if t >= 0 else self.failed)
        return 0

    cdef int _need_ready(self) except -1:
        cdef size_t t
        for t in range(self.trees.size()):
            if not self.trees[t].ready:
                raise ValueError(f"tree {t} is not checked")
        return 0

    def predict_rows(self, X, int64_t r0, int64_t r1, int k):
        """Scores of rows r0..r1-1 of X (CSR; indices < n_features) as CSR
        pieces (indptr from 0, indices, data): the mean over trees of the
        reached leaves' label values, labels ascending, only the k best per
        row when k > 0 (ties: lower label first). Every tree must be ready."""
        self._need_ready()
        return self._rows(*rows_in(X, r0, r1), r0, r1, k)

    def _rows(self, const indptr_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
              int64_t r0, int64_t r1, int k):
        cdef RowsOut out
        cdef int r
        rows_open(out)
        with nogil:
            r = _predict(self, &xp[0], &xi[0], &xv[0], r0, r1, k, out)
        self._raise(r, -1)
        return rows_pieces(out)

    def route(self, Py_ssize_t t, X, int64_t r0, int64_t r1, int32_t[:, ::1] leaves):
        """leaves[t, r] = the leaf (node id) of tree t that row r of X
        reaches, for r0 <= r < r1 (leaves: n_trees x X's rows). Tree t must
        be ready."""
        if not 0 <= t < <Py_ssize_t> self.trees.size() or not self.trees[t].ready:
            raise ValueError(f"tree {t} is not checked")
        if leaves.shape[0] != <Py_ssize_t> self.trees.size() or leaves.shape[1] < r1:
            raise ValueError("one row of leaves per tree, one column per row of X")
        self._route(t, *rows_in(X, r0, r1), r0, r1, leaves)

    def _route(self, Py_ssize_t t, const indptr_t[::1] xp, const int32_t[::1] xi,
               const float[::1] xv, int64_t r0, int64_t r1, int32_t[:, ::1] leaves):
        cdef Scratch s
        cdef int r
        with nogil:
            s.dense.resize(self.n_features + 1)
            s.point.resize(self.n_features + 1)
            r = _route(self, t, &xp[0], &xi[0], &xv[0], r0, r1 - r0, &leaves[t, r0], s)
        self._raise(r, t)

    def score_leaves(self, const int32_t[:, ::1] leaves, int64_t r0, int64_t r1, int k):
        """Scores of rows r0..r1-1 (as predict_rows) from the leaves they
        reached (leaves[t, r], filled by route for every tree)."""
        cdef RowsOut out
        cdef vector[const int32_t*] at
        cdef Py_ssize_t t, n_trees = self.trees.size()
        if leaves.shape[0] != n_trees or not 0 <= r0 <= r1 <= leaves.shape[1]:
            raise ValueError("one row of leaves per tree, rows r0..r1-1 among them")
        self._need_ready()
        for t in range(n_trees):
            at.push_back(&leaves[t, r0])
        cdef int r
        rows_open(out)
        with nogil:
            r = _accumulate(self, at.data(), r1 - r0, k, out)
        self._raise(r, -1)
        return rows_pieces(out)


cdef inline bint _need(const TreeView* tv, int64_t offset, int64_t lo, int64_t hi,
                       int64_t size) noexcept nogil:
    """Elements lo..hi-1 (of `size` bytes) of the array at byte `offset` of
    tree tv's file are checked (always, for a tree checked whole). (Most
    reads lie in one or two blocks checked already: looked up here, before
    the call that checks.)"""
    cdef int64_t a, z
    if tv.blk == NULL or hi <= lo:
        return True
    a = (offset + lo * size) // tv.blk.block
    z = (offset + hi * size - 1) // tv.blk.block
    if z - a <= 1 and xk_flag_get(&tv.blk.done[a]) and xk_flag_get(&tv.blk.done[z]) \
            and not tv.blk.failed:
        return True
    return blocks_need(tv.blk, offset + lo * size, offset + hi * size)


cdef inline bint _need_node(const TreeView* tv, int64_t node) noexcept nogil:
    """A node's children and weight pointers are checked."""
    return _need(tv, tv.o_child, node, node + 1, 8) and _need(tv, tv.o_wp, node, node + 2, 8)


cdef inline bint _need_row(const TreeView* tv, int64_t lo, int64_t hi) noexcept nogil:
    """Weights lo..hi-1 (indices and values) are checked."""
    return _need(tv, tv.o_wi, lo, hi, 4) and _need(tv, tv.o_wv, lo, hi, 4)


cdef inline bint _need_entries(const TreeView* tv, int64_t a, int64_t b) noexcept nogil:
    """Leaf entries a..b-1 (labels and values; within the tree's) are checked."""
    return _need(tv, tv.o_li, a, b, 4) and _need(tv, tv.o_lv, a, b, 4)


cdef inline int32_t _bounded(int32_t c, int64_t nf, bint* bad) noexcept nogil:
    """Feature c of a weight, where it is used: in 0..nf (nf: the bias),
    else nf, and *bad set (its file changed after it was checked)."""
    if c < 0 or c > nf:
        bad[0] = True
        return <int32_t> nf
    return c


cdef int _route(ForestKernel f, Py_ssize_t t, const indptr_t* xp, const int32_t* xi,
                const float* xv, int64_t r0, int64_t n, int32_t* leaf,
                Scratch& s) except -1 nogil:
    """leaf[i] = the leaf of tree t that point r0 + i reaches, for i < n. s.dense (n_features + 1 zeros) is left zeroed; the rest of s is
    scratch space."""
    cdef int64_t i, j, e, lo, hi, a, b, row_len, entries, at, w0, w1
    cdef int32_t node, p, c0, c1
    cdef int64_t nf = f.n_features
    cdef double margin, bias = f.bias
    cdef bint scatter, bad = False
    cdef TreeView* tv = &f.trees[t]
    cdef const int32_t* child = tv.child
    cdef const int64_t* wp = tv.wp
    cdef const int32_t* wi = tv.wi
    cdef const float* wv = tv.wv
    cdef float* w = s.dense.data()
    s.order.resize(n)
    s.spare.resize(n)
    for i in range(n):
        s.order[i] = <int32_t> i
    s.todo.clear()
    s.todo.push_back(Span(0, 0, n))
    while s.todo.size():
        node, lo, hi = s.todo.back().node, s.todo.back().lo, s.todo.back().hi
        s.todo.pop_back()
        if lo == hi:
            continue
        if not _need_node(tv, node):
            f.failed = t
            return DAMAGED
        # (each link and pointer read once and bounded here: a mapped file
        # may change after its blocks were checked; children come after their
        # node, so that no link can lead back up: a file cut mid-page under
        # its mapping reads zeros past its end, a link to the root)
        c0, c1, w0, w1 = child[2 * node], child[2 * node + 1], wp[node], wp[node + 1]
        if c0 >= 0 and not (node < c0 < tv.n_nodes and node < c1 < tv.n_nodes and 0 <= w0
                            and w1 <= tv.n_w):
            f.failed = t
            return DAMAGED
        if hi - lo == 1 and tv.ascending and c0 >= 0:
            leaf[s.order[lo]] = _walk(f, tv, node, xp, xi, xv, r0 + s.order[lo], s)
            if leaf[s.order[lo]] < 0:
                f.failed = t
                return DAMAGED
            continue
        if c0 < 0:
            for i in range(lo, hi):
                leaf[s.order[i]] = node
            continue
        if not _need_row(tv, w0, w1):
            f.failed = t
            return DAMAGED
        # (a row whose pointers decrease is empty)
        row_len = max(0, w1 - w0)
        entries = 0
        for i in range(lo, hi):
            entries += xp[r0 + s.order[i] + 1] - xp[r0 + s.order[i]] + 1
        if tv.dense_id[node] >= 0:      # (a dense copy: as scattered, for free)
            row_len = 0
        # scatter the row once, or look each of the points' features up in it
        scatter = not tv.ascending or 2 * row_len <= entries * log2(<double> row_len + 2)
        if tv.dense_id[node] >= 0:
            w = <float*> (tv.dense + tv.dense_id[node] * (nf + 1))
        elif scatter:
            for j in range(w0, w1):
                w[_bounded(wi[j], nf, &bad)] = wv[j]
        a, b = lo, hi
        for i in range(lo, hi):
            p = s.order[i]
            margin = 0.0
            if scatter:
                for e in range(xp[r0 + p], xp[r0 + p + 1]):
                    margin += <double> w[xi[e]] * xv[e]
                margin += <double> w[nf] * bias
            else:
                at = w0
                for e in range(xp[r0 + p], xp[r0 + p + 1]):
                    margin += _weight_from(wi, wv, &at, w1, xi[e]) * xv[e]
                margin += _weight_from(wi, wv, &at, w1, <int32_t> nf) * bias
            # first child's points to the front, the second's to the back
            if margin >= 0:
                s.spare[a] = p
                a += 1
            else:
                b -= 1
                s.spare[b] = p
        if tv.dense_id[node] >= 0:
            w = s.dense.data()
        elif scatter:
            for j in range(w0, w1):
                w[_bounded(wi[j], nf, &bad)] = 0.0
        if bad:                         # (s.dense is this call's: left as it is)
            f.failed = t
            return DAMAGED
        for i in range(lo, hi):
            s.order[i] = s.spare[i]
        s.todo.push_back(Span(c1, a, hi))
        s.todo.push_back(Span(c0, lo, a))
    return 0

cdef int _densify(ForestKernel f, Py_ssize_t t) except -1 nogil:
    """Dense copies of tree t's long weight rows (row_len * DENSE_FRACTION
    >= n_features + 1: at most twice the row's own bytes): a point's margin
    at such a node costs its non-zeros, without scattering the row."""
    cdef TreeView* tv = &f.trees[t]
    cdef int64_t i, j, k = 0, d = f.n_features + 1, lo, hi
    cdef bint bad = False
    cdef vector[int64_t]* ids = &f.dense_ids[t]
    cdef vector[float]* rows = &f.dense_rows[t]
    ids.resize(tv.n_nodes)
    tv.dense_id = ids.data()
    if d > DENSE_MAX_FEATURES:
        for i in range(tv.n_nodes):
            ids[0][i] = -1
        return 0
    if not (_need(tv, tv.o_child, 0, tv.n_nodes, 8) and _need(tv, tv.o_wp, 0, tv.n_nodes + 1, 8)):
        f.failed = t
        return DAMAGED
    for i in range(tv.n_nodes):
        if tv.child[2 * i] >= 0 and (tv.wp[i + 1] - tv.wp[i]) * DENSE_FRACTION >= d:
            ids[0][i] = k
            k += 1
        else:
            ids[0][i] = -1
    rows.resize(k * d + 1)
    for i in range(tv.n_nodes):
        if ids[0][i] >= 0:
            lo, hi = tv.wp[i], tv.wp[i + 1]
            if lo < 0 or hi > tv.n_w or not _need_row(tv, lo, hi):
                f.failed = t
                return DAMAGED
            for j in range(lo, hi):
                rows[0][ids[0][i] * d + _bounded(tv.wi[j], d - 1, &bad)] = tv.wv[j]
            if bad:
                f.failed = t
                return DAMAGED
    tv.dense_id = ids.data()
    tv.dense = rows.data()
    return 0

cdef inline double _dense_margin(const float* w, const indptr_t* xp, const int32_t* xi,
                                 const float* xv, int64_t r, int64_t nf, double bias) noexcept nogil:
    """Point r's margin at a node whose weights are the dense row w (in the
    point's feature order, the bias last: as with a scattered row)."""
    cdef double margin = 0.0
    cdef int64_t e
    for e in range(xp[r], xp[r + 1]):
        margin += <double> w[xi[e]] * xv[e]
    return margin + <double> w[nf] * bias


cdef int32_t _walk(ForestKernel f, TreeView* tv, int32_t node, const indptr_t* xp,
                   const int32_t* xi, const float* xv, int64_t r, Scratch& s) noexcept nogil:
    """The leaf that point r reaches from `node` down, alone (tree rows
    ascending), or -1 if a block of the tree's file fails its check. Its
    features are scattered into s.point (left zeroed), and each node's margin is its weight row's dot product with them, row in
    order (cost: the row's length), or the point's features looked up in
    the row (cost: the point's non-zeros times the log of their ratio),
    whichever is cheaper. Both add the same non-zero products in ascending
    feature order, the bias last: the margins of _route, whose sign is all
    that is used (a sum may differ only in the sign of a zero)."""
    cdef const int32_t* child = tv.child
    cdef const int64_t* wp = tv.wp
    cdef const int32_t* wi = tv.wi
    cdef const float* wv = tv.wv
    cdef float* x = s.point.data()
    cdef int32_t nf = <int32_t> f.n_features
    cdef int64_t e, j, lo, end, at, nnz = xp[r + 1] - xp[r]
    cdef double margin, bias = f.bias, wb
    cdef float v
    cdef int32_t c0, c1
    cdef bint bad = False
    for e in range(xp[r], xp[r + 1]):
        x[xi[e]] = xv[e]
    while True:
        if not _need_node(tv, node):
            node = -1
            break
        c0, c1, lo, end = child[2 * node], child[2 * node + 1], wp[node], wp[node + 1]
        if c0 < 0:
            break
        if not (node < c0 < tv.n_nodes and node < c1 < tv.n_nodes and 0 <= lo
                and end <= tv.n_w and _need_row(tv, lo, end)):
            node = -1
            break
        margin = 0.0
        if tv.dense_id[node] >= 0:
            margin = _dense_margin(tv.dense + tv.dense_id[node] * (nf + 1), xp, xi, xv, r, nf,
                                   bias)
        elif end - lo <= DOT_COST * (nnz + 1) * log2(<double> (end - lo) / (nnz + 1) + 2):
            wb = 0.0
            if end > lo and wi[end - 1] == nf:
                end -= 1
                wb = wv[end]
            for j in range(lo, end):
                v = x[_bounded(wi[j], nf, &bad)]
                if v != 0:          # (a chain of additions: only those that count)
                    margin += <double> wv[j] * v
            margin += wb * bias
            if bad:
                node = -1
                break
        else:
            at = lo
            for e in range(xp[r], xp[r + 1]):
                margin += _weight_from(wi, wv, &at, end, xi[e]) * xv[e]
            margin += _weight_from(wi, wv, &at, end, nf) * bias
        node = c0 if margin >= 0 else c1
    for e in range(xp[r], xp[r + 1]):
        x[xi[e]] = 0.0
    return node


cdef int _accumulate(ForestKernel f, const int32_t** leaf, int64_t n, int topk,
                     RowsOut& out) except -1 nogil:
    """One output row per point i < n: the mean over trees t of the label
    values of leaf leaf[t][i] of tree t, added tree by tree."""
    cdef vector[double] acc
    cdef vector[char] seen
    cdef vector[int32_t] touched
    cdef vector[float] vals
    cdef TopScratch top
    cdef int64_t r, j, k, a, b
    cdef Py_ssize_t t, n_trees = f.trees.size()
    cdef int32_t node, l
    cdef double inv_t = 1.0 / n_trees
    cdef TreeView* tv
    acc.resize(f.n_labels)
    seen.resize(f.n_labels)
    for r in range(n):
        touched.clear()
        for t in range(n_trees):
            tv = &f.trees[t]
            node = leaf[t][r]
            if node < 0 or node >= tv.n_nodes or not _need(tv, tv.o_lp, node, node + 2, 8):
                f.failed = t
                return DAMAGED
            a, b = tv.lp[node], tv.lp[node + 1]         # (read once, bounded)
            if a < 0 or b > tv.n_le or not _need_entries(tv, a, b):
                f.failed = t
                return DAMAGED
            for j in range(a, b):
                l = tv.li[j]
                if l < 0 or l >= f.n_labels:
                    f.failed = t
                    return DAMAGED
                if not seen[l]:
                    seen[l] = 1
                    touched.push_back(l)
                acc[l] += tv.lv[j]
        vals.resize(touched.size())
        for k in range(<int64_t> touched.size()):       # (each mean as the float written)
            l = touched[k]
            vals[k] = <float> (acc[l] * inv_t)
            acc[l] = 0.0
            seen[l] = 0
        emit_scores(touched.data(), vals.data(), touched.size(), topk, False, top, out)
    return 0

cdef int _predict(ForestKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                  int64_t r0, int64_t r1, int topk, RowsOut& out) except -1 nogil:
    """ForestKernel.predict_rows without the GIL: route the block through
    each tree, then add up each point's leaves, tree by tree."""
    cdef Py_ssize_t t, n_trees = f.trees.size()
    cdef int64_t n = r1 - r0
    cdef vector[int32_t] leaf
    cdef vector[const int32_t*] at
    cdef Scratch s
    s.dense.resize(f.n_features + 1)
    s.point.resize(f.n_features + 1)
    leaf.resize(n * n_trees + 1)
    for t in range(n_trees):
        if _route(f, t, xp, xi, xv, r0, n, leaf.data() + t * n, s) == DAMAGED:
            return DAMAGED
        at.push_back(leaf.data() + t * n)
    return _accumulate(f, at.data(), n, topk, out)

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
# tree of a large set holds millions of weights); decoding reads the planes'
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
