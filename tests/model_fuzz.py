"""Model-folder fuzzer, run as a script by test_faults.py (a crash shows as
the script's signal, not as pytest's).

    python model_fuzz.py FOLDER TEST_DATA SEED [--resign] [--others F1,F2,...]

For every array of every .npz file of the model folder, seeded mutations
(an entry changed to -5, to a huge value, to NaN / inf; the array
truncated, given another dtype, removed; two arrays swapped) are written
into a copy of the folder, and the file itself is damaged as bytes (cut in
half, cut by a few bytes at its end, grown by bytes appended, a byte
changed in an array's data, in an array's header, in the block table, in
the archive's directory; deleted); the copy is then loaded and asked for
scores of the test data (one row alone and all of them: a mapped file's
blocks are checked as they are read). Each outcome is printed as one JSON
line:

    refused    load or predict raised XmlkitError (the CLI exits 2)
    same       the scores equal the undamaged model's
    different  exit 0 with other scores
    crash      another exception (the CLI would say "internal error")

Then the manifest itself: every field that defines the model (each
parameter, predict parameter, the seed, the dimensions, the data digest,
the family) changed, removed or given another type, and fields that do not
(the format version, the version that wrote it); and each file swapped for
the file of the same name from each folder of --others (the same family
trained with another seed, other parameters or other data). Neither can
be re-signed: both must be refused (or give the same scores).

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


def byte_damage(path):
    """The byte-level damages of a file (see damaged_bytes)."""
    out = ["file truncated", "file cut by 3 bytes", "file grown by 64 bytes",
           "byte changed in data", "byte changed in data", "file deleted"]
    if _mapped(path):
        out += ["byte changed in a header", "byte changed in the block table",
                "byte changed in the directory"]
    return out


def _mapped(path):
    import zipfile
    with zipfile.ZipFile(path) as z:
        return "__blocks__.npy" in z.namelist()


def _spans(data):
    """(start, end) of each member's data, of each member's header, the
    table's data and the directory, of a mapped file's bytes."""
    import io
    import struct
    import zipfile
    z = zipfile.ZipFile(io.BytesIO(data))
    heads, bodies = [], []
    for info in z.infolist():
        n, e = struct.unpack_from("<HH", data, info.header_offset + 26)
        start = info.header_offset + 30 + n + e
        (hlen,) = struct.unpack_from("<H", data, start + 8)      # (.npy version 1)
        heads.append((info.header_offset, start + 10 + hlen))
        bodies.append((info.filename, start + 10 + hlen, start + info.compress_size))
    table = next((b for b in bodies if b[0] == "__blocks__.npy"), None)
    directory = max(i.header_offset + 30 + i.compress_size for i in z.infolist())
    return heads, [b for b in bodies if b[0] != "__blocks__.npy"], table, directory


def damaged_bytes(data, desc, rng):
    """The bytes of a file damaged as `desc` says."""
    data = bytearray(data)
    if desc == "file truncated":
        return bytes(data[: len(data) // 2])
    if desc == "file cut by 3 bytes":
        return bytes(data[:-3])
    if desc == "file grown by 64 bytes":
        return bytes(data) + bytes(64)
    if desc == "byte changed in data":
        where = [(a, b) for _, a, b in _spans(bytes(data))[1] if b > a] if \
            b"__blocks__" in data else []
        where = where or [(0, len(data))]
    elif desc == "byte changed in a header":
        where = _spans(bytes(data))[0]
    elif desc == "byte changed in the block table":
        _, _, table, _ = _spans(bytes(data))
        where = [(table[1], table[2])]
    else:
        where = [(_spans(bytes(data))[3], len(data))]
    a, b = where[int(rng.integers(len(where)))]
    i = int(rng.integers(a, max(a + 1, b)))
    data[i] ^= 0x5A
    return bytes(data)


def value_edits(v):
    """Other values for a manifest field holding v."""
    if isinstance(v, bool):
        return [not v, None, 1]
    if isinstance(v, (int, float)):
        return [v + 1, -v - 1, 1e308, float("nan"), str(v), None]
    if isinstance(v, str):
        return [v + "x", v[:-1], "", 0, None]
    if isinstance(v, dict):
        return [{}, [v], None]
    if v is None:
        return [0, "x"]
    return [None]


def manifest_edits(manifest):
    """(description, edited manifest) of every model-defining field."""
    import copy
    out = []
    for key in ("algorithm", "seed", "n_features", "n_labels", "data"):
        for value in value_edits(manifest.get(key)):
            m = copy.deepcopy(manifest)
            m[key] = value
            out.append((f"{key} = {value!r}", m))
        m = copy.deepcopy(manifest)
        m.pop(key, None)
        out.append((f"{key} removed", m))
    for group in ("params", "predict_params"):
        for key, v in sorted((manifest.get(group) or {}).items()):
            for value in value_edits(v):
                m = copy.deepcopy(manifest)
                m[group][key] = value
                out.append((f"{group}.{key} = {value!r}", m))
            m = copy.deepcopy(manifest)
            del m[group][key]
            out.append((f"{group}.{key} removed", m))
    for key, value in (("format_version", 3), ("format_version", 2), ("xmlkit_version", "0")):
        m = copy.deepcopy(manifest)
        m[key] = value
        out.append((f"{key} = {value!r}", m))
    return out


def predict(folder, X):
    """The scores xml-predict would write: the model's, mapped by the
    folder's calibration when it holds one (xmlkit.calibration)."""
    from xmlkit.models.calibrated import folder_calibration
    model = xmlkit.load_model(folder)
    model.predict(X[:1], k=5)
    S = model.predict(X, k=5, threads=2)
    calibration = folder_calibration(folder)
    return S if calibration is None else calibration.probabilities(S)


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
    others = []
    if "--others" in sys.argv:
        others = [o for o in sys.argv[sys.argv.index("--others") + 1].split(",") if o]
    rng = np.random.default_rng(seed)
    X, _ = read_dataset(test)
    reference = predict(folder, X)
    work = Path(tempfile.mkdtemp())
    try:
        for path in sorted(folder.glob("*.npz")):
            arrays = store.load_arrays(folder, path.stem)
            cases = [(key, d, b) for key in sorted(arrays)
                     for d, b in mutations(arrays[key], rng)]
            names = sorted(arrays)
            if len(names) > 1:          # two arrays swapped (same file, other names)
                a, b = (names[int(i)] for i in rng.choice(len(names), 2, replace=False))
                cases.append(("<swap>", f"{a} and {b} swapped", (a, b)))
            cases += [(None, d, None) for d in byte_damage(path)]
            for key, desc, new in cases:
                copy = work / "m"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(folder, copy)
                target = copy / path.name
                if key is None and desc == "file deleted":
                    target.unlink()
                elif key is None:
                    target.write_bytes(damaged_bytes(path.read_bytes(), desc, rng))
                    if resign:
                        try:
                            store.record_files(copy, [path.stem])
                        except XmlkitError:         # (no record can be made of it)
                            print(json.dumps({"file": path.name, "array": None,
                                              "mutation": desc, "outcome": "refused"}),
                                  flush=True)
                            continue
                elif key == "<swap>":
                    changed = dict(arrays)
                    changed[new[0]], changed[new[1]] = arrays[new[1]], arrays[new[0]]
                    store.save_arrays(copy, path.stem, changed)
                    if resign:
                        store.record_files(copy, [path.stem])
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
        manifest = json.loads((folder / "manifest.json").read_text())
        for desc, edited in manifest_edits(manifest):
            copy = work / "m"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(folder, copy)
            (copy / "manifest.json").write_text(json.dumps(edited))
            print(json.dumps({"file": "manifest.json", "array": None, "mutation": desc,
                              "outcome": outcome(copy, X, reference)}), flush=True)
        for other in others:
            for path in sorted(Path(other).glob("*.npz")):
                if not (folder / path.name).exists():
                    continue
                copy = work / "m"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(folder, copy)
                shutil.copy(path, copy / path.name)
                if resign:
                    store.record_files(copy, [path.stem])
                print(json.dumps({"file": path.name, "array": None,
                                  "mutation": f"swapped for {other}'s",
                                  "outcome": outcome(copy, X, reference)}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
