# Parabel prediction: a point's row is scaled to unit length and given the
# bias feature; in each tree a beam of the `beam` best nodes descends level
# by level, a child's log-score its parent's plus its classifier's
# log-likelihood (squared hinge: -max(0, 1 - w.x)^2; logistic:
# -log(1 + e^-w.x)); every label of a leaf of the final beam scores
# exp(leaf log-score + its classifier's log-likelihood), and a label's score
# is the sum over the trees over the number of trees.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t
from libc.math cimport exp, log1p, log2, sqrt
from libcpp.vector cimport vector
from libcpp.utility cimport pair

cimport numpy as cnp

import numpy as np
from sparse_rows cimport (RowsOut, TopScratch, emit_scores, fill_vector, indptr_t,
                          lower_bound, nth_element, padded, rows_in, rows_open, rows_pieces,
                          sort)
from xmlkit._ext.parabel_groups cimport col_at
from xmlkit._ext.parabel_groups import (ChangedInUse, check_groups, check_links,
                                       lay_out_whole)

cnp.import_array()


cdef extern from "xk_portable.h":
    void XK_PREFETCH(const void* p) noexcept nogil
    void xk_heap_trim() noexcept nogil


cdef extern from "xk_wide.h":
    void xk_hinge_probs(const double* z, int64_t n, double s, float* p) noexcept nogil


ctypedef pair[pair[int32_t, int32_t], double] Visit     # ((node, row), -log-score)
ctypedef pair[int64_t, int64_t] Span                    # a range of weights
cdef struct Slot:
    # a feature's weights in the group laid out last with this stamp: from
    # `first` (an offset from the group's start), `n` of them (8 bytes: the
    # slots of every feature stay few cache lines)
    uint16_t stamp
    uint16_t n
    int32_t first
cdef struct PairSlot:
    # a feature's weights in the two-child node laid out last with this stamp:
    # its weight for each child, 0 where it has none (12 bytes: the margins of
    # a binary node read one slot an entry, not its spans of e_col and e_val)
    uint16_t stamp
    float v[2]

cdef enum:
    # a binary search step over a group's features costs about this many
    # steps of laying a feature out (a dependent read far away, against a
    # write in a row): chooses between the two
    SEARCH_COST = 8
    # a group laid out holds offsets below LAID_MAX and at most LAID_WIDTH
    # weights a feature (larger ones are searched); stamps run to STAMP_MAX,
    # then every slot is cleared once
    LAID_MAX = 1 << 30
    LAID_WIDTH = 65535
    STAMP_MAX = 65535
    # a chunk's rows give their labels from every tree back to the system
    # every TRIM_ROWS rows as they are written out (see xk_heap_trim)
    TRIM_ROWS = 64
    # a row scored through a tree's whole layout (see ParabelTree) fetches the
    # weights of its non-zero PREFETCH_AHEAD places on ahead
    PREFETCH_AHEAD = 2
    # how a group's weights are found (see _lay_out_group)
    NOT_LAID = 0
    LAID = 1
    LAID_PAIR = 2


# Which layout scores a tree faster (see _whole_pays): through its groups a
# row costs LOOKUP_COST summed weights per non-zero at each node (a slot or a
# binary search) and the weights it meets; through the whole layout, every
# weight of the tree it meets, each WHOLE_COST of one met in a group. Fitted
# so that each is chosen where it measured faster (2 cores; the shared real
# sets, beams 1 to 20); the scores are the same bits either way.
cdef double LOOKUP_COST = 0.5
cdef double WHOLE_COST = 0.45
# tests: 1 forces the whole layout where a tree has one, 0 the groups, -1
# (default) chooses by cost (the scores are the same bits either way)
cdef int whole_layout = -1


def _force_whole_layout(int mode):
    """For tests: 1 scores every tree laid out whole that way, 0 none, -1
    chooses by cost (_whole_pays). Module-wide."""
    global whole_layout
    whole_layout = mode


