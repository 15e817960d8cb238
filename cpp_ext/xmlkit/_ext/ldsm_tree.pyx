# LdSM tree growth (Majzoubi & Choromanska): M-ary nodes, each with M linear
# regressors trained by normalized adaptive SGD (logistic loss) towards the
# per-example best non-empty subset of children under the objective
#     J = sum_{j<l} |p_j - p_l| + l1 |sum_j p_j - 1|
#         - l2 sum_i pi_i sum_{j<l} |p_{j|i} - p_{l|i}|
# (running estimates p_j, p_{j|i}, pi_i over the node's stream); nodes are
# grown best-first from a priority queue (impurity = histogram sum - max).
#
# A tree is grown by one LdsmBuild object without the GIL; different trees
# use different objects, so threads grow trees in parallel.

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.math cimport exp, fabs, sqrt, INFINITY
from libcpp.vector cimport vector
from libcpp.utility cimport pair
from libcpp.queue cimport priority_queue

cimport numpy as cnp

from sparse_rows cimport array_copy, fill_vector, mt19937, sigmoid, sort, tree_seed

cnp.import_array()

# A node whose trained regressors send every point to one child is trained
# again with the class-integrity weight lambda2 halved, then quartered, then
# 0 (balance alone): with many labels per point (every point carries the
# frequent labels) integrity is largest when all points stay together, and
# the objective then prefers no split at all.
cdef int RETRIES = 3


ctypedef pair[pair[double, int64_t], int32_t] QItem   # ((priority, insertion), node)


cdef double objective(const double* p, const double* pc, const double* pi, int K, int M,
                      double l1, double l2) noexcept nogil:
    """J = sum_{j<l} |p_j - p_l| + l1 |sum_j p_j - 1|
           - l2 sum_i pi_i sum_{j<l} |pc_{i,j} - pc_{i,l}|   (pc: K x M)."""
    cdef double bal = 0, tot = 0, pur = 0, s
    cdef int i, j, k
    for j in range(M):
        tot += p[j]
        for k in range(j + 1, M):
            bal += fabs(p[j] - p[k])
    for i in range(K):
        s = 0
        for j in range(M):
            for k in range(j + 1, M):
                s += fabs(pc[i * M + j] - pc[i * M + k])
        pur += pi[i] * s
    return bal + l1 * fabs(tot - 1) - l2 * pur


cdef int best_subset(const double* p, const double* pj, const double* nl, int M, double N,
                     double ell, const int32_t* labels, int n_lab, double l1, double l2,
                     mt19937& rng) except -1 nogil:
    """The non-empty subset S of children (bitmask) minimising the objective
    had this example (labels, counters already incremented: N, nl) gone
    exactly to S; only its own labels' integrity terms depend on S. Ties: a
    later subset replaces the incumbent with probability 1/2, never the full
    set."""
    cdef int full = (1 << M) - 1, S, best_S = full, j, a
    cdef double pt[8]
    cdef vector[double] pc, pi
    cdef double J, best = INFINITY, ni
    pc.resize(n_lab * M + 1)
    pi.resize(n_lab + 1)
    for a in range(n_lab):
        pi[a] = nl[labels[a]] / N
    for S in range(1, full + 1):
        for j in range(M):
            pt[j] = (p[j] * (N - ell) + ell * ((S >> j) & 1)) / N
        for a in range(n_lab):
            ni = nl[labels[a]]
            for j in range(M):
                pc[a * M + j] = (pj[labels[a] * M + j] * (ni - 1) + ((S >> j) & 1)) / ni
        J = objective(pt, &pc[0], &pi[0], n_lab, M, l1, l2)
        if J < best:
            best, best_S = J, S
        elif J == best and S != full and (rng() & 1):
            best_S = S
    return best_S


def node_objective(p, p_cond, pi, double lambda1, double lambda2):
    """The node objective J for children masses p (M), per-label child masses
    p_cond (K x M) and label fractions pi (K); for tests and inspection."""
    import numpy as np
    cdef const double[::1] pv = np.ascontiguousarray(p, dtype=np.float64)
    cdef const double[:, ::1] pc = np.ascontiguousarray(np.atleast_2d(p_cond), dtype=np.float64)
    cdef const double[::1] w = np.ascontiguousarray(pi, dtype=np.float64)
    if pc.shape[1] != pv.shape[0] or pc.shape[0] != w.shape[0]:
        raise ValueError("p (M), p_cond (K x M) and pi (K) disagree")
    return objective(&pv[0], &pc[0, 0], &w[0], pc.shape[0], pv.shape[0], lambda1, lambda2)


