# Parabel prediction: a point's row is scaled to unit length and given the
# bias feature; in each tree a beam of the `beam` best nodes descends level
# by level, a child's log-score its parent's plus its classifier's
# log-likelihood (squared hinge: -max(0, 1 - w.x)^2; logistic:
# -log(1 + e^-w.x)); every label of a leaf of the final beam scores
# exp(leaf log-score + its classifier's log-likelihood), and a label's score
# is the sum over the trees over the number of trees.

from libc.stdint cimport int32_t, int64_t
from libc.math cimport exp, log1p, sqrt
from libcpp.vector cimport vector
from libcpp.utility cimport pair
from libcpp.algorithm cimport partial_sort, sort

cimport numpy as cnp

import numpy as np
from sparse_rows cimport RowsOut, emit_top, indptr_t, padded, rows_in, rows_open, rows_pieces

cnp.import_array()


ctypedef pair[pair[int32_t, int32_t], double] Visit     # ((node, row), -log-score)


cdef inline double _loglik(double z, int loss) noexcept nogil:
    """The log-likelihood of margin z: -max(0, 1 - z)^2 or -log(1 + e^-z)."""
    if loss == 1:
        return -log1p(exp(-z)) if z >= 0 else z - log1p(exp(z))
    return -(1 - z) * (1 - z) if z < 1 else 0.0


cdef inline const float* _open_row(const ParabelTree* tv, int64_t row, int64_t d,
                                   vector[float]& wd) noexcept nogil:
    """Classifier row `row` as a dense row of d floats: its dense copy, else
    scattered into wd (zero it again with _close_row)."""
    cdef int64_t q, dr = tv.dense_id[row]
    if dr >= 0:
        return tv.dense + dr * d
    for q in range(tv.w_ptr[row], tv.w_ptr[row + 1]):
        wd[tv.w_idx[q]] = tv.w_val[q]
    return wd.data()


cdef inline void _close_row(const ParabelTree* tv, int64_t row,
                            vector[float]& wd) noexcept nogil:
    cdef int64_t q
    if tv.dense_id[row] < 0:
        for q in range(tv.w_ptr[row], tv.w_ptr[row + 1]):
            wd[tv.w_idx[q]] = 0


cdef inline double _margin(const float* w, int64_t d, double bias, const int64_t* rp,
                           const int32_t* xi, const float* sv, int64_t r) noexcept nogil:
    """w.x of a dense classifier row and chunk row r (unit values sv, the
    bias last): summed over the row's entries in order, whatever the chunk."""
    cdef int64_t q
    cdef double z = 0
    for q in range(rp[r], rp[r + 1]):
        z += w[xi[q]] * sv[q]
    return z + w[d - 1] * bias


cdef void _expand(const ParabelTree* tv, int loss, int64_t d, double bias, const int64_t* rp,
                  const int32_t* xi, const float* sv, vector[Visit]& visits,
                  vector[vector[pair[double, int32_t]]]& nxt, vector[float]& wd) noexcept nogil:
    """Score the visits ((child, row), parent's -log-score), grouped by node
    so that a classifier row is made dense once for all its rows; each row's
    candidates go to nxt[row] as (-log-score, node)."""
    cdef size_t a = 0, b
    cdef int32_t node
    cdef const float* w
    sort(visits.begin(), visits.end())
    while a < visits.size():
        node = visits[a].first.first
        w = _open_row(tv, node, d, wd)
        b = a
        while b < visits.size() and visits[b].first.first == node:
            nxt[visits[b].first.second].push_back(pair[double, int32_t](
                visits[b].second - _loglik(_margin(w, d, bias, rp, xi, sv,
                                                   visits[b].first.second), loss), node))
            b += 1
        _close_row(tv, node, wd)
        a = b


cdef void _leaves(const ParabelTree* tv, int loss, int64_t d, double bias, const int64_t* rp,
                  const int32_t* xi, const float* sv, vector[Visit]& visits,
                  vector[vector[pair[int32_t, double]]]& items, vector[float]& wd) noexcept nogil:
    """The labels of the visited leaves ((leaf, row), leaf's -log-score):
    items[row] gets (label, probability) for each, leaf by leaf."""
    cdef size_t a = 0, b, c
    cdef int32_t leaf
    cdef int64_t e, row
    cdef const float* w
    sort(visits.begin(), visits.end())
    while a < visits.size():
        leaf = visits[a].first.first
        b = a
        while b < visits.size() and visits[b].first.first == leaf:
            b += 1
        for e in range(tv.l_ptr[leaf], tv.l_ptr[leaf + 1]):
            row = tv.n_nodes + e
            w = _open_row(tv, row, d, wd)
            for c in range(a, b):
                items[visits[c].first.second].push_back(pair[int32_t, double](
                    tv.l_idx[e], exp(-visits[c].second + _loglik(
                        _margin(w, d, bias, rp, xi, sv, visits[c].first.second), loss))))
            _close_row(tv, row, wd)
        a = b


