"""The entry point of xml-predict, which sets what must be set before numpy
is imported: numpy's BLAS (OpenBLAS) starts its own threads, one per core,
when numpy is imported, and they spin for a while on cores the command's
threads need (a tenth of a -T 1 run's CPU time on the 100k-point set, by
perf). So the BLAS gets the command's -T threads (unless
OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is set): the forests use no BLAS,
the array models' products use the threads they were given."""
import os
import sys


def threads_asked(args):
    """The value of -T / --threads in the arguments `args` (1 when absent,
    None when it is not a whole number: the command then says so)."""
    value = "1"
    for i, a in enumerate(args):
        if a in ("-T", "--threads") and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--threads="):
            value = a.split("=", 1)[1]
        elif a.startswith("-T") and len(a) > 2 and not a.startswith("--"):
            value = a[2:]
    return value if value.isdigit() and int(value) > 0 else None


def predict():
    threads = threads_asked(sys.argv[1:])
    if threads and not any(v in os.environ for v in ("OPENBLAS_NUM_THREADS",
                                                      "OMP_NUM_THREADS")):
        os.environ["OPENBLAS_NUM_THREADS"] = threads
    from xmlkit.cli.predict import main
    main()
