# One-vs-all linear models for all labels at once, elastic net
# lambda1 |w| + (lambda2 / 2) w^2, trained by SGD with FoBoS proximal steps
# (Lipton & Elkan): per example only the rows of its active features are
# touched. Their owed regularisation is caught up in constant time per
# weight from two global scalars (Phi, beta) and a per-feature snapshot:
#     |w| <- Phi(t) * (|w| / Phi(psi) - lambda1 * (beta(t) - beta(psi)))^+
# with c_t = 1 / (1 + eta_t lambda2), Phi(t+1) = Phi(t) c_t,
# beta(t+1) = beta(t) + eta_t / Phi(t). A touched row's gradient step
# changes only the weights of the labels with a residual; the proximal step
# of that example is owed like the idle ones after it (its snapshot is taken
# before it) and paid at the row's next catch-up, which brings every weight
# current before the row is read: a step costs the labels with a residual,
# not L. Rows are stored sparse (a weight the catch-up zeroes is dropped
# there). A row holding at least half of the L weights is stored dense (L
# doubles, no indices: never more memory than the sparse form, and a plain
# loop), and goes back to sparse, at a catch-up, below a quarter.
# `lazy=False` is the plain algorithm: every weight's proximal step at every
# example, on a dense D x L array (for comparisons).
#
# AdaGrad (adagrad=True): one accumulator per feature, G_i += sum_l (r_l x_i)^2,
# rate eta_i = eta0 / (1 + sqrt(G_i)) shared by the feature's L weights (the
# unregularised bias: one accumulator per label). The
# rate only changes when the feature is active (before that example's
# gradient step, whose owed proximal step uses the new rate like the idle
# ones after it), so the m steps owed have a constant c = 1 / (1 + eta_i
# lambda2) and the catch-up is closed form:
#     |w| <- (c^m |w| - (lambda1 / lambda2) (1 - c^m))^+   (|w| - m eta_i lambda1 if lambda2 = 0).

from libc.stdint cimport int32_t, int64_t
from libc.math cimport copysign, fabs, sqrt
from libc.string cimport memcpy
from libcpp.vector cimport vector
from libcpp.utility cimport pair

cimport numpy as cnp

from sparse_rows cimport array_copy, fill_vector, sigmoid

cnp.import_array()


cdef extern from "xk_wide.h":
    int64_t xk_shrink_row(double* w, double* acc, int64_t K, double scale, double sub,
                          double x) noexcept nogil
    void xk_shrink_row_uncounted(double* w, double* acc, int64_t K, double scale,
                                 double sub, double x) noexcept nogil
    void xk_rows_dotd(double* acc, const double* row, double x, int64_t K) noexcept nogil

cdef enum:
    LOSS_SQUARED = 0
    LOSS_LOGISTIC = 1
    LOSS_HINGE = 2

LOSSES = {"squared": LOSS_SQUARED, "logistic": LOSS_LOGISTIC, "squared_hinge": LOSS_HINGE}


cdef inline double shrink(double w, double scale, double sub) noexcept nogil:
    """sign(w) * max(0, scale * (|w| - sub)), without branches (the signs of
    the weights are unpredictable; a zeroed weight may come out as -0.0,
    which compares equal to 0 everywhere it is tested). The comparison
    compiles to a max instruction; libm's fmax is a call."""
    cdef double m = fabs(w) - sub
    return copysign((m if m > 0.0 else 0.0) * scale, w)


