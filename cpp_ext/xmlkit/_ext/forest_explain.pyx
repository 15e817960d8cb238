# Leave-one-feature-out explanations of a forest's scores: what removing
# each feature of a point does to the scores of given labels, exactly (see
# xmlkit.models.forest.tree_effects and docs/algorithms.md, "Explanations").
# It reads a ForestKernel's trees (xmlkit._ext.forest_predict), ready and
# checked, and routes as its routing does, so that the margins (and their
# signs) are the ones prediction computes.

from libc.math cimport log2
from libc.stdint cimport int32_t, int64_t
from libcpp.utility cimport pair
from libcpp.vector cimport vector

cimport numpy as cnp

import numpy as np
from sparse_rows cimport (RowsOut, array_copy, fill_vector, indptr_t, lower_bound,
                          padded, partial_sort, rows_in, rows_open, rows_pieces, sort)
from xmlkit._ext.forest_predict cimport ForestKernel, TreeView, _accumulate, _weight_from

cnp.import_array()


def explain_rows(ForestKernel f, X, int64_t r0, int64_t r1, labels_ptr=None, labels_idx=None,
                 int k=0, int n_top=0):
    """Leave-one-feature-out effects of forest kernel f's scores on labels
    of rows r0..r1-1 of X (CSR; indices < n_features, strictly ascending
    per row): row r0 + i's labels labels_idx[labels_ptr[i]:labels_ptr[i +
    1]] (ascending; labels_ptr[0] = 0), or, with labels None, its k best
    (as predict_rows chooses them).

    The effect of row entry e (feature j) on label l is the row's score of
    l minus its score with j removed (as predict_rows computes both, before
    the float32 rounding), non-zero only where removing j changes the leaf
    the row reaches in some tree. Returns (ptr, pos, feature, effect,
    scores, turned): row i's effects are entries ptr[i]..ptr[i+1]-1, each the
    position of the label among the row's labels, the feature and the
    effect (float64); only non-zero effects (n_top > 0: a label's n_top of
    largest |effect|, ties to the lower feature), a label's entries in
    feature order; scores: the chosen rows as predict_rows returns them
    (labels None), else None; turned: per entry of rows r0..r1-1, the trees
    whose leaf its removal changes. Every tree must be ready, and a mapped one
    checked whole (its file's blocks are not looked up here)."""
    cdef bint choose = labels_ptr is None
    if choose:
        if k < 1:
            raise ValueError("k >= 1 labels per row to choose")
        lp, li = np.zeros(r1 - r0 + 1, np.int64), np.zeros(0, np.int32)
    else:
        lp = np.ascontiguousarray(labels_ptr, dtype=np.int64)
        li = np.ascontiguousarray(labels_idx, dtype=np.int32)
        if lp.shape != (r1 - r0 + 1,) or lp[0] != 0 or lp[len(lp) - 1] != len(li) \
                or np.any(np.diff(lp) < 0):
            raise ValueError("label pointers: one row per row of X, covering the labels")
        if len(li) and not (0 <= li.min() and li.max() < f.n_labels):
            raise ValueError("labels outside the model's")
        up = np.diff(li) > 0
        inner = lp[1:len(lp) - 1]
        up[inner[(inner > 0) & (inner < len(li))] - 1] = True
        if not up.all():
            raise ValueError("a row's labels are not ascending")
    f._need_ready()
    return _explain(f, *rows_in(X, r0, r1), r0, r1, lp, padded(li, np.int32), choose, k, n_top)


