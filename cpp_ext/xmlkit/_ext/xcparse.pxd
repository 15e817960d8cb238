# The state of the kernel of xmlkit._ext.xcparse, whose code is xcparse.pyx beside
# this file (Cython reads a module's own .pxd from the folder of its dotted
# name, xmlkit/_ext/, under an include directory: cpp_ext; see setup.py).

from libc.stdint cimport int32_t, int64_t
from libcpp.vector cimport vector
from libcpp.utility cimport pair


cdef class RowParser:
    # the file's header
    cdef readonly bint with_labels          # single-file data set: each line starts with labels
    cdef readonly int64_t n_rows            # N
    cdef readonly int64_t n_cols            # D (data set) or C (matrix)
    cdef readonly int64_t n_labels          # L, or -1 for a matrix
    cdef readonly int index_base            # 0 or 1: subtracted from every index read
    # progress
    cdef readonly int64_t rows_done         # rows parsed so far
    cdef readonly int64_t line_no           # the file's line number of the next line
    # the rows collected since the start (or since restart())
    cdef vector[int64_t] x_indptr           # features: row r is x_indptr[r] .. x_indptr[r + 1] - 1
    cdef vector[int32_t] x_ind              # feature index of each entry, ascending per row
    cdef vector[float] x_val                # value of each entry
    cdef vector[int64_t] y_indptr           # labels: row r is y_indptr[r] .. y_indptr[r + 1] - 1
    cdef vector[int32_t] y_ind              # label of each entry, ascending per row
    cdef vector[pair[int32_t, float]] tmp   # scratch: a row's entries when they come unsorted
    cdef vector[int32_t] tmp_lab            # scratch: a row's labels when they come unsorted
    # the first error (then parsing stops): what, where, which token
    cdef readonly int err                   # error code (E_OK when none; see ERROR_NAMES)
    cdef int64_t err_line                   # its line number
    cdef int64_t err_tok_start              # the offending token: address of its first byte
    cdef int64_t err_tok_stop               # ... and of the byte after it
    cdef readonly int64_t err_value         # the offending value (an index), if any

    cdef int64_t _feed(self, const unsigned char* start, const unsigned char* end,
                       bint final) except * nogil
    cdef inline int _fail(self, int code, const unsigned char* tok, const unsigned char* tok_end_,
                   int64_t value) noexcept nogil
    cdef int _parse_line(self, const unsigned char* p, const unsigned char* e) except -1 nogil
