"""A model with its calibration (xmlkit.calibration: the maps and label
sets), and where the calibration comes from: rows held out at training
(fit_held_out, held_out_scores: copies of the estimator trained on the
other rows) and a model folder's calibration.npz (folder_calibration,
save_to_folder, drop_from_folder).

Calibrated(model, calibration): a model whose predict() writes
probabilities or label sets, fitted on validation rows (fit) or on rows held
out at training (train), or read with its folder (load).
"""
import functools

import numpy as np

from xmlkit.calibration import (CALIBRATION, CANDIDATES, FIT_RANKS, Calibration,
                                entry_ranks)
from xmlkit.errors import InvalidParameterError, XmlkitError

#: the share of the training rows held out at training (xml-train
#: --calibrate), scored by a model of the others: two thirds of one more
#: training (docs/algorithms.md: the choice)
HOLDOUT = 1 / 3


def ranked(model):
    """The predict() keywords of `model`'s ranked scores, the ones a
    calibration maps: a family's declared decision (its scores, not sets)."""
    if "decision" in model.PREDICT_PARAMS:
        return {"decision": model.predict_defaults()["decision"]}
    return {}


def other_scoring(model, params, folder=None, trees=None):
    """What makes predict()'s scores with `params` (and the trees `trees` of
    model folder `folder`, None: all of them) other than those a calibration
    of the folder was fitted to, the model's own: the names of the predict
    parameters (model.other_scores), and "trees" for a pick of the trees
    that is not all of them. Empty when they are the same scores."""
    names = list(model.other_scores(**params))
    if trees is not None and folder is not None:
        from xmlkit.models import tree_indices
        if sorted(set(int(t) for t in trees)) != tree_indices(folder):
            names.append("trees")
    return names


class OtherScores(InvalidParameterError):
    """A predict parameter (or "trees", a pick of a folder's trees) that
    makes other scores than those a calibration maps (Calibrated.plan)."""


class Calibrated:
    """A model with its calibration: ``Calibrated(model).fit(X_valid,
    Y_valid)`` (rows the model was not trained on), or
    ``Calibrated.train(estimator, X, Y)`` (trains it as well), or
    ``Calibrated.load(folder)``; then ``predict(X, k, decision=...)``:
    "scores" gives probabilities (each row's ranking the model's),
    "threshold" label sets (the labels whose probability passes their
    threshold, or `threshold` when given), the probabilities as values."""

    def __init__(self, model, calibration=None):
        self.model = model
        self.calibration = calibration

    def fit(self, X, Y, k=FIT_RANKS, candidates=CANDIDATES, threads=1):
        """Fit the calibration on held-out rows X, Y; returns self."""
        S = self.model.predict(X, k=max(int(k), int(candidates)), threads=threads,
                               **ranked(self.model))
        self.calibration = Calibration.fit(Y, S, k, candidates)
        return self

    @classmethod
    def train(cls, estimator, X, Y, k=FIT_RANKS, candidates=CANDIDATES, holdout=HOLDOUT,
              folds=None, seed=0, threads=1):
        """Train `estimator` on X, Y and fit its calibration (fit_held_out)."""
        calibration = fit_held_out(estimator, X, Y, k, candidates, holdout, folds, seed,
                                   threads)
        return cls(estimator.fit(X, Y), calibration)

    def predict(self, X, k=None, threads=1, progress=None, decision="scores", threshold=None,
                **params):
        """Probabilities (decision "scores") of each row's k best labels (None:
        every label the model scores), or label sets ("threshold": among the
        calibration's candidates, or the k best when k is given); params go
        to the model's predict."""
        k, params, decide = self.plan(k, decision, threshold, **params)
        S = self.model.predict(X, k=k, threads=threads, progress=progress, **params)
        return decide(S)

    def explain(self, X, k=None, n_features=5, threads=1, decision="scores", threshold=None,
                **params):
        """The explanation (xmlkit.explanation) of predict's labels, its
        scores the probabilities; contributions that are removal effects
        become effects on the probability (p(s) - p(s - c)), a linear
        model's margin terms stay as they are."""
        k, params, decide = self.plan(k, decision, threshold, **params)
        S = self.model.predict(X, k=k, threads=threads, **params)
        return explain_decided(self.model, self.calibration, X, S, decide(S), n_features,
                               threads, **params)

    def plan(self, k=None, decision="scores", threshold=None, folder=None, trees=None,
             **params):
        """(k, params, decide): the k best scores to ask of the model, the
        keywords of its predict (params with its ranked scores), and the
        function that makes probabilities or label sets of them: what
        predict, explain and xml-predict do with a calibration. Checked
        first: fitted, and no parameter (nor a pick `trees` of the trees of
        model folder `folder`) that scores otherwise than the calibration
        was fitted to (OtherScores naming it, "trees" for a pick)."""
        if self.calibration is None:
            raise XmlkitError("Calibrated: not fitted (fit, train or load)")
        other = other_scoring(self.model, params, folder, trees)
        if other:
            what = f"trees {list(trees)}" if other[0] == "trees" else \
                f"{other[0]}={params[other[0]]!r}"
            raise OtherScores(
                other[0], f"Calibrated: the calibration maps the model's own scores; {what} "
                          "gives others (predict with the model itself, or calibrate it for "
                          "them)")
        k = self.calibration.scoring_k(decision, threshold, k)
        return k, {**ranked(self.model), **params}, functools.partial(
            self.calibration.decide, decision=decision, threshold=threshold)

    @classmethod
    def load(cls, folder, trees=None, threads=1):
        """The model of folder `folder` with its calibration (XmlkitError when
        it holds none, or for `trees` other than all of them: the
        calibration maps their scores)."""
        from xmlkit.models import load_model
        calibration = folder_calibration(folder)
        if calibration is None:
            raise XmlkitError(f"{folder}: holds no calibration (xml-calibrate, or xml-train's "
                              "calibration)")
        model = load_model(folder, trees, threads=threads)
        if other_scoring(model, {}, folder, trees):
            raise XmlkitError(f"{folder}: its calibration maps the scores of all its trees, "
                              f"not of trees {list(trees)}")
        return cls(model, calibration)


