"""Calibration maps (xmlkit.calibration) and their isotonic kernel."""
import re

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


def test_pav_grid_by_hand():
    from xmlkit._ext.isotonic import pav_grid
    # rows non-decreasing, columns non-increasing: the 0 of row 0 and the two
    # 1 and 0 of row 1 pool to 1/3 (t² + (t - 1)² + t² least at t = 1/3)
    y = np.array([[0.0, 1.0], [1.0, 0.0]])
    fit, rounds = pav_grid(y, np.ones((2, 2)))
    assert fit == pytest.approx(np.array([[1, 3], [1, 1]]) / 3, abs=1e-9) and rounds >= 1
    assert (y == [[0, 1], [1, 0]]).all()                     # (the values are not touched)
    # five values pool to their mean 0.26, the 0.9 stays
    fit, _ = pav_grid([[0.2, 0.1, 0.9], [0.5, 0.3, 0.2]], np.ones((2, 3)))
    assert fit == pytest.approx(np.array([[0.26, 0.26, 0.9], [0.26, 0.26, 0.26]]), abs=1e-9)
    # a grid in both orders already is its own fit, whatever the weights
    ok = np.array([[0.3, 0.5, 0.9], [0.1, 0.5, 0.7]])
    assert pav_grid(ok, [[1, 2, 3], [4, 5, 6]])[0] == pytest.approx(ok, abs=1e-12)
    # weights count as repeated values: 0 (weight 3) and 1 below it pool to 1/4
    fit, _ = pav_grid([[0.0], [1.0]], [[3.0], [1.0]])
    assert fit.ravel() == pytest.approx([0.25, 0.25], abs=1e-9)
    for y, w in (([[1.0, np.nan]], [[1, 1]]), ([[1.0, 2.0]], [[1, 0]]), ([[1.0]], [[1, 1]])):
        with pytest.raises(ValueError):
            pav_grid(y, w)


@pytest.mark.parametrize("seed", range(3))
def test_pav_grid_equals_a_general_solver(seed):
    """The least-squares fit under both orders, as scipy's SLSQP finds it
    with the constraints written out."""
    from scipy.optimize import minimize
    from xmlkit._ext.isotonic import pav_grid
    rng = np.random.default_rng(seed)
    G, B = 3, 5
    y, w = rng.random((G, B)), rng.uniform(0.5, 3, (G, B))
    fit, _ = pav_grid(y, w)
    cons = [{"type": "ineq", "fun": lambda x, g=g, b=b: x[g * B + b + 1] - x[g * B + b]}
            for g in range(G) for b in range(B - 1)]
    cons += [{"type": "ineq", "fun": lambda x, g=g, b=b: x[g * B + b] - x[(g + 1) * B + b]}
             for g in range(G - 1) for b in range(B)]
    theirs = minimize(lambda x: (w.ravel() * (x - y.ravel()) ** 2).sum(), np.full(G * B, 0.5),
                      jac=lambda x: 2 * w.ravel() * (x - y.ravel()), constraints=cons,
                      method="SLSQP", options={"ftol": 1e-14, "maxiter": 1000}).x
    assert fit.ravel() == pytest.approx(theirs, abs=1e-5)
    assert np.all(np.diff(fit, axis=1) >= 0) and np.all(np.diff(fit, axis=0) <= 1e-9)


def test_rank_maps_by_hand():
    """Two ranks, two bins of scores: rank 0 relevant 2 in 10 at the low
    scores, 8 in 10 at the high; rank 1 4 in 10 and 6 in 10. Rank 1 may not
    pass rank 0 at a score: the low cells pool to 0.3."""
    from xmlkit.calibration import rank_maps
    s = np.r_[np.linspace(0.1, 0.2, 10), np.linspace(0.7, 0.8, 10)] * np.ones((2, 1))
    y = np.zeros((2, 20))
    y[0, :2] = y[0, 10:18] = y[1, :4] = y[1, 10:16] = 1
    r = np.repeat([[0], [1]], 20, axis=1)
    maps = rank_maps(s.ravel(), r.ravel(), y.ravel(), levels=2, bins=2)
    assert [g for g, _ in maps] == [0, 1]
    for (_, m), top in zip(maps, (0.8, 0.6)):
        assert m.x == pytest.approx([0.15, 0.75]) and m.y == pytest.approx([0.3, top])
    # ranks past the levels count with the last; a rank with the map of the
    # one before it, or with no entries, has none of its own
    same = rank_maps(np.r_[s[0], s[0], s[0]], np.r_[[0] * 20, [1] * 20, [5] * 20],
                     np.r_[y[0], y[0], y[0]], levels=3, bins=2)
    assert [g for g, _ in same] == [0]
    assert [g for g, _ in rank_maps(s[0], np.r_[[0] * 10, [2] * 10], y[0], 3, 2)] == [0, 2]
    with pytest.raises(XmlkitError, match="ranks"):
        rank_maps(s.ravel(), r.ravel()[1:], y.ravel(), levels=2)
    # no more levels than ranks seen: a k of a billion fits two
    assert len(rank_maps(s.ravel(), r.ravel(), y.ravel(), levels=10 ** 9, bins=2)) == 2


