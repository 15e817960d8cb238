"""The node separator solver (newGLMNET, xmlkit._ext.fastxml_solver.SeparatorSolver):
optimality conditions, liblinear-official's objective on random node problems,
its iteration caps, and the choice of solver in FastXML."""
from conftest import as_format_3
import math

import numpy as np
import pytest
import scipy.sparse as sp

import xmlkit
from xmlkit.driver import fit_folder
from xmlkit.errors import XmlkitError
from xmlkit._ext.fastxml_solver import SeparatorSolver
from xmlkit.metrics import ranking_metrics


def objective(X, y, w, c_pos, c_neg):
    """||w||_1 + sum_a C_a log(1 + exp(-y_a w.x_a)), computed in numpy."""
    c = np.where(y > 0, c_pos, c_neg)
    return np.abs(w).sum() + (c * np.logaddexp(0.0, -y * (X @ w))).sum()


def gradient(X, y, w, c_pos, c_neg):
    c = np.where(y > 0, c_pos, c_neg)
    m = -y * (X @ w)
    return X.T @ (-y * c * np.exp(m - np.logaddexp(0.0, m)))


def node_problem(seed, n=None, d=None, density=0.05):
    """A node-like problem: sparse non-negative features plus a bias column,
    labels from a sparse hyperplane with noise, class-balanced costs."""
    rs = np.random.RandomState(seed)
    n = n or rs.randint(40, 1500)
    d = d or rs.randint(10, 600)
    X = sp.random(n, d, density=density, random_state=rs, format="csr", dtype=np.float32)
    X = sp.hstack([X, np.ones((n, 1), np.float32)], format="csr")
    w_true = rs.randn(d + 1) * (rs.rand(d + 1) < 0.2)
    y = np.where(X @ w_true + 0.3 * rs.randn(n) >= 0, 1, -1).astype(np.int8)
    if (y > 0).all() or (y < 0).all():
        y[0] = -y[0]
    n_pos = int((y > 0).sum())
    return X, y, n / n_pos, n / (n - n_pos)


def solve(X, y, cp, cn, seed=1, **caps):
    s = SeparatorSolver(caps.get("max_newton", 10), caps.get("max_inner", 10), 20,
                        caps.get("eps", 0.01), caps.get("warm", False),
                        caps.get("max_newton_small", 10), caps.get("small_node", 0))
    return s.solve_csr(X.indptr, X.indices, X.data, y, cp, cn, seed), s


def test_optimality_conditions_at_a_tight_tolerance():
    # the minimum of ||w||_1 + L(w): grad_j = -sign(w_j) where w_j != 0, |grad_j| <= 1 else
    for seed in range(4):
        X, y, cp, cn = node_problem(seed)
        w, s = solve(X, y, cp, cn, max_newton=200, max_inner=1000, eps=1e-9)
        g = gradient(X, y, w, cp, cn)
        nz = w != 0
        assert nz.any()
        np.testing.assert_allclose(g[nz], -np.sign(w[nz]), atol=1e-5)
        assert np.all(np.abs(g[~nz]) <= 1 + 1e-5)
        assert objective(X, y, w, cp, cn) < objective(X, y, 0 * w, cp, cn)


def liblinear_weights(X, y, cp, cn, eps):
    import ctypes
    from liblinear import liblinearutil as ll
    # liblinear shuffles with the C library's rand(): seeded here, so that
    # its answer does not depend on what ran before in the process
    ctypes.CDLL(None).srand(1)
    n_pos = int((y > 0).sum())
    # liblinear scales its tolerance by min(n+, n-)/n; undo that
    e = eps * len(y) / min(n_pos, len(y) - n_pos)
    m = ll.train(ll.problem(y.astype(float).tolist(), X),
                 f"-s 6 -c 1 -w1 {cp} -w-1 {cn} -e {e} -q")
    w = np.array([m.w[i] for i in range(X.shape[1])])
    return w if m.label[0] == 1 else -w


