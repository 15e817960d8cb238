"""Ensembles of sparse linear-split trees (the FastXML family).

A tree is a dict of arrays over its nodes (node 0 is the root):

    child  int32 (n_nodes, 2)  first (w·x >= 0) and second child, -1 -1 at leaves
    depth  int32 (n_nodes,)
    w_ptr, w_idx, w_val        CSR rows of split weights (empty rows at leaves);
                               index n_features is the bias feature
    l_ptr, l_idx, l_val        CSR rows of leaf label distributions (labels ascending)

A tree file holds these arrays as they are, in this order (the mapped
layout: a loaded tree is a StoredTree of views of its file, checked before
its first use), or, in the compact layout of earlier folders, as deflated
byte planes (decoded into memory when loaded).
"""
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial

import numpy as np

from xmlkit._ext.file_check import CHILDREN, FINITE, INDICES, POINTERS
from xmlkit._ext.forest_predict import (DamagedTree, ForestKernel, add_row_deltas,
                                        plane_floats, plane_row_deltas)
from xmlkit.csr import CHUNK_ROWS, Rows, model_rows, row_blocks, rows_ascending, stack_rows
from xmlkit import checks, store
from xmlkit.checks import DamagedModel
from xmlkit.errors import XmlkitError
from xmlkit.models.base import usable_threads

TREE_KEYS = ("child", "depth", "w_ptr", "w_idx", "w_val", "l_ptr", "l_idx", "l_val")
#: the forest routes blocks of points a tree at a time: blocks of at most this
#: many rows (about four per thread, at least CHUNK_ROWS)
FOREST_BLOCK = 4096
#: (row, label, feature) effects a block of rows explained at a time holds
EXPLAIN_BLOCK = 1 << 21
#: bytes of a byte plane read at a time when a tree is loaded
PLANE_PIECE = 1 << 16


def check_tree(tree, n_features, n_labels, name):
    """Validate a tree's arrays (from disk) completely, so that prediction
    can trust them: shapes, children after their parent and in range, both
    or neither child at a node, index pointers, indices in range (weights:
    features and the bias n_features; leaves: labels), finite values."""
    missing = [k for k in TREE_KEYS if k not in tree]
    if missing:
        raise DamagedModel(name, f"the tree lacks arrays {missing}")
    child = checks.ints(tree["child"], name, "child")
    if child.ndim != 2 or child.shape[1] != 2 or child.shape[0] == 0:
        raise DamagedModel(name, f"child has shape {child.shape}, expected (nodes, 2)")
    n = child.shape[0]
    checks.ints(tree["depth"], name, "depth", (n,))
    if not (np.all((child == -1) | ((child > np.arange(n)[:, None]) & (child < n)))
            and np.all((child[:, 0] == -1) == (child[:, 1] == -1))):
        raise DamagedModel(name, "child links do not form a tree")
    checks.csr(tree["w_ptr"], tree["w_idx"], tree["w_val"], n, n_features + 1, name, "weight")
    checks.csr(tree["l_ptr"], tree["l_idx"], tree["l_val"], n, n_labels, name, "leaf label")


#: the dtype of each array of a tree, as stored in a mapped tree file
TREE_DTYPES = {"child": np.int32, "depth": np.int32, "w_ptr": np.int64, "w_idx": np.int32,
               "w_val": np.float32, "l_ptr": np.int64, "l_idx": np.int32, "l_val": np.float32}