def test_maps_by_rank_follow_what_the_rank_tells():
    """Outcomes relevant with probability s at rank 1 and s/2 lower down:
    one map for the top 5 is wrong at both, the maps by rank right at each
    (the ranking kept, the top ranks' ECE lower)."""
    import scipy.sparse as sp
    from xmlkit.calibration import Calibration
    from xmlkit.metrics import calibration, ranking_metrics

    def draw(seed, n=3000, L=40):
        rng = np.random.default_rng(seed)
        S = rng.random((n, L)) ** 3
        order = np.argsort(-S, axis=1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(L)[None, :], axis=1)
        Y = rng.random((n, L)) < np.where(rank == 0, S, S / 2)
        return sp.csr_matrix(Y.astype(np.float64)), sp.csr_matrix(S.astype(np.float32))

    Y, S = draw(0)
    Yt, St = draw(1)
    rank = np.argsort(np.argsort(-St.toarray(), axis=1, kind="stable"), axis=1)
    gap, ece = {}, {}
    for by_rank in (True, False):
        cal = Calibration.fit(Y, S, by_rank=by_rank)
        P = cal.probabilities(St)
        assert ranking_metrics(Yt, P, (1, 3, 5)) == ranking_metrics(Yt, St, (1, 3, 5))
        # mean probability less the share relevant, at rank 1 and at ranks 2-5
        gap[by_rank] = [P.toarray()[at].mean() - Yt.toarray()[at].mean()
                        for at in (rank == 0, (rank >= 1) & (rank < 5))]
        ece[by_rank] = calibration(Yt, P, 1)["ECE"]
    assert [r for r, _ in Calibration.fit(Y, S).deep][:4] == [1, 2, 3, 4]
    assert np.abs(gap[True]).max() < 0.02
    assert gap[False][0] < -0.1 and gap[False][1] > 0.02     # the top too low, the rest high
    assert ece[True] < 0.5 * ece[False]


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


def test_a_map_on_too_few_outcomes_is_fitted_with_a_warning(tiny, tmp_path):
    """Fewer than FEW_OUTCOMES relevant labels (or others) among the top k: a
    map too rough to trust, said (a warning, on the command's stderr);
    enough of both: nothing said."""
    import shutil
    import warnings
    from conftest import run_cli
    from xmlkit.calibration import FEW_OUTCOMES, Calibration
    from xmlkit.models.calibrated import ranked
    from xmlkit.io import read_dataset, write_dataset
    from xmlkit.models import load_model
    X, Y = read_dataset(tiny / "train.txt")
    model = load_model(tiny / "fastxml")
    S = model.predict(X, k=50, **ranked(model))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Calibration.fit(Y, S)
    # 3 rows: at most 15 entries in their top 5, fewer than FEW_OUTCOMES of either kind
    assert FEW_OUTCOMES > 15
    with pytest.warns(UserWarning, match="among the 5 best of 3 rows: too few"):
        Calibration.fit(Y[:3], S[:3])
    # rows without a label: none relevant, said as such
    empty = Y[:100].copy()
    empty.data[:] = 0
    empty.eliminate_zeros()
    with pytest.warns(UserWarning, match=r"rests on 0 relevant and \d+ other"):
        Calibration.fit(empty, S[:100])
    write_dataset(tmp_path / "few.txt", X[:3], Y[:3])
    shutil.copytree(tiny / "fastxml", tmp_path / "m")
    r = run_cli("xml-calibrate", tmp_path / "few.txt", tmp_path / "m", "-q")
    assert r.returncode == 0 and "warning: calibration: the map rests on" in r.stderr, r.stderr


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
    # where the map leaves no room above 0, the values keep a step apart above it
    zero = IsotonicMap(np.array([0.0, 1.0]), np.array([0.0, 1e-9]))
    assert map_rows(S[:1], zero).data.tolist() == pytest.approx([2e-6, 1e-6, 1e-6, 0],
                                                                 abs=1e-9)


