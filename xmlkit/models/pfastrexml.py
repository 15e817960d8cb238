"""PfastreXML (Jain, Prabhu & Varma, KDD 2016), as the original C++ tool trains it.

FastXML trees grown on propensity-weighted labels (y_il * q_l, q the inverse
propensities) with the unnormalised DCG split objective, plus a tail
classifier per label: the centroid mu_l of the unit-length training points
(bias included) carrying the label. Prediction keeps the `rerank` best tree
scores of a point and re-ranks them with s^alpha * t^(1 - alpha),
t = 1 / (1 + exp(gamma * ||x^ - mu_l||^2)). With trees_only the tail
classifiers are skipped: PfastXML.
"""

import numpy as np

from xmlkit import checks

from xmlkit.csr import Rows, as_rows, like, summed_duplicates, transpose_rows
from xmlkit.errors import InvalidParameterError, XmlkitError
from xmlkit.arrayfile import sha256
from xmlkit.metrics import PROPENSITY_PRESETS, inverse_propensity, propensity_ab
from xmlkit.models.base import array_like, boolean, integer, one_of, optional, real
from xmlkit.models.family import ModelBase
from xmlkit.models.fastxml import INIT, MAX_NEWTON, MAX_NEWTON_SMALL, SMALL_NODE, TOL, FastXML

#: name of the tail-classifier arrays in a model folder
TAIL = "tail_centroids"
#: name of the inverse propensities the trees were grown with
PROPENSITY = "inv_propensity"
#: tree-scored labels per point that are re-ranked, as in the C++ tool


