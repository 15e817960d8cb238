"""Parabel: the leaf depth, centroids and beam search by hand, the node solver
against liblinear, the trees' shapes, determinism across thread counts, CLI =
API, damaged trees refused."""
import json

import numpy as np
import pytest
import scipy.sparse as sp

import xmlkit
from xmlkit.checks import DamagedModel
from xmlkit.metrics import ranking_metrics
from xmlkit.models.base import C_INT_MAX
from xmlkit.models.parabel import (LOSSES, check_tree, classifier_rows, grouped_tree,
                                   leaf_depth)

from conftest import TEST, TRAIN, run_cli


def test_leaf_depth_by_hand():
    # the C++ tool: ceil(log2(L // max_leaf)), L // max_leaf in whole numbers
    assert leaf_depth(159, 100, 2, "auto", True) == 0        # 159 // 100 = 1: the root
    assert leaf_depth(99, 100, 2, "auto", True) == 0         # 0: the root
    assert leaf_depth(400, 100, 2, "auto", True) == 2        # log2 4
    assert leaf_depth(401, 100, 2, "auto", True) == 2
    assert leaf_depth(569, 100, 2, "auto", True) == 3        # 5 -> 3
    assert leaf_depth(2146, 100, 2, "auto", True) == 5       # 21 -> 5 (32 leaves of 67)
    assert leaf_depth(2146, 10, 16, "auto", True) == 2       # 214 -> 16^2 = 256
    assert leaf_depth(2146, 100, 100, "auto", False) == C_INT_MAX    # by size only
    assert leaf_depth(2146, 100, 100, 3, False) == 2


def test_label_centroids_by_hand():
    from xmlkit._ext.parabel_tree import label_centroids
    # unit rows: p0 = (0.6, 0.8, 0), p1 = (0, 0, 1), p2 = (1, 0, 0)
    xp = np.array([0, 2, 3, 4], np.int64)
    xi = np.array([0, 1, 2, 0], np.int32)
    xv = np.array([0.6, 0.8, 1.0, 1.0], np.float32)
    # label 0: p0, p2 -> (1.6, 0.8, 0) / sqrt(3.2); label 1: p1 -> (0, 0, 1); label 2: none
    lp = np.array([0, 2, 3, 3], np.int64)
    li = np.array([0, 2, 1], np.int32)
    ptr, idx, val = label_centroids(xp, xi, xv, lp, li, 3, 0.0)
    assert ptr.tolist() == [0, 2, 3, 3] and idx.tolist() == [0, 1, 2]
    assert val == pytest.approx([1.6 / 3.2 ** 0.5, 0.8 / 3.2 ** 0.5, 1.0], abs=1e-6)
    # a threshold of 0.5 drops 0.8 / 1.789 = 0.447
    ptr, idx, val = label_centroids(xp, xi, xv, lp, li, 3, 0.5)
    assert ptr.tolist() == [0, 1, 2, 2] and idx.tolist() == [0, 2]


def _hand_rows():
    """A root with two leaves (one label each) over D = 2 features (bias: 2),
    as classifier rows."""
    return {"c_ptr": np.array([1, 3, 3, 3], np.int64), "depth": np.array([0, 1, 1], np.int32),
            "l_ptr": np.array([0, 0, 1, 2], np.int64), "l_idx": np.array([0, 1], np.int32),
            # rows: root (empty), child 1: w = (1, 0, 0), child 2: (0, 1, 0.5),
            # leaf 1's label 0: (0, 0, 2), leaf 2's label 1: (-1, 0, 0)
            "w_ptr": np.array([0, 0, 1, 3, 4, 5], np.int64),
            "w_idx": np.array([0, 1, 2, 2, 0], np.int32),
            "w_val": np.array([1, 1, 0.5, 2, -1], np.float32)}


def _hand_tree():
    """The hand tree as it is stored: its rows grouped by node."""
    return grouped_tree(_hand_rows(), 2, "hand")


@pytest.mark.parametrize("loss", ["squared_hinge", "log"])
def test_beam_search_by_hand(loss):
    m = xmlkit.Parabel(loss=loss)
    m.n_features_in_, m.n_labels_ = 2, 2
    m.trees_ = {0: check_tree(_hand_tree(), 2, 2, "hand")}
    X = sp.csr_matrix(np.array([[3.0, 4.0]]))          # unit: (0.6, 0.8), bias 1
    if loss == "squared_hinge":
        def ll(z):
            return -max(0.0, 1 - z) ** 2
    else:
        def ll(z):
            return -np.log1p(np.exp(-z))
    # child 1: z = 0.6; child 2: z = 0.8 + 0.5 = 1.3; label 0: z = 2; label 1: z = -0.6
    s0 = np.exp(ll(0.6) + ll(2.0))
    s1 = np.exp(ll(1.3) + ll(-0.6))
    both = m.predict(X, k=None, beam_width=2).toarray()[0]
    assert both == pytest.approx([s0, s1], rel=1e-6)
    # a beam of one keeps child 2 alone (log-score ll(1.3) > ll(0.6))
    one = m.predict(X, k=None, beam_width=1).toarray()[0]
    assert one == pytest.approx([0.0, s1], rel=1e-6)