def test_the_rows_order_is_the_three_key_sort():
    """_rows_descending's one-key sort orders entries as the three-key sort
    (row, written score descending, label): ties in the score, labels in
    any order, and a span too wide for one key (the three-key sort itself)."""
    from xmlkit.calibration import _rows_descending
    rng = np.random.default_rng(0)
    for spread in (3, 10 ** 6, 10 ** 15):
        rows = np.sort(rng.integers(0, 40, 600))
        labels = rng.integers(0, 1000, 600).astype(np.int32)
        written = rng.integers(-spread, spread, 600).astype(np.float64)
        assert _rows_descending(written, rows, labels, 1000).tolist() == \
            np.lexsort((labels, -written, rows)).tolist()


def test_bands_by_hand():
    from xmlkit.calibration import bands
    assert bands(5, 50) == [5, 10, 20, 40]
    assert bands(5, 5) == [] and bands(5, 6) == [5]
    assert bands(1, 5) == [1, 2, 4]


def test_ranks_past_the_top_k_are_mapped_by_their_band_by_hand():
    import scipy.sparse as sp
    from xmlkit.calibration import Calibration, map_rows
    top = IsotonicMap(np.array([0.0, 1.0]), np.array([0.0, 1.0]))
    low = IsotonicMap(np.array([0.0, 1.0]), np.array([0.0, 0.5]))
    high = IsotonicMap(np.array([0.0, 1.0]), np.array([0.5, 0.9]))
    S = sp.csr_matrix(np.array([[0.9, 0.8, 0.6, 0.4, 0.2], [0.5, 0.0, 0.1, 0.3, 0.0]],
                               np.float32))
    # ranks 0-1 by `top`, 2-3 by `low`, 4 and later by `high`, held under the
    # value ranked before (one grid step per strict drop)
    P = map_rows(S, top, deep=((2, low), (4, high))).toarray()
    np.testing.assert_allclose(P, [[0.9, 0.8, 0.3, 0.2, 0.199999], [0.5, 0, 0.05, 0.3, 0]],
                               atol=1e-7)
    cal = Calibration(top, [0.5] * 5, 0.5, 2, 50, ((2, low), (4, high)))
    assert (cal.probabilities(S).toarray() == P).all()
    back = Calibration.from_arrays(cal.arrays(), 5)
    assert [r for r, _ in back.deep] == [2, 4]
    assert (back.probabilities(S).toarray() == P).all()
    # a folder's calibration from before the bands: the first map throughout
    old = {k: v for k, v in cal.arrays().items() if not k.startswith("deep_")}
    assert Calibration.from_arrays(old, 5).deep == ()
    assert (Calibration.from_arrays(old, 5).probabilities(S).toarray() ==
            map_rows(S, top).toarray()).all()
    good = cal.arrays()
    for key, bad in (("deep_ranks", np.array([4, 2])), ("deep_ranks", np.array([0, 4])),
                     ("deep_ptr", np.array([0, 2, 3])), ("deep_ptr", np.array([0, 0, 4])),
                     ("deep_x", np.array([0.0, 1.0, 0.5])), ("deep_y", np.array([0.0] * 4)),
                     ("deep_ranks", None)):
        arrays = {**good, key: bad} if bad is not None else {
            k: v for k, v in good.items() if k != key}
        with pytest.raises(XmlkitError, match="calibration"):
            Calibration.from_arrays(arrays, 5, "m")


