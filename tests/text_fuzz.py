"""Text-input fuzzer, run as a script by test_trust.py (a crash shows as
the script's signal or exit code, not as pytest's).

    python text_fuzz.py WORK_FOLDER SEED SECONDS

Until SECONDS have passed, seeded mutations of valid document files (JSON
Lines and TSV) and of named-prediction files are written to WORK_FOLDER
and read the ways the commands read them: documents fitted into a
featurizer (xml-text --fit, xml-train --text), transformed by it, their
predictions written as names (xml-predict --text --names) and read back
(xml-eval --text). The mutations: bytes flipped, inserted or cut; lines
cut or repeated; a byte-order mark, CRs, NULs, invalid UTF-8; and the
JSON classes no reader may let through: nesting deeper than the parser's
stack, integers of thousands of digits, lone surrogate escapes in ids,
texts, label names and keys, numbers beyond a float, NaN and Infinity,
values of the wrong type. Each outcome is printed as one JSON line:

    ok         read (a valid file, or one whose damage is still valid)
    refused    an XmlkitError (the commands exit 2 with its line)
    crash      any other exception (the commands would exit 1)

The script ends with a summary line {"cases": n, "crash": n, ...}.
"""
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from xmlkit.errors import XmlkitError

WORDS = ["numpy", "array", "fast", "web", "server", "tables", "plot", "parser", "ünïcödé",
         "日本語", "x", "emoji😀", "tab\tinside", "quote\"d"]
LABELS = ["Topic :: Science", "License :: MIT", "OS :: POSIX", "Framework :: Django", "ü"]


def document(rng, i):
    text = " ".join(rng.choice(WORDS, int(rng.integers(1, 12))).tolist())
    labels = sorted(set(rng.choice(LABELS, int(rng.integers(1, 4))).tolist()))
    return {"id": i, "text": text, "labels": labels}


def jsonl(docs):
    return "".join(json.dumps(d, ensure_ascii=bool(i % 2)) + "\n"
                   for i, d in enumerate(docs)).encode()


def tsv(docs):
    return "".join(",".join(d["labels"]) + "\t" + d["text"].replace("\t", " ") + "\n"
                   for d in docs).encode()


def named(docs, rng):
    return "".join(json.dumps({"id": d["id"], "labels": d["labels"],
                               "scores": sorted(rng.random(len(d["labels"])).round(6)
                                                .tolist(), reverse=True)}) + "\n"
                   for d in docs).encode()


#: JSON values no reader may let through as they are
HOSTILE = [
    "[" * 200000 + "]" * 200000,
    "{\"a\":" * 50000 + "1" + "}" * 50000,
    "9" * 5000, "-" + "9" * 4400, "1" + "0" * 400, "1e999", "-1e999", "NaN", "Infinity",
    "\"\\ud800\"", "\"a\\udfffb\"", "\"\\ud800\\udc00\"", "\"\\u0000\"",
    "\"" + "x" * 100000 + "\"", "null", "true", "[]", "{}", "[1, \"a\"]", "-0", "0.0e0",
    "123456789012345678901234567890",
]


def hostile_line(rng, kind):
    """A document or prediction line with one field replaced by a hostile value."""
    value = HOSTILE[int(rng.integers(len(HOSTILE)))]
    if kind == "docs":
        fields = {"id": "1", "text": "\"numpy array\"", "labels": "[\"a\"]"}
    else:
        fields = {"id": "1", "labels": "[\"a\"]", "scores": "[0.5]"}
    key = list(fields)[int(rng.integers(len(fields)))]
    where = int(rng.integers(3))
    if where == 0:
        fields[key] = value
    elif where == 1:
        fields[key] = f"[{value}]"
    else:
        fields["\\udc00" if rng.random() < 0.5 else value.strip("\"")[:20]] = value
    return ("{" + ", ".join(f"\"{k}\": {v}" for k, v in fields.items()) + "}\n").encode()


