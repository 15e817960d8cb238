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
from libcpp.algorithm cimport partial_sort, sort

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
from sparse_rows cimport (RowsOut, array_copy, check_row_range, emit_top, indptr_t, padded,
                          rows_in, rows_open, rows_pieces)
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


    def explain_rows(self, X, int64_t r0, int64_t r1, labels_ptr, labels_idx, int n_top=0):
        """Leave-one-feature-out effects on given labels of rows r0..r1-1 of
        X (CSR; indices < n_features, strictly ascending per row): row
        r0 + i's labels are labels_idx[labels_ptr[i]:labels_ptr[i + 1]]
        (labels_ptr[0] = 0).
        The effect of row entry e (feature j) on label l is the row's score
        of l minus its score with j removed (as predict_rows computes
        both, before the float32 rounding), non-zero only where removing j
        changes the leaf the row reaches in some tree. Returns (ptr, pos,
        feature, effect): row i's effects are entries ptr[i]..ptr[i+1]-1,
        each the position of the label among the row's labels, the feature
        and the effect (float64); only non-zero effects (n_top > 0: a
        label's n_top of largest |effect|, ties to the lower feature), a
        label's entries in feature order. A row's labels are ascending; every tree must
        be ready, and a mapped one checked whole (its file's blocks are not
        looked up here)."""
        lp = np.ascontiguousarray(labels_ptr, dtype=np.int64)
        li = np.ascontiguousarray(labels_idx, dtype=np.int32)
        if lp.shape != (r1 - r0 + 1,) or lp[0] != 0 or lp[len(lp) - 1] != len(li) \
                or np.any(np.diff(lp) < 0):
            raise ValueError("label pointers: one row per row of X, covering the labels")
        if len(li) and not (0 <= li.min() and li.max() < self.n_labels):
            raise ValueError("labels outside the model's")
        up = np.diff(li) > 0
        up[lp[1:len(lp) - 1][(lp[1:len(lp) - 1] > 0) & (lp[1:len(lp) - 1] < len(li))] - 1] = True
        if not up.all():
            raise ValueError("a row's labels are not ascending")
        self._need_ready()
        cdef const int64_t[::1] lptr = lp
        cdef const int32_t[::1] lidx = padded(li, np.int32)
        return self._explain(*rows_in(X, r0, r1), r0, r1, lptr, lidx, n_top)

    def _explain(self, const indptr_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
                 int64_t r0, int64_t r1, const int64_t[::1] lptr, const int32_t[::1] lidx,
                 int n_top):
        cdef ExplainOut out
        with nogil:
            _explain_rows(self, &xp[0], &xi[0], &xv[0], r0, r1, &lptr[0], &lidx[0], n_top, out)
        return (array_copy(out.ptr.data(), out.ptr.size(), cnp.NPY_INT64),
                array_copy(out.pos.data(), out.pos.size(), cnp.NPY_INT32),
                array_copy(out.feature.data(), out.feature.size(), cnp.NPY_INT32),
                array_copy(out.effect.data(), out.effect.size(), cnp.NPY_FLOAT64))


cdef inline pair[double, int32_t] _ranked(double total, double inv_t, int32_t l) noexcept nogil:
    """The emit_top entry of label l summed to `total` over trees: its mean
    (1 / n_trees = inv_t) as the float32 written out, negated (best first)."""
    return pair[double, int32_t](-<double> (<float> (total * inv_t)), l)


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


cdef inline bint _need_leaf(const TreeView* tv, int64_t node) noexcept nogil:
    """A leaf's label pointers and its labels are checked."""
    return (_need(tv, tv.o_lp, node, node + 2, 8) and _need(tv, tv.o_li, tv.lp[node],
                                                             tv.lp[node + 1], 4)
            and _need(tv, tv.o_lv, tv.lp[node], tv.lp[node + 1], 4))


cdef inline double _weight_from(const int32_t* wi, const float* wv, int64_t* at, int64_t end,
                                int32_t feature) noexcept nogil:
    """The weight of `feature` in the ascending entries wi[*at:end], or 0;
    *at moves to the first entry >= feature, where the search for a larger
    feature starts (a point's features come in ascending order): a gallop
    (steps 1, 2, 4, ...), then a binary search of the last step."""
    cdef int64_t lo = at[0], hi, step = 1, mid
    while lo + step < end and wi[lo + step] < feature:
        lo += step
        step <<= 1
    hi = min(end, lo + step + 1)
    while lo < hi:
        mid = (lo + hi) >> 1
        if wi[mid] < feature:
            lo = mid + 1
        else:
            hi = mid
    at[0] = lo
    return wv[lo] if lo < end and wi[lo] == feature else 0.0