def encode_tree(tree, compact=False, lazy=False):
    """The arrays a tree is stored as: its own arrays in TREE_KEYS order
    (the mapped layout, every weight row strictly ascending: rows that are
    not, from a C++ tool's tree, are sorted), or with compact=True byte
    planes (decode_tree reads both).

    The compact layout: child and
    depth, then per part (w: split weights, l: leaf labels) the entries per
    node, the indices as byte planes (4, n) of their differences to the
    previous index of the same node, and the values as byte planes of the
    float32s (deflate compresses the planes far better than the interleaved
    bytes: sign/exponent bytes are repetitive). lazy=True: the planes are
    functions making them, for store.save_arrays to make one at a time
    (the planes of a tree are as large as the tree), and the split
    weights' value planes are stored uncompressed: deflate took more than
    half of a FastXML tree file's time for them and shrank them by less
    than a third (their low bytes are noise)."""
    if not compact:
        out = {k: np.ascontiguousarray(tree[k], dtype=TREE_DTYPES[k]) for k in TREE_KEYS}
        if not rows_ascending(out["w_ptr"], out["w_idx"]):
            rows = np.repeat(np.arange(len(out["w_ptr"]) - 1), np.diff(out["w_ptr"]))
            order = np.lexsort((out["w_idx"], rows))
            out["w_idx"], out["w_val"] = out["w_idx"][order], out["w_val"][order]
        return out
    out = {"child": np.asarray(tree["child"], np.int32),
           "depth": np.asarray(tree["depth"], np.int32)}
    for part in ("w", "l"):
        ptr = np.ascontiguousarray(tree[f"{part}_ptr"], np.int64)
        out[f"{part}_count"] = np.diff(ptr).astype(np.int32)
        # (in one pass each: no temporaries the size of the tree)
        planes = {f"{part}_idx_delta_planes": partial(
                      plane_row_deltas, ptr, np.ascontiguousarray(tree[f"{part}_idx"], np.int32)),
                  f"{part}_val_planes": partial(
                      plane_floats, np.ascontiguousarray(tree[f"{part}_val"], np.float32))}
        if lazy:
            if part == "w":
                planes["w_val_planes"] = store.Uncompressed(planes["w_val_planes"])
            out.update(planes)
        else:
            out.update({k: make() for k, make in planes.items()})
    return out


def decode_tree(arrays, name, n_features, n_labels):
    """A tree from the arrays of encode_tree, checked: a StoredTree of a
    mapped file's arrays (whose contents are checked by its verify(), before
    its first use), or a tree decoded into memory (checked here); raises
    XmlkitError if they are malformed."""
    if getattr(arrays, "mapped", False):
        return StoredTree.of(arrays, name, n_features, n_labels)
    tree = _decode_planes(arrays, name)
    check_tree(tree, n_features, n_labels, name)
    return tree


class StoredTree(dict):
    """A tree (dict of arrays) whose arrays are views of its mapped file
    (xmlkit.arrayfile.ArrayFile): shapes and dtypes are checked when it is
    opened; its blocks as a kernel reads them (`blocks`: a
    xmlkit._ext.file_check.BlockFile with the tree's element checks), or
    all at once by verify(). Its weight rows are strictly ascending (the
    mapped layout's rule: xmlkit writes no other). Pickled (sent to a Dask
    worker) as a plain tree, checked first."""

    @classmethod
    def of(cls, file, name, n_features, n_labels):
        arrays = {k: file[k] for k in file if k in TREE_DTYPES}
        missing = [k for k in TREE_KEYS if k not in arrays]
        if missing:
            raise DamagedModel(name, f"the tree lacks arrays {missing}")
        for k, a in arrays.items():
            if a.dtype != TREE_DTYPES[k]:
                raise DamagedModel(name, f"{k} holds {a.dtype} values, not "
                                         f"{np.dtype(TREE_DTYPES[k])}")
        child = arrays["child"]
        if child.ndim != 2 or child.shape[1] != 2 or child.shape[0] == 0:
            raise DamagedModel(name, f"child has shape {child.shape}, expected (nodes, 2)")
        n = child.shape[0]
        for part in ("w", "l"):
            m = arrays[f"{part}_idx"].shape
            if (arrays[f"{part}_ptr"].shape != (n + 1,) or len(m) != 1
                    or arrays[f"{part}_val"].shape != m):
                raise DamagedModel(name, f"the {part} arrays disagree in shape")
        if arrays["depth"].shape != (n,):
            raise DamagedModel(name, f"depth has shape {arrays['depth'].shape}, expected ({n},)")
        tree = cls(arrays)
        tree.file = file
        tree.blocks = file.blocks({
            "child": (CHILDREN, n), "w_ptr": (POINTERS, len(arrays["w_idx"])),
            "w_idx": (INDICES, n_features + 1), "w_val": (FINITE, 0),
            "l_ptr": (POINTERS, len(arrays["l_idx"])), "l_idx": (INDICES, n_labels),
            "l_val": (FINITE, 0)})
        return tree

    def verify(self):
        """Check every block of the tree's file (once); raise XmlkitError
        naming the file if one fails."""
        if not self.blocks.check_all():
            raise self.damaged()

    def damaged(self):
        """The XmlkitError of a block that failed its check."""
        return self.file.failure(self.blocks)

    def release(self):
        """Let the tree's pages go from this process's memory (see
        ArrayFile.release)."""
        self.file.release()

    def __reduce__(self):
        self.verify()
        return dict, ({k: np.array(a) for k, a in self.items()},)


