"""Multilabel prediction through a randomized low-rank label embedding and a
smooth link (Karampatziakis & Mineiro, "Scalable Multilabel Prediction via
Randomized Methods"; the authors' `rembed` / `calmultimls` code).

1. Embedding (randomized range finder): a Gaussian c×(k+p) test matrix Q;
   `passes` times Z ≈ argmin ‖XZ − YQ‖² + c_x‖Z‖² (preconditioned conjugate
   gradient on sparse X, c_x = λ·tr(XᵀX)/d), T = YᵀXZ, Q = orth(T); a final
   solve, and the top-k left singular vectors of T are the label embedding
   V_E (c×k). The feature map W_x ≈ argmin ‖XW_x − YV_E‖² gives h(x) = xW_x.
2. Random Fourier features of [h(x), 1] (Gaussian or Cauchy frequencies,
   bandwidth by the median heuristic times `bandwidth`), φ = [cos(hΩ + b), 1].
3. Output layer V: ridge closed form (A = ΦᵀΦ + λ·tr/(f+1)·I), optionally
   refined by per-class logistic loss with A⁻¹-preconditioned minibatch
   gradient steps and heavy-ball momentum.

Prediction: probabilities (logistic: σ(φV); ridge: φV clipped to [0, 1]),
label sets by threshold (p ≥ 0.5), or per-label F1 inference over the test
batch (rank the points by p_j, predict the top r maximising
Σ_{t≤r} p_(t) / (r + m·π_j), π_j the training frequency).
Nothing N×c, d×c or N×d dense is formed beyond k(+p) columns, f columns or
a block of rows/labels.
"""
import numpy as np

from xmlkit import checks
from xmlkit._ext.dense_rows import rows_times
from xmlkit.csr import Rows, like, model_rows, piece_rows
from xmlkit.errors import InvalidParameterError, XmlkitError
from xmlkit.models.matrix_family import (ROW_BLOCK, THRESHOLD_COLUMNS, ArrayModel, coo_rows,
                                         fit_thresholds_blocked, scored_blocks,
                                         selector, sigmoid)
from xmlkit.models.base import SEED, integer, one_of, real

LABEL_BLOCK = 256     # labels per block in F1 inference
COLUMN_BLOCK = 32     # right-hand sides solved at once (pcg)


# ------------------------------------------------------------------ algebra
def with_ones(X):
    """X (csr) with a last column of ones."""
    import scipy.sparse as sp
    return sp.hstack([X, np.ones((X.shape[0], 1), np.float64)], format="csr")


def pcg(X, B, reg, M, iters):
    """Z ≈ (XᵀX + reg·I)⁻¹ B for every column of B at once: preconditioned
    conjugate gradient (Jacobi M = diag(XᵀX) + reg), from 0, at most `iters`
    steps, stopping when every column's squared residual is below 1e-6 of
    its start; the best iterate (smallest residual) of each column is
    returned."""
    Z = np.zeros_like(B)
    R = B.copy()
    Mi = 1.0 / M[:, None]
    Y = Mi * R
    P = Y.copy()
    rz = np.einsum("ij,ij->j", R, Y)
    r0 = np.einsum("ij,ij->j", R, R)
    best, best_r = Z.copy(), r0.copy()
    for _ in range(iters):
        AP = X.T @ (X @ P) + reg * P
        pap = np.einsum("ij,ij->j", P, AP)
        alpha = np.divide(rz, pap, out=np.zeros_like(rz), where=pap > 0)
        Z += alpha * P
        R -= alpha * AP
        rr = np.einsum("ij,ij->j", R, R)
        better = rr < best_r
        best[:, better] = Z[:, better]
        best_r = np.minimum(best_r, rr)
        if np.all(rr <= 1e-6 * r0):
            break
        Y = Mi * R
        rz_new = np.einsum("ij,ij->j", R, Y)
        beta = np.divide(rz_new, rz, out=np.zeros_like(rz), where=rz > 0)
        P = Y + beta * P
        rz = rz_new
    return best


