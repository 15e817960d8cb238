"""FastXML (Prabhu & Varma, KDD 2014), as the original C++ tool (v2) trains it.

Each node splits its points by alternating between two label rankings that
maximise nDCG@L on either side (from a random ±1 start), then fits one
class-balanced L1-regularised logistic regression that separates the two
sides; the children are the sides of that hyperplane. A node with at most
`max_leaf` points is a leaf and keeps the `labels_per_leaf` largest entries of
its mean label vector. Prediction averages the leaves a point reaches over the
trees.

The separators are fitted by xmlkit's own newGLMNET solver (with the C++
tool's iteration caps), or by liblinear-official's L1R_LR with
solver="liblinear". Trees are seeded by (seed, tree index), so a tree is the
same whatever the number of workers; `-T` workers are threads, or processes
with liblinear (its solver shuffles with the C library's global rand(); see
xmlkit._ext.fastxml_separator).
"""
import os
import queue
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import numpy as np

from xmlkit.csr import Rows, as_rows, like
from xmlkit.errors import XmlkitError
from xmlkit.models.base import MAX_TREES, SEED, integer, one_of, real
from xmlkit.models.tree_family import TreeEnsemble, check_tree_range, same_trees, trees_key
from xmlkit.models.forest import Forest, decode_tree, encode_tree, tree_effects, tree_stats


#: the solvers of the nodes' L1 logistic regressions
SOLVERS = ("newglmnet", "liblinear")
#: the node solver's stopping tolerance (relative to the subgradient at
#: zero): xmlkit's default, and the C++ tool's
TOL, CPP_TOL = 0.03, 0.01
#: Newton steps per node: xmlkit's default (the C++ tool's)
MAX_NEWTON = CPP_MAX_NEWTON = 10
#: Newton steps per node of fewer than SMALL_NODE points: xmlkit's default
#: (the C++ tool's: no other cap than MAX_NEWTON)
MAX_NEWTON_SMALL, CPP_MAX_NEWTON_SMALL = 3, 10
SMALL_NODE = 4096
#: where each node's solver starts: xmlkit's default (the C++ tool's)
INITS = ("warm", "zero")
INIT = CPP_INIT = "zero"


# Worker state of liblinear runs: set in the parent before forking, inherited
# by the worker processes.
_GROWER = None


def _completed(submit, items, window):
    """The results of submit(item) (a future) for each item, yielded as they
    complete, with at most `window` submitted and not yet yielded: what is
    held does not grow with the number of items (a future holds its tree
    until it is dropped; none is kept after it is yielded)."""
    items = iter(items)
    pending = set()
    while True:
        for item in items:
            pending.add(submit(item))
            if len(pending) >= window:
                break
        if not pending:
            return
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for f in done:
            yield f.result()
        done = f = None


def _die_with(parent):
    """Initializer of forked workers: end when process `parent` ends, however
    it ends (xmlkit._process.die_with). Ctrl-C is left to the parent, which
    stops the pool."""
    import signal
    from xmlkit._process import die_with
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with(parent)


def _grow_one(seed, t, after, grower=None):
    """Grow tree t, then call after(t, tree) in the worker (the driver writes
    the tree's file there, so that compressing files runs in parallel too)."""
    tree = (grower or _GROWER).grow(seed, t)
    if after is not None:
        after(t, tree)
    return t, tree


def _grow_pipelined(seed, todo, after, grower):
    """Trees `todo` one after the other on this thread, each handed to
    after(t, tree) on a writer thread while the next one grows (growing
    releases the GIL): at most two trees are held. Yields (t, tree) once
    after() has returned for it."""
    if after is None:
        for t in todo:
            yield _grow_one(seed, t, None, grower)
        return

    def write(t, tree):
        after(t, tree)
        return t, tree
    pending = None
    with ThreadPoolExecutor(1) as writer:
        for t in todo:
            tree = grower.grow(seed, t)
            if pending is not None:
                yield pending.result()
            pending = writer.submit(write, t, tree)
            tree = None
        if pending is not None:
            yield pending.result()


def _as_training_csr(M, name, n_cols, dtype=np.float32):
    """M as Rows with int64 index pointers and n_cols columns, for the grower;
    NaN or inf values refused."""
    R = as_rows(M, name, dtype)
    if R.nnz and not np.all(np.isfinite(R.data)):
        raise XmlkitError(f"{name} contain NaN or inf")
    return Rows(R.indptr.astype(np.int64), R.indices, R.data, (R.shape[0], n_cols))


