"""Model folders: a versioned JSON manifest plus arrays in .npz files.

    <model>/manifest.json    format, format_version, xmlkit_version, algorithm,
                             params, n_features, n_labels, seed,
                             predict_params, data (a digest of the training
                             data), and `files`: name -> {"size", "xxh64"}
                             of every array file that belongs to the model
                             ({"size", "sha256"} in folders written before
                             format version 3)
    <model>/<name>.npz       arrays (e.g. one file per tree), in the mapped
                             or the compact layout (xmlkit.arrayfile); from
                             format version 4 each starts with `__origin__`:
                             the digest of the manifest's model-defining
                             fields (ORIGIN_KEYS) and the file's name

Every file is written atomically (temporary name, then rename), so a folder
never holds a half-written file; nothing is pickled. An array file is part
of the model once its record is in the manifest (record_files, after the
file is complete); a file is checked against its record before its arrays
are used (size when opened; digest when opened (compact) or verified
(mapped): xmlkit.arrayfile), so a damaged, replaced or deleted file is
refused. A file's `__origin__` ties it to the manifest: a file copied
from a model of other parameters, seed or training data (a shard of
another run), a file renamed, or a manifest whose parameters were edited,
is refused when the file is loaded or adopted (check_origin). Format
version 1 folders (no `files`) still load, without that check; folders of
versions 2 and 3 without the origin check. Loading a folder of another
format version fails with a clear message.
"""
import json
import os
from contextlib import contextmanager
from pathlib import Path

from xmlkit import _lock, arrayfile
from xmlkit._version import __version__
from xmlkit.atomic import atomic_path
from xmlkit.errors import XmlkitError

FORMAT = "xmlkit-model"
FORMAT_VERSION = 4
#: version 1: no file records; 2: SHA-256 records; 3: no __origin__
READABLE_VERSIONS = (1, 2, 3, 4)
MANIFEST = "manifest.json"
LOCK = ".lock"
_HELD = set()          # folders this process holds the lock of
#: the first array of every file of a version 4 folder (see origin)
ORIGIN = "__origin__"
#: the manifest's fields that define what the model computes
ORIGIN_KEYS = ("algorithm", "params", "n_features", "n_labels", "seed", "predict_params",
               "data")


def make_manifest(algorithm, params, n_features, n_labels, seed, predict_params=None,
                  data=None):
    """A new manifest; `predict_params`: the predict parameters recorded at
    training (families that have any); `data`: the digest of the training
    data (xmlkit.models.family.data_digest)."""
    m = {"format": FORMAT, "format_version": FORMAT_VERSION, "xmlkit_version": __version__,
         "algorithm": algorithm, "params": params, "n_features": int(n_features),
         "n_labels": int(n_labels), "seed": int(seed), "files": {}}
    if predict_params:
        m["predict_params"] = predict_params
    if data is not None:
        m["data"] = data
    return m


def origin(manifest, name):
    """The `__origin__` of array file `name` (without .npz) of a model with
    `manifest`: the XXH64 of the manifest's ORIGIN_KEYS (as canonical JSON)
    and the file's name, as a uint64 array of one entry. A file carries it
    from when it is written; a change of any of those fields in the
    manifest, or a file of another model or under another name, no longer
    matches."""
    from xmlkit._ext.file_check import xxh64
    import numpy as np
    fields = json.dumps({k: manifest.get(k) for k in ORIGIN_KEYS}, sort_keys=True,
                        separators=(",", ":"), allow_nan=True)
    h = xxh64(f"{fields}\n{name}.npz".encode("utf-8", "surrogatepass"))
    return np.array([int(h, 16)], dtype=np.uint64)


