# Parabel prediction: a point's row is scaled to unit length and given the
# bias feature; in each tree a beam of the `beam` best nodes descends level
# by level, a child's log-score its parent's plus its classifier's
# log-likelihood (squared hinge: -max(0, 1 - w.x)^2; logistic:
# -log(1 + e^-w.x)); every label of a leaf of the final beam scores
# exp(leaf log-score + its classifier's log-likelihood), and a label's score
# is the sum over the trees over the number of trees.

from libc.stdint cimport int32_t, int64_t
from libc.math cimport exp, log1p, log2, sqrt
from libcpp.vector cimport vector
from libcpp.utility cimport pair
from libcpp.algorithm cimport lower_bound, partial_sort, sort

cimport numpy as cnp

import numpy as np
from sparse_rows cimport RowsOut, emit_top, indptr_t, padded, rows_in, rows_open, rows_pieces

cnp.import_array()


cdef extern from "xk_portable.h":
    void XK_PREFETCH(const void* p) noexcept nogil


ctypedef pair[pair[int32_t, int32_t], double] Visit     # ((node, row), -log-score)
ctypedef pair[int64_t, int64_t] Span                    # a range of weights

cdef enum:
    # a binary search step over a group's features costs about this many
    # steps of laying a feature out (a dependent read far away, against a
    # write in a row): chooses between the two
    SEARCH_COST = 8


cdef inline double _loglik(double z, int loss) noexcept nogil:
    """The log-likelihood of margin z: -max(0, 1 - z)^2 or -log(1 + e^-z)."""
    if loss == 1:
        return -log1p(exp(-z)) if z >= 0 else z - log1p(exp(z))
    return -(1 - z) * (1 - z) if z < 1 else 0.0


cdef void _score_groups(const ParabelTree* tv, int loss, double bias, const int64_t* rp,
                        const int32_t* xi, const float* sv, vector[Visit]& visits,
                        vector[Span]& slot, vector[double]& acc,
                        vector[vector[pair[double, int32_t]]]& nxt,
                        vector[vector[pair[int32_t, double]]]& items, int64_t d,
                        Span* met, float* met_v) noexcept nogil:
    """Score the visits ((node, row), node's -log-score), grouped by node.
    A group's features (ascending) are found for a row's entries either by a
    binary search each or, when that costs more than laying the group out
    once for all the rows that reach it, through that layout (slot: feature
    -> its weights' span, else empty; made when first needed, written and
    cleared again). Each margin is the sum over the row's entries in order,
    then the bias: the same sum, to the bit, as a classifier row's dot
    product. An internal node's children go to nxt[row] as (-log-score,
    child); a leaf's labels to items[row] as (label, probability)."""
    cdef size_t a = 0, b, c
    cdef int32_t node
    cdef int64_t g0, g1, q, e, k, m, n_met, width, row, first, entries
    cdef size_t n0
    cdef const int32_t* at
    cdef Span span, bias_span
    cdef bint leaf, laid
    cdef double s
    sort(visits.begin(), visits.end())
    while a < visits.size():
        node = visits[a].first.first
        b = a
        entries = 0
        while b < visits.size() and visits[b].first.first == node:
            entries += rp[visits[b].first.second + 1] - rp[visits[b].first.second]
            b += 1
        leaf = tv.c_ptr[node] == tv.c_ptr[node + 1]
        if leaf:
            first, width = tv.l_ptr[node], tv.l_ptr[node + 1] - tv.l_ptr[node]
        else:
            first, width = tv.c_ptr[node], tv.c_ptr[node + 1] - tv.c_ptr[node]
        g0, g1 = tv.g_ptr[node], tv.g_ptr[node + 1]
        laid = 2 * (g1 - g0) < entries * (log2(<double> (g1 - g0 + 1)) + 1) * SEARCH_COST
        if laid:
            if slot.size() == 0:
                slot.resize(d, Span(0, 0))
            for q in range(g0, g1):
                slot[tv.u_feat[q]] = Span(tv.u_ptr[q], tv.u_ptr[q + 1])
        bias_span = Span(0, 0)
        if g1 > g0 and tv.u_feat[g1 - 1] == d - 1:         # (the bias: the last feature)
            bias_span = Span(tv.u_ptr[g1 - 1], tv.u_ptr[g1])
        for c in range(a, b):
            row = visits[c].first.second
            n_met = 0
            for q in range(rp[row], rp[row + 1]):      # the spans met, fetched ahead
                if laid:
                    span = slot[xi[q]]
                    if span.first == span.second:
                        continue
                else:
                    at = lower_bound(tv.u_feat + g0, tv.u_feat + g1, xi[q])
                    if at == tv.u_feat + g1 or at[0] != xi[q]:
                        continue
                    span = Span(tv.u_ptr[at - tv.u_feat], tv.u_ptr[at - tv.u_feat + 1])
                XK_PREFETCH(tv.e_col + span.first)
                XK_PREFETCH(tv.e_val + span.first)
                met[n_met] = span
                met_v[n_met] = sv[q]
                n_met += 1
            for m in range(n_met):
                for e in range(met[m].first, met[m].second):
                    acc[tv.e_col[e]] += tv.e_val[e] * met_v[m]
            for e in range(bias_span.first, bias_span.second):
                acc[tv.e_col[e]] = acc[tv.e_col[e]] + tv.e_val[e] * bias
            s = visits[c].second
            if leaf:
                n0 = items[row].size()
                items[row].resize(n0 + width)
                for k in range(width):
                    items[row][n0 + k].first = tv.l_idx[first + k]
                    items[row][n0 + k].second = exp(-s + _loglik(acc[k], loss))
                    acc[k] = 0
            else:
                n0 = nxt[row].size()
                nxt[row].resize(n0 + width)
                for k in range(width):
                    nxt[row][n0 + k].first = s - _loglik(acc[k], loss)
                    nxt[row][n0 + k].second = <int32_t> (first + k)
                    acc[k] = 0
        if laid:
            for q in range(g0, g1):
                slot[tv.u_feat[q]] = Span(0, 0)
        a = b


