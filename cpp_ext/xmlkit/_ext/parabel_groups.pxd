# The inline part of xmlkit._ext.parabel_groups (parabel_groups.pyx beside
# this file): reading a weight's classifier index, as every Parabel kernel does.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t


cdef inline int64_t col_at(const void* cols, int col_bytes, int64_t e) noexcept nogil:
    """Classifier index e of a tree's e_col, of col_bytes (1, 2 or 4) bytes each."""
    if col_bytes == 1:
        return (<const uint8_t*> cols)[e]
    if col_bytes == 2:
        return (<const uint16_t*> cols)[e]
    return (<const int32_t*> cols)[e]
