"""Parabel: partitioned label trees (Prabhu, Kag, Harsola, Agrawal & Varma,
WWW 2018), as the C++ tool of the Tree_Extreme_Classifiers suite trains
them, and Bonsai's wide shallow trees (Khandelwal et al., 2019) by its
parameters.

Training rows are scaled to unit length; each label's centroid is the unit
sum of its points' rows. A tree splits the labels of a node by spherical
k-means of their centroids into `arity` clusters (balanced: equal sizes; the
C++ tool's 2-means sorts by the difference of the two cosines and halves),
down to the leaves: depth ceil(log_arity(L // max_leaf)) by default, as the
C++ tool (balanced), or nodes of at most max_leaf labels (unbalanced), or
max_depth levels when given. Every node trains, over the points carrying one
of its labels (the bias feature appended), one L2-regularised linear
classifier per child (positives: the points with a label of that child) or,
at a leaf, per label: squared-hinge SVC or logistic regression by dual
coordinate descent, weights of magnitude <= weight_threshold dropped.

Prediction: a beam of `beam_width` nodes per tree descends level by level,
a node's log-score its parent's plus its classifier's log-likelihood; a
label of a leaf of the final beam scores exp(leaf score + its classifier's
log-likelihood), averaged over the trees.

A node is seeded by its parent's seed and its place among the children (the
root by (seed, tree)), and the nodes of all the trees are trained as tasks on
`threads` threads: the model does not depend on the thread count or on the
order the nodes are trained in.
"""
import heapq
import queue
import weakref
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import numpy as np

from xmlkit import checks
from xmlkit.csr import (Rows, like, model_rows, piece_rows, row_scales, score_rows,
                        transpose_rows, unit_rows)
from xmlkit.models.base import (C_INT_MAX, MAX_TREES, RANKED_DECISION, SEED, auto_or,
                                boolean, integer, one_of, real, usable_threads)
from xmlkit.errors import XmlkitError
from xmlkit.models.tree_family import TreeEnsemble, check_tree_range, same_trees, trees_key

#: rows searched together at most: a node's features are laid out once for all
#: the rows of a chunk that reach it (on a deep tree, the larger the chunk the
#: fewer times), and a chunk's labels are held until its rows are written
CHUNK_ROWS = 1024
#: the classifiers' losses (the C++ tool's -k 0 and 1)
LOSSES = ("squared_hinge", "log")
TREE_KEYS = ("c_ptr", "depth", "l_ptr", "l_idx", "g_ptr", "e_feat", "e_col", "e_val")
#: the classifier rows a tree is made of (node rows, then leaf entries; CSR),
#: stored regrouped by node (grouped_tree), and as such by folders written
#: before that layout (regrouped when loaded)
ROW_KEYS = ("w_ptr", "w_idx", "w_val")


def leaf_depth(n_labels, max_leaf, arity, max_depth, balanced):
    """The depth of the leaves: max_depth - 1 when given; "auto": balanced
    trees the C++ tool's ceil(log_arity(n_labels // max_leaf)) (0 when there
    are fewer labels than 2 max_leaf), unbalanced ones none (nodes of at
    most max_leaf labels are leaves)."""
    if max_depth != "auto":
        return max_depth - 1
    if not balanced:
        return C_INT_MAX
    q, d = n_labels // max_leaf, 0
    while arity ** d < q:
        d += 1
    return d