cdef inline bint _whole_pays(const ParabelTree* tv, int beam) noexcept nogil:
    """Whether tree tv (laid out whole) scores a beam of `beam` faster that
    way than by its groups: the groups' estimated cost, each level's nodes
    reached by a beam of at most `beam` (all of them while they are fewer),
    against WHOLE_COST x its weights; per non-zero, as a feature's weights
    spread evenly."""
    cdef int64_t i
    cdef double grouped = 0, whole = 0
    if tv.n_cls == 0 or whole_layout == 0:
        return False
    if whole_layout == 1:
        return True
    for i in range(tv.n_nodes):
        grouped += min(1.0, beam / <double> tv.level_n[i]) * (LOOKUP_COST + tv.load[i])
        whole += tv.load[i]
    return grouped >= WHOLE_COST * whole


cdef inline double _loglik(double z, int loss) noexcept nogil:
    """The log-likelihood of margin z: -max(0, 1 - z)^2 or -log(1 + e^-z)."""
    if loss == 1:
        return -log1p(exp(-z)) if z >= 0 else z - log1p(exp(z))
    return -(1 - z) * (1 - z) if z < 1 else 0.0


ctypedef fused narrow_col:
    # a classifier index of one or two bytes (see _add_span)
    uint8_t
    uint16_t


cdef inline int64_t _add_narrow(double* acc, const narrow_col* cols, const float* ev,
                                int64_t lo, int64_t hi, float x) noexcept nogil:
    """acc[col] += weight * x over the weights lo..hi-1; returns the largest
    index met (compared after the span: acc holds every index the type can)."""
    cdef int64_t e, c, top = 0
    for e in range(lo, hi):
        c = cols[e]
        top = c if c > top else top
        acc[c] += ev[e] * x
    return top


cdef inline bint _add_span(double* acc, const void* cols, int col_bytes, const float* ev,
                           int64_t lo, int64_t hi, float x, int64_t width) noexcept nogil:
    """acc[col] += weight * x over the weights lo..hi-1 (cols of col_bytes);
    False at a classifier index past `width` (the mapped file changed after
    it was checked). One- and two-byte indices are summed first and their
    largest compared after the span (acc holds 256 or 65,536 entries then:
    an index past width stays inside it); four-byte ones are checked before
    they are used."""
    cdef int64_t e, c
    cdef const int32_t* c32
    if col_bytes == 1:
        return _add_narrow(acc, <const uint8_t*> cols, ev, lo, hi, x) < width
    if col_bytes == 2:
        return _add_narrow(acc, <const uint16_t*> cols, ev, lo, hi, x) < width
    c32 = <const int32_t*> cols
    for e in range(lo, hi):
        c = c32[e]
        if c < 0 or c >= width:
            return False
        acc[c] += ev[e] * x
    return True


cdef inline bint _lay_out(const int32_t* ef, int64_t g0, int64_t g1, int64_t d,
                          uint16_t stamp, Slot* slot) noexcept nogil:
    """slot[feature] = (stamp, offset of its first weight from g0, its
    number of weights), for the features of weights g0..g1-1: written for
    every weight, backwards, each with its feature's weights up to the end
    of their run (a feature's weights are adjacent: its first one writes
    last, with the whole run; the run's end is kept by arithmetic, no branch
    on the data). A slot of another stamp is empty (nothing to clear).
    False, nothing laid out past it, at a feature outside 0..d-1."""
    cdef int64_t e, end = g1, same
    cdef int32_t f, prev = -1
    for e in range(g1 - 1, g0 - 1, -1):
        f = ef[e]
        if f < 0 or f >= d:
            return False
        same = f == prev
        end = same * end + (1 - same) * (e + 1)
        prev = f
        slot[f] = Slot(stamp, <uint16_t> (end - e), <int32_t> (e - g0))
    return True


cdef inline bint _lay_out_pair(const ParabelTree* tv, int64_t g0, int64_t g1, int64_t d,
                               uint16_t stamp, PairSlot* slot) noexcept nogil:
    """slot[feature] = (stamp, its weights for children 0 and 1, 0 where it
    has none), for the features of a two-child node's weights g0..g1-1 (a
    feature's first weight clears the pair, without a branch on the data).
    False, nothing laid out past it, at a feature outside 0..d-1 or a
    classifier past 1."""
    cdef const int32_t* ef = tv.e_feat
    cdef const float* ev = tv.e_val
    cdef int64_t e, c
    cdef int32_t f, prev = -1
    cdef bint same
    cdef float v0, v1
    cdef PairSlot* ps
    for e in range(g0, g1):
        f = ef[e]
        c = col_at(tv.e_col, tv.col_bytes, e)
        if f < 0 or f >= d or c < 0 or c > 1:
            return False
        same = f == prev
        prev = f
        ps = &slot[f]
        v0 = ps.v[0] if same else 0
        v1 = ps.v[1] if same else 0
        ps.stamp = stamp
        ps.v[0] = v0
        ps.v[1] = v1
        ps.v[c] = ev[e]
    return True


