"""Fuzzer of model files changed while a command uses them (make -C scripts
fuzz runs it for minutes; test_faults.py for a few cases).

    python inuse_fuzz.py WORK SEED SECONDS [KIND]

WORK holds tiny models of every family (WORK/<family>, and WORK/<family>_seed
of another seed) and WORK/test.txt. Each case copies a model, starts
`xml-predict` on it, in a batch (a file of the test rows repeated, to a
file) or a stream (the rows written to its standard input a few at a time,
its scores read from standard output), and at a random moment changes one
of the copy's files as a redeploy or an accident would: the file of the
same name from the other model copied over it in place (cp), the file
truncated to a random size, or random bytes written over a random stretch
(dd conv=notrunc); KIND (cp, truncate or bytes) makes every change of that
kind (a cp whose file the other model lacks: a truncation). Outcomes:

    answered   exit 0 (every row scored; the change came after the reads)
    refused    exit 2 with one line on stderr
    failure    anything else: exit 1 (an internal error), a signal, more
               than one line on exit 2, or no end within TIMEOUT seconds

Prints a JSON line per failure, then a JSON summary {"cases": n, outcome: count}.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent
FAMILIES = ("fastxml", "pfastrexml", "ldsm", "parabel", "embed", "linear")
#: seconds a case may take before it counts as a hang
TIMEOUT = 120
#: times the test rows are repeated in a batch case's input
REPEAT = 40
#: the kinds of change
KINDS = ("cp", "truncate", "bytes")


def change(folder, other, rng, kind=None):
    """Change one of the files of `folder` in place (a change of `kind`,
    else of a kind drawn); returns what was done."""
    files = sorted(folder.glob("*.npz")) + [folder / "manifest.json"]
    f = files[int(rng.integers(len(files)))]
    size = f.stat().st_size
    how = kind or KINDS[int(rng.integers(3))]
    if how == "cp" and (other / f.name).exists():
        with open(other / f.name, "rb") as src, open(f, "r+b") as dst:
            dst.truncate(0)                 # (as cp does: the same inode, rewritten)
            shutil.copyfileobj(src, dst)
    elif how == "truncate" or how == "cp":
        how = "truncate"
        os.truncate(f, int(rng.integers(0, max(1, size))))
    else:
        at = int(rng.integers(0, max(1, size)))
        n = int(rng.integers(1, 4097))
        with open(f, "r+b") as dst:
            dst.seek(at)
            dst.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    return f"{how} {f.name}"


def run_case(work, family, mode, delay, rng, kind=None):
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        model = Path(tmp) / family
        shutil.copytree(work / family, model)
        args = [str(BIN / "xml-predict"), "-", "-", str(model), "-k", "5", "-q"]
        rows = (work / "test.txt").read_text().splitlines()
        d = rows[0].split()[1]
        features = [r.partition(" ")[2] + "\n" for r in rows[1:]] * REPEAT
        if mode == "batch":
            data = Path(tmp) / "in.txt"
            data.write_text(f"{len(features)} {d}\n" + "".join(features))
            args[1:3] = [str(data), str(Path(tmp) / "out.txt")]
            p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
            feeder = None
        else:
            p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)

            def feed():
                try:
                    p.stdin.write(f"? {d}\n")
                    for i in range(0, len(features), 25):
                        p.stdin.write("".join(features[i:i + 25]))
                        p.stdin.flush()
                        time.sleep(0.005)
                    p.stdin.close()
                except (BrokenPipeError, OSError, ValueError):
                    pass
            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
        time.sleep(delay)
        what = change(model, work / f"{family}_seed", rng, kind)
        try:
            p.wait(timeout=TIMEOUT)         # (its stderr: a line or two, never filled)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return what, "failure hang"
        err = p.stderr.read()
        if feeder is not None:
            feeder.join(5)
        code = p.returncode
        if code == 0:
            return what, "answered"
        if code == 2 and err.count("\n") == 1 and "internal error" not in err:
            return what, "refused"
        return what, f"failure exit {code}: {err.strip()[-300:]}"


def main():
    work, seed, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    kind = sys.argv[4] if len(sys.argv) > 4 else None
    if kind not in (None, *KINDS):
        sys.exit(f"KIND: one of {', '.join(KINDS)}")
    rng = np.random.default_rng(seed)
    counts, n = {}, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        family = FAMILIES[int(rng.integers(len(FAMILIES)))]
        mode = ("batch", "stream")[int(rng.integers(2))]
        delay = float(rng.uniform(0, 0.6))
        what, outcome = run_case(work, family, mode, delay, rng, kind)
        key = outcome.split(" ", 1)[0]
        counts[key] = counts.get(key, 0) + 1
        n += 1
        if key == "failure":
            print(json.dumps({"case": n, "family": family, "mode": mode, "delay": delay,
                              "change": what, "outcome": outcome}), flush=True)
    print(json.dumps({"cases": n, **counts}), flush=True)


if __name__ == "__main__":
    main()