cdef int _route(ForestKernel f, Py_ssize_t t, const indptr_t* xp, const int32_t* xi,
                 const float* xv, int64_t r0, int64_t n, int32_t* leaf,
                 Scratch& s) except -1 nogil:
    """leaf[i] = the leaf of tree t that point r0 + i reaches, for i < n. s.dense (n_features + 1 zeros) is left zeroed; the rest of s is
    scratch space."""
    cdef int64_t i, j, e, lo, hi, a, b, row_len, entries, at
    cdef int32_t node, p
    cdef int64_t nf = f.n_features
    cdef double margin, bias = f.bias
    cdef bint scatter
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
        if hi - lo == 1 and tv.ascending and child[2 * node] >= 0:
            leaf[s.order[lo]] = _walk(f, tv, node, xp, xi, xv, r0 + s.order[lo], s)
            if leaf[s.order[lo]] < 0:
                f.failed = t
                return DAMAGED
            continue
        if child[2 * node] < 0:
            for i in range(lo, hi):
                leaf[s.order[i]] = node
            continue
        if not _need_row(tv, wp[node], wp[node + 1]):
            f.failed = t
            return DAMAGED
        # (a row whose pointers decrease is empty)
        row_len = max(0, wp[node + 1] - wp[node])
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
            for j in range(wp[node], wp[node + 1]):
                w[wi[j]] = wv[j]
        a, b = lo, hi
        for i in range(lo, hi):
            p = s.order[i]
            margin = 0.0
            if scatter:
                for e in range(xp[r0 + p], xp[r0 + p + 1]):
                    margin += <double> w[xi[e]] * xv[e]
                margin += <double> w[nf] * bias
            else:
                at = wp[node]
                for e in range(xp[r0 + p], xp[r0 + p + 1]):
                    margin += _weight_from(wi, wv, &at, wp[node + 1], xi[e]) * xv[e]
                margin += _weight_from(wi, wv, &at, wp[node + 1], <int32_t> nf) * bias
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
            for j in range(wp[node], wp[node + 1]):
                w[wi[j]] = 0.0
        for i in range(lo, hi):
            s.order[i] = s.spare[i]
        s.todo.push_back(Span(child[2 * node + 1], a, hi))
        s.todo.push_back(Span(child[2 * node], lo, a))
    return 0

cdef int _densify(ForestKernel f, Py_ssize_t t) except -1 nogil:
    """Dense copies of tree t's long weight rows (row_len * DENSE_FRACTION
    >= n_features + 1: at most twice the row's own bytes): a point's margin
    at such a node costs its non-zeros, without scattering the row."""
    cdef TreeView* tv = &f.trees[t]
    cdef int64_t i, j, k = 0, d = f.n_features + 1
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
            if not _need_row(tv, tv.wp[i], tv.wp[i + 1]):
                f.failed = t
                return DAMAGED
            for j in range(tv.wp[i], tv.wp[i + 1]):
                rows[0][ids[0][i] * d + tv.wi[j]] = tv.wv[j]
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
    for e in range(xp[r], xp[r + 1]):
        x[xi[e]] = xv[e]
    while True:
        if not _need_node(tv, node):
            node = -1
            break
        if child[2 * node] < 0:
            break
        lo, end = wp[node], wp[node + 1]
        if not _need_row(tv, lo, end):
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
                v = x[wi[j]]
                if v != 0:          # (a chain of additions: only those that count)
                    margin += <double> wv[j] * v
            margin += wb * bias
        else:
            at = lo
            for e in range(xp[r], xp[r + 1]):
                margin += _weight_from(wi, wv, &at, end, xi[e]) * xv[e]
            margin += _weight_from(wi, wv, &at, end, nf) * bias
        node = child[2 * node] if margin >= 0 else child[2 * node + 1]
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
    cdef vector[pair[double, int32_t]] ranked
    cdef vector[pair[int32_t, float]] sel
    cdef int64_t r, j, k
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
            if not _need_leaf(tv, node):
                f.failed = t
                return DAMAGED
            for j in range(tv.lp[node], tv.lp[node + 1]):
                l = tv.li[j]
                if not seen[l]:
                    seen[l] = 1
                    touched.push_back(l)
                acc[l] += tv.lv[j]
        ranked.clear()
        for k in range(<int64_t> touched.size()):
            l = touched[k]
            ranked.push_back(_ranked(acc[l], inv_t, l))
            acc[l] = 0.0
            seen[l] = 0
        emit_top(ranked, topk, sel, out)
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