def mutate(data, rng):
    """`data` damaged by one to three byte-level mutations."""
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        op = int(rng.integers(9))
        i = int(rng.integers(len(b) + 1)) if b else 0
        if op == 0 and b:
            b[min(i, len(b) - 1)] ^= 1 << int(rng.integers(8))
        elif op == 1:
            b[i:i] = bytes(rng.integers(0, 256, int(rng.integers(1, 8)), dtype=np.uint8))
        elif op == 2:
            del b[i:i + int(rng.integers(1, 40))]
        elif op == 3:
            b[0:0] = b"\xef\xbb\xbf"
        elif op == 4:
            b = bytearray(bytes(b).replace(b"\n", b"\r\n"))
        elif op == 5:
            b[i:i] = rng.choice([b"\x00", b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\r", b"\t",
                                 b"\"", b"\\", b"\\u", b"\\ud83d", b"{", b"]", b","])
        elif op == 6:
            lines = bytes(b).split(b"\n")
            k = int(rng.integers(len(lines)))
            lines.insert(k, lines[k] * int(rng.integers(2, 4)))
            b = bytearray(b"\n".join(lines))
        elif op == 7:
            b = b[: int(rng.integers(len(b) + 1))]
        else:
            b[i:i] = b"\n"
    return bytes(b)


def run_case(work, kind, data, fmt):
    """Read `data` as the commands do; 'ok', 'refused' or 'crash ...'."""
    from xmlkit.text import (fit_documents, named_matrices, names_writer, read_documents,
                             read_named_predictions)
    path = work / ("case.tsv" if fmt == "tsv" else "case.jsonl")
    path.write_bytes(data)
    try:
        if kind == "docs":
            docs = read_documents(path, fmt, ",", need_labels=True)
            featurizer, labels = fit_documents(docs, path, ngram_max=2, min_df=1,
                                               max_features=1000, sublinear_tf=True)
            X = featurizer.transform(docs.texts)
            Y, _ = labels.encode(docs.labels)
            out = work / "names.jsonl"
            with names_writer(out, labels) as write:
                write(docs.ids, Y.astype(np.float64) * 0.5 + X[:, :Y.shape[1]]
                      if X.shape[1] >= Y.shape[1] else Y)
            read_named_predictions(out)
        else:
            # read back, then evaluated against documents of the same ids
            ids, rows = read_named_predictions(path)
            truth = work / "truth.jsonl"
            truth.write_text("".join(json.dumps({"id": i, "text": "numpy", "labels": labels})
                                     + "\n" for i, (labels, _) in zip(ids, rows)
                                     if labels))
            if all(labels for labels, _ in rows):
                named_matrices([path], truth)
        return "ok"
    except XmlkitError:
        return "refused"
    except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
        return f"crash {type(exc).__name__}: {exc}"[:300] + " | " + \
            traceback.format_exc().strip().splitlines()[-3][:200]


def main():
    work, seed, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    counts = {}
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        docs = [document(rng, i) for i in range(int(rng.integers(1, 8)))]
        kind = "docs" if rng.random() < 0.7 else "named"
        fmt = "tsv" if kind == "docs" and rng.random() < 0.35 else "jsonl"
        data = (tsv(docs) if fmt == "tsv" else jsonl(docs)) if kind == "docs" else \
            named(docs, rng)
        how = int(rng.integers(3))
        if how == 0:
            data = mutate(data, rng)
        elif how == 1 and fmt == "jsonl":
            lines = data.splitlines(keepends=True)
            lines.insert(int(rng.integers(len(lines) + 1)), hostile_line(rng, kind))
            data = b"".join(lines)
            if rng.random() < 0.3:
                data = mutate(data, rng)
        result = run_case(work, kind, data, fmt)
        key = result.split(" ", 1)[0]
        counts[key] = counts.get(key, 0) + 1
        n += 1
        if key == "crash":
            print(json.dumps({"case": n, "kind": kind, "format": fmt, "outcome": result,
                              "input": data[:2000].decode("utf-8", "backslashreplace")}),
                  flush=True)
    print(json.dumps({"cases": n, **counts}), flush=True)


if __name__ == "__main__":
    main()
