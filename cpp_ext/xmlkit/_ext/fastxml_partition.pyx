# FastXML's split criterion: a node's points in two by the nDCG
# alternation (Prabhu & Varma, 2014), with side sums kept exact so that they
# follow the points that move. State: fastxml_partition.pxd; its caller:
# fastxml_tree.TreeGrower.

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.math cimport log2, fabs, rint, frexp, ldexp
from libc.string cimport memcpy, memset
from libcpp.vector cimport vector
from libcpp.utility cimport pair

import numpy as np

from sparse_rows cimport fill_vector, mt19937, sort
from xmlkit._ext.fastxml_common cimport (_fetch_ahead, _gather, _give_back, _release, _resize,
                                         LARGE_NODE)


cdef inline void _add_row(double* sums, const int32_t* idx, const float* val, int64_t e0,
                          int64_t e1, double scale, double unit) noexcept nogil:
    """sums[idx[e]] += the multiple of `unit` nearest scale * val[e] * unit,
    for e in [e0, e1) (`scale` is a term's factor over the unit; see
    NdcgPartition.partition: sums of such multiples are exact)."""
    cdef int64_t e
    for e in range(e0, e1):
        sums[idx[e]] += rint(scale * val[e]) * unit


cdef inline void _move_row(double* dst, double* src, const int32_t* idx, const float* val,
                           int64_t e0, int64_t e1, double scale, double unit) noexcept nogil:
    """_add_row to dst, and the same terms taken from src."""
    cdef int64_t e
    cdef double q
    for e in range(e0, e1):
        q = rint(scale * val[e]) * unit
        dst[idx[e]] += q
        src[idx[e]] -= q


cdef inline void _gain_sums2(const float* v, const int32_t* idx, const double* g, int64_t a0,
                             int64_t a1, int64_t b0, int64_t b1, double* out) noexcept nogil:
    """out[0] := sum of v[e] * g[idx[e]] over [a0, a1), out[1] := the same over
    [b0, b1): each one running sum in entry order, the two interleaved (each
    addition waits on its own sum's last one only)."""
    cdef double sa = 0.0, sb = 0.0
    cdef int64_t k, both = min(a1 - a0, b1 - b0)
    for k in range(both):
        sa += v[a0 + k] * g[idx[a0 + k]]
        sb += v[b0 + k] * g[idx[b0 + k]]
    for k in range(a0 + both, a1):
        sa += v[k] * g[idx[k]]
    for k in range(b0 + both, b1):
        sb += v[k] * g[idx[k]]
    out[0] = sa
    out[1] = sb


cdef inline uint64_t _rank_key(double s, int64_t l) noexcept nogil:
    """The sort key of label l with sum s (see NdcgPartition._rank)."""
    cdef float f
    cdef uint32_t bits = 0
    if s > 0:
        f = <float> s
        memcpy(&bits, &f, 4)
    return ((<uint64_t> (0xFFFFFFFFU - bits)) << 32) | <uint64_t> l


cdef inline bint _equal_sums(const uint64_t* kv, const double* s, int64_t a,
                             int64_t b) noexcept nogil:
    """Whether the labels of keys kv[a:b] all have the same sum: then keys
    sorted on their lower bits (the label) are in the exact order already
    (labels seen at one point only tie so, and often)."""
    cdef double s0 = s[kv[a] & 0xFFFFFFFFULL]
    cdef int64_t k
    for k in range(a + 1, b):
        if s[kv[k] & 0xFFFFFFFFULL] != s0:
            return False
    return True


