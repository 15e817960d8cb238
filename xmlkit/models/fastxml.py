"""FastXML (Prabhu & Varma, KDD 2014), as the original C++ tool (v2) trains it.

Each node splits its points by alternating between two label rankings that
maximise nDCG@L on either side (from a random ±1 start), then fits one
class-balanced L1-regularised logistic regression (liblinear L1R_LR) that
separates the two sides; the children are the sides of that hyperplane. A node
with at most `max_leaf` points is a leaf and keeps the `labels_per_leaf`
largest entries of its mean label vector. Prediction averages the leaves a
point reaches over the trees.

Trees are seeded by (seed, tree index), so a tree is the same whatever the
number of workers; `-T` workers are processes (see xmlkit._ext.fastxml_tree on
why liblinear needs that).
"""
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np

from xmlkit import store
from xmlkit.csr import as_rows, like
from xmlkit.errors import XmlkitError
from xmlkit.models.ensemble import ModelBase, ParamsBase, option, stored_trees, tree_name
from xmlkit.models.forest import (PackedForest, check_tree, decode_tree, encode_tree,
                                  tree_stats)


@dataclass
class FastXMLParams(ParamsBase):
    n_trees: int = option(50, "-t", "--trees", "Number of trees to grow.")
    start_tree: int = option(0, "-s", "--start-tree",
                             "Index of the first tree (train shards of one model separately).")
    threads: int = option(1, "-T", "--threads", "Worker processes growing trees in parallel.")
    bias: float = option(1.0, "-b", "--bias", "Value of the bias feature added to every point.")
    log_loss_coeff: float = option(1.0, "-c", "--log-loss-coeff",
                                   "Cost C of the logistic loss in each node's L1 classifier.")
    max_leaf: int = option(10, "-m", "--max-leaf", "A node with at most this many points is a leaf.")
    labels_per_leaf: int = option(10, "-l", "--labels-per-leaf",
                                  "Labels kept per leaf (paper setting 10; the C++ code's "
                                  "default is 100).")
    seed: int = option(0, None, "--seed", "Random seed; tree t uses a stream derived from "
                                          "(seed, t).")

    #: parameters that define the model (the rest only say how to train it)
    MODEL_KEYS = ("bias", "log_loss_coeff", "max_leaf", "labels_per_leaf")

    def check(self):
        if self.n_trees < 1:
            raise XmlkitError("the number of trees (-t) must be at least 1")
        if self.start_tree < 0:
            raise XmlkitError("the start tree (-s) must not be negative")
        if self.threads < 1:
            raise XmlkitError("the number of threads (-T) must be at least 1")
        if self.max_leaf < 1:
            raise XmlkitError("max leaf (-m) must be at least 1")
        if self.labels_per_leaf < 1:
            raise XmlkitError("labels per leaf (-l) must be at least 1")
        if not self.log_loss_coeff > 0:
            raise XmlkitError("the log-loss coefficient (-c) must be positive")
        if not np.isfinite(self.bias):
            raise XmlkitError("the bias (-b) must be finite")
        self.check_seed()


# Worker state: set in the parent before forking, inherited by the workers.
_GROWER = None


def _grow_one(seed, t, model_dir):
    """Grow tree t and, with a model folder, write it there: in the worker,
    so that compressing the files runs in parallel too."""
    tree = _GROWER.grow(seed, t)
    if model_dir is not None:
        store.save_arrays(model_dir, tree_name(t), encode_tree(tree))
    return t, tree


def _as_training_csr(M, name, dtype=np.float32):
    R = as_rows(M, name, dtype)
    if R.nnz and not np.all(np.isfinite(R.data)):
        raise XmlkitError(f"{name} contain NaN or inf")
    return R.indptr.astype(np.int64), R.indices, R.data


