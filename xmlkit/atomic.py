"""Atomic outputs: write under a temporary name in the target folder, then rename.

A reader (or `make`) therefore never sees a half-written file: either the old
file, no file, or the complete new one. A symbolic link as the target is
followed (the file it names is replaced, beside it); a target that exists and
is not a regular file (a folder, a FIFO, a device) is refused. Errors of the
file system (no space, no permission, read-only) are reported as XmlkitError
naming the target, never the temporary file.
"""
import errno
import glob
import os
from contextlib import contextmanager
from pathlib import Path

from xmlkit._process import alive
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
    refused when it exists and is not a regular file (the null device
    excepted: output thrown away, as a timing run asks), or when its folder
    is missing or not writable (checked before any work is done)."""
    path = Path(path)
    if is_null_device(path):
        return Path(os.devnull)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file"
        raise XmlkitError(f"{path}: is {what}; give a file name to write")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise XmlkitError(f"{path}: cannot write: {folder} {what}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise XmlkitError(f"{path}: cannot write: no permission to write in {folder}")
    return path


def is_null_device(path):
    """Whether `path` names the null device (/dev/null; Windows: nul)."""
    try:
        return os.path.samefile(path, os.devnull)
    except (OSError, ValueError):
        return str(path).lower() == os.devnull.lower()


def _identity(path):
    """(device, inode) of the file `path` names (links followed), or None."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _files_of(path):
    """The identities of an input: a file's own, or every file directly in
    a folder (a model folder's manifest and arrays)."""
    if os.path.isdir(path):
        try:
            names = os.listdir(path)
        except OSError:
            return []
        return [i for i in (_identity(os.path.join(path, n)) for n in names) if i]
    i = _identity(path)
    return [i] if i else []


def refuse_overwrite(outputs, inputs, folder=None):
    """Raise XmlkitError, before a command reads or writes anything, when
    one of its output files would replace one of its inputs, or another of
    its outputs: the same file by device and inode (under another name,
    through a symbolic or hard link), or for outputs not there yet the same
    resolved path. `outputs` and `inputs`: (what, path) pairs, None and "-"
    (standard streams) skipped; an input that is a folder (a model folder)
    stands for every file in it. `folder`: (what, path) of an output folder
    (a model folder training writes into): an input inside it is refused."""
    inputs = [(w, p) for w, p in inputs if p is not None and str(p) != "-"]
    outputs = [(w, p) for w, p in outputs if p is not None and str(p) != "-"]
    held = [(w, p, set(_files_of(p))) for w, p in inputs] if outputs else []
    seen = {}
    for what, path in outputs:
        key = _identity(path) or os.path.realpath(path)
        if key in seen:
            raise XmlkitError(f"{path}: is both the {seen[key]} and the {what}: name two "
                              "different files")
        seen[key] = what
        for in_what, in_path, files in held:
            if key in files:
                same = "is" if os.path.isfile(in_path) else "is a file of"
                raise XmlkitError(f"{path}: {same} the {in_what} {in_path}; an output never "
                                  "writes over an input: choose another name")
    if folder is not None and folder[1] is not None:
        where = os.path.realpath(folder[1])
        for in_what, in_path in inputs:
            real = os.path.realpath(in_path)
            if real == where or real.startswith(where.rstrip(os.sep) + os.sep):
                raise XmlkitError(f"{in_path}: the {in_what} lies in {folder[1]}, the "
                                  f"{folder[0]} this command writes: move it out first")


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


def _host_name():
    """This host's name (socket.gethostname's, without importing socket
    where the system tells it)."""
    try:
        return os.uname().nodename
    except AttributeError:              # (Windows)
        import socket
        return socket.gethostname()


def _host_prefix(target):
    """The start of the temporary names of `target` written on this host."""
    return f".{target.name}.{_host_name().replace('.', '_')}."


def _new_temp(folder, prefix, suffix):
    """A new empty file folder/prefix<random>suffix, created here and only
    here (O_EXCL), readable and writable by its owner only: its path
    (tempfile.mkstemp's, without importing tempfile and random)."""
    for _ in range(100):
        path = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}{suffix}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_BINARY", 0), 0o600)
        except FileExistsError:
            continue
        os.close(fd)
        return path
    raise OSError(errno.EEXIST, "no free temporary name")


def _temp_prefix(target, pid=None):
    """The start of the temporary names of `target` written by process
    `pid` (default: this one) of this host."""
    return f"{_host_prefix(target)}{os.getpid() if pid is None else pid}."


def remove_dead_temps(target):
    """Remove the temporary files of `target` that processes of this host
    which no longer run left behind (killed with -9, say); the files of live
    writers and of other hosts stay."""
    mine = _host_prefix(target)
    for p in target.parent.glob(f"{glob.escape(mine)}*.tmp"):
        pid = p.name[len(mine):].split(".", 1)[0]
        if pid.isascii() and pid.isdigit() and not alive(int(pid)):
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
    if is_null_device(target):
        yield target                    # (nothing to replace: written straight away)
        return
    if remove_dead:
        remove_dead_temps(target)
    try:
        tmp = _new_temp(target.parent, _temp_prefix(target), ".tmp")
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
