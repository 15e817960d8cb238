# FastXML tree growth: nDCG-optimising splits, each separated by a
# class-balanced L1-regularised logistic regression. The builder, as
# scikit-learn's trees split Builder, Criterion and Splitter:
#   TreeGrower     (here) the points of each node, the node queue, leaves,
#                  the tree's arrays;
#   NdcgPartition  (fastxml_partition) the criterion: splits a node's points
#                  in two;
#   NodeSeparator  (fastxml_separator) the splitter: the hyperplane between
#                  the two sides, by SeparatorSolver (fastxml_solver) or
#                  liblinear.
# The growers of one fit (one per thread) share a LargeNodeGate and a Crew
# (here). State: fastxml_tree.pxd.
#
# A tree is grown in one nogil call. Nodes are numbered as the C++ tool does:
# root 0; when node i splits, its positive child gets the next index, then its
# negative child; nodes are processed in index order.

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair

import numpy as np
cimport numpy as cnp

from sparse_rows cimport array_copy, mt19937, partial_sort, sort, tree_seed
from xmlkit._ext.fastxml_common cimport _give_back, LARGE_NODE
from xmlkit._ext.fastxml_solver cimport SeparatorSolver, xk_col
from xmlkit._ext.fastxml_partition cimport NdcgPartition
from xmlkit._ext.fastxml_separator cimport NodeSeparator, ll_node

cnp.import_array()


ctypedef fused _TreeVector:
    vector[int32_t]
    vector[int64_t]
    vector[float]


cdef object _take(_TreeVector& v, int typenum):
    """v's entries as a new numpy array of type `typenum`; v's memory is given
    back at once (a tree's vectors are then held once, not twice)."""
    out = array_copy(v.data(), v.size(), typenum)
    _give_back(v, 0)
    return out


