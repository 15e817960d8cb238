"""One peer's fit and predict in that peer's own virtual environment, for
bench_peers.py: PECOS and LibMultiLabel pin numpy, scipy and a `liblinear`
module that cannot share xmlkit's environment (make_peer_venvs.sh builds
theirs). Needs only numpy, scipy and the peer: no xmlkit.

    python peer_worker.py MODEL DIR THREADS

Reads X.npz, Y.npz (training rows, unit-normalised, and labels) and Xt.npz
(test rows) from DIR (scipy.sparse.save_npz), fits with the peer's defaults,
predicts the 5 best labels of each test row into DIR/top.npy (-1 where a row
gets fewer) and prints one JSON line: fit seconds, peak RSS after fit (MB),
predict seconds, model MB (the peer's saved model), the peer's version.
"""
import json
import resource
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
import scipy.sparse as sp

K = 5


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def size_mb(path):
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def top_of_csr(P):
    """The K largest entries of each row of a sparse score matrix, best first
    (ties to the lower label), -1 where a row has fewer."""
    P = sp.csr_matrix(P)
    top = np.full((P.shape[0], K), -1, dtype=np.int64)
    for i in range(P.shape[0]):
        s, e = P.indptr[i], P.indptr[i + 1]
        order = np.lexsort((P.indices[s:e], -P.data[s:e]))[:K]
        top[i, :len(order)] = P.indices[s:e][order]
    return top


def pecos_xrlinear(X, Y, Xt, out, threads):
    """PECOS XR-Linear with its defaults: PIFA label features, hierarchical
    k-means label tree, XLinearModel (its README's recipe)."""
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel
    X, Y, Xt = (M.astype(np.float32) for M in (X, Y, Xt))
    model = []

    def fit():
        chain = Indexer.gen(LabelEmbeddingFactory.create(Y, X, method="pifa"), threads=threads)
        model.append(XLinearModel.train(X, Y, C=chain, threads=threads))

    def predict():
        return top_of_csr(model[0].predict(Xt, only_topk=K, threads=threads))
    top, *times = timed(fit, predict)
    model[0].save(str(out / "pecos_model"))
    return top, times, size_mb(out / "pecos_model"), version("libpecos")


def libmultilabel_1vsrest(X, Y, Xt, out, threads):
    """LibMultiLabel's linear one-vs-rest with its default liblinear options
    (it uses a thread per physical core itself)."""
    import pickle

    import libmultilabel.linear as linear
    model = []

    def fit():
        model.append(linear.train_1vsrest(Y.astype(np.float64), X, options="", verbose=False))

    def predict():
        scores = np.asarray(linear.predict_values(model[0], Xt))
        return np.argsort(-scores, axis=1, kind="stable")[:, :K]
    top, *times = timed(fit, predict)
    (out / "lml_model.pkl").write_bytes(pickle.dumps(model[0]))
    return top, times, size_mb(out / "lml_model.pkl"), version("libmultilabel")


def timed(fit, predict):
    """Run fit() then predict(): predict's result, fit seconds, peak RSS
    after fit (MB), predict seconds (bench_peers times its in-process
    peers with it too)."""
    t = time.perf_counter()
    fit()
    fit_s, fit_rss = time.perf_counter() - t, rss_mb()
    t = time.perf_counter()
    top = predict()
    return top, fit_s, fit_rss, time.perf_counter() - t


MODELS = {"pecos-xrlinear": pecos_xrlinear, "libmultilabel-1vsrest": libmultilabel_1vsrest}

if __name__ == "__main__":
    model, folder, threads = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    X, Y, Xt = (sp.load_npz(folder / f"{n}.npz").tocsr() for n in ("X", "Y", "Xt"))
    top, (fit_s, fit_rss, predict_s), model_mb, ver = MODELS[model](X, Y, Xt, folder, threads)
    np.save(folder / "top.npy", np.asarray(top, dtype=np.int64))
    print(json.dumps({"train_s": fit_s, "train_rss": fit_rss, "predict_s": predict_s,
                      "model_mb": model_mb, "version": ver}))
