"""Metric values computed by hand on small cases."""
import math

import numpy as np
import pytest
import scipy.sparse as sp

from xmlkit.metrics import (inverse_propensity, label_sets, ndcg_at_k, precision_at_k,
                            psndcg_at_k, psprecision_at_k, ranking_metrics, recall_at_k,
                            set_metrics, top_k)

L2 = math.log2
# Truth: point 0 {0, 2}; point 1 {1}; point 2 no labels; point 3 {3, 4}
Y = sp.csr_matrix(np.array([[1, 0, 1, 0, 0],
                            [0, 1, 0, 0, 0],
                            [0, 0, 0, 0, 0],
                            [0, 0, 0, 1, 1]], dtype=np.float32))
# Scores: point 0 ties labels 0 and 1 (lower label wins); point 1 has only two
# stored scores (k larger than the stored ones); point 3 has none.
S = sp.csr_matrix((np.array([0.9, 0.9, 0.5, 0.1, 0.7, 0.2, 1.0], dtype=np.float32),
                   np.array([0, 1, 2, 4, 3, 1, 0]),
                   np.array([0, 4, 6, 7, 7])), shape=(4, 5))
Q = np.array([2.0, 1.0, 1.0, 5.0, 1.5])


def test_top_k_tie_break_and_padding():
    labels, scores = top_k(S, 5)
    assert labels[0].tolist() == [0, 1, 2, 4, -1]
    assert labels[1].tolist() == [3, 1, -1, -1, -1]
    assert labels[3].tolist() == [-1] * 5
    assert scores[0, :2].tolist() == pytest.approx([0.9, 0.9])


def test_cap_rows_keeps_the_k_best_ties_to_the_lower_label_in_row_order():
    from xmlkit.csr import Rows, cap_rows
    # row 0: 0.5 ties at labels 7, 2, 9 (given out of label order); row 1: fewer
    # than k; row 2: empty; row 3: zeros and -0.0 (ranked just below 0.0)
    R = Rows(np.array([0, 6, 8, 8, 12]), np.array([7, 1, 2, 9, 4, 5, 3, 0, 6, 1, 2, 8], np.int32),
             np.array([0.5, 0.9, 0.5, 0.5, 0.1, 0.7, 0.2, 0.3, 0.0, -0.0, 0.0, 0.4], np.float32),
             (4, 10))
    C = cap_rows(R, 3)
    assert C.indptr.tolist() == [0, 3, 5, 5, 8]
    assert C.indices.tolist() == [1, 2, 5, 3, 0, 6, 2, 8]      # (each row in its own order)
    assert C.data.tolist() == pytest.approx([0.9, 0.5, 0.7, 0.2, 0.3, 0.0, 0.0, 0.4])
    assert cap_rows(R, 1).indices.tolist() == [1, 0, 8]


def test_cap_rows_equals_a_sort_of_each_row():
    from xmlkit.csr import Rows, cap_rows
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 400, 60)
    ptr = np.concatenate([[0], np.cumsum(counts)])
    idx = np.concatenate([rng.permutation(2000)[:c] for c in counts]).astype(np.int32)
    # few distinct values (many ties in one bucket), tiny and huge ones
    val = rng.choice(np.array([0, 1e-30, 1e-7, 0.25, 0.5, 0.5000001, 3, 1e30], np.float32),
                     ptr[-1]) * rng.integers(1, 3, ptr[-1]).astype(np.float32)
    R = Rows(ptr, idx, val, (60, 2000))
    for k in (1, 2, 7, 50, 399):
        C = cap_rows(R, k)
        for r in range(60):
            a, b = ptr[r], ptr[r + 1]
            best = sorted(range(a, b), key=lambda e: (-float(val[e]), idx[e]))[:k]
            keep = sorted(best)                             # (the row's order)
            assert C.indices[C.indptr[r]:C.indptr[r + 1]].tolist() == idx[keep].tolist()
            assert C.data[C.indptr[r]:C.indptr[r + 1]].tolist() == val[keep].tolist()


