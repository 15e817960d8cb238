"""PfastreXML: propensities by hand, the tail re-ranking formula by hand,
interop with the C++ tool's model folder, the -S 1 (PfastXML) path, CLI = API."""
import json

import numpy as np
import pytest
import scipy.sparse as sp

import xmlkit
from xmlkit._ext.tail_rerank import TailKernel
from xmlkit.io import read_dataset, read_inv_propensity, read_matrix
from xmlkit.metrics import inverse_propensity, ranking_metrics

from conftest import TEST, TRAIN, run_cli



def test_inverse_propensity_by_hand():
    # N = 4 points; label counts 0, 1, 4; A = 0.55, B = 1.5:
    # C = (ln 4 - 1) * 2.5^0.55 = 0.386294 * 1.655300 = 0.639419
    # q = 1 + C * (N_l + 1.5)^-0.55: 1.5^-0.55 = 0.800004, 2.5^-0.55 = 0.604119,
    # 5.5^-0.55 = 0.391567
    Y = sp.csr_matrix(np.array([[0, 1, 1], [0, 0, 1], [0, 0, 1], [0, 0, 1]]))
    q = inverse_propensity(Y, 0.55, 1.5)
    assert q == pytest.approx([1.511605, 1.386294, 1.250372], abs=2e-6)


def test_inverse_propensity_of_rows_equals_scipy():
    """Rows (what the commands pass) are counted without scipy: the same
    propensities, duplicate entries of a row and stored zeros as scipy
    counts them (once, and not)."""
    from xmlkit.csr import Rows
    # rows: {0, 2, 2} (label 2 twice), {1}, {0: a stored zero, 1}, {}
    Y = Rows(np.array([0, 3, 4, 6, 6]), np.array([0, 2, 2, 1, 0, 1], dtype=np.int32),
             np.array([1, 1, 1, 1, 0, 1], dtype=np.float32), (4, 3))
    q = inverse_propensity(Y, 0.55, 1.5)
    assert np.array_equal(q, inverse_propensity(Y.to_scipy(), 0.55, 1.5))
    # points per label: 1, 2, 1
    c = (np.log(4) - 1) * 2.5 ** 0.55
    assert q == pytest.approx(1 + c * (np.array([1, 2, 1]) + 1.5) ** -0.55)


def test_summed_duplicates_equals_scipy():
    """csr.summed_duplicates (the training paths' canonical rows without
    scipy): R itself exactly when no row repeats an index (an index ending
    one row and starting the next is no repeat), else scipy's sum."""
    from xmlkit.csr import Rows, summed_duplicates
    rng = np.random.default_rng(1)
    for _ in range(300):
        rows = [np.sort(rng.integers(0, 5, rng.integers(0, 5))) for _ in range(rng.integers(1, 8))]
        ptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        idx = np.concatenate(rows).astype(np.int32)
        R = Rows(ptr, idx, rng.random(len(idx)).astype(np.float32), (len(rows), 5))
        S = summed_duplicates(R)
        assert (S is not R) == any(len(r) != len(set(r)) for r in rows)
        ref = R.to_scipy().copy()
        ref.sum_duplicates()
        assert np.array_equal(S.indptr, ref.indptr) and np.array_equal(S.indices, ref.indices)
        assert np.array_equal(S.data, ref.data)


def test_tail_centroids_by_hand():
    """Each label's centroid: the mean of the unit-length rows (bias
    appended) of the points carrying it; as CSR over the D + 1 features."""
    from xmlkit.csr import Rows
    from xmlkit.models.pfastrexml import centroids_by_feature
    # points: (3, 0) and (0, 4) with bias 0 -> unit rows (1, 0, 0), (0, 1, 0);
    # (1, 1) with bias 1 -> (1, 1, 1) / sqrt(3). Labels: 0 on points 0, 1;
    # 1 on points 1, 2; label 2 on none.
    X = Rows(np.array([0, 1, 2, 4]), np.array([0, 1, 0, 1], dtype=np.int32),
             np.array([3, 4, 1, 1], dtype=np.float32), (3, 2))
    Y = Rows(np.array([0, 1, 3, 4]), np.array([0, 0, 1, 1], dtype=np.int32),
             np.ones(4, dtype=np.float32), (3, 3))
    # bias 0 leaves point 2 at (1, 1, 0) / sqrt(2) (the bias entry is a zero)
    ptr, labels, values = centroids_by_feature(X, Y, 0.0)
    s = 1 / np.sqrt(2)
    dense = np.zeros((3, 3))
    for f in range(3):
        dense[f, labels[ptr[f]:ptr[f + 1]]] = values[ptr[f]:ptr[f + 1]]
    expected = np.array([[0.5, s / 2, 0], [0.5, (1 + s) / 2, 0], [0, 0, 0]])
    np.testing.assert_allclose(dense, expected, rtol=1e-6)
    assert ptr[-1] == 4          # no zero entries stored
    # bias 1: point 0 -> (3, 0, 1) / sqrt(10), point 1 -> (0, 4, 1) / sqrt(17)
    ptr, labels, values = centroids_by_feature(X, Y, 1.0)
    a, b, c = 1 / np.sqrt(10), 1 / np.sqrt(17), 1 / np.sqrt(3)
    bias_row = values[ptr[2]:ptr[3]]
    np.testing.assert_allclose(bias_row, [(a + b) / 2, (b + c) / 2], rtol=1e-6)


