"""Training and prediction on a Dask cluster (`pip install 'xmlkit[dask]'`).

Dask distributed does the scheduling, the transport and the retries: a task
of a worker that dies is run again elsewhere by the scheduler. What is ours
is only what a task computes, and it is the code of a local run:

- a tree task grows tree t with the family's own `_grow_trees(X, Y, [t])`
  (one thread), seeded by (seed, t) as always, and returns the tree; the
  submitting process writes each tree into the model folder as it arrives,
  with the driver's writer, so the folder is the one a local run writes;
- a prediction task scores a block of rows with the model's own `predict`;
  the submitting process writes the blocks in order;
- a label-block task trains one block of a linear model's labels.

The training data reach each worker once: scattered to every worker
(`data=None`), or, when every worker sees the same files
(`SharedData`), read by each worker itself the first time a task of the run
lands there (and again by a replacement worker).
"""
import contextlib
import logging
import os

from xmlkit.errors import XmlkitError

#: seconds to wait for a scheduler before giving up
CONNECT_TIMEOUT = 20
#: blocks of rows in flight per worker while predicting
ROW_BLOCKS_PER_WORKER = 2
#: rows per prediction task: at most this, fewer when the file is small
TASK_ROWS = 20000
INSTALL = "pip install 'xmlkit[dask]'"