def test_the_bands_tell_apart_what_the_top_map_cannot():
    """Held-out candidates past the top 1 relevant where their score is
    above 0.2, whatever the top ranks do at that score: fitted on the top 1
    alone, the map gives them all its floor; the band maps them apart, and
    the label sets keep the relevant ones."""
    import scipy.sparse as sp
    from xmlkit.calibration import Calibration
    rng = np.random.default_rng(0)
    n, L = 400, 6
    S = rng.uniform(0.05, 0.35, (n, L))
    S[:, 0] = rng.uniform(0.6, 1.0, n)          # label 0 always ranked first
    Y = np.zeros((n, L))
    Y[:, 0] = rng.random(n) < 0.9
    Y[:, 1:] = S[:, 1:] > 0.2
    cal = Calibration.fit(sp.csr_matrix(Y), sp.csr_matrix(S.astype(np.float32)), k=1,
                          candidates=L)
    assert [r for r, _ in cal.deep] == [1, 2, 4]
    X = sp.csr_matrix(S.astype(np.float32))
    sets = cal.label_sets(cal.probabilities(X)).toarray() > 0
    # (the knots are the steps' mean scores: wrong only between them, near 0.2)
    assert (sets[:, 1:] == Y[:, 1:].astype(bool)).mean() > 0.9
    top_only = Calibration(cal.map, cal.thresholds, cal.threshold, 1, L)
    # (the top map alone: one value for all of them, a grid step per rank apart)
    assert np.ptp(top_only.probabilities(X).toarray()[:, 1:]) < 1e-5


def test_calibrated_scores_rank_as_the_raw_ones_once_written(bibtex, tmp_path):
    """A FastXML model's scores of the Bibtex test points, mapped by a map
    fitted on other points and written as xml-predict writes them: every
    P@k, nDCG@k and PSP@k of the file read back equals the raw scores' file's."""
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
    for name, M in (("raw.txt", S), ("mapped.txt", mapped)):
        with matrix_writer(tmp_path / name, *S.shape) as write:
            write(M)
    q = inverse_propensity(Y)
    ks = (1, 2, 3, 4, 5)
    assert ranking_metrics(Yt, read_matrix(tmp_path / "mapped.txt"), ks, q) == \
        ranking_metrics(Yt, read_matrix(tmp_path / "raw.txt"), ks, q)
    assert calibrations(Yt, mapped, [5])[5]["ECE"] < calibrations(Yt, S, [5])[5]["ECE"]


# ---------------------------------------------------------------- commands

@pytest.mark.parametrize("family", ["fastxml", "pfastrexml", "ldsm", "embed", "linear"])
def test_a_calibrated_folder_writes_probabilities_ranked_as_before(family, tiny, tmp_path):
    """xml-calibrate on held-out points, then xml-predict: probabilities in
    [0, 1], every P@k and nDCG@k as the model's own scores; --raw writes the
    model's own scores, byte for byte those of the folder before."""
    import json
    import shutil
    from conftest import run_cli
    from xmlkit import store
    from xmlkit.io import read_matrix
    m = tmp_path / "m"
    shutil.copytree(tiny / family, m)
    before = tmp_path / "before.txt"
    assert run_cli("xml-predict", tiny / "test.txt", before, m, "-k", "5", "-q").returncode == 0
    r = run_cli("xml-calibrate", tiny / "train.txt", m, "--json", "-q")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["k"] == 5 and out["points"] == 300 and out["knots"] >= 1
    assert "calibration.npz" in store.read_manifest(m)["files"]
    info = json.loads(run_cli("xml-info", m, "--json").stdout)
    assert re.match(rf"isotonic, {out['knots']}(/\d+)* knots", info["calibration"])
    cal, raw = tmp_path / "cal.txt", tmp_path / "raw.txt"
    r = run_cli("xml-predict", tiny / "test.txt", cal, m, "-k", "5")
    assert r.returncode == 0 and "probabilities" in r.stderr, r.stderr
    assert run_cli("xml-predict", tiny / "test.txt", raw, m, "-k", "5", "--raw",
                   "-q").returncode == 0
    assert raw.read_bytes() == before.read_bytes()
    P = read_matrix(cal)
    assert P.data.min() >= 0 and P.data.max() <= 1

    def ranking(path):
        r = run_cli("xml-eval", path, tiny / "test.txt", "-k", "1,2,3,4,5", "--json", "-q")
        return {k: v for k, v in json.loads(r.stdout)["metrics"].items() if "ECE" not in k}
    assert ranking(cal) == ranking(raw)


def test_a_damaged_or_crafted_calibration_is_refused(tiny, tmp_path):
    import shutil
    from conftest import one_line_error, run_cli
    from xmlkit import store
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    assert run_cli("xml-calibrate", tiny / "train.txt", m, "-q").returncode == 0
    path = m / "calibration.npz"
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m)
    assert one_line_error(r) and "calibration" in r.stderr, r.stderr
    # knots rewritten out of order, the record rewritten to match: still refused
    store.save_arrays(m, "calibration", {"x": np.array([0.5, 0.2]), "y": np.array([0.1, 0.3])},
                      store.read_manifest(m))
    store.record_files(m, ["calibration"])
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m)
    assert one_line_error(r) and "calibration" in r.stderr, r.stderr
    assert not (tmp_path / "s.txt").exists()


