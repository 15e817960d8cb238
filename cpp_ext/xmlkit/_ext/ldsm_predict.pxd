# The state of the kernel of xmlkit._ext.ldsm_predict, whose code is ldsm_predict.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t
from libcpp.vector cimport vector


cdef struct LdsmTree:
    # one tree's arrays, read where they lie (node ids are the tree's own; the root is 0)
    const int32_t* first_child           # first of a node's M consecutive children, -1 at leaves
    const int32_t* reg_row               # first of a node's M regressor rows, -1 at leaves
    const int64_t* reg_ptr               # entries of regressor row j: reg_ptr[j] .. reg_ptr[j + 1] - 1
    const int32_t* reg_idx               # feature of each regressor entry (d - 1: the bias)
    const float* reg_val                 # value of each regressor entry
    const int64_t* dense_id              # row of `dense` holding regressor row j, or -1
    const float* dense                   # long regressor rows as dense rows (d wide)
    const int64_t* l_ptr                 # histogram of leaf i: l_ptr[i] .. l_ptr[i + 1] - 1
    const int32_t* l_idx                 # label of each histogram entry
    const float* l_val                   # each entry's value (share of the leaf's points)


cdef class LdsmKernel:
    cdef vector[LdsmTree] trees          # the trees, in the order their scores are added
    cdef list refs                       # the arrays behind the views (kept alive)
    cdef const int32_t[::1] fill_idx     # labels by the forest's marginal, descending (row filling)
    cdef const float[::1] fill_val       # their marginal over the largest, in (0, 1]
    cdef int64_t n_fill                  # labels in fill_idx
    cdef int M                           # children per internal node
    cdef int64_t d                       # feature columns with the bias column (index d - 1)
    cdef double bias                     # value of the bias feature
    cdef int64_t n_labels                # label columns
    cdef double threshold                # a child whose margin is >= this is visited
