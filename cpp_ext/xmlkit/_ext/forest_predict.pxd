# The state of the kernel of xmlkit._ext.forest_predict, whose code is forest_predict.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t
from xmlkit._ext.file_check cimport Blocks
from libcpp.utility cimport pair
from libcpp.vector cimport vector
from sparse_rows cimport RowsOut


cdef struct TreeView:
    # one tree's arrays, read where they lie (node ids are the tree's own)
    const int32_t* child                 # first (w.x >= 0) and second child; -1 -1 at leaves
    const int64_t* wp                    # weights of node i: wp[i] .. wp[i + 1] - 1
    const int32_t* wi                    # feature of each weight (n_features: the bias)
    const float* wv                      # value of each weight
    const int64_t* lp                    # labels of leaf i: lp[i] .. lp[i + 1] - 1
    const int32_t* li                    # label of each leaf entry
    const float* lv                      # value of each leaf entry
    int64_t n_nodes
    int64_t n_w                          # weights (wi, wv) and leaf entries (li, lv): every
    int64_t n_le                         # pointer and index is bounded where it is used
    bint ascending                       # every weight row strictly ascending: a row may
                                         # be searched instead of scattered
    bint ready                           # its contents are checked: it may be routed
    const int64_t* dense_id              # (ready) node i's dense weight row, or -1
    const float* dense                   # (ready) dense rows of n_features + 1 values
    Blocks* blk                          # the checks of its mapped file, as it is read
                                         # (NULL: its arrays are checked already)
    int64_t o_child, o_wp, o_wi, o_wv    # byte offsets of its arrays in that file
    int64_t o_lp, o_li, o_lv


cdef struct Span:
    int32_t node                         # a node of the tree being routed
    int64_t lo, hi                       # its points: order[lo:hi]


cdef struct Scratch:
    # what routing a block through a tree works in
    vector[float] dense                  # n_features + 1 zeros (a scattered weight row)
    vector[float] point                  # n_features + 1 zeros (a lone point's features)
    vector[int32_t] order, spare         # the block's points, grouped by node
    vector[Span] todo                    # nodes still to route


cdef class ForestKernel:
    cdef vector[TreeView] trees          # the trees, in the order their scores are added
    cdef list refs                       # the arrays behind the views (kept alive)
    cdef vector[vector[int64_t]] dense_ids   # per tree: the storage of TreeView.dense_id
    cdef vector[vector[float]] dense_rows    # per tree: the storage of TreeView.dense
    cdef int64_t n_features              # feature columns (the bias feature is n_features)
    cdef int64_t n_labels                # label columns
    cdef double bias                     # value of the bias feature
    cdef Py_ssize_t failed               # the tree whose check failed last, or -1
    cdef int _need_ready(self) except -1
    cdef int _raise(self, int code, Py_ssize_t t) except -1


cdef int _accumulate(ForestKernel f, const int32_t** leaf, int64_t n, int topk,
                     RowsOut& out) except -1 nogil


cdef inline double _weight_from(const int32_t* wi, const float* wv, int64_t* at, int64_t end,
                                int32_t feature) noexcept nogil:
    """The weight of `feature` in the ascending entries wi[*at:end], or 0;
    *at moves to the first entry >= feature, where the search for a larger
    feature starts (a point's features come in ascending order): a gallop
    (steps 1, 2, 4, ...), then a binary search of the last step."""
    cdef int64_t lo = at[0], hi, step = 1, mid
    while lo + step < end and wi[lo + step] < feature:
        lo += step
        step <<= 1
    hi = min(end, lo + step + 1)
    while lo < hi:
        mid = (lo + hi) >> 1
        if wi[mid] < feature:
            lo = mid + 1
        else:
            hi = mid
    at[0] = lo
    return wv[lo] if lo < end and wi[lo] == feature else 0.0
