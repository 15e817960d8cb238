"""Randomized label embedding: the top singular subspace on a synthetic
problem against a dense computation, F1 inference by hand, CLI = API."""
import json

import numpy as np
import pytest
import scipy.sparse as sp

import xmlkit
from xmlkit.models.embed import f1_decisions, label_embedding, with_ones
from xmlkit.io import read_matrix
from xmlkit.models import load_model
from xmlkit.metrics import ranking_metrics, set_metrics

from conftest import TEST, TRAIN, run_cli


def test_embedding_recovers_the_top_singular_subspace():
    rng = np.random.default_rng(1)
    n, d, c, k = 600, 80, 40, 5
    X = sp.random(n, d, density=0.2, random_state=2, format="csr")
    # labels driven by a rank-k function of the features, plus noise
    Y = sp.csr_matrix(((X @ rng.standard_normal((d, k))) @ rng.standard_normal((k, c))
                       + 0.3 * rng.standard_normal((n, c)) > 0.8).astype(float))
    X1 = with_ones(X)
    lam = 1e-3
    VE, cx, _ = label_embedding(X1, Y, k, 20, 4, lam, 200, np.random.default_rng(0))
    # dense: top-k eigenvectors of Yᵀ X (XᵀX + c_x I)⁻¹ Xᵀ Y
    Xd, Yd = X1.toarray(), Y.toarray()
    G = Yd.T @ Xd @ np.linalg.solve(Xd.T @ Xd + cx * np.eye(Xd.shape[1]), Xd.T @ Yd)
    w, U = np.linalg.eigh(G)
    top = U[:, np.argsort(w)[::-1][:k]]
    Q, _ = np.linalg.qr(VE)
    cosines = np.linalg.svd(top.T @ Q, compute_uv=False)
    assert np.arccos(np.clip(cosines.min(), -1, 1)) < 0.01      # largest principal angle


def test_f1_inference_by_hand():
    # one label, 3 points with p = 0.9, 0.2, 0.6, training frequency 1/3 (m·π = 1):
    # r = 1: 0.9 / 2 = 0.45; r = 2: 1.5 / 3 = 0.5; r = 3: 1.7 / 4 = 0.425 -> top 2
    P = np.array([[0.9], [0.2], [0.6]])
    assert f1_decisions(P, np.array([1 / 3]), 3)[:, 0].tolist() == [True, False, True]
    # a frequent label (π = 1, m·π = 3):
    # r = 1: 0.9/4 = 0.225, r = 2: 1.5/5 = 0.3, r = 3: 1.7/6 = 0.283 -> top 2
    assert f1_decisions(P, np.array([1.0]), 3)[:, 0].tolist() == [True, False, True]
    # always at least one point per label
    assert f1_decisions(np.array([[0.01], [0.0]]), np.array([0.001]), 2).sum() == 1