def test_inverse_propensity_matches_the_cpp_fixture(shared):
    """The fixture's inv_prop.txt was computed from the Bibtex training labels."""
    train = shared / "data" / "bibtex" / "bibtex_train.txt.xz"
    _, Y = read_dataset(train)
    q_ref = read_inv_propensity(shared / "fixtures" / "cpp_reference" / "inv_prop.txt",
                                Y.shape[1])
    assert np.abs(inverse_propensity(Y) - q_ref).max() < 1e-5


def test_tail_rerank_by_hand():
    # one point x = (3, 4), bias 0 -> x^ = (0.6, 0.8, 0)
    # label 0: mu = (0.6, 0.8, 0): ||x^ - mu||^2 = 0      -> t = 1/2
    # label 1: mu = (1, 0, 0):     ||x^ - mu||^2 = 0.8    -> t = 1/(1+e^0.8)  (gamma 1)
    # label 2: not re-ranked (no tree score)
    mu = sp.csr_matrix(np.array([[0.6, 0.8, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]))
    by_feature = sp.csr_matrix(mu.T)
    tree = sp.csr_matrix(np.array([[0.2, 0.5, 0.0]], np.float32))
    x = sp.csr_matrix(np.array([[3.0, 4.0]], np.float32))

    def kernel(gamma):
        return TailKernel(by_feature.indptr, by_feature.indices, by_feature.data, 0.0, gamma,
                          0.8, 3)
    ptr, idx, val = kernel(1.0).rerank_rows(x, tree, 0, 1, 0)
    t1 = 1 / (1 + np.exp(0.8))
    assert list(ptr) == [0, 2] and list(idx) == [0, 1]
    assert val == pytest.approx([0.2 ** 0.8 * 0.5 ** 0.2, 0.5 ** 0.8 * t1 ** 0.2], rel=1e-6)
    # with gamma 30 the far label 1 drops below label 0 despite its higher tree
    # score (0.5^0.8 e^(-24 * 0.2) = 0.0047 < 0.2^0.8 0.5^0.2 = 0.24): top-1 keeps 0
    _, idx1, _ = kernel(30.0).rerank_rows(x, tree, 0, 1, 1)
    assert list(idx1) == [0]


def micro_units(path):
    """A score file's entries as (row, label, value in 1e-6 units), exact."""
    lines = path.read_text().split("\n")[1:]
    return [(i, int(t.split(":")[0]), round(float(t.split(":")[1]) * 1e6))
            for i, line in enumerate(lines) for t in line.split()]


def test_cpp_model_interop(tmp_path, shared):
    """The C++ PfastreXML folder (13-line param, 3 trees, w) scores the Bibtex
    test points as PfastreXML_predict did: the same labels in every row and
    every score within 1e-6 (the files hold 6 decimals; about 0.4% of the
    entries differ by one unit in the last decimal, float rounding in the C++
    tool against xmlkit's double arithmetic)."""
    ref = shared / "fixtures" / "cpp_reference"
    test = shared / "data" / "bibtex" / "bibtex_test.txt.xz"
    scores = tmp_path / "scores.txt"
    r = run_cli("xml-predict", test, scores, ref / "pfastrexml_model", "-q")
    assert r.returncode == 0, r.stderr
    assert read_matrix(scores).shape == read_matrix(ref / "pfastrexml_scores.txt").shape
    ours, theirs = micro_units(scores), micro_units(ref / "pfastrexml_scores.txt")
    assert [e[:2] for e in ours] == [e[:2] for e in theirs]
    diff = np.abs(np.array([e[2] for e in ours]) - np.array([e[2] for e in theirs]))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01


@pytest.mark.slow
def test_cli_and_api_agree_and_trees_only(tmp_path, bibtex):
    X, Y, Xt, Yt = bibtex
    model_dir, scores = tmp_path / "model", tmp_path / "scores.txt"
    r = run_cli("xml-train", TRAIN, model_dir, "--algorithm", "pfastrexml", "-t", "3",
                "--seed", "5", "-q")
    assert r.returncode == 0, r.stderr
    r = run_cli("xml-predict", TEST, scores, model_dir, "-q")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((model_dir / "manifest.json").read_text())
    assert manifest["algorithm"] == "pfastrexml"
    assert manifest["params"]["labels_per_leaf"] == 100 and manifest["params"]["gamma"] == 30

    model = xmlkit.PfastreXML(n_trees=3, seed=5).fit(X, Y)
    S_api, S_cli = model.predict(Xt, k=None), read_matrix(scores)
    assert np.array_equal(S_cli.indptr, S_api.indptr)
    assert np.array_equal(S_cli.indices, S_api.indices)
    assert np.abs(S_cli.data - S_api.data).max() <= 6e-7
    q = inverse_propensity(Y)
    assert ranking_metrics(Yt, S_api, (1,), inv_prop=q)["PSP@1"] > 0.3

    # the trees were grown on q-weighted labels: a leaf's values are q_l times
    # the fraction of its points carrying l, so never above q_l
    tree = model.trees_[0]
    assert np.all(tree["l_val"] <= q[tree["l_idx"]] * (1 + 1e-6))

    # -S 1 at predict time: the tree scores; -n 1 re-ranks only the best tree label
    trees = model.predict(Xt, k=None, trees_only=True)
    one = model.predict(Xt, rerank=1)
    assert np.all(np.diff(one.indptr) <= 1)
    best_tree = np.asarray(trees.argmax(axis=1)).ravel()
    rows = np.flatnonzero(np.diff(one.indptr))
    assert np.array_equal(one.indices, best_tree[rows])

    # PfastXML (-S 1): no tail classifiers in the folder; its scores are the tree scores
    pf_dir = tmp_path / "pfastxml"
    r = run_cli("xml-train", TRAIN, pf_dir, "--algorithm", "pfastrexml", "-t", "3",
                "--seed", "5", "-S", "1", "-q")
    assert r.returncode == 0, r.stderr
    assert not (pf_dir / "tail_centroids.npz").exists()
    assert (model_dir / "tail_centroids.npz").exists()
    r = run_cli("xml-predict", TEST, scores, pf_dir, "-q")
    assert r.returncode == 0, r.stderr
    assert np.abs(read_matrix(scores).toarray() - trees.toarray()).max() <= 6e-7
    r = run_cli("xml-predict", TEST, scores, pf_dir, "-S", "0", "-q")
    assert r.returncode == 2 and "trees only" in r.stderr and len(r.stderr.splitlines()) == 1


@pytest.mark.slow
def test_propensity_options(tmp_path, bibtex):
    X, Y, _, _ = bibtex
    q_file = tmp_path / "q.txt"
    q_file.write_text("\n".join("2.0" for _ in range(Y.shape[1])) + "\n")
    m = xmlkit.PfastreXML(n_trees=1, inv_propensity=np.full(Y.shape[1], 2.0)).fit(X, Y)
    assert np.all(m.inv_propensity_ == 2.0)
    m = xmlkit.PfastreXML(n_trees=1, propensity_preset="amazon").fit(X, Y)
    assert m.inv_propensity_ == pytest.approx(inverse_propensity(Y, 0.6, 2.6))
    m = xmlkit.PfastreXML(n_trees=1, propensity_a=0.5).fit(X, Y)
    assert m.inv_propensity_ == pytest.approx(inverse_propensity(Y, 0.5, 1.5))
    with pytest.raises(ValueError, match="inv_propensity must hold 159"):
        xmlkit.PfastreXML(n_trees=1, inv_propensity=[2.0, 2.0]).fit(X, Y)
    # fit refuses what loading the folder would refuse (not a model saved, then damaged)
    for bad in (0.0, -1.0, np.nan, 1e308, 1e13):
        q = np.full(Y.shape[1], 2.0)
        q[3] = bad
        with pytest.raises(ValueError, match="inv_propensity must be finite, > 0 and at most"):
            xmlkit.PfastreXML(n_trees=1, inv_propensity=q).fit(X, Y)
    good = xmlkit.PfastreXML(n_trees=1, inv_propensity=np.full(Y.shape[1], 2.0)).fit(
        X[:300], Y[:300])
    for bad in (0.0, np.inf, 1e308):
        good.inv_propensity_[3] = bad
        good.save(tmp_path / "saved")
        with pytest.raises(xmlkit.XmlkitError, match="the inverse propensities: must be "
                                                     "finite, > 0 and at most 1e"):
            xmlkit.load_model(tmp_path / "saved")

    # a shard trained with other propensities is refused
    folder = tmp_path / "m"
    assert run_cli("xml-train", TRAIN, folder, "--algorithm", "pfastrexml", "-t", "1",
                   "-q").returncode == 0
    r = run_cli("xml-train", TRAIN, folder, "--algorithm", "pfastrexml", "-s", "1", "-t", "1",
                "--inv-propensity", q_file, "-q")
    assert r.returncode == 2 and "inv_propensity_sha256" in r.stderr

    # bad values and options: one line, exit 2
    for args in (["-a", "1.5"], ["-S", "2"], ["--A", "0"], ["--inv-propensity", tmp_path / "no"]):
        r = run_cli("xml-train", TRAIN, tmp_path / "bad", "--algorithm", "pfastrexml", *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert not (tmp_path / "bad").exists()
    r = run_cli("xml-train", TRAIN, tmp_path / "bad", "--gamma", "3")
    assert r.returncode == 2 and "--gamma is an option of --algorithm pfastrexml" in r.stderr
    r = run_cli("xml-predict", TEST, tmp_path / "s.txt", folder, "-n", "5", "-q")
    assert r.returncode == 0
