# Checks of model files that are used in place (memory-mapped, see
# xmlkit.arrayfile), block by block, without the GIL.
#
# A mapped file holds, as its last array, the XXH64 digest of each BLOCK
# bytes of everything before that array (its table), and its record in the
# manifest is the digest of the rest (the table and the archive's
# directory). A block is checked the first time a reader needs its bytes:
# its digest against the table, then the elements of the arrays that lie
# in it (while it is in the cache) against what a kernel needs to trust
# them: index pointers within their entries, indices in range, finite
# values, child links to later nodes. Each check looks at one element, so
# a block is checked on its own: a kernel that reads a few nodes of a large
# tree checks a few blocks, and a reader of everything checks every block
# once. The kernels are written so that these element checks are all they
# need (a row whose pointers decrease is read as empty).
#
# XXH64 is Yann Collet's 64-bit hash, written here from its specification
# (xxhash.com, doc/xxhash_spec.md): a fast digest to catch damaged,
# truncated or replaced files; the checks, not the digest, are what keep a
# crafted file from crashing a kernel.

from libc.math cimport isfinite
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libcpp.vector cimport vector

cdef extern from "xk_portable.h":
    # a block's flag, read and set by several threads (set once, to 1)
    uint8_t xk_flag_get(const uint8_t* p) nogil
    void xk_flag_set(uint8_t* p) nogil

cdef extern from "xk_nomem.h":
    void xk_exit_on_no_memory(const char* line, size_t n) nogil

cdef extern from "xk_mapfault.h":
    void xk_exit_on_map_fault(const char* prefix, size_t n) nogil
    void xk_mapped_folder(const char* folder, size_t n) nogil

#: bytes per block of a mapped file's table
BLOCK = 1 << 16


def exit_on_map_fault(str prefix):
    """From now on, a mapped file cut short under its mapping (SIGBUS) ends
    the process with exit code 2 and one line on stderr: `prefix`, the
    folder mapped_folder last named, what happened (xk_mapfault.h). For a
    command-line tool; a no-op on Windows."""
    b = prefix.encode("utf-8", "replace")
    xk_exit_on_map_fault(b, len(b))


def exit_on_no_memory(str line):
    """From now on, an allocation the system refuses inside a kernel ends
    the process with exit code 2 and `line` (its newline included) on
    stderr, there and then (xk_nomem.h): a kernel function that cannot
    raise would otherwise report the error as ignored and go on. For a
    command-line tool; a later call replaces the line."""
    b = line.encode("utf-8", "replace")
    xk_exit_on_no_memory(b, len(b))


def mapped_folder(str folder):
    """The folder the line of exit_on_map_fault names: that of the files
    being mapped."""
    b = folder.encode("utf-8", "replace")
    xk_mapped_folder(b, len(b))

cdef uint64_t P1 = 11400714785074694791ULL
cdef uint64_t P2 = 14029467366897019727ULL
cdef uint64_t P3 = 1609587929392839161ULL
cdef uint64_t P4 = 9650029242287828579ULL
cdef uint64_t P5 = 2870177450012600261ULL

cdef enum Kind:               # what a region's elements are checked for
    K_RAW = 0                 # nothing (hashed only)
    K_POINTERS = 1            # int64 index pointers in [0, bound]
    K_INDICES = 2             # int32 in [0, bound)
    K_FINITE = 3              # float32 or float64, finite
    K_CHILDREN = 4            # int32 pairs: -1 -1, or two nodes after this one, < bound

RAW, POINTERS, INDICES, FINITE, CHILDREN = K_RAW, K_POINTERS, K_INDICES, K_FINITE, K_CHILDREN


cdef inline uint64_t _rotl(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))


cdef inline uint64_t _read64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)        # (x86 and ARM are little-endian, as the hash reads)
    return v