def choose_subset(p, p_cond, counts, double N, labels, double lambda1, double lambda2,
                  uint32_t seed=0):
    """best_subset for one example: p (M) the running child masses, p_cond
    (L x M) and counts (L) the per-label masses and example counts, N the
    label occurrences, all already counting this example; labels its labels.
    Returns the bitmask (bit j: child j)."""
    import numpy as np
    cdef const double[::1] pv = np.ascontiguousarray(p, dtype=np.float64)
    cdef const double[:, ::1] pc = np.ascontiguousarray(p_cond, dtype=np.float64)
    cdef const double[::1] nl = np.ascontiguousarray(counts, dtype=np.float64)
    cdef const int32_t[::1] lab = np.ascontiguousarray(labels, dtype=np.int32)
    cdef mt19937 rng
    cdef int32_t dummy = 0
    rng.seed(seed)
    return best_subset(&pv[0], &pc[0, 0], &nl[0], pv.shape[0], N, <double> lab.shape[0],
                       &lab[0] if lab.shape[0] else &dummy, lab.shape[0], lambda1, lambda2,
                       rng)


cdef class LdsmData:
    """Training arrays shared by the trees (read only while growing):
    features with the bias column already appended (CSR), labels (CSR).
    Members: see ldsm_tree.pxd."""

    def __init__(self, const int64_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
                 const int64_t[::1] yp, const int32_t[::1] yi, int64_t d, int64_t L):
        if xp.shape[0] != yp.shape[0] or xp.shape[0] < 2:
            raise ValueError("features and labels need the same number (>= 1) of rows")
        self.xp, self.xi, self.xv, self.yp, self.yi = xp, xi, xv, yp, yi
        self.n, self.d, self.L = xp.shape[0] - 1, d, L