@pytest.mark.parametrize("family", ["fastxml", "pfastrexml"])
def test_a_calibration_maps_only_the_scores_it_was_fitted_to(family, tiny, tmp_path):
    """Some of the trees, or PfastreXML's trees without the tail classifiers,
    score otherwise than the model the calibration was fitted to: refused
    (exit 2, nothing written) unless --raw, by the API too; all the trees
    picked, or trees_only as the model's, are the same scores."""
    import shutil
    from conftest import one_line_error, run_cli
    from xmlkit.models.calibrated import Calibrated
    from xmlkit.errors import InvalidParameterError
    from xmlkit.io import read_dataset
    m, out = tmp_path / "m", tmp_path / "s.txt"
    shutil.copytree(tiny / family, m)
    assert run_cli("xml-calibrate", tiny / "train.txt", m, "-q").returncode == 0
    refused = [["-t", "1"], ["-s", "1"]] + ([["-S", "1"]] if family == "pfastrexml" else [])
    for args in refused:
        r = run_cli("xml-predict", tiny / "test.txt", out, m, *args)
        assert one_line_error(r) and "calibration" in r.stderr and "--raw" in r.stderr, \
            (args, r.stderr)
        assert not out.exists()
        r = run_cli("xml-predict", tiny / "test.txt", out, m, *args, "--raw", "-q")
        assert r.returncode == 0, r.stderr
        out.unlink()
    same = [["-s", "0", "-t", "2"]] + ([["-S", "0"]] if family == "pfastrexml" else [])
    for args in same:
        assert run_cli("xml-predict", tiny / "test.txt", out, m, *args, "-q").returncode == 0
    with pytest.raises(XmlkitError, match="all its trees"):
        Calibrated.load(m, trees=[1])
    X, _ = read_dataset(tiny / "test.txt")
    model = Calibrated.load(m, trees=[0, 1])
    if family == "pfastrexml":
        with pytest.raises(InvalidParameterError, match="trees_only=True gives others"):
            model.predict(X, trees_only=True)
        assert model.predict(X, trees_only=False).data.tolist() == \
            model.predict(X).data.tolist()
        # a folder whose predict parameters say trees only: those are its own scores
        model.model.predict_params_ = {**model.model.predict_params_, "trees_only": True}
        assert model.predict(X, trees_only=True).data.tolist() == \
            model.predict(X).data.tolist()
        with pytest.raises(InvalidParameterError, match="trees_only=False gives others"):
            model.predict(X, trees_only=False)


def test_training_into_a_calibrated_folder_drops_its_map(tiny, tmp_path):
    import shutil
    from conftest import run_cli
    from xmlkit import store
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    assert run_cli("xml-calibrate", tiny / "train.txt", m, "-q").returncode == 0
    # nothing to train: the map stays
    assert run_cli("xml-train", tiny / "train.txt", m, "-t", "2", "-q").returncode == 0
    assert (m / "calibration.npz").exists()
    # a tree to grow again: the model changes, the map goes
    manifest = store.read_manifest(m)
    del manifest["files"]["tree_00001.npz"]
    store.write_manifest(m, manifest)
    (m / "tree_00001.npz").unlink()
    r = run_cli("xml-train", tiny / "train.txt", m, "-t", "2")
    assert r.returncode == 0 and "calibration is dropped" in r.stderr, r.stderr
    assert not (m / "calibration.npz").exists()
    assert "calibration.npz" not in store.read_manifest(m)["files"]


def test_xml_calibrate_refuses_what_it_cannot_calibrate(tiny, tmp_path, shared):
    from conftest import one_line_error, run_cli
    from xmlkit.io import read_dataset, write_dataset
    r = run_cli("xml-calibrate", tiny / "test.txt", shared / "fixtures" / "cpp_reference" /
                "fastxml_model")
    assert one_line_error(r) and "C++" in r.stderr, r.stderr
    X, Y = read_dataset(tiny / "test.txt")
    write_dataset(tmp_path / "narrow.txt", X[:, :100], Y)
    r = run_cli("xml-calibrate", tmp_path / "narrow.txt", tiny / "fastxml")
    assert one_line_error(r) and "D = 100" in r.stderr, r.stderr