def check_origin(arrays, manifest, path):
    """Take the `__origin__` out of a file's `arrays` (a mapping from
    xmlkit.arrayfile.open_file) and raise DamagedModel unless it is the one
    `manifest` gives the file at `path`. A file without one passes only in a
    folder of format version 3 or older (written before origins were)."""
    from xmlkit.checks import DamagedModel
    import numpy as np
    got = arrays.take(ORIGIN)
    path = Path(path)
    if got is not None and manifest.get("format_version", 1) < 4:
        raise DamagedModel(path, f"carries the {ORIGIN} of a format 4 folder, but the "
                                 f"manifest says version {manifest.get('format_version', 1)}: "
                                 "an edited manifest")
    if got is None:
        if manifest.get("format_version", 1) >= 4:
            raise DamagedModel(path, f"lacks its {ORIGIN} (a file of an older xmlkit "
                                     "version or of another model)")
        return
    want = origin(manifest, path.stem)
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        raise DamagedModel(path, "belongs to another model than the folder's manifest "
                                 "describes (other parameters, seed or training data, another "
                                 "file name, or an edited manifest)")


def write_manifest(folder, manifest):
    with atomic_path(Path(folder) / MANIFEST, remove_dead=False) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def manifest_digest(folder):
    """The XXH64 digest of a model folder's manifest (whose records name
    every file's digest: the model it holds), or None if it cannot be read."""
    from xmlkit._ext.file_check import xxh64
    try:
        return xxh64((Path(folder) / MANIFEST).read_bytes())
    except OSError:
        return None


def is_model_folder(folder):
    return (Path(folder) / MANIFEST).is_file()


