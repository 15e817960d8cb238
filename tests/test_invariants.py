"""Invariants per parameter and equivalences, through the estimators:
what must hold whatever the data (scikit-learn's habit), and refusal of
damaged model files."""
import numpy as np
import pytest

import xmlkit
from xmlkit.driver import fit_folder
from xmlkit.io import read_matrix
from xmlkit._ext.forest_predict import ForestKernel
from xmlkit.csr import as_rows, rows_ascending


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


def kernel_of(trees, n_features, n_labels, bias=1.0, ascending=None):
    """A ForestKernel over trees, each made ready (rows taken as ascending
    when they are, or as `ascending` says)."""
    kernel = ForestKernel(trees, n_features, n_labels, bias)
    for t, tree in enumerate(trees):
        kernel.ready(t, rows_ascending(tree["w_ptr"], tree["w_idx"]) if ascending is None
                     else ascending)
    return kernel


def leaves_of(tree, X, n_labels):
    """The leaf of `tree` that each row of X reaches."""
    X = as_rows(X)
    leaves = np.zeros((1, X.shape[0]), np.int32)
    kernel_of([tree], X.shape[1], n_labels).route(0, X, 0, X.shape[0], leaves)
    return leaves[0]


def points_reaching_each_node(tree, X, n_labels):
    """Training points routed through a tree by the stored split rule (which
    is the split: the rounded stored weights routed the points in training):
    how many reach each node."""
    reach = np.bincount(leaves_of(tree, X, n_labels), minlength=len(tree["child"]))
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
        leaves = leaves_of(tree, X, Y.shape[1])
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
    """A point's scores are the same whether it is routed alone (its own
    walk: rows dotted with it, searched for its features, or read from
    their dense copies), in a block (rows scattered once, searched or dense)
    or with the rows taken as unordered (always scattered), tree by tree
    for a block (route, then score_leaves), and equal to routing it node by
    node here."""
    X, Y, Xt, _ = small
    m = xmlkit.FastXML(n_trees=3).fit(X, Y)
    trees = [m.trees_[t] for t in sorted(m.trees_)]
    D = X.shape[1]
    # (Bibtex's roots hold over a quarter of the features: dense copies)
    assert max(np.diff(t["w_ptr"]).max() for t in trees) * 4 >= D + 1
    kernel = kernel_of(trees, D, Y.shape[1])
    Xt = as_rows(Xt[:200], "t")
    block = kernel.predict_rows(Xt, 0, 200, 5)
    alone = [kernel.predict_rows(Xt, r, r + 1, 5) for r in range(200)]
    assert np.array_equal(block[1], np.concatenate([a[1] for a in alone]))
    assert np.array_equal(block[2], np.concatenate([a[2] for a in alone]))
    unordered = kernel_of(trees, D, Y.shape[1], ascending=False)
    for a, b in zip(block, unordered.predict_rows(Xt, 0, 200, 5)):
        assert np.array_equal(a, b)
    leaves = np.zeros((3, 200), np.int32)
    for t in range(3):
        for r0 in range(0, 200, 64):
            kernel.route(t, Xt, r0, min(200, r0 + 64), leaves)
    for a, b in zip(block, kernel.score_leaves(leaves, 0, 200, 5)):
        assert np.array_equal(a, b)
    # the leaves by hand: w·x >= 0 goes to the first child
    x = np.hstack([Xt.to_scipy().toarray(), np.full((Xt.shape[0], 1), 1.0)])
    for r in range(0, 200, 40):
        acc = np.zeros(Y.shape[1])
        for tree in trees:
            node = 0
            while tree["child"][node, 0] >= 0:
                lo, hi = tree["w_ptr"][node], tree["w_ptr"][node + 1]
                margin = x[r, tree["w_idx"][lo:hi]] @ tree["w_val"][lo:hi].astype(np.float64)
                node = tree["child"][node, 0 if margin >= 0 else 1]
            lo, hi = tree["l_ptr"][node], tree["l_ptr"][node + 1]
            acc[tree["l_idx"][lo:hi]] += tree["l_val"][lo:hi]
        _, labels, scores = kernel.predict_rows(Xt, r, r + 1, 0)
        assert np.array_equal(labels, np.flatnonzero(acc))
        assert np.allclose(scores, acc[labels] / len(trees), rtol=1e-6)


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
    from xmlkit._ext.fastxml_partition import NdcgPartition
    from xmlkit._ext.fastxml_separator import NodeSeparator
    from xmlkit._ext.fastxml_tree import TreeGrower
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
    scanned (ascending rows only): the same scores either way, and rows out
    of order are never searched."""
    X, Y, Xt, _ = small
    m = xmlkit.FastXML(n_trees=3).fit(X, Y)
    trees = [m.trees_[t] for t in sorted(m.trees_)]
    assert all(rows_ascending(t["w_ptr"], t["w_idx"]) for t in trees)
    # (points with few features meet rows over 16 times longer: searched)
    longest = max(np.diff(t["w_ptr"]).max() for t in trees)
    assert (16 * (np.diff(Xt.indptr) + 1) < longest).sum() > 10
    R = as_rows(Xt)
    searched = kernel_of(trees, X.shape[1], Y.shape[1]).predict_rows(R, 0, R.shape[0], 0)
    scanned = kernel_of(trees, X.shape[1], Y.shape[1], ascending=False).predict_rows(
        R, 0, R.shape[0], 0)
    for a, b in zip(searched, scanned):
        assert np.array_equal(a, b)
    ptr = np.array([0, 3, 5])
    assert rows_ascending(ptr, np.array([1, 4, 9, 0, 2]))
    assert not rows_ascending(ptr, np.array([1, 9, 4, 0, 2]))
    assert not rows_ascending(ptr, np.array([1, 4, 9, 2, 2]))


@pytest.mark.parametrize("family", [xmlkit.FastXML, xmlkit.PfastreXML])
def test_loaded_trees_are_their_files_pages(family, small, tmp_path):
    """A loaded folder's trees are read-only views of their mapped files (no
    copy): the model scores as the fitted one, byte for byte, at any number
    of threads, whole or in pieces (several: blocks of rows, re-ranked on
    their threads for PfastreXML), with each tree's pages let go after use
    (release) or not, and again after that; pickled (for Dask), the trees
    are plain arrays."""
    import pickle
    import scipy.sparse as sp
    X, Y, Xt, _ = small
    fitted = family(n_trees=3).fit(X, Y)
    fitted.save(tmp_path / "m")
    loaded = xmlkit.load_model(tmp_path / "m")
    tree = loaded.trees_[0]
    assert not tree["w_val"].flags.writeable and not tree["w_val"].flags.owndata
    Xt = sp.vstack([Xt] * 2).tocsr()            # (600 rows: routed a tree at a time)
    for k in (None, 5):
        one = fitted.predict(Xt, k=k)
        for threads in (1, 2):
            for release in (True, False, False):
                got = sp.vstack(list(loaded.predict_pieces(Xt, k=k, threads=threads,
                                                           release=release))).tocsr()
                assert got.shape == one.shape
                assert np.array_equal(one.indptr, got.indptr)
                assert np.array_equal(one.indices, got.indices)
                assert np.array_equal(one.data, got.data)
            assert len(list(loaded.predict_pieces(Xt, k=k, threads=threads))) > 1
            assert (loaded.predict(Xt, k=k, threads=threads) != one).nnz == 0
    copy = pickle.loads(pickle.dumps(loaded))
    assert type(copy.trees_[0]) is dict and copy.trees_[0]["w_val"].flags.writeable
    assert (copy.predict(Xt) != fitted.predict(Xt)).nnz == 0


def test_kernel_routes_only_checked_trees():
    """A tree is routed only once marked ready (its contents checked)."""
    import scipy.sparse as sp
    tree = {"child": np.full((1, 2), -1, np.int32), "w_ptr": np.zeros(2, np.int64),
            "w_idx": np.zeros(0, np.int32), "w_val": np.zeros(0, np.float32),
            "l_ptr": np.array([0, 1]), "l_idx": np.array([2], np.int32),
            "l_val": np.ones(1, np.float32)}
    k = ForestKernel([tree], 3, 4, 1.0)
    X = sp.csr_matrix(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="not checked"):
        k.predict_rows(X, 0, 2, 0)
    with pytest.raises(ValueError, match="not checked"):
        k.route(0, X, 0, 2, np.zeros((1, 2), np.int32))
    with pytest.raises(ValueError, match="disagree"):
        ForestKernel([{**tree, "w_ptr": np.zeros(3, np.int64)}], 3, 4, 1.0)
    k.ready(0, True)
    assert list(k.predict_rows(X, 0, 2, 0)[1]) == [2, 2]


def test_zero_leaf_values_are_scored_once():
    """A leaf value of exactly 0 (a C++ tool's file may hold one) gives its
    label one entry per row, routed in a block or tree by tree alike."""
    import scipy.sparse as sp
    tree = {"child": np.full((1, 2), -1, np.int32), "w_ptr": np.zeros(2, np.int64),
            "w_idx": np.zeros(0, np.int32), "w_val": np.zeros(0, np.float32),
            "l_ptr": np.array([0, 2]), "l_idx": np.array([1, 3], np.int32),
            "l_val": np.array([0.0, 0.5], np.float32)}
    X = as_rows(sp.csr_matrix(np.ones((2, 3), np.float32)))
    f = kernel_of([tree, tree], 3, 4)
    whole = f.predict_rows(X, 0, 2, 0)
    leaves = np.zeros((2, 2), np.int32)
    for t in range(2):
        f.route(t, X, 0, 2, leaves)
    by_tree = f.score_leaves(leaves, 0, 2, 0)
    for got in (whole, by_tree):
        assert list(got[0]) == [0, 2, 4] and list(got[1]) == [1, 3, 1, 3]
        assert list(got[2]) == [0.0, 0.5, 0.0, 0.5]