def test_weights_grouped_by_node_by_hand():
    """The stored layout of the hand tree: group i holds node i's children's
    classifiers (internal) or its labels' (leaf), feature-major, features
    ascending, one byte per classifier index (no group wider than 256);
    classifier_rows gives the rows back; a pointer or index out of range is
    refused."""
    from xmlkit._ext.parabel_groups import group_weights
    t = _hand_tree()
    # root: children 1 (w: f0 = 1) and 2 (f1 = 1, bias f2 = 0.5); leaf 1: label entry
    # 0 (f2 = 2); leaf 2: label entry 1 (f0 = -1)
    assert t["g_ptr"].tolist() == [0, 3, 4, 5]
    assert t["e_feat"].tolist() == [0, 1, 2, 2, 0]
    assert t["e_col"].tolist() == [0, 1, 1, 0, 0] and t["e_col"].dtype == np.uint8
    assert t["e_val"].tolist() == [1, 1, 0.5, 2, -1]
    rows = _hand_rows()
    for got, key in zip(classifier_rows(t), ("w_ptr", "w_idx", "w_val")):
        assert got.tolist() == rows[key].tolist()
    for key, bad in (("w_idx", np.array([0, 1, 3, 2, 0], np.int32)),
                     ("w_ptr", np.array([0, 0, 1, 9, 4, 5], np.int64)),
                     ("l_ptr", np.array([0, 0, 3, 2], np.int64))):
        arrays = {**rows, key: bad}
        with pytest.raises(ValueError):
            group_weights(arrays["c_ptr"], arrays["l_ptr"], arrays["w_ptr"], arrays["w_idx"],
                          arrays["w_val"], 3)
        with pytest.raises(DamagedModel):
            grouped_tree(arrays, 2, "t")


@pytest.mark.parametrize("n_labels", [256, 257, 70000])
def test_wide_leaf_scores_by_hand(n_labels):
    """A root leaf of 256 labels keeps its classifier indices in one byte,
    of 257 in two, of 70,000 in four: every label's score is
    exp(-max(0, 1 - w.x)^2) over the unit row with the bias, by numpy."""
    from scipy.sparse import csr_matrix
    from xmlkit._ext.parabel_predict import ParabelKernel
    rng = np.random.default_rng(n_labels)
    D = 6
    W = np.where(rng.random((n_labels, D + 1)) < 0.4, rng.normal(size=(n_labels, D + 1)), 0)
    W = csr_matrix(W.astype(np.float32))
    tree = grouped_tree({
        "c_ptr": np.array([1, 1], np.int64), "depth": np.zeros(1, np.int32),
        "l_ptr": np.array([0, n_labels], np.int64), "l_idx": np.arange(n_labels, dtype=np.int32),
        "w_ptr": np.concatenate([[0], W.indptr]).astype(np.int64),
        "w_idx": W.indices.astype(np.int32), "w_val": W.data}, D, "wide")
    check_tree(tree, D, n_labels, "wide")
    assert tree["e_col"].dtype == {256: np.uint8, 257: np.uint16, 70000: np.int32}[n_labels]
    X = csr_matrix(np.where(rng.random((4, D)) < 0.6, rng.random((4, D)), 0).astype(np.float32))
    ptr, idx, val = ParabelKernel([tree], D + 1, 1.0, n_labels, 0).predict_rows(X, 0, 4, 0, 10)
    dense = X.toarray().astype(np.float64)
    unit = dense / np.maximum(np.linalg.norm(dense, axis=1, keepdims=True), 1e-300)
    z = np.hstack([unit, np.ones((4, 1))]) @ W.toarray().T.astype(np.float64)
    want = np.exp(-np.maximum(0, 1 - z) ** 2)
    for r in range(4):
        assert idx[ptr[r]:ptr[r + 1]].tolist() == list(range(n_labels))
        assert val[ptr[r]:ptr[r + 1]] == pytest.approx(want[r], rel=1e-5, abs=1e-7)