class FastXML(ModelBase):
    """FastXML tree ensemble: ``FastXML(n_trees=50, ...).fit(X, Y)``, then
    ``predict(X, k)`` → csr scores. X: csr N×D features, Y: csr N×L labels."""

    algorithm = "fastxml"
    Params = FastXMLParams
    use_idcg = True


    # -- training
    def _label_values(self, Y):
        """Label values the splits and leaves work on (PfastreXML reweights them)."""
        return Y

    def fit(self, X, Y, model_dir=None, progress=None, log=None):
        """Grow trees start_tree .. start_tree+n_trees-1.

        With `model_dir`, each tree is written there as soon as it is grown, and
        trees already in the folder (same settings) are loaded, not regrown:
        an interrupted run resumes, and shards grown elsewhere merge by copying
        their tree files into one folder.
        """
        from xmlkit import _liblinear
        from xmlkit._ext.fastxml_tree import TreeGrower
        global _GROWER
        p = self.params
        if X.shape[0] != Y.shape[0]:
            raise XmlkitError(f"features have {X.shape[0]} rows but labels {Y.shape[0]}")
        if X.shape[0] == 0:
            raise XmlkitError("no training points")
        self.n_features, self.n_labels = int(X.shape[1]), int(Y.shape[1])
        wanted = range(p.start_tree, p.start_tree + p.n_trees)
        todo = list(wanted)
        if model_dir is not None:
            store.prepare_folder(model_dir, self.manifest())
            done = set(stored_trees(model_dir))
            for t in wanted:
                if t in done:
                    self.trees[t] = self._load_tree(model_dir, t)
            todo = [t for t in wanted if t not in self.trees]
            if log and len(todo) < len(wanted):
                log(f"{len(wanted) - len(todo)} of the trees are already in {model_dir}; "
                    f"growing {len(todo)}")
        if log:
            log(f"{self.algorithm}: {X.shape[0]} points, {X.shape[1]} features, "
                f"{Y.shape[1]} labels; growing {len(todo)} trees")
        if not todo:
            return self
        _liblinear.bind()
        Yv = self._label_values(Y)
        xp, xi, xv = _as_training_csr(X, "features")
        yp, yi, yv = _as_training_csr(Yv, "labels")
        _GROWER = TreeGrower(xp, xi, xv, yp, yi, yv, self.n_features, self.n_labels,
                             p.max_leaf, p.labels_per_leaf, p.bias, p.log_loss_coeff,
                             self.use_idcg)
        try:
            for t, tree in self._grow(todo, model_dir):
                self.trees[t] = tree
                if progress is not None:
                    progress(1)
        finally:
            _GROWER = None
        return self

    def _grow(self, todo, model_dir):
        seed = self.params.seed
        workers = min(self.params.threads, len(todo))
        if workers == 1 or "fork" not in multiprocessing.get_all_start_methods():
            for t in todo:
                yield _grow_one(seed, t, model_dir)
            return
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            futures = [pool.submit(_grow_one, seed, t, model_dir) for t in todo]
            for f in as_completed(futures):
                yield f.result()

    # -- prediction
    def forest(self, trees=None):
        if not self.trees:
            raise XmlkitError("the model has no trees (fit or load it first)")
        keys = sorted(self.trees) if trees is None else list(trees)
        # Packing costs 10-60 ms for 50 trees: keep the last one for as long
        # as the same tree objects are asked for (fit and load replace them).
        # The cache holds the tree dicts themselves, so identity is safe to test.
        picked = [self.trees[t] for t in keys]
        cached = getattr(self, "_packed", None)
        if cached is None or len(cached[0]) != len(picked) or \
                any(a is not b for a, b in zip(cached[0], picked)):
            cached = (picked, PackedForest(picked, self.n_features, self.n_labels,
                                           self.params.bias))
            self._packed = cached
        return cached[1]

    def predict(self, X, k=None, threads=1, progress=None):
        """Scores (csr N×L): the mean over trees of the reached leaves'
        distributions; only the k best labels per row when k is given.
        Returns a :class:`~xmlkit.csr.Rows` for a Rows, else a scipy csr_matrix."""
        return like(X, self.forest().predict(X, k, threads, progress))

    # -- storage
    def save(self, folder):
        """Write the model folder (manifest + one .npz per tree)."""
        store.prepare_folder(folder, self.manifest())
        for t, tree in self.trees.items():
            store.save_arrays(folder, tree_name(t), encode_tree(tree))
        return folder

    def _load_tree(self, folder, t):
        name = os.path.join(str(folder), tree_name(t) + ".npz")
        tree = decode_tree(store.load_arrays(folder, tree_name(t)), name)
        check_tree(tree, self.n_features, self.n_labels, name)
        return tree

    def stats(self):
        return tree_stats(list(self.trees.values()))