cdef int _radix_sort_high(uint64_t* a, int64_t n, vector[uint64_t]& tmp) except -1 nogil:
    """Sort a[0:n] by the upper 32 bits, stably (entries with equal upper
    bits keep their order): least-significant-digit radix sort, a byte per
    pass, passes where every entry has the same byte skipped. On keys
    already ascending in their lower 32 bits this is the full 64-bit sort."""
    cdef int64_t i, b, c, total
    cdef int64_t count[4][256]
    cdef int pas
    cdef uint64_t* src = a
    cdef uint64_t* dst
    cdef uint64_t* t
    if n < 2:
        return 0
    _resize(tmp, n)
    dst = tmp.data()
    memset(count, 0, sizeof(count))
    for i in range(n):
        for pas in range(4):
            count[pas][(src[i] >> (32 + 8 * pas)) & 0xFF] += 1
    for pas in range(4):
        if count[pas][(src[0] >> (32 + 8 * pas)) & 0xFF] == n:
            continue
        total = 0
        for b in range(256):
            c = count[pas][b]
            count[pas][b] = total
            total += c
        for i in range(n):
            b = (src[i] >> (32 + 8 * pas)) & 0xFF
            dst[count[pas][b]] = src[i]
            count[pas][b] += 1
        t = src
        src = dst
        dst = t
    if src != a:
        memcpy(a, src, n * sizeof(uint64_t))
    return 0


