"""A system without Linux's calls, for the tests of xmlkit's other paths.

Python imports this module at the start of every process whose PYTHONPATH
holds this folder (tests/test_portable.py runs test files so, and the
commands they start inherit it). In such a process:

- `import fcntl` fails, as on Windows (modules that imported it before, as
  subprocess does, keep it);
- `msvcrt` is a stand-in with Windows' locking() (non-blocking exclusive
  locks of byte ranges from the file's position, made of the real system's
  record locks), so that folder locks take their Windows path;
- the C library has no prctl (parent-death signal), malloc_trim or mallopt,
  as on macOS and Windows;
- os has no pread or pwrite, as on Windows.
"""
import ctypes
import os
import subprocess  # noqa: F401  (it needs fcntl: imported before fcntl is hidden)
import sys
import types

import fcntl as _fcntl

sys.modules["fcntl"] = None

msvcrt = types.ModuleType("msvcrt", "stand-in of Windows' msvcrt: locking() only")
msvcrt.LK_UNLCK, msvcrt.LK_LOCK, msvcrt.LK_NBLCK, msvcrt.LK_RLCK, msvcrt.LK_NBRLCK = range(5)


def _locking(fd, mode, nbytes):
    start = os.lseek(fd, 0, os.SEEK_CUR)
    if mode == msvcrt.LK_UNLCK:
        _fcntl.lockf(fd, _fcntl.LOCK_UN, nbytes, start, os.SEEK_SET)
    elif mode == msvcrt.LK_NBLCK:
        try:
            _fcntl.lockf(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB, nbytes, start, os.SEEK_SET)
        except OSError as exc:
            raise PermissionError(13, "Permission denied") from exc
    else:
        raise NotImplementedError(f"msvcrt.locking mode {mode} (not used by xmlkit)")


msvcrt.locking = _locking
sys.modules["msvcrt"] = msvcrt

HIDDEN = frozenset({"prctl", "malloc_trim", "mallopt"})


class _CDLL(ctypes.CDLL):
    def __getattr__(self, name):
        if name in HIDDEN:
            raise AttributeError(f"simulated: no {name}")
        return super().__getattr__(name)

    def __getitem__(self, name):
        if name in HIDDEN:
            raise AttributeError(f"simulated: no {name}")
        return super().__getitem__(name)


ctypes.CDLL = _CDLL
del os.pread, os.pwrite