cdef void _search(const ParabelTree* tv, int beam, int loss, int64_t d, double bias,
                  int64_t nr, const int64_t* rp, const int32_t* xi, const float* sv,
                  vector[vector[pair[double, int32_t]]]& cur,
                  vector[vector[pair[double, int32_t]]]& nxt, vector[Visit]& visits,
                  vector[vector[pair[int32_t, double]]]& items, vector[float]& wd) noexcept nogil:
    """Tree tv's beam search for the nr rows of a chunk, level by level; the
    labels of each row's final leaves appended to items[row]."""
    cdef int64_t r
    cdef size_t a
    cdef int32_t node, c
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
                for c in range(tv.c_ptr[node], tv.c_ptr[node + 1]):
                    visits.push_back(Visit(pair[int32_t, int32_t](c, <int32_t> r),
                                           cur[r][a].first))
        if visits.size() == 0:
            break
        _expand(tv, loss, d, bias, rp, xi, sv, visits, nxt, wd)
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
    _leaves(tv, loss, d, bias, rp, xi, sv, visits, items, wd)


cdef void _predict(ParabelKernel f, const indptr_t* xp, const int32_t* xi, const float* xv,
                   int64_t r0, int64_t r1, int topk, int beam, RowsOut& out) except + nogil:
    """ParabelKernel.predict_rows without the GIL: the rows' unit values,
    each tree's search over the chunk, then each row's labels summed over
    the trees (in tree order) and written."""
    cdef int64_t d = f.d, nr = r1 - r0, r, q, base = xp[r0]
    cdef int n_trees = <int> f.trees.size()
    cdef int t
    cdef vector[int64_t] rp
    cdef vector[float] sv, wd
    cdef vector[double] acc
    cdef vector[int32_t] touched
    cdef vector[vector[pair[double, int32_t]]] cur, nxt
    cdef vector[vector[pair[int32_t, double]]] items
    cdef vector[Visit] visits
    cdef vector[pair[double, int32_t]] ranked
    cdef vector[pair[int32_t, float]] sel
    cdef size_t a
    cdef int32_t lab
    cdef double norm
    wd.resize(d, 0.0)
    acc.resize(f.n_labels, 0.0)
    cur.resize(nr)
    nxt.resize(nr)
    items.resize(nr)
    sv.resize(xp[r1] - base + 1)
    for r in range(nr + 1):
        rp.push_back(xp[r0 + r] - base)
    for r in range(nr):
        norm = 0
        for q in range(rp[r], rp[r + 1]):
            norm += <double> xv[base + q] * xv[base + q]
        norm = sqrt(norm) if norm > 0 else 1.0
        for q in range(rp[r], rp[r + 1]):
            sv[q] = <float> (xv[base + q] / norm)
    for t in range(n_trees):
        _search(&f.trees[t], beam, f.loss, d, f.bias, nr, rp.data(), xi + base, sv.data(),
                cur, nxt, visits, items, wd)
    for r in range(nr):
        touched.clear()
        for a in range(items[r].size()):
            lab = items[r][a].first
            if acc[lab] == 0:
                touched.push_back(lab)
            acc[lab] += items[r][a].second
        ranked.clear()
        for a in range(touched.size()):
            lab = touched[a]
            ranked.push_back(pair[double, int32_t](-<double> (<float> (acc[lab] / n_trees)), lab))
            acc[lab] = 0
        emit_top(ranked, topk, sel, out)


cdef class ParabelKernel:
    """A Parabel forest: each tree's arrays read where they lie (a tree's
    dict of arrays: in memory, or views of its mapped file, checked), with
    dense copies of its long classifier rows, and the beam search of points
    through it. Read-only once built. Members: see parabel_predict.pxd."""

    def __init__(self, trees, int64_t d, double bias, int64_t n_labels, int loss):
        """trees: dicts of c_ptr, l_ptr, l_idx, w_ptr, w_idx, w_val (see
        xmlkit.models.parabel) and dense_id, dense (csr.dense_rows)."""
        cdef ParabelTree v
        cdef const int64_t[::1] cp, lp, wp, di
        cdef const int32_t[::1] li, wi
        cdef const float[::1] wv
        cdef const float[:, ::1] dense
        if not trees:
            raise ValueError("no trees")
        self.refs = []
        for tree in trees:
            cp = np.ascontiguousarray(tree["c_ptr"], dtype=np.int64)
            lp = np.ascontiguousarray(tree["l_ptr"], dtype=np.int64)
            wp = np.ascontiguousarray(tree["w_ptr"], dtype=np.int64)
            li = padded(tree["l_idx"], np.int32)
            wi, wv = padded(tree["w_idx"], np.int32), padded(tree["w_val"], np.float32)
            di = padded(tree["dense_id"], np.int64)
            dense = np.ascontiguousarray(tree["dense"], dtype=np.float32).reshape(-1, d) \
                if np.size(tree["dense"]) else np.zeros((1, d), np.float32)
            v.n_nodes = cp.shape[0] - 1
            if v.n_nodes < 1 or lp.shape[0] != cp.shape[0] \
                    or wp.shape[0] != v.n_nodes + lp[v.n_nodes] + 1 \
                    or di.shape[0] < wp.shape[0] - 1:
                raise ValueError("a tree's arrays disagree in length")
            self.refs.append((cp, lp, wp, li, wi, wv, di, dense))
            v.c_ptr, v.l_ptr, v.l_idx = &cp[0], &lp[0], &li[0]
            v.w_ptr, v.w_idx, v.w_val = &wp[0], &wi[0], &wv[0]
            v.dense_id, v.dense = &di[0], &dense[0, 0]
            self.trees.push_back(v)
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
