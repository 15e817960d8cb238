"""What the model families share: one file per tree in the model folder
(`tree_name`, `stored_trees`), and the manifest / load plumbing of the
common fit / predict / save / load interface (`ModelBase`)."""
import numpy as np

from xmlkit import store
from xmlkit.errors import InvalidParameterError, XmlkitError
from xmlkit.models.base import Estimator


def training_rows(X, Y, min_points=1):
    """Features and labels as Rows, checked: same number of points, at least
    `min_points` of them, finite feature values."""
    from xmlkit.csr import as_rows
    X, Y = as_rows(X, "features"), as_rows(Y, "labels")
    if X.shape[0] != Y.shape[0]:
        raise XmlkitError(f"features have {X.shape[0]} rows but labels {Y.shape[0]}")
    if X.shape[0] < min_points:
        raise XmlkitError(f"at least {min_points} training point(s) needed, got {X.shape[0]}")
    if not np.all(np.isfinite(X.data)):
        raise XmlkitError("features contain NaN or inf")
    return X, Y


def tree_name(t):
    return f"tree_{t:05d}"


def stored_trees(folder):
    """Indices of the trees saved in an xmlkit model folder, ascending."""
    return sorted(int(n.split("_")[1]) for n in store.array_names(folder, "tree_"))


class ModelBase(Estimator):
    """Base of the model families. A subclass sets `algorithm`, its
    parameters (see xmlkit.models.base) and implements fit, predict and save;
    tree ensembles also _load_tree(folder, t), single-file models derive
    from xmlkit.models.arrays.ArrayModel instead."""

    def __init__(self):
        self.trees = {}
        self.n_features = self.n_labels = None

    def manifest(self):
        return store.make_manifest(self.algorithm, self.model_params(),
                                   self.n_features, self.n_labels, self.seed)

    @classmethod
    def from_manifest(cls, manifest, folder="the model"):
        """An unfitted model with the manifest's parameters and shapes."""
        try:
            model = cls(**manifest["params"], seed=manifest["seed"])
            model._validate_params()
        except (TypeError, InvalidParameterError) as exc:
            raise XmlkitError(f"{folder}: the manifest's parameters are invalid ({exc})") from None
        model.n_features, model.n_labels = manifest["n_features"], manifest["n_labels"]
        return model

    @classmethod
    def load(cls, folder, trees=None, threads=1):
        """Load a model folder; `trees` (an iterable of indices) picks a subset."""
        return load_folder(cls, folder, trees, threads)

    @property
    def progress_total(self):
        """Steps of fit's progress callback (trees for tree ensembles)."""
        return self.params.n_trees

    def summary(self):
        s = self.stats()
        return (f"{len(self.trees)} trees, {s['nodes']:.0f} nodes and depth "
                f"{s['max_depth']:.1f} on average")


def load_folder(cls, folder, trees=None, threads=1):
    """A model of class `cls` (with from_manifest and _load_tree) from an
    xmlkit folder: its trees, or the indices `trees`; `threads` read tree
    files in parallel (zlib and numpy release the GIL)."""
    m = store.read_manifest(folder)
    if m["algorithm"] != cls.algorithm:
        raise XmlkitError(f"{folder}: holds a '{m['algorithm']}' model, not '{cls.algorithm}'")
    model = cls.from_manifest(m, folder)
    present = stored_trees(folder)
    wanted = present if trees is None else list(trees)
    missing = sorted(set(wanted) - set(present))
    if missing:
        raise XmlkitError(f"{folder}: has no tree {missing[0]} (it holds "
                          f"{len(present)} trees)")
    if not wanted:
        raise XmlkitError(f"{folder}: holds no trees")
    if threads > 1 and len(wanted) > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(threads) as pool:
            loaded = list(pool.map(lambda t: model._load_tree(folder, t), wanted))
    else:
        loaded = [model._load_tree(folder, t) for t in wanted]
    model.trees.update(zip(wanted, loaded))
    return model
