# The state of xmlkit._ext.fastxml_partition.NdcgPartition (code:
# fastxml_partition.pyx beside this file).

from libc.stdint cimport int32_t, int64_t, uint64_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair

from sparse_rows cimport mt19937


cdef class NdcgPartition:
    cdef int64_t n_labels                 # label columns
    cdef bint use_idcg                    # normalise each point's DCG by its ideal DCG
    cdef vector[double] disc              # disc[r] = 1 / log2(r + 2): discount of rank r
    cdef vector[double] cs                # cs[c] = ideal DCG of a point with c labels (1 without idcg)
    cdef vector[int32_t] lmap             # label -> local index in the node, else -1
    cdef vector[int32_t] act_l            # the node's labels (local index -> label)
    cdef vector[int32_t] gbuf             # scratch of _gather: one entry per label, and one more
    cdef vector[int64_t] ly_ptr           # local labels of point a: ly_ptr[a] .. ly_ptr[a + 1] - 1
    cdef vector[int32_t] ly_idx           # local label of each entry
    cdef vector[float] ly_val             # value of each entry
    cdef vector[double] inorm             # 1 / ideal DCG of each point
    cdef vector[double] sp, sn            # per local label: normalised sums on the + / - side
    cdef vector[double] spo, sno          # the sums of the step before (their order is op / on)
    cdef vector[double] gain              # per local label: disc(rank +) - disc(rank -)
    cdef vector[int32_t] rp, rn           # rank of each local label on the + / - side
    cdef vector[int32_t] op, on           # local labels in rank order on the + / - side
    cdef vector[pair[double, int32_t]] order   # scratch: (key, label) pairs being ranked
    cdef vector[uint64_t] keys            # scratch: packed (float32 key, label) sort keys
    cdef vector[uint64_t] keys_tmp        # scratch: the radix sort's second buffer
    cdef vector[int32_t] merged           # scratch: the order being merged

    cdef void reset(self, int64_t n_labels)
    cdef int64_t partition(self, const int32_t* pts, int64_t n, const int64_t* yp,
                           const int32_t* yi, const float* yv, vector[signed char]& sign,
                           mt19937& rng) except -1 nogil
    cdef int64_t _local_rows(self, const int32_t* pts, int64_t n, const int64_t* yp,
                             const int32_t* yi, const float* yv, vector[signed char]& sign,
                             mt19937& rng) except -1 nogil
    cdef double _exact_unit(self, int64_t n, int* expo) noexcept nogil
    cdef int _alternate(self, int64_t n, int64_t m, vector[signed char]& sign, int expo,
                        double unit) except -1 nogil
    cdef double _step(self, int64_t n, int64_t m, int64_t step) except? -1 nogil
    cdef int64_t _move(self, int64_t n, vector[signed char]& sign, bint last, int expo,
                       double unit) noexcept nogil
    cdef int _rank(self, vector[double]& s, const double* so, vector[int32_t]& r,
                   vector[int32_t]& order, int64_t m) except -1 nogil
    cdef bint _merge_changed(self, const double* sv, const double* so, vector[int32_t]& order,
                             int64_t m) except -1 nogil
    cdef int _sort_all(self, const double* sv, vector[int32_t]& order, int64_t m) except -1 nogil

