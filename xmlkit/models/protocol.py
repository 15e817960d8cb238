"""The folder protocol: what a model family provides so that it can be
trained into a model folder, resumed, sharded, sent to Dask, saved and
loaded. xmlkit.driver (training into folders), xmlkit.models.folders
(save and load) and xmlkit.cluster (Dask) call a family only through the
members declared here; every family has them, through
xmlkit.models.family.ModelBase (the defaults below, the shared
start_fit and manifest) and its own class (the parts).

A model folder holds the manifest and the model's *parts*, one array file
each (a tree; the whole model of a single-file family), plus its extra
arrays (xmlkit.store: every file carries its origin).
"""


class FolderProtocol:
    """The members the drivers call (see the module doc). A family's class
    defines those that raise NotImplementedError here; the others have
    defaults that fit most families."""

    #: parts already in a folder (of a model with the same manifest) are
    #: kept by a rerun, so that training resumes and shards merge
    RESUMABLE = False
    #: loaded parts can be picked by key (load_model(folder, trees=...))
    PICKABLE = False
    #: what a part is called in messages ("tree")
    PART = "part"
    #: fit_parts spreads its work as tasks of an executor (xmlkit.cluster)
    DASK_TASKS = False
    #: decode_part may return a part of a mapped file whose digest and
    #: contents are not verified yet: the part has verify(), and the family
    #: calls it before a kernel uses the part (the trees: on the threads
    #: that predict). Otherwise the file is verified before decode_part
    #: sees it.
    CHECKS_ON_USE = False
    #: the family's kernels bound every index of a part where they read it,
    #: so its parts may stay mapped while in use (a file changed under them
    #: is an error, never an out-of-bounds read). Otherwise (kernels,
    #: scipy or BLAS that trust their arrays) a part's arrays are copied
    #: into the process once verified.
    BOUNDED_AT_USE = False

    # -- the model and its manifest
    def start_fit(self, X, Y):
        """Check the parameters and the data, set the shapes; returns X, Y
        as the family trains on them."""
        raise NotImplementedError

    def manifest(self):
        """The folder's manifest of this (fitted or started) model."""
        raise NotImplementedError

    @classmethod
    def from_manifest(cls, manifest, folder="the model"):
        """An unfitted model with the manifest's parameters and shapes."""
        raise NotImplementedError

    # -- the parts
    def part_keys(self):
        """The keys of the parts fit makes, in order."""
        raise NotImplementedError

    def part_file(self, key):
        """The file (without .npz) of part `key`."""
        raise NotImplementedError

    def stored_parts(self, folder, manifest=None):
        """The keys of the parts a folder holds (families that resume or
        pick: those its manifest records, or its files when none is
        given)."""
        raise NotImplementedError

    def fit_parts(self, X, Y, todo, after=None, progress=None, log=None, executor=None):
        """Make the parts `todo`, yielding (key, part) as each is done, after
        calling after(key, part) on it in the worker that made it (the
        driver writes the part's file there); progress(n) as parts are
        done, log(message); `executor` (xmlkit.cluster) runs the family's
        tasks on Dask when given."""
        raise NotImplementedError

    def finish_fit(self, X, Y):
        """Work after the parts (PfastreXML: its tail classifiers)."""

    def encode_part(self, part, compact=False):
        """The arrays of a part's file, in the order the file holds them
        (an entry may be a function giving its array: see
        store.save_arrays; compact: for the compact layout)."""
        raise NotImplementedError

    def decode_part(self, arrays, name):
        """The part of a file's `arrays`, checked (file `name` in
        messages). `arrays` is a mapping that reads each array when it is
        looked up: take each once, or copy them into a dict."""
        raise NotImplementedError

    def parts(self):
        """The fitted parts: key -> part."""
        raise NotImplementedError

    def set_parts(self, parts):
        """Hold `parts` (key -> part) as the fitted parts."""
        raise NotImplementedError

    def part_kept(self, part):
        """What fit_folder(keep_trees=False) keeps of a part: all of it."""
        return part

    def require_whole(self):
        """Raise unless every part is whole (not only its shape)."""
        raise NotImplementedError

    # -- besides the parts
    def extra_arrays(self):
        """Arrays besides the parts that the model folder holds: name ->
        dict of arrays."""
        return {}

    def restore_extras(self, read, where):
        """Take back the extra_arrays of a loaded folder: read(name) gives
        the dict of arrays `name` (`where` names the folder in messages)."""

    # -- Dask
    def tree_grower(self, X, Y):
        """grow(key) -> part `key` over X, Y on the calling thread, what it
        prepared (and its grower) kept between calls: what a Dask worker
        holds between its tasks (families with DASK_TASKS that grow parts
        one task each: the trees)."""
        raise NotImplementedError

    def copy_without(self, *names, **attrs):
        """A shallow copy without the attributes `names` and with `attrs`
        set: what a worker process is sent (not the trees or arrays it does
        not need)."""
        import copy
        m = copy.copy(self)
        for name in names:
            m.__dict__.pop(name, None)
        for name, value in attrs.items():
            setattr(m, name, value)
        return m


#: the members of the protocol, for the test that keeps callers to them
MEMBERS = tuple(sorted(n for n in vars(FolderProtocol) if not n.startswith("__")))