def _explain(ForestKernel f, const indptr_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
             int64_t r0, int64_t r1, const int64_t[::1] lptr, const int32_t[::1] lidx,
             bint choose, int k, int n_top):
    cdef ExplainOut out
    cdef RowsOut chosen
    rows_open(chosen)
    with nogil:
        _explain_rows(f, &xp[0], &xi[0], &xv[0], r0, r1, &lptr[0], &lidx[0],
                      k if choose else 0, n_top, chosen, out)
    return (array_copy(out.ptr.data(), out.ptr.size(), cnp.NPY_INT64),
            array_copy(out.pos.data(), out.pos.size(), cnp.NPY_INT32),
            array_copy(out.feature.data(), out.feature.size(), cnp.NPY_INT32),
            array_copy(out.effect.data(), out.effect.size(), cnp.NPY_FLOAT64),
            rows_pieces(chosen) if choose else None,
            array_copy(out.turned.data(), xp[r1] - xp[r0], cnp.NPY_INT32))


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
    vector[int32_t] turned               # per entry of the rows: the trees whose leaf
                                         # its removal changes


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
    vector[double] err                   # ... within this of routing's sum
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


cdef inline double _fast_terms(const float* wrow, int64_t nf, double bias,
                               const indptr_t* xp, const int32_t* xi, const float* xv,
                               int64_t r, double* terms, double* top,
                               double* err) noexcept nogil:
    """Point r's margin from a node's whole weight row (wrow), summed in
    four independent chains (not routing's order: about four times
    faster), and in *err a bound of its difference to routing's sum: a sign
    decided from it is routing's when |margin| > *err. terms (unless NULL):
    each entry's term w x at terms[e - xp[r]], the largest |term| in *top."""
    cdef double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0, b0 = 0.0, b1 = 0.0
    cdef double t0, t1, t2, t3, big = 0.0
    cdef int64_t e = xp[r], end = xp[r + 1], i = 0
    while e + 3 < end:
        t0 = <double> wrow[xi[e]] * xv[e]
        t1 = <double> wrow[xi[e + 1]] * xv[e + 1]
        t2 = <double> wrow[xi[e + 2]] * xv[e + 2]
        t3 = <double> wrow[xi[e + 3]] * xv[e + 3]
        if terms != NULL:
            terms[i], terms[i + 1], terms[i + 2], terms[i + 3] = t0, t1, t2, t3
            big = max(big, max(max(abs(t0), abs(t1)), max(abs(t2), abs(t3))))
        a0 += t0
        a1 += t1
        a2 += t2
        a3 += t3
        b0 += abs(t0) + abs(t1)
        b1 += abs(t2) + abs(t3)
        e += 4
        i += 4
    while e < end:
        t0 = <double> wrow[xi[e]] * xv[e]
        if terms != NULL:
            terms[i] = t0
            big = max(big, abs(t0))
        a0 += t0
        b0 += abs(t0)
        e += 1
        i += 1
    t0 = <double> wrow[nf] * bias
    if terms != NULL:
        top[0] = big
    err[0] = (end - xp[r] + 2) * 4.5e-16 * (b0 + b1 + abs(t0))
    return ((a0 + a1) + (a2 + a3)) + t0


cdef inline bint _side(ForestKernel f, const TreeView* tv, int32_t node, const float* wrow,
                       double m, double err, double w, const indptr_t* xp, const int32_t* xi,
                       const float* xv, int64_t r, int64_t e) noexcept nogil:
    """Whether point r without entry e (weight w at the node; the whole
    point's margin m, within err of routing's sum) goes to the first child:
    m - w x_e >= 0, or, near zero, its margin without it summed as routing
    sums it."""
    cdef double m2 = m - w * xv[e]
    if abs(m2) > 1e-9 * (abs(m) + abs(w * xv[e])) + err:
        return m2 >= 0
    return _margin_of(f, tv, node, wrow, xp, xi, xv, r, e) >= 0