def explain_decided(model, calibration, X, S, P, n_features, threads=1, **params):
    """The explanation of the entries of P (what `calibration` decided from
    the model's scores S: probabilities, a label set) by `model`, with P's
    values as scores; removal effects mapped onto the probability by the
    calibration's map at each entry's rank."""
    from xmlkit.csr import Rows, as_rows
    from xmlkit.explanation import score_at
    P_rows = as_rows(P, "probabilities")
    rows = np.repeat(np.arange(P_rows.shape[0]), np.diff(P_rows.indptr))
    raw = score_at(S, rows, P_rows.indices.astype(np.int64))
    E = model.explain(X, n_features=n_features, threads=threads,
                      labels=Rows(P_rows.indptr, P_rows.indices, raw.astype(np.float32),
                                  P_rows.shape), **params)
    c = E.contributions
    if E.kind == "removal":
        at = np.repeat(np.arange(len(raw)), np.diff(E.ptr))
        rank = entry_ranks(S, rows, P_rows.indices.astype(np.int64))[at]
        c = calibration.apply(raw[at], rank) - calibration.apply(raw[at] - c, rank)
    return E.with_scores(P, c)


def fit_held_out(estimator, X, Y, k=FIT_RANKS, candidates=CANDIDATES, holdout=HOLDOUT,
                 folds=None, seed=0, threads=1, log=None):
    """The Calibration of `estimator` (its parameters; it is not fitted
    here) for training rows X, Y, fitted on the scores of held_out_scores.
    The model trained on every row is then calibrated by a model of fewer:
    a little less sure of itself (measured in docs/algorithms.md)."""
    Y_held, S_held = held_out_scores(estimator, X, Y, max(int(k), int(candidates)), holdout,
                                     folds, seed, threads, log)
    return Calibration.fit(Y_held, S_held, k, candidates)


def held_out_split(n, holdout=HOLDOUT, folds=None, seed=0):
    """[(held, kept), ...]: the rows of n that held_out_scores scores and
    those its copy is trained on (sorted row numbers), one pair, or one per
    fold with `folds` = K."""
    order = np.random.default_rng(seed).permutation(n)
    if folds is not None:
        splits = [(np.flatnonzero(order % folds == f), np.flatnonzero(order % folds != f))
                  for f in range(int(folds))]
    else:
        m = int(round(float(holdout) * n))
        splits = [(np.sort(order[:m]), np.sort(order[m:]))]
    if n < 2 or any(len(held) == 0 or len(kept) == 0 for held, kept in splits):
        raise XmlkitError(f"calibration: {n} training points are too few to hold some out")
    return splits


def held_out_scores(estimator, X, Y, k, holdout=HOLDOUT, folds=None, seed=0, threads=1,
                    log=None):
    """(labels, scores): the k best ranked scores (CSR) of rows that the
    scoring model did not see, and their labels: a share `holdout` of the
    rows drawn at random (`seed`), scored by a copy of `estimator` trained
    on the others; or, with `folds` = K, every row, the rows cut into K
    parts, each scored by a copy trained on the others (K trainings). The
    copies take the family's fold_params."""
    import scipy.sparse as sp
    from xmlkit.csr import as_rows
    from xmlkit.metrics import binary_csr
    X = as_rows(X, "the training features").to_scipy()
    Y = binary_csr(as_rows(Y, "the training labels").to_scipy(), "training labels",
                    strict=False)
    splits = held_out_split(X.shape[0], holdout, folds, seed)
    params = {**estimator.get_params(), **estimator.fold_params(Y)}
    pieces, truth = [], []
    for f, (held, kept) in enumerate(splits):
        if log:
            log(f"calibration: training on {len(kept)} points, scoring the other "
                f"{len(held)}" + (f" ({f + 1} of {len(splits)})" if len(splits) > 1 else ""))
        other = type(estimator)(**params).fit(X[kept], Y[kept])
        pieces.append(sp.csr_matrix(other.predict(X[held], k=int(k), threads=threads,
                                                  **ranked(other))))
        truth.append(Y[held])
    return sp.vstack(truth, format="csr"), sp.vstack(pieces, format="csr")


def folder_calibration(folder):
    """The Calibration kept in model folder `folder`, or None (a folder
    without one, or not an xmlkit folder); checked against its record and
    the model's number of labels."""
    from pathlib import Path
    from xmlkit import store
    if not store.is_model_folder(folder):
        return None
    manifest = store.read_manifest(folder)
    if f"{CALIBRATION}.npz" not in (store.records(manifest) or {}):
        return None
    n_labels = manifest.get("n_labels")
    return Calibration.from_arrays(store.load_arrays(folder, CALIBRATION, manifest),
                                   n_labels, Path(folder) / f"{CALIBRATION}.npz")


def save_to_folder(folder, calibration):
    """Keep `calibration` in model folder `folder` (under its lock),
    replacing one it held."""
    from xmlkit import store
    with store.folder_lock(folder):
        manifest = store.read_manifest(folder)
        store.require_current(folder, manifest, "keep a calibration in it")
        store.save_arrays(folder, CALIBRATION, calibration.arrays(), manifest)
        store.record_files(folder, [CALIBRATION])


def drop_from_folder(folder):
    """Remove the calibration of a folder whose model changes (call under
    its lock): True when there was one."""
    from xmlkit import store
    return bool(store.forget_files(folder, [CALIBRATION]))
