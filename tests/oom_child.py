"""One fit, prediction or explanation of a small model under an address-space
limit (tests/test_faults.py, test_memory_refused_in_a_kernel_*): prints
"MemoryError" if the library raised it (or its own out-of-memory error,
XmlkitError "out of memory: ...", or a thread could not start), else
"OK <digest of the result>"; any other error is raised (exit 1).

usage: oom_child.py FOLDER TRAIN TEST fit|predict|explain ALLOWANCE [PARAMS_JSON]

FOLDER is a model folder of the tiny set (its class and parameters are
used; PARAMS_JSON overrides parameters); ALLOWANCE is the bytes of address
space allowed beyond what the process holds once its data are read and
every module of the library is imported (mapped)."""
import hashlib
import importlib
import json
import os
import pkgutil
import resource
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402
import scipy.linalg.blas  # noqa: E402

import xmlkit  # noqa: E402
from xmlkit.errors import XmlkitError  # noqa: E402
from xmlkit.io import read_dataset  # noqa: E402


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def result(model, phase, X, Y, Xt):
    """The digest of the phase's result with `model`."""
    if phase == "fit":
        model.fit(X, Y)
        phase = "predict"
    if phase == "predict":
        S = model.predict(Xt, k=5)
        return digest(S.indptr, S.indices, S.data)
    E = model.explain(Xt[:10], k=2)
    return digest(E.scores.indptr, E.scores.indices, E.scores.data, E.ptr, E.features,
                  E.contributions)


def main():
    folder, train, test, phase, allowance = sys.argv[1:6]
    params = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    X, Y = read_dataset(train)[:2]
    Xt = read_dataset(test)[0]
    m = xmlkit.load_model(folder)
    if phase == "fit":
        m = type(m)(**{**m.get_params(), **params})
    for module in pkgutil.walk_packages(xmlkit.__path__, "xmlkit."):
        if not module.name.startswith(("xmlkit.cli", "xmlkit.cluster")):
            importlib.import_module(module.name)     # (what the work imports, mapped now)
    a = np.ones((64, 64))
    scipy.linalg.blas.dgemm(1.0, a @ a, a)          # (both BLAS libraries' buffers taken now:
    #                                                  theirs to manage, not xmlkit's kernels)
    size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + int(allowance), resource.RLIM_INFINITY))
    try:
        got = result(m, phase, X, Y, Xt)
    except MemoryError:
        print("MemoryError")
        return
    except (XmlkitError, RuntimeError) as exc:     # (RuntimeError: a thread not started)
        if not str(exc).startswith(("out of memory", "can't start new thread")):
            raise
        print("MemoryError")
        return
    print("OK", got)


if __name__ == "__main__":
    main()