def test_a_label_whose_probability_is_zero_is_written_once():
    """A label every tree scores 0 (its margin so low that the exponential
    underflows) is one entry of its row, not one per tree, in every k."""
    from scipy.sparse import csr_matrix
    from xmlkit._ext.parabel_predict import ParabelKernel
    leaf = grouped_tree({
        "c_ptr": np.array([1, 1], np.int64), "depth": np.zeros(1, np.int32),
        "l_ptr": np.array([0, 2], np.int64), "l_idx": np.array([0, 1], np.int32),
        "w_ptr": np.array([0, 0, 1, 2], np.int64), "w_idx": np.array([0, 0], np.int32),
        "w_val": np.array([-1000.0, 1.0], np.float32)}, 1, "leaf")
    kernel = ParabelKernel([leaf, leaf, leaf], 2, 1.0, 2, 0)
    X = csr_matrix(np.array([[1.0]], np.float32))
    for k in (0, 1, 2, 5):
        ptr, idx, val = kernel.predict_rows(X, 0, 1, k, 10)
        want = [1] if k == 1 else [0, 1]
        assert idx.tolist() == want and ptr.tolist() == [0, len(want)]
        assert val.tolist() == ([1.0] if k == 1 else [0.0, 1.0])


@pytest.fixture
def layout():
    """Which layout the kernel scores trees by: set(1) the whole tree's where
    a tree has one, set(0) its groups; chosen by cost again afterwards."""
    from xmlkit._ext.parabel_predict import _force_whole_layout
    yield _force_whole_layout
    _force_whole_layout(-1)


def _edit_in_place(t, edit, n_features, n_labels):
    """Put one of a tree's indices out of range, in place."""
    if edit == "column":                                    # past any node's 20 classifiers
        t["e_col"][t["e_feat"] < n_features] = 255
    elif edit == "bias_column":
        t["e_col"][t["e_feat"] == n_features] = 255
    elif edit == "feature":
        t["e_feat"][t["g_ptr"][1] - 1] = 10**9
    elif edit == "groups":
        t["g_ptr"][2:] = t["g_ptr"][-1] + 10**6
    elif edit == "child":
        t["c_ptr"][1] = 1                                   # node 1 its own child
    else:
        t["l_idx"][:] = n_labels + 7


EDITS = ["column", "bias_column", "feature", "groups", "child", "label"]


@pytest.mark.parametrize("edit", EDITS)
def test_arrays_changed_after_the_check_are_caught_where_used(bibtex, edit, layout):
    """The kernel reads a tree's groups where they lie (a mapped file may be
    rewritten while in use): an index put out of range after the kernel
    checked them is caught where it is read, a one-line XmlkitError, never
    a read outside the arrays or a loop (the arrays here are the model's own,
    edited in place)."""
    X, Y, Xt, _ = bibtex
    layout(0)
    m = xmlkit.Parabel(n_trees=1, max_leaf=20).fit(X[:1500], Y[:1500])
    m.predict(Xt[:50])                                       # (the kernel, checked)
    _edit_in_place(m.trees_[0], edit, X.shape[1], Y.shape[1])
    with pytest.raises(xmlkit.XmlkitError, match="changed after they were checked"):
        m.predict(Xt[:300], k=None)


@pytest.mark.parametrize("params", [{"max_leaf": 20}, {"max_leaf": 20, "loss": "log"},
                                    {"max_leaf": 5, "n_trees": 2},
                                    {"arity": 10, "balanced": False, "max_leaf": 30,
                                     "max_depth": 2}])
def test_a_tree_laid_out_whole_scores_the_bits_of_its_groups(bibtex, layout, params):
    """Scored through the whole tree's layout or node by node through its
    groups, every row gets the same labels and the same bits, at beams that
    reach a few of the leaves or all of them, for both losses and wide
    trees; the choice by cost gives them too."""
    X, Y, Xt, _ = bibtex
    m = xmlkit.Parabel(**{"n_trees": 1, **params}).fit(X[:2000], Y[:2000])
    assert all(m._kernel().whole_trees())
    for beam in (1, 3, 10, 40):
        got = []
        for mode in (0, 1, -1):
            layout(mode)
            S = m.predict(Xt, k=None, beam_width=beam)
            got.append((S.indptr.tobytes(), S.indices.tobytes(), S.data.tobytes()))
        assert got[0] == got[1] == got[2], beam


