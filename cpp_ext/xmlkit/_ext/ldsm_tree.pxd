# The state of the kernels of xmlkit._ext.ldsm_tree, whose code is ldsm_tree.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t, uint32_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair

from sparse_rows cimport mt19937


cdef class LdsmData:
    cdef const int64_t[::1] xp           # features with the bias column appended (CSR)
    cdef const int32_t[::1] xi
    cdef const float[::1] xv
    cdef const int64_t[::1] yp           # labels (CSR, values ignored)
    cdef const int32_t[::1] yi
    cdef int64_t n                       # points
    cdef int64_t d                       # feature columns with the bias column (index d - 1)
    cdef int64_t L                       # label columns


cdef class LdsmBuild:
    # settings
    cdef int M                           # children per internal node (arity)
    cdef int64_t max_nodes               # node budget of a tree
    cdef int64_t max_leaf                # a node of at most this many points is a leaf
    cdef int epochs                      # passes over a node's points
    cdef double lr                       # learning rate of the regressors
    cdef double l1                       # weight of the balance term
    cdef double l2                       # weight of the purity term
    cdef double threshold                # a child whose margin is >= this is visited
    cdef double prior                    # a squared gradient's sum starts at prior * s^2 (AdaGrad)
    # data (pointers into the LdsmData being grown on)
    cdef const int64_t* xp
    cdef const int32_t* xi
    cdef const float* xv
    cdef const int64_t* yp
    cdef const int32_t* yi
    cdef int64_t d                       # feature columns with the bias column
    cdef int64_t L                       # label columns
    # the tree
    cdef vector[int32_t] first_child     # first of node i's M children, -1 at leaves
    cdef vector[int32_t] depth           # depth of each node
    cdef vector[int32_t] reg_row         # first of node i's M regressor rows, -1 at leaves
    cdef vector[int64_t] reg_ptr         # entries of regressor row j: reg_ptr[j] .. reg_ptr[j + 1] - 1
    cdef vector[int32_t] reg_idx         # feature of each regressor entry
    cdef vector[float] reg_val           # value of each regressor entry
    cdef vector[vector[pair[int32_t, float]]] hist    # per node: (label, count), labels ascending
    cdef vector[vector[int32_t]] members # per queued node: its points (freed once processed)
    cdef vector[int64_t] n_points        # per node: the points routed to it
    # node-training buffers (reset after each node on what was touched)
    cdef vector[double] w                # M x d regressor weights
    cdef vector[double] s                # M x d largest |x_f| seen (normalized updates)
    cdef vector[double] G                # M x d sums of squared gradients (AdaGrad)
    cdef vector[float] wd                # M x d the stored regressors while routing (else 0)
    cdef vector[double] p                # per child: running estimate p_j
    cdef vector[double] pj               # L x M running estimates p_{j|i}
    cdef vector[double] nl               # per label: examples seen (also _histogram's scratch)
    cdef vector[double] Nj               # per regressor: sum of (|x_f| / s_f)^2 (step normaliser)
    cdef vector[char] fmark              # per feature: touched at this node
    cdef vector[char] lmark              # per label: touched at this node
    cdef vector[int32_t] ftouched        # the features touched at this node
    cdef vector[int32_t] ltouched        # the labels touched at this node
    cdef mt19937 rng                     # the tree's random stream

    cdef void _grow(self, int64_t n, uint32_t seed) except * nogil
    cdef int32_t _add_node(self, int32_t depth) except -1 nogil
    cdef double _impurity(self, int32_t node) noexcept nogil
    cdef vector[pair[int32_t, float]] _histogram(self, vector[int32_t]& pts) except * nogil
    cdef bint _train_split(self, int32_t node) except -1 nogil
    cdef int _train(self, int32_t node) except -1 nogil
    cdef bint _split(self, int32_t node) except -1 nogil
