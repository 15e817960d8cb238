# The state of the kernel of xmlkit._ext.ldsm_predict, whose code is ldsm_predict.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t


cdef class LdsmKernel:
    # trees concatenated: node ids index these arrays, tree t starts at roots[t]
    cdef const int32_t[::1] roots        # root node of each tree
    cdef const int32_t[::1] first_child  # first of a node's M consecutive children, -1 at leaves
    cdef const int32_t[::1] reg_row      # first of a node's M regressor rows, -1 at leaves
    cdef const int64_t[::1] reg_ptr      # entries of regressor row j: reg_ptr[j] .. reg_ptr[j + 1] - 1
    cdef const int32_t[::1] reg_idx      # feature of each regressor entry (d - 1: the bias)
    cdef const float[::1] reg_val        # value of each regressor entry
    cdef const int64_t[::1] dense_id     # row of `dense` holding regressor row j, or -1
    cdef const float[:, ::1] dense       # long regressor rows as dense rows (d wide)
    cdef const int64_t[::1] l_ptr        # histogram of leaf i: l_ptr[i] .. l_ptr[i + 1] - 1
    cdef const int32_t[::1] l_idx        # label of each histogram entry
    cdef const float[::1] l_val          # normalized count of each histogram entry
    cdef const int32_t[::1] fill_idx     # labels by the forest's marginal, descending (row filling)
    cdef const float[::1] fill_val       # their marginal over the largest, in (0, 1]
    cdef int64_t n_fill                  # labels in fill_idx
    cdef int M                           # children per internal node
    cdef int64_t d                       # feature columns with the bias column (index d - 1)
    cdef double bias                     # value of the bias feature
    cdef int64_t n_labels                # label columns
    cdef double threshold                # a child whose margin is >= this is visited