@pytest.mark.parametrize("params", [{"max_leaf": 5, "n_trees": 2}, {"max_leaf": 40}])
def test_the_k_best_are_the_top_of_every_labels_ranking(bibtex, params):
    """A row's k best labels (ties to the lower label) and their scores are
    those of the row scored whole, at beams that reach a few labels of many
    (the kept ones sorted) or most of them (the labels read in order)."""
    X, Y, Xt, _ = bibtex
    m = xmlkit.Parabel(**params).fit(X[:2000], Y[:2000])
    for beam in (1, 10):
        S = m.predict(Xt[:300], k=None, beam_width=beam)
        for k in (1, 3, 17):
            top = m.predict(Xt[:300], k=k, beam_width=beam)
            for r in range(300):
                row = S[r].tocoo()
                best = sorted(zip(-row.data, row.col))[:k]
                assert top[r].indices.tolist() == sorted(c for _, c in best)
                assert top[r].data.tolist() == [-v for v, _ in sorted(best, key=lambda b: b[1])]


@pytest.mark.parametrize("edit", EDITS)
def test_a_tree_laid_out_whole_reads_its_own_copy(bibtex, edit, layout):
    """A small tree laid out whole is scored from the kernel's own copy of
    its links and weights, made as the kernel was built: arrays changed
    after that change nothing it answers; changed between the check and the
    copy, they are caught as it is made (the same error)."""
    from xmlkit._ext.parabel_predict import ParabelKernel
    X, Y, Xt, _ = bibtex
    layout(1)
    m = xmlkit.Parabel(n_trees=1, max_leaf=20).fit(X[:1500], Y[:1500])
    before = m.predict(Xt[:300], k=None)
    kept = {k: v.copy() for k, v in m.trees_[0].items()}
    _edit_in_place(m.trees_[0], edit, X.shape[1], Y.shape[1])
    after = m.predict(Xt[:300], k=None)
    assert (before != after).nnz == 0
    tree = {**kept}
    _edit_in_place(tree, edit, X.shape[1], Y.shape[1])
    with pytest.raises(ValueError):              # (checked=True: the groups' check skipped)
        ParabelKernel([tree], X.shape[1] + 1, 1.0, Y.shape[1], 0, checked=True)


def test_a_file_changed_between_load_and_use_is_an_error(bibtex, small_model, tmp_path):
    """A tree file of a loaded folder rewritten in place before its first
    prediction: the kernel's own check of the groups fails, a one-line
    XmlkitError naming the folder (not a ValueError: an internal error)."""
    from xmlkit import store
    from xmlkit.models.folders import save_folder
    _, _, Xt, _ = bibtex
    save_folder(small_model, tmp_path / "m")
    m = xmlkit.load_model(tmp_path / "m")
    start, end = store.load_arrays(tmp_path / "m", "tree_00000", lazy=True).spans["e_feat"]
    with open(tmp_path / "m" / "tree_00000.npz", "r+b") as f:
        f.seek(start)
        f.write(b"\xff" * min(400, end - start))
    with pytest.raises(xmlkit.XmlkitError, match=f"^{tmp_path / 'm'}: .*changed in use"):
        m.predict(Xt[:50])


def test_leaf_classifier_is_liblinears_l2_svc():
    """A root leaf's classifier, solved to a tight tolerance without the weight
    threshold, is liblinear's L2R_L2LOSS_SVC_DUAL solution on the unit rows
    with the bias feature (the same strictly convex problem)."""
    from liblinear.liblinearutil import parameter, problem, train
    from xmlkit.csr import unit_rows, as_rows
    from xmlkit.io import read_dataset
    X, Y = read_dataset(TRAIN)
    X, Y = X[:300], Y[:300]
    m = xmlkit.Parabel(n_trees=1, max_leaf=1000, weight_threshold=0.0, tol=1e-5,
                       max_iter=2000).fit(X, Y)
    tree = m.trees_[0]
    assert len(tree["c_ptr"]) == 2                       # the root alone, a leaf
    U = unit_rows(as_rows(X)).to_scipy()
    counts = np.asarray(Y.sum(axis=0)).ravel()
    for lab in np.flatnonzero(counts >= 5)[:2]:
        q = int(np.flatnonzero(tree["l_idx"] == lab)[0])
        row = 1 + q
        w = np.zeros(X.shape[1] + 1)
        w_ptr, w_idx, w_val = classifier_rows(tree)
        lo, hi = w_ptr[row], w_ptr[row + 1]
        w[w_idx[lo:hi]] = w_val[lo:hi]
        y = np.where(Y[:, lab].toarray().ravel() > 0, 1.0, -1.0)
        model = train(problem(y, U), parameter("-s 1 -c 1 -e 1e-7 -B 1 -q"))
        ref, bias = model.get_decfun()
        # (liblinear's first label is the positive side of its weights)
        ref = np.asarray(ref + [bias]) * (1 if model.get_labels()[0] == 1 else -1)
        assert np.abs(w - ref).max() < 2e-3, lab


