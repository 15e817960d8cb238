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


cdef class LeafSums:
    # of each tree t added (t < added): the leaf leaf[i * n_trees + t] that
    # row i reached, renumbered 0.. in the order first met, and those leaves'
    # label rows: leaf q holds lp[t][q] .. lp[t][q + 1] - 1 of li[t], lv[t]
    cdef int64_t n_rows                  # rows (points)
    cdef int64_t n_labels                # label columns
    cdef int64_t n_trees                 # trees to add
    cdef int64_t added                   # trees added (add_tree)
    cdef vector[int32_t] leaf            # n_rows * n_trees leaf ids
    cdef vector[vector[int64_t]] lp      # per tree: row pointers of its reached leaves
    cdef vector[vector[int32_t]] li      # per tree: their labels (ascending per leaf)
    cdef vector[vector[float]] lv        # per tree: their values