# Leave-one-feature-out effects (ForestKernel.explain_rows). Removing
# feature j from a point changes its margin at a node by -w_j x_j and
# nothing else, so its route changes only at a node on its path where that
# flips the margin's sign; the first such node (from the root) is where the
# route without j leaves the path, and from its other child the point
# without j is walked down to its new leaf. A tree whose path no removal
# flips contributes nothing; the effect on a label is the mean over trees
# of (old leaf's value - new leaf's value) for the trees where j flips.
#
# A block of points goes down a tree together, as in routing: each node
# holds items, a point (its real route) or a point without one of its
# entries (a route that left the point's path above), reads its weight row
# once for them all (a dense copy, scattered, or searched per item when few
# items reach a long row), and computes each point's whole margin there
# once; an item without entry e then costs one weight (w_e) and a
# subtraction, and the real item finds which of its entries flip here.

cdef struct ExplainOut:
    vector[int64_t] ptr                  # row i: entries ptr[i] .. ptr[i + 1] - 1
    vector[int32_t] pos                  # the label's position among the row's labels
    vector[int32_t] feature              # the removed feature
    vector[double] effect                # score with it - score without it


cdef struct Item:
    int32_t p                            # the point (of the block)
    int64_t skip                         # its entry removed, or -1 (the point itself)


cdef struct ItemSpan:
    int32_t node
    int64_t lo, hi                       # its items: items[lo:hi]


cdef struct Landing:
    int32_t p                            # a point without entry `skip` reached `leaf`
    int64_t skip
    int32_t leaf


cdef struct Explainer:
    # what explaining a block of points through a tree works in
    vector[Item] items                   # the items of every node visited (spans)
    vector[ItemSpan] todo                # nodes still to visit
    vector[Item] first, second           # a node's items for its children
    vector[Landing] landed               # where each point without an entry ended
    vector[int32_t] leaf                 # each point's own leaf
    vector[double] margin                # each point's margin at the node `seen` says
    vector[int64_t] seen
    vector[char] moved                   # per entry of the block: its route left already
    vector[double] w                     # per entry of the block: its term w x at the node
    vector[float] dense                  # n_features + 1 zeros (a scattered weight row)
    int64_t visit


cdef inline double _weight_at(ForestKernel f, const TreeView* tv, int32_t node,
                              const float* wrow, int32_t feature) noexcept nogil:
    """A node's weight of one feature (0 if none): from its row read whole
    (wrow), else looked up."""
    cdef int64_t lo = tv.wp[node], end = max(tv.wp[node], tv.wp[node + 1]), j
    if wrow != NULL:
        return wrow[feature]
    if tv.ascending:
        return _weight_from(tv.wi, tv.wv, &lo, end, feature)
    for j in range(lo, end):
        if tv.wi[j] == feature:
            return tv.wv[j]
    return 0.0


cdef inline double _margin_of(ForestKernel f, const TreeView* tv, int32_t node,
                              const float* wrow, const indptr_t* xp, const int32_t* xi,
                              const float* xv, int64_t r, int64_t skip) noexcept nogil:
    """Point r's margin at `node` without its entry `skip` (-1: none), summed
    as routing sums it (entries in order, the bias last): from its row read
    whole (wrow), else by searching the (ascending) row."""
    cdef int64_t e, at, end
    cdef int64_t nf = f.n_features
    cdef double m = 0.0, w
    if wrow != NULL:
        for e in range(xp[r], xp[r + 1]):
            if e != skip:
                m += <double> wrow[xi[e]] * xv[e]
        return m + <double> wrow[nf] * f.bias
    at, end = tv.wp[node], max(tv.wp[node], tv.wp[node + 1])
    for e in range(xp[r], xp[r + 1]):
        w = _weight_from(tv.wi, tv.wv, &at, end, xi[e])
        if e != skip:
            m += w * xv[e]
    return m + _weight_from(tv.wi, tv.wv, &at, end, <int32_t> nf) * f.bias


cdef inline bint _side(ForestKernel f, const TreeView* tv, int32_t node, const float* wrow,
                       double m, double w, const indptr_t* xp, const int32_t* xi,
                       const float* xv, int64_t r, int64_t e) noexcept nogil:
    """Whether point r without entry e (weight w at the node, the whole
    point's margin m) goes to the first child: m - w x_e >= 0, summed again
    without it, as routing would, when that is near zero."""
    cdef double m2 = m - w * xv[e]
    if abs(m2) > 1e-9 * (abs(m) + abs(w * xv[e])):
        return m2 >= 0
    return _margin_of(f, tv, node, wrow, xp, xi, xv, r, e) >= 0


