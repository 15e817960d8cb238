"""The tree families' side of the folder protocol (`TreeEnsemble`): one
file per tree in the model folder (`tree_name`, `stored_trees`), the trees
as the parts that are grown, kept, resumed and shipped to workers."""
from itertools import chain
from operator import is_, methodcaller

import numpy as np

from xmlkit import store
from xmlkit.errors import InvalidParameterError, XmlkitError
from xmlkit.models.base import C_INT_MAX, RANKED_DECISION, check_ranked_decision
from xmlkit.models.family import ModelBase

_VALUES = methodcaller("values")

#: the array of a tree file holding the model's (n_features, n_labels)
TREE_DIMS = "dims"


def tree_name(t):
    return f"tree_{t:05d}"


def stored_trees(folder, manifest=None):
    """Indices of the trees of an xmlkit model folder, ascending: those its
    manifest records, or (a version 1 manifest, or none given) the tree
    files in the folder."""
    names = store.listed(manifest, "tree_") if manifest is not None else None
    if names is None:
        names = store.array_names(folder, "tree_")
    return sorted(int(n.split("_")[1]) for n in names)


def trees_key(trees):
    """What a kernel built over `trees` (index -> dict of arrays) depends on,
    for the prediction caches: the indices and every tree's arrays, as
    objects (see same_trees)."""
    trees = trees or {}
    return tuple(trees), tuple(chain.from_iterable(map(_VALUES, trees.values())))


def same_trees(key, other):
    """Whether two trees_key()s hold the same array objects: compared by
    identity, never by value (an array or a tree replaced through the API is
    another key), at C speed (one document's prediction asks each time)."""
    return key is not None and key[0] == other[0] and len(key[1]) == len(other[1]) and \
        all(map(is_, key[1], other[1]))


def check_tree_range(model):
    """Raise InvalidParameterError unless the trees model.start_tree ..
    start_tree + n_trees - 1 are all tree indices (C ints)."""
    last = model.start_tree + model.n_trees - 1
    if last > C_INT_MAX:
        raise InvalidParameterError(
            "start_tree", f"{type(model).__name__}: start_tree {model.start_tree} with "
                          f"{model.n_trees} trees reaches tree {last}, past the last tree "
                          f"index, {C_INT_MAX}")


class TreeEnsemble(ModelBase):
    """Tree families: fit grows the trees of _wanted_trees() through
    _grow_trees (no I/O: xmlkit.driver trains into folders with the same
    hooks, writing each tree as it is grown), and stores each tree as the
    arrays of _encode_tree, read back by _decode_tree. Their parts (the
    folder protocol, ModelBase) are the trees, by index."""

    RESUMABLE = True
    PICKABLE = True
    PART = "tree"
    DASK_TASKS = True       # (a task per tree)
    PREDICT_PARAMS = dict(RANKED_DECISION)

    def _check_predict(self, given, used):
        check_ranked_decision(type(self).__name__, used)

    # -- the folder protocol
    def part_keys(self):
        return self._wanted_trees()

    def part_file(self, key):
        return tree_name(key)

    def stored_parts(self, folder, manifest=None):
        return stored_trees(folder, manifest)

    def fit_parts(self, X, Y, todo, after=None, progress=None, log=None, executor=None):
        if log:
            log(f"{self.algorithm}: {X.shape[0]} points, {X.shape[1]} features, "
                f"{Y.shape[1]} labels; growing {len(todo)} trees")
        grow = self._grow_trees if executor is None else \
            (lambda *a, **kw: executor.grow_trees(self, *a, **kw))
        for t, tree in grow(X, Y, todo, after=after):
            yield t, tree
            del tree            # (not held while the next tree grows)
            if progress is not None:
                progress(1)

    def encode_part(self, tree, compact=False):
        return {**self._encode_tree(tree, compact), TREE_DIMS: self._tree_dims()}

    def decode_part(self, arrays, name):
        self._check_tree_dims(arrays.get(TREE_DIMS), name)
        return self._decode_tree(arrays, name)

    def parts(self):
        return self.trees_

    def set_parts(self, parts):
        self.trees_ = parts

    def part_kept(self, tree):
        return self.tree_shape(tree)

    def require_whole(self):
        self._require_whole_trees()

    def fit(self, X, Y):
        """Grow the trees (see the class's parameters); returns self."""
        X, Y = self.start_fit(X, Y)
        self.trees_ = {}
        for t, tree in self._grow_trees(X, Y, self._wanted_trees()):
            self.trees_[t] = tree
        self.finish_fit(X, Y)
        return self

    def tree_grower(self, X, Y):
        """grow(t) -> tree t over X, Y on the calling thread, the prepared
        data (and grower) kept between calls: what a Dask worker holds
        between its tree tasks (xmlkit.cluster)."""
        raise NotImplementedError

    def _tree_dims(self):
        """The array each tree file also holds: the model's (n_features,
        n_labels), so that a file is checked against its manifest."""
        return np.array([self.n_features_in_, self.n_labels_], dtype=np.int64)

    def _check_tree_dims(self, dims, name):
        """Raise DamagedModel unless a tree file's `dims` array (None: a file
        written before they were stored) is the model's."""
        from xmlkit.checks import DamagedModel
        if dims is None:
            return
        want = self._tree_dims()
        if dims.shape != want.shape or dims.dtype.kind not in "iu":
            raise DamagedModel(name, f"dims is {dims.dtype} of shape {dims.shape}, "
                                     "expected 2 integers")
        if not np.array_equal(dims, want):
            raise DamagedModel(name, f"the tree was grown for {dims[0]} features and "
                                     f"{dims[1]} labels, the manifest says {want[0]} and "
                                     f"{want[1]}")

    #: the arrays of a tree that fit_folder(keep_trees=False) keeps: its
    #: shape (what stats() and finish_fit read), not its weights or leaves
    SHAPE_KEYS = ()

    def tree_shape(self, tree):
        return {k: tree[k] for k in self.SHAPE_KEYS}

    def _require_whole_trees(self):
        """Raise unless the model holds its trees whole (not only their shapes)."""
        if not getattr(self, "trees_", None):
            raise XmlkitError("the model has no trees (fit or load it first)")
        if len(next(iter(self.trees_.values()))) == len(self.SHAPE_KEYS):
            raise XmlkitError("the model holds only the shapes of its trees (trained "
                              "with fit_folder(keep_trees=False)): load its folder to predict")

    progress_unit = "trees"

    def progress_total(self, n_points, n_labels, X=None):
        """Steps of training's progress callback: the trees."""
        return self.params.n_trees

    def summary(self):
        s = self.stats()
        return (f"{len(self.trees_)} trees, {s['nodes']:.0f} nodes and depth "
                f"{s['max_depth']:.1f} on average")
