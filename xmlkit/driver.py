"""Model folders: training into one, saving, loading. The one place where
the estimators (which do no I/O) meet files, shared by every family.

A folder holds `manifest.json` (family, model-defining parameters, shapes,
seed) and `.npz` arrays: one file per tree (`tree_00000.npz`, ...) for the
tree families (each also holding the model's dimensions, checked against
the manifest's), plus their extra arrays (PfastreXML's propensities and tail
classifiers); one array file for the single-file families.

Training into a folder (fit_folder) writes each tree as soon as it is grown
and keeps the trees already there when the folder holds a model with the
same settings: a rerun after a crash resumes, and shards trained with
different tree ranges merge by copying their tree files into one folder.
"""
from concurrent.futures import ThreadPoolExecutor

from xmlkit import store
from xmlkit.errors import XmlkitError
from xmlkit.models.ensemble import TREE_DIMS, TreeEnsemble, stored_trees, tree_name


class TreeWriter:
    """Writes a grown tree's file; called in the worker that grew it (a
    plain object, so that forked worker processes can receive it)."""

    def __init__(self, folder, model):
        self.folder = folder
        self.encode = model._encode_tree
        self.dims = model._tree_dims()

    def __call__(self, t, tree):
        store.save_arrays(self.folder, tree_name(t), {**self.encode(tree), TREE_DIMS: self.dims})


def fit_folder(model, X, Y, folder, progress=None, log=None, executor=None,
               keep_trees=True):
    """Train `model` on X, Y into `folder` (see the module doc); progress(n)
    is called as steps complete (model.progress_total in all), log(message)
    with what is done. Returns the model, fitted.

    keep_trees=False (tree families): each tree leaves memory once its file
    is written (as the C++ tools do), so memory does not grow with the
    number of trees; the returned model then holds only each tree's shape
    (model._tree_shape: enough for `stats()`), and predicting needs the
    folder loaded (`load_model(folder)`).

    The trees are grown by the family's own workers (threads), or by
    `executor.grow_trees(model, X, Y, todo, after)` (xmlkit.cluster: Dask
    tasks; `after` then writes each tree here as it arrives): the same trees
    and files either way.

    The folder is locked while training (a second run into it fails at once)
    and temporary files of killed runs are removed first. Each file is added
    to the manifest's records once it is complete."""
    tick = progress or (lambda _: None)
    X, Y = model._start_fit(X, Y)
    with store.folder_lock(folder):
        store.remove_stale_temps(folder)
        store.prepare_folder(folder, model.manifest())
        if not isinstance(model, TreeEnsemble):
            model._fit_arrays(X, Y, tick, log, executor)
            store.save_arrays(folder, model.ARRAYS, model.arrays_)
            store.record_files(folder, [model.ARRAYS])
            return model
        wanted = model._wanted_trees()
        want = set(wanted)
        manifest = store.read_manifest(folder)
        v1 = store.records(manifest) is None
        recorded = set() if v1 else set(stored_trees(folder, manifest))
        unrecorded = set(stored_trees(folder)) - recorded
        # trees whose files join the records: in a version 1 folder every tree
        # file is a tree of the model (the folder is upgraded); otherwise the
        # wanted ones (files of a killed run, or copied from another shard)
        adopt = unrecorded if v1 else unrecorded & want
        kept = (lambda tree: tree) if keep_trees else model._tree_shape
        model.trees_ = {}
        for t in sorted((recorded & want) | adopt):
            # a recorded tree is checked against its record, the others as any file
            tree = load_tree(model, folder, t, manifest if t in recorded else None)
            if t in want:
                model.trees_[t] = kept(tree)
        store.record_files(folder, [tree_name(t) for t in sorted(adopt)])
        todo = [t for t in wanted if t not in model.trees_]
        if log:
            if model.trees_:
                log(f"{len(model.trees_)} of the trees are already in {folder}; "
                    f"growing {len(todo)}")
            log(f"{model.algorithm}: {X.shape[0]} points, {X.shape[1]} features, "
                f"{Y.shape[1]} labels; growing {len(todo)} trees")
        tick(len(model.trees_))
        writer = TreeWriter(folder, model)
        grow = model._grow_trees if executor is None else \
            (lambda *a, **kw: executor.grow_trees(model, *a, **kw))
        for t, tree in grow(X, Y, todo, after=writer):
            model.trees_[t] = kept(tree)
            store.record_files(folder, [tree_name(t)])
            tick(1)
        model._finish_fit(X, Y)
        _save_extras(model, folder)
    return model