def test_precision():
    # p0 ranks 0,1,2,4 (hits 0 and 2); p1 ranks 3,1 (hit 1); p2, p3 add 0
    assert precision_at_k(Y, S, 5) == pytest.approx(
        [1 / 4, (1 / 2 + 1 / 2) / 4, (2 / 3 + 1 / 3) / 4, (2 / 4 + 1 / 4) / 4, (2 / 5 + 1 / 5) / 4])


def test_ndcg():
    idcg2 = 1 + 1 / L2(3)
    p0 = [1, 1, 1 + 1 / L2(4)]          # DCG of point 0 at k = 1, 2, 3
    p1 = [0, 1 / L2(3), 1 / L2(3)]      # point 1: hit at rank 2, one true label
    expect = [(p0[0] / 1 + p1[0]) / 4, (p0[1] / idcg2 + p1[1]) / 4, (p0[2] / idcg2 + p1[2]) / 4]
    assert ndcg_at_k(Y, S, 3) == pytest.approx(expect)


def test_recall():
    # point 3 has labels but no scores: 0; point 2 has no labels: 0
    assert recall_at_k(Y, S, 3) == pytest.approx([(1 / 2) / 4, (1 / 2 + 1) / 4, (1 + 1) / 4])


def test_propensity_scored_precision():
    # numerators: hits weighted by q; denominators: each point's true labels by decreasing q
    num1, den1 = 2.0, 2.0 + 1.0 + 5.0
    num3, den3 = (2 + 1) / 3 + 1 / 3, (2 + 1) / 3 + 1 / 3 + (5 + 1.5) / 3
    got = psprecision_at_k(Y, S, Q, 3)
    assert got[0] == pytest.approx(num1 / den1)
    assert got[2] == pytest.approx(num3 / den3)


def test_propensity_scored_ndcg():
    num3 = 2 * 1 + 1 * (1 / L2(4)) + 1 * (1 / L2(3))
    den3 = (2 + 1 / L2(3)) + 1 + (5 + 1.5 / L2(3))
    assert psndcg_at_k(Y, S, Q, 3)[2] == pytest.approx(num3 / den3)


def test_dense_scores_rank_every_entry():
    dense = S.toarray()
    # as a dense array every label is scored, so point 3 ranks labels 0..4 (all 0)
    m = ranking_metrics(Y, dense, (1, 5))
    assert m["P@5"] == pytest.approx((2 / 5 + 1 / 5 + 0 + 2 / 5) / 4)
    assert m["P@1"] == pytest.approx(1 / 4)


def test_no_true_labels_anywhere_gives_nan_ps_metrics():
    m = ranking_metrics(sp.csr_matrix((2, 3)), sp.csr_matrix(np.ones((2, 3))), (1,), np.ones(3))
    assert m["P@1"] == 0 and math.isnan(m["PSP@1"])


def test_inverse_propensity_formula():
    # 10 training points; label 0 on 3 of them, label 1 on none, label 2 on all
    Ytr = sp.csr_matrix(np.array([[1, 0, 1]] * 3 + [[0, 0, 1]] * 7, dtype=np.float32))
    c = (math.log(10) - 1) * (1.5 + 1) ** 0.55
    assert inverse_propensity(Ytr) == pytest.approx(
        [1 + c * 4.5 ** -0.55, 1 + c * 1.5 ** -0.55, 1 + c * 11.5 ** -0.55])
    c = (math.log(10) - 1) * (0.4 + 1) ** 0.5
    assert inverse_propensity(Ytr, 0.5, 0.4)[0] == pytest.approx(1 + c * 3.4 ** -0.5)


def test_shape_mismatch_is_an_error():
    from xmlkit.errors import XmlkitError
    with pytest.raises(XmlkitError):
        ranking_metrics(Y, S[:3], (1,))


