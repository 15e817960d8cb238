# The state of xmlkit._ext.fastxml_separator.NodeSeparator (code:
# fastxml_separator.pyx beside this file), and liblinear's C ABI, through
# which its solver="liblinear" separators are fitted.

from libc.stdint cimport int32_t, int64_t
from libcpp cimport bool as cbool
from libcpp.vector cimport vector
from libcpp.utility cimport pair

from sparse_rows cimport mt19937
from xmlkit._ext.fastxml_common cimport xk_slots
from xmlkit._ext.fastxml_solver cimport SeparatorSolver


# ---- liblinear's C ABI (linear.h of liblinear >= 2.44) -------------------

cdef struct ll_node:
    int index
    double value

cdef struct ll_problem:
    int l
    int n
    double* y
    ll_node** x
    double bias

cdef struct ll_parameter:
    int solver_type
    double eps
    double C
    int nr_weight
    int* weight_label
    double* weight
    double p
    double nu
    double* init_sol
    int regularize_bias
    cbool w_recalc

cdef struct ll_model:
    ll_parameter param
    int nr_class
    int nr_feature
    double* w
    int* label
    double bias
    double rho


cdef class NodeSeparator:
    cdef const int64_t[::1] xp            # the training features (CSR, without the bias)
    cdef const int32_t[::1] xi
    cdef const float[::1] xv
    cdef int64_t n_features               # feature columns (the bias feature is n_features)
    cdef double bias                      # value of the bias feature
    cdef double xmax                      # the largest |value| in X
    cdef double cost                      # cost of the loss against the L1 term
    cdef double eps                       # the solvers' relative stopping tolerance
    cdef bint use_liblinear               # separators by liblinear (else by `solver`)
    cdef SeparatorSolver solver           # xmlkit's separator solver and its node problem
    cdef vector[int32_t] fmap             # feature -> local column in the node, else -1
    cdef vector[int32_t] act_f            # the node's features (local column -> feature)
    cdef vector[int32_t] gbuf             # scratch of _gather: one entry per feature (+ bias), and one more
    cdef vector[int64_t] lcount           # per local column: the node's entries (for fill;
                                          # zero between nodes)
    cdef vector[double] wvec              # the node's weights by local column, bias last
    cdef vector[pair[int32_t, float]] wsel     # scratch: the non-zero weights by feature
    cdef vector[ll_node] xbuf             # liblinear: the node's rows
    cdef vector[ll_node*] xrows           # liblinear: start of each row in xbuf
    cdef vector[double] yvec              # liblinear: label of each point

    cdef void reset(self, const int64_t[::1] xp, const int32_t[::1] xi, const float[::1] xv,
                    int64_t n_features)
    cdef bint split(self, const int32_t* pts, int64_t n, int64_t n_pos,
                    vector[signed char]& sign, mt19937& rng, vector[int32_t]& w_idx,
                    vector[float]& w_val, xk_slots* root=*) except -1 nogil
    cdef int _fit(self, const int32_t* pts, int64_t n, int64_t nf, int64_t n_pos,
                  vector[signed char]& sign, mt19937& rng, xk_slots* root) except -1 nogil
    cdef int _fit_liblinear(self, const int32_t* pts, int64_t n, int64_t nf, int64_t n_pos,
                            vector[signed char]& sign, mt19937& rng) except -1 nogil
    cdef bint _route(self, const int32_t* pts, int64_t n, int64_t nf, const double* u,
                     vector[signed char]& sign, vector[int32_t]& w_idx,
                     vector[float]& w_val) except -1 nogil

