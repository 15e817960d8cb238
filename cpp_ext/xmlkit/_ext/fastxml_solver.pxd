# The state of xmlkit._ext.fastxml_solver.SeparatorSolver, whose code is
# fastxml_solver.pyx beside this file (Cython reads a module's own .pxd from
# the folder of its dotted name, xmlkit/_ext/, under an include directory:
# cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t, uint64_t
from libcpp.vector cimport vector

from sparse_rows cimport mt19937
from xmlkit._ext.fastxml_common cimport xk_slots


cdef struct xk_col:
    # fill's state of one column: where its next entry goes, the sums of
    # its loss gradient and Hessian diagonal at w = 0 (one cache line holds
    # two columns: the pass over the points touches one line per entry)
    int64_t pos
    double g
    double h
    double pad


cdef class SeparatorSolver:
    # -- the problem
    cdef int64_t n                        # number of points
    cdef int64_t nf                       # number of columns (features)
    cdef vector[int64_t] col_ptr          # column j: entries col_ptr[j]..col_ptr[j+1]-1
    cdef vector[int32_t] col_pt           # point (0..n-1) of each entry, ascending per column
    cdef vector[float] col_val            # value of each entry
    cdef const int64_t* cptr              # the columns solved: col_ptr, col_pt, col_val's
    cdef const int32_t* cpt               # data, or a root's shared copy (borrow)
    cdef const float* cval
    cdef vector[signed char] y            # label of each point, +1 or -1
    cdef vector[double] cw                # cost C_a of each point's loss
    # -- stopping rules
    cdef int max_newton                   # Newton iterations at most
    cdef int max_newton_small             # ... on problems of fewer than small_node points
    cdef int64_t small_node               # (0: every problem takes max_newton at most)
    cdef int max_inner                    # coordinate-descent passes per Newton step at most
    cdef int max_halvings                 # line-search halvings at most
    cdef double eps                       # relative tolerance on the subgradient's L1 norm
    cdef bint warm                        # start from the scaled proximal-gradient step
                                          # (else from w = 0, as the C++ tool)
    # -- solution and per-point state
    cdef vector[double] w                 # weights (the solution after solve())
    cdef vector[double] u                 # margins w.x_a
    cdef vector[double] r                 # dLoss/du_a at w
    cdef vector[double] D                 # d2Loss/du_a2 at w (the Hessian's point weights)
    cdef vector[double] lossv             # loss term of each point at w
    cdef vector[double] tq                # line-search trial: sigmoid per point
    cdef vector[double] tsp               # line-search trial: softplus per point
    # -- work space of one Newton step
    cdef vector[double] wpd               # w + d, the trial point
    cdef vector[double] xTd               # d.x_a for each point
    cdef vector[double] grad              # gradient of the loss at w
    cdef vector[double] grad0             # gradient of the loss at w = 0 (filled by fill)
    cdef vector[double] hdiag0            # Hessian diagonal of the loss at w = 0 (filled by fill)
    cdef vector[xk_col] acc               # fill's per-column positions and sums
    cdef vector[double] hdiag             # Hessian diagonal (+ nu) at w
    cdef vector[int32_t] index            # columns: [0, active) outer-active, [0, qp) inner-active
    cdef public int last_newton           # Newton iterations of the last solve
    cdef public int last_inner            # coordinate-descent passes of the last solve
    cdef public int64_t visits            # entries of the problem visited (gradient,
                                          # Hessian, coordinate passes), summed over solves
    cdef public int64_t newtons           # Newton iterations, summed over solves
    cdef public int64_t solves            # solves since the counters were zeroed

    cdef int borrow(self, xk_slots* root, int64_t n, const signed char* sign, double cpos,
                    double cneg) except -1 nogil
    cdef void lend(self, xk_slots* root) noexcept nogil
    cdef int _labels(self, int64_t n, int64_t ncol, const signed char* sign, double cpos,
                     double cneg) except -1 nogil
    cdef int let_go(self) except -1 nogil
    cdef int fill(self, const int32_t* pts, int64_t n, const int64_t* xp, const int32_t* xi,
                  const float* xv, const int32_t* fmap, int64_t* lcount, int64_t nf,
                  double bias, bint with_bias, const signed char* sign,
                  double cpos, double cneg) except -1 nogil
    cdef void _point_terms(self, bint trial) noexcept nogil
    cdef double _warm_start(self) noexcept nogil
    cdef int solve(self, mt19937& rng) except -1 nogil
    cdef int _start(self) except -1 nogil
    cdef int64_t _gradient(self, bint at_zero, double gmax_old, double* gmax,
                           double* gnorm) noexcept nogil
    cdef int _direction(self, int64_t active, double stop, uint64_t* xs) noexcept nogil
    cdef bint _line_search(self, int64_t active, double* w_norm) noexcept nogil

