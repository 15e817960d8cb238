# Shared declarations for CSR rows, cimported by the other extensions.
#
# Everything here is a type or an inline function (no module-level state), so a
# .pyx only needs `from sparse_rows cimport ...` with cpp_ext/ on the include path.

from libc.stdint cimport int32_t, int64_t

# CSR index pointers may be int32 or int64 (scipy picks by nnz).
ctypedef fused indptr_t:
    int32_t
    int64_t


cimport numpy as cnp
from libc.string cimport memcpy


cdef inline object array_copy(const void* src, cnp.npy_intp n, int typenum):
    """A new 1-d numpy array of n items of numpy type `typenum` (cnp.NPY_INT32,
    ...) copied from src. The calling module must have run cnp.import_array()."""
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(1, &n, typenum, 0)
    if n:
        memcpy(cnp.PyArray_DATA(out), src, n * cnp.PyArray_ITEMSIZE(out))
    return out
