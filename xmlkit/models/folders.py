"""Model folders: saving a fitted model and loading one, for every family
through the folder protocol (xmlkit.models.protocol). Training
into a folder, with resume, shards and Dask, is xmlkit.driver's.

A folder holds `manifest.json` (family, model-defining parameters, shapes,
seed, the records of its files) and `.npz` arrays: one file per part (per
tree, `tree_00000.npz`, ..., each also holding the model's dimensions,
checked against the manifest's; the whole model of a single-file family),
plus the family's extra arrays (PfastreXML's propensities and tail
classifiers).
"""
import os
from concurrent.futures import ThreadPoolExecutor

from xmlkit import arrayfile, store
from xmlkit.errors import XmlkitError


class PartWriter:
    """Writes a part's file; called in the worker that made it (a plain
    object, so that forked worker processes can receive it)."""

    def __init__(self, folder, model, manifest, compact=False):
        self.folder, self.manifest, self.compact = folder, manifest, compact
        self.encode = model.encode_part
        self.file = model.part_file

    def __call__(self, key, part):
        store.save_arrays(self.folder, self.file(key), self.encode(part, self.compact),
                          self.manifest, compact=self.compact)


def save_extras(model, folder, manifest, compact=False):
    """Write and record the model's extra arrays (of the folder whose
    manifest is `manifest`)."""
    extras = model.extra_arrays()
    for name, arrays in extras.items():
        store.save_arrays(folder, name, arrays, manifest, compact=compact)
    store.record_files(folder, list(extras))


def save_folder(model, folder, compact=False):
    """Write a fitted model's folder (manifest and arrays): exactly this
    model, replacing a model the folder held (resuming a folder's training
    is xmlkit.driver.fit_folder's). compact=True writes the compact layout
    of the folders written before format version 3 (deflated; see
    docs/formats.md for why the mapped one is the default): for the
    benchmarks that compare them and the tests of old folders."""
    model.require_whole()
    if hasattr(model, "verify") and getattr(model, "source_", None):
        model.verify()                  # (a loaded model's files: checked before copied)
    store.refuse_foreign(folder)        # (before the lock leaves its file there)
    with store.folder_lock(folder):
        store.remove_stale_temps(folder)
        manifest = model.manifest()
        store.replace_folder(folder, manifest)
        writer = PartWriter(folder, model, manifest, compact)
        parts = model.parts()
        for key, part in parts.items():
            writer(key, part)
        store.record_files(folder, [model.part_file(k) for k in parts])
        save_extras(model, folder, manifest, compact)
    return folder


def load_part(model, folder, key, manifest=None, recorded=True, check_now=False):
    """Part `key` of a folder, checked against its record in `manifest`
    (when given; a file not `recorded` yet, to adopt: against its origin
    only, with check_now) and the model's shapes. A family whose parts check their
    mapped files before first use (CHECKS_ON_USE: the trees) gets the file
    unverified, unless check_now (the part is verified here); the others
    get it verified."""
    name = model.part_file(key)
    arrays = store.load_arrays(folder, name, manifest, lazy=True, recorded=recorded)
    if not (arrays.verified or model.CHECKS_ON_USE):
        arrays.verify()
    if not model.BOUNDED_AT_USE:
        arrays = arrayfile.copied(arrays)
    part = model.decode_part(arrays, f"{folder}/{name}.npz")
    if check_now and hasattr(part, "verify"):
        part.verify()
    return part


def load_folder(cls, folder, trees=None, threads=1):
    """A model of class `cls` from an xmlkit folder: its parts, or (families
    whose parts can be picked: the trees) the indices `trees`; `threads`
    read part files in parallel (compact files: zlib and numpy release the
    GIL). A folder whose training stopped before all the trees it set out to
    grow (store.unfinished) is refused unless `trees` picks some. Every file
    is checked against the manifest's record and every
    array before a kernel sees it: mapped tree files are opened here (their
    sizes and array headers checked) and verified (digest, contents) by the
    model before their first use, on its threads (FastXML.verify)."""
    m = store.read_manifest(folder)
    if m["algorithm"] != cls.algorithm:
        raise XmlkitError(f"{folder}: holds a '{m['algorithm']}' model, not '{cls.algorithm}'")
    model = cls.from_manifest(m, folder)
    if trees is not None and not cls.PICKABLE:
        raise XmlkitError(f"{folder}: a {cls.algorithm} model has no trees to pick")
    # (a family whose parts cannot be picked reads all of them: a missing
    # one is then reported by the store, as any missing file)
    present = model.stored_parts(folder, m) if cls.PICKABLE else model.part_keys()
    wanted = present if trees is None else list(trees)
    missing = sorted(set(wanted) - set(present))
    if missing:
        raise XmlkitError(f"{folder}: has no {cls.PART} {missing[0]} (it holds "
                          f"{len(present)} {cls.PART}s)")
    if not wanted:
        raise XmlkitError(f"{folder}: holds no {cls.PART}s (was its training interrupted? "
                          "rerun xml-train to resume)")
    if trees is None and cls.PICKABLE:
        stopped = store.unfinished(m, present, calibrated=True)
        if stopped:
            raise XmlkitError(f"{folder}: {stopped}")
    first = load_part(model, folder, wanted[0], m)
    rest = wanted[1:]
    if threads > 1 and len(rest) > 1 and not getattr(first, "file", None):
        # (compact files are decompressed: in parallel; mapped ones are only
        # opened, which a thread would not speed up)
        with ThreadPoolExecutor(threads) as pool:
            parts = dict(zip(rest, pool.map(lambda t: load_part(model, folder, t, m), rest)))
    else:
        parts = {t: load_part(model, folder, t, m) for t in rest}
    model.set_parts({wanted[0]: first, **parts})
    model.restore_extras(lambda name: store.load_arrays(folder, name, m), folder)
    # (where it came from, and its manifest's digest then: Dask workers that
    # see that folder as it was load it themselves, xmlkit.cluster.FolderModel)
    model.source_ = (os.path.abspath(folder), None if trees is None else list(trees),
                     store.manifest_digest(folder))
    return model