cdef inline void _pair_margins(const PairSlot* slot, uint16_t stamp, const int32_t* xi,
                               const float* sv, int64_t q0, int64_t q1, double bias,
                               int64_t d, double* acc) noexcept nogil:
    """acc[0], acc[1] = the two children's margins of a row (entries q0..q1-1)
    through a two-child node's layout: the sum over its entries in order,
    then the bias, as _add_span and the bias span give them (a child without
    a weight on a feature adds 0)."""
    cdef int64_t q
    cdef const PairSlot* ps
    cdef double a0 = 0, a1 = 0
    cdef float x
    for q in range(q0, q1):
        ps = &slot[xi[q]]
        if ps.stamp == stamp:
            x = sv[q]
            a0 += ps.v[0] * x
            a1 += ps.v[1] * x
    ps = &slot[d - 1]
    if ps.stamp == stamp:
        a0 = a0 + <double> ps.v[0] * bias
        a1 = a1 + <double> ps.v[1] * bias
    acc[0], acc[1] = a0, a1


cdef inline void _leaf_probs(const double* z, int64_t n, double s, int loss,
                             float* p) noexcept nogil:
    """p[k] = exp(-s + log-likelihood of margin z[k]) as a float, k < n: a
    leaf's label probabilities (s: the leaf's -log-score); the squared
    hinge's vectorised (xk_hinge_probs: libm's float or one unit apart)."""
    cdef int64_t k
    if loss == 0:
        xk_hinge_probs(z, n, s, p)
        return
    for k in range(n):
        p[k] = <float> exp(-s + _loglik(z[k], loss))


cdef inline bint _emit_labels(const ParabelTree* tv, int64_t first, int64_t width,
                              double s, int loss, double* acc, float* probs,
                              vector[pair[int32_t, float]]& out) except -1 nogil:
    """A leaf's labels l_idx[first .. first + width - 1] onto `out` as
    (label, its probability by _leaf_probs from its margin acc[k]), acc
    reset; probs: room for width floats. False at a label outside the
    model's (then written as 0)."""
    cdef size_t n0 = out.size()
    cdef int64_t k
    cdef int32_t lab
    cdef bint ok = True
    out.resize(n0 + width)
    _leaf_probs(acc, width, s, loss, probs)
    for k in range(width):
        lab = tv.l_idx[first + k]
        if lab < 0 or lab >= tv.n_labels:
            ok, lab = False, 0
        out[n0 + k].first = lab
        out[n0 + k].second = probs[k]
        acc[k] = 0
    return ok


cdef inline int _emit_children(int64_t first, int64_t width, double s, int loss,
                               double* acc, vector[pair[double, int32_t]]& out) except -1 nogil:
    """An internal node's children first .. first + width - 1 onto `out` as
    (-log-score: s minus its margin acc[k]'s log-likelihood, child), acc reset."""
    cdef size_t n0 = out.size()
    cdef int64_t k
    out.resize(n0 + width)
    for k in range(width):
        out[n0 + k].first = s - _loglik(acc[k], loss)
        out[n0 + k].second = <int32_t> (first + k)
        acc[k] = 0
    return 0


cdef inline int64_t _spans_met(const ParabelTree* tv, int64_t g0, int64_t g1, bint laid,
                               const Slot* slot, uint16_t stamp, const int32_t* xi,
                               const float* sv, int64_t q0, int64_t q1, Span* met,
                               float* met_v) except -1 nogil:
    """The spans of group g0..g1 that a row's entries q0..q1-1 meet, into
    met (with the entry's value): found through the layout when laid, else
    by a binary search; each fetched ahead. Returns their count."""
    cdef const int32_t* ef = tv.e_feat
    cdef const int32_t* at
    cdef int64_t q, n_met = 0
    cdef Span span
    cdef Slot s
    for q in range(q0, q1):
        if laid:
            s = slot[xi[q]]
            if s.stamp != stamp:
                continue
            span = Span(g0 + s.first, g0 + s.first + s.n)
        else:
            at = lower_bound(ef + g0, ef + g1, xi[q])
            if at == ef + g1 or at[0] != xi[q]:
                continue
            span.first = at - ef
            span.second = span.first + 1
            while span.second < g1 and ef[span.second] == xi[q]:
                span.second += 1
        XK_PREFETCH(<const char*> tv.e_col + span.first * tv.col_bytes)
        XK_PREFETCH(tv.e_val + span.first)
        met[n_met] = span
        met_v[n_met] = sv[q]
        n_met += 1
    return n_met