cdef void _search(const ParabelTree* tv, int beam, int loss, int64_t d, double bias,
                  int64_t nr, const int64_t* rp, const int32_t* xi, const float* sv,
                  vector[vector[pair[double, int32_t]]]& cur,
                  vector[vector[pair[double, int32_t]]]& nxt, vector[Visit]& visits,
                  vector[vector[pair[int32_t, double]]]& items, vector[Span]& slot,
                  vector[double]& acc, Span* met, float* met_v) noexcept nogil:
    """Tree tv's beam search for the nr rows of a chunk, level by level (a
    leaf in the beam stays in it); the labels of each row's final leaves
    appended to items[row]."""
    cdef int64_t r
    cdef size_t a
    cdef int32_t node
    for r in range(nr):
        cur[r].clear()
        cur[r].push_back(pair[double, int32_t](0.0, 0))
    while True:
        visits.clear()
        for r in range(nr):
            nxt[r].clear()
            for a in range(cur[r].size()):
                node = cur[r][a].second
                if tv.c_ptr[node] == tv.c_ptr[node + 1]:
                    nxt[r].push_back(cur[r][a])
                else:
                    visits.push_back(Visit(pair[int32_t, int32_t](node, <int32_t> r),
                                           cur[r][a].first))
        if visits.size() == 0:
            break
        _score_groups(tv, loss, bias, rp, xi, sv, visits, slot, acc, nxt, items, d, met, met_v)
        for r in range(nr):
            if nxt[r].size() > <size_t> beam:
                partial_sort(nxt[r].begin(), nxt[r].begin() + beam, nxt[r].end())
                nxt[r].resize(beam)
            cur[r].swap(nxt[r])
    visits.clear()
    for r in range(nr):
        for a in range(cur[r].size()):
            visits.push_back(Visit(pair[int32_t, int32_t](cur[r][a].second, <int32_t> r),
                                   cur[r][a].first))
    _score_groups(tv, loss, bias, rp, xi, sv, visits, slot, acc, nxt, items, d, met, met_v)


