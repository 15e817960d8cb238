# The state of the kernels of xmlkit._ext.parabel_tree, whose code is parabel_tree.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t, uint32_t
from libcpp.vector cimport vector

from sparse_rows cimport mt19937


cdef class ParabelData:
    # the training data as every node of every tree reads them (read-only once built)
    cdef const int64_t[::1] xp           # feature rows (CSR), read scaled, the bias column appended
    cdef const int32_t[::1] xi
    cdef const float[::1] xv
    cdef const double[::1] xs            # each row's scale to unit length
    cdef float bias                      # the value of the bias column (d - 1) in every row
    cdef const int64_t[::1] yp           # labels of each point (CSR, values ignored)
    cdef const int32_t[::1] yi
    cdef const int64_t[::1] lp           # points of each label, ascending (CSR of Y's transpose)
    cdef const int32_t[::1] li
    cdef const int64_t[::1] cp           # label centroids over the features (CSR, unit rows)
    cdef const int32_t[::1] ci
    cdef const float[::1] cv
    cdef int64_t n                       # points
    cdef int64_t d                       # feature columns with the bias column (index d - 1)
    cdef int64_t L                       # label columns


cdef class ParabelNode:
    # settings
    cdef int arity                       # clusters asked of a split (K)
    cdef bint balanced                   # clusters of equal sizes (else: each label to its best)
    cdef double cluster_eps              # k-means stops when the mean cosine gains less
    cdef int loss                        # 0: squared hinge (L2-loss SVC), 1: logistic
    cdef double C                        # cost of the classifiers
    cdef int max_iter                    # solver passes at most
    cdef double tol                      # solver stopping tolerance (liblinear's eps)
    cdef double threshold                # weights of magnitude <= this are dropped
    cdef int64_t n_trn                   # training points (the logistic cost's scale)
    # scratch that follows the data's sizes (marks reset after each node on what was touched)
    cdef vector[int32_t] pmap            # point -> its local index in the node, or -1
    cdef vector[int32_t] fmap            # feature -> its local index in the node, or -1
    cdef vector[int32_t] lmap            # label -> its classifier (or child) in the node, or -1
    # the node (rebuilt per node)
    cdef vector[int32_t] pts             # the node's points, ascending
    cdef vector[int32_t] feats           # the features of its points, ascending
    cdef vector[int64_t] rp              # the points' rows over local features (CSR)
    cdef vector[int32_t] ri
    cdef vector[float] rv
    cdef vector[float] sq                # squared norm of each local row
    cdef vector[int64_t] tp              # the classifiers each point is a positive of (CSR)
    cdef vector[int32_t] ti
    cdef mt19937 rng                     # the node's random stream
    # classifiers made (CSR rows over the local features, one per classifier)
    cdef vector[int64_t] wp
    cdef vector[int32_t] wi
    cdef vector[float] wv
    cdef vector[int64_t] count           # per local feature: its weights, then a cursor

    cdef void _gather(self, ParabelData data, const int32_t* labels, int64_t m) except + nogil
    cdef void _targets(self, ParabelData data, const int32_t* labels, int64_t m,
                       const int32_t* group) except + nogil
    cdef void _solve(self, int64_t n_cls) except + nogil
    cdef void _release(self) noexcept nogil
    cdef void _cluster(self, ParabelData data, const int32_t* labels, int64_t m,
                       int32_t* group) except + nogil