cdef int _real_item(ForestKernel f, const TreeView* tv, int32_t node, const float* wrow,
                    int64_t row_len, const indptr_t* xp, const int32_t* xi, const float* xv,
                    int64_t r, Item it, int64_t E0, Explainer& s) except -1 nogil:
    """A point itself at `node` (point r, item `it`): its margin, summed as
    routing sums it, sends it to a child, and each of its entries whose
    removal turns the margin's sign (a term w x at least about as large as
    the margin) becomes an item without that entry, sent to the other."""
    cdef int64_t e, at, end = xp[r + 1]
    cdef int32_t p = it.p
    cdef int64_t nf = f.n_features
    cdef double m = 0.0, top = 0.0, err = 0.0, w, w2, lim
    if wrow != NULL:
        m = _fast_terms(wrow, nf, f.bias, xp, xi, xv, r, &s.w[xp[r] - E0], &top, &err)
        if abs(m) <= err:           # (near zero: the sign as routing sums it)
            m = _margin_of(f, tv, node, wrow, xp, xi, xv, r, -1)
            err = 0.0
    else:
        at = tv.wp[node]
        for e in range(xp[r], end):
            w = _weight_from(tv.wi, tv.wv, &at, tv.wp[node] + row_len, xi[e]) * xv[e]
            s.w[e - E0] = w
            m += w
            top = max(top, abs(w))
        m += _weight_from(tv.wi, tv.wv, &at, tv.wp[node] + row_len, <int32_t> nf) * f.bias
    if m >= 0:
        s.first.push_back(it)
    else:
        s.second.push_back(it)
    lim = abs(m) * (1 - 1e-8) - err
    if top < lim:
        return 0
    for e in range(xp[r], end):
        w = s.w[e - E0]
        if abs(w) < lim or w == 0 or s.moved[e - E0]:
            continue
        w2 = m - w
        if abs(w2) > 1e-9 * (abs(m) + abs(w)) + err:
            if (w2 >= 0) == (m >= 0):
                continue
        elif (_margin_of(f, tv, node, wrow, xp, xi, xv, r, e) >= 0) == (m >= 0):
            continue
        s.moved[e - E0] = 1
        if m >= 0:
            s.second.push_back(Item(p, e))
        else:
            s.first.push_back(Item(p, e))
    return 0


cdef int _tree_items(ForestKernel f, TreeView* tv, const indptr_t* xp, const int32_t* xi,
                     const float* xv, int64_t r0, int64_t n, Explainer& s) except -1 nogil:
    """Route the block's points r0..r0+n-1 through tree tv, and each point
    without each entry whose removal turns its route: s.leaf[p] is point p's
    leaf, s.landed where each point without an entry ends."""
    cdef int64_t i, lo, hi, r, base, row_len, entries, E0 = xp[r0]
    cdef int32_t node, p
    cdef int64_t nf = f.n_features
    cdef double m, w, err
    cdef const float* wrow
    cdef bint scattered, here
    cdef Item it
    s.items.clear()
    s.landed.clear()
    fill_vector(s.moved, xp[r0 + n] - E0 + 1, 0)
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
                    if wrow != NULL:
                        s.margin[p] = _fast_terms(wrow, nf, f.bias, xp, xi, xv, r, NULL,
                                                  NULL, &err)
                        s.err[p] = err
                    else:
                        s.margin[p] = _margin_of(f, tv, node, wrow, xp, xi, xv, r, -1)
                        s.err[p] = 0.0
                m = s.margin[p]
                w = _weight_at(f, tv, node, wrow, xi[it.skip])
                here = _side(f, tv, node, wrow, m, s.err[p], w, xp, xi, xv, r, it.skip)
                if here:
                    s.first.push_back(it)
                else:
                    s.second.push_back(it)
                continue
            # the point itself (alone of its items on its path)
            _real_item(f, tv, node, wrow, row_len, xp, xi, xv, r, it, E0, s)
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
    return 0


cdef inline int64_t _label_pos(const int32_t* labels, int64_t k, int32_t l) noexcept nogil:
    """The position of label l among a point's k ascending labels, or -1."""
    cdef const int32_t* at = lower_bound(labels, labels + k, l)
    return at - labels if at != labels + k and at[0] == l else -1


cdef inline bint _later_entry(const pair[double, int64_t]& a,
                              const pair[double, int64_t]& b) noexcept nogil:
    return a.second < b.second