def test_calibrate_command_does_not_import_scipy(tiny, tmp_path):
    """A validation file and a folder, as xml-predict's path: no
    scipy.sparse (a large share of a short run); the same calibration."""
    import shutil
    from conftest import run_without_scipy
    from xmlkit.calibration import Calibration
    from xmlkit.models.calibrated import folder_calibration, ranked
    from xmlkit.io import read_dataset
    from xmlkit.models import load_model
    shutil.copytree(tiny / "fastxml", tmp_path / "m")
    r = run_without_scipy("calibrate", tiny / "test.txt", "m", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    X, Y = read_dataset(tiny / "test.txt")
    model = load_model(tiny / "fastxml")
    expected = Calibration.fit(Y, model.predict(X, k=50, **ranked(model)))
    got = folder_calibration(tmp_path / "m")
    assert got.map.x.tolist() == expected.map.x.tolist()
    assert got.thresholds.tolist() == expected.thresholds.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("resign", [False, True], ids=["damaged", "crafted"])
def test_model_fuzzer_on_a_calibrated_folder(resign, tiny, tmp_path):
    """tests/model_fuzz.py over a calibrated FastXML folder: every array of
    calibration.npz mutated and the file damaged, as every other file."""
    import json
    import shutil
    import subprocess
    import sys
    from conftest import ROOT, run_cli
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    assert run_cli("xml-calibrate", tiny / "train.txt", m, "-q").returncode == 0
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "model_fuzz.py"), str(m),
                        str(tiny / "test.txt"), "1"] + (["--resign"] if resign else []),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    mine = [row for row in rows if row.get("file") == "calibration.npz"]
    assert len(mine) > 10
    allowed = {"refused", "same"} | ({"different"} if resign else set())
    assert not [row for row in rows if row["outcome"] not in allowed][:5]


# ------------------------------------------------------------- label sets

def test_best_cut_and_thresholds_by_hand():
    from xmlkit.calibration import _best_cut, fit_thresholds
    # keep 1: 2/(4+1); 2: 4/6; 3: 4/7; 4: 6/8, the best (a cut at 0.2)
    assert _best_cut(np.array([0.9, 0.8, 0.3, 0.2]), np.array([1, 1, 0, 1]), 4) == \
        pytest.approx((0.2, 0.75))
    # equal probabilities are kept together: 0.5 twice counts as one cut
    assert _best_cut(np.array([0.5, 0.5, 0.1]), np.array([1, 0, 0]), 1)[0] == 0.5
    # label 0 is relevant whenever scored, label 1 never: label 0's threshold
    # falls below the global cut and label 1's rises above it; label 2,
    # never a candidate, keeps the global cut
    p = np.array([0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4])
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    th, c = fit_thresholds(p, labels == 0, labels, 4, 3, prior=1.0)
    assert th[0] < c < th[1] and th[2] == pytest.approx(c)
    # no shift possible (an infinite prior): every threshold is the cut
    th, c = fit_thresholds(p, labels == 0, labels, 4, 3, prior=1e12)
    assert th == pytest.approx([c] * 3)


def test_label_sets_keep_what_passes_and_the_arrays_are_checked():
    import scipy.sparse as sp
    from xmlkit.calibration import Calibration
    P = sp.csr_matrix(np.array([[0.9, 0.2, 0.4], [0.1, 0.6, 0.35]]))
    cal = Calibration(IsotonicMap(np.array([0.0, 1.0]), np.array([0.0, 1.0])),
                      [0.5, 0.5, 0.3], 0.5)
    np.testing.assert_allclose(cal.label_sets(P).toarray(), [[0.9, 0, 0.4], [0, 0.6, 0.35]],
                               rtol=1e-6)
    np.testing.assert_allclose(cal.label_sets(P, threshold=0.6).toarray(),
                               [[0.9, 0, 0], [0, 0.6, 0]], rtol=1e-6)
    back = Calibration.from_arrays(cal.arrays(), 3)
    assert back.thresholds.tolist() == [0.5, 0.5, 0.3] and back.threshold == 0.5
    assert (back.k, back.candidates) == (cal.k, cal.candidates)
    for bad in ({**cal.arrays(), "thresholds": np.array([0.5, 0.5])},
                {**cal.arrays(), "thresholds": np.array([0.5, 1.5, 0.1])},
                {**cal.arrays(), "ranks": np.array([0, 50])},
                {k: v for k, v in cal.arrays().items() if k != "threshold"}):
        with pytest.raises(XmlkitError, match="thresholds"):
            Calibration.from_arrays(bad, 3, "m")