cdef void _tree_items(ForestKernel f, TreeView* tv, const indptr_t* xp, const int32_t* xi,
                      const float* xv, int64_t r0, int64_t n, Explainer& s) noexcept nogil:
    """Route the block's points r0..r0+n-1 through tree tv, and each point
    without each entry whose removal turns its route: s.leaf[p] is point p's
    leaf, s.landed where each point without an entry ends."""
    cdef int64_t i, lo, hi, e, r, base, row_len, entries, at, E0 = xp[r0]
    cdef int32_t node, p
    cdef int64_t nf = f.n_features
    cdef double m, w, w2, top, lim
    cdef const float* wrow
    cdef bint scattered, here
    cdef Item it
    s.items.clear()
    s.landed.clear()
    s.moved.assign(xp[r0 + n] - E0 + 1, 0)
    s.w.resize(xp[r0 + n] - E0 + 1)
    for i in range(n):
        s.items.push_back(Item(<int32_t> i, -1))
    s.todo.clear()
    s.todo.push_back(ItemSpan(0, 0, n))
    while s.todo.size():
        node, lo, hi = s.todo.back().node, s.todo.back().lo, s.todo.back().hi
        s.todo.pop_back()
        if lo == hi:
            continue
        if tv.child[2 * node] < 0:
            for i in range(lo, hi):
                it = s.items[i]
                if it.skip < 0:
                    s.leaf[it.p] = node
                else:
                    s.landed.push_back(Landing(it.p, it.skip, node))
            continue
        # the node's weights: its dense copy, scattered once for the items,
        # or searched per item (few items, a long row), as routing chooses
        row_len = max(0, tv.wp[node + 1] - tv.wp[node])
        entries = 0
        for i in range(lo, hi):
            r = r0 + s.items[i].p
            entries += xp[r + 1] - xp[r] + 1
        scattered = False
        wrow = NULL
        if tv.dense_id[node] >= 0:
            wrow = tv.dense + tv.dense_id[node] * (nf + 1)
        elif not tv.ascending or 2 * row_len <= entries * log2(<double> row_len + 2):
            for i in range(tv.wp[node], tv.wp[node] + row_len):
                s.dense[tv.wi[i]] = tv.wv[i]
            wrow = s.dense.data()
            scattered = True
        s.visit += 1
        s.first.clear()
        s.second.clear()
        for i in range(lo, hi):
            it = s.items[i]
            p = it.p
            r = r0 + p
            if it.skip >= 0:
                # (a point's items without an entry share its margin here)
                if s.seen[p] != s.visit:
                    s.seen[p] = s.visit
                    s.margin[p] = _margin_of(f, tv, node, wrow, xp, xi, xv, r, -1)
                m = s.margin[p]
                w = _weight_at(f, tv, node, wrow, xi[it.skip])
                here = m >= 0 if w == 0 else _side(f, tv, node, wrow, m, w, xp, xi, xv, r,
                                                    it.skip)
                if here:
                    s.first.push_back(it)
                else:
                    s.second.push_back(it)
                continue
            # the point itself (alone of its items on its path): its margin,
            # summed as routing sums it, and its entries' terms w x
            m = 0.0
            top = 0.0
            if wrow != NULL:
                for e in range(xp[r], xp[r + 1]):
                    w = <double> wrow[xi[e]] * xv[e]
                    s.w[e - E0] = w
                    m += w
                    top = max(top, abs(w))
                m += <double> wrow[nf] * f.bias
            else:
                at = tv.wp[node]
                for e in range(xp[r], xp[r + 1]):
                    w = _weight_from(tv.wi, tv.wv, &at, tv.wp[node] + row_len, xi[e]) * xv[e]
                    s.w[e - E0] = w
                    m += w
                    top = max(top, abs(w))
                m += _weight_from(tv.wi, tv.wv, &at, tv.wp[node] + row_len, <int32_t> nf) \
                    * f.bias
            if m >= 0:
                s.first.push_back(it)
            else:
                s.second.push_back(it)
            # its entries whose removal turns its route here: a term at least
            # about as large as the margin (none when the largest is not)
            lim = abs(m) * (1 - 1e-8)
            if top < lim:
                continue
            for e in range(xp[r], xp[r + 1]):
                w = s.w[e - E0]
                if abs(w) < lim or w == 0 or s.moved[e - E0]:
                    continue
                w2 = m - w
                if abs(w2) > 1e-9 * (abs(m) + abs(w)):
                    if (w2 >= 0) == (m >= 0):
                        continue
                elif (_margin_of(f, tv, node, wrow, xp, xi, xv, r, e) >= 0) == (m >= 0):
                    continue
                s.moved[e - E0] = 1
                if m >= 0:
                    s.second.push_back(Item(p, e))
                else:
                    s.first.push_back(Item(p, e))
        if scattered:
            for i in range(tv.wp[node], tv.wp[node] + row_len):
                s.dense[tv.wi[i]] = 0.0
        base = s.items.size()
        for i in range(<int64_t> s.first.size()):
            s.items.push_back(s.first[i])
        for i in range(<int64_t> s.second.size()):
            s.items.push_back(s.second[i])
        s.todo.push_back(ItemSpan(tv.child[2 * node + 1], base + <int64_t> s.first.size(),
                                  <int64_t> s.items.size()))
        s.todo.push_back(ItemSpan(tv.child[2 * node], base, base + <int64_t> s.first.size()))


