"""Elastic-net one-vs-all SGD kernel (issue 8, in progress): lazy (delayed)
proximal updates give the weights of the plain algorithm."""
import numpy as np
import pytest
import scipy.sparse as sp

from xmlkit._ext.elastic_ova import ElasticOVA


def train(X, Y, lazy, logistic, epochs=3, **kw):
    rng = np.random.default_rng(0)
    m = ElasticOVA(X.shape[1], Y.shape[1], kw.get("l1", 0.01), kw.get("l2", 0.05),
                   kw.get("eta0", 0.5), kw.get("decay", 0.01), logistic, lazy,
                   kw.get("adagrad", False))
    for _ in range(epochs):
        m.epoch(X.indptr.astype(np.int64), X.indices, X.data, Y.indptr.astype(np.int64),
                Y.indices, rng.permutation(X.shape[0]).astype(np.int64))
    p, i, v, b = m.weights()
    return sp.csr_matrix((v, i, p), shape=(X.shape[1], Y.shape[1])).toarray(), b, m.nnz


@pytest.mark.parametrize("logistic", [True, False])
@pytest.mark.parametrize("rates", [{"decay": 0.01}, {"decay": 0.0, "eta0": 0.1},
                                   {"adagrad": True, "eta0": 1.0},
                                   {"adagrad": True, "eta0": 1.0, "l2": 0.0}])
def test_lazy_equals_dense(logistic, rates):
    rng = np.random.default_rng(1)
    X = sp.random(300, 60, density=0.08, random_state=2, format="csr", dtype=np.float32)
    Y = sp.csr_matrix((rng.random((300, 7)) < 0.2).astype(np.float32))
    W_lazy, b_lazy, nnz = train(X, Y, True, logistic, **rates)
    W_dense, b_dense, _ = train(X, Y, False, logistic, **rates)
    assert np.abs(W_lazy - W_dense).max() <= 1e-6
    assert np.abs(b_lazy - b_dense).max() <= 1e-6
    assert np.array_equal(W_lazy == 0, W_dense == 0)
    # the l1 part zeroes weights, and the lazy model stores only the others
    assert 0 < nnz == (W_lazy != 0).sum() < W_lazy.size


def test_no_regularisation_is_plain_sgd():
    """With l1 = l2 = 0 one step is w -= eta * x * (sigma(s) - y) from zero."""
    X = sp.csr_matrix(np.array([[2.0, 0.0]], dtype=np.float32))
    Y = sp.csr_matrix(np.array([[1.0, 0.0]], dtype=np.float32))
    W, b, _ = train(X, Y, True, True, epochs=1, l1=0.0, l2=0.0, eta0=0.5, decay=0.0)
    # s = 0 -> r = (0.5 - 1, 0.5) -> w_0 = -0.5 * 2 * r, b = -0.5 * r
    assert W[0] == pytest.approx([0.5, -0.5]) and b == pytest.approx([0.25, -0.25])
