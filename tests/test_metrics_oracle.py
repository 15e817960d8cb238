"""xmlkit's ranking metrics and propensities against an independent
implementation, napkinXC's (a test dependency), as napkinXC's own tests check
theirs against pyxclib: random score matrices and the Bibtex sample."""
import numpy as np
import pytest
import scipy.sparse as sp

from xmlkit.metrics import inverse_propensity, ranking_metrics

nxm = pytest.importorskip("napkinxc.metrics")

K = 5
ORACLE = {"P": lambda Y, R, q: nxm.precision_at_k(Y, R, k=K),
          "nDCG": lambda Y, R, q: nxm.ndcg_at_k(Y, R, k=K),
          "R": lambda Y, R, q: nxm.recall_at_k(Y, R, k=K),
          "PSP": lambda Y, R, q: nxm.psprecision_at_k(Y, R, q, k=K),
          # xmlkit's PSnDCG is the Matlab tools' (docs/metrics.md): the sum of
          # the points' PSDCG over that of the best rankings, which is what
          # napkinXC's normalised PSDCG computes (its psndcg_at_k divides each
          # point by its own ideal DCG first, as pyxclib does)
          "PSnDCG": lambda Y, R, q: nxm.psdcg_at_k(Y, R, q, k=K)}


def rankings(S, k=K):
    """Each row's k best labels, by score descending, then label ascending
    (xmlkit's tie-break), computed here with numpy, not by xmlkit."""
    S = sp.csr_matrix(S)
    out = []
    for i in range(S.shape[0]):
        lab = S.indices[S.indptr[i]:S.indptr[i + 1]]
        val = S.data[S.indptr[i]:S.indptr[i + 1]].astype(np.float32)
        out.append([int(lab[j]) for j in np.lexsort((lab, -val))[:k]])
    return out


def compare(Y, S, q):
    ours = ranking_metrics(Y, S, ks=range(1, K + 1), inv_prop=q)
    lists = [list(map(int, r)) for r in np.split(Y.indices, Y.indptr[1:-1])]
    ranked = rankings(S)
    for name, oracle in ORACLE.items():
        theirs = oracle(lists, ranked, q)
        for k in range(1, K + 1):
            assert ours[f"{name}@{k}"] == pytest.approx(theirs[k - 1], abs=1e-9, rel=0), \
                (name, k)


@pytest.mark.parametrize("seed", range(5))
def test_random_score_matrices(seed):
    rng = np.random.default_rng(seed)
    n, L = 300, 40
    dense = (rng.random((n, L)) < rng.uniform(0.02, 0.2)).astype(np.float32)
    dense[np.arange(n), rng.integers(0, L, n)] = 1          # every point has a label
    Y = sp.csr_matrix(dense)
    # sparse scores with ties (a few distinct values), some rows with fewer than K
    S = sp.random(n, L, density=0.15, random_state=seed, format="csr", dtype=np.float32)
    S.data = np.round(S.data * 4) / 4 + 0.25
    q = inverse_propensity(Y, 0.55, 1.5)
    compare(Y, S, q)
    for A, B in ((0.55, 1.5), (0.5, 0.4), (0.6, 2.6)):
        np.testing.assert_allclose(inverse_propensity(Y, A, B),
                                   nxm.Jain_et_al_inverse_propensity(Y.astype(np.float64), A, B),
                                   rtol=0, atol=1e-9)


def test_bibtex_sample(bibtex):
    """A FastXML model's scores of the Bibtex test points (ties included),
    with the propensities of the training labels."""
    import xmlkit
    X, Y, Xt, Yt = bibtex
    S = xmlkit.FastXML(n_trees=2).fit(X, Y).predict(Xt, k=10)
    keep = np.flatnonzero(np.diff(sp.csr_matrix(Yt).indptr) > 0)    # points with labels
    Yk, Sk = sp.csr_matrix(Yt)[keep], sp.csr_matrix(S)[keep]
    q = inverse_propensity(Y)
    # (in float64: napkinXC counts in the matrix's dtype, float32 rounds at 1e-7)
    np.testing.assert_allclose(q, nxm.Jain_et_al_inverse_propensity(
                               sp.csr_matrix(Y, dtype=np.float64)),
                               rtol=0, atol=1e-9)
    compare(Yk, Sk, q)


def test_a_truth_matrix_with_other_values_is_refused():
    """Swapped arguments (scores given as the truth) are refused, not scored."""
    Y = sp.csr_matrix(np.array([[1, 0], [0, 1]], np.float32))
    S = sp.csr_matrix(np.array([[0.9, 0.2], [0.1, 0.7]], np.float32))
    from xmlkit.errors import XmlkitError
    with pytest.raises(XmlkitError, match="true labels must be 0/1, but row 0 holds 0.9"):
        ranking_metrics(S, Y)
    assert ranking_metrics(Y, S, ks=(1,))["P@1"] == 1.0
