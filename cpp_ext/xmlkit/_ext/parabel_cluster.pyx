# Parabel's split of a node's labels (Prabhu et al., WWW 2018; Bonsai's wide
# trees, Khandelwal et al. 2019): spherical k-means of the labels' centroids
# (unit tf-idf sums of each label's points), balanced or not, into the
# node's children. The trainer of a node (parabel_tree.ParabelNode) keeps one
# LabelKmeans and calls split with its local feature map and random stream.
#
# Two centres (Parabel) keep their sums in doubles, in registers. More
# centres (wide trees) read the centroids by feature, each centre row once a
# round, and sum the cosines in floats, twice the lanes of doubles: every
# sum in ascending feature order with no fused multiply-add (xk_wide.h), so
# the clusters are the same bits on every processor.

from libc.math cimport sqrt
from libc.stdint cimport int32_t, int64_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair

from sparse_rows cimport fill_vector, mt19937, sort

cdef extern from "xk_wide.h":
    void xk_rows_dotf(float* acc, const float* row, float x, int64_t K) noexcept nogil


cdef enum:
    KEEP_BYTES = 4194304        # scratch buffers up to this size stay for the next split
    CHUNK_FLOATS = 65536        # the cosines of a chunk of labels to the centres (floats)


cdef inline int64_t _chunk_labels(int64_t K) noexcept nogil:
    """Labels in a chunk of the cosines to K centres."""
    return CHUNK_FLOATS // K if K < CHUNK_FLOATS else 1


ctypedef fused scratch:
    vector[double]
    vector[float]
    vector[int32_t]
    vector[int64_t]
    vector[pair[double, int64_t]]


cdef inline void _give_back(scratch& v) noexcept nogil:
    """Free v's buffer when it holds more than KEEP_BYTES (a swap with an
    empty vector: nothing is allocated)."""
    cdef scratch empty
    if v.capacity() * sizeof(v[0]) > KEEP_BYTES:
        v.swap(empty)