cdef inline int64_t _label_pos(const int32_t* labels, int64_t k, int32_t l) noexcept nogil:
    """The position of label l among a point's k ascending labels, or -1."""
    cdef int64_t lo = 0, hi = k, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if labels[mid] < l:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < k and labels[lo] == l else -1


cdef inline bint _later_entry(const pair[double, int64_t]& a,
                              const pair[double, int64_t]& b) noexcept nogil:
    return a.second < b.second


cdef int _explain_rows(ForestKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                       int64_t r0, int64_t r1, const int64_t* lptr, const int32_t* lidx,
                       int n_top, ExplainOut& out) except -1 nogil:
    """ForestKernel.explain_rows without the GIL (the rows' labels ascending)."""
    cdef Py_ssize_t t, n_trees = f.trees.size()
    cdef int64_t n = r1 - r0, p, e, q, j, a, k, E0 = xp[r0]
    cdef int32_t old, new
    cdef double inv_t = 1.0 / n_trees
    cdef TreeView* tv
    cdef Explainer s
    cdef vector[int64_t] off              # point p's effects: acc[off[p] + (e - xp[r]) * k + q]
    cdef vector[double] acc
    cdef vector[char] any_moved
    cdef vector[pair[double, int64_t]] best
    cdef const int32_t* labels
    s.dense.assign(f.n_features + 1, 0.0)
    s.leaf.assign(n + 1, 0)
    s.margin.assign(n + 1, 0.0)
    s.seen.assign(n + 1, 0)
    s.visit = 0
    off.assign(n + 1, 0)
    for p in range(n):
        off[p + 1] = off[p] + (xp[r0 + p + 1] - xp[r0 + p]) * (lptr[p + 1] - lptr[p])
    acc.assign(off[n] + 1, 0.0)
    any_moved.assign(xp[r1] - E0 + 1, 0)
    for t in range(n_trees):
        tv = &f.trees[t]
        _tree_items(f, tv, xp, xi, xv, r0, n, s)
        for a in range(<int64_t> s.landed.size()):
            p, e, new = s.landed[a].p, s.landed[a].skip, s.landed[a].leaf
            old = s.leaf[p]
            any_moved[e - E0] = 1
            if new == old:
                continue
            labels = lidx + lptr[p]
            k = lptr[p + 1] - lptr[p]
            for j in range(tv.lp[old], tv.lp[old + 1]):
                q = _label_pos(labels, k, tv.li[j])
                if q >= 0:
                    acc[off[p] + (e - xp[r0 + p]) * k + q] += tv.lv[j]
            for j in range(tv.lp[new], tv.lp[new + 1]):
                q = _label_pos(labels, k, tv.li[j])
                if q >= 0:
                    acc[off[p] + (e - xp[r0 + p]) * k + q] -= tv.lv[j]
    # each label's effects, or its n_top largest |effect| (ties: lower
    # feature first), in the row's feature order
    out.ptr.clear()
    out.ptr.push_back(0)
    for p in range(n):
        k = lptr[p + 1] - lptr[p]
        for q in range(k):
            best.clear()
            for e in range(xp[r0 + p], xp[r0 + p + 1]):
                if any_moved[e - E0] and acc[off[p] + (e - xp[r0 + p]) * k + q] != 0:
                    best.push_back(pair[double, int64_t](
                        -abs(acc[off[p] + (e - xp[r0 + p]) * k + q]), e))
            if n_top > 0 and best.size() > <size_t> n_top:
                partial_sort(best.begin(), best.begin() + n_top, best.end())
                best.resize(n_top)
                sort(best.begin(), best.end(), _later_entry)
            for a in range(<int64_t> best.size()):
                e = best[a].second
                out.pos.push_back(<int32_t> q)
                out.feature.push_back(xi[e])
                out.effect.push_back(acc[off[p] + (e - xp[r0 + p]) * k + q] * inv_t)
        out.ptr.push_back(<int64_t> out.pos.size())
    return 0
