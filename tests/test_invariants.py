"""Invariants per parameter and equivalences, through the estimators:
what must hold whatever the data (scikit-learn's habit), and refusal of
damaged model files."""
import numpy as np
import pytest

import xmlkit
from xmlkit.driver import fit_folder
from xmlkit.io import read_matrix
from xmlkit._ext.forest_predict import ForestKernel
from xmlkit.csr import as_rows
from xmlkit.models.forest import rows_ascending


@pytest.fixture(scope="module")
def small(bibtex):
    X, Y, Xt, Yt = bibtex
    return X[:800], Y[:800], Xt[:300], Yt[:300]


@pytest.mark.parametrize("cls,per_leaf", [(xmlkit.FastXML, 3), (xmlkit.PfastreXML, 4)])
def test_a_leaf_holds_at_most_labels_per_leaf(cls, per_leaf, small):
    X, Y, _, _ = small
    m = cls(n_trees=2, labels_per_leaf=per_leaf, max_leaf=25).fit(X, Y)
    for tree in m.trees_.values():
        leaves = tree["child"][:, 0] < 0
        counts = np.diff(tree["l_ptr"])
        assert counts[leaves].max() == per_leaf and np.all(counts[~leaves] == 0)
        # FastXML leaves hold means of 0/1 labels (PfastreXML's are propensity-weighted)
        assert np.all(tree["l_val"] > 0)
        assert np.all(tree["l_val"] <= 1.0 + 1e-6) or cls is xmlkit.PfastreXML


def points_reaching_each_node(tree, X, n_labels):
    """Training points routed through a tree by the stored split rule (which
    is the split: the rounded stored weights routed the points in training):
    how many reach each node."""
    from xmlkit._ext.forest_predict import ForestKernel
    from xmlkit.csr import as_rows
    from xmlkit.models.forest import rows_ascending
    kernel = ForestKernel([0], tree["child"], tree["w_ptr"], tree["w_idx"], tree["w_val"],
                          tree["l_ptr"], tree["l_idx"], tree["l_val"], X.shape[1], n_labels, 1.0,
                          rows_ascending(tree["w_ptr"], tree["w_idx"]))
    leaves = kernel.route_rows(as_rows(X), 0, X.shape[0])[:, 0]
    reach = np.bincount(leaves, minlength=len(tree["child"]))
    for n in range(len(reach) - 1, -1, -1):       # children come after their parent
        if tree["child"][n, 0] >= 0:
            reach[n] = reach[tree["child"][n, 0]] + reach[tree["child"][n, 1]]
    return reach


@pytest.mark.parametrize("solver", ["newglmnet", "liblinear"])
def test_leaves_hold_the_means_of_the_points_routed_there(solver, small):
    """Training splits the points exactly as the stored rule routes them
    (the split routes by the solver's own margins wherever rounding the
    weights cannot change a side): each leaf holds the largest means of the
    label rows of the training points that prediction routes to it."""
    X, Y, _, _ = small
    keep = np.diff(Y.indptr) > 0
    X, Y = X[keep], Y[keep]
    m = xmlkit.FastXML(n_trees=2, max_leaf=4, labels_per_leaf=5, solver=solver).fit(X, Y)
    for tree in m.trees_.values():
        kernel = ForestKernel([0], tree["child"], tree["w_ptr"], tree["w_idx"], tree["w_val"],
                              tree["l_ptr"], tree["l_idx"], tree["l_val"], X.shape[1],
                              Y.shape[1], 1.0, rows_ascending(tree["w_ptr"], tree["w_idx"]))
        leaves = kernel.route_rows(as_rows(X), 0, X.shape[0])[:, 0]
        for leaf in np.unique(leaves):
            means = np.asarray(Y[leaves == leaf].mean(axis=0)).ravel()
            lo, hi = tree["l_ptr"][leaf], tree["l_ptr"][leaf + 1]
            stored = tree["l_val"][lo:hi]
            np.testing.assert_allclose(means[tree["l_idx"][lo:hi]], stored, rtol=1e-6)
            others = np.delete(means, tree["l_idx"][lo:hi])
            assert others.max() <= stored.min() + 1e-6


