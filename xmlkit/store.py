"""Model folders: a versioned JSON manifest plus arrays in .npz files.

    <model>/manifest.json    format, format_version, xmlkit_version, algorithm,
                             params, n_features, n_labels, seed, and `files`:
                             name -> {"size", "sha256"} of every array file
                             that belongs to the model
    <model>/<name>.npz       arrays (e.g. one file per tree)

Every file is written atomically (temporary name, then rename), so a folder
never holds a half-written file; nothing is pickled. An array file is part
of the model once its record is in the manifest (record_files, after the
file is complete); loading checks size and SHA-256 of each file it reads
against its record, so a damaged, replaced or deleted file is refused.
Format version 1 folders (no `files`) still load, without that check.
Loading a folder of another format version fails with a clear message.
"""
import fcntl
import io
import json
import os
import zipfile
import zlib
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from xmlkit._version import __version__
from xmlkit.atomic import atomic_path
from xmlkit.errors import XmlkitError

try:        # Python's own SHA-256: loading OpenSSL's (hashlib) costs every
    from _sha2 import sha256            # process ~3.5 MB of memory, for files
except ImportError:                     # hashed at ~360 MB/s instead of ~2 GB/s
    try:
        from _sha256 import sha256      # (Python < 3.12)
    except ImportError:
        from hashlib import sha256

FORMAT = "xmlkit-model"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)     # version 1: no file records
MANIFEST = "manifest.json"
LOCK = ".lock"
_HELD = set()          # folders this process holds the lock of


def make_manifest(algorithm, params, n_features, n_labels, seed, predict_params=None):
    """A new manifest; `predict_params`: the predict parameters recorded at
    training (families that have any)."""
    m = {"format": FORMAT, "format_version": FORMAT_VERSION, "xmlkit_version": __version__,
         "algorithm": algorithm, "params": params, "n_features": int(n_features),
         "n_labels": int(n_labels), "seed": int(seed), "files": {}}
    if predict_params:
        m["predict_params"] = predict_params
    return m


def write_manifest(folder, manifest):
    with atomic_path(Path(folder) / MANIFEST, remove_dead=False) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def is_model_folder(folder):
    return (Path(folder) / MANIFEST).is_file()


