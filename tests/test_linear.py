"""Elastic-net one-vs-all model: F1-optimal thresholds by hand, lazy = dense
updates through the API, CLI = API."""
import json

import numpy as np
import pytest
import scipy.sparse as sp

import xmlkit
from xmlkit.errors import XmlkitError
from xmlkit.io import read_matrix
from xmlkit.metrics import ranking_metrics
from xmlkit.models.linear import fit_thresholds
from xmlkit.models.matrix_family import best_f1

from conftest import TEST, TRAIN, run_cli


def test_threshold_is_half_the_best_f1():
    # 6 hold-out points, one label with 2 positives, ranked by score:
    #   0.9 (pos), 0.8 (neg), 0.7 (pos), 0.4, 0.3, 0.1 (neg)
    # F1 at cut r: r=1: 2/3, r=2: 2/4, r=3: 4/5 (best), r=4: 4/6 ... -> F* = 0.8, threshold 0.4
    scores = np.array([[0.9], [0.8], [0.7], [0.4], [0.3], [0.1]])
    truth = np.array([[1.0], [0], [1], [0], [0], [0]])
    f_star, pos = best_f1(scores, truth)
    assert f_star[0] == pytest.approx(0.8) and pos[0] == 2
    # a label with fewer than 5 positives takes the pooled F*/2; with 5 its own
    Y = sp.csr_matrix(np.hstack([truth, np.array([[1.0], [1], [1], [1], [1], [0]])]))
    P = np.hstack([scores, np.array([[0.6], [0.6], [0.6], [0.6], [0.6], [0.1]])])
    theta = fit_thresholds(P, Y)
    assert theta[1] == pytest.approx(1.0 / 2)           # 5 positives above 0.1: F* = 1
    # pooled over the 12 pairs (7 positives): "score >= s" for s = 0.9: F1 2/8;
    # 0.7: 2·2/(3+7); 0.6: 2·7/(8+7) = 14/15 (best) -> theta 7/15
    assert theta[0] == pytest.approx(7 / 15)
    # in blocks of one label: the same thresholds
    from xmlkit.models.matrix_family import fit_thresholds_blocked
    blocked = fit_thresholds_blocked(lambda c0, c1: P[:, c0:c1], Y, 2, columns=1)
    assert np.array_equal(blocked, theta)


def test_lazy_and_dense_updates_give_the_same_model(bibtex):
    X, Y, Xt, Yt = bibtex
    X, Y = X[:400], Y[:400]
    kw = {"epochs": 2, "threshold_holdout": 0, "l1": 1e-3, "l2": 1e-3}
    lazy = xmlkit.Linear(**kw).fit(X, Y)
    dense = xmlkit.Linear(dense_updates=True, **kw).fit(X, Y)
    a, b = lazy._weights().toarray(), dense._weights().toarray()
    assert np.abs(a - b).max() <= 1e-6 and np.array_equal(a == 0, b == 0)
    assert 0 < lazy.stats()["nnz_weights"] < a.size      # l1 leaves exact zeros, not stored