def test_same_objective_as_liblinear_on_random_node_problems():
    for seed in range(6):
        X, y, cp, cn = node_problem(seed + 10)
        ref = objective(X, y, liblinear_weights(X, y, cp, cn, 1e-8), cp, cn)
        tight, _ = solve(X, y, cp, cn, max_newton=200, max_inner=1000, eps=1e-8)
        assert objective(X, y, tight, cp, cn) == pytest.approx(ref, rel=1e-7)
        # the C++ tool's caps and tolerance: within 0.5% of the decrease from
        # w = 0 to the optimum (measured: at most 0.14%), and as close as
        # liblinear stopped at the same relative tolerance (within 0.2%)
        capped, s = solve(X, y, cp, cn)
        assert s.last_newton <= 10 and s.last_inner <= 100
        got = objective(X, y, capped, cp, cn)
        span = objective(X, y, 0 * capped, cp, cn) - ref
        same_eps = objective(X, y, liblinear_weights(X, y, cp, cn, 0.01), cp, cn)
        assert ref - 1e-9 * span <= got <= ref + 5e-3 * span
        assert got <= same_eps + 2e-3 * span


def test_caps_bound_the_iterations_and_the_seed_only_moves_the_order():
    X, y, cp, cn = node_problem(3, n=800, d=300)
    w1, s = solve(X, y, cp, cn, max_newton=2, max_inner=3, eps=1e-12)
    assert s.last_newton == 2 and s.last_inner <= 6
    w2, _ = solve(X, y, cp, cn, max_newton=2, max_inner=3, eps=1e-12)
    assert np.array_equal(w1, w2)                       # deterministic for a seed
    a, _ = solve(X, y, cp, cn, seed=1, max_newton=200, max_inner=1000, eps=1e-10)
    b, _ = solve(X, y, cp, cn, seed=2, max_newton=200, max_inner=1000, eps=1e-10)
    np.testing.assert_allclose(a, b, atol=1e-4)         # same optimum, other shuffles


@pytest.mark.parametrize("small_node, cap", [(801, 2), (800, 7), (0, 7)])
def test_small_node_cap_binds_below_small_node_points(small_node, cap):
    """A problem of fewer than small_node points takes at most
    max_newton_small Newton steps; one of small_node points or more (and
    every one with small_node 0) takes up to max_newton."""
    X, y, cp, cn = node_problem(3, n=800, d=300)
    w, s = solve(X, y, cp, cn, max_newton=7, max_newton_small=2, small_node=small_node,
                 eps=1e-12)
    assert s.last_newton == cap
    same, _ = solve(X, y, cp, cn, max_newton=cap, eps=1e-12)
    assert np.array_equal(w, same)


def test_one_feature_and_bias_by_hand():
    # points x = 0 (y = -1, twice) and x = 1 (y = +1, twice), a bias column,
    # cost 1.5 each. With w = (a, 0): d/da = -2 * 1.5 * sigmoid(-a) must be -1,
    # so sigmoid(-a) = 1/3 and a = ln 2; then d/db = 1.5 - 1 = 0.5 lies in
    # [-1, 1], so the bias weight stays 0.
    X = sp.csr_matrix(np.array([[0, 1], [0, 1], [1, 1], [1, 1]], np.float32))
    y = np.array([-1, -1, 1, 1], np.int8)
    w, _ = solve(X, y, 1.5, 1.5, max_newton=100, max_inner=1000, eps=1e-12)
    np.testing.assert_allclose(w, [np.log(2.0), 0.0], atol=1e-6)


def test_liblinear_solver_stays_available(bibtex):
    X, Y, Xt, Yt = bibtex
    ours = xmlkit.FastXML(n_trees=3, seed=0).fit(X, Y)
    ll = xmlkit.FastXML(n_trees=3, seed=0, solver="liblinear").fit(X, Y)
    p_ours = ranking_metrics(Yt, ours.predict(Xt, k=5), ks=(1,))["P@1"]
    p_ll = ranking_metrics(Yt, ll.predict(Xt, k=5), ks=(1,))["P@1"]
    assert abs(p_ours - p_ll) < 0.05 and p_ours > 0.45      # fractions; 3 trees
    with pytest.raises(XmlkitError, match="solver"):
        xmlkit.FastXML(solver="sgd").fit(X, Y)