@pytest.mark.parametrize("max_leaf", [3, 5, 20, 50])
def test_max_leaf_decides_which_nodes_split(max_leaf, small):
    """A node with at most max_leaf training points is a leaf: every internal
    node received more than max_leaf of them; and a split sends points both
    ways, so every node receives some. (A leaf may hold more than max_leaf
    points: where the separator put every point on one side, the node stays
    a leaf; no larger node is split further.)"""
    X, Y, _, _ = small
    m = xmlkit.FastXML(n_trees=2, max_leaf=max_leaf).fit(X, Y)
    for tree in m.trees_.values():
        reach = points_reaching_each_node(tree, X, Y.shape[1])
        internal = tree["child"][:, 0] >= 0
        assert reach[0] == X.shape[0]
        assert reach[internal].min() > max_leaf
        assert reach.min() >= 1
        # and most leaves hold at most max_leaf points
        assert np.mean(reach[~internal] <= max_leaf) > 0.9


def test_predict_threads_give_the_same_scores(small):
    X, Y, Xt, _ = small
    m = xmlkit.FastXML(n_trees=3).fit(X, Y)
    one = m.predict(Xt, k=None, threads=1)
    for threads in (2, 3):
        assert (m.predict(Xt, k=None, threads=threads) != one).nnz == 0
    l = xmlkit.LdSM(n_trees=2, max_nodes=60, epochs=2).fit(X, Y)
    assert (l.predict(Xt, k=None, threads=2) != l.predict(Xt, k=None, threads=1)).nnz == 0


def test_routing_does_not_depend_on_the_block(small):
    """A point's scores are the same whether it is routed alone (long
    weight rows searched), in a block (rows scattered once) or with the
    rows taken as unordered (always scattered), and equal to routing it
    node by node here."""
    X, Y, Xt, _ = small
    m = xmlkit.FastXML(n_trees=3).fit(X, Y)
    f = m.forest()
    kernel = ForestKernel(f.roots, f.child, f.w_ptr, f.w_idx, f.w_val, f.l_ptr, f.l_idx,
                          f.l_val, f.n_features, f.n_labels, f.bias, True)
    Xt = as_rows(Xt[:200], "t")
    block = kernel.predict_rows(Xt, 0, 200, 5)
    alone = [kernel.predict_rows(Xt, r, r + 1, 5) for r in range(200)]
    assert np.array_equal(block[1], np.concatenate([a[1] for a in alone]))
    assert np.array_equal(block[2], np.concatenate([a[2] for a in alone]))
    unordered = ForestKernel(f.roots, f.child, f.w_ptr, f.w_idx, f.w_val, f.l_ptr, f.l_idx,
                             f.l_val, f.n_features, f.n_labels, f.bias, False)
    for a, b in zip(block, unordered.predict_rows(Xt, 0, 200, 5)):
        assert np.array_equal(a, b)
    # the leaves by hand: w·x >= 0 goes to the first child
    x = np.hstack([Xt.to_scipy().toarray(), np.full((Xt.shape[0], 1), f.bias)])
    for r in range(0, 200, 40):
        acc = np.zeros(f.n_labels)
        for root in f.roots:
            node = root
            while f.child[node, 0] >= 0:
                lo, hi = f.w_ptr[node], f.w_ptr[node + 1]
                margin = x[r, f.w_idx[lo:hi]] @ f.w_val[lo:hi].astype(np.float64)
                node = f.child[node, 0 if margin >= 0 else 1]
            lo, hi = f.l_ptr[node], f.l_ptr[node + 1]
            acc[f.l_idx[lo:hi]] += f.l_val[lo:hi]
        _, labels, scores = kernel.predict_rows(Xt, r, r + 1, 0)
        assert np.array_equal(labels, np.flatnonzero(acc))
        assert np.allclose(scores, acc[labels] / len(f.roots), rtol=1e-6)


@pytest.mark.parametrize("params", [dict(loss="squared", lr_schedule="constant", lr=0.3),
                                    dict(loss="logistic", lr_schedule="decaying", lr=3.0),
                                    dict(loss="squared", lr_schedule="adagrad", lr=0.5)])
