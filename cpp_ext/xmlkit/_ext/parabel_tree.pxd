# The state of the kernels of xmlkit._ext.parabel_tree, whose code is parabel_tree.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py), and
# the solver's requests to the cache (inline C).

from libc.stdint cimport int32_t, int64_t, uint32_t
from libcpp.vector cimport vector

from sparse_rows cimport mt19937
from xmlkit._ext.parabel_cluster cimport LabelKmeans


cdef extern from *:
    """
    #include <cstdint>
    #include "xk_portable.h"
    // Ask the cache for what the solver's pass reads of the points to come:
    // the row and targets of point perm[s + 8] (their starts in ri, rv and
    // ti, whose bounds were asked for eight steps before) and the row and
    // target bounds, dual variables (stride a point) and squared norm of
    // point perm[s + 16]. The pass visits the points in a random order, so
    // without it each point waits for memory. Hints only: no result depends
    // on them. (Always inlined: GCC drops a call to a function whose only
    // effect is a prefetch before it would inline it.)
    static XK_ALWAYS_INLINE void xk_solver_ahead(
            const int32_t* perm, int64_t s, int64_t n, const int64_t* rp,
            const int32_t* ri, const float* rv, const int64_t* tp, const int32_t* ti,
            const float* sq, const double* alpha, int64_t stride) {
        if (s + 16 < n) {
            int64_t i = perm[s + 16];
            XK_PREFETCH(&rp[i]);
            XK_PREFETCH(&tp[i]);
            XK_PREFETCH(&sq[i]);
            for (int64_t a = 0; a < stride; a += 8)
                XK_PREFETCH(&alpha[i * stride + a]);
        }
        if (s + 8 < n) {
            int64_t i = perm[s + 8];
            XK_PREFETCH(&ri[rp[i]]);
            XK_PREFETCH(&rv[rp[i]]);
            XK_PREFETCH(&ti[tp[i]]);
        }
    }
    """
    void _solver_ahead "xk_solver_ahead" (
        const int32_t* perm, int64_t s, int64_t n, const int64_t* rp, const int32_t* ri,
        const float* rv, const int64_t* tp, const int32_t* ti, const float* sq,
        const double* alpha, int64_t stride) noexcept nogil


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
    cdef LabelKmeans km                  # the k-means of the node's labels (its scratch)
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

    cdef void _gather(self, ParabelData data, const int32_t* labels, int64_t m) except * nogil
    cdef void _targets(self, ParabelData data, const int32_t* labels, int64_t m,
                       const int32_t* group) except * nogil
    cdef void _solve(self, int64_t n_cls) except * nogil
    cdef void _release(self) noexcept nogil
    cdef void _cluster(self, ParabelData data, const int32_t* labels, int64_t m,
                       int32_t* group) except * nogil