@pytest.mark.parametrize("family", ["fastxml", "pfastrexml", "ldsm"])
def test_tree_families_give_sets_only_through_a_calibration(family, tiny):
    from xmlkit.errors import InvalidParameterError
    from xmlkit.io import read_dataset
    from xmlkit.models import load_model
    X, _ = read_dataset(tiny / "test.txt")
    model = load_model(tiny / family)
    assert (model.predict(X, k=3, decision="scores") != model.predict(X, k=3)).nnz == 0
    for kw in ({"decision": "threshold"}, {"threshold": 0.5}):
        with pytest.raises(InvalidParameterError, match="calibration"):
            model.predict(X, k=3, **kw)


@pytest.mark.parametrize("family", ["fastxml", "pfastrexml", "ldsm", "embed", "linear"])
def test_xml_train_calibrate_then_sets_as_the_api_gives_them(family, tiny, tmp_path):
    """xml-train --calibrate (a third held out) keeps a calibration; xml-predict
    --decision threshold writes the sets Calibrated.load(...).predict gives,
    each entry at or above its label's threshold; --threshold P cuts at P."""
    import json
    from conftest import run_cli
    from xmlkit.models.calibrated import Calibrated
    from xmlkit.io import read_dataset, read_matrix
    m = tmp_path / "m"
    r = run_cli("xml-train", tiny / "train.txt", m, "--algorithm", family, "--calibrate",
                "--json", *(["-t", "3"] if family in ("fastxml", "pfastrexml", "ldsm") else []))
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)["calibration"]
    assert summary["knots"] >= 1 and 0 <= summary["threshold"] <= 1
    X, _ = read_dataset(tiny / "test.txt")
    model = Calibrated.load(m)
    sets = tmp_path / "sets.txt"
    assert run_cli("xml-predict", tiny / "test.txt", sets, m, "--decision", "threshold",
                   "-q").returncode == 0
    got, want = read_matrix(sets), model.predict(X, decision="threshold")
    assert (got != want.astype(np.float32)).nnz == 0 or \
        np.abs(got - want).max() <= 5e-7
    assert got.nnz and np.all(got.data >= model.calibration.thresholds[got.indices] - 5e-7)
    cut = tmp_path / "cut.txt"
    assert run_cli("xml-predict", tiny / "test.txt", cut, m, "--decision", "threshold",
                   "--threshold", "0.3", "-q").returncode == 0
    C = read_matrix(cut)
    assert np.all(C.data >= 0.3 - 5e-7)
    for bad in ("1.5", "-1", "nan"):
        r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "bad.txt", m, "--decision",
                    "threshold", "--threshold", bad)
        assert r.returncode == 2 and "--threshold" in r.stderr, r.stderr
        assert not (tmp_path / "bad.txt").exists()
    assert C.nnz == model.predict(X, decision="threshold", threshold=0.3).nnz


def test_the_calibration_at_training_is_the_same_bytes_at_any_threads(tiny, tmp_path):
    from conftest import run_cli
    for t in ("1", "2"):
        assert run_cli("xml-train", tiny / "train.txt", tmp_path / t, "-t", "4", "-T", t,
                       "--calibrate", "-q").returncode == 0
    assert (tmp_path / "1" / "calibration.npz").read_bytes() == \
        (tmp_path / "2" / "calibration.npz").read_bytes()


def test_linear_one_cut_and_options_that_do_not_go_together(tiny, tmp_path):
    from conftest import one_line_error, run_cli
    from xmlkit.io import read_dataset
    from xmlkit.models import load_model
    X, _ = read_dataset(tiny / "test.txt")
    model = load_model(tiny / "linear")
    P = model.predict(X, k=None, decision="scores")
    S = model.predict(X, k=None, decision="threshold", threshold=0.2)
    assert S.nnz == int((P.data >= 0.2).sum()) and S.data.min() >= 0.2
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", tiny / "fastxml",
                "--decision", "threshold")
    assert one_line_error(r) and "calibration" in r.stderr, r.stderr
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", tiny / "linear",
                "--threshold", "0.2")
    assert one_line_error(r) and "--threshold" in r.stderr, r.stderr
    assert not (tmp_path / "s.txt").exists()


