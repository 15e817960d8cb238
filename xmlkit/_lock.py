"""Exclusive locks on open files, as each system offers them.

try_lock(fd): take the lock of the file that `fd` is open on, without
waiting; True when taken, False when another process holds it. The system
drops a lock when its holder closes the file or ends, however it ends.

- POSIX (Linux, macOS, the BSDs): flock() of the whole file.
- Windows: msvcrt.locking() of one byte at LOCK_OFFSET, past any content
  (Windows locks are mandatory: a locked byte cannot be read by others, and
  the file's content, its holder's pid, must stay readable).
- Elsewhere (neither module): no lock; every call takes it. BACKEND says
  which, "none" there.

The module is chosen at the first lock, not when xmlkit is imported.
"""
import os
from functools import lru_cache

#: where the Windows lock lies (locked ranges need not exist in the file)
LOCK_OFFSET = 1 << 30


@lru_cache(maxsize=None)
def _backend():
    """("flock", fcntl), ("msvcrt", msvcrt) or ("none", None)."""
    try:
        import fcntl
        return "flock", fcntl
    except ImportError:
        pass
    try:
        import msvcrt
        return "msvcrt", msvcrt
    except ImportError:
        return "none", None


def backend():
    """The name of the lock this system gives: flock, msvcrt or none."""
    return _backend()[0]


def try_lock(fd):
    """Take the exclusive lock of `fd`'s file without waiting (see the
    module doc): True when taken, False when another process holds it."""
    kind, mod = _backend()
    if kind == "flock":
        try:
            mod.flock(fd, mod.LOCK_EX | mod.LOCK_NB)
        except OSError:
            return False
        return True
    if kind == "msvcrt":
        here = os.lseek(fd, 0, os.SEEK_CUR)
        os.lseek(fd, LOCK_OFFSET, os.SEEK_SET)
        try:
            mod.locking(fd, mod.LK_NBLCK, 1)
        except OSError:
            return False
        finally:
            os.lseek(fd, here, os.SEEK_SET)
        return True
    return True


def unlock(fd):
    """Give back the lock try_lock took on `fd` (before the file is closed:
    Windows asks for it; POSIX would drop it on close anyway)."""
    kind, mod = _backend()
    if kind == "flock":
        mod.flock(fd, mod.LOCK_UN)
    elif kind == "msvcrt":
        os.lseek(fd, LOCK_OFFSET, os.SEEK_SET)
        try:
            mod.locking(fd, mod.LK_UNLCK, 1)
        finally:
            os.lseek(fd, 0, os.SEEK_SET)


def read_at(fd, n, offset):
    """Up to n bytes of `fd`'s file from `offset` (os.pread where the
    system has it)."""
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, n)


def write_at(fd, data, offset):
    """Write `data` into `fd`'s file at `offset` (os.pwrite where the
    system has it)."""
    if hasattr(os, "pwrite"):
        return os.pwrite(fd, data, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.write(fd, data)
