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
from xmlkit.csr import Rows, like, model_rows
from xmlkit.errors import XmlkitError
from xmlkit.models.arrays import (ROW_BLOCK, ArrayModel, coo_rows, scored_blocks, selector,
                                  sigmoid)
from xmlkit.models.base import SEED, integer, one_of, real

LABEL_BLOCK = 256     # labels per block in F1 inference
DECISIONS = ("scores", "threshold", "f1")


# ------------------------------------------------------------------ algebra
def with_ones(X):
    """X (csr) with a last column of ones."""
    import scipy.sparse as sp
    return sp.hstack([X, np.ones((X.shape[0], 1), np.float64)], format="csr")


def pcg(X, B, reg, M, iters):
    """Z ≈ (XᵀX + reg·I)⁻¹ B for every column of B at once: preconditioned
    conjugate gradient (Jacobi M = diag(XᵀX) + reg), from 0, at most `iters`
    steps, stopping a column when its squared residual is below 1e-6 of the
    start; the best iterate (smallest residual) of each column is returned."""
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


def orthonormal(T):
    """Columns of T made orthonormal symmetrically: T·V·Λ^(−1/2), TᵀT = VΛVᵀ
    (pseudo-inverse for zero eigenvalues)."""
    lam, V = np.linalg.eigh(T.T @ T)
    inv = np.where(lam > 1e-12 * max(lam.max(), 1e-300), 1 / np.sqrt(np.maximum(lam, 1e-300)), 0)
    return T @ (V * inv)


EXACT_RANK_LABELS = 4000   # up to this many labels the eigenvalues of YᵀY are exact
MAX_AUTO_RANK = 500        # above it, the automatic rank is at most this


def auto_rank(Y, mass=0.9, rng=None):
    """Smallest k whose top eigenvalues of YᵀY hold `mass` of their sum
    (trace(YᵀY) = ‖Y‖²_F). Up to EXACT_RANK_LABELS labels from the
    eigenvalues of YᵀY; above, from the top singular values of Y by a
    randomized range finder (two power iterations), at most MAX_AUTO_RANK."""
    c = Y.shape[1]
    total = float(Y.multiply(Y).sum())
    if total <= 0:
        return 1
    if c <= EXACT_RANK_LABELS:
        lam = np.sort(np.linalg.eigvalsh((Y.T @ Y).toarray()))[::-1]
        cum = np.cumsum(np.maximum(lam, 0))
        return int(np.searchsorted(cum, mass * cum[-1]) + 1)
    rng = rng or np.random.default_rng(0)
    K = min(c, Y.shape[0], MAX_AUTO_RANK + 20)
    Q = np.linalg.qr(Y @ rng.standard_normal((c, K)))[0]
    for _ in range(2):
        Q = np.linalg.qr(Y @ np.linalg.qr(Y.T @ Q)[0])[0]
    sigma = np.linalg.svd(np.asarray((Y.T @ Q).T), compute_uv=False)
    cum = np.cumsum(sigma ** 2)
    k = int(np.searchsorted(cum, mass * total) + 1)
    return min(k, MAX_AUTO_RANK, c)


def label_embedding(X1, Y, k, oversample, passes, lam, iters, rng):
    """V_E (c×k): top-k left singular vectors of YᵀX(XᵀX + c_x I)⁻¹XᵀY,
    by the randomized range finder; X1 has its column of ones."""
    d, c = X1.shape[1], Y.shape[1]
    k = min(k, d, c)
    kp = min(d, c, k + oversample)
    cx = lam * float(X1.multiply(X1).sum()) / d
    M = np.asarray(X1.multiply(X1).sum(axis=0)).ravel() + cx
    Q = rng.standard_normal((c, kp))
    for _ in range(passes):
        Z = pcg(X1, X1.T @ (Y @ Q), cx, M, iters)
        Q = orthonormal(Y.T @ (X1 @ Z))
    Z = pcg(X1, X1.T @ (Y @ Q), cx, M, iters)
    T = Y.T @ (X1 @ Z)
    lam_t, V = np.linalg.eigh(T.T @ T)
    order = np.argsort(lam_t)[::-1][:k]
    sigma = np.sqrt(np.maximum(lam_t[order], 0))
    scale = sigma / (sigma ** 2 + 1e-12 * max(sigma.max() ** 2, 1e-300))
    return T @ V[:, order] * scale, cx, M


def median_sq_distance(H, rng, sample=1000):
    idx = rng.choice(H.shape[0], size=min(sample, H.shape[0]), replace=False)
    S = H[idx]
    sq = (S ** 2).sum(axis=1)
    D = np.maximum(sq[:, None] + sq[None, :] - 2 * S @ S.T, 0)
    return float(np.median(D))


