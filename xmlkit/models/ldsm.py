"""LdSM: logarithm-depth streaming multi-label trees (Majzoubi & Choromanska,
AISTATS 2020), as the authors' code trains them.

Each internal node has M children and M linear regressors. Its points are
streamed `epochs` times; for each point the best non-empty subset of children
under the node objective (balance + lambda1 * multi-way penalty - lambda2 *
class integrity, on running estimates) is the target of one normalized
adaptive gradient step of every regressor (logistic loss; AdaGrad's sums
start at `adagrad_prior`, not 0, so that a rare feature's first steps are
damped: with 0, as in the authors' code, the regressors learn the training
points' rare words, route them into leaves that hold their own labels, and
send new points elsewhere). The node then
routes its points to every child whose margin is >= route_threshold (else to
the best child); a split where a child gets no point or all of them is
rejected and the node trained again with lambda2 halved, quartered, then 0
(on data where every point carries the frequent labels the objective
otherwise prefers no split at all). Nodes are grown best-first (priority =
label-histogram sum minus its maximum) until `max_nodes`.

Dense data (at least half of the feature entries non-zero, e.g. audio or
image descriptors) are standardised feature by feature (zero mean, unit
variance on the training points) before growing and routing: on
non-negative, unnormalised features every regressor otherwise sends all
points the same way. Sparse data (bag-of-words, tf-idf) are used as given.
Leaves keep, for each label, the share of their points that carry it (the
authors' code normalizes the histogram to sum 1, which lowers every score of
a leaf whose points carry many labels, so that the trees' scores do not
average well: results/ldsm.md scores the same trees both ways);
prediction averages them over the reached leaves, then over the trees.

Trees are seeded by (seed, tree index) and grown without the GIL by
`threads` threads, so the model does not depend on the thread count.
"""
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from xmlkit import checks
from xmlkit.csr import dense_rows, like, model_rows, score_rows, with_bias
from xmlkit.errors import XmlkitWarning
from xmlkit.models.base import (MAX_TREES, SEED, auto_or, boolean, integer, real,
                                usable_threads)
from xmlkit.models.tree_family import TREE_DIMS, TreeEnsemble, same_trees, trees_key

# LdSM regressors are far denser than FastXML's separators, most of all near
# the roots. A dense copy costs
# a row of D floats once and pays back over the points that visit the node:
# copies go to regressors of at least D/4 entries in the top DENSE_DEPTH
# levels, which all points cross (a node at depth k sees ~1/2^k of them).
DENSE_FRACTION = 4
DENSE_DEPTH = 6

#: max_nodes="auto": this many nodes per training point, at least MIN_AUTO_NODES
#: (leaves of up to max_leaf points need ~2N/max_leaf nodes without copies;
#: points sent down several branches take more)
AUTO_NODES_PER_POINT = 1
MIN_AUTO_NODES = 2000

DENSE_DATA = 0.5      # share of non-zero feature entries above which data are dense
SCALING = "feature_scaling"

TREE_KEYS = ("first_child", "depth", "reg_row", "reg_ptr", "reg_idx", "reg_val", "l_ptr",
             "l_idx", "l_val")


def dense_scaling(X):
    """(mean, scale) standardising every feature of dense data X (at least
    DENSE_DATA of its entries non-zero; scale 1 for a constant feature), or
    None for sparse data."""
    n, d = X.shape
    if n == 0 or d == 0 or X.nnz < DENSE_DATA * n * d:
        return None
    sums = np.bincount(X.indices, weights=X.data, minlength=d)
    squares = np.bincount(X.indices, weights=np.square(X.data, dtype=np.float64), minlength=d)
    mean = sums / n
    std = np.sqrt(np.maximum(squares / n - mean ** 2, 0.0))
    scale = np.ones(d)
    varies = std > 1e-12 * np.maximum(1.0, np.abs(mean))
    scale[varies] = 1.0 / std[varies]
    return mean, scale