cdef inline uint32_t _read32(const uint8_t* p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return v


cdef inline uint64_t _round(uint64_t acc, uint64_t lane) noexcept nogil:
    acc = acc + lane * P2
    acc = _rotl(acc, 31)
    return acc * P1


cdef inline uint64_t _merge(uint64_t acc, uint64_t v) noexcept nogil:
    acc = acc ^ _round(0, v)
    return acc * P1 + P4


cdef struct Xxh64:
    uint64_t v1, v2, v3, v4       # the four lanes
    uint64_t seed
    uint64_t total                # bytes hashed so far (whole stripes)


cdef inline void _xxh_start(Xxh64& s, uint64_t seed) noexcept nogil:
    s.v1 = seed + P1 + P2
    s.v2 = seed + P2
    s.v3 = seed
    s.v4 = seed - P1
    s.seed = seed
    s.total = 0


cdef inline void _xxh_stripes(Xxh64& s, const uint8_t* p, size_t n) noexcept nogil:
    """Hash the n // 32 whole stripes at p (n a multiple of 32 but at the end)."""
    cdef size_t i
    for i in range(0, n - n % 32, 32):
        s.v1 = _round(s.v1, _read64(p + i))
        s.v2 = _round(s.v2, _read64(p + i + 8))
        s.v3 = _round(s.v3, _read64(p + i + 16))
        s.v4 = _round(s.v4, _read64(p + i + 24))
    s.total += n - n % 32


cdef uint64_t _xxh_finish(Xxh64& s, const uint8_t* tail, size_t n) noexcept nogil:
    """The digest once every whole stripe is hashed; tail: the last n < 32 bytes."""
    cdef uint64_t h, length = s.total + n
    cdef size_t i = 0
    if s.total:
        h = _rotl(s.v1, 1) + _rotl(s.v2, 7) + _rotl(s.v3, 12) + _rotl(s.v4, 18)
        h = _merge(h, s.v1)
        h = _merge(h, s.v2)
        h = _merge(h, s.v3)
        h = _merge(h, s.v4)
    else:
        h = s.seed + P5
    h += length
    while i + 8 <= n:
        h = h ^ _round(0, _read64(tail + i))
        h = _rotl(h, 27) * P1 + P4
        i += 8
    if i + 4 <= n:
        h = h ^ (<uint64_t> _read32(tail + i) * P1)
        h = _rotl(h, 23) * P2 + P3
        i += 4
    while i < n:
        h = h ^ (<uint64_t> tail[i] * P5)
        h = _rotl(h, 11) * P1
        i += 1
    h = h ^ (h >> 33)
    h = h * P2
    h = h ^ (h >> 29)
    h = h * P3
    return h ^ (h >> 32)


cdef uint64_t xxh64_bytes(const uint8_t* p, size_t n, uint64_t seed) noexcept nogil:
    cdef Xxh64 s
    _xxh_start(s, seed)
    if n >= 32:
        _xxh_stripes(s, p, n - n % 32)
    return _xxh_finish(s, p + (n - n % 32), n % 32)


def xxh64(data, uint64_t seed=0):
    """The XXH64 digest of a bytes-like object, as 16 lower-case hex digits."""
    cdef const uint8_t[::1] b = memoryview(data).cast("B")
    cdef uint64_t h
    cdef size_t n = b.shape[0]
    with nogil:
        h = xxh64_bytes(&b[0] if n else <const uint8_t*> b"", n, seed)
    return f"{h:016x}"


cdef int _check_elements(const uint8_t* base, const Region* r, int64_t lo,
                         int64_t hi) noexcept nogil:
    """Check the elements of region r lying in bytes lo..hi-1 (whole
    elements); 0 if they pass, else 1. (The loops flag what fails instead
    of branching on each element, so that the compiler vectorises them.)"""
    cdef int64_t j, k, a, c
    cdef int64_t n_elem = (hi - lo) // r.itemsize
    cdef int64_t j0 = (lo - r.start) // r.itemsize
    cdef const int64_t* p64
    cdef const int32_t* p32
    cdef const uint32_t* u32
    cdef const uint64_t* u64
    cdef uint64_t bound = <uint64_t> r.bound
    cdef int bad = 0
    if r.kind == K_POINTERS:
        u64 = <const uint64_t*> (base + lo)     # (a negative pointer is a huge unsigned one)
        for k in range(n_elem):
            bad |= u64[k] > bound
    elif r.kind == K_INDICES:
        u32 = <const uint32_t*> (base + lo)
        for k in range(n_elem):
            bad |= <uint64_t> u32[k] >= bound
    elif r.kind == K_FINITE:
        # finite: the exponent bits are not all ones
        if r.itemsize == 4:
            u32 = <const uint32_t*> (base + lo)
            for k in range(n_elem):
                bad |= (u32[k] & 0x7F800000u) == 0x7F800000u
        else:
            u64 = <const uint64_t*> (base + lo)
            for k in range(n_elem):
                bad |= (u64[k] & 0x7FF0000000000000ULL) == 0x7FF0000000000000ULL
    elif r.kind == K_CHILDREN:
        p32 = <const int32_t*> (base + lo)
        for k in range(n_elem):
            j = j0 + k              # the node
            a = p32[2 * k]
            c = p32[2 * k + 1]
            bad |= not ((a == -1 and c == -1) or (j < a < r.bound and j < c < r.bound))
    return bad


cdef int _check_block(Blocks* b, int64_t k) noexcept nogil:
    """Check block k: its digest, then the elements of the regions in it;
    0 if it passes."""
    cdef int64_t lo = k * b.block, hi = min(b.covered, lo + b.block)
    cdef int i
    cdef const Region* r
    if xxh64_bytes(b.base + lo, <size_t> (hi - lo), 0) != b.table[k]:
        return 1
    for i in range(b.n_regions):
        r = &b.regions[i]
        if r.kind == K_RAW or r.end <= lo or r.start >= hi:
            continue
        # (regions start at a multiple of their item size, blocks at one of
        # 8 bytes: no element straddles two blocks)
        if _check_elements(b.base, r, max(lo, r.start), min(hi, r.end)):
            return 1
    return 0


cdef bint blocks_need(Blocks* b, int64_t lo, int64_t hi) noexcept nogil:
    """Make sure bytes lo..hi-1 of the file are checked (each block once,
    by whichever thread needs it first; two threads may both check a block:
    they agree). False once a block failed (b.failed names it)."""
    cdef int64_t k
    if b.failed:
        return False
    if hi <= lo:
        return True
    for k in range(lo // b.block, min(b.n_blocks, (hi - 1) // b.block + 1)):
        if not xk_flag_get(&b.done[k]):
            if _check_block(b, k):
                b.failed = k + 1
                return False
            xk_flag_set(&b.done[k])
    return True


cdef class BlockFile:
    """The checks of one mapped file, block by block (see the module doc);
    shared by the threads that read it. Members: see file_check.pxd."""

    def __init__(self, data, table, int64_t covered, int64_t block, regions):
        """data: the file's bytes (a buffer: its mapping); table: its uint64
        block digests; bytes 0..covered-1 are in blocks of `block`;
        regions: (start, end, kind, itemsize, bound) of each array whose
        elements are checked (see Region)."""
        cdef const uint8_t[::1] d = memoryview(data).cast("B")
        cdef const uint64_t[::1] t = table
        cdef Region r
        n = (covered + block - 1) // block
        if not (0 <= covered <= d.shape[0] and block > 0 and block % 8 == 0
                and t.shape[0] == n):
            raise ValueError("the block table does not cover the file")
        for start, end, kind, itemsize, bound in sorted(regions):
            r.start, r.end, r.kind, r.itemsize, r.bound = start, end, kind, itemsize, bound
            if not (0 <= r.start <= r.end <= covered and r.itemsize in (4, 8)
                    and r.start % r.itemsize == 0 and (r.end - r.start) % r.itemsize == 0
                    and K_RAW <= r.kind <= K_CHILDREN):
                raise ValueError("a region outside the checked bytes, or unaligned")
            self.regions_v.push_back(r)
        self.done_v.resize(n + 1)
        self.keep = (data, table, d, t)
        self.b.base = &d[0]
        self.b.covered = covered
        self.b.block = block
        self.b.table = &t[0] if n else NULL
        self.b.n_blocks = n
        self.b.done = self.done_v.data()
        self.b.regions = self.regions_v.data()
        self.b.n_regions = <int> self.regions_v.size()
        self.b.failed = 0

    def need(self, int64_t lo, int64_t hi):
        """Check bytes lo..hi-1 (the blocks not checked yet); False if a
        block fails."""
        cdef bint ok
        with nogil:
            ok = blocks_need(&self.b, lo, hi)
        return ok

    def check_all(self):
        """Check every block not checked yet; False if one fails."""
        return self.need(0, self.b.covered)

    @property
    def failed_block(self):
        """The first block that failed, or None."""
        return self.b.failed - 1 if self.b.failed else None

    @property
    def checked(self):
        """How many blocks are checked."""
        cdef int64_t k, n = 0
        for k in range(self.b.n_blocks):
            n += self.b.done[k]
        return n


def block_digests(data, int64_t covered, int64_t block):
    """The table of a mapped file: XXH64 of each `block` bytes of data's
    first `covered` bytes (uint64 array)."""
    import numpy as np
    cdef const uint8_t[::1] d = memoryview(data).cast("B")
    if not 0 <= covered <= d.shape[0] or block <= 0:
        raise ValueError("covered bytes outside the data")
    n = (covered + block - 1) // block
    out = np.empty(n, np.uint64)
    cdef uint64_t[::1] o = out
    cdef int64_t k
    with nogil:
        for k in range(n):
            o[k] = xxh64_bytes(&d[0] + k * block, <size_t> (min(covered, (k + 1) * block)
                                                            - k * block), 0)
    return out
