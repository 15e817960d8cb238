"""Parse throughput of xmlkit's XC reader against scikit-learn's svmlight loader.

    python scripts/bench_io.py [--data ../shared/data/delicious/delicious_train.txt.xz]

Both read the same content (the training file of Delicious by default): xmlkit
from the XC file (plain and .xz), scikit-learn from the same lines without the
XC header (``load_svmlight_file(multilabel=True)``; install with
``pip install .[bench]``). Throughput = uncompressed bytes / best wall time of
--repeat runs. For .xz the decompressor alone is timed too, since it bounds
the compressed case.
"""
import argparse
import lzma
import shutil
import tempfile
import time
from pathlib import Path

from xmlkit.io import read_xc

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "data" / "delicious" / "delicious_train.txt.xz"


def best_time(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT, help="XC single-file data set (.xz)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        plain = tmp / "data.txt"
        with lzma.open(args.data) as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        xz = tmp / "data.txt.xz"
        shutil.copy(args.data, xz)
        no_header = tmp / "data.svm"
        with open(plain, "rb") as src, open(no_header, "wb") as dst:
            src.readline()
            shutil.copyfileobj(src, dst)
        size = plain.stat().st_size

        rows = []

        def row(name, seconds):
            rows.append((name, seconds, size / seconds / 1e6))

        row("xmlkit read_xc, plain text", best_time(lambda: read_xc(plain), args.repeat))
        row("xmlkit read_xc, .xz", best_time(lambda: read_xc(xz), args.repeat))
        row("lzma decompression alone (.xz)",
            best_time(lambda: lzma.open(xz).read(), args.repeat))
        try:
            from sklearn.datasets import load_svmlight_file
        except ImportError:
            print("scikit-learn not installed (pip install .[bench]): its row is left out")
        else:
            row("scikit-learn load_svmlight_file(multilabel=True), plain",
                best_time(lambda: load_svmlight_file(str(no_header), multilabel=True,
                                                     zero_based=True), args.repeat))

    print(f"file: {args.data.name} ({size / 1e6:.1f} MB uncompressed), best of {args.repeat}")
    print(f"{'reader':<58}{'seconds':>9}{'MB/s':>9}")
    for name, sec, mbs in rows:
        print(f"{name:<58}{sec:9.3f}{mbs:9.1f}")
    base = {n: s for n, s, _ in rows}
    sk = base.get("scikit-learn load_svmlight_file(multilabel=True), plain")
    if sk:
        print(f"xmlkit plain is {sk / base['xmlkit read_xc, plain text']:.1f}x faster than "
              "scikit-learn on the same content")


if __name__ == "__main__":
    main()