def test_set_metrics_by_hand():
    # 3 points, 4 labels
    #   truth      prediction
    #   {0, 1}     {0, 2}        tp 1, fp 1, fn 1 -> example F1 2/4
    #   {2}        {2}           tp 1             -> 1
    #   {}         {}            nothing          -> 1 (nothing to find, nothing wrong)
    Y = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]))
    P = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]]))
    m = set_metrics(Y, P)
    assert m["hamming_loss"] == pytest.approx(2 / 12)          # 1 fn + 1 fp of 12
    assert m["micro_f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    # labels: 0 F1 1, 1 F1 0 (missed), 2 F1 2*1/(1+2) = 2/3, 3 nothing -> 1
    assert m["macro_f1"] == pytest.approx((1 + 0 + 2 / 3 + 1) / 4)
    assert m["example_f1"] == pytest.approx((0.5 + 1 + 1) / 3)


def test_label_sets_from_scores():
    S = sp.csr_matrix(np.array([[0.9, 0.2, 0.5], [0.1, 0.0, 0.7]], dtype=np.float32))
    assert label_sets(S, 0.5).toarray().tolist() == [[1, 0, 1], [0, 0, 1]]
    assert label_sets(S).toarray().tolist() == [[1, 1, 1], [1, 0, 1]]


def test_calibration_error_by_hand():
    """ECE@k over the stored entries of each top k, equal-mass bins sorted
    by score (docs/metrics.md)."""
    import scipy.sparse as sp
    from xmlkit.metrics import calibration
    Y = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0]], np.float32))
    S = sp.csr_matrix(np.array([[0.75, 0.5, 0], [0.875, 0.625, 0.125], [0.25, 0, 0]],
                               np.float32))
    # top 2: 0.75 (rel), 0.5 | 0.875, 0.625 (rel) | 0.25 (the row's only stored score)
    # sorted: 0.25 0.5 | 0.625(rel) 0.75(rel) 0.875: bins of 2 and 3 entries
    c = calibration(Y, S, k=2, n_bins=2)
    assert c["ECE"] == pytest.approx((abs(0 - 0.75) + abs(2 - 2.25)) / 5)
    assert [b["n"] for b in c["bins"]] == [2, 3]
    assert c["bins"][1]["mean_score"] == pytest.approx(0.75)
    assert c["bins"][1]["relevant"] == pytest.approx(2 / 3)
    # top 1: 0.75 (rel), 0.875, 0.25, one entry per bin
    assert calibration(Y, S, k=1)["ECE"] == pytest.approx((0.25 + 0.875 + 0.25) / 3)
    # the dense form of the same scores ranks every entry, zeros included
    assert calibration(Y, S.toarray(), k=1)["ECE"] == pytest.approx((0.25 + 0.875 + 0.25) / 3)
    # as xmlkit.csr.Rows (xml-calibrate's, read without scipy): a stored 0 is no label
    from xmlkit.csr import Rows, as_rows
    from xmlkit.errors import XmlkitError
    R = Rows(np.array([0, 1, 2, 3]), np.array([0, 1, 2], np.int32),
             np.array([1, 1, 0], np.float32), (3, 3))
    assert calibration(R, as_rows(S), k=2, n_bins=2) == c
    R.data[2] = 2
    with pytest.raises(XmlkitError, match="must be 0/1, but row 2 holds 2"):
        calibration(R, as_rows(S), k=2)


def test_calibration_bins_are_equal_mass_and_a_calibrated_model_scores_zero():
    import scipy.sparse as sp
    from xmlkit.metrics import calibration
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, (2000, 7)).astype(np.float32)
    Y = sp.csr_matrix((rng.uniform(0, 1, p.shape) < p).astype(np.float32))
    c = calibration(Y, p, k=5)
    sizes = [b["n"] for b in c["bins"]]
    assert sum(sizes) == 2000 * 5 and max(sizes) - min(sizes) <= 1
    assert c["ECE"] < 0.02                      # relevant with the probability scored
    shifted = calibration(Y, np.clip(p + 0.2, 0, 1), k=5)
    assert shifted["ECE"] > 0.1                 # over-confident by about 0.2
    assert np.isnan(calibration(Y[:0], p[:0], k=5)["ECE"])


def test_calibration_refuses_scores_of_another_shape():
    from xmlkit.errors import XmlkitError
    from xmlkit.metrics import calibration
    Y = sp.csr_matrix(np.eye(3, dtype=np.float32))
    for S in (np.ones((3, 4), np.float32), np.ones((2, 3), np.float32)):
        with pytest.raises(XmlkitError, match="true labels 3×3"):
            calibration(Y, S, k=1)