cdef int _lay_out_group(const ParabelTree* tv, int64_t g0, int64_t g1, int64_t d,
                        int64_t entries, bint two, vector[Slot]& slot, uint16_t* stamp,
                        vector[PairSlot]& pslot, uint16_t* pstamp) except -2 nogil:
    """How the rows reaching group g0..g1 (`entries` row entries in all) find
    its weights: NOT_LAID (a binary search each, when that costs less than a
    layout), LAID (slot: each feature's span) or LAID_PAIR (a two-child node:
    pslot holds each feature's two weights); -1 at an index out of range;
    -2: an error raised (memory). The layout gets a new stamp (the slots are
    cleared when stamps run out)."""
    cdef PairSlot empty
    if g1 - g0 >= LAID_MAX or tv.widest > LAID_WIDTH or \
            g1 - g0 >= entries * (log2(<double> (g1 - g0 + 1)) + 1) * SEARCH_COST:
        return NOT_LAID
    if two:
        if pslot.size() == 0 or pstamp[0] == STAMP_MAX:
            empty.stamp, empty.v[0], empty.v[1] = 0, 0, 0
            fill_vector(pslot, d, empty)
            pstamp[0] = 0
        pstamp[0] += 1
        return LAID_PAIR if _lay_out_pair(tv, g0, g1, d, pstamp[0], pslot.data()) else -1
    if slot.size() == 0 or stamp[0] == STAMP_MAX:
        fill_vector(slot, d, Slot(0, 0, 0))
        stamp[0] = 0
    stamp[0] += 1
    return LAID if _lay_out(tv.e_feat, g0, g1, d, stamp[0], slot.data()) else -1


cdef int _score_groups(const ParabelTree* tv, int loss, double bias, const int64_t* rp,
                       const int32_t* xi, const float* sv, vector[Visit]& visits,
                       vector[Slot]& slot, uint16_t* stamp, vector[PairSlot]& pslot,
                       uint16_t* pstamp, vector[double]& acc, float* probs,
                       vector[vector[pair[double, int32_t]]]& nxt,
                       vector[vector[pair[int32_t, float]]]& items, int64_t d,
                       Span* met, float* met_v, bint* bad) except -1 nogil:
    """Score the visits ((node, row), node's -log-score), grouped by node.
    A row's entries find their weights in the node's group (features
    ascending) either by a binary search each or, when that costs more than
    laying the group out once for all the rows that reach it, through that
    layout (slot: feature -> (stamp, its weights); made when first needed;
    each layout a new stamp, so nothing is cleared); the spans a
    row meets are fetched ahead, then summed. A laid-out two-child node
    holds each feature's two weights in its slot (pslot) instead. Each margin is the sum over
    the row's entries in order, then the bias: the same sum, to the bit, as
    a classifier row's dot product. An internal node's children go to
    nxt[row] as (-log-score, child); a leaf's labels to items[row] as
    (label, probability as a float: a chunk holds trees x beam x leaf size
    of them per row). Every index read from the tree is bounded where it is
    used (its arrays may be a mapped file, changed after they were
    checked): one out of range sets bad[0] and is not followed."""
    cdef size_t a = 0, b, c
    cdef int32_t node
    cdef int64_t g0, g1, q, e, k, m, n_met, width, row, first, entries
    cdef const int32_t* ef = tv.e_feat
    cdef Span bias_span
    cdef bint leaf, laid
    cdef int how
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
        if width < 0 or width > tv.widest or g0 < 0 or g0 > g1 or g1 > tv.n_e or \
                (first < 0 or first + width > tv.n_l if leaf else
                 first <= node or first + width > tv.n_nodes):
            bad[0] = True
            a = b
            continue
        how = _lay_out_group(tv, g0, g1, d, entries, not leaf and width == 2, slot, stamp,
                             pslot, pstamp)
        if how < 0:
            bad[0] = True
            a = b
            continue
        laid = how == LAID
        q = g1                                  # (the bias: the last feature)
        while q > g0 and ef[q - 1] == d - 1:
            q -= 1
        bias_span = Span(q, g1)
        for c in range(a, b):
            row = visits[c].first.second
            if how == LAID_PAIR:
                _pair_margins(pslot.data(), pstamp[0], xi, sv, rp[row], rp[row + 1], bias, d,
                              acc.data())
                _emit_children(first, width, visits[c].second, loss, acc.data(), nxt[row])
                continue
            n_met = _spans_met(tv, g0, g1, laid, slot.data(), stamp[0], xi, sv, rp[row],
                               rp[row + 1], met, met_v)
            for m in range(n_met):
                if not _add_span(acc.data(), tv.e_col, tv.col_bytes, tv.e_val, met[m].first,
                                 met[m].second, met_v[m], width):
                    bad[0] = True
            for e in range(bias_span.first, bias_span.second):
                k = col_at(tv.e_col, tv.col_bytes, e)
                if k < 0 or k >= width:
                    bad[0] = True
                    continue
                acc[k] = acc[k] + tv.e_val[e] * bias
            if leaf:
                if not _emit_labels(tv, first, width, visits[c].second, loss, acc.data(),
                                    probs, items[row]):
                    bad[0] = True
            else:
                _emit_children(first, width, visits[c].second, loss, acc.data(), nxt[row])
        a = b
    return 0


