"""Reading model folders of the original C++ FastXML (v2), PfastreXML and
Parabel tools.

    <folder>/param     10 lines: num_Xf num_Y log_loss_coeff max_leaf lbl_per_leaf
                       bias num_thread start_tree num_tree quiet
                       (PfastreXML: 3 more, pfswitch gamma alpha)
    <folder>/w         PfastreXML trained with pfswitch 0: the label centroids,
                       a sparse matrix file 'L D+1'
    <folder>/<t>.tree  node count, then per node five lines: is_leaf,
                       'pos neg' children, depth, training point list,
                       'k id:val ...' (leaf labels or split weights)

Parabel's folder (the param file's 15 values, PARABEL_KEYS):

    <folder>/<t>.tree  num_Xf + 1 (the bias), num_Y, node count, then per node:
                       is_leaf, 'pos neg' children, depth, 'k y1 .. yk' (its
                       labels), and its classifiers as a sparse matrix: 'nc nr'
                       then nc lines 'id:val ...' (a leaf: one per label, in
                       order; else the pos child's, then the neg child's)

The trees are converted to xmlkit's in-memory layouts (xmlkit.models.forest,
xmlkit.models.parabel); the training point lists are skipped.
"""
from pathlib import Path

import numpy as np

from xmlkit.errors import InvalidParameterError, XmlkitError
from xmlkit.models.base import C_INT_MAX
from xmlkit.models.forest import check_tree

PARAM_KEYS = ("num_Xf", "num_Y", "log_loss_coeff", "max_leaf", "lbl_per_leaf", "bias",
              "num_thread", "start_tree", "num_tree", "quiet")
PFASTRE_KEYS = ("pfswitch", "gamma", "alpha")
PARABEL_KEYS = ("num_Xf", "num_Y", "num_thread", "start_tree", "num_tree", "classifier_cost",
                "max_leaf", "bias", "classifier_threshold", "centroid_threshold",
                "clustering_eps", "classifier_maxitr", "classifier_kind", "quiet", "beam_width")


def is_cpp_model(folder):
    folder = Path(folder)
    return (folder / "param").is_file() and any(folder.glob("*.tree"))


def read_param(folder):
    path = Path(folder) / "param"
    try:
        lines = path.read_text().split()
    except (OSError, UnicodeDecodeError) as exc:
        raise XmlkitError(f"{path}: unreadable ({exc})") from None
    if len(lines) not in (len(PARAM_KEYS), len(PARAM_KEYS) + len(PFASTRE_KEYS),
                          len(PARABEL_KEYS)):
        raise XmlkitError(f"{path}: expected {len(PARAM_KEYS)} values (FastXML), "
                          f"{len(PARAM_KEYS) + len(PFASTRE_KEYS)} (PfastreXML) or "
                          f"{len(PARABEL_KEYS)} (Parabel), found {len(lines)}")
    try:
        values = [float(v) for v in lines]
    except ValueError:
        raise XmlkitError(f"{path}: malformed value") from None
    keys = PARABEL_KEYS if len(lines) == len(PARABEL_KEYS) else PARAM_KEYS + PFASTRE_KEYS
    param = dict(zip(keys, values))
    for key, v in param.items():
        if not np.isfinite(v):
            raise XmlkitError(f"{path}: {key} must be a finite number, got {v:g}")
    for key, lo in (("num_Xf", 1), ("num_Y", 1), ("start_tree", 0), ("num_tree", 0),
                    ("max_leaf", 1), ("lbl_per_leaf", 1), ("classifier_maxitr", 1),
                    ("classifier_kind", 0), ("beam_width", 1)):
        if key not in param:
            continue
        v = param[key]
        if not (v == int(v) and lo <= v <= C_INT_MAX):
            raise XmlkitError(f"{path}: {key} must be a whole number in [{lo}, 2^31), got {v:g}")
    return param


def _pairs(path, lineno, line):
    toks = line.split()
    try:
        k = int(toks[0])
        flat = " ".join(toks[1:]).replace(":", " ").split()
        idx = np.array(flat[0::2], dtype=np.int64)
        val = np.array(flat[1::2], dtype=np.float64)
    except (ValueError, IndexError, OverflowError):
        raise XmlkitError(f"{path}:{lineno}: malformed 'k id:val ...' line") from None
    if len(idx) != k or len(val) != k:
        raise XmlkitError(f"{path}:{lineno}: says {k} pairs but holds {len(idx)}")
    return idx, val


