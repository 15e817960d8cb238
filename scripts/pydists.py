"""Documents from Python distributions' metadata: the summary and the
description as the text, the Trove classifiers as the labels, one JSON Lines
document per distribution {"id": name, "text", "labels"}; from the wheels in
the given folders (a local package mirror) and the distributions installed
where this runs. A real multi-label text corpus any Python machine has
(bench_text.py). data_samples/pydists_{train,test}.jsonl.xz were made by
`python scripts/pydists.py data_samples/pydists --wheels /opt/pypi/files
/opt/pypi-more/files --max-chars 1000 --no-installed`, then xz.

    python scripts/pydists.py PREFIX [--wheels DIR ...] [--max-chars N] [--no-installed]

writes PREFIX_train.jsonl and PREFIX_test.jsonl (80 % / 20 %, by a hash of
the name). Distributions without classifiers are left out.
"""
import argparse
import email.parser
import hashlib
import importlib.metadata
import json
import re
import zipfile
from pathlib import Path

#: this machine's local package mirrors (folders of wheels)
WHEELS = ["/opt/pypi/files", "/opt/pypi-more/files"]


def metadata_doc(text, max_chars):
    """(name, text, classifiers) of a METADATA file's text, or None."""
    msg = email.parser.Parser().parsestr(text)
    name = msg.get("Name")
    labels = sorted(set(msg.get_all("Classifier") or []))
    if not name or not labels:
        return None
    body = msg.get_payload() if isinstance(msg.get_payload(), str) else ""
    body = body or msg.get("Description") or ""
    return (re.sub(r"[-_.]+", "-", name).lower(),
            f"{msg.get('Summary') or ''}\n{body[:max_chars]}", labels)


def corpus(wheel_dirs, max_chars, installed=True):
    """name -> (text, labels): the last wheel (by file name) of each
    distribution in wheel_dirs, then (`installed`) the distributions
    installed here that were not seen."""
    docs = {}
    for folder in wheel_dirs:
        for whl in sorted(Path(folder).glob("*.whl")):
            try:
                with zipfile.ZipFile(whl) as z:
                    meta = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
                    if not meta:
                        continue
                    doc = metadata_doc(z.read(meta[0]).decode("utf-8", "replace"), max_chars)
            except (zipfile.BadZipFile, OSError):
                continue
            if doc:
                docs[doc[0]] = doc[1:]
    for dist in importlib.metadata.distributions() if installed else ():
        doc = metadata_doc(dist.read_text("METADATA") or "", max_chars)
        if doc and doc[0] not in docs:
            docs[doc[0]] = doc[1:]
    return docs


def write_split(docs, prefix):
    """PREFIX_train.jsonl and PREFIX_test.jsonl: 80 % / 20 % by a hash of
    the name, in name order. Returns their paths and sizes."""
    parts = {"train": [], "test": []}
    for name in sorted(docs):
        text, labels = docs[name]
        part = "test" if int(hashlib.sha1(name.encode()).hexdigest(), 16) % 5 == 0 else "train"
        parts[part].append(json.dumps({"id": name, "text": text, "labels": labels},
                                      ensure_ascii=False))
    paths = {}
    for part, lines in parts.items():
        paths[part] = Path(f"{prefix}_{part}.jsonl")
        paths[part].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths, {k: len(v) for k, v in parts.items()}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prefix")
    ap.add_argument("--wheels", nargs="*", default=[])
    ap.add_argument("--max-chars", type=int, default=20000,
                    help="characters of each description kept")
    ap.add_argument("--no-installed", action="store_true",
                    help="only the wheels, not the distributions installed here")
    a = ap.parse_args()
    paths, counts = write_split(corpus(a.wheels, a.max_chars, not a.no_installed), a.prefix)
    print(json.dumps({k: str(v) for k, v in paths.items()} | counts))