@pytest.mark.slow
def test_cli_and_api_agree(tmp_path, bibtex):
    X, Y, Xt, Yt = bibtex
    kw = {"num_features": 300, "rank": 30, "loss": "logistic", "epochs": 2, "seed": 3}
    model = xmlkit.Embed(**kw).fit(X, Y)
    S = model.predict(Xt, k=5)
    assert ranking_metrics(Yt, S, (1,))["P@1"] > 0.4
    folder, scores = tmp_path / "m", tmp_path / "s.txt"
    args = [a for key, v in kw.items() for a in (f"--{key.replace('_', '-')}", str(v))]
    r = run_cli("xml-train", TRAIN, folder, "--algorithm", "embed", *args, "-q")
    assert r.returncode == 0, r.stderr
    assert json.loads((folder / "manifest.json").read_text())["params"]["rank"] == 30
    r = run_cli("xml-predict", TEST, scores, folder, "-k", "5", "-q")
    assert r.returncode == 0, r.stderr
    S_cli = read_matrix(scores)
    assert np.array_equal(S_cli.indices, S.indices)
    assert np.abs(S_cli.data - S.data).max() <= 1e-5
    # label sets: threshold, F1 thresholds and batch F1 inference, as files that
    # xml-eval reads with --sets
    for decision in ("threshold", "f1", "f1-batch"):
        r = run_cli("xml-predict", TEST, scores, folder, "--decision", decision, "-q")
        assert r.returncode == 0, r.stderr
        api = model.predict(Xt, decision=decision)
        assert set_metrics(Yt, read_matrix(scores)) == pytest.approx(set_metrics(Yt, api))
    F = model.predict(Xt, decision="f1-batch")
    assert np.all(np.asarray((F > 0).sum(axis=0)).ravel() >= 1)   # every label predicted
    r = run_cli("xml-predict", TEST, scores, folder, "-s", "1", "-q")
    assert r.returncode == 2
    r = run_cli("xml-train", TRAIN, tmp_path / "x", "--algorithm", "embed", "--shrink", "2")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_automatic_rank_above_4000_labels_is_estimated():
    """Above 4000 labels rank=0 estimates the spectrum of YᵀY by a randomized
    range finder: on a block-structured Y (groups of identical columns) the
    top singular values are exact, so the rank is the exact rule's."""
    import scipy.sparse as sp
    from xmlkit.models.embed import auto_rank
    rng = np.random.default_rng(0)
    groups = 30
    n, c = 3000, 4500
    member = rng.integers(groups, size=c)             # label -> group
    point_group = rng.integers(groups, size=n)        # a point carries its group's labels
    rows, cols = np.nonzero(point_group[:, None] == member[None, :])
    Y = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, c))
    k = auto_rank(Y)
    # exact: eigenvalues of YᵀY are (points of group g) x (labels of group g)
    lam = np.sort([np.sum(point_group == g) * np.sum(member == g) for g in range(groups)])[::-1]
    cum = np.cumsum(lam)
    assert k == int(np.searchsorted(cum, 0.9 * cum[-1]) + 1)


@pytest.mark.slow
def test_threads_do_not_change_the_model_and_old_folders_keep_their_map_ridge(tmp_path,
                                                                            bibtex):
    """The ridge solves (column blocks) and the ridge system (row blocks) run
    on -T threads: the same arrays at 1 and 2 threads (API), and the same
    bytes from xml-train at -T 1 and 2 (its BLAS on one thread, whatever the
    cores); a folder from before map_lambda was trained with the authors'
    near-zero ridge, 1e-6, and says so."""
    X, Y, _, _ = bibtex
    kw = {"num_features": 200, "rank": 40, "seed": 1}
    a = xmlkit.Embed(threads=1, **kw).fit(X, Y)
    b = xmlkit.Embed(threads=2, **kw).fit(X, Y)
    for key in a.arrays_:
        assert np.array_equal(a.arrays_[key], b.arrays_[key]), key
    for threads in ("1", "2"):
        r = run_cli("xml-train", TRAIN, tmp_path / threads, "--algorithm", "embed", "-T",
                    threads, "--rank", "40", "--num-features", "200", "--seed", "1", "-q")
        assert r.returncode == 0, r.stderr
    one, two = (tmp_path / t / "embed.npz" for t in ("1", "2"))
    assert one.read_bytes() == two.read_bytes()
    folder = tmp_path / "2"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["params"]["map_lambda"] == 1.0 and "threads" not in manifest["params"]
    del manifest["params"]["map_lambda"]
    assert xmlkit.Embed.from_manifest(manifest).map_lambda == 1e-6


