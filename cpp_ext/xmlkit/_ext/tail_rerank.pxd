# The state of the kernel of xmlkit._ext.tail_rerank, whose code is tail_rerank.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t


cdef class TailKernel:
    cdef const int64_t[::1] mu_ptr       # labels using feature f: mu_ptr[f] .. mu_ptr[f + 1] - 1
    cdef const int32_t[::1] mu_labels    # label of each centroid entry
    cdef const float[::1] mu_values      # value of each centroid entry
    cdef const double[::1] mu_sqnorm     # ||mu_l||^2 of each label
    cdef int64_t n_features              # feature columns (row n_features of mu: the bias)
    cdef int64_t n_labels                # label columns
    cdef double bias                     # value of the bias feature
    cdef double gamma                    # sharpness of the tail classifiers
    cdef double alpha                    # weight of the tree scores
