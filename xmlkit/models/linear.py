"""Sparse linear one-vs-all with elastic net (Lipton & Elkan, "Efficient
elastic net regularization for sparse linear models"), all labels trained at
once by SGD with delayed (lazy) proximal updates, and per-label F1-optimal
thresholds (Lipton, Elkan & Naryanaswamy: for calibrated scores the best
threshold is half the best achievable F1).

The hot loop is cpp_ext/xmlkit/_ext/elastic_ova.pyx: per example only the rows of its
active features are touched and brought up to date in constant time per
weight; the proximal step leaves exact zeros, which are not stored, so the
memory follows nnz(W). `dense_updates` runs the plain algorithm (every weight
regularised at every step) for comparison: the same weights.
"""
import time
import warnings

import numpy as np

from xmlkit import checks
from xmlkit._memory import available_bytes
from xmlkit.csr import as_rows, like, model_rows, unit_rows
from xmlkit.errors import InvalidParameterError, XmlkitError, XmlkitWarning
from xmlkit.models.matrix_family import (THRESHOLD_COLUMNS, ArrayModel, fit_thresholds_blocked,
                                         scored_blocks, selector, sigmoid)
from xmlkit.models.base import SEED, auto_or, boolean, integer, one_of, optional, real

#: loss="auto": the squared hinge from this many labels up (a logistic step
#: touches every label of every active feature; the hinge only the labels
#: with a residual), the logistic loss below (it ranks best on small sets)
HINGE_LABELS = 2000
#: lr="auto": per loss (chosen on the shared data sets and the many-label
#: look-alikes: scripts/results/linear.md, families.md)
AUTO_LR = {"logistic": 3.0, "squared": 3.0, "squared_hinge": 1.0}
#: epochs="auto": the logistic and squared losses make SMOOTH_EPOCHS passes
#: (their accuracy needs them, and below HINGE_LABELS labels a pass costs at
#: most HINGE_LABELS x nnz(X)); the squared hinge, chosen for many labels,
#: about AUTO_STEPS SGD steps: AUTO_STEPS / N passes, rounded, from
#: MIN_AUTO_EPOCHS to MAX_AUTO_EPOCHS (near its best after a few passes,
#: which are long on large sets: scripts/results/families.md; on a small
#: set, 7 passes and their final ones over every point ranked as 10 did:
#: scripts/results/linear.md)
SMOOTH_EPOCHS = 10
AUTO_STEPS = 100_000
MIN_AUTO_EPOCHS, MAX_AUTO_EPOCHS = 2, 7
#: final_epochs="auto": where the features are sparse (fewer than
#: CONTINUE_BELOW points per feature on average, as on text) the hold-out
#: model is continued over every point for FINAL_SHARE of its passes (at
#: least one) instead of a second model trained anew: a feature's AdaGrad
#: rate is still high there after the hold-out model's passes, and that
#: ranked as training anew did, in fewer passes. Where every feature is in
#: many points, the rates have fallen and the held-out points would be
#: learnt little: the final model is trained anew (0), which ranked better
#: there (scripts/results/linear.md)
FINAL_SHARE = 0.3
CONTINUE_BELOW = 50
#: points per call of the kernel (a progress update each)
CHUNK_POINTS = 4096
DECISION_ALIASES = {"thresholds": "threshold"}     # the name before 0.1 unified it


def prune_small(ptr, idx, val, threshold):
    """CSR rows without the entries whose |value| is below `threshold`."""
    keep = np.abs(val) >= threshold
    rows = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    counts = np.bincount(rows[keep], minlength=len(ptr) - 1)
    new_ptr = np.zeros(len(ptr), np.int64)
    np.cumsum(counts, out=new_ptr[1:])
    return new_ptr, idx[keep], val[keep]


def block_bounds(n_labels, blocks):
    """Bounds of `blocks` contiguous label blocks of nearly equal size (no
    more blocks than labels): lo_0 = 0 < ... < hi_last = n_labels."""
    b = max(1, min(int(blocks), int(n_labels)))
    return np.linspace(0, n_labels, b + 1).round().astype(np.int64)