cdef inline int _keep_best(vector[pair[double, int32_t]]& nodes, int beam) except -1 nogil:
    """Keep the beam best (lowest -log-score) of nodes (a set: unordered)."""
    if nodes.size() > <size_t> beam:
        nth_element(nodes.begin(), nodes.begin() + beam - 1, nodes.end())
        nodes.resize(beam)
    return 0


cdef inline int _add_score(int32_t lab, float p, double* acc, unsigned char* seen,
                           vector[int32_t]& touched) except -1 nogil:
    """Add a tree's probability p of label lab to its sum (acc); its first
    marks it in seen and lists it in touched (a probability may be 0: acc
    does not tell)."""
    if not seen[lab]:
        seen[lab] = 1
        touched.push_back(lab)
    acc[lab] += p
    return 0


cdef int _search(const ParabelTree* tv, int beam, int loss, int64_t d, double bias,
                 int64_t nr, const int64_t* rp, const int32_t* xi, const float* sv,
                 vector[vector[pair[double, int32_t]]]& cur,
                 vector[vector[pair[double, int32_t]]]& nxt, vector[Visit]& visits,
                 vector[vector[pair[int32_t, float]]]& items, vector[Slot]& slot,
                 uint16_t* stamp, vector[PairSlot]& pslot, uint16_t* pstamp,
                 vector[double]& acc, float* probs, Span* met, float* met_v,
                 bint* bad) except -1 nogil:
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
        _score_groups(tv, loss, bias, rp, xi, sv, visits, slot, stamp, pslot, pstamp, acc,
                      probs, nxt, items, d, met, met_v, bad)
        for r in range(nr):
            _keep_best(nxt[r], beam)
            cur[r].swap(nxt[r])
    visits.clear()
    for r in range(nr):
        for a in range(cur[r].size()):
            visits.push_back(Visit(pair[int32_t, int32_t](cur[r][a].second, <int32_t> r),
                                   cur[r][a].first))
    _score_groups(tv, loss, bias, rp, xi, sv, visits, slot, stamp, pslot, pstamp, acc, probs,
                  nxt, items, d, met, met_v, bad)
    return 0


