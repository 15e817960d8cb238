"""The entry points of xml-predict and xml-train, which set what must be
set before numpy is imported. numpy's BLAS (OpenBLAS) starts its own threads, one per core,
when numpy is imported, and they spin for a while on cores the command's
threads need. The tree families predict without the BLAS: for a model folder of
theirs (an xmlkit folder whose manifest names one, or a C++ tool's folder),
the BLAS is given one thread, unless OPENBLAS_NUM_THREADS or
OMP_NUM_THREADS is set. The array models' products keep the BLAS as it is,
so that their scores stay those of any run (the BLAS's thread count
decides the order of its sums). xml-train does the same for the families
that train without the BLAS, named by --algorithm (or xml-train's default)."""
import json
import os
import sys

#: families whose prediction makes no BLAS call
NO_BLAS = ("fastxml", "pfastrexml", "parabel", "ldsm")
#: families whose training makes none
NO_BLAS_TRAIN = ("fastxml", "pfastrexml", "parabel")
#: xml-train's family when --algorithm is not given (xmlkit.cli.train's
#: DEFAULT_ALGORITHM, not imported here: it imports numpy)
TRAIN_DEFAULT = "fastxml"


def forest_folder(args):
    """Whether one of the arguments is a model folder of a family that
    predicts without the BLAS (a guess that only decides the BLAS's threads:
    the command reads its arguments itself)."""
    for a in args:
        if not os.path.isdir(a):
            continue
        try:
            with open(os.path.join(a, "manifest.json"), "rb") as f:
                return json.load(f).get("algorithm") in NO_BLAS
        except (OSError, ValueError, AttributeError, RecursionError):
            if os.path.isfile(os.path.join(a, "param")):
                return True                     # (a C++ FastXML / PfastreXML folder)
    return False


def train_algorithm(args):
    """The family an xml-train command line names with --algorithm (the last
    one given, as click takes it), else xml-train's default."""
    from xmlkit.cli.common import given_algorithms     # (no numpy there)
    return (given_algorithms(args) or [TRAIN_DEFAULT])[-1]


def _one_blas_thread():
    if not any(v in os.environ for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def predict():
    if forest_folder(sys.argv[1:]):
        _one_blas_thread()
    from xmlkit.cli.predict import main
    main()


def train():
    if train_algorithm(sys.argv[1:]) in NO_BLAS_TRAIN:
        _one_blas_thread()
    from xmlkit.cli.train import main
    main()