def require():
    """The distributed module, or a one-line error saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise XmlkitError(f"Dask needs its distributed package: {INSTALL}") from None
    return distributed


def parse_address(address):
    """('local', N) for 'local:N', else ('remote', address)."""
    if address.startswith("local:"):
        n = address[len("local:"):]
        if not (n.isascii() and n.isdigit()) or not n.strip("0"):
            raise XmlkitError(f"address {address}: local:N needs a number of workers N >= 1",
                              param="address")
        cores = usable_cores()
        if len(n.lstrip("0")) > 9 or int(n) > cores:
            raise XmlkitError(f"address {address}: this machine has {cores} usable cores; "
                              f"local:N starts N worker processes, so N may be at most {cores}",
                              param="address")
        return "local", int(n)
    if not address:
        raise XmlkitError("address must be a scheduler address (tcp://HOST:8786) or local:N",
                          param="address")
    return "remote", address


def usable_cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):     # pragma: no cover (not Linux)
        return os.cpu_count() or 1


def _client_within(distributed, where, timeout):
    """distributed.Client(where), or TimeoutError after `timeout` s: the
    Client's own timeout does not cover a peer that accepts the connection
    and never answers, so the Client is made on a daemon thread (left behind,
    not waited for, when it does not answer)."""
    import threading
    made = {}

    def make():
        try:
            made["client"] = distributed.Client(where, timeout=f"{timeout}s")
        except BaseException as exc:        # (handed to the waiting thread)
            made["error"] = exc
    thread = threading.Thread(target=make, name="xmlkit-dask-connect", daemon=True)
    thread.start()
    thread.join(timeout + 1)
    if thread.is_alive():
        raise TimeoutError("no answer")
    if "error" in made:
        raise made["error"]
    return made["client"]


@contextlib.contextmanager
def connect(address, timeout=CONNECT_TIMEOUT):
    """A distributed.Client for `address`: 'local:N' starts a LocalCluster of
    N single-threaded worker processes on this machine (closed on exit);
    anything else is a scheduler's address, reached within `timeout` s."""
    kind, where = parse_address(address)
    distributed = require()
    cluster = None
    # (the scheduler's and workers' own log lines are not the user's business)
    for name in ("distributed", "distributed.worker", "distributed.scheduler",
                 "distributed.nanny", "distributed.core", "distributed.client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if kind == "local":
        try:
            cluster = distributed.LocalCluster(n_workers=where, threads_per_worker=1,
                                               processes=True, dashboard_address=None,
                                               silence_logs=logging.CRITICAL)
        except Exception as exc:    # pragma: no cover (ports, resources)
            raise XmlkitError(f"address {address}: could not start local workers ({exc})",
                              param="address") from None
        client = distributed.Client(cluster)
    else:
        try:
            client = _client_within(distributed, where, timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            raise XmlkitError(f"address {address}: no Dask scheduler answered within "
                              f"{timeout} s ({str(exc).splitlines()[0] if str(exc) else exc})",
                              param="address") from None
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def worker_count(client):
    return max(1, len(client.scheduler_info().get("workers", {})))


class SharedData:
    """Training files every worker can read at the same path: each worker
    process reads them once (the first task of the run there) and keeps them."""

    _cache = {}

    def __init__(self, paths, index_base, min_points):
        self.paths = tuple(str(p) for p in paths)
        self.index_base = index_base
        self.min_points = min_points

    def key(self):
        return (self.paths, self.index_base, self.min_points)

    def rows(self):
        key = self.key()
        if key not in SharedData._cache:
            from xmlkit.io import read_xc
            from xmlkit.checks import training_rows
            SharedData._cache.clear()           # one data set at a time per worker
            if len(self.paths) == 1:
                d = read_xc(self.paths[0], index_base=self.index_base, layout="dataset")
                X, Y = d.feature_rows, d.label_rows
            else:
                X = read_xc(self.paths[0], index_base=self.index_base,
                            layout="matrix").feature_rows
                Y = read_xc(self.paths[1], index_base=self.index_base,
                            layout="matrix").feature_rows
            SharedData._cache[key] = training_rows(X, Y, self.min_points)
        return SharedData._cache[key]


def _rows_of(data):
    return data.rows() if isinstance(data, SharedData) else data


#: per worker thread: (model, data, grow) of its last tree task, so that the
#: next task of the same run reuses the prepared data and the grower's buffers
_GROWERS = {}


def _grow_tree(model, data, t):
    """On a worker: tree t, grown by the family's own grower on one thread
    (kept for the thread's next task of the same model and data)."""
    import threading
    key = threading.get_ident()
    held = _GROWERS.get(key)
    same_data = held is not None and (held[1] is data or (
        isinstance(data, SharedData) and isinstance(held[1], SharedData)
        and held[1].key() == data.key()))
    if not same_data or held[0] is not model:
        _GROWERS.pop(key, None)             # (frees the last run's data first)
        X, Y = _rows_of(data)
        held = (model, data, model.tree_grower(X, Y))
        _GROWERS[key] = held
    return t, held[2](t)


def _worker_copy(model):
    """The model as a tree task needs it: parameters and the state fit set up
    before the trees (shapes, propensities, feature scaling), no trees, one
    thread per task."""
    return model.copy_without("trees_", "_packed", "tail_", threads=1)


def _predict_block(shared, rows):
    """On a worker: the model's own prediction of a block of rows."""
    sent, kwargs = shared
    model = sent.get() if isinstance(sent, FolderModel) else sent
    return model.predict(rows, **kwargs)


class FolderModel:
    """A model that every worker loads from its folder itself (the same path
    and manifest as here): a mapped folder's pages are then shared by the
    workers of a machine (the page cache's copy) instead of a copy sent to
    each. A worker keeps the last model it loaded."""

    _cache = {}

    def __init__(self, folder, trees, manifest_digest):
        self.folder, self.trees, self.digest = str(folder), trees, manifest_digest

    def key(self):
        return (self.folder, None if self.trees is None else tuple(self.trees), self.digest)

    def get(self):
        key = self.key()
        if key not in FolderModel._cache:
            from xmlkit.models import load_model
            if folder_digest(self.folder) != self.digest:
                raise XmlkitError(f"{self.folder}: the model folder changed on a worker")
            FolderModel._cache.clear()          # (one model at a time per worker)
            FolderModel._cache[key] = load_model(self.folder, self.trees)
        return FolderModel._cache[key]


def folder_digest(folder):
    """xmlkit.store.manifest_digest (a function of this module, so that
    workers run it by reference)."""
    from xmlkit.store import manifest_digest
    return manifest_digest(folder)


def split_pieces(pieces, size):
    """The rows of `pieces` (Rows) as Rows of at most `size` rows each (the
    blocks of csr.row_blocks within each piece)."""
    from xmlkit.csr import Rows, row_blocks
    for R in pieces:
        for a, b in row_blocks(R.shape[0], size):
            p0, p1 = int(R.indptr[a]), int(R.indptr[b])
            yield Rows(R.indptr[a:b + 1] - R.indptr[a], R.indices[p0:p1], R.data[p0:p1],
                       (b - a, R.shape[1]))


def _result(future, what):
    """The result of the task `what`; its failure as one XmlkitError naming
    it (an error of ours, or workers that died on every try), other
    exceptions as they are."""
    distributed = require()
    try:
        return future.result()
    except XmlkitError as exc:
        raise XmlkitError(f"{what}: {exc}") from None
    except distributed.KilledWorker:
        raise XmlkitError(f"{what}: the Dask workers that ran it died each time (killed, "
                          "or out of memory)") from None


class DaskExecutor:
    """Runs a driver's tasks on the cluster of `client`; `data`: None to
    scatter the training rows, or a SharedData the workers read."""

    def __init__(self, client, data=None):
        self.client = client
        self.data = data

    def _data_future(self, X, Y):
        if self.data is not None:
            return self.data
        # (one object: every task of the worker then gets that same tuple)
        [both] = self.client.scatter([(X, Y)], broadcast=True, hash=False)
        return both

    def grow_trees(self, model, X, Y, todo, after=None):
        """Yield (t, tree) for the trees `todo` as workers finish them;
        after(t, tree) runs here, in the submitting process."""
        distributed = require()
        if not todo:
            return
        data = self._data_future(X, Y)
        [worker_model] = self.client.scatter([_worker_copy(model)], broadcast=True, hash=False)
        futures = {self.client.submit(_grow_tree, worker_model, data, t, pure=False): t
                   for t in todo}
        try:
            for f in distributed.as_completed(list(futures)):
                grown = _result(f, f"tree {futures[f]}")
                if after is not None:
                    after(*grown)
                yield grown
        finally:
            for f in futures:
                f.cancel()

    def predict_blocks(self, model, kwargs, pieces, n_rows, whole=False):
        """model.predict(rows, **kwargs) of the rows of `pieces` (Rows), as
        tasks of about n_rows / (4 workers) rows (at most TASK_ROWS, the
        most when n_rows is None: not known ahead; each piece whole when
        `whole`), yielded in order."""
        import math
        m = self._shared_model(model)
        kwargs = {**kwargs, "threads": 1}
        size = TASK_ROWS if n_rows is None else \
            max(1, min(TASK_ROWS, math.ceil(n_rows / (4 * worker_count(self.client)))))
        blocks = pieces if whole else split_pieces(pieces, size)
        yield from self.map_blocks(_predict_block, (m, kwargs), blocks)

    def _shared_model(self, model):
        """What the workers get of `model`: a FolderModel when it was loaded
        from a folder that every worker reads at the same path with the same
        manifest (each maps it: one copy per machine), else a copy of it."""
        source = getattr(model, "source_", None)
        if source is not None:
            folder, trees, digest = source             # (the manifest when it was loaded)
            seen = self.client.run(folder_digest, folder) if digest else {}
            if digest and seen and all(d == digest for d in seen.values()):
                return FolderModel(folder, trees, digest)
        return model.copy_without(*model.CACHES)     # (rebuilt there)

    def map_blocks(self, fn, shared, blocks, window=None):
        """fn(shared, block) for each block, on the workers; results yielded
        in the order of `blocks` (at most `window` blocks in flight);
        `shared` is sent to every worker once."""
        window = window or ROW_BLOCKS_PER_WORKER * worker_count(self.client)
        [shared_f] = self.client.scatter([shared], broadcast=True, hash=False)
        pending = []
        blocks = iter(blocks)
        try:
            while True:
                while len(pending) < window:
                    block = next(blocks, None)
                    if block is None:
                        break
                    pending.append(self.client.submit(fn, shared_f, block, pure=False))
                if not pending:
                    return
                yield _result(pending.pop(0), "a block of rows")
        finally:
            for f in pending:
                f.cancel()