#: held while a model's Forest is made (threads share it)
_FOREST_LOCK = threading.Lock()


class FastXML(TreeEnsemble):
    """FastXML tree ensemble: ``FastXML(n_trees=50, ...).fit(X, Y)``, then
    ``predict(X, k)`` → csr scores. X: csr N×D features, Y: csr N×L labels."""

    algorithm = "fastxml"
    use_idcg = True
    CHECKS_ON_USE = True        # (mapped tree files: verified as they are first routed)
    BOUNDED_AT_USE = True
    _parameter_constraints = {
        "n_trees": integer(1, MAX_TREES), "start_tree": integer(0), "threads": integer(1),
        "bias": real(), "log_loss_coeff": real(0, lo_open=True), "max_leaf": integer(1),
        "labels_per_leaf": integer(1), "seed": SEED, "solver": one_of(*SOLVERS),
        "tol": real(0, 1, hi_open=True),
        "max_newton": integer(1),
        "max_newton_small": integer(1),
        "small_node": integer(0),
        "init": one_of(*INITS),
    }
    PARAM_GROUPS = (
        ("Tree", ("n_trees", "max_leaf", "labels_per_leaf")),
        ("Solver", ("bias", "log_loss_coeff", "solver", "tol", "max_newton", "max_newton_small",
                    "small_node", "init")),
        ("Run", ("start_tree", "threads", "seed")),
    )
    MODEL_KEYS = ("bias", "log_loss_coeff", "max_leaf", "labels_per_leaf", "solver",
                  "tol", "max_newton", "max_newton_small", "small_node", "init")
    SHAPE_KEYS = ("child", "depth")

    def __init__(self, *, n_trees=50, max_leaf=10, labels_per_leaf=10, bias=1.0,
                 log_loss_coeff=1.0, solver="newglmnet", tol=TOL, max_newton=MAX_NEWTON,
                 max_newton_small=MAX_NEWTON_SMALL, small_node=SMALL_NODE, init=INIT,
                 start_tree=0, threads=1, seed=0):
        """
        Tree parameters
        ---------------
        n_trees : number of trees to grow.
        max_leaf : a node with at most this many points is a leaf.
        labels_per_leaf : labels kept per leaf (the paper's setting, 10; the
            C++ code's default is 100).

        Solver parameters
        -----------------
        bias : value of the bias feature added to every point.
        log_loss_coeff : cost C of the logistic loss in each node's L1 classifier.
        solver : the nodes' L1 logistic regressions: "newglmnet" (xmlkit's:
            `max_newton` Newton steps of at most 10 coordinate-descent passes)
            or "liblinear" (liblinear-official's L1R_LR, 100 / 1000).
        tol : the node solver's stopping tolerance (newglmnet): it stops
            once the L1 norm of the minimum-norm subgradient is at most tol
            times its value at w = 0. The C++ tool's is 0.01; the default
            takes fewer solver passes at no lower accuracy
            (scripts/results/solver.md). tol=0.01 with max_newton_small=10
            (and the max_newton and init defaults) reproduces the C++
            tool's stopping rules.
        max_newton : Newton steps at most per node (newglmnet; the C++
            tool's 10).
        max_newton_small : Newton steps at most per node of fewer than
            `small_node` points (newglmnet; the C++ tool's: 10, no cap of
            its own). Fewer steps on the many small nodes save solver
            passes at the same accuracy; the few large nodes, whose splits
            route the most points, keep `max_newton` (solver.md).
        small_node : nodes of fewer points than this take at most
            `max_newton_small` Newton steps (0: none does).
        init : where each node's solver starts (newglmnet): "zero" (the C++
            tool's) or "warm" (from one proximal-gradient step at zero: the
            class-balanced difference of the two sides' mean rows,
            soft-thresholded, scaled by a line search; solver.md).

        Run parameters
        --------------
        start_tree : index of the first tree (trees start_tree .. start_tree +
            n_trees - 1 are grown; shards of one model use different ranges).
        threads : trees grown in parallel (threads; worker processes with
            solver="liblinear"); a thread left without a tree grows nodes of
            the trees still growing. The largest nodes are separated
            together only within a budget of points (memory: see
            xmlkit._ext.fastxml_tree.LargeNodeGate). The trees do not depend
            on threads.
        seed : random seed; tree t draws from a stream derived from (seed, t).
        """
        self.n_trees = n_trees
        self.start_tree = start_tree
        self.threads = threads
        self.bias = bias
        self.log_loss_coeff = log_loss_coeff
        self.max_leaf = max_leaf
        self.labels_per_leaf = labels_per_leaf
        self.seed = seed
        self.solver = solver
        self.tol = tol
        self.max_newton = max_newton
        self.max_newton_small = max_newton_small
        self.small_node = small_node
        self.init = init

    # -- training
    def _label_values(self, Y):
        """Label values the splits and leaves work on (PfastreXML reweights them)."""
        return Y

    def _wanted_trees(self):
        return list(range(self.start_tree, self.start_tree + self.n_trees))

    def _grow_trees(self, X, Y, todo, after=None):
        """Grow the trees `todo`, yielding (t, tree) as each is done (in any
        order); after(t, tree) runs in the worker that grew it."""
        if not todo:
            return
        grower = self._growers(X, Y)
        grow = self._grow_forked if self.params.solver == "liblinear" else self._grow_threads
        yield from grow(todo, after, grower)

    def _growers(self, X, Y):
        """A function making tree growers over X, Y (one per worker thread:
        the data arrays are shared, not copied)."""
        from xmlkit._ext.fastxml_partition import NdcgPartition
        from xmlkit._ext.fastxml_separator import NodeSeparator
        from xmlkit._ext.fastxml_tree import LargeNodeGate, TreeGrower
        p = self.params
        if p.solver == "liblinear":
            from xmlkit import _liblinear
            _liblinear.bind()
        Xg = _as_training_csr(X, "features", self.n_features_in_)
        Yg = _as_training_csr(self._label_values(Y), "labels", self.n_labels_)
        # the largest nodes (roots, and their children from ~65k points) are
        # separated together while they hold at most the training points
        # (times half the threads from 4 on): see LargeNodeGate
        gate = LargeNodeGate(Xg.shape[0], max(1, p.threads // 2))

        def grower(crew=None):
            return TreeGrower(Xg, Yg, NdcgPartition(self.use_idcg),
                              NodeSeparator(p.bias, p.log_loss_coeff, p.solver,
                                            eps=p.tol, max_newton=p.max_newton,
                                            max_newton_small=p.max_newton_small,
                                            small_node=p.small_node,
                                            warm=p.init == "warm"),
                              max_leaf=p.max_leaf, labels_per_leaf=p.labels_per_leaf,
                              gate=gate, crew=crew)
        return grower

    def tree_grower(self, X, Y):
        """grow(t) -> tree, one tree at a time on the calling thread with one
        grower (and its buffers) kept between trees: what a Dask worker
        holds between its tasks (xmlkit.cluster)."""
        g = self._growers(X, Y)()
        seed = self.params.seed
        return lambda t: g.grow(seed, t)

    def _grow_threads(self, todo, after, grower):
        """Trees on `threads` threads, each with a grower of its own (trees
        are grown without the GIL). The growers form a crew: a thread left
        without a tree (fewer trees left than threads, or fewer trees than
        threads from the start) grows nodes of the trees still growing.
        The trees are the same either way (see TreeGrower._grow)."""
        from xmlkit._ext.fastxml_tree import Crew
        seed = self.params.seed
        threads = self.params.threads
        if threads == 1:
            yield from _grow_pipelined(seed, todo, after, grower())
            return
        crew = Crew(len(todo))
        idle = queue.SimpleQueue()
        for _ in range(threads):
            idle.put(grower(crew))

        def task(t):
            g = idle.get()
            try:
                if t is None:           # (queued after every tree: a helper)
                    g.help()
                    return None
                return _grow_one(seed, t, after, g)
            finally:
                idle.put(g)
        pool = ThreadPoolExecutor(threads)
        try:
            for done in _completed(lambda t: pool.submit(task, t),
                                   [*todo, *[None] * (threads - 1)], 2 * threads):
                if done is not None:
                    yield done
        finally:
            # (on an error or interrupt, trees still growing are not waited for)
            crew.stop()
            pool.shutdown(wait=False, cancel_futures=True)

    def _grow_forked(self, todo, after, grower):
        """liblinear: trees in forked worker processes (see the module doc)."""
        global _GROWER
        seed = self.params.seed
        workers = min(self.params.threads, len(todo))
        _GROWER = grower()
        try:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor
            if workers == 1 or "fork" not in multiprocessing.get_all_start_methods():
                for t in todo:
                    yield _grow_one(seed, t, after)
                return
            ctx = multiprocessing.get_context("fork")
            pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_die_with,
                                       initargs=(os.getpid(),))
            try:
                yield from _completed(lambda t: pool.submit(_grow_one, seed, t, after),
                                      todo, 2 * workers)
            finally:
                pool.shutdown(wait=False, cancel_futures=True)
        finally:
            _GROWER = None

    def _check_more(self):
        check_tree_range(self)

    @classmethod
    def from_manifest(cls, manifest, folder="the model"):
        # folders written before the solver was a parameter hold liblinear trees
        params = manifest["params"]
        if "solver" not in params:
            params = {**params, "solver": "liblinear"}
        # and those written before tol, max_newton (init, max_newton_small,
        # small_node) were, the C++ tool's rules: no cap on small nodes
        # (small_node 0, whatever max_newton the folder holds)
        manifest = {**manifest, "params": {"tol": CPP_TOL, "max_newton": CPP_MAX_NEWTON,
                                           "max_newton_small": CPP_MAX_NEWTON_SMALL,
                                           "small_node": 0, "init": CPP_INIT,
                                           **params}}
        return super().from_manifest(manifest, folder)

    # -- prediction
    def forest(self):
        """The trees for prediction (Forest: one kernel over the trees'
        arrays where they lie), kept for as long as the same tree objects
        are asked for (fit and load replace them)."""
        trees = trees_key(getattr(self, "trees_", None))
        cached = getattr(self, "_forest", None)
        if cached is not None and same_trees(cached[0], trees):
            return cached[1]
        self._require_whole_trees()
        with _FOREST_LOCK:          # (one forest, whose trees are checked once)
            cached = getattr(self, "_forest", None)
            if cached is None or not same_trees(cached[0], trees):
                picked = [self.trees_[t] for t in sorted(self.trees_)]
                cached = self._forest = (trees, Forest(picked, self.n_features_in_,
                                                       self.n_labels_, self.params.bias))
        return cached[1]

    def verify(self, threads=1):
        """Check every tree read from a mapped file whole now (the blocks of
        its file not checked yet: digest and contents), on `threads`
        threads; predict checks only the blocks it reads, as it reads them.
        Raises XmlkitError naming a damaged file. Returns self."""
        self.forest().check(threads)
        return self

    def predict(self, X, k=5, threads=1, progress=None, decision=None, threshold=None):
        """Scores (csr N×L): the mean over trees of the reached leaves'
        distributions; the k best labels per row (k=None: every score).
        Returns a :class:`~xmlkit.csr.Rows` for a Rows, else a scipy csr_matrix.
        decision, threshold: scores only (label sets: xmlkit.Calibrated)."""
        self._predict_params(decision=decision, threshold=threshold)
        return like(X, self.forest().predict(X, k, threads, progress))

    def predict_pieces(self, X, k=5, threads=1, progress=None, finish=None, release=False,
                       decision=None, threshold=None):
        self._predict_params(decision=decision, threshold=threshold)
        finish = finish or (lambda piece: piece)
        for piece in self.forest().predict_pieces(X, k, threads, progress,
                                                  lambda p: finish(like(X, p)), release):
            yield piece

    def _effects(self, R, S, threads, n_top=0, **params):
        """Exact leave-one-feature-out effects (xmlkit.models.forest.tree_effects:
        re-routing only from the nodes where a removal flips the route)."""
        return tree_effects(self.forest(), R, S, threads, n_top)[1:]

    def _scored_effects(self, R, k, threads, n_top=0, **params):
        """The k best labels of each row and their effects in one pass: the
        forest's routes give both."""
        if k is None:
            return super()._scored_effects(R, k, threads, n_top, **params)
        return tree_effects(self.forest(), R, None, threads, n_top, k=k)

    # -- the tree files (written by xmlkit.driver and models.folders, read by the latter)
    @staticmethod
    def _encode_tree(tree, compact=False):
        return encode_tree(tree, compact=compact, lazy=True)

    def _decode_tree(self, arrays, name):
        return decode_tree(arrays, name, self.n_features_in_, self.n_labels_)

    def stats(self):
        return tree_stats(list(self.trees_.values()))
