"""PfastreXML (Jain, Prabhu & Varma, KDD 2016), as the original C++ tool trains it.

FastXML trees grown on propensity-weighted labels (y_il * q_l, q the inverse
propensities) with the unnormalised DCG split objective, plus a tail
classifier per label: the centroid mu_l of the unit-length training points
(bias included) carrying the label. Prediction keeps the `rerank` best tree
scores of a point and re-ranks them with s^alpha * t^(1 - alpha),
t = 1 / (1 + exp(gamma * ||x^ - mu_l||^2)). With trees_only (-S 1) the tail
classifiers are skipped: PfastXML.
"""
import hashlib
from dataclasses import dataclass

import numpy as np

from xmlkit import store
from xmlkit.csr import Rows, as_rows, like
from xmlkit.errors import XmlkitError
from xmlkit.metrics import PROPENSITY_PRESETS, inverse_propensity
from xmlkit.models.ensemble import option
from xmlkit.models.fastxml import FastXML, FastXMLParams
from xmlkit.models.forest import score_rows

#: name of the tail-classifier arrays in a model folder
TAIL = "tail_centroids"
#: name of the inverse propensities the trees were grown with
PROPENSITY = "inv_propensity"
#: tree-scored labels per point that are re-ranked (-n), as the C++ tool
RERANK = 1000


@dataclass
class PfastreXMLParams(FastXMLParams):
    labels_per_leaf: int = option(100, "-l", "--labels-per-leaf",
                                  "Labels kept per leaf (paper setting 10; the C++ code's "
                                  "default is 100).")
    trees_only: int = option(0, "-S", "--trees-only",
                             "1: trees only, no tail classifiers (PfastXML); 0: PfastreXML.")
    gamma: float = option(30.0, "-g", "--gamma", "Sharpness gamma of the tail classifiers.")
    alpha: float = option(0.8, "-a", "--alpha",
                          "Weight alpha of the tree scores against the tail classifiers.")
    propensity_preset: str = option("default", None, "--propensity-preset",
                                    "A/B of the propensity model: " + ", ".join(
                                        f"{k} {a}/{b}" for k, (a, b) in
                                        sorted(PROPENSITY_PRESETS.items())) + ".",
                                    choices=tuple(sorted(PROPENSITY_PRESETS)))
    propensity_a: float = option(None, "-A", "--A", "A of the propensity model (overrides "
                                 "the preset's).", type=float)
    propensity_b: float = option(None, "-B", "--B", "B of the propensity model (overrides "
                                 "the preset's).", type=float)
    inv_propensity: str = option(None, None, "--inv-propensity",
                                 "File with one inverse propensity per label, used instead "
                                 "of the propensity model.", type="path")

    MODEL_KEYS = FastXMLParams.MODEL_KEYS + ("trees_only", "gamma", "alpha")

    def check(self):
        super().check()
        if self.trees_only not in (0, 1):
            raise XmlkitError("--trees-only (-S) must be 0 or 1")
        if not (np.isfinite(self.gamma) and self.gamma >= 0):
            raise XmlkitError("gamma (-g) must be a finite non-negative number")
        if not 0 <= self.alpha <= 1:
            raise XmlkitError("alpha (-a) must be between 0 and 1")
        if self.propensity_preset not in PROPENSITY_PRESETS:
            raise XmlkitError(f"unknown propensity preset '{self.propensity_preset}' (known: "
                              f"{', '.join(sorted(PROPENSITY_PRESETS))})")
        a, b = self.propensity_ab()
        if not (np.isfinite(a) and a > 0 and np.isfinite(b) and b > -1):
            raise XmlkitError("the propensity model needs A > 0 and B > -1")

    def propensity_ab(self):
        a, b = PROPENSITY_PRESETS.get(self.propensity_preset, (np.nan, np.nan))
        return (a if self.propensity_a is None else self.propensity_a,
                b if self.propensity_b is None else self.propensity_b)