cdef void _predict(ParabelKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                   int64_t r0, int64_t r1, int topk, int beam, RowsOut& out) except + nogil:
    """ParabelKernel.predict_rows without the GIL: the rows' unit values,
    each tree's search over the chunk, then each row's labels summed over
    the trees (in tree order) and written."""
    cdef int64_t d = f.d, nr = r1 - r0, r, q, base = xp[r0]
    cdef int n_trees = <int> f.trees.size()
    cdef int t
    cdef vector[int64_t] rp
    cdef vector[float] sv
    cdef vector[Span] slot, met
    cdef vector[float] met_v
    cdef vector[double] acc, margins
    cdef vector[int32_t] touched
    cdef vector[unsigned char] seen
    cdef vector[vector[pair[double, int32_t]]] cur, nxt
    cdef vector[vector[pair[int32_t, double]]] items
    cdef vector[Visit] visits
    cdef vector[pair[double, int32_t]] ranked
    cdef vector[pair[int32_t, float]] sel
    cdef size_t a
    cdef int32_t lab
    cdef double norm
    acc.resize(f.n_labels, 0.0)
    margins.resize(f.widest, 0.0)
    cur.resize(nr)
    nxt.resize(nr)
    items.resize(nr)
    sv.resize(xp[r1] - base + 1)
    for r in range(nr + 1):
        rp.push_back(xp[r0 + r] - base)
    for r in range(nr):
        if rp[r + 1] - rp[r] > <int64_t> met.size():
            met.resize(rp[r + 1] - rp[r])
    met.resize(met.size() + 1)
    met_v.resize(met.size())
    for r in range(nr):         # (room for every label the trees' final beams can reach)
        items[r].reserve(n_trees * min(<int64_t> beam * f.widest, f.n_labels))
    for r in range(nr):
        norm = 0
        for q in range(rp[r], rp[r + 1]):
            norm += <double> xv[base + q] * xv[base + q]
        norm = sqrt(norm) if norm > 0 else 1.0
        for q in range(rp[r], rp[r + 1]):
            sv[q] = <float> (xv[base + q] / norm)
    for t in range(n_trees):
        _search(&f.trees[t], beam, f.loss, d, f.bias, nr, rp.data(), xi + base, sv.data(),
                cur, nxt, visits, items, slot, margins, met.data(), met_v.data())
    seen.resize(f.n_labels, 0)
    for r in range(nr):
        touched.clear()
        for a in range(items[r].size()):
            lab = items[r][a].first
            if not seen[lab]:         # (a probability may be 0: acc does not tell)
                seen[lab] = 1
                touched.push_back(lab)
            acc[lab] += items[r][a].second
        if topk <= 0:                 # every label, ascending: as emit_top would write them
            sort(touched.begin(), touched.end())
            for a in range(touched.size()):
                lab = touched[a]
                out.idx.push_back(lab)
                out.val.push_back(<float> (acc[lab] / n_trees))
                acc[lab] = 0
                seen[lab] = 0
            out.ptr.push_back(out.idx.size())
            continue
        ranked.clear()
        for a in range(touched.size()):
            lab = touched[a]
            ranked.push_back(pair[double, int32_t](-<double> (<float> (acc[lab] / n_trees)), lab))
            acc[lab] = 0
            seen[lab] = 0
        emit_top(ranked, topk, sel, out)


cdef int _group_pass(const int64_t* cp, const int64_t* lp, const int64_t* wp,
                     const int32_t* wi, const float* wv, int64_t n, int64_t d, int64_t n_w,
                     int64_t* count, int64_t* g_ptr, int32_t* u_feat, int64_t* u_ptr,
                     int32_t* e_col, float* e_val) noexcept nogil:
    """One pass over the groups (see ParabelTree): with u_feat NULL, count
    each group's features into g_ptr; else lay its n_w weights out
    feature-major, each group's features ascending. count: d zeros, left
    zero. Every pointer and index is bounded where it is used (the
    arrays may be a mapped file): returns -1 when one is out of range, else 0."""
    cdef int64_t n_rows = n + lp[n], i, j, lo, hi, q, f, k, g
    for i in range(n):
        if cp[i] < cp[i + 1]:
            lo, hi = cp[i], cp[i + 1]
        else:
            lo, hi = n + lp[i], n + lp[i + 1]
        if lo < 1 or lo > hi or hi > n_rows:
            return -1
        g = 0 if u_feat == NULL else g_ptr[i]
        for j in range(lo, hi):
            if wp[j] < 0 or wp[j] > wp[j + 1] or wp[j + 1] > n_w:
                return -1
            for q in range(wp[j], wp[j + 1]):
                f = wi[q]
                if f < 0 or f >= d:
                    return -1
                if count[f] == 0:
                    if u_feat != NULL:
                        if g >= g_ptr[i + 1]:
                            return -1
                        u_feat[g] = <int32_t> f
                    g += 1
                count[f] += 1
        if u_feat == NULL:
            g_ptr[i + 1] = g_ptr[i] + g
        else:
            sort(u_feat + g_ptr[i], u_feat + g)     # (ascending: the bias last)
            for q in range(g_ptr[i], g):              # the places, then the cursors
                u_ptr[q + 1] = u_ptr[q] + count[u_feat[q]]
                count[u_feat[q]] = u_ptr[q]
            for j in range(lo, hi):
                for q in range(wp[j], wp[j + 1]):
                    f = wi[q]
                    if f < 0 or f >= d or count[f] >= n_w:
                        return -1
                    k = count[f]
                    e_col[k] = <int32_t> (j - lo)
                    e_val[k] = wv[q]
                    count[f] = k + 1
            for q in range(g_ptr[i], g):
                count[u_feat[q]] = 0
            continue
        for j in range(lo, hi):
            for q in range(wp[j], wp[j + 1]):
                f = wi[q]
                if 0 <= f < d:
                    count[f] = 0
    return 0