def test_linear_losses_and_rates(params, small):
    X, Y, Xt, Yt = small
    from xmlkit.metrics import ranking_metrics
    m = xmlkit.Linear(epochs=3, **params).fit(X, Y)
    p1 = ranking_metrics(Yt, m.predict(Xt, k=5), (1,))["P@1"]
    assert p1 > 0.3, (params, p1)                  # popularity baseline on Bibtex: 0.14
    assert len(m.arrays_["thresholds"]) == Y.shape[1]


@pytest.mark.parametrize("params", [dict(kernel="cauchy", rank=16, bandwidth=0.3),
                                    dict(kernel="gaussian", rank=0)])
def test_embed_kernels_and_automatic_rank(params, small):
    X, Y, Xt, Yt = small
    from xmlkit.metrics import ranking_metrics
    m = xmlkit.Embed(num_features=200, **params).fit(X, Y)
    rank = int(m.arrays_["rank"][0])
    if params["rank"]:
        assert rank == params["rank"]
    else:                                           # 90% of the spectrum of YᵀY
        G = (Y.T @ Y).toarray()
        lam = np.sort(np.linalg.eigvalsh(G))[::-1]
        share = np.cumsum(lam) / lam.sum()
        assert share[rank - 1] >= 0.9 and (rank == 1 or share[rank - 2] < 0.9)
    assert ranking_metrics(Yt, m.predict(Xt, k=5), (1,))["P@1"] > 0.2    # popularity: 0.14


def test_random_values_parse_as_python_floats(tmp_path):
    rng = np.random.default_rng(5)
    vals = []
    for _ in range(3000):
        mant = rng.integers(1, 10 ** rng.integers(1, 10))
        e = int(rng.integers(-20, 20))
        kind = rng.integers(4)
        x = float(mant) * 10.0 ** e
        s = {0: f"{x:.{rng.integers(1, 10)}g}", 1: f"{x:.{rng.integers(0, 9)}e}",
             2: f"{mant}e{e}", 3: f"{x:.6f}"}[int(kind)]
        if rng.integers(2):
            s = "-" + s
        if float(s) != 0 and np.isfinite(np.float32(float(s))):
            vals.append(s)
    path = tmp_path / "v.txt"
    path.write_text(f"{len(vals)} 1\n" + "".join(f"0:{v}\n" for v in vals))
    got = read_matrix(path).toarray()[:, 0]
    want = np.array([float(v) for v in vals]).astype(np.float32)
    # exactly rounded (through double) but for the rare double-rounding tie: 1 ulp
    ulp = np.spacing(np.abs(want))
    assert np.all(np.abs(got - want) <= ulp), np.flatnonzero(np.abs(got - want) > ulp)[:5]
    assert np.mean(got == want) > 0.999


@pytest.mark.parametrize("family,damage", [
    ("fastxml", "tree"), ("pfastrexml", "tail"), ("pfastrexml", "propensity"),
    ("ldsm", "tree"), ("linear", "arrays"), ("embed", "arrays")])
