# The state of xmlkit._ext.parabel_cluster.LabelKmeans (code:
# parabel_cluster.pyx beside this file): a thread's scratch for splitting a
# node's labels, kept from node to node so that its buffers are reused.

from libc.stdint cimport int32_t, int64_t, uint64_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair

from sparse_rows cimport mt19937


cdef inline int64_t rand_below(mt19937& rng, int64_t n) noexcept nogil:
    """A draw in 0 .. n - 1 of the node's stream (k-means' seeds, the
    solver's orders: both trainers of a node draw this way)."""
    return <int64_t> (rng() % <uint64_t> n)


cdef class LabelKmeans:
    cdef vector[double] total            # each cluster's sum of centroids (local feature x K)
    cdef vector[double] centre           # the sums at unit length, for K = 2 (feature x 2)
    cdef vector[float] centref           # the live sums at unit length, for K > 2 (local
                                         #   feature x len(live))
    cdef vector[int32_t] live            # the clusters whose centres changed in the last
                                         #   round (K > 2): their cosines are summed again
    cdef vector[char] moved              # scratch: a label left or joined the cluster
    cdef vector[double] cos              # cosine of each label to each centre (label x K)
    cdef vector[float] cosf              # the same summed in floats, for K > 2
    cdef vector[double] norm             # the length of each cluster's sum
    cdef vector[int64_t] count           # labels given to each cluster (balanced K > 2)
    cdef vector[int32_t] pick            # the labels that seed the centres
    cdef vector[int32_t] prev            # each label's cluster before this round (-1: none)
    cdef vector[int32_t] renum           # cluster -> child, clusters that got no label dropped
    cdef vector[pair[double, int64_t]] order   # scratch of the balanced assignments
    cdef vector[int64_t] fptr            # the centroids by chunk of labels and local feature:
    cdef vector[int32_t] flab            #   entries of chunk b, feature f at fptr[b * nf + f]
    cdef vector[float] fval              #   .. fptr[b * nf + f + 1] - 1, as (label j, value)
    cdef vector[int64_t] at              # scratch of the by-feature layout

    cdef void split(self, const int64_t* cp, const int32_t* ci, const float* cv,
                    const int32_t* fmap, int64_t nf, const int32_t* labels, int64_t m,
                    int64_t arity, bint balanced, double eps, mt19937& rng,
                    int32_t* group) except * nogil
    cdef void _split(self, const int64_t* cp, const int32_t* ci, const float* cv,
                     const int32_t* fmap, int64_t nf, const int32_t* labels, int64_t m,
                     int64_t arity, bint balanced, double eps, mt19937& rng,
                     int32_t* group) except * nogil
    cdef void _kmeans(self, const int64_t* cp, const int32_t* ci, const float* cv,
                      const int32_t* fmap, int64_t nf, const int32_t* labels, int64_t m,
                      int64_t K, bint balanced, double eps, mt19937& rng,
                      int32_t* group) except * nogil
    cdef void _centres(self, int64_t nf, int64_t K) noexcept nogil
    cdef void _by_feature(self, const int64_t* cp, const int32_t* ci, const float* cv,
                          const int32_t* fmap, const int32_t* labels, int64_t m,
                          int64_t nf, int64_t K) except * nogil
    cdef void _cosines(self, int64_t nf, int64_t m, int64_t kc, int64_t K) noexcept nogil
    cdef void _assign(self, int64_t m, int64_t K, bint balanced, int32_t* group) except * nogil