def group_weights(const int64_t[::1] cp, const int64_t[::1] lp, const int64_t[::1] wp,
                  const int32_t[::1] wi, const float[::1] wv, int64_t d):
    """A tree's classifier rows regrouped by the node that scores them (see
    ParabelTree in parabel_predict.pxd): (g_ptr, u_feat, u_ptr, e_col, e_val).
    cp, lp: the tree's child and leaf pointers; wp, wi, wv: its classifier
    rows (node rows, then leaf entries). ValueError where they disagree."""
    cdef int64_t n = cp.shape[0] - 1, n_w
    if n < 1 or lp.shape[0] != n + 1 or lp[n] < 0 or wp.shape[0] != n + lp[n] + 1:
        raise ValueError("a tree's arrays disagree in length")
    n_w = min(wi.shape[0], wv.shape[0])
    count_a = np.zeros(d, np.int64)
    g_ptr_a = np.zeros(n + 1, np.int64)
    cdef int64_t[::1] count = count_a, g_ptr = g_ptr_a
    cdef int rc
    with nogil:
        rc = _group_pass(&cp[0], &lp[0], &wp[0], &wi[0], &wv[0], n, d, n_w, &count[0],
                         &g_ptr[0], NULL, NULL, NULL, NULL)
    if rc < 0:
        raise ValueError("a tree's pointers or feature indices are out of range")
    u_feat_a = np.zeros(max(g_ptr[n], 1), np.int32)
    u_ptr_a = np.zeros(g_ptr[n] + 1, np.int64)
    e_col_a = np.zeros(max(n_w, 1), np.int32)
    e_val_a = np.zeros(max(n_w, 1), np.float32)
    cdef int32_t[::1] u_feat = u_feat_a, e_col = e_col_a
    cdef int64_t[::1] u_ptr = u_ptr_a
    cdef float[::1] e_val = e_val_a
    with nogil:
        rc = _group_pass(&cp[0], &lp[0], &wp[0], &wi[0], &wv[0], n, d, n_w, &count[0],
                         &g_ptr[0], &u_feat[0], &u_ptr[0], &e_col[0], &e_val[0])
    if rc < 0:
        raise ValueError("a tree's arrays changed while they were read")
    return g_ptr_a, u_feat_a, u_ptr_a, e_col_a, e_val_a


cdef class ParabelKernel:
    """A Parabel forest: each tree's links read where they lie (a tree's dict
    of arrays: in memory, or views of its mapped file, checked) and its
    classifiers regrouped by node (group_weights), and the beam search of
    points through it. Read-only once built. Members: see parabel_predict.pxd."""

    def __init__(self, trees, int64_t d, double bias, int64_t n_labels, int loss):
        """trees: dicts of c_ptr, l_ptr, l_idx, w_ptr, w_idx, w_val (see
        xmlkit.models.parabel)."""
        cdef ParabelTree v
        cdef const int64_t[::1] cp, lp, gp, up
        cdef const int32_t[::1] li, uf, ec
        cdef const float[::1] ev
        if not trees:
            raise ValueError("no trees")
        self.refs = []
        self.widest = 1
        for tree in trees:
            cp = np.ascontiguousarray(tree["c_ptr"], dtype=np.int64)
            lp = np.ascontiguousarray(tree["l_ptr"], dtype=np.int64)
            li = padded(tree["l_idx"], np.int32)
            gp, uf, up, ec, ev = group_weights(
                cp, lp, np.ascontiguousarray(tree["w_ptr"], dtype=np.int64),
                padded(tree["w_idx"], np.int32), padded(tree["w_val"], np.float32), d)
            v.n_nodes = cp.shape[0] - 1
            self.refs.append((cp, lp, li, gp, uf, up, ec, ev))
            v.c_ptr, v.l_ptr, v.l_idx = &cp[0], &lp[0], &li[0]
            v.g_ptr, v.u_feat, v.u_ptr, v.e_col, v.e_val = &gp[0], &uf[0], &up[0], &ec[0], &ev[0]
            self.trees.push_back(v)
            self.widest = max(self.widest, int(np.max(np.diff(cp))), int(np.max(np.diff(lp))))
        self.d = d
        self.bias = bias
        self.n_labels = n_labels
        self.loss = loss

    def predict_rows(self, X, int64_t r0, int64_t r1, int k, int beam):
        """Scores of rows r0..r1-1 of X (CSR; the points without the bias) as
        CSR pieces (indptr from 0, indices, data), labels ascending, the k
        best per row when k > 0, by beams of `beam` nodes."""
        if beam < 1:
            raise ValueError("the beam width must be at least 1")
        return self._rows(*rows_in(X, r0, r1), r0, r1, k, beam)

    def _rows(self, const indptr_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
              int64_t r0, int64_t r1, int k, int beam):
        cdef RowsOut out
        rows_open(out)
        with nogil:
            _predict(self, &xp[0], &xi[0], &xv[0], r0, r1, k, beam, out)
        return rows_pieces(out)