def merge_blocks(parts, bounds):
    """One model's arrays from the arrays of its label blocks (weights
    feature-major, block-local label indices) in label order."""
    import scipy.sparse as sp
    n_features = len(parts[0]["w_ptr"]) - 1
    W = sp.hstack([sp.csr_matrix((a["w_val"], a["w_idx"], a["w_ptr"]),
                                 shape=(n_features, int(hi - lo)))
                   for a, lo, hi in zip(parts, bounds[:-1], bounds[1:])], format="csr")
    W.sort_indices()
    return {"w_ptr": W.indptr.astype(np.int64), "w_idx": W.indices.astype(np.int32),
            "w_val": W.data.astype(parts[0]["w_val"].dtype, copy=False),
            "bias": np.concatenate([a["bias"] for a in parts])}


def train_block(shared, block):
    """A label block's arrays (a task for xmlkit.cluster): shared = (model,
    X, Y, rest), block = (lo, hi)."""
    model, X, Y, rest = shared
    return model._train_block(X, Y, rest, int(block[0]), int(block[1]))


def fit_thresholds(P, Y):
    """Per-label thresholds F*_l / 2 from hold-out probabilities P (dense n × L)
    and truth Y (csr); see fit_thresholds_blocked."""
    return fit_thresholds_blocked(lambda c0, c1: P[:, c0:c1], Y, P.shape[1])


