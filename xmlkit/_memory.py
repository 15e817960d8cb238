"""Giving freed memory back to the system.

give_back(): a file's parser grows its buffers as it reads, then copies
them into arrays of their exact size and frees them; the C library keeps
much of what was freed in the heap, resident, for allocations that may
never come. give_back() (after a file is read) returns the free pages at
once (glibc's malloc_trim): 3.5 MB of xml-predict's and 7 MB of
xml-train's peak memory on the 100k-point synthetic set, by hand.

map_large_blocks() (xml-train): blocks of 4 MiB and more are mapped on
their own, so that freeing one returns it at once. By default glibc raises
the size above which a block is mapped on its own to the largest block
freed so far (up to 32 MiB): afterwards the growers' node scratch, once
freed, stays resident in the heaps of the process and of each thread,
which raised xml-train's peak RSS. Not lower than 4 MiB: a block mapped
on its own is new memory each time, and the growers allocate a node's
scratch again at every tree (1 MiB, the earlier setting, cost 84k more
page faults and 0.1 s, 5%, of a 50-tree Bibtex run at -T 2; 4 MiB gave
no higher peak on the 100k-point set: 187 MB against 191, 4 trees at
-T 2, a run each).
(Not for prediction: there it slowed xml-predict, re-mapping the score
buffers, for no saving.)
one_heap() (xml-predict): every thread allocates from the one heap. By
default glibc gives threads heaps (arenas) of their own, and what a thread
frees stays in its heap, unused by the others: with -T 2 the routing
threads' blocks of scores raised xml-predict's peak by 3-4 MB on the
100k-point set (58 MB with one heap, 62 without; no change in time).

All are glibc's; elsewhere they do nothing.
"""
import ctypes
import os
import sys


def _libc(name):
    """The C library's function `name`, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), name)     # (glibc; musl lacks both)
    except (OSError, AttributeError):
        return None


_TRIM = _libc("malloc_trim")
M_MMAP_THRESHOLD = -3       # mallopt's parameters (malloc.h)
M_ARENA_MAX = -8


def give_back():
    """Return the free pages of the C heap to the system (see the module doc)."""
    if _TRIM is not None:
        _TRIM(ctypes.c_size_t(0))


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
    MemAvailable plus free swap, from /proc/meminfo), less where the
    process's address space is limited (RLIMIT_AS, as `ulimit -v` sets);
    None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f if ":" in line)
        kb = int(info["MemAvailable"].split()[0]) + int(info.get("SwapFree", "0 kB").split()[0])
    except (OSError, KeyError, ValueError, IndexError):
        return None
    have = kb * 1024
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
        raise XmlkitError(f"out of memory: {what} needs about {nbytes / 2**30:.1f} GiB, more "
                          f"than the "
                          f"{have / 2**30:.1f} GiB this machine has available{hint}")