def _cat(parts, dtype):
    """The arrays `parts` end to end, as dtype (empty when there are none)."""
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def read_tree(path, n_features, n_labels):
    path = Path(path)
    try:
        lines = path.read_text().split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise XmlkitError(f"{path}: unreadable ({exc})") from None
    try:
        n = int(lines[0])
    except (ValueError, IndexError):
        raise XmlkitError(f"{path}:1: expected the node count") from None
    if n < 1:
        raise XmlkitError(f"{path}:1: node count {n} is not positive")
    if len(lines) < 1 + 5 * n:
        raise XmlkitError(f"{path}: truncated ({n} nodes need {1 + 5 * n} lines)")
    child = np.full((n, 2), -1, dtype=np.int32)
    depth = np.zeros(n, dtype=np.int32)
    w_ptr, l_ptr = [0], [0]
    w_idx, w_val, l_idx, l_val = [], [], [], []
    for i in range(n):
        b = 1 + 5 * i
        try:
            leaf = int(lines[b]) == 1
            pos, neg = (int(v) for v in lines[b + 1].split())
            depth[i] = int(lines[b + 2])
        except (ValueError, OverflowError):
            raise XmlkitError(f"{path}:{b + 1}: malformed node header") from None
        idx, val = _pairs(path, b + 5, lines[b + 4])
        if leaf:
            l_idx.append(idx)
            l_val.append(val)
        else:
            if not (i < pos < n and i < neg < n):
                raise XmlkitError(f"{path}:{b + 2}: children {pos} {neg} of node {i} are "
                                  f"outside the tree's {n} nodes")
            child[i] = (pos, neg)
            w_idx.append(idx)
            w_val.append(val)
        w_ptr.append(w_ptr[-1] + (0 if leaf else len(idx)))
        l_ptr.append(l_ptr[-1] + (len(idx) if leaf else 0))

    tree = {"child": child, "depth": depth,
            "w_ptr": np.asarray(w_ptr, np.int64), "w_idx": _cat(w_idx, np.int32),
            "w_val": _cat(w_val, np.float32),
            "l_ptr": np.asarray(l_ptr, np.int64), "l_idx": _cat(l_idx, np.int32),
            "l_val": _cat(l_val, np.float32)}
    check_tree(tree, n_features, n_labels, str(path))
    return tree


def load_cpp_model(folder, trees=None):
    """A FastXML or PfastreXML model (xmlkit.models) from a C++ folder (the
    param file's length tells which).

    `trees` defaults to the range the folder's param names (start_tree,
    num_tree), as fastXML_predict does."""
    from xmlkit.models.fastxml import FastXML
    from xmlkit.models.pfastrexml import PfastreXML
    param = read_param(folder)
    if "beam_width" in param:
        return load_cpp_parabel(folder, param, trees)
    start, num = int(param["start_tree"]), int(param["num_tree"])
    wanted = list(range(start, start + num)) if trees is None else list(trees)
    common = dict(bias=param["bias"], log_loss_coeff=param["log_loss_coeff"],
                  max_leaf=int(param["max_leaf"]), labels_per_leaf=int(param["lbl_per_leaf"]))
    if "pfswitch" in param:
        model = PfastreXML(**common, trees_only=bool(param["pfswitch"] != 0),
                           gamma=param["gamma"], alpha=param["alpha"])
    else:
        model = FastXML(**common)
    try:
        model._validate_params()
    except InvalidParameterError as exc:
        raise XmlkitError(f"{folder}/param: {exc}") from None
    model.n_features_in_, model.n_labels_ = int(param["num_Xf"]), int(param["num_Y"])
    if "pfswitch" in param and not model.params.trees_only:
        model.tail_ = read_centroids(Path(folder) / "w", model.n_features_in_, model.n_labels_)
    model.trees_ = {}
    for t in wanted:
        path = Path(folder) / f"{t}.tree"
        if not path.is_file():
            raise XmlkitError(f"{folder}: has no tree file {t}.tree")
        model.trees_[t] = read_tree(path, model.n_features_in_, model.n_labels_)
    _check_bias_slot(folder, model.trees_, model.n_features_in_)
    return model


