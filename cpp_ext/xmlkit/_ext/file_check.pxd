# The state of xmlkit._ext.file_check's BlockFile (checks of a mapped model
# file, block by block as its bytes are first used), whose code is
# file_check.pyx beside this file; forest_predict cimports blocks_need.

from libc.stdint cimport int64_t, uint8_t, uint64_t
from libcpp.vector cimport vector


cdef struct Region:
    int64_t start, end        # byte offsets of an array's data in the file
    int kind                  # K_RAW, K_POINTERS, K_INDICES, K_FINITE, K_CHILDREN
    int itemsize              # 4 or 8 (K_CHILDREN: 8, a node's two int32)
    int64_t bound             # K_POINTERS: values in [0, bound]; K_INDICES: in
                              # [0, bound); K_CHILDREN: the node count


cdef struct Blocks:
    const uint8_t* base       # the file's bytes (a read-only mapping)
    int64_t covered           # bytes 0 .. covered - 1 are checked by blocks
    int64_t block             # bytes per block (the last one may be shorter)
    const uint64_t* table     # XXH64 of each block, as written
    int64_t n_blocks
    uint8_t* done             # per block: 1 once its digest and elements passed
    const Region* regions     # the arrays whose elements are checked, by start
    int n_regions
    int64_t failed            # 1 + the first block that failed, or 0


cdef class BlockFile:
    cdef Blocks b
    cdef vector[uint8_t] done_v
    cdef vector[Region] regions_v
    cdef object keep          # the buffers b points into


cdef bint blocks_need(Blocks* b, int64_t lo, int64_t hi) noexcept nogil
cdef uint64_t xxh64_bytes(const uint8_t* p, size_t n, uint64_t seed) noexcept nogil