def _decode_planes(arrays, name):
    """A tree from the byte planes of a compact tree file."""
    try:
        tree = {"child": checks.ints(arrays["child"], name, "child").astype(np.int32),
                "depth": checks.ints(arrays["depth"], name, "depth").astype(np.int32)}
        for part in ("w", "l"):
            count = checks.ints(arrays[f"{part}_count"], name, f"{part}_count").astype(np.int64)
            # every size from the file is checked before anything is allocated
            # by it; the planes are read and decoded one at a time, each let
            # go once decoded (arrays reads them lazily: see store.load_arrays)
            n_entries = int(count.sum())
            if count.shape != (len(tree["child"]),) or (count.size and count.min() < 0):
                raise DamagedModel(name, f"{part}_count and the {part} planes disagree")
            ptr = np.zeros(len(count) + 1, np.int64)
            np.cumsum(count, out=ptr[1:])
            tree[f"{part}_ptr"] = ptr
            idx = _unplaned(arrays, f"{part}_idx_delta_planes", n_entries, np.int32, name,
                            part)
            add_row_deltas(ptr, idx)
            tree[f"{part}_idx"] = idx
            tree[f"{part}_val"] = _unplaned(arrays, f"{part}_val_planes", n_entries,
                                            np.float32, name, part)
    except DamagedModel:
        raise
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise DamagedModel(name, f"malformed tree arrays ({exc})") from None
    return tree


def _unplaned(arrays, key, n, dtype, name, part):
    """The n 4-byte values (of `dtype`, bytes as stored) of the byte planes
    (4, n) stored as `key`. From a file's arrays (store.StoredArrays) they
    are read a piece at a time into the values: the planes are never held
    whole."""
    if not hasattr(arrays, "read_npy"):
        planes = checks.ints(arrays[key], name, "byte planes")
        if planes.dtype != np.uint8 or planes.shape != (4, n):
            raise DamagedModel(name, f"{part}_count and the {part} planes disagree")
        # (the planes' columns are the values' bytes, in the machine's order)
        return np.ascontiguousarray(planes.T).view(dtype).reshape(-1)
    shape, stored, read = arrays.read_npy(key)
    if stored != np.uint8 or tuple(shape) != (4, n):
        raise DamagedModel(name, f"{part}_count and the {part} planes disagree")
    out = np.empty(n, dtype)
    by_byte = out.view(np.uint8).reshape(n, 4)
    for b in range(4):
        for j in range(0, n, PLANE_PIECE):
            k = min(PLANE_PIECE, n - j)
            piece = read(k)
            if len(piece) != k:
                raise DamagedModel(name, f"the {part} planes end early")
            by_byte[j:j + k, b] = np.frombuffer(piece, np.uint8)
    return out


def tree_stats(trees):
    """Mean node count, leaf count and depth over trees."""
    nodes = [t["child"].shape[0] for t in trees]
    leaves = [int((t["child"][:, 0] < 0).sum()) for t in trees]
    depth = [int(t["depth"].max()) for t in trees]
    return {"nodes": float(np.mean(nodes)), "leaves": float(np.mean(leaves)),
            "max_depth": float(np.mean(depth))}