def test_the_shift_prior_is_chosen_on_held_out_rows():
    """Cross-validated over even and odd rows: where one label's
    probabilities run low (it is relevant whenever scored), shifting pays
    and a finite prior is chosen; where the outcomes are as likely for
    every label, no shift (the first prior, SHIFT_PRIORS[0]) is kept."""
    from xmlkit.calibration import SHIFT_PRIORS, choose_prior
    rng = np.random.default_rng(0)
    n = 400
    rows = np.repeat(np.arange(n), 2)
    labels = np.tile([0, 1], n)
    p = np.full(2 * n, 0.3)
    skewed = (labels == 0).astype(float)              # label 0 always, label 1 never
    per_row = np.ones(n)
    assert choose_prior(p, skewed, labels, rows, per_row, 2) != SHIFT_PRIORS[0]
    fair = (rng.random(2 * n) < 0.3).astype(float)     # as the probabilities say
    per_row = np.bincount(rows, weights=fair, minlength=n)
    assert choose_prior(p, fair, labels, rows, per_row, 2) == SHIFT_PRIORS[0]


def test_pfastrexml_halves_keep_the_propensities_of_all_points(bibtex):
    X, Y, _, _ = bibtex
    import xmlkit
    est = xmlkit.PfastreXML(n_trees=2)
    q = est.fold_params(Y)["inv_propensity"]
    assert np.array_equal(q, est.propensities(Y))
    half = xmlkit.PfastreXML(n_trees=2, inv_propensity=q).fit(X[:300], Y[:300])
    assert np.array_equal(half.inv_propensity_, q)
    assert xmlkit.FastXML().fold_params(Y) == {}


def test_held_out_rows_are_a_share_or_every_row_by_folds(bibtex):
    """fit_held_out scores a third of the rows (one model of the others), or
    every row with folds; too few rows to hold any out are refused."""
    import xmlkit
    from xmlkit.models.calibrated import HOLDOUT, fit_held_out
    X, Y, _, _ = bibtex
    X, Y = X[:300], Y[:300]
    seen = []

    class Counting(xmlkit.FastXML):
        def fit(self, X, Y):
            seen.append(X.shape[0])
            return super().fit(X, Y)
    est = Counting(n_trees=2)
    fit_held_out(est, X, Y)
    assert seen == [300 - round(HOLDOUT * 300)]
    seen.clear()
    fit_held_out(est, X, Y, folds=3)
    assert seen == [200, 200, 200]
    with pytest.raises(XmlkitError, match="too few"):
        fit_held_out(est, X[:1], Y[:1])


def test_the_held_out_copy_is_trained_with_the_family_fold_params(bibtex):
    import xmlkit
    from xmlkit.models.calibrated import fit_held_out
    X, Y, _, _ = bibtex
    X, Y = X[:300], Y[:300]
    given = []

    class Spy(xmlkit.PfastreXML):
        def fit(self, X, Y):
            given.append(self.inv_propensity)
            return super().fit(X, Y)
    est = Spy(n_trees=2)
    fit_held_out(est, X, Y)
    assert len(given) == 1 and np.array_equal(given[0], est.propensities(Y))


def test_held_out_split_partitions_the_rows():
    from xmlkit.models.calibrated import held_out_split
    (held, kept), = held_out_split(30, holdout=1 / 3, seed=4)
    assert len(held) == 10 and len(kept) == 20
    assert np.array_equal(np.sort(np.r_[held, kept]), np.arange(30))
    assert np.all(np.diff(held) > 0) and np.all(np.diff(kept) > 0)
    (again, _), = held_out_split(30, holdout=1 / 3, seed=4)
    assert np.array_equal(held, again)
    assert not np.array_equal(held, held_out_split(30, holdout=1 / 3, seed=5)[0][0])
    folds = held_out_split(30, folds=3, seed=4)
    assert len(folds) == 3
    assert np.array_equal(np.sort(np.concatenate([h for h, _ in folds])), np.arange(30))
    for h, k in folds:
        assert len(h) == 10 and np.array_equal(np.sort(np.r_[h, k]), np.arange(30))
    with pytest.raises(XmlkitError, match="too few"):
        held_out_split(1)
    with pytest.raises(XmlkitError, match="too few"):
        held_out_split(2, holdout=0.1)