@pytest.mark.slow
def test_cli_and_api_agree(tmp_path, bibtex):
    X, Y, Xt, Yt = bibtex
    model = xmlkit.Linear(epochs=2).fit(X, Y)
    S = model.predict(Xt, k=5)
    assert ranking_metrics(Yt, S, (1,))["P@1"] > 0.5
    folder, scores = tmp_path / "m", tmp_path / "s.txt"
    r = run_cli("xml-train", TRAIN, folder, "--algorithm", "linear", "--epochs", "2", "-q")
    assert r.returncode == 0, r.stderr
    assert json.loads((folder / "manifest.json").read_text())["params"]["lr_schedule"] == \
        "adagrad"
    r = run_cli("xml-predict", TEST, scores, folder, "-k", "5", "-q")
    assert r.returncode == 0, r.stderr
    S_cli = read_matrix(scores)
    assert np.array_equal(S_cli.indices, S.indices)
    assert np.abs(S_cli.data - S.data).max() <= 1e-5
    r = run_cli("xml-predict", TEST, scores, folder, "--decision", "threshold", "-q")
    assert r.returncode == 0, r.stderr
    T = model.predict(Xt, decision="threshold")
    assert np.array_equal(read_matrix(scores).indices, T.indices)
    # the name before the decisions were unified still works
    assert np.array_equal(model.predict(Xt, decision="thresholds").indices, T.indices)
    r = run_cli("xml-predict", TEST, scores, folder, "--decision", "thresholds", "-q")
    assert r.returncode == 0 and np.array_equal(read_matrix(scores).indices, T.indices)
    for args in (["--decision", "f1"], ["--threshold", "0.3"]):
        r = run_cli("xml-predict", TEST, scores, folder, *args, "-q")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("xml-train", TRAIN, tmp_path / "x", "--algorithm", "linear", "--loss", "ridge")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_unit_rows_with_empty_rows():
    """Empty rows anywhere, the last one included, stay empty (reduceat once
    failed on a trailing empty row)."""
    from xmlkit.csr import Rows, unit_rows
    R = Rows(np.array([0, 2, 2, 3, 3]), np.array([0, 1, 1], np.int32),
             np.array([3, 4, 2], np.float32), (4, 2))
    U = unit_rows(R)
    assert U.data.tolist() == pytest.approx([0.6, 0.8, 1.0])
    assert U.indptr.tolist() == [0, 2, 2, 3, 3]


def test_prune_weights_by_hand_and_through_the_estimator(bibtex):
    from xmlkit.models.linear import prune_small
    ptr = np.array([0, 3, 3, 5])
    idx = np.array([0, 2, 4, 1, 3])
    val = np.array([0.5, -0.01, -0.2, 0.005, 1.0])
    p, i, v = prune_small(ptr, idx, val, 0.1)
    assert list(p) == [0, 2, 2, 3] and list(i) == [0, 4, 3] and list(v) == [0.5, -0.2, 1.0]
    X, Y = bibtex[0][:500], bibtex[1][:500]
    full = xmlkit.Linear(epochs=1, threshold_holdout=0).fit(X, Y)
    small = xmlkit.Linear(epochs=1, threshold_holdout=0, prune_weights=0.05).fit(X, Y)
    w = full.arrays_["w_val"]
    assert len(small.arrays_["w_val"]) == int((np.abs(w) >= 0.05).sum()) < len(w)


