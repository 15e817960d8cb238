"""The base of every model family (`ModelBase`): the shared members of the
folder protocol of xmlkit.models.protocol (start_fit with the data checks,
manifest, from_manifest), save and load. A tree family derives from
xmlkit.models.tree_family.TreeEnsemble, a model of one matrix file from
xmlkit.models.matrix_family.ArrayModel."""
import numpy as np

from xmlkit import store
from xmlkit.errors import InvalidParameterError, XmlkitError
from xmlkit.checks import training_rows
from xmlkit.models.base import Estimator
from xmlkit.models.protocol import FolderProtocol

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


class ModelBase(Estimator, FolderProtocol):
    """Base of the model families. A subclass sets `algorithm`, its
    parameters (see xmlkit.models.base) and predict (and extends start_fit
    if it needs more than the shared checks); tree families derive from
    TreeEnsemble (xmlkit.models.tree_family), single-file models from
    xmlkit.models.matrix_family.ArrayModel.
    The members the drivers call are declared in
    xmlkit.models.protocol.FolderProtocol, the folder protocol; this class
    gives the shared start_fit, manifest and from_manifest."""

    #: training points fit needs at least
    MIN_POINTS = 1
    #: attributes that cache what the model holds for its kernels (rebuilt
    #: when asked for): not pickled, so a copy or a Dask worker builds its own
    CACHES = ("_forest", "_packed", "_tail", "_leaf_top", "_checked")

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

    #: what explain's contributions are (xmlkit.explanation.KINDS)
    EXPLAIN_KIND = "removal"

    def explain(self, X, k=5, n_features=5, threads=1, labels=None, **params):
        """For each of the k best labels of each row of X, the n_features
        features that moved the label's score most, with their signed
        contributions (EXPLAIN_KIND; see xmlkit.explanation): an
        :class:`~xmlkit.explanation.Explanation` whose scores are predict's
        (params go to predict). `labels` (a sparse matrix or Rows N × L,
        instead of k): the labels to explain, its values the scores to
        report (as predict gave them: a label set, a calibrated row)."""
        from xmlkit.explanation import check_n_features, explained_rows, label_rows, strongest
        from xmlkit.csr import like
        from xmlkit.models.base import usable_threads
        n = check_n_features(n_features)
        threads = usable_threads(threads)
        self._predict_params(**params)
        R = explained_rows(X, self.n_features_in_)
        if labels is None:
            S, entry, feature, effect = self._scored_effects(R, k, threads, n_top=n, **params)
        else:
            S = label_rows(labels, R.shape[0], self.n_labels_)
            entry, feature, effect = self._effects(R, S, threads, n_top=n, **params)
        return strongest(like(X, S), entry, feature, effect, n, self.EXPLAIN_KIND)

    def _scored_effects(self, R, k, threads, n_top=0, **params):
        """(S, entry, feature, contribution): predict's k best labels of the
        rows of R (Rows) and _effects' triples for them (a family may make
        both at once)."""
        from xmlkit.csr import as_rows
        S = as_rows(self.predict(R, k=k, threads=threads, **params), "scores")
        return (S, *self._effects(R, S, threads, n_top=n_top, **params))

    def _effects(self, R, S, threads, n_top=0, **params):
        """(entry of S, feature, contribution) triples for the labels of S
        (Rows: the rows of R's labels to explain), as predict(**params)
        scores them; zeros may be left out, and so may all but a label's
        n_top of largest |contribution| (n_top > 0)."""
        raise NotImplementedError(f"{type(self).__name__} gives no explanations")

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
