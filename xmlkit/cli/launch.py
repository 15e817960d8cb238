"""The entry points of xml-predict and xml-train, which set what must be
set before numpy is imported. numpy's BLAS (OpenBLAS) starts its own threads,
one per core, when numpy is imported; they spin for a while on cores the
command's threads need, and the order of a BLAS's sums follows its thread
count. Both commands give the BLAS one thread, unless OPENBLAS_NUM_THREADS
or OMP_NUM_THREADS is set: no family's prediction calls the BLAS (the
embedding's dense products are xmlkit's own, summed in one order), and the
one family that trains with it (embed: the label embedding, the ridge
system) then makes the same bytes on any number of cores and at any -T
(its own threads run blocks of the work, each on one BLAS thread)."""
import os


def _one_blas_thread():
    if not any(v in os.environ for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def predict():
    _one_blas_thread()
    from xmlkit.cli.predict import main
    main()


def train():
    _one_blas_thread()
    from xmlkit.cli.train import main
    main()