def solve_columns(X, targets, n_cols, reg, M, iters, use, threads=1):
    """The ridge solves Z = (XᵀX + reg·I)⁻¹ Xᵀ·targets(c0, c1) by pcg,
    COLUMN_BLOCK columns at a time (targets(c0, c1): the N × (c1 − c0)
    dense targets of those columns); use(c0, c1, Z) receives each block.
    Blocks run on `threads` threads (the sparse products release the GIL);
    a block's result does not depend on the others, so neither does the
    outcome on the thread count. Memory: a few D × COLUMN_BLOCK blocks per
    thread, never D × n_cols."""
    bounds = [(c0, min(n_cols, c0 + COLUMN_BLOCK)) for c0 in range(0, n_cols, COLUMN_BLOCK)]

    def one(b):
        use(*b, pcg(X, X.T @ targets(*b), reg, M, iters))
    if threads > 1 and len(bounds) > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(threads, len(bounds))) as pool:
            list(pool.map(one, bounds))
    else:
        for b in bounds:
            one(b)


def times_in_place(T, W, rows=4096):
    """T·W written over T (W square), block of rows by block: no second
    array of T's size."""
    for r0 in range(0, T.shape[0], rows):
        T[r0:r0 + rows] = T[r0:r0 + rows] @ W
    return T


def orthonormal(T):
    """Columns of T made orthonormal symmetrically, in place: T·V·Λ^(−1/2),
    TᵀT = VΛVᵀ (pseudo-inverse for zero eigenvalues)."""
    lam, V = np.linalg.eigh(T.T @ T)
    inv = np.where(lam > 1e-12 * max(lam.max(), 1e-300), 1 / np.sqrt(np.maximum(lam, 1e-300)), 0)
    return times_in_place(T, V * inv)


EXACT_RANK_LABELS = 4000   # up to this many labels the eigenvalues of YᵀY are exact
MAX_AUTO_RANK = 500        # above it, the automatic rank is at most this


def _linalg():
    """scipy.linalg, imported once its BLAS has the memory to start
    (xmlkit._memory.require_blas_start: exit 2 rather than a start that
    never returns)."""
    from xmlkit._memory import require_blas_start
    require_blas_start("embed")
    import scipy.linalg
    return scipy.linalg


def auto_rank(Y, mass=0.9, rng=None):
    """Smallest k whose top eigenvalues of YᵀY hold `mass` of their sum
    (trace(YᵀY) = ‖Y‖²_F). Up to EXACT_RANK_LABELS labels from the
    eigenvalues of YᵀY; above, at most MAX_AUTO_RANK, from the top
    eigenvalues of the smaller Gram matrix (YᵀY or YYᵀ, sparse: the same
    non-zero eigenvalues) by a randomized range finder (two power
    iterations in float32; memory a few (its side) × (MAX_AUTO_RANK + 20)
    blocks)."""
    c = Y.shape[1]
    total = float(Y.multiply(Y).sum())
    if total <= 0:
        return 1
    if c <= EXACT_RANK_LABELS:
        lam = np.sort(np.linalg.eigvalsh((Y.T @ Y).toarray()))[::-1]
        cum = np.cumsum(np.maximum(lam, 0))
        return int(np.searchsorted(cum, mass * cum[-1]) + 1)
    qr = _linalg().qr

    def basis(B):
        """An orthonormal basis of B's columns (float32, B overwritten)."""
        return qr(B, mode="economic", overwrite_a=True, check_finite=False)[0]
    rng = rng or np.random.default_rng(0)
    G = (Y.T @ Y if c <= Y.shape[0] else Y @ Y.T).tocsr().astype(np.float32)
    K = min(G.shape[0], MAX_AUTO_RANK + 20)
    Q = basis(G @ rng.standard_normal((G.shape[0], K), np.float32))
    for _ in range(2):
        Q = basis(G @ Q)
    lam = np.linalg.eigvalsh(Q.T @ (G @ Q))[::-1]
    cum = np.cumsum(np.maximum(lam, 0))
    k = int(np.searchsorted(cum, mass * total) + 1)
    return min(k, MAX_AUTO_RANK, c)