def read_manifest(folder):
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise XmlkitError(f"{folder}: no such model folder")
    if not path.is_file():
        raise XmlkitError(f"{folder}: not an xmlkit model folder (no {MANIFEST})")
    try:
        m = json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        raise XmlkitError(f"{path}: unreadable manifest ({exc})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise XmlkitError(f"{path}: not an xmlkit model manifest")
    if m.get("format_version") not in READABLE_VERSIONS:
        raise XmlkitError(
            f"{folder}: model format version {m.get('format_version')} (written by xmlkit "
            f"{m.get('xmlkit_version', '?')}) cannot be read by xmlkit {__version__}, which "
            f"reads versions {', '.join(map(str, READABLE_VERSIONS))}; retrain the model "
            "with this version")
    for key in ("algorithm", "params", "n_features", "n_labels", "seed"):
        if key not in m:
            raise XmlkitError(f"{path}: manifest lacks '{key}'")
    kinds = {"algorithm": str, "params": dict, "n_features": int, "n_labels": int,
             "seed": int, "files": dict}
    for key, kind in kinds.items():
        if key in m and (not isinstance(m[key], kind) or isinstance(m[key], bool)):
            raise XmlkitError(f"{path}: manifest field '{key}' is not a {kind.__name__}")
    if not (0 <= m["n_features"] < 2**31 and 0 < m["n_labels"] < 2**31 and m["seed"] >= 0):
        raise XmlkitError(f"{path}: manifest dimensions or seed out of range")
    for name, rec in m.get("files", {}).items():
        if not (isinstance(rec, dict) and isinstance(rec.get("size"), int)
                and isinstance(rec.get("sha256"), str) and _safe_name(name)):
            raise XmlkitError(f"{path}: malformed record of file '{name}'")
    return m


def _safe_name(name):
    return isinstance(name, str) and name.endswith(".npz") and "/" not in name \
        and "\\" not in name and not name.startswith(".")


def file_record(path):
    """{"size", "sha256"} of a file."""
    h = sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return {"size": size, "sha256": h.hexdigest()}


def record_files(folder, names):
    """Add the records of the complete array files `names` (without .npz)
    to the folder's manifest (rewritten atomically; nothing to do without
    names)."""
    if not names:
        return
    m = read_manifest(folder)
    m["format_version"] = FORMAT_VERSION
    files = m.setdefault("files", {})
    for name in names:
        files[f"{name}.npz"] = file_record(Path(folder) / f"{name}.npz")
    write_manifest(folder, m)


def records(manifest):
    """The manifest's file records (file name -> {"size", "sha256"}), or None
    for a version 1 manifest (which records no file)."""
    return manifest.get("files", {}) if manifest.get("format_version", 1) >= 2 else None


def listed(manifest, prefix=""):
    """Names (without .npz) of the array files the manifest records, or None
    for a version 1 manifest."""
    files = records(manifest)
    if files is None:
        return None
    return sorted(n[:-4] for n in files if n.startswith(prefix))


def prepare_folder(folder, manifest):
    """Create `folder` with `manifest`, or check that an existing model folder
    was made with the same algorithm, parameters and dimensions. A folder
    whose manifest records no file (a run that failed before its first file)
    is taken over with the new manifest."""
    folder = Path(folder)
    refuse_foreign(folder)
    if is_model_folder(folder):
        old = read_manifest(folder)
        if listed(old) == [] and not any(folder.glob("*.npz")):
            write_manifest(folder, manifest)
            return
        diffs = [f"{k}: {old.get(k)!r} there, {manifest[k]!r} now"
                 for k in ("algorithm", "n_features", "n_labels", "seed")
                 if old.get(k) != manifest[k]]
        keys = sorted(set(old["params"]) | set(manifest["params"]))
        diffs += [f"{k}: {old['params'].get(k)!r} there, {manifest['params'].get(k)!r} now"
                  for k in keys if old["params"].get(k) != manifest["params"].get(k)]
        if diffs:
            raise XmlkitError(f"{folder}: holds a model trained with other settings ("
                              + "; ".join(diffs) + "); use a new folder or the same settings")
        return
    folder.mkdir(parents=True, exist_ok=True)
    write_manifest(folder, manifest)


def replace_folder(folder, manifest):
    """Make `folder` hold `manifest` and no array file, for a model written
    whole (save): a new folder, or an existing model folder whose arrays are
    removed (its manifest first, so that a save cut short leaves a folder
    that records no file rather than a mix of two models). A non-empty
    folder that holds no model is refused."""
    folder = Path(folder)
    refuse_foreign(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_manifest(folder, manifest)
    for p in folder.glob("*.npz"):
        p.unlink()


def refuse_foreign(folder):
    """Raise unless `folder` is missing, empty (but for hidden files) or a
    model folder: a model is never written over anything else."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise XmlkitError(f"{folder}: exists and is not a folder")
    if (folder.is_dir() and not is_model_folder(folder)
            and any(p for p in folder.iterdir() if not p.name.startswith("."))):
        raise XmlkitError(f"{folder}: folder is not empty and holds no xmlkit model")


@contextmanager
def folder_lock(folder):
    """Hold an exclusive lock on model folder `folder` (created if missing):
    a second run into the same folder fails at once, naming the holder. The
    lock is on the file `.lock` in the folder, which holds the holder's pid
    while it runs and is emptied when it ends; the system drops the lock
    when its holder exits, however it ends. Re-entrant within a process. A
    folder it created is removed again if nothing was written into it."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise XmlkitError(f"{folder}: exists and is not a folder")
    key = os.path.realpath(folder)
    if key in _HELD:
        yield folder
        return
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise XmlkitError(f"{folder}: cannot create or lock the model folder "
                          f"({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            raise XmlkitError(f"{folder}: another process (pid {holder}) is writing this "
                              "model folder; wait for it to end or use another folder") \
                from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD.add(key)
        try:
            yield folder
        finally:
            _HELD.discard(key)
            if created and [p.name for p in folder.iterdir()] == [LOCK]:
                # nothing was written: leave no folder behind
                (folder / LOCK).unlink()
                folder.rmdir()
            else:
                # the pid was only for a second run while this one holds the
                # lock: the folder keeps an empty lock file, so two runs of
                # the same seed leave the same bytes, hidden files included
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def remove_stale_temps(folder):
    """Remove the temporary files that killed runs left in `folder` (call
    only while holding the folder's lock)."""
    for p in Path(folder).glob(".*.tmp"):
        try:
            p.unlink()
        except OSError:
            pass


class Uncompressed:
    """An entry of save_arrays' `arrays` (an array, or a function giving
    one) that is stored without compression: for bytes that deflate
    shrinks little for much time (the low bytes of float32 weights)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array


def save_arrays(folder, name, arrays, remove_dead=False):
    """Write `<folder>/<name>.npz` atomically (compressed, no pickles).

    An entry of `arrays` may be a function giving the array: it is called
    when its entry is written, and the array let go before the next, so
    that arrays made for the file alone (a tree's byte planes) are held one
    at a time. An entry wrapped in Uncompressed is stored as it is (numpy
    and zipfile read either kind). Arrays are written from their memory,
    without a copy.

    Unlike numpy.savez_compressed, the zip entries carry a fixed date, so the
    same arrays always give the same bytes (models are comparable by file).
    Deflate level 1: on FastXML trees a third of level 6's time for files 4%
    larger (training writes a tree file per tree). Files in a model folder
    leave dead temporary files to remove_stale_temps (under the folder's
    lock); a file of its own passes remove_dead=True (atomic_path's).
    """
    with atomic_path(Path(folder) / f"{name}.npz", remove_dead=remove_dead) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for key in sorted(arrays):
                info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                a = arrays[key]
                if isinstance(a, Uncompressed):
                    info.compress_type = zipfile.ZIP_STORED
                    a = a.array
                else:
                    info.compress_type = zipfile.ZIP_DEFLATED
                    try:
                        info.compress_level = 1         # Python >= 3.13
                    except AttributeError:
                        info._compresslevel = 1
                with zf.open(info, "w", force_zip64=True) as f:
                    _write_npy(f, np.asarray(a() if callable(a) else a))
                a = None


def _write_npy(f, a):
    """numpy.lib.format.write_array(f, a) (the same bytes), without its copy
    of a contiguous array's data."""
    fmt = np.lib.format
    if a.dtype.hasobject or not a.flags.c_contiguous:
        fmt.write_array(f, a, allow_pickle=False)
        return
    fmt.write_array_header_1_0(f, fmt.header_data_from_array_1_0(a))
    f.write(memoryview(a.reshape(-1)).cast("B"))


def load_arrays(folder, name, manifest=None, lazy=False):
    """The arrays of `<folder>/<name>.npz`: a dict, or with lazy=True a
    StoredArrays (each array decompressed when looked up: for a reader that
    takes each once). With a version 2 `manifest`, the file must be
    recorded there and match its record (size, SHA-256)."""
    path = Path(folder) / f"{name}.npz"
    rec = None
    files = None if manifest is None else records(manifest)
    if files is not None:
        rec = files.get(f"{name}.npz")
        if rec is None:
            raise XmlkitError(f"{path}: not part of the model (not in its manifest)")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise XmlkitError(f"{path}: missing from the model folder") from None
    except OSError as exc:
        raise XmlkitError(f"{path}: unreadable ({exc.strerror})") from None
    if rec is not None and (len(data) != rec["size"]
                            or sha256(data).hexdigest() != rec["sha256"]):
        raise XmlkitError(f"{path}: damaged model file (size or SHA-256 differs from the "
                          "manifest's record)")
    arrays = StoredArrays(data, path)
    return arrays if lazy else dict(arrays)


_UNREADABLE = (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


class StoredArrays(Mapping):
    """The arrays of an .npz file held in memory (load_arrays), each
    decompressed whenever it is looked up, and not kept: a reader that
    takes one array at a time and lets it go (a tree's decoder) holds the
    file's bytes and one array, never all of them at once. A damaged entry
    raises XmlkitError when it is read."""

    def __init__(self, data, path):
        self._path = path
        try:
            self._z = np.load(io.BytesIO(data), allow_pickle=False)
            self._names = tuple(self._z.files)
        except _UNREADABLE as exc:
            raise self._damaged(exc) from None

    def _damaged(self, exc):
        return XmlkitError(f"{self._path}: unreadable, damaged model file ({exc})")

    def __getitem__(self, name):
        if name not in self._names:
            raise KeyError(name)
        try:
            return self._z[name]
        except _UNREADABLE as exc:
            raise self._damaged(exc) from None

    def read_npy(self, name):
        """Array `name` as (shape, dtype, read): its header, and read(k)
        giving its next k bytes of data (fewer at the end), for a reader
        that decodes it a piece at a time instead of holding it whole."""
        if name not in self._names:
            raise KeyError(name)
        fmt = np.lib.format
        try:
            f = self._z.zip.open(f"{name}.npy")
            version = fmt.read_magic(f)
            shape, fortran, dtype = (fmt.read_array_header_1_0(f) if version == (1, 0)
                                     else fmt.read_array_header_2_0(f))
        except _UNREADABLE as exc:
            raise self._damaged(exc) from None
        if fortran and len(shape) > 1:
            raise self._damaged(f"{name} is stored in Fortran order")

        def read(k):
            try:
                return f.read(k)
            except _UNREADABLE as exc:
                raise self._damaged(exc) from None
        return shape, dtype, read

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)


def array_names(folder, prefix):
    """Names (without .npz) of the array files starting with prefix."""
    return sorted(p.stem for p in Path(folder).glob(f"{prefix}*.npz"))