cdef class LdsmBuild:
    """Grows one tree: grow(data, seed, tree) -> dict of arrays. Members: see
    ldsm_tree.pxd."""
    def __init__(self, int arity, int64_t max_nodes, int64_t max_leaf, int epochs, double lr,
                 double lambda1, double lambda2, double route_threshold,
                 double adagrad_prior=0.0):
        if arity < 2 or arity > 8:
            raise ValueError("arity must be between 2 and 8")
        if max_leaf < 1:
            raise ValueError("max_leaf must be at least 1")
        if not adagrad_prior >= 0:
            raise ValueError("adagrad_prior must be >= 0")
        self.M, self.max_nodes, self.max_leaf, self.epochs = arity, max_nodes, max_leaf, epochs
        self.lr, self.l1, self.l2, self.threshold = lr, lambda1, lambda2, route_threshold
        self.prior = adagrad_prior

    def grow(self, LdsmData data, uint64_t seed, uint64_t tree):
        """Grow a tree; arrays: first_child (-1 at leaves; children are
        first_child .. first_child+M-1), depth, reg_row (first of the node's M
        regressor rows, -1 at leaves), reg_ptr/reg_idx/reg_val (CSR rows of
        the regressors), l_ptr/l_idx/l_val (each leaf's labels, by the share
        of its points that carry them)."""
        self.xp, self.xi, self.xv = &data.xp[0], &data.xi[0], &data.xv[0]
        self.yp = &data.yp[0]
        cdef int32_t dummy = 0
        self.yi = &data.yi[0] if data.yi.shape[0] else &dummy
        self.d, self.L = data.d, data.L
        cdef int64_t n = data.n
        with nogil:
            self._grow(n, tree_seed(seed, tree))
        # leaves: each label's share of the leaf's points (xmlkit.models.ldsm)
        cdef vector[int64_t] lp
        cdef vector[int32_t] li
        cdef vector[float] lv
        cdef size_t node, k
        cdef double points
        lp.push_back(0)
        for node in range(self.first_child.size()):
            if self.first_child[node] < 0:
                points = <double> max(self.n_points[node], 1)
                for k in range(self.hist[node].size()):
                    li.push_back(self.hist[node][k].first)
                    lv.push_back(<float> (self.hist[node][k].second / points))
            lp.push_back(li.size())
        out = {
            "first_child": array_copy(self.first_child.data(), self.first_child.size(), cnp.NPY_INT32),
            "depth": array_copy(self.depth.data(), self.depth.size(), cnp.NPY_INT32),
            "reg_row": array_copy(self.reg_row.data(), self.reg_row.size(), cnp.NPY_INT32),
            "reg_ptr": array_copy(self.reg_ptr.data(), self.reg_ptr.size(), cnp.NPY_INT64),
            "reg_idx": array_copy(self.reg_idx.data(), self.reg_idx.size(), cnp.NPY_INT32),
            "reg_val": array_copy(self.reg_val.data(), self.reg_val.size(), cnp.NPY_FLOAT32),
            "l_ptr": array_copy(lp.data(), lp.size(), cnp.NPY_INT64),
            "l_idx": array_copy(li.data(), li.size(), cnp.NPY_INT32),
            "l_val": array_copy(lv.data(), lv.size(), cnp.NPY_FLOAT32),
        }
        self.hist.clear()
        self.members.clear()
        self.n_points.clear()
        return out

    # ------------------------------------------------------------ growth
    cdef void _grow(self, int64_t n, uint32_t seed) except * nogil:
        cdef priority_queue[QItem] queue
        cdef QItem top
        cdef int64_t pushed = 0, i, j
        cdef int32_t node, c, t
        cdef int M = self.M
        cdef vector[int32_t] root
        self.rng.seed(seed)
        self.first_child.clear(); self.depth.clear(); self.reg_row.clear()
        self.reg_ptr.clear(); self.reg_idx.clear(); self.reg_val.clear()
        self.hist.clear(); self.members.clear(); self.n_points.clear()
        self.reg_ptr.push_back(0)
        fill_vector(self.w, M * self.d, 0.0); fill_vector(self.s, M * self.d, 0.0)
        fill_vector(self.G, M * self.d, 0.0); fill_vector(self.fmark, self.d, 0)
        fill_vector(self.wd, M * self.d, 0.0)
        fill_vector(self.pj, M * self.L, 0.0); fill_vector(self.nl, self.L, 0.0)
        fill_vector(self.lmark, self.L, 0)
        fill_vector(self.p, M, 0.0); fill_vector(self.Nj, M, 0.0)
        # root: every point, shuffled (Fisher-Yates with the tree's stream)
        for i in range(n):
            root.push_back(<int32_t> i)
        for i in range(n - 1, 0, -1):
            j = self.rng() % (i + 1)
            t = root[i]; root[i] = root[j]; root[j] = t
        self._add_node(0)
        self.members[0].swap(root)
        self.n_points[0] = n
        self.hist[0] = self._histogram(self.members[0])
        queue.push(QItem(pair[double, int64_t](0.0, pushed), 0))
        pushed += 1
        while not queue.empty():
            top = queue.top()
            queue.pop()
            node = top.second
            if (<int64_t> self.first_child.size() < self.max_nodes - M + 1
                    and <int64_t> self.members[node].size() > self.max_leaf
                    and self._impurity(node) > 0):
                if self._train_split(node):
                    for c in range(M):
                        queue.push(QItem(pair[double, int64_t](
                            self._impurity(self.first_child[node] + c), pushed),
                            self.first_child[node] + c))
                        pushed += 1
            vector[int32_t]().swap(self.members[node])

    cdef bint _train_split(self, int32_t node) except -1 nogil:
        """Train the node's regressors and split it; on a rejected split
        retry with a smaller lambda2 (see RETRIES). True when it split."""
        cdef double l2 = self.l2
        cdef int attempt
        cdef bint ok = False
        for attempt in range(RETRIES + 1):
            self._train(node)
            if self._split(node):
                ok = True
                break
            self.l2 = 0.0 if attempt + 1 == RETRIES else self.l2 * 0.5
        self.l2 = l2
        return ok

    cdef int32_t _add_node(self, int32_t depth) except -1 nogil:
        self.first_child.push_back(-1)
        self.depth.push_back(depth)
        self.reg_row.push_back(-1)
        self.hist.push_back(vector[pair[int32_t, float]]())
        self.members.push_back(vector[int32_t]())
        self.n_points.push_back(0)
        return <int32_t> (self.first_child.size() - 1)

    cdef double _impurity(self, int32_t node) noexcept nogil:
        cdef double total = 0, best = 0
        cdef size_t k
        for k in range(self.hist[node].size()):
            total += self.hist[node][k].second
            if self.hist[node][k].second > best:
                best = self.hist[node][k].second
        return total - best

    cdef vector[pair[int32_t, float]] _histogram(self, vector[int32_t]& pts) except * nogil:
        """Label counts of the points (labels ascending); uses nl as scratch."""
        cdef vector[pair[int32_t, float]] h
        cdef vector[int32_t] seen
        cdef size_t a
        cdef int64_t q
        cdef int32_t lab
        for a in range(pts.size()):
            for q in range(self.yp[pts[a]], self.yp[pts[a] + 1]):
                lab = self.yi[q]
                if self.nl[lab] == 0:
                    seen.push_back(lab)
                self.nl[lab] += 1
        sort(seen.begin(), seen.end())
        for a in range(seen.size()):
            h.push_back(pair[int32_t, float](seen[a], <float> self.nl[seen[a]]))
            self.nl[seen[a]] = 0
        return h

    # ---------------------------------------------------- node training
    cdef int _train(self, int32_t node) except -1 nogil:
        cdef int M = self.M
        cdef int64_t d = self.d
        cdef int e, j, best_S, full = (1 << M) - 1
        cdef size_t a
        cdef int32_t x, lab, f
        cdef int64_t q, r0, r1, y0, y1
        cdef double N = 0, t = 0, ell, g, z, xval, ax, ni, sf
        cdef double o
        cdef vector[int32_t]* pts = &self.members[node]
        for j in range(M):
            self.p[j] = 0
            self.Nj[j] = 0
        for e in range(self.epochs):
            for a in range(pts.size()):
                x = pts[0][a]
                r0, r1 = self.xp[x], self.xp[x + 1]
                y0, y1 = self.yp[x], self.yp[x + 1]
                ell = <double> (y1 - y0)
                N += ell
                t += 1
                for q in range(y0, y1):
                    lab = self.yi[q]
                    if not self.lmark[lab]:
                        self.lmark[lab] = 1
                        self.ltouched.push_back(lab)
                    self.nl[lab] += 1
                # the best non-empty subset of children for this example
                best_S = full
                if N > 0:
                    best_S = best_subset(&self.p[0], &self.pj[0], &self.nl[0], M, N, ell,
                                         self.yi + y0, <int> (y1 - y0), self.l1, self.l2,
                                         self.rng)
                # one normalized adaptive gradient step per regressor
                for j in range(M):
                    z = 0
                    for q in range(r0, r1):
                        f = self.xi[q]
                        ax = fabs(self.xv[q])
                        if j == 0 and not self.fmark[f]:
                            self.fmark[f] = 1
                            self.ftouched.push_back(f)
                        if ax > self.s[j * d + f]:
                            if self.s[j * d + f] > 0:
                                self.w[j * d + f] *= self.s[j * d + f] / ax
                            else:
                                self.w[j * d + f] = 0
                            self.s[j * d + f] = ax
                        z += self.w[j * d + f] * self.xv[q]
                        if ax > 0:
                            self.Nj[j] += (ax * ax) / (self.s[j * d + f] * self.s[j * d + f])
                    g = sigmoid(z) - ((best_S >> j) & 1)
                    if self.Nj[j] > 0 and g != 0:
                        for q in range(r0, r1):
                            f = self.xi[q]
                            xval = self.xv[q]
                            if xval == 0:
                                continue
                            self.G[j * d + f] += (g * xval) * (g * xval)
                            sf = self.s[j * d + f]      # (the prior: in units of sf^2)
                            self.w[j * d + f] -= (
                                self.lr * sqrt(t / self.Nj[j]) * g * xval
                                / (sf * sqrt(self.G[j * d + f] + self.prior * sf * sf)))
                # running estimates with the updated regressors
                if N > 0:
                    for j in range(M):
                        z = 0
                        for q in range(r0, r1):
                            z += self.w[j * d + self.xi[q]] * self.xv[q]
                        o = 0.0 if z < 0 else (1.0 if z > 1 else z)
                        self.p[j] = (self.p[j] * (N - ell) + ell * o) / N
                        for q in range(y0, y1):
                            lab = self.yi[q]
                            ni = self.nl[lab]
                            self.pj[lab * M + j] = (self.pj[lab * M + j] * (ni - 1) + o) / ni
        # store the regressors (weights below 1/d dropped), reset the buffers
        sort(self.ftouched.begin(), self.ftouched.end())
        self.reg_row[node] = <int32_t> (self.reg_ptr.size() - 1)
        for j in range(M):
            for a in range(self.ftouched.size()):
                f = self.ftouched[a]
                if fabs(self.w[j * d + f]) >= 1.0 / d:
                    self.reg_idx.push_back(f)
                    self.reg_val.push_back(<float> self.w[j * d + f])
            self.reg_ptr.push_back(self.reg_idx.size())
        for a in range(self.ftouched.size()):
            f = self.ftouched[a]
            self.fmark[f] = 0
            for j in range(M):
                self.w[j * d + f] = 0; self.s[j * d + f] = 0; self.G[j * d + f] = 0
        self.ftouched.clear()
        for a in range(self.ltouched.size()):
            lab = self.ltouched[a]
            self.lmark[lab] = 0
            self.nl[lab] = 0
            for j in range(M):
                self.pj[lab * M + j] = 0
        self.ltouched.clear()
        return 0

    # ------------------------------------------------------- children
    cdef bint _split(self, int32_t node) except -1 nogil:
        """Route the node's points with its stored regressors (every child with
        margin >= threshold, else every child at the maximum margin); keep the
        children unless one of them gets no point or all of them. The
        regressors are laid out dense (wd) for the pass, so that a margin is
        the sum over the point's entries in order, as prediction sums it."""
        cdef int M = self.M
        cdef int j
        cdef size_t a
        cdef int64_t q, row = self.reg_row[node], d = self.d
        cdef int32_t x, first
        cdef double z[8]
        cdef double zmax
        cdef bint any_
        cdef vector[vector[int32_t]] parts
        cdef float* wd = self.wd.data()
        parts.resize(M)
        for j in range(M):
            for q in range(self.reg_ptr[row + j], self.reg_ptr[row + j + 1]):
                wd[j * d + self.reg_idx[q]] = self.reg_val[q]
        for a in range(self.members[node].size()):
            x = self.members[node][a]
            zmax = -INFINITY
            for j in range(M):
                z[j] = 0
                for q in range(self.xp[x], self.xp[x + 1]):
                    z[j] += wd[j * d + self.xi[q]] * self.xv[q]
                if z[j] > zmax:
                    zmax = z[j]
            any_ = False
            for j in range(M):
                if z[j] >= self.threshold:
                    parts[j].push_back(x)
                    any_ = True
            if not any_:
                for j in range(M):
                    if z[j] == zmax:
                        parts[j].push_back(x)
        for j in range(M):
            for q in range(self.reg_ptr[row + j], self.reg_ptr[row + j + 1]):
                wd[j * d + self.reg_idx[q]] = 0
        for j in range(M):
            if parts[j].size() == 0 or parts[j].size() == self.members[node].size():
                # rejected: the node stays a leaf and forgets its regressors
                self.reg_idx.resize(self.reg_ptr[row])
                self.reg_val.resize(self.reg_ptr[row])
                self.reg_ptr.resize(row + 1)
                self.reg_row[node] = -1
                return False
        first = <int32_t> self.first_child.size()
        self.first_child[node] = first
        for j in range(M):
            self._add_node(self.depth[node] + 1)
            self.members[first + j].swap(parts[j])
            self.n_points[first + j] = self.members[first + j].size()
            self.hist[first + j] = self._histogram(self.members[first + j])
        vector[pair[int32_t, float]]().swap(self.hist[node])
        return True