def standardised(R, mean, scale):
    """Rows R with every feature standardised: (x - mean) * scale, dense
    (zeros dropped), in blocks of rows."""
    from xmlkit.csr import Rows
    n, d = R.shape
    parts, offset = [np.zeros(1, np.int64)], 0
    idx, val = [], []
    for r0 in range(0, n, 4096):
        r1 = min(n, r0 + 4096)
        block = np.zeros((r1 - r0, d))
        rows = np.repeat(np.arange(r1 - r0), np.diff(R.indptr[r0:r1 + 1]))
        lo, hi = R.indptr[r0], R.indptr[r1]
        block[rows, R.indices[lo:hi]] = R.data[lo:hi]
        block = ((block - mean) * scale).astype(np.float32)
        r, c = np.nonzero(block)
        parts.append(np.cumsum(np.bincount(r, minlength=r1 - r0)) + offset)
        offset += len(r)
        idx.append(c.astype(np.int32))
        val.append(block[r, c])
    return Rows(np.concatenate(parts), np.concatenate(idx) if idx else np.zeros(0, np.int32),
                np.concatenate(val) if val else np.zeros(0, np.float32), (n, d))


class LdSM(TreeEnsemble):
    """LdSM tree ensemble: ``LdSM(n_trees=5, ...).fit(X, Y)``, then
    ``predict(X, k)``. X: sparse N×D features, Y: sparse N×L labels."""

    algorithm = "ldsm"
    _parameter_constraints = {
        "n_trees": integer(1, MAX_TREES), "threads": integer(1), "arity": integer(2, 8),
        "max_nodes": auto_or(integer(1)), "max_leaf": integer(1), "epochs": integer(1),
        "lr": real(0, lo_open=True), "adagrad_prior": real(0),
        "lambda1": real(), "lambda2": real(), "route_threshold": real(), "bias": real(),
        "scale_dense": boolean(), "seed": SEED,
    }
    SHAPE_KEYS = ("first_child", "depth", "l_ptr")
    PARAM_GROUPS = (
        ("Tree", ("n_trees", "arity", "max_nodes", "max_leaf", "route_threshold")),
        ("Solver", ("epochs", "lr", "adagrad_prior", "lambda1", "lambda2", "bias",
                    "scale_dense")),
        ("Run", ("threads", "seed")),
    )
    MODEL_KEYS = ("arity", "max_nodes", "max_leaf", "epochs", "lr", "adagrad_prior", "lambda1",
                  "lambda2", "route_threshold", "bias", "scale_dense")

    def __init__(self, *, n_trees=16, arity=2, max_nodes="auto", max_leaf=10, route_threshold=0.5,
                 epochs=3, lr=0.1, adagrad_prior=1.0, lambda1=1.0, lambda2=4.0, bias=1.0,
                 scale_dense=True, threads=1, seed=0):
        """
        Tree parameters
        ---------------
        n_trees : number of trees to grow.
        arity : children per node (M), 2 to 8.
        max_nodes : node budget of a tree; "auto": AUTO_NODES_PER_POINT
            times the number of training points (at least MIN_AUTO_NODES), a
            guard against runaway growth that trees normally stop before. A
            fitted model records the number "auto" stood for; a tree the
            budget stopped is reported (XmlkitWarning).
        max_leaf : a node with at most this many points is a leaf (1: split
            down to single points, as the authors' code does).
        route_threshold : a point goes to every child whose regressor margin
            is at least this (else to the best child).

        Solver parameters
        -----------------
        epochs : passes over a node's points to train its regressors.
        lr : learning rate of the normalized adaptive SGD.
        adagrad_prior : a weight's sum of squared gradients starts at this
            (in units of its feature's largest value squared), so that a
            feature met by one or two points takes a damped step, not a
            full one (0: the authors' code; docs/algorithms.md).
        lambda1 : weight of the multi-way penalty in the node objective.
        lambda2 : weight of the class-integrity term in the node objective
            (the authors' code: 2; 4 keeps leaves purer where labels are
            many: docs/algorithms.md).
        bias : value of the bias feature added to every point.
        scale_dense : standardise the features of dense training data (at
            least half of the entries non-zero) before growing and routing.

        Run parameters
        --------------
        threads : trees grown in parallel (threads).
        seed : random seed; tree t draws from a stream derived from (seed, t).
        """
        self.n_trees = n_trees
        self.threads = threads
        self.arity = arity
        self.max_nodes = max_nodes
        self.max_leaf = max_leaf
        self.epochs = epochs
        self.lr = lr
        self.adagrad_prior = adagrad_prior
        self.lambda1 = lambda1
        self.lambda2 = lambda2
        self.route_threshold = route_threshold
        self.bias = bias
        self.scale_dense = scale_dense
        self.seed = seed

    @staticmethod
    def auto_nodes(n_points):
        return max(MIN_AUTO_NODES, AUTO_NODES_PER_POINT * n_points)

    def _settings(self, n_points):
        """The parameters with "auto" replaced by what it stands for on
        n_points training points (fit keeps them as `settings_`, which the
        model folder records)."""
        p = self.params
        if p.max_nodes == "auto":
            p.max_nodes = self.auto_nodes(n_points)
        return p

    # -- training
    def _wanted_trees(self):
        return list(range(self.n_trees))

    def start_fit(self, X, Y):
        X, Y = super().start_fit(X, Y)
        self.settings_ = self._settings(X.shape[0])
        self.feature_scaling_ = dense_scaling(X) if self.scale_dense else None
        return X, Y

    def _features(self, R):
        """The features the trees see: R standardised when the model scales."""
        scaling = getattr(self, "feature_scaling_", None)
        if scaling is None:
            return R
        from xmlkit.csr import Rows
        R = Rows(R.indptr, R.indices, R.data, (R.shape[0], self.n_features_in_))
        return standardised(R, *scaling)

    def finish_fit(self, X, Y):
        p = self.settings_
        full = sum(len(t["first_child"]) > p.max_nodes - p.arity for t in self.trees_.values())
        if full:
            warnings.warn(f"LdSM: {full} of {len(self.trees_)} trees reached the node budget "
                          f"(max_nodes {p.max_nodes}) and stopped growing there",
                          XmlkitWarning, stacklevel=3)
        if p.max_nodes < p.arity + 1 or X.shape[0] <= p.max_leaf:
            return                          # the budget or the leaf size allows no split
        flat = sum(len(t["first_child"]) == 1 and t["l_ptr"][1] >= 2
                   for t in self.trees_.values())
        if flat:
            warnings.warn(f"LdSM: {flat} of {len(self.trees_)} trees could not split their "
                          "root (every trained split sent all points to one child); their "
                          "scores are the label prior", XmlkitWarning, stacklevel=3)

    def extra_arrays(self):
        """With scale_dense: the standardisation (empty arrays for sparse
        training data, which are not scaled)."""
        if not self.scale_dense:
            return {}
        mean, scale = self.feature_scaling_ or (np.zeros(0), np.zeros(0))
        return {SCALING: {"mean": mean, "scale": scale}}

    def restore_extras(self, read, where):
        self.feature_scaling_ = None
        if not self.scale_dense:
            return
        name = f"{where}/{SCALING}.npz"
        a = read(SCALING)
        checks.need(a, ("mean", "scale"), name)
        n = len(a["mean"])
        if n:
            D = self.n_features_in_
            scale = checks.floats(a["scale"], name, "scale", (D,))
            if np.any(scale <= 0):
                raise checks.DamagedModel(name, "scale holds values <= 0")
            self.feature_scaling_ = (checks.floats(a["mean"], name, "mean", (D,)), scale)
        else:
            checks.floats(a["scale"], name, "scale", (0,))

    @classmethod
    def from_manifest(cls, manifest, folder="the model"):
        # folders written before scale_dense / max_leaf / adagrad_prior existed
        # were not scaled, split nodes down to single points and started
        # AdaGrad's sums at 0
        params = {"scale_dense": False, "max_leaf": 1, "adagrad_prior": 0.0,
                  **manifest["params"]}
        manifest = {**manifest, "params": params}
        return super().from_manifest(manifest, folder)

    def _grow_trees(self, X, Y, todo, after=None):
        """Grow the trees `todo` (threads grow different trees), yielding
        (t, tree) in order; after(t, tree) runs in the worker thread."""
        if not todo:
            return
        p = self.params
        grow_one = self.tree_grower(X, Y)

        def grow(t):
            tree = grow_one(t)
            if after is not None:
                after(t, tree)
            return t, tree
        pool = ThreadPoolExecutor(min(p.threads, len(todo)))
        try:
            yield from pool.map(grow, todo)
        finally:
            # (on an error or interrupt, trees still growing are not waited for)
            pool.shutdown(wait=False, cancel_futures=True)

    def tree_grower(self, X, Y):
        """grow(t) -> tree over X, Y (the training data are prepared once;
        threads may share it)."""
        from xmlkit._ext.ldsm_tree import LdsmBuild, LdsmData
        p = self.settings_
        xp, xi, xv = with_bias(self._features(X), p.bias)
        data = LdsmData(xp, xi, xv, Y.indptr.astype(np.int64), Y.indices,
                        self.n_features_in_ + 1, self.n_labels_)

        def grow(t):
            b = LdsmBuild(p.arity, p.max_nodes, p.max_leaf, p.epochs, p.lr, p.lambda1,
                          p.lambda2, p.route_threshold, p.adagrad_prior)
            return b.grow(data, p.seed, t)
        return grow

    # -- prediction
    def _kernel(self, threads=1):
        """The kernel over the trees, kept while they are the same objects:
        each tree's arrays where they lie, with dense copies of its long
        regressor rows (made tree by tree, on `threads` threads), and the
        forest's label marginal."""
        threads = usable_threads(threads)
        from xmlkit._ext.ldsm_predict import LdsmKernel
        trees = trees_key(self.trees_)
        cached = getattr(self, "_packed", None)
        if cached is not None and same_trees(cached[0], trees):
            return cached[1]
        picked = [self.trees_[t] for t in sorted(self.trees_)]
        d, M = self.n_features_in_ + 1, self.params.arity

        def prepare(tree):
            dense_id, dense = dense_regressors(tree, d, M)
            return {**tree, "dense_id": dense_id, "dense": dense}
        if threads > 1 and len(picked) > 1:
            with ThreadPoolExecutor(min(threads, len(picked))) as pool:
                ready = list(pool.map(prepare, picked))
        else:
            ready = [prepare(t) for t in picked]
        fill = label_marginal(np.concatenate([t["l_idx"] for t in picked]),
                              np.concatenate([t["l_val"] for t in picked]), self.n_labels_)
        kernel = LdsmKernel(ready, *fill, M, d, self.bias, self.n_labels_,
                            self.route_threshold)
        self._packed = (trees, kernel)
        return kernel

    def predict(self, X, k=5, threads=1, progress=None, decision=None, threshold=None):
        """Scores: per tree the mean of the reached leaves' normalized
        histograms, averaged over trees; the k best per row (k=None: all).
        Rows in, Rows out; else a scipy csr_matrix. decision, threshold:
        scores only (label sets: xmlkit.Calibrated)."""
        self._predict_params(decision=decision, threshold=threshold)
        self._require_whole_trees()
        R = model_rows(X, self.n_features_in_)
        kernel = self._kernel(threads)
        n = R.shape[0]
        topk = 0 if k is None else int(k)

        F = self._features(R)

        def run(r0, r1):
            return kernel.predict_rows(F, r0, r1, topk)
        return like(X, score_rows(run, n, self.n_labels_, threads, progress))

    def _effects(self, R, S, threads, n_top=0, **params):
        """Exact leave-one-feature-out effects, by scoring each row once per
        feature without it (every label's score, no fill from the label
        marginal: a filled label owes nothing to a feature). A route here
        may take several children at a node, and their set can change with
        any feature of a regressor: the rows are scored again whole (about
        the row's non-zeros times a prediction)."""
        from xmlkit.explanation import removal_effects
        return removal_effects(
            lambda rows: self.predict(rows, k=None, threads=threads, **params), R, S)

    # -- the tree files (written by xmlkit.driver and models.folders, read by the latter)
    @staticmethod
    def _encode_tree(tree, compact=False):
        return tree

    def _decode_tree(self, arrays, name):
        tree = {k: arrays[k] for k in arrays if k != TREE_DIMS}
        check_tree(tree, self.arity, self.n_features_in_, self.n_labels_, name)
        return tree

    def stats(self):
        trees = list(self.trees_.values())
        return {"nodes": float(np.mean([len(t["first_child"]) for t in trees])),
                "leaves": float(np.mean([(t["first_child"] < 0).sum() for t in trees])),
                "max_depth": float(np.mean([t["depth"].max() for t in trees]))}