class Linear(ArrayModel):
    """``Linear(...).fit(X, Y)``, then ``predict(X, k)`` or
    ``predict(X, decision="threshold")``."""

    DASK_TASKS = True       # (a task per label block)

    algorithm = "linear"
    ARRAYS = "linear"
    PREDICT_PARAMS = {
        "decision": ("scores", one_of("scores", "threshold", *DECISION_ALIASES)),
        # None: the per-label thresholds fitted at training
        "threshold": (None, optional(real(0, 1))),
    }
    _parameter_constraints = {
        "loss": one_of("auto", "logistic", "squared", "squared_hinge"), "l1": real(0),
        "l2": real(0), "lr_schedule": one_of("constant", "decaying", "adagrad"),
        "lr": auto_or(real(0, lo_open=True)), "lr_decay": real(0),
        "epochs": auto_or(integer(1)), "final_epochs": auto_or(integer(0)),
        "unit_rows": boolean(),
        "dense_updates": boolean(), "threshold_holdout": real(0, 1, hi_open=True),
        "prune_weights": real(0), "label_blocks": integer(1), "threads": integer(1),
        "seed": SEED,
    }
    PARAM_GROUPS = (
        ("Model", ("loss", "l1", "l2", "unit_rows", "prune_weights", "threshold_holdout")),
        ("Solver", ("lr_schedule", "lr", "lr_decay", "epochs", "final_epochs",
                    "dense_updates")),
        ("Run", ("label_blocks", "threads", "seed")),
    )
    MODEL_KEYS = ("loss", "l1", "l2", "lr_schedule", "lr", "lr_decay", "epochs",
                  "final_epochs", "unit_rows", "threshold_holdout", "prune_weights",
                  "label_blocks")
    progress_unit = "points"

    def __init__(self, *, loss="auto", l1=1e-6, l2=1e-5, unit_rows=True, prune_weights=0.0,
                 threshold_holdout=0.1, lr_schedule="adagrad", lr="auto", lr_decay=1e-4,
                 epochs="auto", final_epochs="auto", dense_updates=False, label_blocks=2,
                 threads=1, seed=0):
        """
        Model parameters
        ----------------
        loss : the loss of every one-vs-all model: "logistic", "squared", or
            "squared_hinge" (1/2 max(0, 1 - y s)^2, y = +-1), whose residual is
            zero for every label already scored below -1 (or a positive above
            1), so that a step costs the point's features times the labels
            with a residual, not times all labels. "auto": the squared hinge
            from HINGE_LABELS (2000) labels up, logistic below.
        l1 : L1 weight lambda1 (per example).
        l2 : L2² weight lambda2 (penalty lambda2/2 ‖w‖²).
        unit_rows : scale every point to unit length (training and prediction).
        prune_weights : after training, weights with |w| below this are dropped
            (DiSMEC's model pruning; 0: none).
        threshold_holdout : share of the training points held out to fit the
            per-label thresholds (0: no thresholds): a model is trained
            without them, its scores of them fit the thresholds, and the
            final model is trained on every point (see final_epochs).

        Solver parameters
        -----------------
        lr_schedule : "constant": lr; "decaying": lr / (1 + lr_decay · t);
            "adagrad": lr / (1 + sqrt(G)) per feature (and per label for the bias).
        lr : learning rate; "auto": 1.0 for the squared hinge, 3.0 otherwise.
        lr_decay : decay of the decaying schedule.
        epochs : passes over the training data; "auto": 10 for the logistic
            and squared losses; for the squared hinge about AUTO_STEPS
            (100,000) SGD steps, i.e. 100,000 / n_points passes, at least 2
            and at most 7.
        final_epochs : with a threshold hold-out, how the final model is
            made: 0: trained anew on every point (epochs passes, side by
            side with the hold-out model); n >= 1: the hold-out model
            continued, n passes over every point. "auto": FINAL_SHARE (0.3)
            of epochs, rounded, at least 1, where the features are sparse
            (below CONTINUE_BELOW, 50, points per feature on average, as on
            text); 0 otherwise.
        dense_updates : the plain algorithm: every weight regularised at every
            step (slow; for comparison).

        Run parameters
        --------------
        label_blocks : the labels are split into this many contiguous blocks
            of (nearly) equal size, each trained on its own (DiSMEC's way of
            spreading one-vs-all over machines): the same points in the same
            order, but the AdaGrad accumulators of the features are per block
            (a feature's rate falls with the gradients of its block's labels
            only), so the model changes with the number of blocks, not with
            where the blocks run. 2 by default, for two threads to share
            the work of one model.
        threads : trainings at once (threads; the kernel runs without the
            GIL): label blocks side by side, and a final model trained anew
            side by side with the hold-out one (twice the memory). The model
            does not depend on it.
        seed : random seed (shuffling, hold-out).

        A fitted model records the values "auto" stood for (its parameters
        in the model folder and get_params() after fit are concrete).
        """
        self.loss = loss
        self.l1 = l1
        self.l2 = l2
        self.lr_schedule = lr_schedule
        self.lr = lr
        self.lr_decay = lr_decay
        self.epochs = epochs
        self.final_epochs = final_epochs
        self.unit_rows = unit_rows
        self.dense_updates = dense_updates
        self.threshold_holdout = threshold_holdout
        self.prune_weights = prune_weights
        self.label_blocks = label_blocks
        self.threads = threads
        self.seed = seed

    @staticmethod
    def auto_loss(n_labels):
        return "squared_hinge" if n_labels >= HINGE_LABELS else "logistic"

    @staticmethod
    def auto_epochs(n_points, loss):
        if loss != "squared_hinge":
            return SMOOTH_EPOCHS
        return int(min(MAX_AUTO_EPOCHS, max(MIN_AUTO_EPOCHS, round(AUTO_STEPS / max(1, n_points)))))

    @staticmethod
    def auto_final_epochs(epochs, points_per_feature):
        if points_per_feature >= CONTINUE_BELOW:
            return 0
        return max(1, int(round(FINAL_SHARE * epochs)))

    def _settings(self, n_points=None, n_labels=None, X=None):
        """The parameters with "auto" replaced by what it stands for (on
        n_points training points and n_labels labels, by default the
        model's, and the training points X)."""
        p = self.params
        if p.loss == "auto":
            p.loss = self.auto_loss(self.n_labels_ if n_labels is None else n_labels)
        if p.lr == "auto":
            p.lr = AUTO_LR[p.loss]
        if p.epochs == "auto" and n_points is not None:
            p.epochs = self.auto_epochs(n_points, p.loss)
        if p.final_epochs == "auto" and p.epochs != "auto" and X is not None:
            p.final_epochs = self.auto_final_epochs(p.epochs, X.nnz / max(1, X.shape[1]))
        return p

    def start_fit(self, X, Y):
        X, Y = super().start_fit(X, Y)
        self.settings_ = self._settings(X.shape[0], X=X)
        return X, Y

    def _n_holdout(self, n_points):
        h = self.params.threshold_holdout
        return max(1, int(round(h * n_points))) if h > 0 else 0

    def progress_total(self, n_points, n_labels, X=None):
        """Points the SGD visits, in every label block (with a hold-out, the
        hold-out model's too); X, the training points, where final_epochs
        is "auto"."""
        p = self._settings(n_points, n_labels, X)
        if p.final_epochs == "auto" and p.threshold_holdout > 0:
            raise XmlkitError("Linear.progress_total: final_epochs 'auto' needs the "
                              "training points X")
        hold = self._n_holdout(n_points)
        blocks = len(block_bounds(n_labels, p.label_blocks)) - 1
        passes = [(n_points - hold, p.epochs)] if hold else []
        if not hold or p.final_epochs == 0:
            passes.append((n_points, p.epochs))
        else:
            passes.append((n_points, p.final_epochs))
        return blocks * sum(n * e for n, e in passes)

    def _phases(self, n_points, rest):
        """(points, passes) of each phase of a training: on every point;
        with the hold-out's complement `rest`, on it, then (final_epochs
        from 1) continued on every point."""
        p = self.settings_
        every = np.arange(n_points, dtype=np.int64)
        if rest is None:
            return [(every, p.epochs)]
        if p.final_epochs == 0:
            return [(rest, p.epochs)]
        return [(rest, p.epochs), (every, p.final_epochs)]

    def _train(self, X, Y, rest, tick, log=None, executor=None, threads=None):
        """The arrays (weights, biases) after each phase (_phases) of a
        training on X, Y: one block of labels, or the label blocks on
        `threads` threads (default: the parameter) or as the tasks of
        `executor` (xmlkit.cluster), merged in label order."""
        p = self.settings_
        threads = threads or p.threads
        bounds = block_bounds(self.n_labels_, p.label_blocks)
        if len(bounds) == 2 and executor is None:
            return self._train_block(X, Y, rest, 0, self.n_labels_, tick, log)
        blocks = list(zip(bounds[:-1], bounds[1:]))
        if log:
            log(f"linear: {len(blocks)} label blocks of {blocks[0][1] - blocks[0][0]} labels"
                + (" (Dask tasks)" if executor is not None else f" ({threads} threads)"))
        if executor is not None:
            worker = self.copy_without("arrays_")
            visits = sum(len(points) * e for points, e in self._phases(X.shape[0], rest))
            parts = []
            for part in executor.map_blocks(train_block, (worker, X, Y, rest), blocks):
                tick(visits)
                parts.append(part)
        elif min(threads, len(blocks)) == 1:     # (no thread started for one at a time)
            parts = [self._train_block(X, Y, rest, *b, tick) for b in blocks]
        else:
            from concurrent.futures import ThreadPoolExecutor
            pool = ThreadPoolExecutor(min(threads, len(blocks)))
            try:
                parts = list(pool.map(lambda b: self._train_block(X, Y, rest, *b, tick), blocks))
            finally:
                pool.shutdown(wait=False, cancel_futures=True)
        return [merge_blocks([part[k] for part in parts], bounds) for k in range(len(parts[0]))]

    def _train_block(self, X, Y, rest, lo, hi, tick=None, log=None):
        """The arrays of labels lo .. hi-1 (block-local label indices) after
        each phase of the training (_phases)."""
        from xmlkit._ext.elastic_ova import ElasticOVA
        p = self.settings_
        tick = tick or (lambda _: None)
        if (lo, hi) != (0, self.n_labels_):
            Ys = Y.to_scipy()[:, lo:hi].tocsr()
            Ys.sort_indices()
            Y = as_rows(Ys, "labels")
        rng = np.random.default_rng(p.seed)
        decay = p.lr_decay if p.lr_schedule == "decaying" else 0.0
        m = ElasticOVA(self.n_features_in_, hi - lo, p.l1, p.l2, p.lr, decay,
                       p.loss, not p.dense_updates, p.lr_schedule == "adagrad")
        xp, yp = X.indptr.astype(np.int64), Y.indptr.astype(np.int64)
        out = []
        for points, epochs in self._phases(X.shape[0], rest):
            for e in range(epochs):
                start = time.perf_counter()
                order = points[rng.permutation(len(points))]
                for c in range(0, len(order), CHUNK_POINTS):     # the kernel keeps its state
                    part = order[c:c + CHUNK_POINTS]
                    m.epoch(xp, X.indices, X.data, yp, Y.indices, part)
                    tick(len(part))
                if log:
                    log(f"linear: epoch {e + 1}/{epochs} on {len(points)} points in "
                        f"{time.perf_counter() - start:.1f} s; nnz(W) {m.nnz}")
            ptr, idx, val, bias = m.weights()
            if p.prune_weights > 0:
                ptr, idx, val = prune_small(ptr, idx, val, p.prune_weights)
            out.append({"w_ptr": ptr, "w_idx": idx, "w_val": val, "bias": bias})
        return out

    def _fit_arrays(self, X, Y, progress=None, log=None, executor=None):
        """The fit after start_fit; progress(n) as points are visited,
        log(message); label blocks as tasks of `executor` when given."""
        p = self.settings_
        if p.unit_rows:
            X = unit_rows(X)
        tick = progress or (lambda _: None)
        dense_gb = 8 * self.n_features_in_ * self.n_labels_ / 1e9
        if log:
            final = (f"continued over every point for {p.final_epochs} more" if p.final_epochs
                     else "then a model trained anew on every point")
            log(f"linear: loss {p.loss}, lr {p.lr}, {p.epochs} epochs"
                + (f"; {p.threshold_holdout:.0%} held out for the thresholds, {final}"
                   if p.threshold_holdout > 0 else ""))
            log(f"linear: W is {self.n_features_in_} x {self.n_labels_} ({dense_gb:.2f} GB if "
                "every weight were stored; rows are kept sparse, the stronger l1 the sparser)")
        avail = available_bytes()
        if avail is not None and dense_gb * 1e9 > avail:
            warnings.warn(f"linear: W could reach {dense_gb:.1f} GB (D x L doubles) and "
                          f"{avail / 1e9:.1f} GB are available: weight rows stay sparse only "
                          "under a strong enough l1 (or use fewer labels or features)",
                          XmlkitWarning, stacklevel=2)
        if p.threshold_holdout > 0:
            rng = np.random.default_rng(p.seed ^ 0x5EED)
            perm = rng.permutation(X.shape[0])
            n_hold = self._n_holdout(X.shape[0])
            hold, rest = np.sort(perm[:n_hold]), np.sort(perm[n_hold:]).astype(np.int64)
            if p.final_epochs > 0:
                part, full = self._train(X, Y, rest, tick, log, executor)
            elif executor is None and p.threads >= 2:
                # the hold-out model and the final one do not depend on each
                # other: side by side, the threads shared between them
                from concurrent.futures import ThreadPoolExecutor
                half = p.threads // 2
                pool = ThreadPoolExecutor(2)
                try:
                    f_part = pool.submit(self._train, X, Y, rest, tick, log, None, half)
                    f_full = pool.submit(self._train, X, Y, None, tick, log, None,
                                         p.threads - half)
                    [part], [full] = f_part.result(), f_full.result()
                finally:
                    pool.shutdown(wait=False, cancel_futures=True)
            else:
                [part] = self._train(X, Y, rest, tick, log, executor)
                [full] = self._train(X, Y, None, tick, log, executor)
            Xs, Ys = X.to_scipy(), Y.to_scipy()
            full["thresholds"] = self._fit_thresholds(part, Xs[hold], Ys[hold])
        else:
            [full] = self._train(X, Y, None, tick, log, executor)
            full["thresholds"] = np.full(self.n_labels_, 0.5)
        self.arrays_ = full
        if log:
            log(f"linear: {X.shape[0]} points, {self.n_features_in_} features, {self.n_labels_} "
                f"labels; nnz(W) {len(self.arrays_['w_idx'])} of "
                f"{self.n_features_in_ * self.n_labels_}")

    def _fit_thresholds(self, arrays, Xs, Ys):
        """fit_thresholds_blocked of the hold-out model `arrays` on the
        hold-out rows Xs, Ys (scipy csr), THRESHOLD_COLUMNS labels at a time."""
        W, bias = self._weights(arrays).tocsc(), arrays["bias"]
        link = self._link()
        return fit_thresholds_blocked(
            lambda c0, c1: link(np.asarray((Xs @ W[:, c0:c1]).todense()) + bias[None, c0:c1]),
            Ys, self.n_labels_, THRESHOLD_COLUMNS)

    # -- prediction
    def _weights(self, arrays=None):
        """W (features x labels, csr) of the model, or of `arrays`."""
        import scipy.sparse as sp
        a = self.arrays_ if arrays is None else arrays
        return sp.csr_matrix((a["w_val"], a["w_idx"], a["w_ptr"]),
                             shape=(self.n_features_in_, self.n_labels_))

    def _probabilities(self, Xs):
        """Dense probabilities of the rows of Xs (scipy csr, n_features columns,
        already unit rows)."""
        Z = np.asarray((Xs @ self._weights()).todense()) + self.arrays_["bias"][None, :]
        return self._link()(Z)

    def _link(self):
        """Scores onto probabilities, by the model's loss."""
        loss = self._settings().loss
        if loss == "logistic":
            return sigmoid
        if loss == "squared_hinge":     # scores -1 .. 1 onto 0 .. 1
            return lambda Z: np.clip(0.5 * (Z + 1), 0, 1)
        return lambda Z: np.clip(Z, 0, 1)

    def _check_predict(self, given, used):
        if used["threshold"] is not None and \
                DECISION_ALIASES.get(used["decision"], used["decision"]) != "threshold":
            raise InvalidParameterError(("threshold", "decision"),
                                        "Linear: threshold goes with decision=threshold")

    def predict(self, X, k=5, threads=1, progress=None, decision=None, threshold=None):
        """Probabilities (the k best per row; k=None: every label), or label sets
        with the fitted per-label thresholds (decision="threshold"), or with
        one cut p >= threshold where given. Rows in, Rows out; else a scipy
        csr_matrix. decision: None is the model's (PREDICT_PARAMS: "scores")."""
        self._require_fitted()
        p = self._predict_params(decision=decision, threshold=threshold)
        decision = DECISION_ALIASES.get(p["decision"], p["decision"])
        R = model_rows(X, self.n_features_in_)
        if self.params.unit_rows:
            R = unit_rows(R)
        Xs = R.to_scipy()
        if Xs.shape[1] < self.n_features_in_:
            import scipy.sparse as sp
            Xs = sp.csr_matrix((Xs.data, Xs.indices, Xs.indptr),
                               shape=(Xs.shape[0], self.n_features_in_))
        theta = None
        if decision == "threshold":
            theta = self.arrays_["thresholds"] if p["threshold"] is None else \
                np.full(self.n_labels_, p["threshold"])
        return like(X, scored_blocks(R.shape[0], self.n_labels_,
                                     lambda r0, r1: self._probabilities(Xs[r0:r1]),
                                     selector(k, theta), progress))

    EXPLAIN_KIND = "margin"

    def _effects(self, R, S, threads, n_top=0, **params):
        """Each feature's term w_lj x_j of the label's margin (x the unit
        row when the model scales rows): exact, the terms and the label's
        bias add up to the margin its probability is the link of."""
        from xmlkit.explanation import EntryIndex, ascending_rows, pair_blocks, row_pairs
        X = unit_rows(R) if self.params.unit_rows else R
        w = self.arrays_
        W = EntryIndex(ascending_rows(w["w_ptr"], w["w_idx"], w["w_val"],
                                      (self.n_features_in_, self.n_labels_)))
        out = []
        for r0, r1 in pair_blocks(X, S):
            a, e = row_pairs(X, S, r0, r1)
            f = X.indices[e]
            out.append((a, f, W.values(f, S.indices[a]) * X.data[e].astype(np.float64)))
        if not out:
            return np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0)
        return tuple(np.concatenate([o[i] for o in out]) for i in range(3))

    # -- storage
    def _check_arrays(self, a, name):
        D, L = self.n_features_in_, self.n_labels_
        checks.need(a, ("w_ptr", "w_idx", "w_val", "bias", "thresholds"), name)
        checks.csr(a["w_ptr"], a["w_idx"], a["w_val"], D, L, name, "weight")
        checks.floats(a["bias"], name, "bias", (L,))
        checks.floats(a["thresholds"], name, "thresholds", (L,))

    def stats(self):
        nnz = len(self.arrays_["w_idx"])
        return {"nnz_weights": nnz, "weight_density": nnz / max(1, self.n_features_in_ *
                                                                 self.n_labels_)}

    def summary(self):
        s = self.stats()
        return f"nnz(W) {s['nnz_weights']} ({100 * s['weight_density']:.1f}% of D × L)"