cdef class NdcgPartition:
    """The FastXML split criterion: a node's points are given random sides,
    then sides and per-side label rankings alternate, each maximising the
    summed nDCG over the ranking of all labels (points move to the side whose
    ranking serves their labels better), until the objective gains less than
    1e-6. Members: see fastxml_partition.pxd."""

    def __init__(self, bint use_idcg=True):
        self.use_idcg = use_idcg
        self.n_labels = -1

    cdef void reset(self, int64_t n_labels):
        """Size the tables for n_labels label columns."""
        cdef int64_t r
        self.n_labels = n_labels
        self.disc.resize(n_labels + 2)
        self.cs.resize(n_labels + 2)
        self.cs[0] = 1.0
        for r in range(n_labels + 1):
            self.disc[r] = 1.0 / log2(r + 2.0)
        for r in range(1, n_labels + 2):
            self.cs[r] = (self.cs[r - 1] if r > 1 else 0.0) + self.disc[r - 1]
        if not self.use_idcg:
            for r in range(n_labels + 2):
                self.cs[r] = 1.0
        self.lmap.clear()
        self.lmap.resize(n_labels, -1)
        self.gbuf.resize(n_labels + 1)

    def rank_labels(self, sums, previous_sums=None):
        """The ranks _rank gives the labels with these sums (tests): from
        scratch, or as a step of an alternation after a step whose sums
        were `previous_sums` (ranked from scratch first)."""
        cdef int64_t m = len(sums), k
        cdef vector[double] s, so
        cdef vector[int32_t] r, order
        s.resize(m)
        r.resize(m)
        for k in range(m):
            s[k] = sums[k]
        if previous_sums is not None:
            if len(previous_sums) != m:
                raise ValueError("previous_sums and sums differ in length")
            so.resize(m)
            for k in range(m):
                so[k] = previous_sums[k]
            self._rank(so, NULL, r, order, m)
            self._rank(s, so.data(), r, order, m)
        else:
            self._rank(s, NULL, r, order, m)
        return np.array([r[k] for k in range(m)], dtype=np.int32)

    def sides(self, Y_indptr, Y_indices, Y_data, int64_t n_labels, uint32_t seed):
        """The partition of the points of the label rows Y (CSR), as one node
        (tests): (the random sides it starts from, the sides it returns),
        each an int8 array of +1 / -1, with its generator seeded by `seed`."""
        cdef const int64_t[::1] yp = np.ascontiguousarray(Y_indptr, dtype=np.int64)
        cdef const int32_t[::1] yi = np.ascontiguousarray(Y_indices, dtype=np.int32)
        cdef const float[::1] yv = np.ascontiguousarray(Y_data, dtype=np.float32)
        cdef int64_t n = yp.shape[0] - 1, a
        cdef const int32_t[::1] pts = np.arange(max(n, 1), dtype=np.int32)
        cdef vector[signed char] sign
        cdef mt19937 rng, first
        if n < 1 or yi.shape[0] != yp[n] or yv.shape[0] != yp[n]:
            raise ValueError("Y is not a CSR matrix of one row or more")
        if yi.shape[0] and (np.min(yi) < 0 or np.max(yi) >= n_labels):
            raise ValueError("a label index is out of range")
        self.reset(n_labels)
        rng.seed(seed)
        first = rng
        start = np.array([1 if (first() & 1) else -1 for a in range(n)], dtype=np.int8)
        with nogil:
            self.partition(&pts[0], n, &yp[0], &yi[0], &yv[0], sign, rng)
        return start, np.array([sign[a] for a in range(n)], dtype=np.int8)

    cdef int64_t partition(self, const int32_t* pts, int64_t n, const int64_t* yp,
                           const int32_t* yi, const float* yv, vector[signed char]& sign,
                           mt19937& rng) except -1 nogil:
        """Sides of the points pts[0:n] (label rows of Y: yp, yi, yv) into
        sign[0:n] (+1 / -1); returns how many are on the + side (0 when the
        points carry no label: then no random numbers are drawn)."""
        cdef int64_t a, m, n_pos = 0
        cdef int expo
        cdef double unit
        m = self._local_rows(pts, n, yp, yi, yv, sign, rng)
        if m == 0:
            return 0
        unit = self._exact_unit(n, &expo)
        self._alternate(n, m, sign, expo, unit)
        for a in range(n):
            n_pos += sign[a] > 0
        # the node's label rows are not needed by the separator, which runs
        # next and, on large nodes, holds the most memory: given back now
        # when large (the next node is at most this one's size)
        if n > LARGE_NODE:
            _give_back(self.ly_ptr, 0)
            _give_back(self.ly_idx, 0)
            _give_back(self.ly_val, 0)
            _give_back(self.inorm, 0)
        return n_pos

    cdef int64_t _local_rows(self, const int32_t* pts, int64_t n, const int64_t* yp,
                             const int32_t* yi, const float* yv, vector[signed char]& sign,
                             mt19937& rng) except -1 nogil:
        """The node's labels (act_l; returns how many), its points' label
        rows in local labels (ly_ptr, ly_idx, ly_val), each point's nDCG
        normaliser (inorm) and random side (sign); nothing drawn when the
        points carry no label."""
        cdef int64_t a, j, k, m
        cdef int32_t p
        cdef float* lval
        cdef int32_t* lidx
        cdef signed char sg
        m = _gather(pts, n, yp, yi, self.lmap, self.act_l, self.gbuf.data(), NULL)
        if m == 0:
            return 0
        _resize(self.ly_ptr, n + 1)
        self.ly_ptr[0] = 0
        for a in range(n):
            p = pts[a]
            self.ly_ptr[a + 1] = self.ly_ptr[a] + (yp[p + 1] - yp[p])
        _resize(self.ly_idx, self.ly_ptr[n])
        _resize(self.ly_val, self.ly_ptr[n])
        _resize(self.inorm, n)
        _resize(sign, n)
        lidx = self.ly_idx.data()
        lval = self.ly_val.data()
        k = 0
        for a in range(n):
            _fetch_ahead(pts, a, n, yp, yi, yv)
            p = pts[a]
            for j in range(yp[p], yp[p + 1]):
                lidx[k] = self.lmap[yi[j]]
                lval[k] = yv[j]
                k += 1
            self.inorm[a] = 1.0 / self.cs[yp[p + 1] - yp[p]]
            # (typed temporaries: Cython mistypes `x if c else y` stored
            # through a vector reference)
            sg = 1 if (rng() & 1) else -1
            sign[a] = sg
        _release(self.lmap, self.act_l)
        return m

    cdef double _exact_unit(self, int64_t n, int* expo) noexcept nogil:
        """The unit of the side sums, 2^-expo. They are kept exact, so that
        they follow the points that move instead of being added up anew at
        every step (and equal sums tie exactly, whatever order they were
        added in): each term inorm * value is rounded to a multiple of the
        unit, chosen so that all the terms together stay below 2^52 units,
        which doubles add without rounding."""
        cdef int64_t a, j
        cdef double total = 0.0, row
        cdef const float* lval = self.ly_val.data()
        for a in range(n):
            row = 0.0
            for j in range(self.ly_ptr[a], self.ly_ptr[a + 1]):
                row += fabs(lval[j])
            total += row * self.inorm[a]
        expo[0] = 0
        if total > 0:
            frexp(total, expo)                  # total < 2^expo
            expo[0] = min(51 - expo[0], 960)    # (1 / unit finite beside any inorm)
        return ldexp(1.0, -expo[0])

    cdef int _alternate(self, int64_t n, int64_t m, vector[signed char]& sign, int expo,
                        double unit) except -1 nogil:
        """The alternation from the random sides in sign: rank the labels on
        each side (_step), move the points to the side that serves their
        labels better (_move), until the objective gains less than 1e-6 or
        no point moves. Each step's side sums are the step before's, updated
        by the points that changed sides."""
        cdef int64_t a, step = 0
        cdef double obj, prev = -2.0
        cdef bint last
        _give_back(self.sp, m)
        fill_vector(self.sp, m, 0.0)
        _give_back(self.sn, m)
        fill_vector(self.sn, m, 0.0)
        _resize(self.spo, m)
        _resize(self.sno, m)
        _resize(self.rp, m)
        _resize(self.rn, m)
        _resize(self.gain, m)
        for a in range(n):
            _add_row(self.sp.data() if sign[a] > 0 else self.sn.data(), self.ly_idx.data(),
                     self.ly_val.data(), self.ly_ptr[a], self.ly_ptr[a + 1],
                     ldexp(self.inorm[a], expo), unit)
        while True:
            obj = self._step(n, m, step)
            step += 1
            last = obj - prev < 1e-6
            # (no point moved: the next step would rank the same sums the
            # same way, gain nothing and move nobody, so it is skipped)
            if self._move(n, sign, last, expo, unit) == 0 or last:
                break
            prev = obj
        return 0

    cdef double _step(self, int64_t n, int64_t m, int64_t step) except? -1 nogil:
        """Rank the labels of each side by its sums and return the summed
        nDCG of the step's sides over n; gain := per label, the discount of
        its + rank less that of its - rank. The sums are kept for the next
        step's ranking (spo, sno), and the next step's start from them."""
        cdef int64_t k
        cdef double obj = 0.0
        # (the first reassignment moves about half the points: the step
        # after it is ranked from scratch too; later steps re-place the
        # labels whose sums changed since the step before)
        self._rank(self.sp, <const double*> NULL if step < 2 else self.spo.data(),
                   self.rp, self.op, m)
        self._rank(self.sn, <const double*> NULL if step < 2 else self.sno.data(),
                   self.rn, self.on, m)
        for k in range(m):
            obj += self.disc[self.rp[k]] * self.sp[k] + self.disc[self.rn[k]] * self.sn[k]
            self.gain[k] = self.disc[self.rp[k]] - self.disc[self.rn[k]]
        obj /= n
        self.sp.swap(self.spo)
        self.sn.swap(self.sno)
        memcpy(self.sp.data(), self.spo.data(), m * sizeof(double))
        memcpy(self.sn.data(), self.sno.data(), m * sizeof(double))
        return obj

    cdef int64_t _move(self, int64_t n, vector[signed char]& sign, bint last, int expo,
                       double unit) noexcept nogil:
        """Move each point to the side its labels gain on (by gain); the
        side sums follow the points that move, except on the `last` step.
        Returns how many moved."""
        cdef int64_t a = 0, b, q, moved = 0
        cdef double delta
        cdef double d2[2]
        cdef signed char sg
        cdef double* sp = self.sp.data()
        cdef double* sn = self.sn.data()
        cdef const double* gain = self.gain.data()
        cdef const int64_t* ptr = self.ly_ptr.data()
        cdef const int32_t* lidx = self.ly_idx.data()
        cdef const float* lval = self.ly_val.data()
        while a < n:
            # (the gains of two points at a time: b is the point after them)
            b = a + 2 if a + 1 < n else a + 1
            _gain_sums2(lval, lidx, gain, ptr[a], ptr[a + 1], ptr[a + 1], ptr[b], d2)
            for q in range(b - a):
                delta = d2[q]
                # (selects, not branches: a point's side is not predictable)
                sg = sign[a]
                if (sg > 0 and delta < 0) or (sg < 0 and delta > 0):
                    sign[a] = -sg
                    moved += 1
                    if not last:
                        _move_row(sn if sg > 0 else sp, sp if sg > 0 else sn, lidx,
                                  lval, ptr[a], ptr[a + 1],
                                  ldexp(self.inorm[a], expo), unit)
                a += 1
        return moved

    cdef int _rank(self, vector[double]& s, const double* so, vector[int32_t]& r,
                   vector[int32_t]& order, int64_t m) except -1 nogil:
        """Rank labels by decreasing sum, ties to the lower local index; labels
        with a sum that is not positive follow in index order: r[l] := rank
        of l, and order[k] := the label of rank k. That order is total, so
        the ranks do not depend on how they were found:

        - from scratch (so NULL): labels are sorted as 64-bit keys packing
          the sum rounded to float32 (whose bit pattern orders like the
          value for positive floats; inverted, so that ascending keys are
          decreasing sums; all ones for a sum that is not positive) above
          the label. Rounding is monotone, so only runs of equal float32
          sums can be out of the exact order: those are re-sorted on the
          double sums.
        - from the previous step (so: the sums `order` holds the order of):
          the labels whose sum changed (some of the points with them
          changed sides) are sorted on their new sums and merged into the
          others, which keep their order. That costs a pass over the labels
          and a sort of the changed ones; when more than a quarter changed,
          the full sort runs instead."""
        cdef int64_t k
        cdef const double* sv = s.data()
        if so == NULL or not self._merge_changed(sv, so, order, m):
            self._sort_all(sv, order, m)
        for k in range(m):
            r[order[k]] = <int32_t> k
        return 0

    cdef bint _merge_changed(self, const double* sv, const double* so, vector[int32_t]& order,
                             int64_t m) except -1 nogil:
        """_rank after a step: order := the labels by sums sv, from `order`,
        their order by the sums so of the step before. False (order
        untouched) when more than a quarter of the sums changed."""
        cdef int64_t k, j = 0, c, out = 0, l
        cdef double v
        cdef int32_t* od
        cdef int32_t* nw
        self.order.clear()
        for l in range(m):
            if sv[l] != so[l]:
                v = sv[l] if sv[l] > 0 else 0.0
                self.order.push_back(pair[double, int32_t](-v, <int32_t> l))
                if <int64_t> self.order.size() * 4 > m:
                    return False
        c = self.order.size()
        sort(self.order.begin(), self.order.end())
        _resize(self.merged, m)
        od = order.data()
        nw = self.merged.data()
        for k in range(m):
            l = od[k]
            if sv[l] != so[l]:
                continue
            v = -(sv[l] if sv[l] > 0 else 0.0)
            while j < c and (self.order[j].first < v or (
                    self.order[j].first == v and self.order[j].second < l)):
                nw[out] = self.order[j].second
                out += 1
                j += 1
            nw[out] = <int32_t> l
            out += 1
        while j < c:
            nw[out] = self.order[j].second
            out += 1
            j += 1
        order.swap(self.merged)
        return True

    cdef int _sort_all(self, const double* sv, vector[int32_t]& order, int64_t m) except -1 nogil:
        """_rank from scratch: order := the labels by sums sv."""
        cdef int64_t k, j, c, a, b, l
        cdef int32_t* od
        cdef uint64_t* kv
        _resize(self.keys, m)
        _resize(order, m + 1)       # (the passes below write one entry past the end)
        kv = self.keys.data()
        od = order.data()
        # keys of the labels with a positive sum, in label order (so that a
        # stable sort on the sums is the full sort); the others go last
        c = 0
        for l in range(m):
            kv[c] = _rank_key(sv[l], l)
            c += sv[l] > 0
        j = c
        for l in range(m):
            od[j] = <int32_t> l
            j += not sv[l] > 0
        order.resize(m)
        if c >= 64:
            _radix_sort_high(kv, c, self.keys_tmp)
        else:
            sort(kv, kv + c)
        a = 0
        while a < c:
            b = a + 1
            while b < c and (kv[b] >> 32) == (kv[a] >> 32):
                b += 1
            if b - a > 1 and not _equal_sums(kv, sv, a, b):
                self.order.clear()
                for k in range(a, b):
                    l = <int64_t> (kv[k] & 0xFFFFFFFFULL)
                    self.order.push_back(pair[double, int32_t](-sv[l], <int32_t> l))
                sort(self.order.begin(), self.order.end())
                for k in range(a, b):
                    order[k] = self.order[k - a].second
            else:
                for k in range(a, b):
                    order[k] = <int32_t> (kv[k] & 0xFFFFFFFFULL)
            a = b
        return 0