def read_manifest(folder):
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise XmlkitError(f"{folder}: no such model folder" if not folder.exists() else
                          f"{folder}: not a folder (a model is a folder)")
    if path.exists() and not path.is_file():
        raise XmlkitError(f"{path}: not a regular file (a model's manifest is one)")
    if not path.is_file():
        raise XmlkitError(f"{folder}: not an xmlkit model folder (no {MANIFEST})")
    from xmlkit.io import loads_json, strip_bom
    try:
        m = loads_json(strip_bom(path.read_bytes()).decode("utf-8"))
    except UnicodeDecodeError:
        raise XmlkitError(f"{path}: unreadable manifest (not UTF-8 text)") from None
    except OSError as exc:
        raise XmlkitError(f"{path}: unreadable manifest ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise XmlkitError(f"{path}: unreadable manifest ({exc})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise XmlkitError(f"{path}: not an xmlkit model manifest")
    if type(m.get("format_version")) is not int:
        raise XmlkitError(f"{path}: manifest field 'format_version' is "
                          f"{json.dumps(m.get('format_version'))}, not a whole number")
    if m["format_version"] not in READABLE_VERSIONS:
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
    if "data" in m and not isinstance(m["data"], str):
        raise XmlkitError(f"{path}: manifest field 'data' is not a str")
    if not (0 <= m["n_features"] < 2**31 and 0 < m["n_labels"] < 2**31
            and 0 <= m["seed"] < 2**63):
        raise XmlkitError(f"{path}: manifest dimensions or seed out of range")
    for name, rec in m.get("files", {}).items():
        if not (isinstance(rec, dict) and isinstance(rec.get("size"), int)
                and isinstance(rec.get("xxh64", rec.get("sha256")), str) and _safe_name(name)):
            raise XmlkitError(f"{path}: malformed record of file '{name}'")
    _check_version_fits(path, m)
    if "plan" in m and _plan(m) is None:
        raise XmlkitError(f"{path}: manifest field 'plan' is malformed")
    return m


#: the largest tree index (see xmlkit.models.base.C_INT_MAX)
_TREE_END = 2**31


def _plan(m):
    """The manifest's plan as (set of planned trees, calibration planned), or
    None when it is malformed; ((), False) without one."""
    plan = m.get("plan", {})
    if not isinstance(plan, dict) or set(plan) - {"trees", "calibration"}:
        return None
    ranges, calibration = plan.get("trees", []), plan.get("calibration", False)
    if not isinstance(ranges, list) or not isinstance(calibration, bool) or len(ranges) > 4096:
        return None
    trees = set()
    for r in ranges:
        if not (isinstance(r, list) and len(r) == 2 and all(type(v) is int for v in r)
                and 0 <= r[0] < r[1] <= _TREE_END and len(trees) + r[1] - r[0] <= 10**7):
            return None
        trees.update(range(r[0], r[1]))
    return trees, calibration


def set_plan(manifest, trees=(), calibration=False):
    """Record in `manifest` what training set out to make: the tree indices
    `trees` (with those the plan held: shards add their ranges) and whether
    a calibration follows. Readers then tell an unfinished folder (see
    unfinished) from a finished one."""
    old, _ = _plan(manifest) or (set(), False)
    todo = sorted(old | set(int(t) for t in trees))
    ranges = []
    for t in todo:
        if ranges and ranges[-1][1] == t:
            ranges[-1][1] = t + 1
        else:
            ranges.append([t, t + 1])
    manifest["plan"] = {"trees": ranges, "calibration": bool(calibration)}
    return manifest


def calibration_planned(manifest):
    """Whether the last training into the folder asked for a calibration."""
    return (_plan(manifest) or (set(), False))[1]


def unfinished(manifest, trees, calibrated):
    """Why a folder whose manifest is `manifest`, holding the trees `trees`
    (None: not asked; and a calibration when `calibrated`), is not what its
    training set out to make, as a sentence; None when it is (or records no
    plan: folders written before plans, or saved whole)."""
    planned, calibration = _plan(manifest) or (set(), False)
    have = len(planned & set(trees or ()))
    if trees is not None and have < len(planned):
        return (f"training stopped at {have} of {len(planned)} trees; run the same "
                "xml-train to finish it, or name the trees to use")
    if calibration and not calibrated:
        return ("training stopped before the calibration it asked for; run the same "
                "xml-train to finish it, or ask for the model's own scores")
    return None


def _check_version_fits(path, m):
    """Refuse a manifest whose format version is not the one its contents
    were written by (an edited version): version 1 recorded no file, 2
    recorded SHA-256 digests, 3 and later XXH64 ones, and only 4 records
    the training data's digest (and stamps files with their origin, which
    check_origin ties to the version)."""
    v, files = m["format_version"], m.get("files")
    kinds = {"sha256" if "sha256" in rec else "xxh64" for rec in (files or {}).values()}
    wrote = {1: not files, 2: kinds <= {"sha256"}, 3: kinds <= {"xxh64"},
             4: kinds <= {"xxh64"}}[v] and (v >= 4 or "data" not in m)
    if not wrote:
        raise XmlkitError(f"{path}: says format version {v}, but holds what version "
                          f"{v} did not write (its records or data digest): an edited "
                          "manifest")


def require_current(folder, manifest, doing,
                    instead="load it and save it (model.save) in a new folder first"):
    """Refuse to add to a folder of an older format version (its files carry
    no origin to tie new ones to; `doing`: what was asked, `instead`: what
    to do)."""
    if manifest.get("format_version") != FORMAT_VERSION:
        raise XmlkitError(
            f"{folder}: holds a model of format version {manifest.get('format_version')} "
            f"(xmlkit {manifest.get('xmlkit_version', '?')}): this version cannot {doing}; "
            f"{instead}")


def _safe_name(name):
    return isinstance(name, str) and name.endswith(".npz") and "/" not in name \
        and "\\" not in name and not name.startswith(".")


def file_record(path):
    """{"size", "xxh64"} of a file (xmlkit.arrayfile.digest)."""
    return arrayfile.digest(path)


def record_files(folder, names):
    """Add the records of the complete array files `names` (without .npz)
    to the folder's manifest (rewritten atomically; nothing to do without
    names)."""
    if not names:
        return
    m = read_manifest(folder)
    require_current(folder, m, "add files to it")
    files = m.setdefault("files", {})
    for name in names:
        files[f"{name}.npz"] = file_record(Path(folder) / f"{name}.npz")
    write_manifest(folder, m)


def forget_files(folder, names):
    """Remove the array files `names` (without .npz) from the folder and
    their records from its manifest (the records first: a folder never
    records a file it lacks). Returns the names it held."""
    m = read_manifest(folder)
    files = records(m) or {}
    held = [name for name in names if f"{name}.npz" in files]
    if held:
        for name in held:
            del files[f"{name}.npz"]
        write_manifest(folder, m)
    for name in names:
        (Path(folder) / f"{name}.npz").unlink(missing_ok=True)
    return held


def records(manifest):
    """The manifest's file records (file name -> {"size", "xxh64"}, or
    {"size", "sha256"} in folders written before version 3), or None
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
        require_current(folder, old, "add to it", "train into a new folder")
        if old.get("data") != manifest.get("data"):
            raise XmlkitError(f"{folder}: holds a model trained on other data (its digest "
                              f"{old.get('data', 'not recorded')}, these data "
                              f"{manifest.get('data')}); use a new folder or the same data")
        diffs = [f"{k}: {old.get(k)!r} there, {manifest.get(k)!r} now"
                 for k in ("algorithm", "n_features", "n_labels", "seed", "predict_params")
                 if old.get(k) != manifest.get(k)]
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
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0),
                     0o666)
    except OSError as exc:
        raise XmlkitError(f"{folder}: cannot create or lock the model folder "
                          f"({exc.strerror})") from None
    locked = False
    try:
        if not _lock.try_lock(fd):
            holder = _lock.read_at(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            raise XmlkitError(f"{folder}: another process (pid {holder}) is writing this "
                              "model folder; wait for it to end or use another folder")
        locked = True
        os.ftruncate(fd, 0)
        _lock.write_at(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD.add(key)
        try:
            yield folder
        finally:
            _HELD.discard(key)
            if created and [p.name for p in folder.iterdir()] == [LOCK]:
                # nothing was written: leave no folder behind (where an open
                # file can be removed: Windows keeps this one)
                try:
                    (folder / LOCK).unlink()
                    folder.rmdir()
                except OSError:
                    pass
            else:
                # the pid was only for a second run while this one holds the
                # lock: the folder keeps an empty lock file, so two runs of
                # the same seed leave the same bytes, hidden files included
                os.ftruncate(fd, 0)
    finally:
        if locked:
            _lock.unlock(fd)
        os.close(fd)


def remove_stale_temps(folder):
    """Remove the temporary files that killed runs left in `folder` (call
    only while holding the folder's lock)."""
    for p in Path(folder).glob(".*.tmp"):
        try:
            p.unlink()
        except OSError:
            pass


Uncompressed = arrayfile.Uncompressed


def save_arrays(folder, name, arrays, manifest=None, remove_dead=False, compact=False):
    """Write `<folder>/<name>.npz` atomically (no pickles), in the mapped
    layout (every array stored, aligned: read in place) or, compact=True,
    deflated: see xmlkit.arrayfile.write. A file of a model folder passes
    the folder's `manifest`: the file then starts with its origin (see
    origin). Files in a model folder leave dead temporary files to
    remove_stale_temps (under the folder's lock); a file of its own passes
    remove_dead=True (atomic_path's)."""
    if manifest is not None:
        arrays = {ORIGIN: origin(manifest, name), **arrays}
    arrayfile.write(folder, name, arrays, compact=compact, remove_dead=remove_dead)


def load_arrays(folder, name, manifest=None, lazy=False, recorded=True):
    """The arrays of `<folder>/<name>.npz`: a dict of copies, checked against the
    file's record in a version 2 to 4 `manifest` (which must record it,
    unless not `recorded`: a file to adopt, checked whole by the caller)
    and against its origin, or with lazy=True the file itself
    (xmlkit.arrayfile.ArrayFile, mapped, whose digest and contents its
    reader verifies before a kernel sees them; or a CompactFile, read and
    checked whole)."""
    path = Path(folder) / f"{name}.npz"
    rec = None
    files = None if manifest is None or not recorded else records(manifest)
    if files is not None:
        rec = files.get(f"{name}.npz")
        if rec is None:
            raise XmlkitError(f"{path}: not part of the model (not in its manifest)")
    arrays = arrayfile.open_file(path, rec)
    if manifest is not None:
        check_origin(arrays, manifest, path)
    if lazy:
        return arrays
    if not arrays.verified:
        arrays.verify()
    return arrayfile.copied(arrays)


def array_names(folder, prefix):
    """Names (without .npz) of the array files starting with prefix."""
    return sorted(p.stem for p in Path(folder).glob(f"{prefix}*.npz"))
