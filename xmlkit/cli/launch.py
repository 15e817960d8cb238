"""The entry points of the commands: what must be set before numpy is
imported, and the import of the command itself, which loads numpy, scipy
and the compiled kernels.

The BLAS: numpy's (OpenBLAS) starts its own threads, one per core, when
numpy is imported; they spin for a while on cores the command's threads
need, and the order of a BLAS's sums follows its thread count. Every command
gives the BLAS one thread, unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is
set: no command but xml-train calls the BLAS (the embedding's dense
products in prediction are xmlkit's own, summed in one order), and the one
family that trains with it (embed: the label embedding, the ridge system)
then makes the same bytes on any number of cores and at any -T (its own
threads run blocks of the work, each on one BLAS thread).

Memory: a process that cannot get the address space numpy's start takes
(its libraries and its BLAS's buffers) would end inside OpenBLAS, which
gives up with exit 1; one with room for that but not for the command's
modules would get an ImportError before the command's own error handling
exists. Both are the memory running out, not a bug: one line and exit 2, as
for every other out-of-memory (xmlkit.cli.common.run). Nothing here imports
more than the standard library and xmlkit._memory, so that the message can
still be written."""
import gc
import importlib
import os
import sys

#: the error-exit status of bad input, a damaged model and out of memory
#: (xmlkit.cli.common.EXIT_INPUT, not imported: this module loads nothing)
EXIT_INPUT = 2


def _one_blas_thread():
    if not any(v in os.environ for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def no_memory_to_load(exc):
    """Whether `exc` is the system refusing memory: a MemoryError, or an
    ImportError of a compiled module it could not map (not of a module
    missing)."""
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or (isinstance(exc, ImportError) and (
        "failed to map segment" in text or "cannot allocate memory" in text))


#: the address space numpy takes as it is imported, with its BLAS on one
#: thread, and for each further BLAS thread (Linux x86-64, numpy 2: 84 and
#: 40 MiB), with some to spare
NUMPY_START_BYTES = 96 << 20
BLAS_THREAD_BYTES = 48 << 20


def _no_room_to_start():
    """The message when this process cannot get the memory numpy's start
    takes (xmlkit._memory.available_bytes), else None."""
    from xmlkit._memory import available_bytes
    try:
        threads = int(os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
                      or os.cpu_count() or 1)
    except ValueError:
        threads = os.cpu_count() or 1
    need = NUMPY_START_BYTES + BLAS_THREAD_BYTES * (max(1, threads) - 1)
    have = available_bytes()
    if have is None or have >= need:
        return None
    return (f"out of memory (starting the command takes about {need >> 20} MiB, more than the "
            f"{have >> 20} MiB this process can get)")


def _launch(module, prog):
    _one_blas_thread()
    message = _no_room_to_start()
    if message is None:
        gc.disable()            # (the imports make objects by the hundred thousand and free
        try:                    # few: a collection as they go finds nothing to free)
            main = importlib.import_module(module).main
        except (ImportError, MemoryError) as exc:
            if not no_memory_to_load(exc) or os.environ.get("XMLKIT_DEBUG"):
                raise
            message = ("out of memory (the command's modules need more memory than this "
                       "process can get)")
        finally:
            gc.freeze()         # (what they made lives as long as the process: left out of
            gc.enable()         # every later collection)
    if message is not None:
        sys.stderr.write(f"{prog}: error: {message}\n")
        sys.exit(EXIT_INPUT)
    main()


def train():
    _launch("xmlkit.cli.train", "xml-train")


def predict():
    _launch("xmlkit.cli.predict", "xml-predict")


def prune():
    _launch("xmlkit.cli.prune", "xml-prune")


def evaluate():
    _launch("xmlkit.cli.eval", "xml-eval")


def info():
    _launch("xmlkit.cli.info", "xml-info")


def calibrate():
    _launch("xmlkit.cli.calibrate", "xml-calibrate")


def text():
    _launch("xmlkit.cli.text", "xml-text")