cdef int _row_whole(const ParabelTree* tv, int beam, int loss, int64_t d, double bias,
                    int64_t q0, int64_t q1, const int32_t* xi, const float* sv,
                    vector[pair[double, int32_t]]& cur, vector[pair[double, int32_t]]& nxt,
                    double* m, float* probs, vector[pair[int32_t, float]]* items, double* acc,
                    unsigned char* seen, vector[int32_t]* touched) except -1 nogil:
    """One row (entries q0..q1-1) through tree tv's whole feature-major
    layout: its margins at every classifier in one pass over its non-zeros
    (each the sum over the row's entries in order, then the bias: the bits of
    _score_groups' margins), then the beam over them, as _search runs it. Its
    final leaves' labels are appended to items (as _search's) or, items
    NULL, added to acc (a label's first: seen set, onto touched). Reads only
    the kernel's own arrays (no index is out of range: checked when built)."""
    cdef const int64_t* cp = tv.own_c_ptr
    cdef const int64_t* lp = tv.own_l_ptr
    cdef const int64_t* c0 = tv.cls0
    cdef const int64_t* fp = tv.f_ptr
    cdef const uint16_t* fc = tv.f_cls
    cdef const float* fv = tv.f_val
    cdef int64_t q, e, k, f, n
    cdef int32_t node
    cdef size_t a
    cdef const int32_t* li
    cdef float x
    cdef double s
    cdef bint inner
    for k in range(tv.n_cls):
        m[k] = 0
    for q in range(q0, q1):
        if q + PREFETCH_AHEAD < q1:             # (a run's start: far in memory)
            e = fp[xi[q + PREFETCH_AHEAD]]
            XK_PREFETCH(fc + e)
            XK_PREFETCH(fv + e)
        f, x = xi[q], sv[q]
        for e in range(fp[f], fp[f + 1]):
            m[fc[e]] += fv[e] * x
    for e in range(fp[d - 1], fp[d]):
        m[fc[e]] = m[fc[e]] + fv[e] * bias
    cur.clear()
    cur.push_back(pair[double, int32_t](0.0, 0))
    while True:
        nxt.clear()
        inner = False
        for a in range(cur.size()):
            node, s = cur[a].second, cur[a].first
            if cp[node] == cp[node + 1]:
                nxt.push_back(cur[a])
                continue
            inner = True
            for k in range(cp[node + 1] - cp[node]):
                nxt.push_back(pair[double, int32_t](s - _loglik(m[c0[node] + k], loss),
                                                    <int32_t> (cp[node] + k)))
        if not inner:
            break
        _keep_best(nxt, beam)
        cur.swap(nxt)
    for a in range(cur.size()):
        node, s = cur[a].second, cur[a].first
        n = lp[node + 1] - lp[node]
        li = tv.own_l_idx + lp[node]
        _leaf_probs(m + c0[node], n, s, loss, probs)
        for k in range(n):
            if items != NULL:
                items.push_back(pair[int32_t, float](li[k], probs[k]))
            else:
                _add_score(li[k], probs[k], acc, seen, touched[0])
    return 0


cdef int _write_row(double* acc, unsigned char* seen, vector[int32_t]& touched, int n_trees,
                    int topk, int64_t n_labels, vector[float]& vals, TopScratch& top,
                    RowsOut& out) except -1 nogil:
    """Write a row whose labels (touched; seen set) sum their scores over
    the trees in acc: their means, the topk best (every one when topk <= 0)
    in ascending label order; acc and seen cleared. The labels are put in
    order first, by a sort or by reading every flag (whichever costs less),
    unless only a few of many are written (then the kept ones are sorted)."""
    cdef size_t a, n = touched.size()
    cdef int32_t lab
    cdef bint ordered = True
    if 0 < topk < <int64_t> n and 4 * <int64_t> n < n_labels:
        ordered = False
    elif 4 * n * log2(n + 1.0) > n_labels:
        touched.resize(n_labels)
        n = 0
        for lab in range(n_labels):   # (no branch on the flags)
            touched[n] = lab
            n += seen[lab]
        touched.resize(n)
    else:
        sort(touched.begin(), touched.end())
    vals.resize(n)
    for a in range(n):
        lab = touched[a]
        vals[a] = <float> (acc[lab] / n_trees)
        acc[lab] = 0
        seen[lab] = 0
    emit_scores(touched.data(), vals.data(), n, topk, ordered, top, out)
    return 0