def test_folders_written_before_the_solver_option_load_as_liblinear(tmp_path, bibtex):
    X, Y, Xt, _ = bibtex
    folder = tmp_path / "m"
    fit_folder(xmlkit.FastXML(n_trees=2, seed=0, solver="liblinear"), X, Y, folder)
    as_format_3(folder, lambda m: m["params"].pop("solver"))
    model = xmlkit.load_model(folder)
    assert model.params.solver == "liblinear"
    assert model.predict(Xt[:5], k=3).nnz > 0


def test_warm_start_reaches_the_same_optimum():
    """The warm start (scaled proximal-gradient step) changes where the
    solver starts, not what it converges to; and it is a real start: its
    first iterate is not 0."""
    for seed in range(3):
        X, y, cp, cn = node_problem(seed)
        cold, _ = solve(X, y, cp, cn, max_newton=300, max_inner=1000, eps=1e-10)
        warm, _ = solve(X, y, cp, cn, max_newton=300, max_inner=1000, eps=1e-10, warm=True)
        np.testing.assert_allclose(warm, cold, atol=1e-4)
        start, s = solve(X, y, cp, cn, max_newton=1, max_inner=1, eps=0.0, warm=True)
        zero, _ = solve(X, y, cp, cn, max_newton=1, max_inner=1, eps=0.0)
        assert s.last_newton == 1 and not np.array_equal(start, zero)


def _ranks_by_hand(s):
    """Labels by decreasing sum, ties to the lower index; sums that are not
    positive after them, in index order."""
    key = np.where(s > 0, -s, 0.0)
    order = np.lexsort((np.arange(len(s)), key))
    r = np.empty(len(s), dtype=np.int32)
    r[order] = np.arange(len(s))
    return r


@pytest.mark.parametrize("m", [1, 5, 63, 64, 300, 5000])
def test_label_ranks_from_scratch_and_after_a_step(m):
    from xmlkit._ext.fastxml_partition import NdcgPartition
    rng = np.random.default_rng(m)
    part = NdcgPartition(True)
    base = rng.integers(0, 6, m).astype(float)        # many exact ties and zeros
    base[rng.random(m) < 0.1] *= -1.0
    # sums equal as float32 but not as doubles, and tiny positive ones
    near = 3.0 + rng.integers(0, 4, m) * 1e-12
    tiny = rng.random(m) * 1e-30
    for s in (base, near, tiny, rng.random(m)):
        want = _ranks_by_hand(s)
        assert np.array_equal(part.rank_labels(s), want)
        # a step after one with the same sums, with a few changed (merged
        # into the others' order; their new sums tie with unchanged ones),
        # with most changed (the full sort takes over)
        assert np.array_equal(part.rank_labels(s, s), want)
        for share in (0.02, 0.2, 0.9):
            before = s.copy()
            changed = rng.random(m) < share
            before[changed] = rng.permutation(s)[changed] + rng.integers(0, 2, m)[changed]
            assert np.array_equal(part.rank_labels(s, before), want)