def test_damaged_model_files_are_refused(family, damage, small, tmp_path):
    X, Y, Xt, _ = small
    quick = {"fastxml": dict(n_trees=1), "pfastrexml": dict(n_trees=1),
             "ldsm": dict(n_trees=1, max_nodes=30, epochs=1),
             "linear": dict(epochs=1), "embed": dict(rank=4, num_features=32)}[family]
    folder = tmp_path / "m"
    fit_folder(xmlkit.REGISTRY[family](**quick), X, Y, folder)
    name = {"tree": "tree_00000.npz", "tail": "tail_centroids.npz",
            "propensity": "inv_propensity.npz", "arrays": f"{family}.npz"}[damage]
    path = folder / name
    assert path.is_file()
    data = path.read_bytes()
    for broken in (data[: len(data) // 2], b"not a zip file", data[:-40] + b"\0" * 40):
        path.write_bytes(broken)
        with pytest.raises(xmlkit.XmlkitError, match=name.replace(".", r"\.")):
            xmlkit.load_model(folder)
    path.unlink()
    with pytest.raises(xmlkit.XmlkitError, match="missing|has no tree|holds no trees"):
        xmlkit.load_model(folder)


@pytest.mark.parametrize("max_newton", [1, 3, 10])
def test_max_newton_bounds_the_solver(max_newton, small):
    """No node's separator takes more Newton steps than max_newton (the
    solver's own counters), and the cap is what makes the trees differ."""
    from xmlkit._ext.fastxml_tree import NdcgPartition, NodeSeparator, TreeGrower
    from xmlkit.models.fastxml import _as_training_csr
    X, Y, _, _ = small
    g = TreeGrower(_as_training_csr(X, "f", X.shape[1]), _as_training_csr(Y, "l", Y.shape[1]),
                   NdcgPartition(True), NodeSeparator(1.0, 1.0, "newglmnet",
                                                      max_newton=max_newton))
    g.grow(0, 0)
    work = g.solver_work()
    assert work["solves"] > 10
    assert work["solves"] <= work["newtons"] <= max_newton * work["solves"]
    # a cap of 1 binds at every node; the trees of the other caps differ from it
    if max_newton == 1:
        assert work["newtons"] == work["solves"]
    else:
        one = xmlkit.FastXML(n_trees=1, max_newton=1).fit(X, Y).trees_[0]
        tree = xmlkit.FastXML(n_trees=1, max_newton=max_newton).fit(X, Y).trees_[0]
        assert not np.array_equal(one["w_val"], tree["w_val"])


def test_fit_folder_without_trees_in_memory(small, tmp_path):
    """keep_trees=False writes the same folder and keeps only the trees'
    shapes: stats as with the whole trees; predicting asks for the folder."""
    X, Y, Xt, _ = small
    a = fit_folder(xmlkit.FastXML(n_trees=2), X, Y, tmp_path / "a")
    b = fit_folder(xmlkit.FastXML(n_trees=2), X, Y, tmp_path / "b", keep_trees=False)
    for name in ("tree_00000.npz", "tree_00001.npz", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert sorted(b.trees_) == [0, 1] and set(b.trees_[0]) == {"child", "depth"}
    assert b.stats() == a.stats()
    with pytest.raises(xmlkit.XmlkitError, match="load its folder"):
        b.predict(Xt)
    assert (xmlkit.load_model(tmp_path / "b").predict(Xt) != a.predict(Xt)).nnz == 0
    # LdSM keeps what its end-of-fit check reads
    c = fit_folder(xmlkit.LdSM(n_trees=1), X, Y, tmp_path / "c", keep_trees=False)
    assert set(c.trees_[0]) == {"first_child", "depth", "l_ptr"} and c.stats()["nodes"] > 1


def test_searched_rows_route_as_scanned_rows(small):
    """Long weight rows are searched for the point's features instead of
    scanned (ascending rows only): the same scores either way, and a forest
    with a row out of order never searches."""
    from xmlkit.models.forest import rows_ascending
    X, Y, Xt, _ = small
    f = xmlkit.FastXML(n_trees=3).fit(X, Y).forest()
    assert f.ascending
    # (points with few features meet rows over 16 times longer: searched)
    assert (16 * (np.diff(Xt.indptr) + 1) < np.diff(f.w_ptr).max()).sum() > 10
    searched = f.predict(Xt)
    f.ascending = False
    scanned = f.predict(Xt)
    assert np.array_equal(searched.indptr, scanned.indptr)
    assert np.array_equal(searched.indices, scanned.indices)
    assert np.array_equal(searched.data, scanned.data)
    ptr = np.array([0, 3, 5])
    assert rows_ascending(ptr, np.array([1, 4, 9, 0, 2]))
    assert not rows_ascending(ptr, np.array([1, 9, 4, 0, 2]))
    assert not rows_ascending(ptr, np.array([1, 4, 9, 2, 2]))


def test_forest_release_keeps_one_copy(small, tmp_path):
    """forest(release=True) (what xml-predict does) lets each tree go once
    packed: the model keeps the trees' shapes and the packed forest, and
    scores as before, also on later calls."""
    X, Y, Xt, _ = small
    m = xmlkit.FastXML(n_trees=3).fit(X, Y)
    before = m.predict(Xt)
    m.save(tmp_path / "m")
    loaded = xmlkit.load_model(tmp_path / "m")
    loaded.forest(release=True)
    assert all(set(t) == {"child", "depth"} for t in loaded.trees_.values())
    for _ in range(2):
        assert (loaded.predict(Xt) != before).nnz == 0
    assert loaded.stats() == m.stats()


@pytest.mark.parametrize("family", [xmlkit.FastXML, xmlkit.PfastreXML])
def test_streamed_trees_give_the_packed_scores(family, small, tmp_path):
    """A folder loaded with stream=True (what xml-predict does: one tree in
    memory at a time) scores as the whole model does, byte for byte, at any
    number of threads; the trees stay on disk."""
    import scipy.sparse as sp
    X, Y, Xt, _ = small
    family(n_trees=3).fit(X, Y).save(tmp_path / "m")
    whole = xmlkit.load_model(tmp_path / "m")
    streamed = xmlkit.load_model(tmp_path / "m", stream=True)
    assert not hasattr(streamed, "trees_") and streamed.forest().n_trees == 3
    for k in (None, 5):
        one = whole.predict(Xt, k=k)
        for threads in (1, 2):
            got = streamed.predict(Xt, k=k, threads=threads)
            assert np.array_equal(one.indptr, got.indptr)
            assert np.array_equal(one.indices, got.indices)
            assert np.array_equal(one.data, got.data)
            # in pieces (what xml-predict writes): the same rows, in order;
            # FastXML's several (they are never all held), PfastreXML's one
            # (re-ranking takes whole rows)
            pieces = list(streamed.predict_pieces(Xt, k=k, threads=threads))
            assert (len(pieces) > 1) == (family is xmlkit.FastXML)
            got = sp.vstack(pieces).tocsr()
            assert got.shape == one.shape
            assert np.array_equal(one.indptr, got.indptr)
            assert np.array_equal(one.indices, got.indices)
            assert np.array_equal(one.data, got.data)


def test_leaf_sums_refuse_what_is_outside_the_tree():
    from xmlkit._ext.forest_predict import LeafSums
    s = LeafSums(2, 5, 1)
    ptr, val = np.array([0, 1, 2]), np.ones(2, np.float32)
    with pytest.raises(ValueError, match="labels outside"):
        s.add_tree(ptr, np.array([0, 5], np.int32), val, np.array([0, 1], np.int32))
    with pytest.raises(ValueError, match="leaf ids outside"):
        s.add_tree(ptr, np.array([0, 4], np.int32), val, np.array([0, 2], np.int32))
    with pytest.raises(ValueError, match="malformed"):
        s.add_tree(np.array([0, 3, 2]), np.array([0, 4], np.int32), val,
                   np.array([0, 1], np.int32))
    with pytest.raises(ValueError, match="0 of the 1 trees"):
        s.score_rows(0, 2, 0)
    s.add_tree(ptr, np.array([0, 4], np.int32), val, np.array([1, 1], np.int32))
    with pytest.raises(ValueError, match="already added"):
        s.add_tree(ptr, np.array([0, 4], np.int32), val, np.array([0, 1], np.int32))
    got = s.score_rows(0, 2, 0)
    assert list(got[0]) == [0, 1, 2] and list(got[1]) == [4, 4]


def test_zero_leaf_values_are_scored_once():
    """A leaf value of exactly 0 (a C++ tool's file may hold one) gives its
    label one entry per row, in the whole and the streamed forest alike."""
    import scipy.sparse as sp
    from xmlkit._ext.forest_predict import LeafSums
    l_ptr, l_idx = np.array([0, 2]), np.array([1, 3], np.int32)
    l_val = np.array([0.0, 0.5], np.float32)
    X = sp.csr_matrix(np.ones((2, 3), np.float32))
    f = ForestKernel([0, 1], np.full((2, 2), -1, np.int32), np.array([0, 0, 0]),
                     np.zeros(0, np.int32), np.zeros(0, np.float32),
                     np.array([0, 2, 4]), np.tile(l_idx, 2), np.tile(l_val, 2), 3, 4, 1.0)
    whole = f.predict_rows(X, 0, 2, 0)
    s = LeafSums(2, 4, 2)
    for _ in range(2):
        s.add_tree(l_ptr, l_idx, l_val, np.zeros(2, np.int32))
    streamed = s.score_rows(0, 2, 0)
    for got in (whole, streamed):
        assert list(got[0]) == [0, 2, 4] and list(got[1]) == [1, 3, 1, 3]
        assert list(got[2]) == [0.0, 0.5, 0.0, 0.5]
