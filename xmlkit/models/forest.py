"""Ensembles of sparse linear-split trees (the FastXML family).

A tree is a dict of arrays over its nodes (node 0 is the root):

    child  int32 (n_nodes, 2)  first (w·x >= 0) and second child, -1 -1 at leaves
    depth  int32 (n_nodes,)
    w_ptr, w_idx, w_val        CSR rows of split weights (empty rows at leaves);
                               index n_features is the bias feature
    l_ptr, l_idx, l_val        CSR rows of leaf label distributions (labels ascending)
"""
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np

from xmlkit._ext.forest_predict import (ForestKernel, LeafSums, add_row_deltas, ascending_rows,
                                        plane_floats, plane_row_deltas)
from xmlkit.csr import CHUNK_ROWS, Rows, model_rows, row_blocks, score_rows, stack_rows
from xmlkit import checks, store
from xmlkit.checks import DamagedModel
from xmlkit.errors import XmlkitError

TREE_KEYS = ("child", "depth", "w_ptr", "w_idx", "w_val", "l_ptr", "l_idx", "l_val")
#: the forest routes blocks of points a tree at a time: blocks of at most this
#: many rows (about four per thread, at least CHUNK_ROWS)
FOREST_BLOCK = 4096
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


def encode_tree(tree, lazy=False):
    """The arrays a tree is stored as on disk (see decode_tree): child and
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


def decode_tree(arrays, name):
    """A tree from the arrays of encode_tree; raises XmlkitError if they are
    malformed."""
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
    whole (a tree of the 100k-point set has 3 MB of them per array)."""
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


def rows_ascending(ptr, idx):
    """Whether the indices of every CSR row are strictly ascending (xmlkit's
    trees are; a C++ tool's file need not be). In one pass, without
    temporaries the size of the tree."""
    return ascending_rows(np.ascontiguousarray(ptr, dtype=np.int64),
                          np.ascontiguousarray(idx, dtype=np.int32))


class PackedForest:
    """Trees concatenated into flat arrays for the Cython predictor."""

    def __init__(self, trees, n_features, n_labels, bias, release=None):
        """`trees`: a list of tree dicts; `release(i)` (optional) is called
        once tree i is copied in, so that the caller can let it go (the
        packed arrays are allocated whole first: the trees are never held
        twice)."""
        if not trees:
            raise XmlkitError("the model has no trees")
        self.n_features, self.n_labels, self.bias = int(n_features), int(n_labels), float(bias)
        nodes = [t["child"].shape[0] for t in trees]
        n_w = [len(t["w_idx"]) for t in trees]
        n_l = [len(t["l_idx"]) for t in trees]
        self.roots = np.concatenate([[0], np.cumsum(nodes[:-1])]).astype(np.int32)
        self.child = np.empty((sum(nodes), 2), np.int32)
        self.w_ptr = np.zeros(sum(nodes) + 1, np.int64)
        self.l_ptr = np.zeros(sum(nodes) + 1, np.int64)
        self.w_idx, self.w_val = np.empty(sum(n_w), np.int32), np.empty(sum(n_w), np.float32)
        self.l_idx, self.l_val = np.empty(sum(n_l), np.int32), np.empty(sum(n_l), np.float32)
        n_off = w_off = l_off = 0
        for i, t in enumerate(trees):
            n = nodes[i]
            c = t["child"]
            self.child[n_off:n_off + n] = np.where(c >= 0, c + n_off, -1)
            self.w_ptr[n_off + 1:n_off + n + 1] = t["w_ptr"][1:] + w_off
            self.l_ptr[n_off + 1:n_off + n + 1] = t["l_ptr"][1:] + l_off
            self.w_idx[w_off:w_off + n_w[i]] = t["w_idx"]
            self.w_val[w_off:w_off + n_w[i]] = t["w_val"]
            self.l_idx[l_off:l_off + n_l[i]] = t["l_idx"]
            self.l_val[l_off:l_off + n_l[i]] = t["l_val"]
            n_off, w_off, l_off = n_off + n, w_off + n_w[i], l_off + n_l[i]
            c = t = None            # (so that release(i) can let the tree go)
            if release is not None:
                release(i)
        self.ascending = rows_ascending(self.w_ptr, self.w_idx)

    def predict(self, X, k=None, threads=1, progress=None):
        """Mean leaf distribution over trees for each row of X (Rows or any
        scipy sparse matrix), as :class:`Rows`; only the k best labels per row
        when k is given."""
        X = model_rows(X, self.n_features)
        kernel = ForestKernel(self.roots, self.child, self.w_ptr, self.w_idx, self.w_val,
                              self.l_ptr, self.l_idx, self.l_val,
                              self.n_features, self.n_labels, self.bias, self.ascending)
        topk = 0 if k is None else int(k)

        def run(r0, r1):
            return kernel.predict_rows(X, r0, r1, topk)
        return score_rows(run, X.shape[0], self.n_labels, threads, progress,
                          forest_block(X.shape[0], threads))