def _alternation_by_hand(Y, start, use_idcg=True):
    """The nDCG alternation (NdcgPartition.partition) in plain Python: the
    side sums as integers of the partition's unit (so exact), every step's
    sums added up from zero, from the sides `start`."""
    n, m_all = Y.shape
    labels = np.unique(Y.indices)                 # local index: ascending label
    local = {int(l): k for k, l in enumerate(labels)}
    m = len(labels)
    disc = [1.0 / math.log2(r + 2.0) for r in range(m_all + 1)]
    cs = [1.0]
    for r in range(1, m_all + 2):
        cs.append((cs[r - 1] if r > 1 else 0.0) + disc[r - 1])
    rows = [[(local[int(Y.indices[j])], float(np.float32(Y.data[j])))
             for j in range(Y.indptr[a], Y.indptr[a + 1])] for a in range(n)]
    inorm = [1.0 / (cs[len(r)] if use_idcg else 1.0) for r in rows]
    total = 0.0
    for a in range(n):
        row = 0.0
        for _, v in rows[a]:
            row += abs(v)
        total += row * inorm[a]
    expo = min(51 - math.frexp(total)[1], 960) if total > 0 else 0
    unit = math.ldexp(1.0, -expo)
    # (round: halves to even, as C's rint)
    terms = [[(k, round(math.ldexp(inorm[a], expo) * v)) for k, v in rows[a]] for a in range(n)]
    sign = [int(s) for s in start]
    prev = -2.0
    while True:
        sums = {1: [0] * m, -1: [0] * m}
        for a in range(n):
            for k, q in terms[a]:
                sums[sign[a]][k] += q
        rank = {}
        for side in (1, -1):
            s = np.array(sums[side], dtype=float) * unit
            rank[side] = _ranks_by_hand(s)
        obj = 0.0
        for k in range(m):
            obj += (disc[rank[1][k]] * (sums[1][k] * unit)
                    + disc[rank[-1][k]] * (sums[-1][k] * unit))
        gain = [disc[rank[1][k]] - disc[rank[-1][k]] for k in range(m)]
        obj /= n
        moved = 0
        for a in range(n):
            delta = 0.0
            for j in range(Y.indptr[a], Y.indptr[a + 1]):
                delta += float(np.float32(Y.data[j])) * gain[local[int(Y.indices[j])]]
            new = 1 if delta > 0 else (-1 if delta < 0 else sign[a])
            moved += new != sign[a]
            sign[a] = new
        if obj - prev < 1e-6 or moved == 0:
            return np.array(sign, dtype=np.int8)
        prev = obj


@pytest.mark.parametrize("use_idcg", [True, False])
def test_ndcg_alternation_equals_a_hand_run(bibtex, use_idcg):
    # the kernel updates the side sums by the points that move; a plain
    # re-run that adds them up from zero at every step gives the same sides
    # (the sums are exact), on real label rows and on weighted ones
    from xmlkit._ext.fastxml_partition import NdcgPartition
    _, Y, _, _ = bibtex
    rng = np.random.default_rng(3)
    for rows, weighted in ((slice(0, 400), False), (slice(1000, 1300), True)):
        Yn = sp.csr_matrix(Y[rows], dtype=np.float32)
        if weighted:
            Yn.data = rng.uniform(0.1, 7.0, Yn.nnz).astype(np.float32)
        part = NdcgPartition(use_idcg)
        start, got = part.sides(Yn.indptr, Yn.indices, Yn.data, Y.shape[1], 11)
        assert set(np.unique(start)) == {-1, 1} and set(np.unique(got)) == {-1, 1}
        assert not np.array_equal(start, got)
        assert np.array_equal(got, _alternation_by_hand(Yn, start, use_idcg))


def test_fastxml_normalises_each_point_by_its_ideal_dcg(bibtex, monkeypatch):
    """FastXML's objective weighs each point by 1 / its ideal DCG (L_nDCG:
    1 / sum over r < |y| of 1 / log2(r + 2)), PfastreXML's propensity-scored
    one by 1: the partition follows the hand run with those weights (one
    node, on real label rows), and each estimator's trees are the ones its
    weighting grows, not the other's."""
    from xmlkit._ext.fastxml_partition import NdcgPartition
    X, Y, _, _ = bibtex
    Yn = sp.csr_matrix(Y[:300], dtype=np.float32)
    for use_idcg in (True, False):
        start, got = NdcgPartition(use_idcg).sides(Yn.indptr, Yn.indices, Yn.data,
                                                   Y.shape[1], 5)
        assert np.array_equal(got, _alternation_by_hand(Yn, start, use_idcg))
    # (a point of 3 labels weighs 1 / (1 + 1 / log2 3 + 1 / 2) = 0.46928 of one of 1)
    assert abs(1 / (1 + 1 / math.log2(3) + 0.5) - 0.46928) < 1e-5
    X, Y = X[:600], Y[:600]
    for cls, own in ((xmlkit.FastXML, True), (xmlkit.PfastreXML, False)):
        assert cls.use_idcg is own
        trees = {}
        for weighting in (own, not own):
            monkeypatch.setattr(cls, "use_idcg", weighting)
            m = cls(n_trees=1, seed=0).fit(X, Y)
            trees[weighting] = [np.asarray(a).tobytes() for t in m.trees_.values()
                                for a in (t if isinstance(t, (list, tuple)) else t.values())]
        assert trees[own] != trees[not own], cls.__name__