def centroids_by_feature(X, Y, bias):
    """Tail classifiers: for each label, the mean of the unit-length training
    points (bias feature appended) carrying it, as CSR over the D + 1
    features (ptr, labels, values) -- the layout re-ranking reads."""
    import scipy.sparse as sp
    X = as_rows(X, "features").to_scipy()
    Y = as_rows(Y, "labels").to_scipy()
    n, d = X.shape
    Xb = sp.hstack([X, sp.csr_matrix(np.full((n, 1), bias, dtype=np.float32))],
                   format="csr", dtype=np.float64)
    norms = np.sqrt(np.asarray(Xb.multiply(Xb).sum(axis=1)).ravel())
    Xb = sp.diags(np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)) @ Xb
    Yb = sp.csr_matrix((np.ones(Y.nnz), Y.indices, Y.indptr), shape=Y.shape)
    Yb.eliminate_zeros()
    counts = np.asarray(Yb.sum(axis=0)).ravel()
    Yb = Yb @ sp.diags(np.divide(1.0, counts, out=np.zeros_like(counts), where=counts > 0))
    M = sp.csr_matrix(Xb.T @ Yb)
    M.sort_indices()
    return (M.indptr.astype(np.int64), M.indices.astype(np.int32), M.data.astype(np.float32))


def transpose_rows(R, n_cols):
    """CSR arrays of the transpose of Rows R (numpy only, stable)."""
    order = np.argsort(R.indices, kind="stable")
    rows = np.repeat(np.arange(R.shape[0], dtype=np.int32), np.diff(R.indptr))
    ptr = np.zeros(n_cols + 1, np.int64)
    np.cumsum(np.bincount(R.indices, minlength=n_cols), out=ptr[1:])
    return ptr, rows[order], R.data[order]