#: internal nodes from which a forest whose splits never weight the bias
#: feature is refused (the C++ tools' splits weight it in about a quarter of
#: the nodes, by the reference models: 0.75^32 < 1e-4)
BIAS_NODES = 32


def _check_bias_slot(folder, trees, num_xf):
    """The C++ tools append the bias as feature num_Xf (0-based, after the
    data's), and about a quarter of the splits give it a weight. A param
    file whose num_Xf is larger than the trees' (edited, or of another
    model) puts it elsewhere: the bias would be read as a data feature.
    Refused when BIAS_NODES internal nodes or more weight no feature at
    num_Xf (one past it is refused by check_tree)."""
    used = [t["w_idx"] for t in trees.values() if len(t["w_idx"])]
    internal = sum(int((t["child"][:, 0] >= 0).sum()) for t in trees.values())
    if not used or internal < BIAS_NODES:
        return                  # (too few splits to say where the bias is)
    top = max(int(w.max()) for w in used)
    if top != num_xf:
        raise XmlkitError(f"{folder}/param: num_Xf = {num_xf} features, but the trees' "
                          f"split weights end at index {top} (the bias is feature num_Xf): "
                          "the param file does not describe these trees")


def read_centroids(path, n_features, n_labels):
    """PfastreXML's `w` file (one centroid row per label over D + 1 features)
    as the by-feature arrays xmlkit.models.pfastrexml re-ranks with."""
    from xmlkit.io import read_xc
    from xmlkit.csr import transpose_rows
    from xmlkit.models.pfastrexml import check_tail
    if not Path(path).is_file():
        raise XmlkitError(f"{path}: missing (the model was trained without tail "
                          "classifiers: predict with trees only)")
    R = read_xc(path, layout="matrix").feature_rows
    if R.shape != (n_labels, n_features + 1):
        raise XmlkitError(f"{path}: holds a {R.shape[0]} x {R.shape[1]} matrix, expected "
                          f"{n_labels} x {n_features + 1}")
    ptr, lab, val = transpose_rows(R, n_features + 1)
    return check_tail(ptr, lab, val, n_features, n_labels, str(path))


def load_cpp_parabel(folder, param, trees=None):
    """A Parabel model (xmlkit.models.parabel) from the C++ tool's folder;
    `trees` defaults to the range its param file names."""
    from xmlkit.models.parabel import LOSSES, Parabel, check_tree as check_parabel, grouped_tree
    start, num = int(param["start_tree"]), int(param["num_tree"])
    wanted = list(range(start, start + num)) if trees is None else list(trees)
    if param["classifier_kind"] not in (0, 1):
        raise XmlkitError(f"{folder}/param: classifier_kind must be 0 or 1, got "
                          f"{param['classifier_kind']:g}")
    model = Parabel(n_trees=max(1, num), start_tree=start, max_leaf=int(param["max_leaf"]),
                    C=param["classifier_cost"], bias=param["bias"],
                    weight_threshold=param["classifier_threshold"],
                    centroid_threshold=param["centroid_threshold"],
                    cluster_eps=param["clustering_eps"],
                    max_iter=int(param["classifier_maxitr"]),
                    loss=LOSSES[int(param["classifier_kind"])])
    try:
        model._validate_params()
    except InvalidParameterError as exc:
        raise XmlkitError(f"{folder}/param: {exc}") from None
    model.n_features_in_, model.n_labels_ = int(param["num_Xf"]), int(param["num_Y"])
    model.predict_params_ = {**model.predict_defaults(), "beam_width": int(param["beam_width"])}
    model.trees_ = {}
    for t in wanted:
        path = Path(folder) / f"{t}.tree"
        if not path.is_file():
            raise XmlkitError(f"{folder}: has no tree file {t}.tree")
        tree = grouped_tree(read_parabel_tree(path, model.n_features_in_, model.n_labels_),
                            model.n_features_in_, str(path))
        model.trees_[t] = check_parabel(tree, model.n_features_in_, model.n_labels_, str(path))
    return model