def dense_regressors(tree, d, M):
    """(dense_id, dense) of a tree's regressor rows (see csr.dense_rows): dense
    copies of the rows of at least d / DENSE_FRACTION entries in the top
    DENSE_DEPTH levels."""
    rows = len(tree["reg_ptr"]) - 1
    row_depth = np.zeros(rows, np.int64)
    internal = np.flatnonzero(tree["reg_row"] >= 0)
    for j in range(M):
        row_depth[tree["reg_row"][internal] + j] = tree["depth"][internal]
    return dense_rows(tree["reg_ptr"], tree["reg_idx"], tree["reg_val"], d, DENSE_FRACTION,
                      row_depth <= DENSE_DEPTH)


def label_marginal(l_idx, l_val, n_labels):
    """The labels of the leaves' histograms by their sum, descending (ties to
    the lower label), and those sums over the largest: what rows with fewer
    than k labels are filled from."""
    mass = np.bincount(l_idx, weights=l_val, minlength=n_labels)
    order = np.argsort(-mass, kind="stable")
    order = order[mass[order] > 0]
    top = mass[order[0]] if len(order) else 1.0
    return order.astype(np.int32), (mass[order] / top).astype(np.float32)


def check_tree(tree, M, n_features, n_labels, name):
    """Validate a stored LdSM tree completely, so that prediction can trust
    it: shapes, children after their parent and in range, M regressor rows
    per internal node, index pointers, indices in range, finite values."""
    checks.need(tree, ("first_child", "depth", "reg_row", "reg_ptr", "reg_idx", "reg_val",
                "l_ptr", "l_idx", "l_val"), name)
    fc = checks.ints(tree["first_child"], name, "first_child").astype(np.int64)
    n = len(fc)
    if fc.ndim != 1 or n == 0:
        raise checks.DamagedModel(name, "first_child is not a non-empty vector")
    checks.ints(tree["depth"], name, "depth", (n,))
    rr = checks.ints(tree["reg_row"], name, "reg_row", (n,)).astype(np.int64)
    rows = len(tree["reg_ptr"]) - 1
    internal = fc >= 0
    if not (np.all(fc[internal] > np.flatnonzero(internal)) and np.all(fc[internal] + M <= n)
            and np.all(fc[~internal] == -1) and np.all(rr[~internal] == -1)
            and np.all(rr[internal] >= 0)
            and np.all(rr[internal] + M <= rows)):
        raise checks.DamagedModel(name, "child links or regressor rows do not form a tree")
    checks.csr(tree["reg_ptr"], tree["reg_idx"], tree["reg_val"], rows, n_features + 1, name,
               "regressor")
    checks.csr(tree["l_ptr"], tree["l_idx"], tree["l_val"], n, n_labels, name, "leaf label")
