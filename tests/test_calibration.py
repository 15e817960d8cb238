"""Calibration maps (xmlkit.calibration) and their isotonic kernel."""
import numpy as np
import pytest

from xmlkit.calibration import IsotonicMap
from xmlkit.errors import XmlkitError


def test_pav_by_hand():
    from xmlkit._ext.isotonic import pav
    # 3 and 2 pool (2.5); 0.5 pools with 4, then with that block: (3+2+4+0.5)/4
    ends, means = pav([1, 3, 2, 4, 0.5], [1, 1, 1, 1, 1])
    assert ends.tolist() == [1, 5] and means.tolist() == [1, 2.375]
    # weights count as repeated values: 2 (weight 3) and 1 pool to (6 + 1) / 4
    ends, means = pav([2, 1, 5], [3, 1, 1])
    assert ends.tolist() == [2, 3] and means.tolist() == pytest.approx([7 / 4, 5])
    # equal means pool: the blocks' means strictly increase
    assert pav([1, 1, 1], [1, 2, 3])[0].tolist() == [3]
    assert [len(a) for a in pav([], [])] == [0, 0]


@pytest.mark.parametrize("seed", range(5))
def test_pav_equals_scikit_learns_isotonic_regression(seed):
    from sklearn.isotonic import IsotonicRegression
    from xmlkit._ext.isotonic import pav
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    y = rng.integers(0, 4, n) + rng.normal(0, 1, n) * np.linspace(0, 1, n)
    w = rng.uniform(0.1, 3, n)
    ends, means = pav(y, w)
    fitted = np.repeat(means, np.diff(np.concatenate([[0], ends])))
    theirs = IsotonicRegression().fit(np.arange(n), y, sample_weight=w).predict(np.arange(n))
    assert fitted == pytest.approx(theirs, abs=1e-9)
    assert np.all(np.diff(means) > 0)


@pytest.mark.parametrize("y, w", [([1, np.nan], [1, 1]), ([1, 2], [1, 0]), ([1], [1, 2]),
                                  ([1, 2], [1, np.inf])])
def test_pav_refuses_what_it_cannot_fit(y, w):
    from xmlkit._ext.isotonic import pav
    with pytest.raises(ValueError):
        pav(y, w)


def test_a_map_fitted_on_held_out_scores_calibrates_new_ones():
    """Outcomes relevant with probability s²: the raw scores are over-confident,
    the mapped ones are not (the calibration error of new scores, equal-mass
    bins as ECE@k)."""
    rng = np.random.default_rng(1)

    def draw(n):
        s = rng.uniform(0, 1, n)
        return s, rng.uniform(0, 1, n) < s ** 2

    m = IsotonicMap.fit(*draw(20000))
    s, r = draw(20000)

    def ece(p):
        order = np.argsort(p, kind="stable")
        return sum(abs(b.sum()) for b in np.array_split((r - p)[order], 10)) / len(p)
    # (the true probabilities score about 0.01 here: the noise of 2,000 outcomes a bin)
    assert ece(s) > 0.1 and ece(m.apply(s)) < 0.02 and ece(s ** 2) < 0.02
    assert np.all(np.diff(m.x) > 0) and np.all(np.diff(m.y) > 0)
    grid = np.linspace(m.x[0], m.x[-1], 1000)
    assert np.all(np.diff(m.apply(grid)) > 0)           # strictly increasing between knots
    assert m.apply([-5, 5]).tolist() == [m.y[0], m.y[-1]]


def test_ties_in_scores_get_one_value_and_the_knots_are_the_steps_means():
    # scores 0.1 (x2, one relevant), 0.2 (not), 0.3 (x2 relevant): 0.1 and 0.2
    # pool (1 of 3 relevant, mean score 0.4 / 3), then 0.3 alone
    m = IsotonicMap.fit([0.1, 0.3, 0.1, 0.2, 0.3], [1, 1, 0, 0, 1])
    assert m.x.tolist() == pytest.approx([0.4 / 3, 0.3])
    assert m.y.tolist() == pytest.approx([1 / 3, 1])


def test_stored_knots_are_checked():
    m = IsotonicMap.fit([0.1, 0.5, 0.9], [0, 1, 1])
    assert IsotonicMap.from_arrays(m.arrays()).apply(0.7) == m.apply(0.7)
    for bad in ({"x": [0.1, np.nan], "y": [0.1, 0.2]}, {"x": [0.2, 0.1], "y": [0.1, 0.2]},
                {"x": [0.1, 0.2], "y": [0.2, 0.2]}, {"x": [0.1, 0.2], "y": [0.1, 1.5]},
                {"x": [0.1], "y": [0.1, 0.2]}, {"x": [], "y": []}, {"y": [0.5]}):
        with pytest.raises(XmlkitError, match="calibration"):
            IsotonicMap.from_arrays(bad, "m")
    with pytest.raises(XmlkitError):
        IsotonicMap.fit([0.1, np.inf], [0, 1])
    with pytest.raises(XmlkitError):
        IsotonicMap.fit([], [])


def test_mapped_rows_keep_their_ranking_by_hand():
    import scipy.sparse as sp
    from xmlkit.calibration import map_rows
    flat = IsotonicMap(np.array([0.0, 1.0]), np.array([0.3, 0.3000001]))
    S = sp.csr_matrix(np.array([[0.5, 0.4, 0.4, 0.1, 0], [0.2, 0, 0.9, 0.9, 0.1]],
                               np.float32))
    # one grid step (1e-6) per strict drop of the raw score; equal raw scores stay equal
    assert map_rows(S, flat).toarray().ravel().tolist() == pytest.approx(
        [0.3, 0.299999, 0.299999, 0.299998, 0, 0.299999, 0, 0.3, 0.3, 0.299998], abs=1e-7)
    # where the map leaves no room above 0, values meet at 0
    zero = IsotonicMap(np.array([0.0, 1.0]), np.array([0.0, 1e-9]))
    assert map_rows(S[:1], zero).data.tolist() == [0, 0, 0, 0]


def test_calibrated_scores_rank_as_the_raw_ones_once_written(bibtex, tmp_path):
    """A FastXML model's scores of the Bibtex test points, mapped by a map
    fitted on other points and written as xml-predict writes them: every
    P@k, nDCG@k and PSP@k of the file read back equals the raw scores'."""
    import xmlkit
    from xmlkit.calibration import map_rows
    from xmlkit.io import matrix_writer, read_matrix
    from xmlkit.metrics import calibrations, inverse_propensity, ranking_metrics, top_k
    X, Y, Xt, Yt = bibtex
    model = xmlkit.FastXML(n_trees=3, threads=2).fit(X[:4000], Y[:4000])
    held = model.predict(X[4000:], k=5)
    labels, values = top_k(held, 5)
    rows = np.repeat(np.arange(labels.shape[0]), 5)
    ok = labels.ravel() >= 0
    relevant = np.asarray(Y[4000:][rows[ok], labels.ravel()[ok]]).ravel() != 0
    cmap = IsotonicMap.fit(values.ravel()[ok], relevant)
    S = model.predict(Xt, k=5)
    mapped = map_rows(S, cmap)
    path = tmp_path / "s.txt"
    with matrix_writer(path, *S.shape) as write:
        write(mapped)
    q = inverse_propensity(Y)
    ks = (1, 2, 3, 4, 5)
    assert ranking_metrics(Yt, read_matrix(path), ks, q) == ranking_metrics(Yt, S, ks, q)
    assert calibrations(Yt, mapped, [5])[5]["ECE"] < calibrations(Yt, S, [5])[5]["ECE"]