def _ints(path, lineno, line, n=None):
    try:
        v = [int(x) for x in line.split()]
    except ValueError:
        raise XmlkitError(f"{path}:{lineno}: expected whole numbers") from None
    if n is not None and len(v) != n:
        raise XmlkitError(f"{path}:{lineno}: expected {n} numbers, found {len(v)}")
    return v


def _weights(path, lineno, line):
    flat = line.replace(":", " ").split()
    try:
        idx = np.array(flat[0::2], dtype=np.int64)
        val = np.array(flat[1::2], dtype=np.float64)
    except (ValueError, OverflowError):
        raise XmlkitError(f"{path}:{lineno}: malformed 'id:val ...' line") from None
    if len(idx) != len(val) or line.count(":") != len(idx):
        raise XmlkitError(f"{path}:{lineno}: malformed 'id:val ...' line")
    return idx, val


def read_parabel_tree(path, n_features, n_labels):
    """A C++ Parabel tree file as xmlkit's tree arrays (nodes renumbered in
    breadth-first order from the root, children pos then neg)."""
    path = Path(path)
    try:
        lines = path.read_text().split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise XmlkitError(f"{path}: unreadable ({exc})") from None
    head = [_ints(path, i + 1, lines[i] if i < len(lines) else "", 1)[0] for i in range(3)]
    if head[0] != n_features + 1 or head[1] != n_labels:
        raise XmlkitError(f"{path}: the tree is for {head[0] - 1} features and {head[1]} "
                          f"labels, the param file says {n_features} and {n_labels}")
    n, at, nodes = head[2], 3, []
    if not 1 <= n <= len(lines):
        raise XmlkitError(f"{path}:3: node count {n} is not in [1, {len(lines)}]")
    for i in range(n):
        if at + 5 > len(lines):
            raise XmlkitError(f"{path}: truncated in node {i}")
        leaf = _ints(path, at + 1, lines[at], 1)[0] == 1
        kids = _ints(path, at + 2, lines[at + 1], 2)
        labels = _ints(path, at + 4, lines[at + 3])
        if not labels or labels[0] != len(labels) - 1:
            raise XmlkitError(f"{path}:{at + 4}: says {labels[:1]} labels but holds "
                              f"{len(labels) - 1}")
        nc, nr = _ints(path, at + 5, lines[at + 4], 2)
        if nc != (len(labels) - 1 if leaf else 2) or nr != n_features + 1 \
                or at + 5 + nc > len(lines):
            raise XmlkitError(f"{path}:{at + 5}: node {i} holds {nc} classifiers over {nr} "
                              "features, not one per " + ("label" if leaf else "child")
                              + f" over {n_features + 1}")
        w = [_weights(path, at + 6 + c, lines[at + 5 + c]) for c in range(nc)]
        nodes.append((leaf, kids, np.asarray(labels[1:], np.int64), w))
        at += 5 + nc
    return _parabel_arrays(path, nodes)


def _parabel_arrays(path, nodes):
    """The arrays of xmlkit.models.parabel from the C++ nodes, renumbered
    breadth-first from the root (xmlkit.models.parabel.assemble_tree); a
    node reached twice, or a child outside the tree, is refused."""
    from xmlkit.models.parabel import assemble_tree
    order, seen = [0], {0}
    labels, depth, n_child, leaves = [], [0], [], {}
    rows = [(np.zeros(0, np.int64), np.zeros(0))]
    for a, i in enumerate(order):           # (order grows as it is read)
        leaf, kids, y, w = nodes[i]
        labels.append(y)
        n_child.append(0 if leaf else 2)
        if leaf:
            leaves[a] = (np.concatenate([[0], np.cumsum([len(r[0]) for r in w])]),
                         _cat([r[0] for r in w], np.int64), _cat([r[1] for r in w], np.float64))
            continue
        for c, k in enumerate(kids):
            if not 0 <= k < len(nodes) or k in seen:
                raise XmlkitError(f"{path}: node {i}'s children {kids} are not nodes of a tree")
            seen.add(k)
            order.append(k)
            depth.append(depth[a] + 1)
            rows.append(w[c])
    return assemble_tree(labels, depth, n_child, rows, leaves)
