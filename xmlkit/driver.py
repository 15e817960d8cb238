"""Training into a model folder, shared by every family through the folder
protocol (xmlkit.models.protocol): the one place where training
meets files. Saving and loading a fitted model: xmlkit.models.folders.

Training into a folder (fit_folder) writes each part (each tree) as soon as
it is made and, for the families whose parts resume (the trees), keeps the
parts already there when the folder holds a model with the same settings:
a rerun after a crash resumes, and shards trained with different tree
ranges merge by copying their tree files into one folder.
"""
import time

from xmlkit import store
from xmlkit.errors import XmlkitError
from xmlkit.models.calibrated import drop_from_folder
from xmlkit.models.folders import PartWriter, load_part, save_extras

#: seconds between rewrites of the manifest's records while training (each
#: rewrite reads, writes and syncs the manifest: per part, a run of many
#: small trees spent a twentieth of its time there)
RECORD_SECONDS = 1.0


def fit_folder(model, X, Y, folder, progress=None, log=None, executor=None,
               keep_trees=True, calibrate=False):
    """Train `model` on X, Y into `folder` (see the module doc); progress(n)
    is called as steps complete (model.progress_total in all), log(message)
    with what is done. Returns the model, fitted.

    keep_trees=False (tree families): each tree leaves memory once its file
    is written (as the C++ tools do), so memory does not grow with the
    number of trees; the returned model then holds only each tree's shape
    (model.tree_shape: enough for `stats()`), and predicting needs the
    folder loaded (`load_model(folder)`).

    The trees are grown by the family's own workers (threads), or by
    `executor.grow_trees(model, X, Y, todo, after)` (xmlkit.cluster: Dask
    tasks; `after` then writes each tree here as it arrives): the same trees
    and files either way.

    The folder is locked while training (a second run into it fails at once)
    and temporary files of killed runs are removed first. Before any part is
    made, the manifest records the run's plan (store.set_plan: the trees
    wanted, and whether a calibration follows, `calibrate`: the caller's,
    after this), so that readers refuse what a killed run leaves. Complete
    files are added to the manifest's records at most every RECORD_SECONDS, and when
    training ends or stops (a part file a killed run did not record is
    checked and adopted by the next run, as a file copied from a shard)."""
    tick = progress or (lambda _: None)
    X, Y = model.start_fit(X, Y)
    with store.folder_lock(folder):
        store.remove_stale_temps(folder)
        store.prepare_folder(folder, model.manifest())
        wanted = model.part_keys()
        want = set(wanted)
        manifest = store.read_manifest(folder)
        keep = (lambda part: part) if keep_trees else model.part_kept
        kept_parts = {}
        if model.RESUMABLE:
            recorded = set(model.stored_parts(folder, manifest))
            # part files not recorded yet join the records when wanted (files
            # of a killed run, or copied from another shard), once checked
            # whole and found to be of this model (their origin: xmlkit.store)
            adopt = (set(model.stored_parts(folder)) - recorded) & want
            for key in sorted((recorded & want) | adopt):
                part = load_part(model, folder, key, manifest, recorded=key in recorded,
                                 check_now=True)
                kept_parts[key] = keep(part)
            store.record_files(folder, [model.part_file(k) for k in sorted(adopt)])
        todo = [k for k in wanted if k not in kept_parts]
        # (once what is there passed its checks, before anything is made)
        store.write_manifest(folder, store.set_plan(store.read_manifest(folder), wanted
                                                    if model.PICKABLE else (), calibrate))
        # (a calibration map was fitted to the model as it was)
        if todo and drop_from_folder(folder) and log:
            log(f"{folder}: its calibration is dropped, the model changes (xml-calibrate "
                "fits a new one)")
        if log and kept_parts:
            log(f"{len(kept_parts)} of the {model.PART}s are already in {folder}; "
                f"growing {len(todo)}")
        tick(len(kept_parts))
        parts = dict(kept_parts)
        records = _Records(folder)
        try:
            for key, part in model.fit_parts(X, Y, todo, PartWriter(folder, model, manifest),
                                              tick, log, executor):
                parts[key] = keep(part)
                records.add(model.part_file(key))
                del part            # (not held while the next part grows)
        except BaseException:
            records.flush(failing=True)
            raise
        records.flush()
        model.set_parts(parts)
        model.finish_fit(X, Y)
        save_extras(model, folder, manifest)
    return model


class _Records:
    """Part files waiting to be recorded in the folder's manifest."""

    def __init__(self, folder):
        self.folder, self.names, self.last = folder, [], time.monotonic()

    def add(self, name):
        self.names.append(name)
        if time.monotonic() - self.last >= RECORD_SECONDS:
            self._write()

    def _write(self):
        names, self.names = self.names, []
        store.record_files(self.folder, names)
        self.last = time.monotonic()

    def flush(self, failing=False):
        """Record what is waiting; when training failed (`failing`), what
        can be: the failure is what is reported."""
        try:
            self._write()
        except (XmlkitError, OSError):
            if not failing:
                raise