def save_folder(model, folder):
    """Write a fitted model's folder (manifest and arrays): exactly this
    model, replacing a model the folder held (resuming a folder's training
    is fit_folder's)."""
    if isinstance(model, TreeEnsemble):
        model._require_whole_trees()
    else:
        model._require_fitted()
    store.refuse_foreign(folder)        # (before the lock leaves its file there)
    with store.folder_lock(folder):
        store.remove_stale_temps(folder)
        store.replace_folder(folder, model.manifest())
        if not isinstance(model, TreeEnsemble):
            store.save_arrays(folder, model.ARRAYS, model.arrays_)
            store.record_files(folder, [model.ARRAYS])
            return folder
        writer = TreeWriter(folder, model)
        for t, tree in model.trees_.items():
            writer(t, tree)
        store.record_files(folder, [tree_name(t) for t in model.trees_])
        _save_extras(model, folder)
    return folder


def _save_extras(model, folder):
    extras = model._extra_arrays()
    for name, arrays in extras.items():
        store.save_arrays(folder, name, arrays)
    store.record_files(folder, list(extras))


def load_tree(model, folder, t, manifest=None):
    """Tree t of a folder, checked against its record in `manifest` (when
    given) and the model's shapes."""
    name = f"{folder}/{tree_name(t)}.npz"
    arrays = store.load_arrays(folder, tree_name(t), manifest)
    model._check_tree_dims(arrays.pop(TREE_DIMS, None), name)
    return model._decode_tree(arrays, name)


def load_folder(cls, folder, trees=None, threads=1, stream=False):
    """A model of class `cls` from an xmlkit folder: its trees, or the
    indices `trees`; `threads` read tree files in parallel (zlib and numpy
    release the GIL). Every file is checked against the manifest's record
    and every array before a kernel sees it.

    stream=True (families whose forest can stream, cls._streamed_forest): the
    trees stay on disk and are read one at a time by each predict call
    (model.streamed_forest_), so that prediction holds one tree's weights
    at a time; the model then has no trees_ to save or inspect."""
    m = store.read_manifest(folder)
    if m["algorithm"] != cls.algorithm:
        raise XmlkitError(f"{folder}: holds a '{m['algorithm']}' model, not '{cls.algorithm}'")
    model = cls.from_manifest(m, folder)
    if not issubclass(cls, TreeEnsemble):
        if trees is not None:
            raise XmlkitError(f"{folder}: a {cls.algorithm} model has no trees to pick")
        a = store.load_arrays(folder, cls.ARRAYS, m)
        model._check_arrays(a, f"{folder}/{cls.ARRAYS}.npz")
        model.arrays_ = a
        return model
    present = stored_trees(folder, m)
    wanted = present if trees is None else list(trees)
    missing = sorted(set(wanted) - set(present))
    if missing:
        raise XmlkitError(f"{folder}: has no tree {missing[0]} (it holds "
                          f"{len(present)} trees)")
    if not wanted:
        raise XmlkitError(f"{folder}: holds no trees (was its training interrupted? "
                          "rerun xml-train to resume)")
    if stream and hasattr(cls, "_streamed_forest"):
        model.streamed_forest_ = model._streamed_forest(
            lambda i: load_tree(model, folder, wanted[i], m), len(wanted))
    elif threads > 1 and len(wanted) > 1:
        with ThreadPoolExecutor(threads) as pool:
            model.trees_ = dict(zip(wanted, pool.map(
                lambda t: load_tree(model, folder, t, m), wanted)))
    else:
        model.trees_ = {t: load_tree(model, folder, t, m) for t in wanted}
    model._restore_extras(lambda name: store.load_arrays(folder, name, m), folder)
    return model
