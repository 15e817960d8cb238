# The state of the kernel of xmlkit._ext.parabel_predict, whose code is parabel_predict.pyx
# beside this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t
from libcpp.vector cimport vector


cdef struct ParabelTree:
    # one tree's arrays, read where they lie (nodes in breadth-first order; the root is 0)
    int64_t n_nodes                      # nodes of the tree
    const int64_t* c_ptr                 # children of node i: nodes c_ptr[i] .. c_ptr[i + 1] - 1
    const int64_t* l_ptr                 # labels of node i (a leaf): l_idx[l_ptr[i] .. l_ptr[i + 1] - 1]
    const int32_t* l_idx                 # label of each leaf entry
    const int64_t* w_ptr                 # classifier rows: node i's is row i (the root's is empty),
                                         # leaf entry q's is row n_nodes + q
    const int32_t* w_idx                 # feature of each weight (d - 1: the bias)
    const float* w_val                   # value of each weight
    const int64_t* dense_id              # row of `dense` holding classifier row j, or -1
    const float* dense                   # long classifier rows as dense rows (d wide)


cdef class ParabelKernel:
    cdef vector[ParabelTree] trees       # the trees, in the order their scores are added
    cdef list refs                       # the arrays behind the views (kept alive)
    cdef int64_t d                       # feature columns with the bias column (index d - 1)
    cdef double bias                     # value of the bias feature
    cdef int64_t n_labels                # label columns
    cdef int loss                        # 0: squared hinge, 1: logistic
