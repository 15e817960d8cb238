"""What the model families share: their base (`ModelBase`, which gives the
folder protocol of xmlkit.models.protocol its shared members), one file
per tree in the model folder (`tree_name`, `stored_trees`) and the tree
families' side of the protocol (`TreeEnsemble`; the single-file models'
is xmlkit.models.arrays)."""
import numpy as np

from xmlkit import store
from xmlkit.errors import InvalidParameterError, XmlkitError
from xmlkit.checks import training_rows
from xmlkit.models.base import Estimator
from xmlkit.models.protocol import FolderProtocol

#: the array of a tree file holding the model's (n_features, n_labels)
TREE_DIMS = "dims"


#: bytes per feature and label that training and prediction hold per thread
#: at least (scores, marks, gradients): what is required to be available
#: before they start (xmlkit._memory.require_memory)
PER_THREAD_BYTES = 16


def data_digest(X, Y):
    """The digest of training data X, Y (Rows): XXH64 over their shapes and
    arrays, as 16 hex digits. A model folder's manifest records it, so that
    parts grown from other data are not adopted into it (xmlkit.store)."""
    from xmlkit._ext.file_check import xxh64
    h = int(xxh64(np.array([*X.shape, *Y.shape], dtype=np.int64)), 16)
    # (in fixed types: the same data read as a file or given as a matrix)
    for a, kind in ((X.indptr, "<i8"), (X.indices, "<i4"), (X.data, "<f4"),
                    (Y.indptr, "<i8"), (Y.indices, "<i4"), (Y.data, "<f4")):
        a = np.ascontiguousarray(a, dtype=kind)
        h = int(xxh64(a.view(np.uint8) if a.size else b"", h), 16)
    return f"{h:016x}"


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


class ModelBase(Estimator, FolderProtocol):
    """Base of the model families. A subclass sets `algorithm`, its
    parameters (see xmlkit.models.base) and predict (and extends start_fit
    if it needs more than the shared checks); tree families derive from
    TreeEnsemble, single-file models from xmlkit.models.arrays.ArrayModel.
    The members the drivers call are declared in
    xmlkit.models.protocol.FolderProtocol, the folder protocol; this class
    gives the shared start_fit, manifest and from_manifest."""

    #: training points fit needs at least
    MIN_POINTS = 1
    #: attributes that cache what the model holds for its kernels (rebuilt
    #: when asked for): not pickled, so a copy or a Dask worker builds its own
    CACHES = ("_forest", "_packed", "_tail")

    def __getstate__(self):
        state = dict(self.__dict__)
        for name in self.CACHES:
            state.pop(name, None)
        return state

    def predict_pieces(self, X, finish=None, release=False, **kwargs):
        """predict(X, **kwargs) as consecutive row pieces, for a caller that
        writes each as it comes (xml-predict), each passed through
        finish(piece) when given (on the thread that made it: xml-predict
        formats them there): one piece, unless the family scores blocks of
        rows on its threads (the forests; release: see
        xmlkit.models.forest.Forest.predict_pieces)."""
        S = self.predict(X, **kwargs)
        yield S if finish is None else finish(S)

    def start_fit(self, X, Y):
        """Check the parameters and the data (as Rows, at least MIN_POINTS
        points, finite features); set the shapes. Returns X, Y."""
        self._validate_params()
        X, Y = training_rows(X, Y, min_points=self.MIN_POINTS)
        self.n_features_in_, self.n_labels_ = int(X.shape[1]), int(Y.shape[1])
        self.predict_params_ = self.predict_defaults()
        # (every family holds arrays of D + L values per thread while training)
        from xmlkit._memory import require_memory
        threads = getattr(self.params, "threads", 1)
        require_memory(PER_THREAD_BYTES * threads * (X.shape[1] + Y.shape[1]),
                       f"training on D = {X.shape[1]} features and L = {Y.shape[1]} labels "
                       f"with {threads} thread(s)", "; fewer threads may help"
                       if threads > 1 else "")
        self.data_digest_ = data_digest(X, Y)
        return X, Y

    def manifest(self):
        recorded = getattr(self, "predict_params_", None)
        return store.make_manifest(self.algorithm, self.model_params(),
                                   self.n_features_in_, self.n_labels_, self.seed,
                                   self.predict_defaults() if recorded is None else recorded,
                                   getattr(self, "data_digest_", None))

    @classmethod
    def from_manifest(cls, manifest, folder="the model"):
        """An unfitted model with the manifest's parameters and shapes."""
        try:
            model = cls(**manifest["params"], seed=manifest["seed"])
            model._validate_params()
        except (TypeError, InvalidParameterError) as exc:
            raise XmlkitError(f"{folder}: the manifest's parameters are invalid ({exc})") from None
        model.n_features_in_, model.n_labels_ = manifest["n_features"], manifest["n_labels"]
        model.predict_params_ = cls._checked_predict_params(manifest.get("predict_params"),
                                                            folder)
        model.data_digest_ = manifest.get("data")
        return model

    @classmethod
    def load(cls, folder, trees=None, threads=1):
        """Load a model folder (see xmlkit.models.folders.load_folder)."""
        from xmlkit.models.folders import load_folder
        return load_folder(cls, folder, trees, threads)

    def save(self, folder):
        """Write the model folder (see xmlkit.models.folders.save_folder)."""
        from xmlkit.models.folders import save_folder
        return save_folder(self, folder)


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

    def progress_total(self, n_points, n_labels):
        """Steps of training's progress callback: the trees."""
        return self.params.n_trees

    def summary(self):
        s = self.stats()
        return (f"{len(self.trees_)} trees, {s['nodes']:.0f} nodes and depth "
                f"{s['max_depth']:.1f} on average")
