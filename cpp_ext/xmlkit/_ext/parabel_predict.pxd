# The state of the kernel of xmlkit._ext.parabel_predict, whose code is parabel_predict.pyx
# beside this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t, uint16_t
from libcpp.vector cimport vector


cdef struct ParabelTree:
    # one tree, its classifiers regrouped by the node that scores them: group i
    # holds node i's children's classifiers (an internal node) or its labels'
    # (a leaf), feature-major, so that scoring a point at node i costs its
    # non-zeros and the weights they meet, not group size x non-zeros; a
    # feature's weights are adjacent, in classifier order
    int64_t n_nodes                      # nodes of the tree (breadth-first; the root is 0)
    const int64_t* c_ptr                 # children of node i: nodes c_ptr[i] .. c_ptr[i + 1] - 1
    const int64_t* l_ptr                 # labels of node i (a leaf): l_idx[l_ptr[i] .. l_ptr[i + 1] - 1]
    const int32_t* l_idx                 # label of each leaf entry
    const int64_t* g_ptr                 # weights of group i: g_ptr[i] .. g_ptr[i + 1] - 1
    const int32_t* e_feat                # feature of each weight, ascending within its group
                                         # (d - 1, the bias, last)
    const void* e_col                    # classifier of each weight, 0-based within its group:
                                         # uint8, uint16 or int32 (col_bytes)
    int col_bytes                        # bytes of an e_col entry: 1, 2 or 4
    const float* e_val                   # value of each weight
    int64_t n_e                          # weights (e_feat, e_col, e_val entries)
    int64_t n_l                          # leaf entries (l_idx)
    int64_t n_labels                     # label columns (a leaf label is below it)
    int64_t widest                       # children or leaf labels of a node at most
    # the whole tree feature-major (built when the tree is small: see
    # parabel_groups.lay_out_whole; n_cls 0 when it is not): a point's
    # margins at every classifier of the tree in one pass over its non-zeros,
    # for a beam that reaches most nodes. Its own copies of the links, so
    # that nothing of it is read from a mapped file
    int64_t n_cls                        # classifiers: node i's are cls0[i] .. cls0[i + 1] - 1
    const int64_t* level_n               # nodes at node i's depth
    const double* load                   # node i's weights / d: those a non-zero meets there
    const int64_t* cls0                  # (n_nodes + 1 entries)
    const int64_t* f_ptr                 # weights of feature f: f_ptr[f] .. f_ptr[f + 1] - 1
    const uint16_t* f_cls                # classifier of each, ascending within a feature
    const float* f_val                   # value of each
    const int64_t* own_c_ptr             # copies of c_ptr, l_ptr, l_idx
    const int64_t* own_l_ptr
    const int32_t* own_l_idx

cdef class ParabelKernel:
    cdef vector[ParabelTree] trees       # the trees, in the order their scores are added
    cdef list refs                       # the arrays behind the views (kept alive)
    cdef int64_t d                       # feature columns with the bias column (index d - 1)
    cdef double bias                     # value of the bias feature
    cdef int64_t n_labels                # label columns
    cdef int64_t widest                  # classifiers of the largest group
    cdef int64_t col_room                # margins a one- or two-byte e_col can index (256 or
                                         # 65,536; 0 with four-byte ones): see _add_span
    cdef int loss                        # 0: squared hinge, 1: logistic
    cdef int64_t whole_cls               # classifiers of the largest tree laid out whole

    cdef _lay_out_whole(self, ParabelTree& v, tree, int64_t d)