cdef bint _predict(ParabelKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                   int64_t r0, int64_t r1, int topk, int beam, RowsOut& out) except * nogil:
    """ParabelKernel.predict_rows without the GIL: the rows' unit values,
    each tree's search over the chunk, then each row's labels summed over
    the trees (in tree order) and written; when every tree is scored whole,
    row by row, each through the trees in order, its labels summed as they
    come (the same sums). False when a tree's index was out of range (see
    _score_groups): the rows' scores are not to be used."""
    cdef int64_t d = f.d, nr = r1 - r0, r, q, base = xp[r0]
    cdef bint bad = False
    cdef int n_trees = <int> f.trees.size()
    cdef int t
    cdef vector[int64_t] rp
    cdef vector[float] sv
    cdef vector[Slot] slot
    cdef vector[Span] met
    cdef vector[PairSlot] pslot
    cdef uint16_t stamp = 0, pstamp = 0
    cdef vector[float] met_v
    cdef vector[double] acc, margins, whole_m
    cdef vector[float] probs
    cdef vector[pair[double, int32_t]] whole_cur, whole_nxt
    cdef vector[int32_t] touched
    cdef vector[unsigned char] seen
    cdef vector[vector[pair[double, int32_t]]] cur, nxt
    cdef vector[vector[pair[int32_t, float]]] items
    cdef vector[Visit] visits
    cdef vector[float] vals
    cdef TopScratch top
    cdef size_t a
    cdef double norm
    cdef vector[unsigned char] whole_t    # tree t scored through its whole layout
    cdef bint whole = True
    acc.resize(f.n_labels, 0.0)
    margins.resize(max(f.widest, f.col_room), 0.0)   # (see _add_span)
    probs.resize(f.widest)
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
    for t in range(n_trees):
        whole_t.push_back(_whole_pays(&f.trees[t], beam))
        whole = whole and whole_t[t]
    for r in range(0 if whole else nr):   # (room for every label the final beams reach)
        items[r].reserve(n_trees * min(<int64_t> beam * f.widest, f.n_labels))
    for r in range(nr):
        norm = 0
        for q in range(rp[r], rp[r + 1]):
            norm += <double> xv[base + q] * xv[base + q]
        norm = sqrt(norm) if norm > 0 else 1.0
        for q in range(rp[r], rp[r + 1]):
            sv[q] = <float> (xv[base + q] / norm)
    seen.resize(f.n_labels, 0)
    if whole:                         # (row by row: each row's labels summed as scored)
        whole_m.resize(f.whole_cls)
        for r in range(nr):
            touched.clear()
            for t in range(n_trees):
                _row_whole(&f.trees[t], beam, f.loss, d, f.bias, rp[r], rp[r + 1], xi + base,
                           sv.data(), whole_cur, whole_nxt, whole_m.data(), probs.data(), NULL,
                           acc.data(), seen.data(), &touched)
            _write_row(acc.data(), seen.data(), touched, n_trees, topk, f.n_labels, vals,
                       top, out)
        return True
    for t in range(n_trees):
        if whole_t[t]:
            whole_m.resize(f.whole_cls)
            for r in range(nr):
                _row_whole(&f.trees[t], beam, f.loss, d, f.bias, rp[r], rp[r + 1], xi + base,
                           sv.data(), whole_cur, whole_nxt, whole_m.data(), probs.data(),
                           &items[r], NULL, NULL, NULL)
            continue
        _search(&f.trees[t], beam, f.loss, d, f.bias, nr, rp.data(), xi + base, sv.data(),
                cur, nxt, visits, items, slot, &stamp, pslot, &pstamp, margins, probs.data(),
                met.data(), met_v.data(), &bad)
    if bad:
        return False
    for r in range(nr):
        touched.clear()
        for a in range(items[r].size()):
            _add_score(items[r][a].first, items[r][a].second, acc.data(), seen.data(), touched)
        items[r].clear()            # (the row's entries go as its output comes:
        items[r].shrink_to_fit()    # a chunk's scores are not held twice)
        if r % TRIM_ROWS == TRIM_ROWS - 1:
            xk_heap_trim()
        _write_row(acc.data(), seen.data(), touched, n_trees, topk, f.n_labels, vals, top,
                   out)
    return True