def forest_block(n, threads):
    """Rows per block a forest routes at a time: the larger the block, the
    more points share each scattered weight row (the scores do not depend
    on the blocks); about four blocks per thread, CHUNK_ROWS..FOREST_BLOCK."""
    return min(FOREST_BLOCK, max(CHUNK_ROWS, -(-n // (4 * threads))))


class StreamedForest:
    """Trees read one at a time while predicting, as the C++ tool does: each
    tree routes the points, and the leaves they reached are kept (LeafSums:
    the points' leaf ids and those leaves' label rows), then the tree goes;
    the scores are added up once every tree is done. One tree is in memory
    at a time, besides the points and their leaves. What xml-predict uses
    for a folder's trees (the same scores as PackedForest, byte for byte).
    Every predict call reads the trees again."""

    def __init__(self, load, n_trees, n_features, n_labels, bias):
        """`load(i)` -> the dict of tree i (i < n_trees), checked."""
        if n_trees < 1:
            raise XmlkitError("the model has no trees")
        self.load, self.n_trees = load, int(n_trees)
        self.n_features, self.n_labels, self.bias = int(n_features), int(n_labels), float(bias)

    def predict(self, X, k=None, threads=1, progress=None):
        """As PackedForest.predict; `progress(rows)` as each tree is done
        (the rows' share of the trees)."""
        # (once the pieces are all made, the leaves go: then they are stacked)
        pieces = list(self.predict_pieces(X, k, threads, progress))
        return stack_rows([(p.indptr, p.indices, p.data) for p in pieces],
                          (sum(p.shape[0] for p in pieces), self.n_labels))

    def predict_pieces(self, X, k=None, threads=1, progress=None):
        """predict()'s rows as consecutive pieces (Rows), made as they are
        asked for (a few per thread ahead), for a writer that writes each
        as it comes: the scores are never held whole."""
        X = model_rows(X, self.n_features)
        sums, block = self._leaves(X, threads, progress)
        topk = 0 if k is None else int(k)

        def piece(b):
            ptr, idx, val = sums.score_rows(b[0], b[1], topk)
            return Rows(ptr, idx, val, (b[1] - b[0], self.n_labels))
        bounds = row_blocks(X.shape[0], block)
        with ThreadPoolExecutor(threads) as pool:
            for i in range(0, len(bounds), 2 * threads):
                yield from pool.map(piece, bounds[i:i + 2 * threads])

    def _leaves(self, X, threads, progress):
        """The leaves the rows of X reach in every tree (LeafSums), a tree
        read at a time, and the rows per block of the work."""
        n, T = X.shape[0], self.n_trees
        sums = LeafSums(n, self.n_labels, T)
        block = forest_block(n, threads)
        leaves = np.empty(n, np.int32)
        with ThreadPoolExecutor(threads) as pool:
            for i in range(T):
                tree = self.load(i)
                kernel = ForestKernel([0], tree["child"], tree["w_ptr"], tree["w_idx"],
                                      tree["w_val"], tree["l_ptr"], tree["l_idx"],
                                      tree["l_val"], self.n_features, self.n_labels,
                                      self.bias, rows_ascending(tree["w_ptr"], tree["w_idx"]))

                def route(b, kernel=kernel):
                    leaves[b[0]:b[1]] = kernel.route_rows(X, *b)[:, 0]
                list(pool.map(route, row_blocks(n, block)))
                sums.add_tree(tree["l_ptr"], tree["l_idx"], tree["l_val"], leaves)
                tree = kernel = route = None    # (the tree goes here)
                if progress is not None:
                    progress(n * (i + 1) // T - n * i // T)
        return sums, block