class Forest:
    """Trees ready to predict with: one kernel over every tree's arrays
    where they lie (memory, or the pages of mapped tree files: nothing is
    copied or packed). A tree read from a mapped file is verified (digest,
    contents) just before its first use, on the thread that first routes
    through it; the others are checked already (check_tree).

    A prediction routes the points a tree at a time (tasks of one tree and
    a block of rows, on `threads` threads), then adds up each point's
    leaves and keeps its k best labels (tasks of a block of rows). Few
    points (at most CHUNK_ROWS, or one thread) are scored on the calling
    thread in one kernel call. The scores do not depend on the threads or
    blocks, byte for byte."""

    def __init__(self, trees, n_features, n_labels, bias):
        """`trees`: a list of tree dicts (StoredTree or in memory), in the
        order their scores are added up."""
        if not trees:
            raise XmlkitError("the model has no trees")
        self.trees = list(trees)
        self.n_features, self.n_labels, self.bias = int(n_features), int(n_labels), float(bias)
        self.kernel = ForestKernel(
            self.trees, self.n_features, self.n_labels, self.bias,
            [(t.blocks, t.file.spans) if isinstance(t, StoredTree) else None
             for t in self.trees])
        self._pending = set(range(len(self.trees)))
        self._locks = [threading.Lock() for _ in self.trees]

    def ready(self, t):
        """Make tree t ready for the kernel (once: the first caller does,
        others wait for it): a tree in memory is checked whole already (its
        rows tested here for being ascending), a mapped one as it is read."""
        if t not in self._pending:
            return
        with self._locks[t]:
            if t in self._pending:
                tree = self.trees[t]
                mapped = isinstance(tree, StoredTree)
                with self._damage():
                    self.kernel.ready(t, mapped or rows_ascending(tree["w_ptr"],
                                                                  tree["w_idx"]))
                self._pending.discard(t)

    def check(self, threads=1):
        """Check every tree whole now (a mapped tree: every block of its file
        not checked yet), on `threads` threads; raises XmlkitError naming a
        damaged file."""
        threads = usable_threads(threads)
        def whole(t):
            if isinstance(self.trees[t], StoredTree):
                self.trees[t].verify()
            self.ready(t)
        todo = range(len(self.trees))
        if threads > 1 and len(self.trees) > 1:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(whole, todo))
        else:
            for t in todo:
                whole(t)

    def _ready_all(self):
        if self._pending:
            for t in sorted(self._pending):
                self.ready(t)

    @contextmanager
    def _damage(self):
        """A kernel's DamagedTree as the XmlkitError naming the file."""
        try:
            yield
        except DamagedTree as exc:
            raise self.trees[exc.args[0]].damaged() from None

    def release(self, t):
        """Let tree t's pages go from this process's memory, if it is mapped."""
        if isinstance(self.trees[t], StoredTree):
            self.trees[t].release()

    def predict(self, X, k=None, threads=1, progress=None, then=None):
        """Mean leaf distribution over trees for each row of X (Rows or any
        scipy sparse matrix), as :class:`Rows`; only the k best labels per
        row when k is given (then: see predict_pieces)."""
        X = model_rows(X, self.n_features)
        if X.shape[0] <= CHUNK_ROWS:         # (few rows: one kernel call, here)
            self._ready_all()
            with self._damage():
                ptr, idx, val = self.kernel.predict_rows(X, 0, X.shape[0],
                                                         0 if k is None else int(k))
            if progress is not None:
                progress(X.shape[0])
            S = Rows(ptr, idx, val, (X.shape[0], self.n_labels))
            return S if then is None else then(0, X.shape[0], S)
        pieces = list(self.predict_pieces(X, k, threads, progress, then=then))
        return stack_rows([(p.indptr, p.indices, p.data) for p in pieces],
                          (X.shape[0], self.n_labels))

    def predict_pieces(self, X, k=None, threads=1, progress=None, finish=None, release=False,
                       then=None):
        """predict()'s rows as consecutive pieces (Rows), made on the
        threads a few ahead of the one asked for, each passed through
        then(r0, r1, piece) (rows r0..r1-1 of X: PfastreXML re-ranks them)
        and finish(piece) there when given (xml-predict formats them).
        release=True: each mapped tree's pages leave this process's memory
        once the rows are routed through it (they stay in the page cache),
        so that memory holds about a tree per thread, not the forest."""
        threads = usable_threads(threads)
        X = model_rows(X, self.n_features)
        n, T = X.shape[0], len(self.trees)
        # (each thread adds up leaf scores in arrays of L values)
        from xmlkit._memory import require_memory
        from xmlkit.models.family import PER_THREAD_BYTES
        used = min(threads, max(1, n))
        require_memory(PER_THREAD_BYTES * used * self.n_labels,
                       f"predicting L = {self.n_labels} labels on {used} thread(s)",
                       "; fewer threads may help" if used > 1 else "")
        topk = 0 if k is None else int(k)
        finish = finish or (lambda piece: piece)

        def rows(r0, r1, out):
            ptr, idx, val = out
            piece = Rows(ptr, idx, val, (r1 - r0, self.n_labels))
            return finish(piece if then is None else then(r0, r1, piece))
        if n <= CHUNK_ROWS:
            self._ready_all()
            with self._damage():
                piece = rows(0, n, self.kernel.predict_rows(X, 0, n, topk))
            if progress is not None:
                progress(n)
            yield piece
            return
        leaves = np.empty((T, n), np.int32)
        # route: tasks of a tree and a block of rows, about four per thread
        # (at least one tree's worth of rows each), trees in turn
        per_tree = max(1, min(-(-4 * threads // T), -(-n // CHUNK_ROWS)))
        blocks = row_blocks(n, -(-n // per_tree))
        lock = threading.Lock()
        done = [0]
        left = [len(blocks)] * T

        def route(task):
            b, t = task
            self.ready(t)
            with self._damage():
                self.kernel.route(t, X, b[0], b[1], leaves)
            if release:
                with lock:
                    left[t] -= 1
                    last = left[t] == 0
                if last:
                    self.release(t)
            if progress is not None:
                with lock:          # (a row counts once every tree has routed it)
                    before = done[0] // T
                    done[0] += b[1] - b[0]
                    step = done[0] // T - before
                if step:
                    progress(step)

        def score(b):
            with self._damage():
                return rows(b[0], b[1], self.kernel.score_leaves(leaves, b[0], b[1], topk))
        bounds = row_blocks(n, forest_block(n, threads))
        with ThreadPoolExecutor(threads) if threads > 1 else _Inline() as pool:
            list(pool.map(route, [(b, t) for b in blocks for t in range(T)]))
            for i in range(0, len(bounds), 2 * threads):
                yield from pool.map(score, bounds[i:i + 2 * threads])


def tree_effects(forest, R, S=None, threads=1, n_top=0, k=None, turned=False):
    """(S, entry, feature, effect): the labels of each row of R (Rows,
    explained_rows) explained, S (Rows: given, or with S None each row's k
    best as Forest.predict gives them), and every feature whose removal
    changes a tree's route with its effect on a label of its row (an entry
    of S): the exact leave-one-feature-out effects of
    xmlkit._ext.forest_explain.explain_rows, in blocks of rows on
    `threads` threads (n_top > 0: a label's n_top largest only). Every
    tree is checked whole first. turned=True: also, per entry of R, the
    number of trees whose leaf its removal changes (a sixth element)."""
    from xmlkit._ext.forest_explain import explain_rows
    from xmlkit.explanation import pair_blocks
    forest.check(threads)
    n = R.shape[0]
    if S is None:
        k = int(k)
        # (blocks as if every row had k labels)
        S_like = Rows(np.arange(n + 1, dtype=np.int64) * k, None, None, (n, forest.n_labels))
    else:
        S_like = S
        S_ptr = np.ascontiguousarray(S.indptr, np.int64)

    def one(b):
        r0, r1 = b
        lp, li = (None, None) if S is None else \
            (S_ptr[r0:r1 + 1] - S_ptr[r0], S.indices[S_ptr[r0]:S_ptr[r1]])
        ptr, pos, feat, eff, rows, moved = explain_rows(forest.kernel, R, r0, r1, lp, li,
                                                        k=k or 0, n_top=n_top)
        starts = rows[0] if S is None else lp
        local = np.repeat(np.arange(r1 - r0), np.diff(ptr))
        return rows, starts[local] + pos, feat, eff, moved
    # blocks of rows that go down a tree together: about four per thread,
    # each of at most EXPLAIN_BLOCK (row, label, feature) effects
    pairs = int(np.dot(np.diff(S_like.indptr).astype(np.int64), np.diff(R.indptr)))
    bounds = pair_blocks(R, S_like, limit=min(EXPLAIN_BLOCK, pairs // (4 * threads) + 1))
    with ThreadPoolExecutor(threads) if threads > 1 and len(bounds) > 1 else _Inline() as pool:
        parts = list(pool.map(one, bounds))
    if S is None:
        S = stack_rows([p[0] for p in parts], (n, forest.n_labels))
    # (entries numbered within each block: offset by the block's first entry)
    firsts = [int(S.indptr[b[0]]) for b in bounds]
    if not parts:
        out = (S, np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0))
        return out + (np.zeros(R.nnz, np.int32),) if turned else out
    out = (S, np.concatenate([p[1] + a for p, a in zip(parts, firsts)]),
           np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts]))
    return out + (np.concatenate([p[4] for p in parts]),) if turned else out


class _Inline:
    """A pool of no thread: map runs on the calling thread."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, items):
        return map(fn, items)


def forest_block(n, threads):
    """Rows per block whose scores are added up at a time: about four blocks
    per thread, CHUNK_ROWS..FOREST_BLOCK (the scores do not depend on the
    blocks)."""
    return min(FOREST_BLOCK, max(CHUNK_ROWS, -(-n // (4 * threads))))