cdef class ParabelKernel:
    """A Parabel forest: each tree's links and classifier groups read where
    they lie (a tree's dict of arrays: in memory, or views of its mapped
    file), checked when built, and the beam search of points through it.
    Read-only once built. Members: see parabel_predict.pxd."""

    def __init__(self, trees, int64_t d, double bias, int64_t n_labels, int loss,
                 bint checked=False):
        """trees: dicts of c_ptr, l_ptr, l_idx and the groups g_ptr, e_feat,
        e_col, e_val (see xmlkit.models.parabel), checked here (ValueError)
        before any is read; checked: their groups passed check_groups already
        (xmlkit.models.parabel.check_tree, as their files were read), so that
        pass is not made twice. Either way the search bounds every index it
        reads where it reads it."""
        cdef ParabelTree v
        cdef const int64_t[::1] cp, lp, gp
        cdef const int32_t[::1] li, ef
        cdef const float[::1] ev
        cdef cnp.ndarray ec
        if not trees:
            raise ValueError("no trees")
        self.refs = []
        self.widest = 1
        for tree in trees:
            cp = np.ascontiguousarray(tree["c_ptr"], dtype=np.int64)
            lp = np.ascontiguousarray(tree["l_ptr"], dtype=np.int64)
            li = padded(tree["l_idx"], np.int32)
            gp = np.ascontiguousarray(tree["g_ptr"], dtype=np.int64)
            ef = np.ascontiguousarray(tree["e_feat"], dtype=np.int32)
            ec = np.ascontiguousarray(tree["e_col"])
            ev = np.ascontiguousarray(tree["e_val"], dtype=np.float32)
            check_links(np.asarray(cp), np.asarray(lp), tree["l_idx"], n_labels)
            fault = None if checked else check_groups(cp, lp, gp, ef, ec, ev, d)
            if fault:
                raise ValueError(fault)
            ef, ev = padded(ef, np.int32), padded(ev, np.float32)
            ec = padded(ec, ec.dtype)
            v.n_nodes = cp.shape[0] - 1
            self.refs.append((cp, lp, li, gp, ef, ec, ev))
            v.c_ptr, v.l_ptr, v.l_idx = &cp[0], &lp[0], &li[0]
            v.g_ptr, v.e_feat, v.e_val = &gp[0], &ef[0], &ev[0]
            v.e_col, v.col_bytes = cnp.PyArray_DATA(ec), ec.dtype.itemsize
            v.n_e, v.n_l = tree["e_val"].shape[0], len(tree["l_idx"])
            v.n_labels = n_labels
            self._lay_out_whole(v, tree, d)
            self.trees.push_back(v)
            self.widest = max(self.widest, int(np.max(np.diff(cp))), int(np.max(np.diff(lp))))
        self.col_room, self.whole_cls = 0, 0
        for t in range(self.trees.size()):
            self.whole_cls = max(self.whole_cls, self.trees[t].n_cls)
            self.trees[t].widest = self.widest
            if self.trees[t].col_bytes < 4:
                self.col_room = max(self.col_room, 1 << (8 * self.trees[t].col_bytes))
        self.d = d
        self.bias = bias
        self.n_labels = n_labels
        self.loss = loss

    cdef _lay_out_whole(self, ParabelTree& v, tree, int64_t d):
        """Tree v laid out whole too (see ParabelTree) when it is small enough
        (parabel_groups.lay_out_whole: its own copies of the links, checked);
        else v.n_cls 0. ValueError when its arrays changed after they were
        checked."""
        cdef const int64_t[::1] cp, lp, cls0, f_ptr, level_n
        cdef const int32_t[::1] li
        cdef const double[::1] load
        cdef const uint16_t[::1] f_cls
        cdef const float[::1] f_val
        v.n_cls = 0
        whole = lay_out_whole(tree, d, v.n_labels)
        if whole is None:
            return
        self.refs.append(whole)
        cp, lp, li, level_n, load, cls0, f_ptr, f_cls, f_val = whole
        v.own_c_ptr, v.own_l_ptr, v.own_l_idx = &cp[0], &lp[0], &li[0]
        v.level_n, v.load = &level_n[0], &load[0]
        v.cls0, v.f_ptr, v.f_cls, v.f_val = &cls0[0], &f_ptr[0], &f_cls[0], &f_val[0]
        v.n_cls = cls0.shape[0] and cls0[cls0.shape[0] - 1]

    def whole_trees(self):
        """Whether each tree is laid out whole too (see ParabelTree)."""
        return [self.trees[t].n_cls > 0 for t in range(self.trees.size())]

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
        cdef bint whole
        rows_open(out)
        with nogil:
            whole = _predict(self, &xp[0], &xi[0], &xv[0], r0, r1, k, beam, out)
        if not whole:
            raise ChangedInUse()
        return rows_pieces(out)