class PfastreXML(FastXML):
    """PfastreXML: ``PfastreXML(n_trees=50, ...).fit(X, Y)``, then
    ``predict(X, k, rerank=1000)``. ``trees_only=1`` gives PfastXML."""

    algorithm = "pfastrexml"
    Params = PfastreXMLParams
    use_idcg = False

    def __init__(self, **params):
        super().__init__(**params)
        self.inv_propensity = None
        self.tail = None   # (ptr over D + 2, labels, values) of the centroids by feature

    # -- training
    def propensities(self, Y):
        """Inverse propensities: from --inv-propensity, or the propensity model on Y."""
        p = self.params
        if p.inv_propensity is not None:
            from xmlkit.io import read_inv_propensity
            return read_inv_propensity(p.inv_propensity, Y.shape[1])
        a, b = p.propensity_ab()
        return inverse_propensity(Y, a, b)

    def _label_values(self, Y):
        R = as_rows(Y, "labels")
        q = self.inv_propensity.astype(np.float32)
        return Rows(R.indptr, R.indices, R.data * q[R.indices], R.shape)

    def fit(self, X, Y, model_dir=None, progress=None, log=None):
        """Grow the trees on propensity-weighted labels (resumable, as FastXML),
        then the tail classifiers unless trees_only."""
        if X.shape[0] != Y.shape[0]:
            raise XmlkitError(f"features have {X.shape[0]} rows but labels {Y.shape[0]}")
        self.inv_propensity = np.asarray(self.propensities(Y), dtype=np.float64)
        super().fit(X, Y, model_dir, progress, log)
        if model_dir is not None:
            store.save_arrays(model_dir, PROPENSITY, {"inv_propensity": self.inv_propensity})
        if not self.params.trees_only:
            self.tail = centroids_by_feature(X, Y, self.params.bias)
            if model_dir is not None:
                store.save_arrays(model_dir, TAIL, self._tail_arrays())
        return self

    # -- prediction
    def predict_options(self, rerank=None, trees_only=None, **other):
        self._only(other, ())
        return {"rerank": RERANK if rerank is None else rerank,
                "trees_only": None if trees_only is None else bool(trees_only)}

    def predict(self, X, k=None, threads=1, progress=None, rerank=RERANK, trees_only=None):
        """Scores: the tree scores of the `rerank` best labels per point,
        re-ranked by the tail classifiers (unless trees_only, by default the
        model's); the k best per row when k is given. Rows in, Rows out."""
        if trees_only is None:
            trees_only = bool(self.params.trees_only)
        if rerank < 1:
            raise XmlkitError("the number of labels to re-rank (-n) must be at least 1")
        forest = self.forest()
        if trees_only:
            return like(X, forest.predict(X, k, threads, progress))
        if self.tail is None:
            raise XmlkitError("the model has no tail classifiers (trained with --trees-only "
                              "1); predict with trees only")
        R = as_rows(X, "the data")
        S = forest.predict(R, rerank, threads, progress)
        return like(X, self._rerank(R, S, k, threads))

    def _rerank(self, R, S, k, threads):
        from xmlkit._ext.tail_rerank import rerank_rows
        ptr, lab, val = self.tail
        sq = np.bincount(lab, weights=val.astype(np.float64) ** 2, minlength=self.n_labels)
        xp = R.indptr.astype(np.int64, copy=False)
        n = R.shape[0]
        p = self.params

        def run(r0, r1):
            return rerank_rows(xp, R.indices, R.data, p.bias, ptr, lab, val, sq,
                               S.indptr.astype(np.int64, copy=False), S.indices, S.data,
                               r0, r1, p.gamma, p.alpha, 0 if k is None else int(k))
        return score_rows(run, n, self.n_labels, threads)

    # -- storage
    def manifest(self):
        m = super().manifest()
        q = self.inv_propensity
        m["params"]["inv_propensity_sha256"] = None if q is None else \
            hashlib.sha256(np.ascontiguousarray(q, dtype="<f8").tobytes()).hexdigest()
        return m

    def _tail_arrays(self):
        ptr, lab, val = self.tail
        return {"ptr": ptr, "labels": lab, "values": val}

    def save(self, folder):
        super().save(folder)
        if self.inv_propensity is not None:
            store.save_arrays(folder, PROPENSITY, {"inv_propensity": self.inv_propensity})
        if self.tail is not None:
            store.save_arrays(folder, TAIL, self._tail_arrays())
        return folder

    @classmethod
    def from_manifest(cls, manifest):
        params = dict(manifest["params"])
        params.pop("inv_propensity_sha256", None)
        return super().from_manifest({**manifest, "params": params})

    @classmethod
    def load(cls, folder, trees=None, threads=1):
        model = super().load(folder, trees, threads)
        q = store.load_arrays(folder, PROPENSITY).get("inv_propensity")
        if q is None or q.shape != (model.n_labels,):
            raise XmlkitError(f"{folder}/{PROPENSITY}.npz: expected {model.n_labels} inverse "
                              "propensities")
        model.inv_propensity = q
        if not model.params.trees_only:
            a = store.load_arrays(folder, TAIL)
            model.tail = check_tail(a.get("ptr"), a.get("labels"), a.get("values"),
                                    model.n_features, model.n_labels, f"{folder}/{TAIL}.npz")
        return model


def check_tail(ptr, labels, values, n_features, n_labels, name):
    """Validated centroid arrays (by feature) from disk."""
    try:
        ptr = np.asarray(ptr, dtype=np.int64)
        labels = np.asarray(labels, dtype=np.int32)
        values = np.asarray(values, dtype=np.float32)
        ok = (ptr.shape == (n_features + 2,) and ptr[0] == 0 and np.all(np.diff(ptr) >= 0)
              and ptr[-1] == len(labels) == len(values)
              and (len(labels) == 0 or (labels.min() >= 0 and labels.max() < n_labels))
              and np.all(np.isfinite(values)))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise XmlkitError(f"{name}: tail-classifier arrays are inconsistent (corrupt file?)")
    return ptr, labels, values