@pytest.fixture(scope="module")
def small_model(bibtex):
    X, Y, _, _ = bibtex
    return xmlkit.Parabel(n_trees=2, max_leaf=20, threads=1).fit(X, Y)


def test_balanced_trees_shape(small_model):
    """159 labels, max_leaf 20: 159 // 20 = 7 -> 3 levels below the root, 8
    leaves of 19 or 20 labels; every label in exactly one leaf per tree."""
    for tree in small_model.trees_.values():
        counts = np.diff(tree["c_ptr"])
        leaves = np.flatnonzero(counts == 0)
        assert len(leaves) == 8 and set(counts[counts > 0]) == {2}
        assert np.all(tree["depth"][leaves] == 3)
        sizes = np.diff(tree["l_ptr"])[leaves]
        assert set(sizes) <= {19, 20} and sorted(tree["l_idx"]) == list(range(159))


def test_unbalanced_wide_trees(bibtex):
    X, Y, Xt, Yt = bibtex
    m = xmlkit.Parabel(n_trees=1, arity=10, balanced=False, max_leaf=30, max_depth=2).fit(X, Y)
    tree = m.trees_[0]
    counts = np.diff(tree["c_ptr"])
    assert 2 <= counts[0] <= 10 and np.all(counts[1:] == 0)      # a root and its leaves
    assert sorted(tree["l_idx"]) == list(range(159))
    assert ranking_metrics(Yt, m.predict(Xt), (1,))["P@1"] > 0.55


def test_groups_checked_once_as_read_and_again_when_changed(bibtex, small_model, tmp_path,
                                                            monkeypatch):
    """The groups check_tree passed as a folder was read are not checked again
    by the kernel; a tree changed through the API after that is (a weight's
    classifier past its group: refused, not scored)."""
    import xmlkit._ext.parabel_predict as pp
    _, _, Xt, _ = bibtex
    small_model.save(tmp_path / "m")
    loaded = xmlkit.load_model(tmp_path / "m")
    expected = small_model.predict(Xt[:50], k=None)
    calls = []
    real = pp.check_groups
    monkeypatch.setattr(pp, "check_groups", lambda *a: calls.append(1) or real(*a))
    assert loaded._all_checked(list(loaded.trees_.values()))
    assert (loaded.predict(Xt[:50], k=None) != expected).nnz == 0
    assert not calls
    tree = dict(loaded.trees_[0])
    tree["e_col"] = tree["e_col"].copy()
    tree["e_col"][0] = 200
    loaded.trees_[0] = tree
    assert not loaded._all_checked([tree])
    with pytest.raises((ValueError, xmlkit.XmlkitError)):
        loaded.predict(Xt[:50])
    assert calls


def test_row_alone_scores_as_in_a_batch(bibtex, small_model):
    """A short row alone finds a node's features by binary search; in a batch,
    by a layout of the node's features shared by the rows that reach it (a
    two-child node's: each feature's pair of weights): the scores are the
    same to the bit (the shortest rows, alone, against the whole set at
    once)."""
    from xmlkit.csr import model_rows
    _, _, Xt, _ = bibtex
    R = model_rows(Xt[:300], small_model.n_features_in_)
    kernel = small_model._kernel()
    whole = kernel.predict_rows(R, 0, 300, 0, 10)
    for r in np.argsort(np.diff(R.indptr), kind="stable")[:40]:
        alone = kernel.predict_rows(R, r, r + 1, 0, 10)
        a, b = whole[0][r], whole[0][r + 1]
        assert np.array_equal(alone[1], whole[1][a:b]) and np.array_equal(alone[2], whole[2][a:b])


def test_folder_of_classifier_rows_loads_regrouped(tmp_path, monkeypatch, bibtex, small_model):
    """A folder written before the grouped layout (each tree's classifiers as
    CSR rows: w_ptr, w_idx, w_val) loads as the same trees and scores the
    same (damaged rows: test_weights_grouped_by_node_by_hand)."""
    from xmlkit.models.folders import save_folder
    from xmlkit.models.parabel import Parabel, ROW_KEYS, TREE_KEYS
    _, _, Xt, _ = bibtex

    def rows_form(tree, compact=False):
        return {**{k: tree[k] for k in TREE_KEYS[:4]},
                **dict(zip(ROW_KEYS, classifier_rows(tree)))}
    with monkeypatch.context() as m:
        m.setattr(Parabel, "_encode_tree", staticmethod(rows_form))
        save_folder(small_model, tmp_path / "old")
    old = xmlkit.load_model(tmp_path / "old")
    for t, tree in small_model.trees_.items():
        for k in TREE_KEYS:
            assert np.array_equal(old.trees_[t][k], tree[k]) and \
                old.trees_[t][k].dtype == tree[k].dtype, k
    a, b = old.predict(Xt, k=None), small_model.predict(Xt, k=None)
    assert (a != b).nnz == 0 and np.array_equal(a.indices, b.indices)


