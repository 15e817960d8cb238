"""Model-folder fuzzer, run as a script by test_faults.py (a crash shows as
the script's signal, not as pytest's).

    python model_fuzz.py FOLDER TEST_DATA SEED [--resign]

For every array of every .npz file of the model folder, seeded mutations
(an entry changed to -5, to a huge value, to NaN / inf; the array
truncated, given another dtype, removed; the file truncated or deleted) are
written into a copy of the folder; the copy is then loaded and asked for
scores of the test data. Each outcome is printed as one JSON line:

    refused    load or predict raised XmlkitError (the CLI exits 2)
    same       the scores equal the undamaged model's
    different  exit 0 with other scores
    crash      another exception (the CLI would say "internal error")

Without --resign the manifest is left as it was (a damaged folder: every
outcome must be refused or same). With --resign the manifest's records are
rewritten for the mutated files (a crafted folder whose checksums agree:
`different` is then allowed, `crash` never).
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

import xmlkit
from xmlkit import store
from xmlkit.errors import XmlkitError
from xmlkit.io import read_dataset


def mutations(a, rng):
    """(description, new array or None to remove it) for array a."""
    flat = a.reshape(-1)
    if flat.size:
        i = int(rng.integers(flat.size))
        for what, value in (("-5", -5), ("huge", None), ("nan", np.nan), ("inf", np.inf)):
            if a.dtype.kind in "iu" and what in ("nan", "inf"):
                continue
            b = flat.copy()
            if value is None:
                value = np.iinfo(a.dtype).max if a.dtype.kind in "iu" else 3e38
            if a.dtype.kind == "u" and value == -5:
                value = np.iinfo(a.dtype).max - 4
            b[i] = value
            yield f"entry {i} = {what}", b.reshape(a.shape)
        yield "truncated", flat[:-1].copy()
    other = np.float64 if a.dtype.kind in "iu" else np.int64
    yield f"as {np.dtype(other).name}", a.astype(other)
    yield "removed", None


def predict(folder, X):
    model = xmlkit.load_model(folder)
    return model.predict(X, k=5)


def outcome(folder, X, reference):
    try:
        S = predict(folder, X)
    except XmlkitError:
        return "refused"
    except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
        return f"crash {type(exc).__name__}: {exc}"
    same = (S.shape == reference.shape and np.array_equal(S.indptr, reference.indptr)
            and np.array_equal(S.indices, reference.indices)
            and np.array_equal(S.data, reference.data))
    return "same" if same else "different"


def main():
    folder, test, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    resign = "--resign" in sys.argv
    rng = np.random.default_rng(seed)
    X, _ = read_dataset(test)
    reference = predict(folder, X)
    work = Path(tempfile.mkdtemp())
    try:
        for path in sorted(folder.glob("*.npz")):
            arrays = store.load_arrays(folder, path.stem)
            cases = [(key, d, b) for key in sorted(arrays)
                     for d, b in mutations(arrays[key], rng)]
            cases += [(None, "file truncated", None), (None, "file deleted", None)]
            for key, desc, new in cases:
                copy = work / "m"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(folder, copy)
                target = copy / path.name
                if key is None and desc == "file deleted":
                    target.unlink()
                elif key is None:
                    target.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
                else:
                    changed = dict(arrays)
                    if new is None:
                        del changed[key]
                    else:
                        changed[key] = new
                    store.save_arrays(copy, path.stem, changed)
                    if resign:
                        store.record_files(copy, [path.stem])
                print(json.dumps({"file": path.name, "array": key, "mutation": desc,
                                  "outcome": outcome(copy, X, reference)}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
