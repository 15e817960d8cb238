"""Atomic outputs: write under a temporary name in the target folder, then rename.

A reader (or `make`) therefore never sees a half-written file: either the old
file, no file, or the complete new one. A symbolic link as the target is
followed (the file it names is replaced, beside it); a target that exists and
is not a regular file (a folder, a FIFO, a device) is refused. Errors of the
file system (no space, no permission, read-only) are reported as XmlkitError
naming the target, never the temporary file.
"""
import glob
import os
from contextlib import contextmanager
from pathlib import Path

from xmlkit.errors import XmlkitError


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


def output_target(path):
    """The file an output named `path` replaces: a symbolic link's target;
    refused when it exists and is not a regular file, or when its folder is
    missing or not writable (checked before any work is done)."""
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file"
        raise XmlkitError(f"{path}: is {what}; give a file name to write")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise XmlkitError(f"{path}: cannot write: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise XmlkitError(f"{path}: cannot write: no permission to write in {folder}")
    return path


def writable_folder(path):
    """Check that model folder `path` exists as a writable folder or can be
    created (its nearest existing ancestor is a writable folder)."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise XmlkitError(f"{path}: exists and is not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise XmlkitError(f"{path}: cannot write: no permission to write in it")
        return path
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        raise XmlkitError(f"{path}: cannot create the folder: no permission to write in "
                          f"{ancestor}")
    return path


def _host_prefix(target):
    """The start of the temporary names of `target` written on this host."""
    import socket           # (imported when a file is written: commands start sooner)
    return f".{target.name}.{socket.gethostname().replace('.', '_')}."


def _temp_prefix(target, pid=None):
    """The start of the temporary names of `target` written by process
    `pid` (default: this one) of this host."""
    return f"{_host_prefix(target)}{os.getpid() if pid is None else pid}."


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def remove_dead_temps(target):
    """Remove the temporary files of `target` that processes of this host
    which no longer run left behind (killed with -9, say); the files of live
    writers and of other hosts stay."""
    mine = _host_prefix(target)
    for p in target.parent.glob(f"{glob.escape(mine)}*.tmp"):
        pid = p.name[len(mine):].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                p.unlink()
            except OSError:
                pass


@contextmanager
def atomic_path(path, remove_dead=True):
    """Yield a temporary path next to `path` (see output_target); on success
    it replaces `path`. With `remove_dead`, temporary files of `path` that
    killed runs left are removed first (see remove_dead_temps; model folders
    have their own cleaning, store.remove_stale_temps under the folder's
    lock, which spares a scan of the folder per file written).

    On any exception the temporary file is removed and `path` is untouched.
    """
    target = output_target(path)
    if remove_dead:
        remove_dead_temps(target)
    try:
        import tempfile
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=".tmp",
                                   dir=target.parent)
        os.close(fd)
    except OSError as exc:
        raise XmlkitError(f"{path}: cannot write ({exc.strerror})") from None
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        _fsync(tmp)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.errno is not None and \
                exc.filename in (tmp, str(tmp), None):
            raise XmlkitError(f"{path}: cannot write ({exc.strerror})") from None
        raise