def _regrouped(tree, n_features):
    from xmlkit.models.parabel import TREE_KEYS
    return grouped_tree({**{k: tree[k] for k in TREE_KEYS[:4]},
                         **dict(zip(("w_ptr", "w_idx", "w_val"), classifier_rows(tree)))},
                        n_features, "t")


@pytest.mark.parametrize("wide", [False, True])
def test_nodes_lay_out_their_groups_as_the_whole_tree_grouping(bibtex, small_model, wide):
    """Each node's kernel lays out its own group (feature-major, the
    classifiers in order within a feature, e_col of the widest node's type):
    the same arrays, of the same types, as grouping the tree's classifier
    rows all at once (group_weights). Wide: a leaf of 300 labels (uint16)."""
    from xmlkit.models.parabel import TREE_KEYS
    if wide:
        rng = np.random.default_rng(0)
        X = sp.random(400, 50, density=0.2, format="csr", random_state=1)
        dense = rng.random((400, 300)) < 0.02
        dense[np.arange(300), np.arange(300)] = True            # (every label used)
        Y = sp.csr_matrix(dense.astype(np.float32))
        model = xmlkit.Parabel(n_trees=1, max_leaf=300).fit(X, Y)
        assert model.trees_[0]["e_col"].dtype == np.uint16 and len(model.trees_[0]["c_ptr"]) == 2
    else:
        model = small_model
        assert model.trees_[0]["e_col"].dtype == np.uint8
    for tree in model.trees_.values():
        again = _regrouped(tree, model.n_features_in_)
        for k in TREE_KEYS:
            assert np.array_equal(again[k], tree[k]) and again[k].dtype == tree[k].dtype, k
        # within a group, (feature, classifier) pairs strictly ascend
        g = np.repeat(np.arange(len(tree["g_ptr"]) - 1), np.diff(tree["g_ptr"]))
        steps = np.diff(np.stack([g, tree["e_feat"], tree["e_col"].astype(np.int64)]), axis=1)
        first = np.argmax(steps != 0, axis=0)
        assert np.all(steps[first, np.arange(steps.shape[1])] > 0)


def test_pieces_given_back_as_a_tree_is_made_change_nothing(bibtex, small_model,
                                                            monkeypatch):
    """The tree's arrays are made piece by piece, the pieces given back every
    GIVE_BACK_BYTES: given back after every piece, the same trees."""
    from xmlkit.models import parabel
    calls = []
    monkeypatch.setattr(parabel, "GIVE_BACK_BYTES", 0)
    monkeypatch.setattr("xmlkit._memory.give_back", lambda: calls.append(1))
    X, Y, _, _ = bibtex
    again = xmlkit.Parabel(n_trees=2, max_leaf=20, threads=1).fit(X, Y)
    for t, tree in small_model.trees_.items():
        assert all(np.array_equal(again.trees_[t][k], tree[k]) for k in tree)
    # (every group of both trees but empty ones, for each of the 3 arrays, and once more)
    nodes = sum(int(np.count_nonzero(np.diff(t["g_ptr"]))) for t in again.trees_.values())
    assert len(calls) == 3 * (nodes + 2)


def test_rows_are_scaled_to_unit_length_as_they_are_read(bibtex):
    """The node kernels read each row scaled to unit length (and the bias
    appended): rows given scaled by powers of two (exact) grow the same
    trees, to the bit."""
    X, Y, _, _ = bibtex
    X, Y = X[:600], Y[:600]
    factors = 2.0 ** (np.arange(X.shape[0]) % 7 - 3)
    scaled = sp.csr_matrix(sp.diags(factors) @ X)
    a = xmlkit.Parabel(n_trees=1, max_leaf=30).fit(X, Y).trees_[0]
    b = xmlkit.Parabel(n_trees=1, max_leaf=30).fit(scaled, Y).trees_[0]
    assert all(np.array_equal(a[k], b[k]) for k in a)
    c = xmlkit.Parabel(n_trees=1, max_leaf=30, bias=2.0).fit(X, Y).trees_[0]
    assert not np.array_equal(a["e_val"], c["e_val"])


