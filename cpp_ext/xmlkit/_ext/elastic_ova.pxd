# The state of the kernel of xmlkit._ext.elastic_ova, whose code is elastic_ova.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair

ctypedef pair[int32_t, double] Entry     # (label, weight) of a sparse weight row


cdef class ElasticOVA:
    # settings
    cdef int64_t D                           # features (rows of W)
    cdef int64_t L                           # labels (columns of W)
    cdef double l1, l2                       # elastic net: l1 |w| + (l2 / 2) w^2
    cdef double eta0                         # base learning rate
    cdef double decay                        # eta_t = eta0 / (1 + decay t) (without AdaGrad)
    cdef int loss                            # LOSS_SQUARED, LOSS_LOGISTIC or LOSS_HINGE (squared hinge)
    cdef bint lazy                           # lazy proximal steps on sparse rows (else plain, dense W)
    cdef bint adagrad                        # per-feature AdaGrad rates
    # AdaGrad
    cdef vector[double] G                    # per feature: accumulated squared gradients
    cdef vector[double] rate                 # per feature: its current rate eta_i
    cdef vector[double] Gb                   # per label: the bias's accumulated squared gradients
    cdef vector[int64_t] psi                 # per feature: the first step its row owes (AdaGrad)
    # the weights
    cdef vector[vector[Entry]] rows          # lazy: row i sparse, labels ascending
    cdef vector[vector[double]] drows        # lazy: row i stored dense (else empty)
    cdef vector[double] dense                # plain: D x L
    cdef vector[double] bias                 # per label: the unregularised bias
    # lazy catch-up: |w| <- Phi(t) (|w| / Phi(psi) - l1 (beta(t) - beta(psi)))^+
    cdef double phi                          # Phi(t)
    cdef double beta                         # beta(t)
    cdef vector[double] snap_phi             # per feature: Phi when its row was last current
    cdef vector[double] snap_beta            # per feature: beta when its row was last current
    cdef int64_t t                           # examples seen
    # work space of one example
    cdef vector[double] s                    # per label: score
    cdef vector[double] r                    # per label: residual of the loss
    cdef vector[Entry] scratch               # a sparse row being rebuilt
    cdef vector[int32_t] nz                  # the labels with a non-zero residual, ascending

    cdef int _catch_up(self, int64_t i, double x=*) except -1 nogil
    cdef int _step(self, const int64_t* xp, const int32_t* xi, const float* xv,
                   const int64_t* yp, const int32_t* yi, int64_t e) except -1 nogil
    cdef int _merge_step(self, vector[Entry]* row, double ex) except -1 nogil
    cdef int _dense_row_step(self, int64_t i, double ex) except -1 nogil
    cdef int _to_sparse(self, int64_t i) except -1 nogil
    cdef int _to_dense(self, int64_t i) except -1 nogil
    cdef int _rebase(self) except -1 nogil