def test_auto_settings_follow_the_data_and_are_recorded(tmp_path, bibtex):
    from xmlkit.models import linear
    assert linear.Linear.auto_loss(linear.HINGE_LABELS - 1) == "logistic"
    assert linear.Linear.auto_loss(linear.HINGE_LABELS) == "squared_hinge"
    # epochs: SMOOTH_EPOCHS for the logistic loss; for the hinge AUTO_STEPS / N
    # rounded, clipped to [MIN_AUTO_EPOCHS, MAX_AUTO_EPOCHS]
    steps, hinge = linear.AUTO_STEPS, "squared_hinge"
    assert linear.Linear.auto_epochs(10 ** 9, "logistic") == linear.SMOOTH_EPOCHS
    assert linear.Linear.auto_epochs(10, hinge) == linear.MAX_AUTO_EPOCHS
    assert linear.Linear.auto_epochs(10 ** 9, hinge) == linear.MIN_AUTO_EPOCHS
    assert linear.Linear.auto_epochs(round(steps / 4.4), hinge) == 4
    assert linear.Linear.auto_epochs(round(steps / 3.6), hinge) == 4
    X, Y = bibtex[0][:300], bibtex[1][:300]
    ticks = []
    model = xmlkit.Linear(threshold_holdout=0.2, final_epochs=0)
    total = model.progress_total(300, Y.shape[1])
    X2, Y2 = model.start_fit(X, Y)
    model._fit_arrays(X2, Y2, ticks.append)
    # every point of every epoch of both trainings (240 without the hold-out, then 300
    # anew: the logistic loss's final_epochs is 0), in each of the 2 label blocks
    assert sum(ticks) == total == 2 * linear.SMOOTH_EPOCHS * (240 + 300)
    assert model.get_params()["loss"] == "auto"        # parameters stay as given
    rec = model.model_params()                          # the model records what auto was
    assert (rec["loss"], rec["lr"], rec["epochs"], rec["final_epochs"]) == \
        ("logistic", 3.0, linear.SMOOTH_EPOCHS, 0)
    # a folder records the concrete values; the loaded model predicts the same
    folder = tmp_path / "m"
    model.save(folder)
    assert json.loads((folder / "manifest.json").read_text())["params"]["loss"] == "logistic"
    again = xmlkit.load_model(folder)
    assert np.array_equal(again.predict(X[:20], k=3).toarray(),
                          model.predict(X[:20], k=3).toarray())
    # many labels: the squared hinge and its rate; the same as asking for them
    Y_many = sp.hstack([Y, sp.csr_matrix((300, linear.HINGE_LABELS), dtype=Y.dtype)]).tocsr()
    a = xmlkit.Linear(epochs=2, threshold_holdout=0).fit(X, Y_many)
    b = xmlkit.Linear(epochs=2, threshold_holdout=0, loss="squared_hinge", lr=1.0).fit(X, Y_many)
    assert a.model_params()["loss"] == "squared_hinge" and a.model_params()["lr"] == 1.0
    for k in ("w_ptr", "w_idx", "w_val", "bias"):
        assert np.array_equal(a.arrays_[k], b.arrays_[k])
    # final_epochs: below CONTINUE_BELOW points per feature FINAL_SHARE of the
    # epochs, rounded, at least 1 (the hold-out model continued over every
    # point); from there 0 (a final model trained anew)
    below = linear.CONTINUE_BELOW - 0.5
    assert linear.Linear.auto_final_epochs(10, below) == 3
    assert linear.Linear.auto_final_epochs(5, below) == 2
    assert linear.Linear.auto_final_epochs(2, 1.0) == 1
    assert linear.Linear.auto_final_epochs(10, linear.CONTINUE_BELOW) == 0
    with pytest.raises(XmlkitError, match="needs the training points"):
        xmlkit.Linear().progress_total(300, Y.shape[1])
    dense = sp.csr_matrix(np.random.default_rng(0).uniform(0.1, 1, (300, 20)))
    assert X.nnz / X.shape[1] < linear.CONTINUE_BELOW <= dense.nnz / dense.shape[1]
    for points, final in ((X, 1), (dense, 0)):
        # text rows (few points per feature), or 20 features in every point
        ticks = []
        c = xmlkit.Linear(epochs=2, threshold_holdout=0.2)
        total = c.progress_total(300, Y_many.shape[1], points)
        X2, Y2 = c.start_fit(points, Y_many)
        c._fit_arrays(X2, Y2, ticks.append)
        assert c.model_params()["final_epochs"] == final
        # per label block: 2 epochs on the 240 points left, then over all 300
        # 1 more (continued) or 2 (anew)
        assert sum(ticks) == total == 2 * (2 * 240 + (final or 2) * 300)