@pytest.mark.parametrize("threads", [1, 2])
def test_pieces_are_predicts_rows_in_order(bibtex, small_model, threads):
    """predict_pieces: consecutive chunks, each through finish, that stack to
    predict's rows (all labels, and the k best)."""
    from xmlkit.csr import as_rows, stack_rows
    _, _, Xt, _ = bibtex
    for k in (None, 3):
        whole = small_model.predict(as_rows(Xt), k=k, threads=threads)
        finished = list(small_model.predict_pieces(Xt, k=k, threads=threads,
                                                   finish=lambda p: ("finished", p)))
        assert len(finished) > 1 and {f[0] for f in finished} == {"finished"}
        pieces = [f[1] for f in finished]
        got = stack_rows([(p.indptr, p.indices, p.data) for p in pieces], whole.shape)
        for a, b in zip((got.indptr, got.indices, got.data),
                        (whole.indptr, whole.indices, whole.data)):
            assert np.array_equal(a, b)


@pytest.mark.slow
def test_threads_take_the_next_trees_roots_first(bibtex, monkeypatch):
    """On 2 threads a free thread takes a ready root of the next 3 trees
    first: the third tree's root (every label) before any child of the
    first two, which would otherwise leave it, a wide tree's largest node,
    for last; then the earliest tree's nodes, so that the first tree ends
    first. The trees are the same bytes as on one thread."""
    from xmlkit._ext.parabel_tree import ParabelNode
    X, Y, _, _ = bibtex
    params = {"n_trees": 3, "arity": 10, "balanced": False, "max_leaf": 20, "max_depth": 3}
    sizes = []

    class Logged(ParabelNode):
        def node(self, data, labels, *rest):
            sizes.append(len(labels))
            return super().node(data, labels, *rest)
    def builder(self, data):
        p = self.params
        return Logged(data, p.arity, p.balanced, p.cluster_eps, LOSSES.index(p.loss), p.C,
                      p.max_iter, p.tol, p.weight_threshold)
    monkeypatch.setattr(xmlkit.Parabel, "_builder", builder)
    two = xmlkit.Parabel(threads=2, **params).fit(X, Y)
    assert sizes[:3] == [Y.shape[1]] * 3 and Y.shape[1] not in sizes[3:]
    one = xmlkit.Parabel(threads=1, **params).fit(X, Y)
    for t in range(3):
        for key in one.trees_[t]:
            assert np.array_equal(one.trees_[t][key], two.trees_[t][key]), key


def test_a_level_is_trained_largest_node_first(bibtex, monkeypatch):
    """Of the ready nodes of a level, a free thread takes the one of most
    work (its labels' points times its classifiers) first. The tasks run as
    they are handed out (an executor that runs them at submission), so the
    order of the calls is the order of the choices: after the root, every
    child of it, largest first."""
    from concurrent.futures import Future
    from xmlkit._ext.parabel_tree import ParabelNode
    from xmlkit.models import parabel as parabel_module
    X, Y, _, _ = bibtex
    params = {"n_trees": 1, "arity": 10, "balanced": False, "max_leaf": 20, "max_depth": 3}
    calls = []

    class Logged(ParabelNode):
        def node(self, data, labels, seed, leaf):
            calls.append((np.array(labels), leaf))
            return super().node(data, labels, seed, leaf)

    class AtOnce:
        def __init__(self, threads):
            pass

        def submit(self, fn, *args):
            done = Future()
            done.set_result(fn(*args))
            return done

        def shutdown(self, wait=True, cancel_futures=False):
            pass

    def builder(self, data):
        p = self.params
        return Logged(data, p.arity, p.balanced, p.cluster_eps, LOSSES.index(p.loss), p.C,
                      p.max_iter, p.tol, p.weight_threshold)
    monkeypatch.setattr(xmlkit.Parabel, "_builder", builder)
    monkeypatch.setattr(parabel_module, "ThreadPoolExecutor", AtOnce)
    model = xmlkit.Parabel(threads=2, **params).fit(X, Y)
    points = np.bincount(Y.indices, minlength=Y.shape[1])
    n_child = int(model.trees_[0]["c_ptr"][1] - model.trees_[0]["c_ptr"][0])
    assert len(calls[0][0]) == Y.shape[1] and n_child >= 3
    work = [int(points[lab].sum()) * (len(lab) if leaf else min(10, len(lab)))
            for lab, leaf in calls[1:1 + n_child]]
    assert work == sorted(work, reverse=True) and work[0] > work[-1]