def label_embedding(X1, Y, k, oversample, passes, lam, iters, rng, threads=1):
    """V_E (c×k): top-k left singular vectors of YᵀX(XᵀX + c_x I)⁻¹XᵀY,
    by the randomized range finder; X1 has its column of ones. Returns
    V_E, c_x and diag(XᵀX) + c_x (the Jacobi preconditioner)."""
    d, c = X1.shape[1], Y.shape[1]
    k = min(k, d, c)
    kp = min(d, c, k + oversample)
    cx = lam * float(X1.multiply(X1).sum()) / d
    M = np.asarray(X1.multiply(X1).sum(axis=0)).ravel() + cx

    def range_of(Q):
        """T = YᵀX(XᵀX + c_x I)⁻¹XᵀYQ, block of columns by block."""
        T = np.empty((c, Q.shape[1]))

        def use(c0, c1, Z):
            T[:, c0:c1] = Y.T @ (X1 @ Z)
        solve_columns(X1, lambda c0, c1: Y @ Q[:, c0:c1], Q.shape[1], cx, M, iters, use,
                      threads)
        return T
    Q = rng.standard_normal((c, kp))
    for _ in range(passes):
        T = range_of(Q)
        del Q
        Q = orthonormal(T)
    T = range_of(Q)
    del Q
    lam_t, V = np.linalg.eigh(T.T @ T)
    order = np.argsort(lam_t)[::-1][:k]
    sigma = np.sqrt(np.maximum(lam_t[order], 0))
    scale = sigma / (sigma ** 2 + 1e-12 * max(sigma.max() ** 2, 1e-300))
    # the top-k directions, written over T's first k columns
    W = np.zeros((T.shape[1],) * 2)
    W[:, :len(order)] = V[:, order] * scale
    return times_in_place(T, W)[:, :len(order)], cx, M


SAMPLE = 1000          # points of the median-heuristic bandwidth


def median_sq_distance(S):
    """Median squared distance between the rows of S (every pair, each row
    with itself included)."""
    sq = (S ** 2).sum(axis=1)
    D = np.maximum(sq[:, None] + sq[None, :] - 2 * S @ S.T, 0)
    return float(np.median(D))


def fourier(H1, Omega, b):
    """[cos(H1 Ω + b), 1] for the rows of H1 (a row's the same bits alone or
    in any batch: dense_rows)."""
    Phi = np.empty((H1.shape[0], Omega.shape[1] + 1))
    np.cos(rows_times(H1, Omega) + b, out=Phi[:, :-1])
    Phi[:, -1] = 1
    return Phi


#: rows decision="f1-batch" needs (below, a label's expected positives among
#: the rows, m·π, is a fraction of one for most labels: the rule degenerates)
MIN_F1_BATCH = 100


def f1_decisions(P, prior, m):
    """Per-label F1 inference on a block of probabilities P (m points × labels):
    for label j, the points ranked by p_j; predict the top r maximising
    Σ_{t≤r} p_(t) / (r + m·π_j). Returns a boolean mask of P's shape."""
    order = np.argsort(-P, axis=0, kind="stable")
    sorted_p = np.take_along_axis(P, order, axis=0)
    r = np.arange(1, m + 1)[:, None]
    gain = np.cumsum(sorted_p, axis=0) / (r + m * prior[None, :])
    best = np.argmax(gain, axis=0) + 1
    keep_sorted = r <= best[None, :]
    mask = np.zeros_like(P, dtype=bool)
    np.put_along_axis(mask, order, keep_sorted, axis=0)
    return mask


