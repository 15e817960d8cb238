"""Giving freed memory back to the system.

give_back(): after a file is read, return at once the pages that the
parser's growing buffers freed (glibc's malloc_trim); the C library would
keep them resident for allocations that may never come. Likewise once a
Parabel tree's small per-node pieces are joined into its arrays.

map_large_blocks() (xml-train): blocks of 4 MiB and more are mapped on
their own, so that freeing one returns it at once: glibc's threshold
otherwise rises to the largest block freed, and the growers' freed node
scratch stays resident in every thread's heap. Not lower: the growers
allocate a node's scratch anew at every tree, and blocks mapped on their
own cost a page fault per page each time. (Not for prediction: it would
re-map the score buffers, for no saving.)

one_heap() (xml-predict): every thread allocates from the one heap, so that
what one routing thread frees serves the others.

All are glibc's (Linux); elsewhere, and where they cannot be found (musl),
they do nothing: memory is then given back on the C library's own terms,
and only peak memory differs (their effect is in scripts/results/scale.md
and predict_scaling.md). The C library is looked up at the first call,
not when xmlkit is imported.
"""
import os
import sys
from functools import lru_cache

M_MMAP_THRESHOLD = -3       # mallopt's parameters (malloc.h)
M_ARENA_MAX = -8


@lru_cache(maxsize=None)
def _libc(name):
    """glibc's function `name`, or None (another system or C library)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        return getattr(ctypes.CDLL(None), name)     # (glibc; musl lacks both)
    except (OSError, AttributeError, ImportError):
        return None


def give_back():
    """Return the free pages of the C heap to the system (see the module doc)."""
    trim = _libc("malloc_trim")
    if trim is not None:
        import ctypes
        trim(ctypes.c_size_t(0))


def map_large_blocks():
    """Blocks of 4 MiB and more mapped on their own (see the module doc)."""
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, 1 << 22)


def one_heap():
    """Every thread allocates from one heap (see the module doc); before
    any thread is started."""
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(M_ARENA_MAX, 1)


def available_bytes():
    """Memory this process can still get: what the machine can give (Linux:
    MemAvailable plus free swap, from /proc/meminfo; elsewhere the free
    pages, where sysconf tells them), less where the process's address space
    is limited (RLIMIT_AS, as `ulimit -v` sets); None where it cannot be
    read."""
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f if ":" in line)
        kb = int(info["MemAvailable"].split()[0]) + int(info.get("SwapFree", "0 kB").split()[0])
        have = kb * 1024
    except (OSError, KeyError, ValueError, IndexError):
        try:
            have = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        import resource
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            have = min(have, max(0, limit - used))
    except (ImportError, OSError, ValueError, IndexError):
        pass
    return have


#: needs below this are not checked (a prediction of one row asks: reading
#: /proc/meminfo would cost it tens of microseconds)
CHECKED_BYTES = 256 << 20


def require_memory(nbytes, what, hint=""):
    """Raise XmlkitError (exit 2) when `what` needs more than the memory
    available (available_bytes): refused before it is allocated, rather
    than the process being killed for memory half-way."""
    if nbytes < CHECKED_BYTES:
        return
    have = available_bytes()
    if have is not None and nbytes > have:
        from xmlkit.errors import XmlkitError
        raise XmlkitError(f"out of memory: {what} needs about {_size(nbytes)}, more than the "
                          f"{_size(have)} this process can still get{hint}")


def _size(nbytes):
    """nbytes in GiB to one decimal, or in MiB below 1 GiB (not "0.0 GiB")."""
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"


#: what a BLAS library takes when it starts, per thread and one more (scipy
#: .linalg loads an OpenBLAS of its own, whose start asks for a buffer of
#: about 32 MiB a thread and, refused, asks again for ever)
BLAS_START_BYTES = 64 << 20


def require_blas_start(what):
    """Raise XmlkitError (exit 2) when scipy.linalg, not yet imported,
    would start its BLAS without the memory that needs (a start refused
    memory never returns); `what`: what needs it."""
    import sys
    if "scipy.linalg" in sys.modules:
        return
    try:
        threads = int(os.environ.get("OPENBLAS_NUM_THREADS") or os.cpu_count() or 1)
    except ValueError:
        threads = os.cpu_count() or 1
    need = BLAS_START_BYTES * (max(1, threads) + 1)
    have = available_bytes()
    if have is not None and need > have:
        from xmlkit.errors import XmlkitError
        raise XmlkitError(f"out of memory: {what} starts the BLAS of scipy.linalg, which needs "
                          f"about {need / 2**20:.0f} MiB, more than the {have / 2**20:.0f} MiB "
                          "this process can still get (raise the memory limit, or give the "
                          "BLAS fewer threads: OPENBLAS_NUM_THREADS)")
