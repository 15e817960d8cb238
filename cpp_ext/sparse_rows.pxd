# Shared declarations for CSR rows, cimported by the other extensions.
#
# Everything here is a type or an inline function (no module-level state), so a
# .pyx only needs `from sparse_rows cimport ...` with cpp_ext/ on the include path.

from libc.stdint cimport int32_t, int64_t

# CSR index pointers may be int32 or int64 (scipy picks by nnz).
ctypedef fused indptr_t:
    int32_t
    int64_t