@pytest.mark.slow
def test_cli_auto_options(tmp_path):
    folder = tmp_path / "m"
    r = run_cli("xml-train", TRAIN, folder, "--algorithm", "linear", "--epochs", "auto",
                "--lr", "0.5", "--threshold-holdout", "0")
    assert r.returncode == 0, r.stderr
    params = json.loads((folder / "manifest.json").read_text())["params"]
    assert params["lr"] == 0.5 and params["loss"] == "logistic"
    # logistic (159 labels): epochs "auto" is the smooth losses' fixed count
    from xmlkit.models.linear import SMOOTH_EPOCHS
    assert params["epochs"] == SMOOTH_EPOCHS == 10
    assert "linear: loss logistic, lr 0.5" in r.stderr
    for bad in (["--epochs", "two"], ["--lr", "fast"], ["--epochs", "0"]):
        r = run_cli("xml-train", TRAIN, tmp_path / "x", "--algorithm", "linear", *bad)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_label_blocks_by_hand_and_independent_of_threads(bibtex):
    from xmlkit.models.linear import block_bounds, merge_blocks
    assert block_bounds(10, 4).tolist() == [0, 2, 5, 8, 10]
    assert block_bounds(3, 8).tolist() == [0, 1, 2, 3]      # no more blocks than labels
    # two blocks of a 2-feature model: block 0 holds labels 0-1, block 1 label 2
    a = {"w_ptr": np.array([0, 1, 2]), "w_idx": np.array([1, 0], np.int32),
         "w_val": np.array([0.5, -1.0], np.float32), "bias": np.array([0.1, 0.2])}
    b = {"w_ptr": np.array([0, 1, 1]), "w_idx": np.array([0], np.int32),
         "w_val": np.array([2.0], np.float32), "bias": np.array([0.3])}
    m = merge_blocks([a, b], np.array([0, 2, 3]))
    assert m["w_ptr"].tolist() == [0, 2, 3] and m["w_idx"].tolist() == [1, 2, 0]
    assert m["w_val"].tolist() == [0.5, 2.0, -1.0] and m["w_val"].dtype == np.float32
    assert m["bias"].tolist() == [0.1, 0.2, 0.3]
    X, Y = bibtex[0][:400], bibtex[1][:400]
    for kw in ({"epochs": 2, "label_blocks": 5, "final_epochs": 0},
               {"epochs": 2, "label_blocks": 1, "final_epochs": 0},
               {"epochs": 2, "final_epochs": 1}):
        # threads: blocks at once, the hold-out and a new final model side by side
        one = xmlkit.Linear(threads=1, **kw).fit(X, Y)
        for threads in (2, 3):
            more = xmlkit.Linear(threads=threads, **kw).fit(X, Y)
            for k in ("w_ptr", "w_idx", "w_val", "bias", "thresholds"):
                assert np.array_equal(one.arrays_[k], more.arrays_[k])
    # a block is a model of its labels alone: block 1 = a model of labels lo..hi-1
    lo, hi = block_bounds(Y.shape[1], 5)[1:3]
    alone = xmlkit.Linear(epochs=2, threshold_holdout=0, label_blocks=1).fit(X, Y[:, lo:hi])
    blocked = xmlkit.Linear(epochs=2, threshold_holdout=0, label_blocks=5).fit(X, Y)
    assert np.array_equal(alone._weights().toarray(),
                          blocked._weights()[:, lo:hi].toarray())
    assert np.array_equal(alone.arrays_["bias"], blocked.arrays_["bias"][lo:hi])


def test_final_model_trained_anew_or_continued(bibtex):
    X, Y = bibtex[0][:400], bibtex[1][:400]
    kw = {"epochs": 2, "seed": 3}
    anew = xmlkit.Linear(threshold_holdout=0.25, final_epochs=0, **kw).fit(X, Y)
    cont = xmlkit.Linear(threshold_holdout=0.25, final_epochs=1, **kw).fit(X, Y)
    plain = xmlkit.Linear(threshold_holdout=0, **kw).fit(X, Y)
    weights = ("w_ptr", "w_idx", "w_val", "bias")
    # anew: the final model is the model of every point without a hold-out
    for k in weights:
        assert np.array_equal(anew.arrays_[k], plain.arrays_[k])
    # the hold-out (seeded by seed ^ 0x5EED) and the model of the points left,
    # whose probabilities of the held-out points fit both models' thresholds
    perm = np.random.default_rng(3 ^ 0x5EED).permutation(400)
    hold, rest = np.sort(perm[:100]), np.sort(perm[100:])
    part = xmlkit.Linear(threshold_holdout=0, **kw).fit(X[rest], Y[rest])
    theta = fit_thresholds(part.predict(X[hold], k=None).toarray(), Y[hold])
    assert np.array_equal(anew.arrays_["thresholds"], theta)
    assert np.array_equal(cont.arrays_["thresholds"], theta)
    # continued: one more pass over every point moves the model of the points
    # left towards the held-out ones (their true labels' mean probability rises)
    assert not np.array_equal(cont._weights().toarray(), part._weights().toarray())
    truth = Y[hold].toarray() > 0
    P_part, P_cont = (m.predict(X[hold], k=None).toarray() for m in (part, cont))
    assert P_cont[truth].mean() > P_part[truth].mean()