def test_a_rows_scores_are_the_same_alone_or_in_a_batch(tiny):
    """The dense products are summed in one order (xmlkit._ext.dense_rows):
    each row scored alone gives the bytes it has in the whole batch, with
    every label and with decision f1 (a BLAS's product would follow the
    batch's shape and its own thread count)."""
    from xmlkit.io import read_xc
    model = load_model(tiny / "embed")
    X = read_xc(tiny / "test.txt").features
    for kw in ({"k": None}, {"k": None, "decision": "f1"}):
        whole = sp.csr_matrix(model.predict(X, **kw))
        for i in range(whole.shape[0]):
            one = sp.csr_matrix(model.predict(X[i:i + 1], **kw))
            assert np.array_equal(one.indices, whole[i].indices), (i, kw)
            assert one.data.tobytes() == whole[i].data.tobytes(), (i, kw)


@pytest.mark.slow
def test_map_ridge_carries_over_to_new_points(bibtex):
    """Bibtex (1836 features, 4880 points): with the authors' near-zero ridge
    on the feature map the embedding of new points is worse than with 1.0
    (P@3 36.9 against 40.0 at seed 0, the defaults otherwise)."""
    X, Y, Xt, Yt = bibtex
    p3 = [ranking_metrics(Yt, xmlkit.Embed(map_lambda=lam).fit(X, Y).predict(Xt, k=3),
                          (3,))["P@3"] for lam in (1e-6, 1.0)]
    assert p3[1] > p3[0] + 0.02


def test_output_layer_sums_by_label_by_hand():
    from xmlkit._ext.label_sums import add_rows_by_label
    acc = np.zeros((3, 2), np.float32)
    rows = np.array([[1.0, 2.0], [10.0, 20.0]])
    # row 0 carries labels 0 and 2, row 1 label 2
    add_rows_by_label(acc, rows, np.array([0, 2, 3], np.int64), np.array([0, 2, 2], np.int32))
    assert acc.tolist() == [[1, 2], [0, 0], [11, 22]]
    with pytest.raises(ValueError):
        add_rows_by_label(acc, rows, np.array([0, 1, 2], np.int64), np.array([0, 3], np.int32))


def test_f1_decides_each_row_alone_and_f1_batch_names_the_batch(bibtex, tmp_path):
    """decision="f1" keeps the labels above the F1 thresholds fitted at
    training (F*/2 of each label on the training points, in [0, 1]): a row
    alone gets the set it gets among all the rows, at every batch size;
    "f1-batch" (the paper's transductive rule) is refused below its minimum
    batch, by the API and by xml-predict (exit 2, one line naming the size)."""
    from xmlkit.models.embed import MIN_F1_BATCH
    X, Y, Xt, Yt = bibtex
    model = xmlkit.Embed(rank=20, num_features=200).fit(X[:1500], Y[:1500])
    t = model.arrays_["f1_thresholds"]
    assert t.shape == (Y.shape[1],) and np.all((0 <= t) & (t <= 1)) and t.max() > 0
    whole = model.predict(Xt[:300], decision="f1").tocsr()
    for r in (0, 7, 150):
        alone = model.predict(Xt[r:r + 1], decision="f1").tocsr()
        assert alone.indices.tolist() == whole[r].indices.tolist()
    P = model.predict(Xt[:300], k=None).toarray()
    assert np.array_equal(whole.toarray() > 0, P >= t[None, :])
    with pytest.raises(xmlkit.XmlkitError, match=f"at least {MIN_F1_BATCH} rows"):
        model.predict(Xt[:MIN_F1_BATCH - 1], decision="f1-batch")
    assert model.predict(Xt[:MIN_F1_BATCH], decision="f1-batch").nnz > 0
    folder = tmp_path / "m"
    model.save(folder)
    small = tmp_path / "small.txt"
    from xmlkit.io import write_dataset
    write_dataset(small, Xt[:20], Yt[:20])
    r = run_cli("xml-predict", small, tmp_path / "s.txt", folder, "--decision", "f1-batch")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(MIN_F1_BATCH) in r.stderr and not (tmp_path / "s.txt").exists()
    r = run_cli("xml-predict", small, tmp_path / "s.txt", folder, "--decision", "f1", "-q")
    assert r.returncode == 0, r.stderr