cdef class LargeNodeGate:
    """Lets the growers of one fit separate large nodes at once only while
    those nodes hold at most `slots` times the training points between
    them. A node is large when it holds more than a quarter of the training
    points and more than LARGE_NODE points: in practice the roots on sets
    of more than 32768 points, and their children (about half the points
    each) on sets of more than about 65536; no node on smaller sets. A
    large node's separator holds a copy of its points' entries of X (the
    node's columns: X's size at the root) and per-point and per-feature
    work space, and gives them back when done: its memory follows its
    points. So at one slot a root is separated without another large node,
    two children of roots (half the points each) together. The roots of a
    fit's trees are alike (all the points, in order): the roots separated
    at once share one copy of their columns, built by the first of them
    (SeparatorSolver.fill, then lend; the others borrow it), and it counts
    once. (The threads' trees start together: without the gate, their
    roots' copies would be most of the training peak.) A
    grower waits only before a large node's separator (its partition runs
    before), and trees stay the same: the gate orders work and shares
    columns, it does not change them. `min_points` (tests) replaces the
    threshold; `keep_root` (tests) keeps the roots' copy, and the points it
    holds, once built: every later root borrows it."""

    def __init__(self, int64_t n_points, long slots=1, min_points=None, bint keep_root=False):
        if slots < 1:
            raise ValueError("a gate needs a slot")
        self.n_points = n_points
        self.slots.keep_root = keep_root
        self.slots.budget = slots * max(n_points, 1)
        self.min_points = (max(LARGE_NODE, n_points // 4) if min_points is None
                           else min_points)

    @property
    def most_at_once(self):
        """The most separators that ever passed the gate at once."""
        return self.slots.most_count

    @property
    def most_points(self):
        """The most points that the separators past the gate held at once
        (a shared root copy counted once): at most `slots` times the
        training points."""
        return self.slots.most_held

    @property
    def roots_shared(self):
        """Roots separated on a copy of their columns that another root's
        separator built."""
        return self.slots.root_shared


cdef inline bint _labelled(const int32_t* pts, int64_t n, const int64_t* yp) noexcept nogil:
    """Whether any of the points pts[0:n] has a label."""
    cdef int64_t a
    for a in range(n):
        if yp[pts[a] + 1] > yp[pts[a]]:
            return True
    return False


#: random numbers a separator (xmlkit's solver: SeparatorSolver.solve) draws
#: from the tree's stream
cdef int64_t SEP_DRAWS = 2


cdef class Crew:
    """The growers of one fit, as a crew: a grower growing a tree opens each
    level of two or more nodes to the others, and a grower without a tree
    of its own (help()) grows nodes of the open levels until the trees the
    crew expects are done. Threads that would idle (fewer trees left than
    threads) so work on the trees still growing; the trees are the same
    however their nodes were shared out (see TreeGrower._grow)."""

    def __init__(self, long trees=0):
        # (the helpers wait until `trees` grow() calls have ended)
        self.c.expect(trees)

    def stop(self):
        """Let the helpers go now (their current node is finished first)."""
        with nogil:
            self.c.stop()

    @property
    def helped(self):
        """Nodes grown by helpers so far."""
        return self.c.helped


cdef class TreeGrower:
    """Grows FastXML trees on one training set: nodes are split by
    `criterion` (an NdcgPartition) and `separator` (a NodeSeparator) until
    they hold at most max_leaf points; a leaf keeps the labels_per_leaf
    largest means of its points' label values.

    X and Y are CSR matrices (anything with indptr, indices, data and shape;
    X without the bias feature, which the separator appends). Label values
    are used as they are (1 for plain data; PfastreXML passes
    propensity-weighted values). The grower, criterion and separator hold
    state: one set per thread. The growers of one fit may share a
    LargeNodeGate and a Crew (then help() grows nodes of the others' trees;
    with plan_splits False, tests, levels opened to the crew are planned as
    if no node were split, so that nodes are grown again from corrected
    places). Members: see fastxml_tree.pxd.
    """

    def __init__(self, X, Y, NdcgPartition criterion, NodeSeparator separator, *,
                 int max_leaf=10, int labels_per_leaf=10, LargeNodeGate gate=None,
                 Crew crew=None, bint plan_splits=True):
        cdef int64_t n_features = X.shape[1]
        xp = np.ascontiguousarray(X.indptr, dtype=np.int64)
        if xp.shape[0] < 1:
            raise ValueError("X has no index pointer")
        self.yp = np.ascontiguousarray(Y.indptr, dtype=np.int64)
        self.yi = np.ascontiguousarray(Y.indices, dtype=np.int32)
        self.yv = np.ascontiguousarray(Y.data, dtype=np.float32)
        self.n_points = xp.shape[0] - 1
        if self.yp.shape[0] - 1 != self.n_points:
            raise ValueError("X and Y have different numbers of rows")
        self.n_labels = Y.shape[1]
        self.max_leaf = max_leaf
        self.labels_per_leaf = labels_per_leaf
        self.criterion = criterion
        self.separator = separator
        self.gate = gate
        self.crew = crew
        if crew is not None and separator.use_liblinear:
            raise ValueError("liblinear separators draw from the C library's generator: "
                             "they cannot be grown by a crew")
        self.plan_splits = plan_splits
        self.rng_board = NULL
        criterion.reset(self.n_labels)
        separator.reset(xp, np.ascontiguousarray(X.indices, dtype=np.int32),
                        np.ascontiguousarray(X.data, dtype=np.float32), n_features)
        self.acc.resize(self.n_labels, 0.0)
        self.seen.resize(self.n_labels, 0)

    def held_bytes(self):
        """Bytes of memory the grower's vectors hold (their capacities), with
        its criterion's, separator's and solver's: between trees, scratch
        sized for the last nodes, not for the root (tests)."""
        cdef NdcgPartition c = self.criterion
        cdef NodeSeparator sep = self.separator
        cdef SeparatorSolver s = sep.solver
        return int(
            self.child.capacity() * 4 + self.depth.capacity() * 4 + self.start.capacity() * 8
            + self.stop.capacity() * 8 + self.w_ptr.capacity() * 8 + self.l_ptr.capacity() * 8
            + self.w_idx.capacity() * 4 + self.l_idx.capacity() * 4
            + self.w_val.capacity() * 4 + self.l_val.capacity() * 4
            + self.pts.capacity() * 4 + self.tmp_pts.capacity() * 4 + self.sign.capacity()
            + self.acc.capacity() * 8 + self.seen.capacity() + self.act_l.capacity() * 4
            + self.order.capacity() * 16 + self.side.capacity()
            + (self.lv_off.capacity() + self.lv_draws.capacity() + self.lv_plan.capacity()
               + self.lv_wend.capacity() + self.lv_lend.capacity()) * 8
            + self.lv_split.capacity()
            + c.lmap.capacity() * 4 + c.act_l.capacity() * 4 + c.gbuf.capacity() * 4
            + c.ly_ptr.capacity() * 8
            + c.ly_idx.capacity() * 4 + c.ly_val.capacity() * 4 + c.inorm.capacity() * 8
            + (c.sp.capacity() + c.sn.capacity() + c.spo.capacity() + c.sno.capacity()
               + c.gain.capacity()) * 8
            + (c.rp.capacity() + c.rn.capacity() + c.op.capacity() + c.on.capacity()
               + c.merged.capacity()) * 4
            + (c.keys.capacity() + c.keys_tmp.capacity()) * 8 + c.order.capacity() * 16
            + sep.fmap.capacity() * 4 + sep.act_f.capacity() * 4 + sep.gbuf.capacity() * 4
            + sep.lcount.capacity() * 8 + s.acc.capacity() * sizeof(xk_col)
            + sep.wvec.capacity() * 8 + sep.wsel.capacity() * 8
            + sep.xbuf.capacity() * sizeof(ll_node) + sep.xrows.capacity() * 8
            + sep.yvec.capacity() * 8
            + s.col_ptr.capacity() * 8 + s.col_pt.capacity() * 4 + s.col_val.capacity() * 4
            + s.y.capacity() + s.cw.capacity() * 8 + s.index.capacity() * 4
            + (s.w.capacity() + s.u.capacity() + s.r.capacity() + s.D.capacity()
               + s.lossv.capacity() + s.tq.capacity() + s.tsp.capacity() + s.wpd.capacity()
               + s.xTd.capacity() + s.grad.capacity() + s.grad0.capacity() + s.hdiag0.capacity()
               + s.hdiag.capacity()) * 8)

    def solver_work(self):
        """What xmlkit's separator solver did since this grower was made:
        {"solves", "newtons" (iterations), "visits" (entries of the node
        problems visited by gradient, Hessian and coordinate passes)}."""
        cdef SeparatorSolver s = self.separator.solver
        return {"solves": s.solves, "newtons": s.newtons, "visits": s.visits}

    def grow(self, uint64_t seed, uint64_t tree):
        """Grow tree number `tree`; returns its arrays (see xmlkit.models.forest)."""
        try:
            with nogil:
                self._grow(tree_seed(seed, tree))
        finally:
            if self.crew is not None:
                self.crew.c.tree_done()
        # (one vector copied and freed after the other: the tree is held once)
        return {"child": _take(self.child, cnp.NPY_INT32).reshape(-1, 2),
                "depth": _take(self.depth, cnp.NPY_INT32),
                "w_ptr": _take(self.w_ptr, cnp.NPY_INT64),
                "w_idx": _take(self.w_idx, cnp.NPY_INT32),
                "w_val": _take(self.w_val, cnp.NPY_FLOAT32),
                "l_ptr": _take(self.l_ptr, cnp.NPY_INT64),
                "l_idx": _take(self.l_idx, cnp.NPY_INT32),
                "l_val": _take(self.l_val, cnp.NPY_FLOAT32)}

    def help(self):
        """Grow nodes of the trees the other growers of this grower's crew
        are growing, until none of the trees the crew expects is left (or
        the crew is stopped): what a thread without a tree of its own does."""
        cdef void* b
        cdef long i
        if self.crew is None:
            raise ValueError("a grower without a crew has no one to help")
        with nogil:
            while self.crew.c.claim(&b, &i):
                try:
                    self._slot_task(<const xk_board*> b, i)
                finally:
                    self.crew.c.done(b)

    cdef void _grow(self, uint32_t seed) except * nogil:
        """The tree of random stream `seed`, level by level. A level's nodes
        are independent (disjoint points, and node i of the level draws its
        random numbers from a known place in the tree's stream), so any
        grower of the crew may grow any of them; the tree is the one that
        growing the nodes one after the other in breadth-first order makes."""
        cdef int64_t i, total
        self.rng_base.seed(seed)
        self.board.base = 0
        self.board.gen += 1     # (never reset: levels of two trees are told apart)
        self.child.clear(); self.depth.clear(); self.start.clear(); self.stop.clear()
        self.w_ptr.clear(); self.w_idx.clear(); self.w_val.clear()
        self.l_ptr.clear(); self.l_idx.clear(); self.l_val.clear()
        self.w_ptr.push_back(0)
        self.l_ptr.push_back(0)
        self.pts.resize(self.n_points)
        for i in range(self.n_points):
            self.pts[i] = <int32_t> i
        self.side.resize(self.n_points)
        self._add_node(0, self.n_points, 0)
        self.board.first = 0
        while self.board.first < <int64_t> self.depth.size():
            self._run_level()
            total = 0
            for i in range(self.board.n_nodes):
                total += self.lv_draws[i]
            self._commit_level()
            if (self.rng_board == &self.board and self.rng_gen == self.board.gen
                    and self.rng_pos == self.board.base + total):
                self.rng_base = self.rng        # (5 kB, against a draw per point)
            else:
                self.rng_base.discard(total)
            self.board.base += total
            self.board.first += self.board.n_nodes
            self.board.gen += 1
        # (the level tables hold one level's results: given back with the tree)
        self.lv_wi.clear(); self.lv_wi.shrink_to_fit()
        self.lv_wv.clear(); self.lv_wv.shrink_to_fit()
        self.lv_li.clear(); self.lv_li.shrink_to_fit()
        self.lv_lv.clear(); self.lv_lv.shrink_to_fit()

    cdef int _run_level(self) except -1 nogil:
        """Grow the nodes board.first .. depth.size() - 1 (one level).

        Alone, the grower grows them one after the other, each drawing its
        random numbers where the one before it stopped. When the crew has a
        helper waiting, the level is opened to the crew: each node's place
        in the random stream is then planned from the nodes before it, as if
        each node of more than max_leaf points with labels were split (its
        partition draws a number per point, its separator SEP_DRAWS). A
        node whose partition leaves a side empty draws fewer: the nodes
        after it are grown again from their corrected places (rare: a
        side is seldom empty)."""
        cdef int64_t n = <int64_t> self.depth.size() - self.board.first
        cdef int64_t i, k, o, node
        self.board.n_nodes = n
        self.lv_off.resize(n)
        self.lv_draws.resize(n)
        self.lv_split.resize(n)
        self.board.rng_base = &self.rng_base
        self.board.pts = self.pts.data()
        self.board.side = self.side.data()
        self.board.start = self.start.data()
        self.board.stop = self.stop.data()
        self.board.off = self.lv_off.data()
        self.board.draws = self.lv_draws.data()
        self.board.split = self.lv_split.data()
        self.board.wi = &self.lv_wi
        self.board.wv = &self.lv_wv
        self.board.li = &self.lv_li
        self.board.lv = &self.lv_lv
        self.board.shared = self.crew is not None and n > 1 and self.crew.c.wanted()
        if not self.board.shared:
            self.lv_wend.resize(n)
            self.lv_lend.resize(n)
            o = self.board.base
            for i in range(n):
                self.lv_off[i] = o
                self._task(&self.board, i, self.w_idx, self.w_val, self.l_idx, self.l_val)
                o += self.lv_draws[i]
                self.lv_wend[i] = self.w_idx.size()
                self.lv_lend[i] = self.l_idx.size()
            return 0
        # (the nodes' results go to the level tables, in any order)
        self.lv_plan.resize(n)
        self.lv_wi.resize(n)
        self.lv_wv.resize(n)
        self.lv_li.resize(n)
        self.lv_lv.resize(n)
        o = self.board.base
        for i in range(n):
            node = self.board.first + i
            self.lv_plan[i] = 0
            if (self.stop[node] - self.start[node] > self.max_leaf
                    and _labelled(&self.pts[self.start[node]],
                                  self.stop[node] - self.start[node], &self.yp[0])):
                self.lv_plan[i] = (self.stop[node] - self.start[node]
                                   + (SEP_DRAWS if self.plan_splits else 0))
            self.lv_off[i] = o
            o += self.lv_plan[i]
        k = 0
        while k < n:
            self.crew.c.publish(&self.board, k, n)
            try:
                while True:
                    i = self.crew.c.claim_own(&self.board)
                    if i < 0:
                        break
                    try:
                        self._slot_task(&self.board, i)
                    finally:
                        self.crew.c.done(&self.board)
            finally:
                self.crew.c.finish(&self.board)
            # the first node that drew other than planned: the nodes after
            # it again, from their corrected places
            while k < n and self.lv_draws[k] == self.lv_plan[k]:
                k += 1
            if k < n:
                self.lv_plan[k] = self.lv_draws[k]
                o = self.lv_off[k] + self.lv_plan[k]
                for i in range(k + 1, n):
                    self.lv_off[i] = o
                    o += self.lv_plan[i]
                k += 1
        return 0

    cdef int _slot_task(self, const xk_board* b, int64_t i) except -1 nogil:
        """_task with node i's results into its entries of the level tables."""
        b.wi[0][i].clear()
        b.wv[0][i].clear()
        b.li[0][i].clear()
        b.lv[0][i].clear()
        self._task(b, i, b.wi[0][i], b.wv[0][i], b.li[0][i], b.lv[0][i])
        return 0

    cdef int _commit_level(self) except -1 nogil:
        """Append the level's results to the tree in node order: a split
        node's points are reordered (+ side first, both sides in node order)
        and its children added; then each node's weights or leaf labels."""
        cdef int64_t i, node, s, e, a, k, n_pos
        for i in range(self.board.n_nodes):
            node = self.board.first + i
            if self.lv_split[i]:
                s = self.start[node]
                e = self.stop[node]
                self.tmp_pts.clear()
                n_pos = 0
                for a in range(s, e):
                    if self.side[a] > 0:
                        self.pts[s + n_pos] = self.pts[a]
                        n_pos += 1
                    else:
                        self.tmp_pts.push_back(self.pts[a])
                for a in range(e - s - n_pos):
                    self.pts[s + n_pos + a] = self.tmp_pts[a]
                k = self.depth.size()
                self.child[2 * node] = <int32_t> k
                self.child[2 * node + 1] = <int32_t> (k + 1)
                self._add_node(s, s + n_pos, self.depth[node] + 1)
                self._add_node(s + n_pos, e, self.depth[node] + 1)
            if self.board.shared:
                self.w_idx.insert(self.w_idx.end(), self.lv_wi[i].begin(), self.lv_wi[i].end())
                self.w_val.insert(self.w_val.end(), self.lv_wv[i].begin(), self.lv_wv[i].end())
                self.l_idx.insert(self.l_idx.end(), self.lv_li[i].begin(), self.lv_li[i].end())
                self.l_val.insert(self.l_val.end(), self.lv_lv[i].begin(), self.lv_lv[i].end())
                self.w_ptr.push_back(self.w_idx.size())
                self.l_ptr.push_back(self.l_idx.size())
            else:
                self.w_ptr.push_back(self.lv_wend[i])
                self.l_ptr.push_back(self.lv_lend[i])
        return 0

    cdef int _task(self, const xk_board* b, int64_t i, vector[int32_t]& wi,
                   vector[float]& wv, vector[int32_t]& li,
                   vector[float]& lv) except -1 nogil:
        """Grow node i of level b (of this grower's tree or another's) with
        this grower's criterion, separator and scratch: split it when it
        holds more than max_leaf points and the partition and then the
        separator leave two non-empty sides (its weights are appended to
        wi, wv), else make it a leaf (its labels appended to li, lv)."""
        cdef int64_t s = b.start[b.first + i], e = b.stop[b.first + i]
        cdef int64_t n = e - s, a, n_pos
        cdef const int32_t* pts = b.pts + s
        cdef bint gated, split = False
        b.draws[i] = 0
        b.split[i] = False
        if n > self.max_leaf:
            # the generator to the node's place in the tree's stream
            if self.rng_board != b or self.rng_gen != b.gen or self.rng_pos > b.off[i]:
                self.rng = b.rng_base[0]
                self.rng_pos = b.base
                self.rng_board = b
                self.rng_gen = b.gen
            self.rng.discard(b.off[i] - self.rng_pos)
            self.rng_pos = b.off[i]
            n_pos = self.criterion.partition(pts, n, &self.yp[0], &self.yi[0], &self.yv[0],
                                             self.sign, self.rng)
            # (a partition draws a number per point when the points have labels)
            if n_pos > 0 or _labelled(pts, n, &self.yp[0]):
                b.draws[i] = n
            if 0 < n_pos < n:
                gated = self.gate is not None and n > self.gate.min_points
                if gated and n == self.gate.n_points and not self.separator.use_liblinear:
                    # a root: its columns shared with the roots separated at once
                    split = self.separator.split(pts, n, n_pos, self.sign, self.rng, wi, wv,
                                                 &self.gate.slots)
                else:
                    if gated:
                        self.gate.slots.take(n)
                    split = self.separator.split(pts, n, n_pos, self.sign, self.rng, wi, wv)
                    if gated:
                        self.gate.slots.give(n)
                b.draws[i] += SEP_DRAWS
            self.rng_pos += b.draws[i]
        if split:
            for a in range(n):
                b.side[s + a] = self.sign[a]
            b.split[i] = True
        else:
            self._leaf(pts, n, li, lv)
        return 0

    cdef int _add_node(self, int64_t s, int64_t e, int32_t d) except -1 nogil:
        self.child.push_back(-1)
        self.child.push_back(-1)
        self.depth.push_back(d)
        self.start.push_back(s)
        self.stop.push_back(e)
        return 0

    cdef int _leaf(self, const int32_t* pts, int64_t n, vector[int32_t]& li,
                   vector[float]& lv) except -1 nogil:
        """Mean label vector of the points pts[0:n], top labels_per_leaf kept
        (appended to li, lv by label)."""
        cdef int64_t a, j, k, m
        cdef int32_t p, l
        self.act_l.clear()
        for a in range(n):
            p = pts[a]
            for j in range(self.yp[p], self.yp[p + 1]):
                l = self.yi[j]
                if not self.seen[l]:
                    self.seen[l] = 1
                    self.act_l.push_back(l)
                self.acc[l] += self.yv[j]
        self.order.clear()
        for k in range(<int64_t> self.act_l.size()):
            l = self.act_l[k]
            self.order.push_back(pair[double, int32_t](-self.acc[l] / n, l))
            self.acc[l] = 0.0
            self.seen[l] = 0
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
            li.push_back(l)
            lv.push_back(<float> self.acc[l])
            self.acc[l] = 0.0
        return 0