cdef int _explain_rows(ForestKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                       int64_t r0, int64_t r1, const int64_t* given_ptr,
                       const int32_t* given_idx, int choose, int n_top, RowsOut& chosen,
                       ExplainOut& out) except -1 nogil:
    """_explain without the GIL: the labels given (ascending), or, choose >
    0, each row's `choose` best (written to `chosen`)."""
    cdef Py_ssize_t t, n_trees = f.trees.size()
    cdef int64_t n = r1 - r0, p, e, q, j, a, k, E0 = xp[r0]
    cdef int32_t old, new
    cdef double inv_t = 1.0 / n_trees
    cdef TreeView* tv
    cdef Explainer s
    cdef vector[int32_t] leaves           # leaves[t * n + p]: point p's leaf in tree t
    cdef vector[const int32_t*] at        # (tree t's: leaves.data() + t * n)
    cdef vector[Landing] landed           # every tree's landings, tree by tree
    cdef vector[int64_t] tree_landed      # tree t's: landed[tree_landed[t]:tree_landed[t + 1]]
    cdef vector[int64_t] off              # point p's effects: acc[off[p] + (e - xp[r]) * k + q]
    cdef vector[double] acc, own          # (own[lptr[p] + q]: p's leaf's value of label q)
    cdef vector[int32_t] any_moved        # (out.turned)
    cdef vector[pair[double, int64_t]] best
    cdef const int64_t* lptr = given_ptr
    cdef const int32_t* lidx = given_idx
    cdef const int32_t* labels
    fill_vector(s.dense, f.n_features + 1, 0.0)
    fill_vector(s.leaf, n + 1, 0)
    fill_vector(s.margin, n + 1, 0.0)
    fill_vector(s.err, n + 1, 0.0)
    fill_vector(s.seen, n + 1, 0)
    s.visit = 0
    leaves.resize(n * n_trees + 1)
    tree_landed.push_back(0)
    for t in range(n_trees):
        _tree_items(f, &f.trees[t], xp, xi, xv, r0, n, s)
        for p in range(n):
            leaves[t * n + p] = s.leaf[p]
        landed.insert(landed.end(), s.landed.begin(), s.landed.end())
        tree_landed.push_back(<int64_t> landed.size())
    if choose > 0:                        # (each point's best, as predict_rows writes them)
        for t in range(n_trees):
            at.push_back(leaves.data() + t * n)
        if _accumulate(f, at.data(), n, choose, chosen) != 0:
            with gil:
                raise ValueError("a block of a tree's file failed its check")
        lptr = chosen.ptr.data()
        lidx = chosen.idx.data()
    fill_vector(off, n + 1, 0)
    for p in range(n):
        off[p + 1] = off[p] + (xp[r0 + p + 1] - xp[r0 + p]) * (lptr[p + 1] - lptr[p])
    fill_vector(acc, off[n] + 1, 0.0)
    fill_vector(own, lptr[n] + 1, 0.0)
    fill_vector(any_moved, xp[r1] - E0 + 1, 0)
    for t in range(n_trees):
        tv = &f.trees[t]
        # each point's own leaf's values of its labels
        for p in range(n):
            old = leaves[t * n + p]
            for q in range(lptr[p], lptr[p + 1]):
                own[q] = 0.0
            for j in range(tv.lp[old], tv.lp[old + 1]):
                q = _label_pos(lidx + lptr[p], lptr[p + 1] - lptr[p], tv.li[j])
                if q >= 0:
                    own[lptr[p] + q] = tv.lv[j]
        for a in range(tree_landed[t], tree_landed[t + 1]):
            p, e, new = landed[a].p, landed[a].skip, landed[a].leaf
            any_moved[e - E0] += 1
            labels = lidx + lptr[p]
            k = lptr[p + 1] - lptr[p]
            for q in range(k):
                acc[off[p] + (e - xp[r0 + p]) * k + q] += own[lptr[p] + q]
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
    out.turned.assign(any_moved.begin(), any_moved.end())
    return 0