class Embed(ArrayModel):
    """``Embed(...).fit(X, Y)``, then ``predict(X, k, decision=...)``."""

    algorithm = "embed"
    ARRAYS = "embed"
    PREDICT_PARAMS = {
        "decision": ("scores", one_of("scores", "threshold", "f1", "f1-batch")),
        "threshold": (0.5, real()),
    }
    _parameter_constraints = {
        "rank": integer(0), "oversample": integer(0), "passes": integer(1),
        "embed_lambda": real(0, lo_open=True), "map_lambda": real(0, lo_open=True),
        "cg_iters": integer(1), "threads": integer(1),
        "num_features": integer(1), "kernel": one_of("gaussian", "cauchy"),
        "bandwidth": real(0, lo_open=True), "ridge": real(0, lo_open=True),
        "loss": one_of("ridge", "logistic"), "epochs": integer(0),
        "eta": real(0, lo_open=True), "momentum": real(0, 1, hi_open=True),
        "decay": real(0, 1, lo_open=True), "shrink": real(0.5, 1, lo_open=True),
        "f1_holdout": real(0, 0.5, hi_open=True), "seed": SEED,
    }
    PARAM_GROUPS = (
        ("Embedding", ("rank", "oversample", "passes", "embed_lambda", "map_lambda", "cg_iters")),
        ("Random features", ("num_features", "kernel", "bandwidth")),
        ("Output layer", ("ridge", "loss", "epochs", "eta", "momentum", "decay", "shrink",
                          "f1_holdout")),
        ("Run", ("threads", "seed")),
    )
    MODEL_KEYS = ("rank", "oversample", "passes", "embed_lambda", "map_lambda", "cg_iters",
                  "num_features",
                  "kernel", "bandwidth", "ridge", "loss", "epochs", "eta", "momentum", "decay",
                  "shrink", "f1_holdout")

    def __init__(self, *, rank=0, oversample=20, passes=1, embed_lambda=1.0, map_lambda=1.0,
                 cg_iters=20, num_features=1000, kernel="gaussian", bandwidth=0.3, ridge=1e-2,
                 loss="ridge", epochs=5, eta=1.0, momentum=0.5, decay=1.0, shrink=1.0,
                 f1_holdout=0.1, threads=1, seed=0):
        """
        Embedding parameters
        --------------------
        rank : embedding dimension k; 0: the smallest k whose top eigenvalues
            of YᵀY hold 90% of their sum (above 4000 labels estimated by a
            randomized range finder, at most 500).
        oversample : extra columns p of the Gaussian test matrix.
        passes : range-finder passes q.
        embed_lambda : ridge of the embedding solves, times tr(XᵀX)/d.
        map_lambda : ridge of the feature map W_x (x to its embedding),
            times tr(XᵀX)/d. The authors' code uses nearly none (1e-6); on
            sparse text with about as many features as points that map
            fits the training points' embeddings exactly and does not carry
            over to new points (docs/algorithms.md).
        cg_iters : conjugate-gradient iterations per solve.

        Random features parameters
        --------------------------
        num_features : random Fourier features f.
        kernel : random-feature kernel, "gaussian" or "cauchy".
        bandwidth : frequency multiplier on the median-heuristic bandwidth.

        Output layer parameters
        -----------------------
        ridge : ridge of the output layer, times tr(ΦᵀΦ)/(f+1).
        loss : "ridge" output layer, or "logistic": refined by per-class
            logistic loss.
        epochs : logistic refinement epochs.
        eta : logistic step size (preconditioned).
        momentum : heavy-ball momentum of the logistic steps.
        decay : step-size decay per epoch (<= 1).
        shrink : label smoothing s: targets s·y + (1−s)(1−y).
        f1_holdout : share of the points held out to fit decision="f1"'s
            per-label thresholds (a first fit on the others, then the fit on
            all: about twice the time); 0: on the training points
            themselves, one fit (their probabilities are too confident:
            fewer labels per row).

        Run parameters
        --------------
        threads : the embedding's ridge solves (blocks of COLUMN_BLOCK
            columns) and the random features' ridge system (blocks of
            ROW_BLOCK points) run on this many threads; the rest of the fit
            is in numpy's BLAS (its own threads). The model does not depend
            on it; it depends on the BLAS's thread count (the order of its
            sums): xml-train gives the BLAS one thread, as does
            OPENBLAS_NUM_THREADS=1 set before numpy is imported.
        seed : random seed (test matrix, frequencies, batches).
        """
        self.rank = rank
        self.oversample = oversample
        self.passes = passes
        self.embed_lambda = embed_lambda
        self.map_lambda = map_lambda
        self.cg_iters = cg_iters
        self.num_features = num_features
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.ridge = ridge
        self.loss = loss
        self.epochs = epochs
        self.eta = eta
        self.momentum = momentum
        self.decay = decay
        self.shrink = shrink
        self.f1_holdout = f1_holdout
        self.threads = threads
        self.seed = seed

    progress_unit = "steps"

    def progress_total(self, n_points, n_labels, X=None):
        """Steps of training's progress callback: the three stages of the
        fit and the epochs of the logistic refinement."""
        p = self.params
        one = 3 + (p.epochs if p.loss == "logistic" else 0)
        return 1 + one * (2 if self._held_out(n_points) else 1)

    def _held_out(self, n):
        """Points of n held out for decision="f1"'s thresholds (f1_holdout);
        0: the thresholds are fitted on all of them, with the model."""
        h = int(round(n * self.params.f1_holdout))
        return h if 0 < h < n else 0

    def _fit_arrays(self, X, Y, progress=None, log=None, executor=None):
        """The fit after start_fit; progress(n) after each step, log(message).
        One fit: there are no tasks for an `executor` to run."""
        if executor is not None:
            raise XmlkitError("an embed model is one fit: it has no tasks for a cluster")
        import scipy.sparse as sp
        from xmlkit._memory import require_memory
        p = self.params
        # (checked before the first product: the BLAS, short of memory, ends
        # the process itself): the random-feature system, A of (f + 1)^2
        # float64 and its factor in place, and the label sums, L x (f + 1) float32
        f1 = p.num_features + 1
        require_memory(8 * f1 * f1 + 4 * self.n_labels_ * f1 + 8 * ROW_BLOCK * f1,
                       f"embed's random-feature system ({p.num_features} random features, "
                       f"L = {self.n_labels_} labels)",
                       "; fewer random features (num_features) fit")
        X, Y = X.to_scipy(), Y.to_scipy()
        Y = sp.csr_matrix((np.ones(Y.nnz), Y.indices, Y.indptr), shape=Y.shape)
        Y.sum_duplicates()
        Y.data[:] = 1
        tick = progress or (lambda _: None)
        n = X.shape[0]
        h = self._held_out(n)
        if h:
            # decision="f1"'s thresholds from a fit on the other points, on
            # these points' probabilities (the training points' own are
            # too confident: in-sample thresholds keep too few labels)
            hold = np.sort(np.random.default_rng(p.seed).permutation(n)[:h])
            rest = np.setdiff1d(np.arange(n), hold)
            part = self._fit_once(X[rest], Y[rest], tick)
            thresholds = self._fit_f1_thresholds(X[hold], Y[hold], part)
            part = None
        a = self._fit_once(X, Y, tick)
        if not h:
            thresholds = self._fit_f1_thresholds(X, Y, a)
        a["f1_thresholds"] = thresholds
        tick(1)
        self.arrays_ = a
        if log:
            log(f"embed: {n} points, {self.n_features_in_} features, {self.n_labels_} labels; "
                f"rank {a['Wx'].shape[1]}, {p.num_features} random features")

    def _fit_once(self, X, Y, tick):
        """The model's arrays fitted on X, Y (scipy csr; Y binary)."""
        linalg = _linalg()
        cho_factor, cho_solve = linalg.cho_factor, linalg.cho_solve
        p = self.params
        n = X.shape[0]
        rng = np.random.default_rng(p.seed)
        k = p.rank or auto_rank(Y, rng=np.random.default_rng(p.seed))
        X1 = with_ones(X.astype(np.float64))
        VE, cx, M = label_embedding(X1, Y, k, p.oversample, p.passes, p.embed_lambda,
                                    p.cg_iters, rng, p.threads)
        tick(1)
        # the feature map: W_x ≈ argmin ‖XW_x − YV_E‖² + c_map‖W_x‖², c_map = map_lambda·tr/d
        c_map = p.map_lambda * cx / p.embed_lambda
        Wx = np.empty((X1.shape[1], VE.shape[1]), np.float32)

        def keep(c0, c1, Z):
            Wx[:, c0:c1] = Z
        solve_columns(X1, lambda c0, c1: Y @ VE[:, c0:c1], VE.shape[1], c_map,
                      M - cx + c_map, p.cg_iters, keep, p.threads)
        VE = X1 = None      # (freed: the map is all that is kept of them)
        a = {"Wx": Wx}
        sample = rng.choice(n, min(n, SAMPLE), replace=False)
        qd = median_sq_distance(self._embedded(X[sample], a))
        scale = p.bandwidth * np.sqrt(2 / qd) if qd > 0 else p.bandwidth
        shape = (Wx.shape[1] + 1, p.num_features)
        G = rng.standard_normal(shape) if p.kernel == "gaussian" \
            else np.tan(np.pi * (rng.random(shape) - 0.5))
        a.update(Omega=scale * G, b=rng.uniform(-np.pi / 2, np.pi / 2, p.num_features))
        # the ridge system over Φ, row block by row block (Φ is never held
        # whole, nor a temporary of YᵀΦ's size)
        f1 = p.num_features + 1
        A = np.zeros((f1, f1))
        YtPhi = np.zeros((self.n_labels_, f1), np.float32)
        PhiSum = np.zeros(f1)
        from xmlkit._ext.label_sums import add_rows_by_label
        for r0, r1, Phi, G in self._gram_blocks(X, a, p.threads):
            A += G
            lo, hi = Y.indptr[r0], Y.indptr[r1]
            add_rows_by_label(YtPhi, Phi, Y.indptr[r0:r1 + 1] - lo, Y.indices[lo:hi])
            PhiSum += Phi.sum(axis=0)
        tick(1)
        A[np.diag_indices_from(A)] += p.ridge * np.trace(A) / A.shape[0]
        chol = cho_factor(A, overwrite_a=True)
        s = p.shrink

        def target(j0, j1):
            """Φᵀ(sY + (1−s)(1−Y)) of labels j0..j1-1, without the dense targets."""
            t = YtPhi[j0:j1].T.astype(np.float64)
            if s != 1:
                t *= 2 * s - 1
                t += (1 - s) * PhiSum[:, None]
            return t
        L = self.n_labels_
        if p.loss == "logistic":
            T = target(0, L)
            V = self._logistic(X, Y, a, cho_solve(chol, T), T, chol, rng, tick)
        else:
            # solved label block by block over the sums (V: YtPhi's transpose)
            V = YtPhi.T
            for j0 in range(0, L, LABEL_BLOCK):
                j1 = min(L, j0 + LABEL_BLOCK)
                V[:, j0:j1] = cho_solve(chol, target(j0, j1), overwrite_b=True)
        tick(1)
        a.update(V=V.astype(np.float32, copy=False), prior=np.asarray(Y.mean(axis=0)).ravel(),
                 rank=np.array([Wx.shape[1]]))
        return a

    def _gram_blocks(self, X, a, threads):
        """(r0, r1, Φ, ΦᵀΦ) of the rows of X, ROW_BLOCK at a time, in order,
        made on `threads` threads, one block each ahead of the one taken:
        each block's product on one BLAS thread (xml-train's), so that its
        sums, and their total added in order, do not depend on the threads."""
        def one(r0, r1):
            Phi = self._phi(X[r0:r1], a)
            return r0, r1, Phi, Phi.T @ Phi
        return piece_rows(one, X.shape[0], threads, chunk=ROW_BLOCK, ahead=1)

    def _fit_f1_thresholds(self, X, Y, a):
        """decision="f1"'s per-label thresholds F*_l / 2 (Lipton et al. 2014:
        for calibrated probabilities the F1-optimal threshold is half the
        best F1) of the model of arrays `a` on the points X, Y (the held-out
        ones, see f1_holdout), THRESHOLD_COLUMNS labels at a time; labels
        with few positives get the pooled one (fit_thresholds_blocked)."""
        from xmlkit._memory import require_memory
        n, f1 = X.shape[0], a["V"].shape[0]
        require_memory(4 * n * (f1 + THRESHOLD_COLUMNS),
                       f"embed's F1 thresholds over {n} training points",
                       "; fewer random features (num_features) fit")
        Phi = self._all_features(X, a)
        return fit_thresholds_blocked(
            lambda c0, c1: self._link(rows_times(Phi, a["V"][:, c0:c1])).astype(np.float64), Y,
            self.n_labels_, THRESHOLD_COLUMNS)

    def _logistic(self, X, Y, a, V, target, chol, rng, tick):
        """V refined by per-class logistic loss: preconditioned minibatch
        steps with heavy-ball momentum (Φ of each batch computed anew)."""
        cho_solve = _linalg().cho_solve
        p = self.params
        n = X.shape[0]
        # a tenth of the points per step, at most 2^24 logits (128 MB) at once
        bs = max(1, min(-(-n // 10), (1 << 24) // max(self.n_labels_, p.num_features + 1)))
        eta = p.eta * (1 - p.momentum)
        dV = np.zeros_like(V)
        for _ in range(p.epochs):
            perm = rng.permutation(n)
            for start in range(0, n, bs):
                B = perm[start:start + bs]
                Phi = self._phi(X[B], a)
                grad = (len(B) / n) * target - Phi.T @ sigmoid(Phi @ V)
                dV = p.momentum * dV + (eta * n / len(B)) * cho_solve(chol, grad)
                V = V + dV
            eta *= p.decay
            dV *= p.decay
            tick(1)
        return V

    # -- prediction
    @staticmethod
    def _embedded(X, a):
        """[h(x), 1] of rows X (scipy CSR, float32; fewer feature columns
        than in training are allowed) with the model's arrays `a`: h(x) =
        x W_x + the row of W_x for the column of ones, in float32 products
        (as W_x is stored)."""
        Wx = a["Wx"]
        H1 = np.empty((X.shape[0], Wx.shape[1] + 1))
        H1[:, :-1] = X @ Wx[:X.shape[1]]
        H1[:, :-1] += Wx[-1]
        H1[:, -1] = 1
        return H1

    def _phi(self, X, a):
        """φ = [cos(H1 Ω + b), 1] of rows X (as _embedded)."""
        return fourier(self._embedded(X, a), a["Omega"], a["b"])

    def _all_features(self, X, a):
        """φ of every row of X (scipy csr, at least one row) by the arrays
        `a`, in float32 as `features` gives them, ROW_BLOCK rows at a time."""
        return np.vstack([self._phi(X[r0:r0 + ROW_BLOCK], a).astype(np.float32)
                          for r0 in range(0, X.shape[0], ROW_BLOCK)])

    def features(self, R, r0, r1):
        """φ of rows r0..r1-1 of R (Rows): the random features of the
        embedding, in float32 (prediction's precision: V is stored so)."""
        lo, hi = R.indptr[r0], R.indptr[r1]
        Phi = self._phi(Rows(R.indptr[r0:r1 + 1] - lo, R.indices[lo:hi], R.data[lo:hi],
                             (r1 - r0, R.shape[1])).to_scipy(), self.arrays_)
        return Phi.astype(np.float32)

    def _link(self, Z):
        return sigmoid(Z) if self.params.loss == "logistic" \
            else np.clip(Z, 0, 1)

    def _check_predict(self, given, used):
        if given.get("threshold") is not None and used["decision"] != "threshold":
            raise InvalidParameterError(("threshold", "decision"),
                                        "Embed: threshold goes with decision=threshold")

    def needs_all_rows(self, **params):
        """Batch F1 inference ranks every row for each label: all of them at once."""
        return self._predict_params(decision=params.get("decision"))["decision"] == "f1-batch"

    def predict(self, X, k=5, threads=1, progress=None, decision=None, threshold=None):
        """Probabilities (the k best per row; k=None: every label), or label sets:
        decision="threshold" (p >= threshold), "f1" (p >= each label's F1
        threshold fitted at training: a row's set depends on the row alone)
        or "f1-batch" (the paper's transductive F1 inference: each label
        ranks the rows of X, so a row's set depends on the others; at least
        MIN_F1_BATCH rows). Rows in, Rows out; else a scipy csr_matrix.
        decision and threshold: None is the model's (PREDICT_PARAMS: "scores",
        0.5)."""
        self._require_fitted()
        p = self._predict_params(decision=decision, threshold=threshold)
        decision, threshold = p["decision"], p["threshold"]
        R = model_rows(X, self.n_features_in_)
        n, L = R.shape[0], self.n_labels_
        V = self.arrays_["V"]            # float32 (as stored), as the features it multiplies
        if decision == "f1" and "f1_thresholds" not in self.arrays_:
            raise XmlkitError("this embed model was trained before decision f1 had its "
                              "thresholds: train it again, or use decision f1-batch over a "
                              f"batch of at least {MIN_F1_BATCH} rows")
        if decision == "f1-batch" and n < MIN_F1_BATCH:
            raise XmlkitError(f"decision f1-batch ranks each label over the rows given: it "
                              f"needs at least {MIN_F1_BATCH} rows, not {n} (decision f1 "
                              "decides each row alone)")
        if decision == "f1-batch":
            # every label ranks all the points: their features once, labels by blocks
            Phi = self._all_features(R.to_scipy(), self.arrays_)    # (n >= MIN_F1_BATCH)
            rows, cols, vals = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0)]
            for j0 in range(0, L, LABEL_BLOCK):
                j1 = min(L, j0 + LABEL_BLOCK)
                P = self._link(rows_times(Phi, V[:, j0:j1]))
                r, c = np.nonzero(f1_decisions(P, self.arrays_["prior"][j0:j1], n))
                rows.append(r)
                cols.append(c + j0)
                vals.append(np.maximum(P[r, c], 1e-6))
            if progress is not None:
                progress(n)
            return like(X, coo_rows(np.concatenate(rows), np.concatenate(cols),
                                    np.concatenate(vals), (n, L)))
        cut = threshold if decision == "threshold" else \
            self.arrays_["f1_thresholds"] if decision == "f1" else None
        select = selector(None if cut is not None else k, cut)
        return like(X, scored_blocks(
            n, L, lambda r0, r1: self._link(rows_times(self.features(R, r0, r1), V)), select,
            progress))

    def _effects(self, R, S, threads, n_top=0, **params):
        """Exact leave-one-feature-out effects on the probabilities: the
        embedding is linear in the row, so removing feature j moves h(x) by
        -x_j W_x[j] and only the random features and the label's dot
        product are computed again (per feature of a row: rank × random
        features, then one dot product per label)."""
        from xmlkit.explanation import pair_blocks, row_pairs
        a_ = self.arrays_
        Wx, V = a_["Wx"], a_["V"]
        width = V.shape[0]
        out = []
        for r0, r1 in pair_blocks(R, S, limit=max(64, (1 << 22) // width)):
            lo, hi = int(R.indptr[r0]), int(R.indptr[r1])
            block = Rows(R.indptr[r0:r1 + 1] - lo, R.indices[lo:hi], R.data[lo:hi],
                         (r1 - r0, R.shape[1])).to_scipy()
            H1 = self._embedded(block, a_)
            # each entry's row without it
            row = np.repeat(np.arange(r1 - r0), np.diff(block.indptr))
            H1e = H1[row]
            H1e[:, :-1] -= block.data[:, None].astype(np.float64) * Wx[block.indices]
            Phi = fourier(H1, a_["Omega"], a_["b"]).astype(np.float32)
            Phie = fourier(H1e, a_["Omega"], a_["b"]).astype(np.float32)
            pa, pe = row_pairs(R, S, r0, r1)
            # each label's probability once, then each pair's without its feature
            a0, a1 = int(S.indptr[r0]), int(S.indptr[r1])
            rows = np.searchsorted(S.indptr, np.arange(a0, a1), side="right") - 1 - r0
            before = self._link(np.einsum("ij,ij->i", Phi[rows].astype(np.float64),
                                          V.T[S.indices[a0:a1]].astype(np.float64)))
            after = self._link(np.einsum("ij,ij->i", Phie[pe - lo].astype(np.float64),
                                         V.T[S.indices[pa]].astype(np.float64)))
            out.append((pa, R.indices[pe], before[pa - a0] - after))
        if not out:
            return np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0)
        return tuple(np.concatenate([o[i] for o in out]) for i in range(3))

    # -- storage
    @classmethod
    def from_manifest(cls, manifest, folder="the model"):
        # folders written before map_lambda existed were trained with 1e-6
        params = manifest["params"]
        if "map_lambda" not in params:
            manifest = {**manifest, "params": {**params, "map_lambda": 1e-6}}
        return super().from_manifest(manifest, folder)

    def _check_arrays(self, a, name):
        d, L = self.n_features_in_, self.n_labels_
        checks.need(a, ("Wx", "Omega", "b", "V", "prior", "rank"), name)
        Wx = checks.floats(a["Wx"], name, "Wx")
        b = checks.floats(a["b"], name, "b")
        if Wx.ndim != 2 or b.ndim != 1:
            raise checks.DamagedModel(name, "Wx or b has the wrong number of dimensions")
        checks.floats(Wx, name, "Wx", (d + 1, Wx.shape[1]))
        checks.floats(a["Omega"], name, "Omega", (Wx.shape[1] + 1, b.shape[0]))
        checks.floats(a["V"], name, "V", (b.shape[0] + 1, L))
        checks.floats(a["prior"], name, "prior", (L,))
        checks.ints(a["rank"], name, "rank", (1,))
        if "f1_thresholds" in a:                # (folders written before it: none)
            t = checks.floats(a["f1_thresholds"], name, "f1_thresholds", (L,))
            if np.any((t < 0) | (t > 1)):
                raise checks.DamagedModel(name, "f1_thresholds are not all in [0, 1]")

    def stats(self):
        return {"rank": int(self.arrays_["rank"][0]), "random_features": self.params.num_features}

    def summary(self):
        s = self.stats()
        return f"rank {s['rank']}, {s['random_features']} random features"
