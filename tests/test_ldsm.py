"""LdSM: the node objective and the chosen subset by hand, determinism across
thread counts, CLI = API, model folder round trip."""
import json

import numpy as np
import pytest

import xmlkit
from xmlkit._ext.ldsm_tree import choose_subset, node_objective
from xmlkit.errors import XmlkitWarning
from xmlkit.io import read_matrix
from xmlkit.metrics import ranking_metrics

from conftest import TEST, TRAIN, run_cli



def test_objective_by_hand():
    # binary node, p = (0.7, 0.5): balance |0.7 - 0.5| = 0.2, multi-way |1.2 - 1| = 0.2
    # labels a (pi 0.6, p_a = (1, 0.25)) and b (pi 0.4, p_b = (0.5, 0.5)):
    # integrity 0.6 * 0.75 + 0.4 * 0 = 0.45
    # J = 0.2 + 1 * 0.2 - 2 * 0.45 = -0.5
    J = node_objective([0.7, 0.5], [[1, 0.25], [0.5, 0.5]], [0.6, 0.4], 1.0, 2.0)
    assert J == pytest.approx(-0.5)
    # ternary: p = (0.5, 0.3, 0.2): balance 0.2 + 0.3 + 0.1 = 0.6, multi-way 0;
    # one label, pi 1, p_cond (1, 0, 0): integrity 1 + 1 + 0 = 2 -> J = 0.6 - 2 * 2 = -3.4
    assert node_objective([0.5, 0.3, 0.2], [[1, 0, 0]], [1.0], 1.0, 2.0) == pytest.approx(-3.4)


def test_chosen_subset_by_hand():
    # binary node after 9 label occurrences; the new example (label 0, ell 1) makes N 10.
    # p = (0.5, 0.5); label 0 seen 4 times before (n_0 = 5 now), always in child 0
    # (p_{0|0} = 1, p_{1|0} = 0).
    p, pc, counts = [0.5, 0.5], np.array([[1.0, 0.0], [0.0, 0.0]]), [5, 0]
    # S = {0}:   p~ = (0.55, 0.45): 0.1 + 0.0 - 2 * 0.5 * |1 - 0|   = -0.9
    # S = {1}:   p~ = (0.45, 0.55): 0.1 + 0.0 - 2 * 0.5 * |0.8 - 0.2| = -0.5
    # S = {0,1}: p~ = (0.55, 0.55): 0.0 + 0.1 - 2 * 0.5 * |1 - 0.2|   = -0.7
    assert choose_subset(p, pc, counts, 10, [0], 1.0, 2.0) == 0b01
    # with a heavy multi-way weight nothing changes; with no integrity weight
    # {0} and {1} tie at 0.1 (balance only; the seeded coin decides) and {0,1}
    # costs 2 * 0.1 = 0.2
    assert choose_subset(p, pc, counts, 10, [0], 5.0, 2.0) == 0b01
    picks = {choose_subset(p, pc, counts, 10, [0], 2.0, 0.0, seed=s) for s in range(20)}
    assert picks == {0b01, 0b10}