class Parabel(TreeEnsemble):
    """Parabel label-tree ensemble: ``Parabel(n_trees=3, ...).fit(X, Y)``,
    then ``predict(X, k)``. X: sparse N×D features, Y: sparse N×L labels."""

    BOUNDED_AT_USE = True       # (the kernel bounds every index where it reads it)

    algorithm = "parabel"
    _parameter_constraints = {
        "n_trees": integer(1, MAX_TREES), "start_tree": integer(0), "threads": integer(1),
        "arity": integer(2, 1 << 16), "max_leaf": integer(1), "max_depth": auto_or(integer(1)),
        "balanced": boolean(), "cluster_eps": real(0), "centroid_threshold": real(0),
        "loss": one_of(*LOSSES), "C": real(0, lo_open=True), "bias": real(),
        "max_iter": integer(1), "tol": real(0, lo_open=True), "weight_threshold": real(0),
        "seed": SEED,
    }
    PREDICT_PARAMS = {**RANKED_DECISION, "beam_width": (10, integer(1, C_INT_MAX))}
    PARAM_GROUPS = (
        ("Tree", ("n_trees", "arity", "max_leaf", "max_depth", "balanced", "cluster_eps",
                  "centroid_threshold")),
        ("Classifier", ("loss", "C", "bias", "max_iter", "tol", "weight_threshold")),
        ("Run", ("start_tree", "threads", "seed")),
    )
    MODEL_KEYS = ("arity", "max_leaf", "max_depth", "balanced", "cluster_eps",
                  "centroid_threshold", "loss", "C", "bias", "max_iter", "tol",
                  "weight_threshold")
    SHAPE_KEYS = ("c_ptr", "depth")

    def __init__(self, *, n_trees=3, arity=2, max_leaf=100, max_depth="auto", balanced=True,
                 cluster_eps=1e-4, centroid_threshold=0.0, loss="squared_hinge", C=1.0,
                 bias=1.0, max_iter=20, tol=0.1, weight_threshold=0.1, start_tree=0,
                 threads=1, seed=0):
        """
        Tree parameters
        ---------------
        n_trees : number of trees to grow.
        arity : children per internal node (2: Parabel; up to 100 and more:
            Bonsai's wide trees).
        max_leaf : labels per leaf: balanced trees with max_depth "auto"
            are as deep as the C++ tool's, ceil(log_arity(L // max_leaf))
            levels below the root; unbalanced ones split nodes of more than
            max_leaf labels.
        max_depth : levels of a tree at most (the root alone: 1); "auto":
            see max_leaf.
        balanced : clusters of equal sizes (Parabel); False: each label
            to its nearest centre (Bonsai).
        cluster_eps : k-means stops when the labels' mean cosine to their
            centres gains less than this.
        centroid_threshold : label-centroid entries of magnitude at most
            this are dropped before clustering.

        Classifier parameters
        ---------------------
        loss : "squared_hinge" (L2-loss SVC, the C++ tool's default) or
            "log" (logistic regression, its cost scaled by the training
            points over the node's).
        C : cost of the classifiers' loss.
        bias : value of the bias feature added to every point.
        max_iter : passes of the dual coordinate descent at most.
        tol : the solver's stopping tolerance (liblinear's eps).
        weight_threshold : weights of magnitude at most this are dropped
            (what keeps the model small).

        Run parameters
        --------------
        start_tree : index of the first tree (trees start_tree .. start_tree
            + n_trees - 1 are grown; shards of one model use different
            ranges).
        threads : nodes trained in parallel (threads); the trees do not
            depend on it.
        seed : random seed; node i of tree t draws from a stream derived
            from (seed, t, i).
        """
        self.n_trees = n_trees
        self.arity = arity
        self.max_leaf = max_leaf
        self.max_depth = max_depth
        self.balanced = balanced
        self.cluster_eps = cluster_eps
        self.centroid_threshold = centroid_threshold
        self.loss = loss
        self.C = C
        self.bias = bias
        self.max_iter = max_iter
        self.tol = tol
        self.weight_threshold = weight_threshold
        self.start_tree = start_tree
        self.threads = threads
        self.seed = seed

    def _check_more(self):
        check_tree_range(self)

    # -- training
    def start_fit(self, X, Y):
        """The shared checks, then the memory the root node needs on each
        thread, refused before it is allocated (xmlkit._memory): its k-means
        (over the features the points use, each cluster's sum in float64 and
        its centre in float32; the labels' cosines to each centre in float32
        and float64; balanced arity > 2 also sorts every (label, centre) pair)
        or its classifiers (the dual variables of a block of classifiers
        per point, and the block's weights: parabel_tree.BLOCK)."""
        X, Y = super().start_fit(X, Y)
        from xmlkit._memory import require_memory
        from xmlkit._ext.parabel_tree import BLOCK
        max_block, block_bytes = BLOCK
        p = self.params
        (n, D), L = X.shape, Y.shape[1]
        K = min(p.arity, L)
        used = int(np.count_nonzero(np.bincount(X.indices, minlength=D))) + 1   # (the bias)
        kmeans = 12 * K * (used + L) + (16 * K * L if p.balanced and K > 2 else 0)
        solver = n * min(K, max_block) * (16 if p.loss == "log" else 8) + block_bytes
        require_memory(p.threads * max(kmeans, solver),
                       f"Parabel's root node (arity {K}) on {n} points, {D} features and "
                       f"{L} labels with {p.threads} thread(s)",
                       "; a smaller arity or fewer threads may help")
        return X, Y

    def _wanted_trees(self):
        return list(range(self.start_tree, self.start_tree + self.n_trees))

    def _data(self, X, Y):
        """The training data as the node kernels read them (ParabelData)."""
        from xmlkit._ext.parabel_tree import ParabelData, label_centroids
        D, L = X.shape[1], Y.shape[1]
        scale = row_scales(X)
        lp, li, _ = transpose_rows(Y, L)
        U = unit_rows(X, scale)             # (the kernels scale X's rows as they read them)
        cp, ci, cv = label_centroids(np.ascontiguousarray(U.indptr, dtype=np.int64),
                                     U.indices, U.data, lp, li, D,
                                     float(self.centroid_threshold))
        del U
        return ParabelData(X.indptr, X.indices, X.data, scale, self.bias,
                           np.ascontiguousarray(Y.indptr, dtype=np.int64), Y.indices, lp, li,
                           cp, ci, cv, D + 1, L)

    def _builder(self, data):
        from xmlkit._ext.parabel_tree import ParabelNode
        p = self.params
        return ParabelNode(data, p.arity, p.balanced, p.cluster_eps, LOSSES.index(p.loss), p.C,
                           p.max_iter, p.tol, p.weight_threshold)

    def _grow_trees(self, X, Y, todo, after=None):
        """Grow the trees `todo` on `threads` threads, yielding (t, tree) in
        the order of todo; after(t, tree) runs first. Every node is a task:
        a free thread takes the root of one of the next threads + 1 trees
        to end when one is ready (a wide tree's root is most of its tree's
        work: it is not left until the trees before it are done), else the
        ready node of the earliest tree: its upper levels first, and in a
        level the node of most work first (its labels' points times its
        classifiers, so that a large node is not the last one left while
        the other threads wait). So the trees end in order, only roots are
        held ahead of them, and no thread waits while any node is ready. A
        node's result does not depend on when it is trained."""
        if not todo:
            return
        data = self._data(X, Y)
        threads = usable_threads(self.params.threads)
        if threads == 1:
            grow = self.tree_grower(X, Y, data)
            for t in todo:
                tree = grow(t)
                if after is not None:
                    after(t, tree)
                yield t, tree
                del tree        # (not held while the next tree grows)
            return
        builders = queue.SimpleQueue()
        for _ in range(threads):
            builders.put(self._builder(data))

        def train(task):
            b = builders.get()
            try:
                return b.node(data, *task)
            finally:
                builders.put(b)
        growing = [_Growth(self, t) for t in todo]
        ready = {}                      # tree's place -> heap of (depth, -work, node)

        points = np.bincount(Y.indices, minlength=Y.shape[1])    # (each label's)

        def push(rank, i):
            g = growing[rank]
            labels = g.labels[i]
            work = int(points[labels].sum()) * (len(labels) if g.task(i)[2] else
                                                min(self.params.arity, len(labels)))
            heapq.heappush(ready.setdefault(rank, []), (g.depth[i], -work, i))

        def pop():
            roots = [r for r in range(done_upto, done_upto + threads + 1)
                     if r in ready and ready[r][0][0] == 0]
            rank = roots[0] if roots else min(ready)
            i = heapq.heappop(ready[rank])[2]
            if not ready[rank]:
                del ready[rank]
            return rank, i
        for rank in range(len(growing)):
            push(rank, 0)
        pool = ThreadPoolExecutor(threads)
        running, done_upto = {}, 0
        try:
            while done_upto < len(growing):
                while ready and len(running) < threads:
                    rank, i = pop()
                    running[pool.submit(train, growing[rank].task(i))] = (rank, i)
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    rank, i = running.pop(future)
                    for c in growing[rank].done(i, future.result()):
                        push(rank, c)
                while done_upto < len(growing) and growing[done_upto].finished():
                    g = growing[done_upto]
                    tree = g.tree()
                    growing[done_upto] = None
                    done_upto += 1
                    if after is not None:
                        after(g.t, tree)
                    yield g.t, tree
                    del tree
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def tree_grower(self, X, Y, data=None):
        """grow(t) -> tree t over X, Y on the calling thread (the prepared data
        and a node trainer kept between calls)."""
        data = self._data(X, Y) if data is None else data
        builder = self._builder(data)

        def grow(t):
            g, todo = _Growth(self, t), [0]
            while todo:
                i = todo.pop()
                todo.extend(reversed(g.done(i, builder.node(data, *g.task(i)))))
            return g.tree()
        return grow

    # -- prediction
    def _kernel(self):
        """The kernel over the trees (their arrays where they lie), kept while
        they are the same array objects."""
        from xmlkit._ext.parabel_predict import ParabelKernel
        self._require_whole_trees()
        trees = trees_key(self.trees_)
        cached = getattr(self, "_packed", None)
        if cached is not None and same_trees(cached[0], trees):
            return cached[1]
        ordered = [self.trees_[t] for t in sorted(self.trees_)]
        checked = self._all_checked(ordered)
        try:
            kernel = ParabelKernel(ordered, self.n_features_in_ + 1, self.bias, self.n_labels_,
                                   LOSSES.index(self.loss), checked=checked)
        except ValueError as exc:
            if getattr(self, "source_", None) is None or not checked:
                raise                   # (trees given or changed through the API)
            raise self._changed_in_use(f"{exc}, after its checks passed: a file changed in "
                                       "use") from None
        self._packed = (trees, kernel)
        return kernel

    def _all_checked(self, trees):
        """Whether every tree's arrays are those check_tree passed when its
        file was read (the kernel then skips the same checks: a tree given
        or changed through the API is checked there)."""
        done = getattr(self, "_checked", ())
        return all(any(all(tree[k] is ref() for k, ref in zip(TREE_KEYS, refs)) for refs in done)
                   for tree in trees)

    def _changed_in_use(self, what):
        """The XmlkitError of a tree found damaged after the folder's checks
        passed (`what`: how): its file changed while in use."""
        where = self.source_[0] if getattr(self, "source_", None) else "the model"
        return XmlkitError(f"{where}: {what}; nothing of this run is to be trusted: run it "
                           "again")

    def predict(self, X, k=5, threads=1, progress=None, beam_width=None, decision=None,
                threshold=None):
        """Scores: per tree, a beam of beam_width nodes (None: the model's,
        PREDICT_PARAMS: 10) searched level by level, each label of a reached
        leaf scored by the product of its path's probabilities; the mean over
        the trees; the k best per row (k=None: all). Rows in, Rows out; else
        a scipy csr_matrix. decision, threshold: scores only (label sets:
        xmlkit.Calibrated)."""
        R, run, threads, chunk = self._scorer(X, k, threads, beam_width, decision, threshold)
        return like(X, score_rows(run, R.shape[0], self.n_labels_, threads, progress, chunk))

    def predict_pieces(self, X, k=5, threads=1, progress=None, finish=None, release=False,
                       beam_width=None, decision=None, threshold=None):
        """predict()'s rows as consecutive pieces (Rows), a chunk each, made
        on the threads a few ahead of the one asked for and passed through
        finish(piece) there when given (xml-predict formats them): memory
        holds a few chunks' scores, not every row's. release: (the forests')."""
        R, run, threads, chunk = self._scorer(X, k, threads, beam_width, decision, threshold)

        def piece(r0, r1, out):
            rows = Rows(*out, (r1 - r0, self.n_labels_))
            return rows if finish is None else finish(rows)
        yield from piece_rows(run, R.shape[0], threads, progress, chunk, piece)

    def _scorer(self, X, k, threads, beam_width, decision, threshold):
        """(rows, run(r0, r1) -> CSR pieces of their scores, threads, chunk
        rows) for predict and predict_pieces."""
        from xmlkit._ext.parabel_groups import ChangedInUse
        used = self._predict_params(beam_width=beam_width, decision=decision,
                                    threshold=threshold)
        R = model_rows(X, self.n_features_in_)
        kernel = self._kernel()
        topk = 0 if k is None else int(k)
        beam = used["beam_width"]
        threads = usable_threads(threads)
        chunk = int(min(CHUNK_ROWS, max(64, -(-R.shape[0] // (2 * threads)))))

        def run(r0, r1):
            try:
                return kernel.predict_rows(R, r0, r1, topk, beam)
            except ChangedInUse as exc:     # (a mapped tree file rewritten while in use)
                raise self._changed_in_use(exc) from None
        return R, run, threads, chunk

    def _effects(self, R, S, threads, n_top=0, **params):
        """Exact leave-one-feature-out effects, by scoring each row once per
        feature without it: a removal changes the row's length, so every
        margin on its path and the beam itself may change."""
        from xmlkit.explanation import removal_effects
        return removal_effects(
            lambda rows: self.predict(rows, k=None, threads=threads, **params), R, S)

    # -- the tree files (written by xmlkit.driver and models.folders, read by the latter)
    @staticmethod
    def _encode_tree(tree, compact=False):
        return {k: tree[k] for k in TREE_KEYS}

    def _decode_tree(self, arrays, name):
        if "g_ptr" not in arrays and all(k in arrays for k in ROW_KEYS):
            tree = {k: arrays[k] for k in TREE_KEYS[:4] + ROW_KEYS if k in arrays}
            checks.need(tree, TREE_KEYS[:4], name)
            tree = grouped_tree(tree, self.n_features_in_, name)      # (an older folder)
        else:
            tree = {k: arrays[k] for k in TREE_KEYS if k in arrays}
        check_tree(tree, self.n_features_in_, self.n_labels_, name)
        self._checked = (*(refs for refs in getattr(self, "_checked", ()) if refs[0]() is not None),
                         tuple(weakref.ref(tree[k]) for k in TREE_KEYS))   # (not held)
        return tree

    def stats(self):
        trees = list(self.trees_.values())
        return {"nodes": float(np.mean([len(t["c_ptr"]) - 1 for t in trees])),
                "leaves": float(np.mean([(np.diff(t["c_ptr"]) == 0).sum() for t in trees])),
                "max_depth": float(np.mean([t["depth"].max() for t in trees]))}


#: bytes of a tree's pieces let go between two calls of give_back as the
#: tree's arrays are made (_Growth.tree)
GIVE_BACK_BYTES = 1 << 23


class _Growth:
    """One tree as its nodes are trained, in any order: a node's seed is its
    parent's mixed with its place among the children (the root's: the
    tree's), so the tree does not depend on the order. Nodes are numbered as
    they are made; tree() renumbers them breadth-first."""

    def __init__(self, model, t):
        from xmlkit._ext.parabel_tree import child_seed, node_seed
        p, L = model.params, model.n_labels_
        self.t, self._child_seed = t, child_seed
        self.limit = leaf_depth(L, p.max_leaf, p.arity, p.max_depth, p.balanced)
        self.small = p.max_leaf if not p.balanced else 1
        self.labels, self.depth = [np.arange(L, dtype=np.int32)], [0]
        self.seed = [node_seed(p.seed, t, 0)]
        self.children, self.groups = [None], [None]
        self.pending = 1

    def task(self, i):
        """Node i's task for ParabelNode.node: (labels, seed, is_leaf)."""
        return (self.labels[i], self.seed[i],
                self.depth[i] >= self.limit or len(self.labels[i]) <= self.small)

    def done(self, i, result):
        """Record node i's result; returns the new children's numbers."""
        group, nc, feat, col, val = result
        self.pending -= 1
        self.groups[i] = [feat, col, val]
        if self.task(i)[2]:
            self.children[i] = []
            return []
        order = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(nc + 1))
        kids = list(range(len(self.labels), len(self.labels) + nc))
        for c in range(nc):
            self.labels.append(self.labels[i][order[bounds[c]:bounds[c + 1]]])
            self.depth.append(self.depth[i] + 1)
            self.seed.append(self._child_seed(self.seed[i], c))
            self.children.append(None)
            self.groups.append(None)
        self.children[i] = kids
        self.pending += nc
        return kids

    def finished(self):
        return self.pending == 0

    def tree(self):
        """The tree's arrays (TREE_KEYS), nodes breadth-first: each node's
        group as its kernel laid it out, copied into the tree's arrays (made
        empty: their pages are taken as they are written) an array at a
        time, each piece let go once copied and the small blocks given back
        every GIVE_BACK_BYTES (xmlkit._memory.give_back), so the pieces and
        the arrays are not held twice over."""
        from xmlkit._memory import give_back
        bfs = [0]
        for i in bfs:
            bfs.extend(self.children[i])
        n_child = [len(self.children[i]) for i in bfs]
        tree = tree_structure([self.labels[i] for i in bfs], [self.depth[i] for i in bfs],
                              n_child, [k for k, c in enumerate(n_child) if not c])
        pieces = [self.groups[i] for i in bfs]
        self.groups = None
        g_ptr = np.zeros(len(bfs) + 1, np.int64)
        np.cumsum([len(p[0]) for p in pieces], out=g_ptr[1:])
        tree["g_ptr"] = g_ptr
        types = (np.int32, np.result_type(*[p[1].dtype for p in pieces]), np.float32)
        for k, (key, dtype) in enumerate(zip(TREE_KEYS[5:], types)):
            out, freed = np.empty(g_ptr[-1], dtype), 0
            for i, p in enumerate(pieces):
                out[g_ptr[i]:g_ptr[i + 1]] = p[k]
                freed += p[k].nbytes
                p[k] = None
                if freed > GIVE_BACK_BYTES:
                    give_back()
                    freed = 0
            give_back()
            tree[key] = out
        return tree


def tree_structure(labels, depth, n_child, leaf_ids):
    """A tree's node arrays (TREE_KEYS[:4]: c_ptr, depth, l_ptr, l_idx) from
    its nodes in breadth-first order (the children of a node follow those
    of the nodes before it): each node's labels, depth and number of
    children, and which nodes are leaves (ascending)."""
    n = len(labels)
    c_ptr = np.empty(n + 1, np.int64)
    c_ptr[0] = 1
    np.cumsum(n_child, out=c_ptr[1:])
    c_ptr[1:] += 1
    counts = np.zeros(n, np.int64)
    counts[leaf_ids] = [len(labels[i]) for i in leaf_ids]
    l_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=l_ptr[1:])
    l_idx = np.concatenate([labels[i] for i in leaf_ids]).astype(np.int32)
    return {"c_ptr": c_ptr, "depth": np.asarray(depth, np.int32), "l_ptr": l_ptr,
            "l_idx": l_idx}


def assemble_tree(labels, depth, n_child, rows, leaves):
    """A tree's arrays as classifier rows (TREE_KEYS[:4] and ROW_KEYS; stored
    as grouped_tree makes them) from its nodes in breadth-first order
    (tree_structure), each node's classifier row (idx, val; the root's
    empty), and per leaf the CSR pieces (ptr, idx, val) of its labels'
    classifiers."""
    leaf_ids = sorted(leaves)
    tree = tree_structure(labels, depth, n_child, leaf_ids)
    pieces_i = [r[0] for r in rows]
    pieces_v = [r[1] for r in rows]
    sizes = [len(r[0]) for r in rows]
    for i in leaf_ids:
        wp, wi, wv = leaves[i]
        pieces_i.append(wi)
        pieces_v.append(wv)
        sizes.extend(np.diff(wp).tolist())
    w_ptr = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=w_ptr[1:])
    tree.update({"w_ptr": w_ptr, "w_idx": np.concatenate(pieces_i).astype(np.int32),
                 "w_val": np.concatenate(pieces_v).astype(np.float32)})
    return tree


def grouped_tree(tree, n_features, name):
    """A tree of classifier rows (ROW_KEYS) as it is stored and scored
    (TREE_KEYS): group i holds node i's children's classifiers (an internal
    node; the root has none of its own) or its labels' (a leaf),
    feature-major, each group's features ascending, each weight with its
    feature and its classifier within the group (e_col: one byte when no
    group is wider than 256; the kernel's group_weights). DamagedModel when
    the rows disagree with the tree."""
    from xmlkit._ext.parabel_groups import group_weights
    a = [np.ascontiguousarray(tree[k], dtype=t).reshape(-1) for k, t in (
        ("c_ptr", np.int64), ("l_ptr", np.int64), ("w_ptr", np.int64), ("w_idx", np.int32),
        ("w_val", np.float32))]
    a[3:] = [x if len(x) else np.zeros(1, x.dtype) for x in a[3:]]  # (w_ptr bounds them)
    try:
        groups = group_weights(*a, n_features + 1)
    except ValueError as exc:
        raise checks.DamagedModel(name, str(exc)) from None
    out = {k: tree[k] for k in TREE_KEYS[:4]}
    out.update(zip(TREE_KEYS[4:], groups))
    return out


def classifier_rows(tree):
    """A stored tree's classifiers as rows (w_ptr, w_idx, w_val): the root's
    row (empty), the other nodes' in order, then the leaves' label entries;
    each row's features ascending (for inspection and tests)."""
    cp, lp = np.asarray(tree["c_ptr"], np.int64), np.asarray(tree["l_ptr"], np.int64)
    n = len(cp) - 1
    leaf = cp[1:] == cp[:-1]
    first = np.where(leaf, n + lp[:-1], cp[:-1])          # each group's first row
    group = np.repeat(np.arange(n), np.diff(np.asarray(tree["g_ptr"], np.int64)))
    row = first[group] + np.asarray(tree["e_col"], np.int64)
    feat = np.asarray(tree["e_feat"], np.int32)
    order = np.lexsort((feat, row))
    w_ptr = np.zeros(n + lp[-1] + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=n + lp[-1]), out=w_ptr[1:])
    return (w_ptr, feat[order].astype(np.int32),
            np.asarray(tree["e_val"], np.float32)[order])