cdef class LabelKmeans:
    """A thread's label k-means (state: parabel_cluster.pxd)."""

    cdef void split(self, const int64_t* cp, const int32_t* ci, const float* cv,
                    const int32_t* fmap, int64_t nf, const int32_t* labels, int64_t m,
                    int64_t arity, bint balanced, double eps, mt19937& rng,
                    int32_t* group) except * nogil:
        """group[j]: the child of label labels[j] (its centroid: row
        labels[j] of cp, ci, cv, features through fmap onto 0 .. nf - 1),
        children numbered from 0 in the order of their clusters, none empty
        (at least 2 when m >= 2). k-means into min(arity, m) clusters; if
        every label went to one, two balanced halves. The scratch is kept
        for the next split up to KEEP_BYTES a buffer, else given back (the
        few wide nodes near the root would otherwise hold it all along)."""
        self._split(cp, ci, cv, fmap, nf, labels, m, arity, balanced, eps, rng, group)
        _give_back(self.total)
        _give_back(self.centre)
        _give_back(self.cos)
        _give_back(self.centref)
        _give_back(self.cosf)
        _give_back(self.fval)
        _give_back(self.flab)
        _give_back(self.fptr)
        _give_back(self.order)

    cdef void _split(self, const int64_t* cp, const int32_t* ci, const float* cv,
                     const int32_t* fmap, int64_t nf, const int32_t* labels, int64_t m,
                     int64_t arity, bint balanced, double eps, mt19937& rng,
                     int32_t* group) except * nogil:
        """split without giving back its scratch."""
        cdef int64_t K = arity if arity < m else m
        cdef int64_t j, c, used
        if m < 2:
            for j in range(m):
                group[j] = 0
            return
        _check_local(cp, ci, fmap, labels, m)
        self._kmeans(cp, ci, cv, fmap, nf, labels, m, K, balanced, eps, rng, group)
        fill_vector(self.renum, K, -1)
        used = 0
        for j in range(m):
            self.renum[group[j]] = 0
        for c in range(K):
            if self.renum[c] >= 0:
                self.renum[c] = <int32_t> used
                used += 1
        if used < 2:
            self._kmeans(cp, ci, cv, fmap, nf, labels, m, 2, True, eps, rng, group)
            return
        for j in range(m):
            group[j] = self.renum[group[j]]

    cdef void _kmeans(self, const int64_t* cp, const int32_t* ci, const float* cv,
                      const int32_t* fmap, int64_t nf, const int32_t* labels, int64_t m,
                      int64_t K, bint balanced, double eps, mt19937& rng,
                      int32_t* group) except * nogil:
        """Spherical k-means into K clusters (group[j] in 0..K-1), started
        from K distinct labels drawn at random and stopped when the mean
        cosine of the labels to their centres gains less than eps. Balanced:
        K = 2 sorts the labels by their cosine to centre 0 minus centre 1 and
        gives the first half to centre 0; K > 2 gives (label, centre) pairs
        by descending cosine to centres with room left (ceil(m / K) labels
        each). Else every label goes to its best centre. Each cluster's sum
        changes by the labels that moved, then is scaled to unit length.
        K > 2: a round sums the cosines to the centres that changed in the
        last one only (live; the others' are kept): each (label, centre)
        sum is the same bits either way."""
        cdef int64_t j, c, a, q, t, kc, was, rounds = 0
        cdef double old_obj = -10000, obj = -1, s0, s1
        fill_vector(self.total, nf * K, 0.0)
        if K == 2:
            fill_vector(self.centre, nf * 2, 0.0)
        else:
            fill_vector(self.centref, nf * K, 0.0)
            self.cosf.resize(m * K)
            self._by_feature(cp, ci, cv, fmap, labels, m, nf, K)
        fill_vector(self.cos, m * K, 0.0)
        fill_vector(self.norm, K, 0.0)
        fill_vector(self.count, K, 0)
        fill_vector(self.prev, m, -1)
        fill_vector(self.moved, K, 1)                  # (after round 1 every centre is a sum)
        self.live.clear()
        for c in range(K):
            self.live.push_back(<int32_t> c)
        self.pick.clear()
        while <int64_t> self.pick.size() < K:
            j = rand_below(rng, m)
            for a in range(<int64_t> self.pick.size()):
                if self.pick[a] == j:
                    j = -1
                    break
            if j >= 0:
                self.pick.push_back(<int32_t> j)
        for c in range(K):
            for q in range(cp[labels[self.pick[c]]], cp[labels[self.pick[c]] + 1]):
                if K == 2:
                    self.centre[fmap[ci[q]] * 2 + c] = cv[q]
                else:
                    self.centref[fmap[ci[q]] * K + c] = cv[q]
        while obj - old_obj >= eps and rounds < 10000:
            rounds += 1
            if K == 2:                              # (the sums in registers)
                for j in range(m):
                    s0 = s1 = 0
                    for q in range(cp[labels[j]], cp[labels[j] + 1]):
                        s0 += cv[q] * self.centre[fmap[ci[q]] * 2]
                        s1 += cv[q] * self.centre[fmap[ci[q]] * 2 + 1]
                    self.cos[j * 2], self.cos[j * 2 + 1] = s0, s1
            else:
                kc = self.live.size()
                self._cosines(nf, m, kc, K)
                for j in range(m):
                    for t in range(kc):
                        self.cos[j * K + self.live[t]] = self.cosf[j * kc + t]
            self._assign(m, K, balanced, group)
            old_obj = obj
            obj = 0
            for j in range(m):
                obj += self.cos[j * K + group[j]]
            obj /= m
            for j in range(m):
                was, c = self.prev[j], group[j]
                if was == c:
                    continue
                for q in range(cp[labels[j]], cp[labels[j] + 1]):
                    if was >= 0:
                        self.total[fmap[ci[q]] * K + was] -= cv[q]
                    self.total[fmap[ci[q]] * K + c] += cv[q]
                self.prev[j] = <int32_t> c
                if was >= 0:
                    self.moved[was] = 1
                self.moved[c] = 1
            self.live.clear()
            for c in range(K):
                if self.moved[c]:
                    self.live.push_back(<int32_t> c)
                    self.moved[c] = 0
            self._centres(nf, K)

    cdef void _centres(self, int64_t nf, int64_t K) noexcept nogil:
        """The centres: each cluster's sum (total) at unit length (a sum of
        length 0 is left as it is). Only the live clusters' lengths are
        summed (the others' sums, and so lengths, are those of the last
        round); K = 2: both centres (centre); K > 2: the live clusters'
        only, in their order (centref: local feature x len(live))."""
        cdef int64_t a, c, t, kc = self.live.size()
        cdef const double* total = self.total.data()
        cdef double* norm = self.norm.data()
        cdef double* centre = self.centre.data()
        cdef float* centref = self.centref.data()
        cdef const int32_t* live = self.live.data()
        for t in range(kc):
            norm[live[t]] = 0
        for a in range(nf):
            for t in range(kc):
                norm[live[t]] += total[a * K + live[t]] * total[a * K + live[t]]
        for t in range(kc):
            c = live[t]
            norm[c] = sqrt(norm[c]) if norm[c] > 0 else 1.0
        if K == 2:
            for a in range(nf * 2):
                centre[a] = total[a] / norm[a % 2]
            return
        for a in range(nf):
            for t in range(kc):
                centref[a * kc + t] = <float> (total[a * K + live[t]] / norm[live[t]])

    cdef void _by_feature(self, const int64_t* cp, const int32_t* ci, const float* cv,
                          const int32_t* fmap, const int32_t* labels, int64_t m,
                          int64_t nf, int64_t K) except * nogil:
        """The centroids of labels[0 .. m - 1] (features through fmap) by
        chunk of CHUNK_FLOATS // K labels, then by feature: fptr, flab,
        fval (the entries of chunk b and feature f at fptr[b * nf + f] ..
        fptr[b * nf + f + 1] - 1, labels ascending)."""
        cdef int64_t j, q, f, k, span = _chunk_labels(K)
        cdef int64_t nb = (m + span - 1) // span
        fill_vector(self.fptr, nb * nf + 1, 0)
        for j in range(m):
            for q in range(cp[labels[j]], cp[labels[j] + 1]):
                self.fptr[(j // span) * nf + fmap[ci[q]] + 1] += 1
        for f in range(nb * nf):
            self.fptr[f + 1] += self.fptr[f]
        self.at.assign(self.fptr.begin(), self.fptr.end() - 1)
        self.flab.resize(self.fptr[nb * nf])
        self.fval.resize(self.fptr[nb * nf])
        for j in range(m):
            for q in range(cp[labels[j]], cp[labels[j] + 1]):
                f = (j // span) * nf + fmap[ci[q]]
                k = self.at[f]
                self.at[f] = k + 1
                self.flab[k] = <int32_t> j
                self.fval[k] = cv[q]

    cdef void _cosines(self, int64_t nf, int64_t m, int64_t kc, int64_t K) noexcept nogil:
        """cosf[j * kc + c] = label j's centroid . centre c (centref's kc
        columns), a chunk of labels at a time (their cosines stay in the
        cache while the centre rows stream by) and feature by feature
        within it: every sum in ascending feature order, as a label's row
        would give it."""
        cdef int64_t f, e, b, span = _chunk_labels(K)
        cdef float* cos = self.cosf.data()
        cdef const float* row
        for e in range(m * kc):
            cos[e] = 0
        for b in range((m + span - 1) // span):
            for f in range(nf):
                row = &self.centref[f * kc]
                for e in range(self.fptr[b * nf + f], self.fptr[b * nf + f + 1]):
                    xk_rows_dotf(&cos[self.flab[e] * kc], row, self.fval[e], kc)

    cdef void _assign(self, int64_t m, int64_t K, bint balanced,
                      int32_t* group) except * nogil:
        """The assignment of the m labels to K centres by their cosines
        (cos[j * K + c]): see _kmeans."""
        cdef int64_t j, c, a, best, cap
        cdef const double* cos = self.cos.data()
        if balanced and K == 2:
            self.order.clear()
            for j in range(m):
                self.order.push_back(pair[double, int64_t](cos[j * 2 + 1] - cos[j * 2], j))
            sort(self.order.begin(), self.order.end())
            for a in range(m):
                group[self.order[a].second] = 0 if a < m // 2 else 1
        elif balanced:
            self.order.clear()
            for j in range(m * K):
                self.order.push_back(pair[double, int64_t](-cos[j], j))
            sort(self.order.begin(), self.order.end())
            cap = (m + K - 1) // K
            for j in range(m):
                group[j] = -1
            for c in range(K):
                self.count[c] = 0
            for a in range(m * K):
                j, c = self.order[a].second // K, self.order[a].second % K
                if group[j] < 0 and self.count[c] < cap:
                    group[j] = <int32_t> c
                    self.count[c] += 1
        else:
            for j in range(m):
                best = 0
                for c in range(1, K):
                    if cos[j * K + c] > cos[j * K + best]:
                        best = c
                group[j] = <int32_t> best


cdef int _check_local(const int64_t* cp, const int32_t* ci, const int32_t* fmap,
                      const int32_t* labels, int64_t m) except -1 nogil:
    """Every feature of the centroids of the node's labels is a feature of
    the node (it holds all its labels' points), which k-means reads through
    fmap: an error if one is not."""
    cdef int64_t j, q
    for j in range(m):
        for q in range(cp[labels[j]], cp[labels[j] + 1]):
            if fmap[ci[q]] < 0:
                with gil:
                    raise ValueError("a label's centroid has a feature none of its points has")
    return 0