@pytest.mark.slow
def test_deterministic_at_any_thread_count_and_cli_equals_api(tmp_path, bibtex):
    X, Y, Xt, Yt = bibtex
    a = xmlkit.LdSM(n_trees=2, max_nodes=200, epochs=2, threads=1).fit(X, Y)
    b = xmlkit.LdSM(n_trees=2, max_nodes=200, epochs=2, threads=2).fit(X, Y)
    for t in a.trees_:
        for key in a.trees_[t]:
            assert np.array_equal(a.trees_[t][key], b.trees_[t][key]), key
    S = a.predict(Xt, k=None)
    assert ranking_metrics(Yt, S, (1,))["P@1"] > 0.35      # popularity baseline: 0.14
    for tree in a.trees_.values():                # each child one level below its parent
        fc, depth = tree["first_child"], tree["depth"]
        for node in np.flatnonzero(fc >= 0):
            assert np.all(depth[fc[node]:fc[node] + 2] == depth[node] + 1)
        assert depth[0] == 0 and len(fc) <= 200

    model_dir, scores = tmp_path / "m", tmp_path / "s.txt"
    r = run_cli("xml-train", TRAIN, model_dir, "--algorithm", "ldsm", "-t", "2",
                "--max-nodes", "200", "--epochs", "2", "-T", "2", "-q")
    assert r.returncode == 0, r.stderr
    r = run_cli("xml-predict", TEST, scores, model_dir, "-q", "-T", "2")
    assert r.returncode == 0, r.stderr
    S_cli = read_matrix(scores)
    assert np.array_equal(S_cli.indptr, S.indptr) and np.array_equal(S_cli.indices, S.indices)
    assert np.abs(S_cli.data - S.data).max() <= 6e-7
    manifest = json.loads((model_dir / "manifest.json").read_text())
    assert manifest["algorithm"] == "ldsm" and manifest["params"]["arity"] == 2
    loaded = xmlkit.load_model(model_dir)
    assert (loaded.predict(Xt, k=None) != S).nnz == 0
    # a rerun keeps the trees; other settings are refused
    r = run_cli("xml-train", TRAIN, model_dir, "--algorithm", "ldsm", "-t", "2",
                "--max-nodes", "200", "--epochs", "3", "-q")
    assert r.returncode == 2 and "epochs" in r.stderr


def test_arity_and_routing(bibtex):
    X, Y, Xt, Yt = bibtex
    m = xmlkit.LdSM(n_trees=1, arity=4, max_nodes=100, epochs=1).fit(X, Y)
    t = m.trees_[0]
    internal = np.flatnonzero(t["first_child"] >= 0)
    assert len(internal) >= 1 and len(t["first_child"]) <= 100
    # children of a node are 4 consecutive ids; a leaf holds each label's
    # share of its points: in (0, 1], summing to the leaf points' mean number
    # of labels (every Bibtex point has at least one)
    assert np.all(np.diff(np.sort(t["first_child"][internal])) == 4)
    leaves = np.flatnonzero(t["first_child"] < 0)
    sums = np.add.reduceat(t["l_val"], t["l_ptr"][leaves][np.diff(t["l_ptr"])[leaves] > 0])
    per_point = np.diff(Y.indptr)
    assert per_point.min() >= 1
    assert np.all(t["l_val"] > 0) and np.all(t["l_val"] <= 1)
    assert np.all(sums >= 1 - 1e-5) and np.all(sums <= per_point.max() + 1e-5)
    S = m.predict(Xt, k=3)
    assert np.all(np.diff(S.indptr) <= 3)


def test_leaf_values_are_shares_of_points(bibtex):
    """A root that may not split (a budget of one node) is the only leaf:
    its values are each label's count over the number of points, by hand."""
    X, Y, Xt, Yt = bibtex
    t = xmlkit.LdSM(n_trees=1, max_nodes=1).fit(X, Y).trees_[0]
    counts = np.bincount(Y.indices, minlength=Y.shape[1])
    assert np.array_equal(t["l_idx"], np.flatnonzero(counts))
    assert np.allclose(t["l_val"], counts[counts > 0] / X.shape[0], rtol=1e-6)


def test_adagrad_prior_damps_the_steps(bibtex):
    """The prior (0: the authors' update) makes every step smaller: the
    root's regressors, trained on the same stream, have smaller weights."""
    X, Y, Xt, Yt = bibtex
    kw = dict(n_trees=1, max_nodes=3, epochs=1)
    a = xmlkit.LdSM(adagrad_prior=0.0, **kw).fit(X, Y).trees_[0]
    b = xmlkit.LdSM(**kw).fit(X, Y).trees_[0]
    assert xmlkit.LdSM().adagrad_prior == 1.0
    assert np.abs(b["reg_val"]).sum() < np.abs(a["reg_val"]).sum()