cdef class ElasticOVA:
    """SGD with lazy elastic-net proximal steps for all labels at once (see
    above). Members: see elastic_ova.pxd."""

    def __init__(self, int64_t n_features, int64_t n_labels, double lambda1, double lambda2,
                 double eta0, double decay, loss, bint lazy, bint adagrad=False):
        if lambda1 < 0 or lambda2 < 0 or eta0 <= 0 or decay < 0:
            raise ValueError("lambda1, lambda2, decay >= 0 and eta0 > 0 needed")
        self.D, self.L = n_features, n_labels
        self.l1, self.l2, self.eta0, self.decay = lambda1, lambda2, eta0, decay
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}")
        self.loss = LOSSES[loss]
        self.lazy, self.adagrad = lazy, adagrad
        self.G.resize(n_features, 0.0)
        self.Gb.resize(n_labels, 0.0)
        self.rate.resize(n_features, eta0)
        self.psi.resize(n_features, 0)
        self.rows.resize(n_features if lazy else 0)
        self.drows.resize(n_features if lazy else 0)
        if not lazy:
            self.dense.resize(n_features * n_labels, 0.0)
        self.snap_phi.resize(n_features, 1.0)
        self.snap_beta.resize(n_features, 0.0)
        # (squared hinge: biases start at -1, where every negative label has
        # no residual, so that only the labels a point makes look positive
        # are ever touched and weight rows stay sparse)
        self.bias.resize(n_labels, -1.0 if self.loss == LOSS_HINGE else 0.0)
        self.s.resize(n_labels, 0.0)
        self.r.resize(n_labels, 0.0)
        self.phi, self.beta, self.t = 1.0, 0.0, 0

    def epoch(self, const int64_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
              const int64_t[::1] yp, const int32_t[::1] yi, const int64_t[::1] order):
        """One pass over the examples in `order` (features < n_features, labels < n_labels)."""
        cdef int32_t di = 0
        cdef float df = 0
        cdef const int32_t* xip = &xi[0] if xi.shape[0] else &di
        cdef const float* xvp = &xv[0] if xv.shape[0] else &df
        cdef const int32_t* yip = &yi[0] if yi.shape[0] else &di
        cdef Py_ssize_t k
        with nogil:
            for k in range(order.shape[0]):
                self._step(&xp[0], xip, xvp, &yp[0], yip, order[k])

    cdef int _catch_up(self, int64_t i, double x=0.0) except -1 nogil:
        cdef vector[Entry]* row = &self.rows[i]
        cdef double scale = self.phi / self.snap_phi[i]
        cdef double sub = self.l1 * (self.beta - self.snap_beta[i]) * self.snap_phi[i]
        cdef size_t a, kept = 0
        cdef double w, eta
        cdef int64_t m = self.t - self.psi[i]
        if self.adagrad:
            eta = self.rate[i]
            if self.l2 > 0:
                scale = (1.0 / (1.0 + eta * self.l2)) ** m
                sub = (self.l1 / self.l2) * (1.0 - scale) / scale
            else:
                scale = 1.0
                sub = m * eta * self.l1
            self.psi[i] = self.t
        # |w| <- phi * (|w| / phi_psi - l1 (beta - beta_psi)) = scale * (|w| - sub)
        # bring the row current; with x != 0 also add x * w to the scores
        if self.drows[i].size():
            # (with every label a residual, as a logistic or squared loss
            # has, the step fills the row again: it stays dense, and its
            # weights need no count)
            if self.loss != LOSS_HINGE:
                xk_shrink_row_uncounted(self.drows[i].data(), self.s.data(), self.L, scale,
                                        sub, x)
            elif 4 * xk_shrink_row(self.drows[i].data(), self.s.data(), self.L, scale, sub,
                                   x) < self.L:
                self._to_sparse(i)
        else:
            for a in range(row.size()):
                w = shrink(row[0][a].second, scale, sub)
                if w != 0:
                    row[0][kept] = Entry(row[0][a].first, w)
                    self.s[row[0][a].first] += x * w
                    kept += 1
            row.resize(kept)
        self.snap_phi[i] = self.phi
        self.snap_beta[i] = self.beta
        return 0

    cdef int _step(self, const int64_t* xp, const int32_t* xi, const float* xv,
                   const int64_t* yp, const int32_t* yi, int64_t e) except -1 nogil:
        cdef int64_t L = self.L, j, l, i
        cdef size_t a, b
        cdef double eta = self.eta0 / (1.0 + self.decay * self.t)
        cdef double c
        cdef double x, w, rsq
        cdef vector[Entry]* row
        cdef double* s = self.s.data()
        cdef double* r = self.r.data()
        cdef int32_t* zp
        cdef size_t n_nz = 0
        # current weights of the active rows, scores
        memcpy(s, self.bias.data(), L * sizeof(double))
        for j in range(xp[e], xp[e + 1]):
            i, x = xi[j], xv[j]
            if self.lazy:
                self._catch_up(i, x)
            else:
                for l in range(L):
                    self.s[l] += x * self.dense[i * L + l]
        # residuals of the loss (dLoss/ds per label): sigma(s) - y, s - y, or
        # for the squared hinge 1/2 max(0, 1 - y's)^2 (y' = +-1) min(0, s - 1)
        # for a positive and max(0, s + 1) for a negative: zero for every
        # label the model already ranks well enough, so the updates below
        # touch only the labels in nz (those with a residual)
        # (a loop per loss, on local pointers: the compiler vectorises them)
        if self.loss == LOSS_LOGISTIC:
            for l in range(L):
                r[l] = sigmoid(s[l])
        elif self.loss == LOSS_SQUARED:
            memcpy(r, s, L * sizeof(double))
        else:
            for l in range(L):
                r[l] = s[l] + 1.0 if s[l] > -1.0 else 0.0
        for j in range(yp[e], yp[e + 1]):
            l = yi[j]
            if self.loss == LOSS_HINGE:
                r[l] = s[l] - 1.0 if s[l] < 1.0 else 0.0
            else:
                r[l] -= 1.0
        # the labels with a residual, written without a branch
        self.nz.resize(L)
        zp = self.nz.data()
        for l in range(L):
            zp[n_nz] = <int32_t> l
            n_nz += r[l] != 0
        self.nz.resize(n_nz)
        rsq = 0
        if self.adagrad:
            for a in range(self.nz.size()):
                rsq += self.r[self.nz[a]] * self.r[self.nz[a]]
        # gradient step on the active rows (lazy: their proximal step for this
        # example is owed; plain: every weight's comes below)
        for j in range(xp[e], xp[e + 1]):
            i, x = xi[j], xv[j]
            if self.adagrad:
                self.G[i] += x * x * rsq
                self.rate[i] = self.eta0 / (1.0 + sqrt(self.G[i]))
                eta = self.rate[i]
            if self.lazy and self.drows[i].size():
                self._dense_row_step(i, eta * x)
            elif self.lazy:
                # merge the sparse row and the labels with a residual (both
                # ascending): every other label keeps its weight
                row = &self.rows[i]
                self._merge_step(row, eta * x)
                if 2 * row.size() >= <size_t> L:
                    self._to_dense(i)
            else:
                for l in range(L):
                    self.dense[i * L + l] -= eta * x * self.r[l]
        eta = self.eta0 / (1.0 + self.decay * self.t)
        c = 1.0 / (1.0 + eta * self.l2)
        for a in range(self.nz.size()):
            l = self.nz[a]
            if self.adagrad:   # the bias: AdaGrad per label
                self.Gb[l] += self.r[l] * self.r[l]
                self.bias[l] -= self.eta0 / (1.0 + sqrt(self.Gb[l])) * self.r[l]
            else:
                self.bias[l] -= eta * self.r[l]
        if self.lazy:
            # (the active rows' snapshots, taken at their catch-up above, are
            # from before this step: its proximal step is owed with the rest)
            if not self.adagrad:
                self.beta += eta / self.phi
                self.phi *= c
                if self.phi < 1e-100:
                    self._rebase()
        elif self.adagrad:
            for i in range(self.D):
                c = 1.0 / (1.0 + self.rate[i] * self.l2)
                for l in range(L):
                    self.dense[i * L + l] = shrink(self.dense[i * L + l], c,
                                                   self.rate[i] * self.l1)
        else:
            for a in range(<size_t> (self.D * L)):
                self.dense[a] = shrink(self.dense[a], c, eta * self.l1)
        self.t += 1
        return 0

    cdef int _merge_step(self, vector[Entry]* row, double ex) except -1 nogil:
        """Gradient step of sparse row `row` (labels ascending), merged with
        the labels with a residual (nz, ascending): w -= ex * r there, every
        other weight kept (its proximal step is owed: see above). Written
        through local pointers into a presized buffer (push_back through the
        object stored its end pointer at every entry), then copied into the
        row (a swap would hand every row the buffer's largest capacity, D
        times that in all)."""
        cdef size_t n_row = row.size(), n_nz = self.nz.size(), a = 0, b = 0, k = 0
        cdef const Entry* rp
        cdef const int32_t* zp = self.nz.data()
        cdef const double* r = self.r.data()
        cdef Entry* out
        cdef int32_t l
        cdef double w
        self.scratch.resize(n_row + n_nz)
        out = self.scratch.data()
        rp = row.data()
        while a < n_row or b < n_nz:
            if b == n_nz or (a < n_row and rp[a].first < zp[b]):
                l = rp[a].first
                w = rp[a].second
                a += 1
            else:
                l = zp[b]
                w = 0.0
                if a < n_row and rp[a].first == l:
                    w = rp[a].second
                    a += 1
                b += 1
                w = w - ex * r[l]
            if w != 0:
                out[k].first = l
                out[k].second = w
                k += 1
        row.assign(out, out + k)
        if row.capacity() > 2 * row.size() + 8:
            row.shrink_to_fit()
        return 0

    cdef int _dense_row_step(self, int64_t i, double ex) except -1 nogil:
        """Gradient step of a dense row: w -= ex * r at the labels with a
        residual (the proximal step is owed: see above)."""
        cdef double* d = self.drows[i].data()
        cdef const double* r = self.r.data()
        cdef const int32_t* zp = self.nz.data()
        cdef size_t a
        if 4 * self.nz.size() >= <size_t> self.L:   # (a plain loop: r is 0 off nz)
            xk_rows_dotd(d, r, -ex, self.L)
            return 0
        for a in range(self.nz.size()):
            d[zp[a]] -= ex * r[zp[a]]
        return 0

    cdef int _to_sparse(self, int64_t i) except -1 nogil:
        """Dense row i stored sparse (its non-zero weights)."""
        cdef const double* d = self.drows[i].data()
        cdef int64_t l
        self.rows[i].clear()
        for l in range(self.L):
            if d[l] != 0:
                self.rows[i].push_back(Entry(<int32_t> l, d[l]))
        vector[double]().swap(self.drows[i])
        return 0

    cdef int _to_dense(self, int64_t i) except -1 nogil:
        cdef size_t a
        fill_vector(self.drows[i], self.L, 0.0)
        for a in range(self.rows[i].size()):
            self.drows[i][self.rows[i][a].first] = self.rows[i][a].second
        vector[Entry]().swap(self.rows[i])
        return 0

    cdef int _rebase(self) except -1 nogil:
        cdef int64_t i
        for i in range(self.D):
            self._catch_up(i)
        for i in range(self.D):
            self.snap_phi[i] = 1.0
            self.snap_beta[i] = 0.0
        self.phi, self.beta = 1.0, 0.0
        return 0

    def weights(self):
        """(ptr over features, label indices, values, bias): every weight
        brought current, zeros left out."""
        cdef vector[int64_t] ptr
        cdef vector[int32_t] idx
        cdef vector[float] val
        cdef int64_t i, l
        cdef size_t a
        ptr.push_back(0)
        with nogil:
            if self.lazy:
                self._rebase()
            for i in range(self.D):
                if self.lazy and self.drows[i].size():
                    for l in range(self.L):
                        if self.drows[i][l] != 0:
                            idx.push_back(<int32_t> l)
                            val.push_back(<float> self.drows[i][l])
                elif self.lazy:
                    for a in range(self.rows[i].size()):
                        idx.push_back(self.rows[i][a].first)
                        val.push_back(self.rows[i][a].second)
                else:
                    for l in range(self.L):
                        if self.dense[i * self.L + l] != 0:
                            idx.push_back(<int32_t> l)
                            val.push_back(<float> self.dense[i * self.L + l])
                ptr.push_back(idx.size())
        return (array_copy(ptr.data(), ptr.size(), cnp.NPY_INT64),
                array_copy(idx.data(), idx.size(), cnp.NPY_INT32),
                array_copy(val.data(), val.size(), cnp.NPY_FLOAT32),
                array_copy(self.bias.data(), self.bias.size(), cnp.NPY_FLOAT64))

    @property
    def nnz(self):
        """Non-zero weights as of their last update (plain: D x L, all stored)."""
        cdef int64_t total = 0, i
        cdef size_t a
        if not self.lazy:
            return self.D * self.L
        for i in range(self.D):
            total += self.rows[i].size()
            for a in range(self.drows[i].size()):
                total += self.drows[i][a] != 0
        return total