def centroids_by_feature(X, Y, bias):
    """Tail classifiers: for each label, the mean of the unit-length training
    points (bias feature appended) carrying it, as CSR over the D + 1
    features (ptr, labels, values) -- the layout re-ranking reads. (Without
    scipy, whose import would cost every training time and memory.)"""
    from xmlkit._ext.label_sums import centroids_by_label
    X = summed_duplicates(as_rows(X, "features"))
    Y = summed_duplicates(as_rows(Y, "labels"))
    n, d = X.shape
    # rows with the bias appended, in float64; stored zeros left out
    lengths = np.diff(X.indptr)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(lengths + 1, out=ptr[1:])
    last = ptr[1:] - 1
    idx = np.full(ptr[-1], d, dtype=np.int32)
    val = np.full(ptr[-1], np.float64(np.float32(bias)))
    inner = np.ones(ptr[-1], dtype=bool)
    inner[last] = False
    idx[inner] = X.indices
    val[inner] = X.data
    # unit length: the squares added up row by row as numpy's reduceat does
    # (the earlier scipy code's sum), zero squares left out
    sq = val * val
    kept = sq != 0
    row_of = np.repeat(np.arange(n), lengths + 1)
    counts = np.bincount(row_of[kept], minlength=n)
    starts = np.zeros(n, np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    norms = np.zeros(n)
    has = counts > 0
    if has.any():
        norms[has] = np.add.reduceat(sq[kept], starts[has])
    norms = np.sqrt(norms)
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    val *= scale[row_of]
    # each label's points, ascending
    label_ptr, label_points, _ = transpose_rows(Y, Y.shape[1])
    return centroids_by_label(ptr, idx, val, label_ptr, label_points, d + 1)


class PfastreXML(FastXML):
    """PfastreXML: ``PfastreXML(n_trees=50, ...).fit(X, Y)``, then
    ``predict(X, k, rerank=1000)``. ``trees_only=1`` gives PfastXML."""

    algorithm = "pfastrexml"
    use_idcg = False
    PREDICT_PARAMS = {
        **FastXML.PREDICT_PARAMS,
        # the labels the trees score per point, re-ranked by the tail classifiers
        "rerank": (1000, integer(1)),
        # None: the model's trees_only
        "trees_only": (None, optional(boolean())),
    }
    _parameter_constraints = {
        **FastXML._parameter_constraints,
        "trees_only": boolean(), "gamma": real(0), "alpha": real(0, 1),
        "propensity_preset": one_of(*sorted(PROPENSITY_PRESETS)),
        "propensity_a": optional(real(0, lo_open=True)),
        "propensity_b": optional(real(-1, lo_open=True)),
        "inv_propensity": optional(array_like()),
    }
    PARAM_GROUPS = (
        ("Tree", ("n_trees", "max_leaf", "labels_per_leaf")),
        ("Solver", ("bias", "log_loss_coeff", "solver", "tol", "max_newton", "max_newton_small",
                    "small_node", "init")),
        ("Tail labels", ("trees_only", "gamma", "alpha", "propensity_preset", "propensity_a",
                         "propensity_b", "inv_propensity")),
        ("Run", ("start_tree", "threads", "seed")),
    )
    MODEL_KEYS = FastXML.MODEL_KEYS + ("trees_only", "gamma", "alpha")

    def __init__(self, *, n_trees=50, max_leaf=10, labels_per_leaf=100, bias=1.0,
                 log_loss_coeff=1.0, solver="newglmnet", tol=TOL, max_newton=MAX_NEWTON,
                 max_newton_small=MAX_NEWTON_SMALL, small_node=SMALL_NODE, init=INIT,
                 trees_only=False, gamma=30.0, alpha=0.8, propensity_preset="default",
                 propensity_a=None, propensity_b=None, inv_propensity=None, start_tree=0,
                 threads=1, seed=0):
        """
        Tree parameters
        ---------------
        n_trees, max_leaf : as for FastXML.
        labels_per_leaf : labels kept per leaf (the C++ tool's default, 100).

        Solver parameters
        -----------------
        bias, log_loss_coeff, solver, tol, max_newton, max_newton_small,
        small_node, init : as for FastXML.

        Tail labels parameters
        ----------------------
        trees_only : True: trees only, no tail classifiers (PfastXML).
        gamma : sharpness of the tail classifiers.
        alpha : weight of the tree scores against the tail classifiers.
        propensity_preset : (A, B) of the propensity model: "default"
            0.55/1.5, "wikipedia" 0.5/0.4, "amazon" 0.6/2.6.
        propensity_a, propensity_b : A and B, replacing the preset's.
        inv_propensity : one inverse propensity per label, used instead of
            the propensity model.

        Run parameters
        --------------
        start_tree, threads, seed : as for FastXML.
        """
        super().__init__(n_trees=n_trees, start_tree=start_tree, threads=threads, bias=bias,
                         log_loss_coeff=log_loss_coeff, max_leaf=max_leaf,
                         labels_per_leaf=labels_per_leaf, seed=seed, solver=solver,
                         tol=tol, max_newton=max_newton, max_newton_small=max_newton_small,
                         small_node=small_node, init=init)
        self.trees_only = trees_only
        self.gamma = gamma
        self.alpha = alpha
        self.propensity_preset = propensity_preset
        self.propensity_a = propensity_a
        self.propensity_b = propensity_b
        self.inv_propensity = inv_propensity

    def _check_more(self):
        super()._check_more()
        try:
            propensity_ab(self.propensity_preset, self.propensity_a, self.propensity_b)
        except XmlkitError as exc:
            raise InvalidParameterError("propensity_a", f"PfastreXML: {exc}") from None

    # -- training
    def propensities(self, Y):
        """Inverse propensities: `inv_propensity`, or the propensity model on Y."""
        if self.inv_propensity is not None:
            q = np.asarray(self.inv_propensity)
            wrong = propensity_fault(q, Y.shape[1])
            if wrong:
                raise InvalidParameterError("inv_propensity",
                                            f"PfastreXML: inv_propensity {wrong}")
            return q.astype(np.float64)
        return inverse_propensity(Y, *propensity_ab(self.propensity_preset, self.propensity_a,
                                                    self.propensity_b))

    def fold_params(self, Y):
        """The inverse propensities of all of Y: the propensity model's depend
        on the number of points, so a copy trained on half of them would
        weigh every label otherwise."""
        return {"inv_propensity": self.propensities(Y)}

    def _label_values(self, Y):
        R = as_rows(Y, "labels")
        q = self.inv_propensity_.astype(np.float32)
        return Rows(R.indptr, R.indices, R.data * q[R.indices], R.shape)

    def start_fit(self, X, Y):
        """As FastXML, and the inverse propensities (the manifest records them)."""
        X, Y = super().start_fit(X, Y)
        self.inv_propensity_ = np.asarray(self.propensities(Y), dtype=np.float64)
        self.tail_ = None
        return X, Y

    def finish_fit(self, X, Y):
        """The tail classifiers, unless trees_only."""
        if not self.trees_only:
            self.tail_ = centroids_by_feature(X, Y, self.bias)

    # -- prediction
    def _predict_params(self, **given):
        # trees_only may be given as 0 / 1, as the C++ tool's -S spells it
        t = given.get("trees_only")
        if t is not None and not isinstance(t, (bool, np.bool_)) and t in (0, 1):
            given = {**given, "trees_only": bool(t)}
        return super()._predict_params(**given)

    def _trees_only(self, used):
        """Whether predict parameters `used` (_predict_params) score with the
        trees only: theirs, else the model's."""
        return bool(self.params.trees_only) if used["trees_only"] is None \
            else used["trees_only"]

    def other_scores(self, **given):
        """trees_only, when `given` scores otherwise than the model does with
        its own predict parameters (those a calibration was fitted to)."""
        own = self._trees_only(self._predict_params())
        return ["trees_only"] if self._trees_only(self._predict_params(**given)) != own else []

    def predict(self, X, k=5, threads=1, progress=None, rerank=None, trees_only=None,
                decision=None, threshold=None):
        """Scores: the tree scores of the `rerank` best labels per point,
        re-ranked by the tail classifiers (unless trees_only, by default the
        model's); the k best per row (k=None: all). Rows in, Rows out.
        rerank: None is the model's (PREDICT_PARAMS: 1000)."""
        forest, kwargs = self._scoring(X, k, rerank, trees_only, decision, threshold)
        return like(X, forest.predict(X, threads=threads, progress=progress, **kwargs))

    def predict_pieces(self, X, k=5, threads=1, progress=None, finish=None, release=False,
                       rerank=None, trees_only=None, decision=None, threshold=None):
        """predict()'s rows in pieces (see FastXML.predict_pieces): each
        block of rows re-ranked on the thread that scored it."""
        forest, kwargs = self._scoring(X, k, rerank, trees_only, decision, threshold)
        finish = finish or (lambda piece: piece)
        yield from forest.predict_pieces(X, threads=threads, progress=progress,
                                         finish=lambda p: finish(like(X, p)),
                                         release=release, **kwargs)

    def _scoring(self, X, k, rerank, trees_only, decision=None, threshold=None):
        """The forest and its k and then (the re-ranking of each block of
        rows by the tail classifiers, unless trees only)."""
        p = self._predict_params(rerank=rerank, trees_only=trees_only, decision=decision,
                                 threshold=threshold)
        forest = self.forest()
        if self._trees_only(p):
            return forest, {"k": k}
        if getattr(self, "tail_", None) is None:
            raise XmlkitError("the model has no tail classifiers (trained with "
                              "trees_only); predict with trees only")
        R = as_rows(X, "the data")
        kernel = self._tail_kernel()
        topk = 0 if k is None else int(k)

        def then(r0, r1, S):
            # (rows r0..r1-1 of R, read in place: kernels index R.indices)
            block = Rows(R.indptr[r0:r1 + 1], R.indices, R.data, (r1 - r0, R.shape[1]))
            ptr, idx, val = kernel.rerank_rows(block, S, 0, r1 - r0, topk)
            return Rows(ptr, idx, val, (r1 - r0, self.n_labels_))
        return forest, {"k": p["rerank"], "then": then}

    def _scored_effects(self, R, k, threads, n_top=0, **params):
        """Re-ranked labels are predict's (the trees' best need not be)."""
        p = self._predict_params(**params)
        if self._trees_only(p):
            return super()._scored_effects(R, k, threads, n_top, **params)
        return ModelBase._scored_effects(self, R, k, threads, n_top, **params)

    def _effects(self, R, S, threads, n_top=0, rerank=None, trees_only=None, **params):
        """Exact leave-one-feature-out effects: the trees' (re-routing, as
        FastXML's) combined with the tail classifiers', which every feature
        of a row moves (through its length). A label stays re-ranked
        without a feature when fewer than `rerank` others can then beat its
        tree score (each other label moves by at most the largest leaf
        value times the trees the feature turns, over the trees; always,
        when L <= rerank); where that cannot be told, the row is scored
        again without the feature."""
        from xmlkit.explanation import (EntryIndex, ascending_rows, pair_blocks, row_pairs,
                                        rows_without, score_at)
        from xmlkit.models.forest import tree_effects
        p = self._predict_params(rerank=rerank, trees_only=trees_only)
        if self._trees_only(p):
            return tree_effects(self.forest(), R, S, threads, n_top)[1:]
        forest = self.forest()
        _, entry, feature, delta, turned = tree_effects(forest, R, S, threads, turned=True)
        if getattr(self, "tail_", None) is None:
            raise XmlkitError("the model has no tail classifiers (trained with "
                              "trees_only); predict with trees only")
        d, L = self.n_features_in_, self.n_labels_
        bias = float(self.bias)
        # (the rerank + 1 best tree scores: enough to tell whether rerank
        # others can beat a label)
        T = EntryIndex(forest.predict(R, k=p["rerank"] + 1, threads=threads))
        rise = self._leaf_max() / len(forest.trees)
        mu_ptr, mu_lab, mu_val = self.tail_
        M = EntryIndex(ascending_rows(mu_ptr, mu_lab, mu_val, (d + 1, L)))
        sq_mu = np.bincount(M.S.indices, weights=M.S.data.astype(np.float64) ** 2,
                            minlength=L)
        norm2 = np.bincount(np.repeat(np.arange(R.shape[0]), np.diff(R.indptr)),
                            weights=R.data.astype(np.float64) ** 2,
                            minlength=R.shape[0]) + bias * bias
        # the trees' effects, by (entry of S, feature)
        order = np.lexsort((feature, entry))
        moves = EntryIndex(Rows(np.concatenate([[0], np.cumsum(np.bincount(
            entry, minlength=S.nnz))]), feature[order], delta[order], (S.nnz, d)))
        alpha, gamma = float(self.alpha), float(self.gamma)

        def score(s, dot, n2, sq):
            norm = np.sqrt(np.maximum(n2, 0))
            cos = np.divide(dot, norm, out=np.zeros_like(dot), where=norm > 0)
            tail = 1.0 / (1.0 + np.exp(gamma * (sq + 1.0 - 2.0 * cos)))
            return np.power(np.maximum(s, 0), alpha) * np.power(tail, 1.0 - alpha)
        out = []
        for r0, r1 in pair_blocks(R, S):
            a, e = row_pairs(R, S, r0, r1)
            row = np.searchsorted(S.indptr, a, side="right") - 1
            lab = S.indices[a].astype(np.int64)
            f = R.indices[e]
            x = R.data[e].astype(np.float64)
            s0 = T.values(row, lab).astype(np.float32).astype(np.float64)
            moved = moves.values(a, f)
            mu = M.values(f, lab)
            # each label's dot product with the row, summed as re-ranking
            # sums it: the row's features in order, the bias last
            a0 = int(S.indptr[r0])
            dot0 = np.bincount(a - a0, weights=x * mu, minlength=int(S.indptr[r1]) - a0)
            ents = np.arange(a0, int(S.indptr[r1]))
            dot0 += M.values(np.full(len(ents), d), S.indices[ents]) * bias
            dot0 = dot0[a - a0]
            before = score(s0, dot0, norm2[row], sq_mu[lab])
            after = score(s0 - moved, dot0 - x * mu, norm2[row] - x * x, sq_mu[lab])
            # still among the rerank best tree scores without the feature?
            # (others within reach: their scores now >= its new one - rise)
            reach = (s0 - moved) - turned[e] * rise
            near = 1e-6 * (1 + np.abs(reach))
            unsure = np.zeros(len(a), bool) if L <= p["rerank"] else \
                (turned[e] > 0) & ((reach - near <= 0) |
                                   (T.at_least(row, reach - near) - 1 >= p["rerank"]))
            if unsure.any():
                # (those rows scored again, each without its feature)
                pairs = np.unique(e[unsure])
                again = as_rows(self.predict(rows_without(
                    R, np.searchsorted(R.indptr, pairs, side="right") - 1, pairs), k=None,
                    rerank=rerank, trees_only=False), "scores")
                at = np.searchsorted(pairs, e[unsure])
                after[unsure] = score_at(again, at, lab[unsure])
            out.append((a, f, before - after))
        if not out:
            return entry, feature, delta
        return tuple(np.concatenate([o[i] for o in out]) for i in range(3))

    def _leaf_max(self):
        """The most a label's value can change from one leaf of a tree to
        another (a value or 0, to another: cached with the forest)."""
        forest = self.forest()
        cached = getattr(self, "_leaf_top", None)
        if cached is None or cached[0] is not forest:
            vals = [t["l_val"] for t in forest.trees if len(t["l_val"])]
            top = max([0.0] + [float(np.max(v)) for v in vals])
            low = min([0.0] + [float(np.min(v)) for v in vals])
            cached = self._leaf_top = (forest, top - low)
        return cached[1]

    def _tail_kernel(self):
        """The kernel of the tail classifiers, kept while they are the same."""
        from xmlkit._ext.tail_rerank import TailKernel
        cached = getattr(self, "_tail", None)
        if cached is None or cached[0] is not self.tail_:
            ptr, lab, val = self.tail_
            cached = self._tail = (self.tail_, TailKernel(
                ptr, lab, val, self.bias, self.gamma, self.alpha, self.n_labels_))
        return cached[1]

    # -- storage
    def manifest(self):
        m = super().manifest()
        q = getattr(self, "inv_propensity_", None)
        m["params"]["inv_propensity_sha256"] = None if q is None else \
            sha256(np.ascontiguousarray(q, dtype="<f8").tobytes()).hexdigest()
        return m

    def _tail_arrays(self):
        ptr, lab, val = self.tail_
        return {"ptr": ptr, "labels": lab, "values": val}

    def extra_arrays(self):
        out = {}
        if getattr(self, "inv_propensity_", None) is not None:
            out[PROPENSITY] = {"inv_propensity": self.inv_propensity_}
        if getattr(self, "tail_", None) is not None:
            out[TAIL] = self._tail_arrays()
        return out

    def restore_extras(self, read, where):
        name = f"{where}/{PROPENSITY}.npz"
        q = read(PROPENSITY).get("inv_propensity")
        if q is None:
            raise checks.DamagedModel(name, "lacks the inverse propensities")
        wrong = propensity_fault(q, self.n_labels_) or (
            None if q.dtype.kind == "f" else f"holds {q.dtype} values, not floats")
        if wrong:
            raise checks.DamagedModel(name, f"the inverse propensities: {wrong}")
        self.inv_propensity_ = q
        if not self.trees_only:
            a = read(TAIL)
            self.tail_ = check_tail(a.get("ptr"), a.get("labels"), a.get("values"),
                                   self.n_features_in_, self.n_labels_, f"{where}/{TAIL}.npz")

    @classmethod
    def from_manifest(cls, manifest, folder="the model"):
        params = dict(manifest["params"])
        params.pop("inv_propensity_sha256", None)
        if "trees_only" in params and params["trees_only"] in (0, 1):
            params["trees_only"] = bool(params["trees_only"])   # an int in format 1 folders
        return super().from_manifest({**manifest, "params": params}, folder)


def propensity_fault(q, n_labels):
    """What is wrong with inverse propensities `q` for n_labels labels
    (None: nothing): the one rule of fit and of loading a folder."""
    if q.shape != (n_labels,):
        return f"must hold {n_labels} values (one per label), got shape {q.shape}"
    if q.dtype.kind not in "iuf":
        return f"must be numbers, got {q.dtype}"
    from xmlkit.metrics import MAX_INV_PROPENSITY
    if q.size and not (np.isfinite(q).all() and q.min() > 0 and q.max() <= MAX_INV_PROPENSITY):
        return f"must be finite, > 0 and at most {MAX_INV_PROPENSITY:g}"
    return None


def check_tail(ptr, labels, values, n_features, n_labels, name):
    """Validated centroid arrays (by feature, the bias feature last) from disk."""
    if ptr is None or labels is None or values is None:
        raise checks.DamagedModel(name, "lacks the tail-classifier arrays")
    ptr, labels, values = checks.csr(ptr, labels, values, n_features + 1, n_labels, name,
                                     "centroid")
    ptr = ptr.astype(np.int64)
    labels = labels.astype(np.int32)
    values = values.astype(np.float32)
    return ptr, labels, values