def test_bad_options(tmp_path):
    for args in (["--arity", "1"], ["--epochs", "0"], ["--lr", "-1"], ["-s", "2"],
                 ["--adagrad-prior", "-1"]):
        r = run_cli("xml-train", TRAIN, tmp_path / "m", "--algorithm", "ldsm", *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, args


def _dense_data(n, d, L, scale, seed):
    """Dense, non-negative, unnormalised features (audio/image-descriptor
    like): each label adds its own gamma-distributed profile."""
    import scipy.sparse as sp
    rng = np.random.default_rng(seed)
    mu, base = rng.gamma(2.0, 1.0, (L, d)), rng.gamma(2.0, 1.0, d)
    Y = (rng.random((n, L)) < 0.3).astype(np.float32)
    Y[Y.sum(1) == 0, 0] = 1
    X = np.abs(base + Y @ mu + rng.normal(0, 1.5, (n, d))) * scale
    return sp.csr_matrix(X.astype(np.float32)), sp.csr_matrix(Y)


def test_dense_unnormalised_data_grow_real_trees():
    """Once every tree stayed a single root on such data (the label prior for
    every point); standardised, the trees split and rank like FastXML."""
    X, Y = _dense_data(600, 40, 6, 10.0, 0)
    X, Y, Xt, Yt = X[:400], Y[:400], X[400:], Y[400:]
    m = xmlkit.LdSM(n_trees=3, max_nodes=200, epochs=5).fit(X, Y)
    assert m.stats()["nodes"] > 20 and m.feature_scaling_ is not None
    f = xmlkit.FastXML(n_trees=3).fit(X, Y)
    p_ldsm = ranking_metrics(Yt, m.predict(Xt), (1,))["P@1"]
    p_fast = ranking_metrics(Yt, f.predict(Xt), (1,))["P@1"]
    prior = ranking_metrics(Yt, xmlkit.LdSM(n_trees=1, max_nodes=1).fit(X, Y).predict(Xt),
                            (1,))["P@1"]
    assert p_ldsm > prior + 0.2 and p_ldsm > p_fast - 0.1
    with pytest.warns(XmlkitWarning, match="could not split their root"):
        raw = xmlkit.LdSM(n_trees=1, max_nodes=200, epochs=5, scale_dense=False).fit(X, Y)
    assert raw.feature_scaling_ is None and raw.stats()["nodes"] == 1


def test_standardisation_by_hand_and_sparse_data_are_left_alone(bibtex):
    import scipy.sparse as sp
    from xmlkit.csr import as_rows
    from xmlkit.models.ldsm import dense_scaling, standardised
    X = sp.csr_matrix(np.array([[1.0, 2.0, 5.0], [3.0, 2.0, 0.0]], np.float32))
    mean, scale = dense_scaling(as_rows(X))
    # column 0: mean 2, std 1; column 1: constant (scale 1); column 2: mean 2.5, std 2.5
    assert mean == pytest.approx([2, 2, 2.5]) and scale == pytest.approx([1, 1, 0.4])
    S = standardised(as_rows(X), mean, scale).to_scipy().toarray()
    assert S == pytest.approx(np.array([[-1, 0, 1], [1, 0, -1]]))
    assert dense_scaling(as_rows(bibtex[0])) is None


def test_a_tree_that_cannot_split_is_reported(tmp_path):
    """Identical points with different labels: no split can separate them;
    xml-train says so on stderr (one line) and still writes the model."""
    data = tmp_path / "same.txt"
    data.write_text("40 3 2\n" + "".join(f"{i % 2} 0:1 1:2 2:3\n" for i in range(40)))
    r = run_cli("xml-train", data, tmp_path / "m", "--algorithm", "ldsm", "-t", "2", "-q")
    assert r.returncode == 0
    assert r.stderr.strip().splitlines() == [
        "xml-train: warning: LdSM: 2 of 2 trees could not split their root (every trained "
        "split sent all points to one child); their scores are the label prior"]


def test_scaled_model_round_trip_and_old_folders(tmp_path):
    X, Y = _dense_data(200, 10, 4, 5.0, 2)
    m = xmlkit.LdSM(n_trees=2, max_nodes=50, epochs=3).fit(X, Y)
    m.save(tmp_path / "m")
    loaded = xmlkit.load_model(tmp_path / "m")
    assert (loaded.predict(X) != m.predict(X)).nnz == 0
    # a folder from before scale_dense (no such parameter): read as unscaled
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    del manifest["params"]["scale_dense"]
    assert xmlkit.LdSM.from_manifest(manifest).scale_dense is False
    del manifest["params"]["max_leaf"]
    assert xmlkit.LdSM.from_manifest(manifest).max_leaf == 1
    del manifest["params"]["adagrad_prior"]       # (grown with AdaGrad's sums from 0)
    assert xmlkit.LdSM.from_manifest(manifest).adagrad_prior == 0.0


def test_leaf_size_and_the_automatic_node_budget(bibtex):
    """max_leaf: no node of at most that many points is split (a root of
    fewer points stays a leaf; larger leaves, fewer nodes); max_nodes
    "auto" stands for max(2000, N) and is what the model records; a tree
    that reaches a budget is reported."""
    from xmlkit.models.ldsm import MIN_AUTO_NODES
    X, Y, _, _ = bibtex
    X, Y = X[:600], Y[:600]
    assert xmlkit.LdSM(n_trees=1, max_leaf=600, epochs=1).fit(X, Y).stats()["nodes"] == 1
    sizes = [xmlkit.LdSM(n_trees=1, max_leaf=m, epochs=2).fit(X, Y).stats()["nodes"]
             for m in (2, 10, 50)]
    assert sizes[0] > sizes[1] > sizes[2] > 1
    m = xmlkit.LdSM(n_trees=1, epochs=1)
    assert m.auto_nodes(600) == MIN_AUTO_NODES and m.auto_nodes(10 ** 6) == 10 ** 6
    m.fit(X, Y)
    assert m.max_nodes == "auto" and m.model_params()["max_nodes"] == MIN_AUTO_NODES
    assert m.manifest()["params"]["max_nodes"] == MIN_AUTO_NODES
    with pytest.warns(XmlkitWarning, match="1 of 1 trees reached the node budget"):
        xmlkit.LdSM(n_trees=1, max_nodes=9, epochs=1).fit(X, Y)


def _forest_by_hand():
    """One tree: a root with 2 children whose regressors read feature 0
    (child 0) and feature 1 (child 1); leaf 1 holds labels 0 and 1 at 0.5
    each, leaf 2 holds label 2 (and 3 features: 2 plus the bias)."""
    m = xmlkit.LdSM(n_trees=1)
    m.n_features_in_, m.n_labels_ = 2, 4
    m.trees_ = {0: {
        "first_child": np.array([1, -1, -1], np.int32), "depth": np.array([0, 1, 1], np.int32),
        "reg_row": np.array([0, -1, -1], np.int32), "reg_ptr": np.array([0, 1, 2], np.int64),
        "reg_idx": np.array([0, 1], np.int32), "reg_val": np.array([1, 1], np.float32),
        "l_ptr": np.array([0, 0, 2, 3], np.int64), "l_idx": np.array([0, 1, 2], np.int32),
        "l_val": np.array([0.5, 0.5, 1.0], np.float32)}}
    return m


def test_rows_are_filled_to_k_from_the_label_marginal():
    """A point reaching leaf 1 gets labels 0 and 1 (0.5 each); with k = 3 the
    third label comes from the forest's marginal (leaf sums: label 2 1.0,
    labels 0 and 1 0.5, label 3 never), scored 0.5 · (lowest score 0.5) ·
    (1.0 / 1.0) = 0.25; a point reaching leaf 2 (label 2, score 1) gets
    labels 0 and 1 at 0.5 · 1 · (0.5 / 1.0); k = 4 adds nothing more (label 3 is in no leaf);
    k = None (every label the leaves gave) fills nothing."""
    import scipy.sparse as sp
    m = _forest_by_hand()
    X = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0]], np.float32))
    S = m.predict(X, k=3).toarray()
    assert S[0].tolist() == [0.5, 0.5, 0.25, 0] and S[1].tolist() == [0.25, 0.25, 1.0, 0]
    S2 = m.predict(X[1:], k=2).toarray()
    assert S2[0].tolist() == [0.25, 0, 1.0, 0]       # ties to the lower label
    assert m.predict(X, k=4).nnz == 6
    assert m.predict(X, k=None).nnz == 3
