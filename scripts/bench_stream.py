"""Peak memory of xml-predict against the number of points (it streams).

    python scripts/bench_stream.py [--rows 100000 1000000 10000000] [--out results/stream.md]

A small model (FastXML, 3 trees, trained on the bundled Bibtex sample) scores
feature files of 100k, 1M and 10M rows, made on the fly in work/stream/ from
the Bibtex test rows (each cut to its first 8 features so that 10M rows stay
near 0.6 GB of text) and removed afterwards; the score files (-k 5) are
written to work/stream/ and removed too. Reported per size: wall time, peak
RSS of the command (VmHWM, sampled), the file sizes. Memory should be flat
from 1M to 10M rows: rows are read, scored and written in pieces.
"""
import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

import benchlib
from xmlkit.io import format_rows, read_dataset

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent / "data_samples"


def make_features(path, n_rows, source, keep=8):
    """`path`: a feature file 'N D' of n_rows rows cycling through `source`'s
    rows, each cut to its first `keep` entries."""
    src = source.tocsr()
    counts = np.minimum(np.diff(src.indptr), keep)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    starts = np.repeat(src.indptr[:-1], counts)
    take = starts + np.arange(len(starts)) - np.repeat(ptr[:-1], counts)
    idx, val = src.indices[take].astype(np.int32), src.data[take].astype(np.float32)
    cycle = format_rows(ptr, idx, val, None, None, 0, len(counts), False, 6)
    lines = cycle.split(b"\n")[:-1]
    with open(path, "wb") as out:
        out.write(f"{n_rows} {src.shape[1]}\n".encode())
        for _ in range(n_rows // len(lines)):
            out.write(cycle)
        rest = n_rows % len(lines)
        if rest:
            out.write(b"\n".join(lines[:rest]) + b"\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "stream.md")
    ap.add_argument("--work", type=Path, default=HERE / "work" / "stream")
    args = ap.parse_args()
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    model = work / "model"
    benchlib.run_rss([benchlib.BIN / "xml-train", SAMPLES / "bibtex_train.txt.xz", model,
                      "-t", "3", "-q"])
    Xt, _ = read_dataset(SAMPLES / "bibtex_test.txt.xz")
    rows = []
    for n in args.rows:
        feats, scores = work / f"x_{n}.txt", work / f"s_{n}.txt"
        make_features(feats, n, Xt)
        r = benchlib.run_rss([benchlib.BIN / "xml-predict", feats, scores, model, "-k", "5",
                              "-q"])
        rows.append((n, r["wall"], r["hwm_mb"], feats.stat().st_size / 1e6,
                     scores.stat().st_size / 1e6))
        print(f"{n} rows: {r['wall']:.1f} s, peak RSS {r['hwm_mb']:.0f} MB", file=sys.stderr)
        feats.unlink()
        scores.unlink()
    shutil.rmtree(work, ignore_errors=True)
    lines = ["xml-predict peak memory against the number of points (FastXML, 3 trees on the "
             "Bibtex sample; features: Bibtex test rows cut to 8 entries, cycled; `-k 5`). "
             "Peak RSS: VmHWM of the command. Made by `python scripts/bench_stream.py`.", "",
             "| rows | features file MB | scores file MB | wall s | peak RSS MB |",
             "|---|---|---|---|---|"]
    for n, wall, hwm, fmb, smb in rows:
        lines.append(f"| {n:,} | {fmb:.0f} | {smb:.0f} | {wall:.1f} | {hwm:.0f} |")
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        lines += ["", f"From {a[0]:,} to {b[0]:,} rows peak RSS changes by "
                      f"{100 * (b[2] - a[2]) / a[2]:+.1f}%."]
    benchlib.save("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