def check_tree(tree, n_features, n_labels, name):
    """Validate a stored Parabel tree completely, so that prediction can trust
    it: children after their parent, each node one parent's child (nodes in
    breadth-first order: the child ranges tile 1..n-1), depths one below the
    parent's, labels only at leaves, every group whole (the kernel's
    check_groups: pointers and features in range and ascending, each weight
    within its group's classifiers, finite values). Returns the tree."""
    from xmlkit._ext.parabel_groups import check_groups
    checks.need(tree, TREE_KEYS, name)
    cp = checks.ints(tree["c_ptr"], name, "c_ptr").astype(np.int64)
    if cp.ndim != 1 or len(cp) < 2:
        raise checks.DamagedModel(name, "c_ptr is not a vector of at least 2 entries")
    n = len(cp) - 1
    counts = np.diff(cp)
    internal = np.flatnonzero(counts > 0)
    if cp[0] != 1 or cp[-1] != n or np.any(counts < 0) or np.any(cp[internal] <= internal):
        raise checks.DamagedModel(name, "child links do not form a tree")
    depth = checks.ints(tree["depth"], name, "depth", (n,)).astype(np.int64)
    parent = np.repeat(np.arange(n), counts)
    if depth[0] != 0 or not np.array_equal(depth[1:], depth[parent] + 1):
        raise checks.DamagedModel(name, "depths do not follow the child links")
    lp = checks.pointers(tree["l_ptr"], n, name, "leaf label pointers")
    li = checks.in_range(tree["l_idx"], 0, n_labels, name, "leaf labels")
    if li.ndim != 1 or lp[-1] != len(li) or np.any(np.diff(lp)[internal] != 0):
        raise checks.DamagedModel(name, "leaf labels disagree with the leaves")
    arrays = []
    for key, dtypes in (("g_ptr", (np.int64,)), ("e_feat", (np.int32,)),
                        ("e_col", (np.uint8, np.uint16, np.int32)), ("e_val", (np.float32,))):
        a = tree[key]
        if not isinstance(a, np.ndarray) or a.dtype not in dtypes or a.ndim != 1:
            raise checks.DamagedModel(name, f"{key} is not a vector of "
                                      + " or ".join(str(np.dtype(t)) for t in dtypes))
        arrays.append(np.ascontiguousarray(a))
    fault = check_groups(cp, np.ascontiguousarray(lp, np.int64), *arrays, n_features + 1)
    if fault:
        raise checks.DamagedModel(name, fault)
    return tree