def test_deterministic_at_any_thread_count_and_cli_equals_api(tmp_path, bibtex, small_model):
    X, Y, Xt, Yt = bibtex
    b = xmlkit.Parabel(n_trees=2, max_leaf=20, threads=2).fit(X, Y)
    for t in small_model.trees_:
        for key in small_model.trees_[t]:
            assert np.array_equal(small_model.trees_[t][key], b.trees_[t][key]), key
    S = small_model.predict(Xt, k=5)
    assert ranking_metrics(Yt, S, (1,))["P@1"] > 0.6       # the C++ tool: 63.9 (3 trees)
    folder = tmp_path / "m"
    r = run_cli("xml-train", TRAIN, folder, "--algorithm", "parabel", "-t", "2", "-m", "20",
                "-T", "2", "-q")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["algorithm"] == "parabel" and manifest["params"]["max_leaf"] == 20
    r = run_cli("xml-predict", TEST, tmp_path / "s.txt", folder, "-k", "5", "-q")
    assert r.returncode == 0, r.stderr
    from xmlkit.io import read_matrix

    def same(path, scores):          # (the file rounds to 6 decimals)
        got = read_matrix(path)
        return np.array_equal(got.indices, scores.indices) and \
            np.abs(got.data - scores.data).max() <= 6e-7     # (half a 6th decimal)
    assert same(tmp_path / "s.txt", S)
    # a narrower beam from the command line is the API's
    r = run_cli("xml-predict", TEST, tmp_path / "b.txt", folder, "-k", "5", "-B", "1", "-q")
    assert r.returncode == 0, r.stderr
    S1 = small_model.predict(Xt, k=5, beam_width=1)
    assert same(tmp_path / "b.txt", S1) and not same(tmp_path / "b.txt", S)


@pytest.mark.parametrize("edit", ["self_child", "own_child", "shared_child", "depth",
                                  "label_at_node", "feature", "feature_order", "column",
                                  "repeated", "weights", "groups", "nan", "dtype"])
def test_damaged_tree_is_refused(edit):
    """Each damage refused by check_tree (and by the kernel, built without it)."""
    from xmlkit._ext.parabel_predict import ParabelKernel
    tree = {k: v.copy() for k, v in _hand_tree().items()}
    if edit == "self_child":
        tree["c_ptr"] = np.array([0, 3, 3, 3], np.int64)         # the root its own child
    elif edit == "own_child":
        tree["c_ptr"] = np.array([1, 1, 3, 3], np.int64)         # node 1 its own child
    elif edit == "shared_child":
        tree["c_ptr"] = np.array([1, 3, 3, 2], np.int64)
    elif edit == "depth":
        tree["depth"][2] = 2
    elif edit == "label_at_node":
        tree["l_ptr"] = np.array([0, 1, 1, 2], np.int64)
    elif edit == "feature":
        tree["e_feat"][0] = 3                                     # past the bias (2)
    elif edit == "feature_order":
        tree["e_feat"][:2] = [1, 0]
    elif edit == "column":
        tree["e_col"][3] = 1                                      # leaf 1 has one label
    elif edit == "repeated":                                      # feature 0 twice for child 1
        tree["e_feat"][1], tree["e_col"][1] = 0, 0
    elif edit == "weights":
        tree["e_val"] = tree["e_val"][:-1]
    elif edit == "groups":
        tree["g_ptr"][1] = 6
    elif edit == "nan":
        tree["e_val"][2] = np.nan
    else:
        tree["e_col"] = tree["e_col"].astype(np.int64)
    with pytest.raises(DamagedModel):
        check_tree(tree, 2, 2, "t")
    if edit not in ("depth", "shared_child"):    # (what the search does not read)
        with pytest.raises(ValueError):
            ParabelKernel([tree], 3, 1.0, 2, 0)


def test_root_too_large_for_memory_is_refused(tmp_path):
    """A root the k-means cannot hold (10^5 labels into 65536 balanced
    clusters: cosines and sorted pairs of 6.5 10^9 entries) is refused before it
    is allocated: one line, exit 2, no tree; the same data at arity 2 train."""
    rows = [f"{i % 100},{100 + i * 991 % (10**5 - 100)} {i % 50}:1.0 {50 + i % 7}:0.5"
            for i in range(200)]
    data = tmp_path / "many.txt"
    data.write_text(f"200 60 {10**5}\n" + "\n".join(rows) + "\n")
    r = run_cli("xml-train", data, tmp_path / "m", "--algorithm", "parabel", "--arity",
                "65536", "-t", "1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "out of memory" in r.stderr and "arity 65536" in r.stderr
    assert not (tmp_path / "m" / "tree_00000.npz").exists()
    r = run_cli("xml-train", data, tmp_path / "m2", "--algorithm", "parabel", "-t", "1", "-q")
    assert r.returncode == 0 and (tmp_path / "m2" / "tree_00000.npz").exists(), r.stderr
