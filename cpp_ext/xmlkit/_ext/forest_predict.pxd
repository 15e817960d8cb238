# The state of the kernel of xmlkit._ext.forest_predict, whose code is forest_predict.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t
from libcpp.utility cimport pair
from libcpp.vector cimport vector


cdef class ForestKernel:
    # trees concatenated: node ids index these arrays, tree t starts at roots[t]
    cdef const int32_t[::1] roots        # root node of each tree
    cdef const int32_t[:, ::1] child     # first (w.x >= 0) and second child; -1 -1 at leaves
    cdef const int64_t[::1] w_ptr        # weights of node i: w_ptr[i] .. w_ptr[i + 1] - 1
    cdef const int32_t[::1] w_idx        # feature of each weight (n_features: the bias)
    cdef const float[::1] w_val          # value of each weight
    cdef const int64_t[::1] l_ptr        # labels of leaf i: l_ptr[i] .. l_ptr[i + 1] - 1
    cdef const int32_t[::1] l_idx        # label of each leaf entry, ascending per leaf
    cdef const float[::1] l_val          # value of each leaf entry
    cdef int64_t n_features              # feature columns (the bias feature is n_features)
    cdef int64_t n_labels                # label columns
    cdef double bias                     # value of the bias feature
    cdef bint ascending                  # every weight row strictly ascending: a row may
                                         # be searched instead of scattered


cdef class ScoreSums:
    # row i: (label, sum of its leaf values over the trees added so far),
    # in the order the labels were first met
    cdef vector[vector[pair[int32_t, double]]] rows
    cdef int64_t n_labels                # label columns
    cdef int64_t n_trees                 # trees added (set_tree)
    cdef const int64_t[::1] lp           # the current tree's leaf rows (set_tree)
    cdef const int32_t[::1] li
    cdef const float[::1] lv
