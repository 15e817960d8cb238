"""Atomic outputs: write under a temporary name in the target folder, then rename.

A reader (or `make`) therefore never sees a half-written file: either the old
file, no file, or the complete new one.
"""
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path):
    """Yield a temporary path next to `path`; on success it replaces `path`.

    On any exception the temporary file is removed and `path` is untouched.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