def fourier(H1, Omega, b):
    """[cos(H1 Ω + b), 1] for the rows of H1."""
    Phi = np.empty((H1.shape[0], Omega.shape[1] + 1))
    np.cos(H1 @ Omega + b, out=Phi[:, :-1])
    Phi[:, -1] = 1
    return Phi


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
    _parameter_constraints = {
        "rank": integer(0), "oversample": integer(0), "passes": integer(1),
        "embed_lambda": real(0, lo_open=True), "cg_iters": integer(1),
        "num_features": integer(1), "kernel": one_of("gaussian", "cauchy"),
        "bandwidth": real(0, lo_open=True), "ridge": real(0, lo_open=True),
        "loss": one_of("ridge", "logistic"), "epochs": integer(0),
        "eta": real(0, lo_open=True), "momentum": real(0, 1, hi_open=True),
        "decay": real(0, 1, lo_open=True), "shrink": real(0.5, 1, lo_open=True), "seed": SEED,
    }
    MODEL_KEYS = ("rank", "oversample", "passes", "embed_lambda", "cg_iters", "num_features",
                  "kernel", "bandwidth", "ridge", "loss", "epochs", "eta", "momentum", "decay",
                  "shrink")

    def __init__(self, *, rank=0, oversample=20, passes=1, embed_lambda=1.0, cg_iters=20,
                 num_features=1000, kernel="gaussian", bandwidth=0.3, ridge=1e-2,
                 loss="ridge", epochs=5, eta=1.0, momentum=0.5, decay=1.0, shrink=1.0, seed=0):
        """
        Parameters
        ----------
        rank : embedding dimension k; 0: the smallest k whose top eigenvalues
            of YᵀY hold 90% of their sum (above 4000 labels estimated by a
            randomized range finder, at most 500).
        oversample : extra columns p of the Gaussian test matrix.
        passes : range-finder passes q.
        embed_lambda : ridge of the embedding solves, times tr(XᵀX)/d.
        cg_iters : conjugate-gradient iterations per solve.
        num_features : random Fourier features f.
        kernel : random-feature kernel, "gaussian" or "cauchy".
        bandwidth : frequency multiplier on the median-heuristic bandwidth.
        ridge : ridge of the output layer, times tr(ΦᵀΦ)/(f+1).
        loss : "ridge" output layer, or "logistic": refined by per-class
            logistic loss.
        epochs : logistic refinement epochs.
        eta : logistic step size (preconditioned).
        momentum : heavy-ball momentum of the logistic steps.
        decay : step-size decay per epoch (<= 1).
        shrink : label smoothing s: targets s·y + (1−s)(1−y).
        seed : random seed (test matrix, frequencies, batches).
        """
        self.rank = rank
        self.oversample = oversample
        self.passes = passes
        self.embed_lambda = embed_lambda
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
        self.seed = seed

    progress_unit = "steps"

    def progress_total(self, n_points, n_labels):
        """Steps of training's progress callback: the three stages of the
        fit and the epochs of the logistic refinement."""
        p = self.params
        return 3 + (p.epochs if p.loss == "logistic" else 0)

    def _fit_arrays(self, X, Y, progress=None, log=None, executor=None):
        """The fit after _start_fit; progress(n) after each step, log(message).
        One fit: there are no tasks for an `executor` to run."""
        if executor is not None:
            raise XmlkitError("an embed model is one fit: it has no tasks for a cluster")
        import scipy.sparse as sp
        from scipy.linalg import cho_factor, cho_solve
        p = self.params
        X, Y = X.to_scipy().astype(np.float64), Y.to_scipy()
        Y = sp.csr_matrix((np.ones(Y.nnz), Y.indices, Y.indptr), shape=Y.shape)
        Y.sum_duplicates()
        Y.data[:] = 1
        n = X.shape[0]
        rng = np.random.default_rng(p.seed)
        tick = progress or (lambda _: None)
        k = p.rank or auto_rank(Y, rng=np.random.default_rng(p.seed))
        X1 = with_ones(X)
        VE, cx, M = label_embedding(X1, Y, k, p.oversample, p.passes, p.embed_lambda,
                                    p.cg_iters, rng)
        tick(1)
        Wx = pcg(X1, X1.T @ (Y @ VE), 1e-6 * cx, M - cx + 1e-6 * cx, p.cg_iters)
        H1 = np.hstack([X1 @ Wx, np.ones((n, 1))])
        qd = median_sq_distance(H1, rng)
        scale = p.bandwidth * np.sqrt(2 / qd) if qd > 0 else p.bandwidth
        shape = (H1.shape[1], p.num_features)
        G = rng.standard_normal(shape) if p.kernel == "gaussian" \
            else np.tan(np.pi * (rng.random(shape) - 0.5))
        Omega = scale * G
        b = rng.uniform(-np.pi / 2, np.pi / 2, p.num_features)
        Phi = fourier(H1, Omega, b)
        tick(1)
        A = Phi.T @ Phi
        A[np.diag_indices_from(A)] += p.ridge * np.trace(A) / A.shape[0]
        chol = cho_factor(A)
        s = p.shrink
        # Φᵀ(sY + (1−s)(1−Y)) without the dense n×c targets
        PhiY = np.asarray((Y.T @ Phi).T)
        target = s * PhiY + (1 - s) * (Phi.sum(axis=0)[:, None] - PhiY)
        V = cho_solve(chol, target)
        tick(1)
        if p.loss == "logistic":
            V = self._logistic(Phi, Y, V, target, chol, rng, tick, log)
        self.arrays_ = {"Wx": Wx.astype(np.float32), "Omega": Omega, "b": b,
                       "V": V.astype(np.float32),
                       "prior": np.asarray(Y.mean(axis=0)).ravel(),
                       "rank": np.array([VE.shape[1]])}
        if log:
            log(f"embed: {n} points, {self.n_features_in_} features, {self.n_labels_} labels; "
                f"rank {VE.shape[1]}, {p.num_features} random features")

    def _logistic(self, Phi, Y, V, target, chol, rng, tick, log):
        from scipy.linalg import cho_solve
        p = self.params
        n = Phi.shape[0]
        # a tenth of the points per step, at most 2^24 logits (128 MB) at once
        bs = max(1, min(-(-n // 10), (1 << 24) // max(self.n_labels_, Phi.shape[1])))
        eta = p.eta * (1 - p.momentum)
        dV = np.zeros_like(V)
        for _ in range(p.epochs):
            perm = rng.permutation(n)
            for start in range(0, n, bs):
                B = perm[start:start + bs]
                P = sigmoid(Phi[B] @ V)
                grad = (len(B) / n) * target - Phi[B].T @ P
                dV = p.momentum * dV + (eta * n / len(B)) * cho_solve(chol, grad)
                V = V + dV
            eta *= p.decay
            dV *= p.decay
            tick(1)
        return V

    # -- prediction
    def features(self, R, r0, r1):
        """φ of rows r0..r1-1 of R (Rows): the random features of the embedding."""
        a = self.arrays_
        lo, hi = R.indptr[r0], R.indptr[r1]
        Xs = Rows(R.indptr[r0:r1 + 1] - lo, R.indices[lo:hi], R.data[lo:hi],
                  (r1 - r0, R.shape[1])).to_scipy()
        Wx = a["Wx"].astype(np.float64)
        H1 = np.empty((r1 - r0, Wx.shape[1] + 1))
        # rows of Wx: the features (X may have fewer columns than in training), then the 1
        H1[:, :-1] = Xs.astype(np.float64) @ Wx[:Xs.shape[1]] + Wx[-1]
        H1[:, -1] = 1
        return fourier(H1, a["Omega"], a["b"])

    def _link(self, Z):
        return sigmoid(Z) if self.params.loss == "logistic" \
            else np.clip(Z, 0, 1)

    def predict(self, X, k=5, threads=1, progress=None, decision="scores",
                threshold=0.5):
        """Probabilities (the k best per row; k=None: every label), or label sets:
        decision="threshold" (p >= threshold) or "f1" (per-label F1 inference
        over the rows of X). Rows in, Rows out; else a scipy csr_matrix."""
        self._require_fitted()
        if decision not in DECISIONS:
            raise XmlkitError(f"unknown decision '{decision}' (known: {', '.join(DECISIONS)})")
        R = model_rows(X, self.n_features_in_)
        n, L = R.shape[0], self.n_labels_
        V = self.arrays_["V"].astype(np.float64)
        if decision == "f1":
            # every label ranks all the points: their features once, labels by blocks
            Phi = np.vstack([self.features(R, r0, min(n, r0 + ROW_BLOCK))
                             for r0 in range(0, n, ROW_BLOCK)]) if n else np.zeros((0, V.shape[0]))
            rows, cols, vals = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0)]
            for j0 in range(0, L if n else 0, LABEL_BLOCK):
                j1 = min(L, j0 + LABEL_BLOCK)
                P = self._link(Phi @ V[:, j0:j1])
                r, c = np.nonzero(f1_decisions(P, self.arrays_["prior"][j0:j1], n))
                rows.append(r)
                cols.append(c + j0)
                vals.append(np.maximum(P[r, c], 1e-6))
            if progress is not None:
                progress(n)
            return like(X, coo_rows(np.concatenate(rows), np.concatenate(cols),
                                    np.concatenate(vals), (n, L)))
        select = selector(k, threshold if decision == "threshold" else None)
        return like(X, scored_blocks(
            n, L, lambda r0, r1: self._link(self.features(R, r0, r1) @ V), select, progress))

    # -- storage
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

    def stats(self):
        return {"rank": int(self.arrays_["rank"][0]), "random_features": self.params.num_features}

    def summary(self):
        s = self.stats()
        return f"rank {s['rank']}, {s['random_features']} random features"
