"""Elastic-net one-vs-all SGD kernel: lazy (delayed)
proximal updates give the weights of the plain algorithm."""
import numpy as np
import pytest
import scipy.sparse as sp

from xmlkit._ext.elastic_ova import ElasticOVA


def train(X, Y, lazy, loss, epochs=3, **kw):
    rng = np.random.default_rng(0)
    m = ElasticOVA(X.shape[1], Y.shape[1], kw.get("l1", 0.01), kw.get("l2", 0.05),
                   kw.get("eta0", 0.5), kw.get("decay", 0.01), loss, lazy,
                   kw.get("adagrad", False))
    for _ in range(epochs):
        m.epoch(X.indptr.astype(np.int64), X.indices, X.data, Y.indptr.astype(np.int64),
                Y.indices, rng.permutation(X.shape[0]).astype(np.int64))
    p, i, v, b = m.weights()
    return sp.csr_matrix((v, i, p), shape=(X.shape[1], Y.shape[1])).toarray(), b, m.nnz


@pytest.mark.parametrize("loss", ["logistic", "squared", "squared_hinge"])
@pytest.mark.parametrize("rates", [{"decay": 0.01}, {"decay": 0.0, "eta0": 0.1},
                                   {"adagrad": True, "eta0": 1.0},
                                   {"adagrad": True, "eta0": 1.0, "l2": 0.0}])
def test_lazy_equals_dense(loss, rates):
    rng = np.random.default_rng(1)
    X = sp.random(300, 60, density=0.08, random_state=2, format="csr", dtype=np.float32)
    Y = sp.csr_matrix((rng.random((300, 7)) < 0.2).astype(np.float32))
    W_lazy, b_lazy, nnz = train(X, Y, True, loss, **rates)
    W_dense, b_dense, _ = train(X, Y, False, loss, **rates)
    assert np.abs(W_lazy - W_dense).max() <= 1e-6
    assert np.abs(b_lazy - b_dense).max() <= 1e-6
    assert np.array_equal(W_lazy == 0, W_dense == 0)
    # the l1 part zeroes weights, and the lazy model stores only the others
    assert 0 < nnz == (W_lazy != 0).sum() < W_lazy.size


@pytest.mark.parametrize("l1", [0.03, 0.1])
def test_lazy_equals_dense_with_rows_filling_and_emptying(l1):
    """Forty labels, squared hinge, AdaGrad: a step changes only the labels
    with a residual and owes its proximal step to the row's next catch-up;
    rows fill up (stored dense from half the labels) and, as the l1 part
    empties them, go back to sparse at a catch-up (below a quarter). The
    weights are those of the plain algorithm all the same."""
    rng = np.random.default_rng(5)
    X = sp.random(400, 30, density=0.2, random_state=6, format="csr", dtype=np.float32)
    Y = sp.csr_matrix((rng.random((400, 40)) < 0.15).astype(np.float32))
    kw = dict(loss="squared_hinge", epochs=4, l1=l1, l2=1e-3, eta0=1.0, adagrad=True)
    W_lazy, b_lazy, nnz = train(X, Y, True, **kw)
    W_dense, b_dense, _ = train(X, Y, False, **kw)
    assert np.abs(W_lazy - W_dense).max() <= 1e-6
    assert np.abs(b_lazy - b_dense).max() <= 1e-6
    assert np.array_equal(W_lazy == 0, W_dense == 0)
    assert 0 < nnz == (W_lazy != 0).sum() < W_lazy.size


def test_no_regularisation_is_plain_sgd():
    """With l1 = l2 = 0 one step is w -= eta * x * (sigma(s) - y) from zero."""
    X = sp.csr_matrix(np.array([[2.0, 0.0]], dtype=np.float32))
    Y = sp.csr_matrix(np.array([[1.0, 0.0]], dtype=np.float32))
    W, b, _ = train(X, Y, True, "logistic", epochs=1, l1=0.0, l2=0.0, eta0=0.5, decay=0.0)
    # s = 0 -> r = (0.5 - 1, 0.5) -> w_0 = -0.5 * 2 * r, b = -0.5 * r
    assert W[0] == pytest.approx([0.5, -0.5]) and b == pytest.approx([0.25, -0.25])


def test_squared_hinge_touches_only_labels_with_a_residual():
    """Biases start at -1: a negative label (score -1) has no residual and is
    never touched; the positive one has r = s - 1 = -2: w_0 = -0.5 * 2 * -2 = 2,
    b_0 = -1 - 0.5 * -2 = 0."""
    X = sp.csr_matrix(np.array([[2.0, 0.0]], dtype=np.float32))
    Y = sp.csr_matrix(np.array([[1.0, 0.0, 0.0]], dtype=np.float32))
    W, b, nnz = train(X, Y, True, "squared_hinge", epochs=1, l1=0.0, l2=0.0, eta0=0.5,
                      decay=0.0)
    assert W[0] == pytest.approx([2.0, 0.0, 0.0]) and b == pytest.approx([0.0, -1.0, -1.0])
    assert nnz == 1


def test_an_epoch_in_pieces_is_the_same_epoch():
    """The kernel keeps its state between calls: one pass over an order given
    in pieces (as the estimator does, for its progress bar) gives the same
    weights, bit for bit, as the whole order at once."""
    rng = np.random.default_rng(3)
    X = sp.random(200, 40, density=0.1, random_state=4, format="csr", dtype=np.float32)
    Y = sp.csr_matrix((rng.random((200, 9)) < 0.2).astype(np.float32))
    order = rng.permutation(200).astype(np.int64)
    out = []
    for cuts in ([0, 200], [0, 1, 77, 150, 200]):
        m = ElasticOVA(40, 9, 1e-3, 1e-3, 1.0, 0.0, "squared_hinge", True, True)
        for a, b in zip(cuts, cuts[1:]):
            m.epoch(X.indptr.astype(np.int64), X.indices, X.data, Y.indptr.astype(np.int64),
                    Y.indices, order[a:b])
        out.append(m.weights())
    for a, b in zip(*out):
        assert np.array_equal(a, b)
