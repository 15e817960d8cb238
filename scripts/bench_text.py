"""Text in, names out on a real corpus: the metadata of Python distributions
(the wheels of the machine's local package mirrors, plus the distributions
installed where this script runs): summary and description as the text, the
Trove classifiers as the labels. Everything runs through the commands, as a
user runs them: xml-text, xml-train --text, xml-predict --text --names,
xml-eval --text.

    python scripts/bench_text.py [--out results/text.md]
                                 [--wheels /opt/pypi/files /opt/pypi-more/files]

Reports: P@1/3/5 and PSP@1/3/5 of FastXML and linear (their defaults) for the
featurizer's defaults and alternatives (unigrams, plain tf, min_df 1, fewer
terms); featurizing throughput (MB of raw text per second, one core) on the
corpus and on 10,000 synthetic documents; xml-predict --text against
xml-text + xml-predict on the test documents; that a second xml-text run (a
new process) writes the same bytes; and the named predictions of a few test
documents. The corpus is written to work/text/ (train 80 % / test 20 %, by a
hash of the distribution's name).
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pydists

HERE = Path(__file__).resolve().parent
WORK = HERE / "work" / "text"
SETTINGS = [("defaults", []), ("unigrams (--ngram-max 1)", ["--ngram-max", "1"]),
            ("plain tf (--no-sublinear-tf)", ["--no-sublinear-tf"]),
            ("every term (--min-df 1)", ["--min-df", "1"]),
            ("10,000 terms (--max-features 10000)", ["--max-features", "10000"])]
FAMILIES = [("fastxml", ["-T", "2"]), ("linear", ["-T", "2"])]
MAX_TEXT = 20000          # characters of a description kept (some embed whole manuals)


def sh(*args):
    """Run a command; its wall seconds and stdout (a failure stops the script)."""
    t = time.perf_counter()
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))} failed: {r.stderr.strip()}")
    return time.perf_counter() - t, r.stdout


def accuracy(paths):
    rows = []
    for label, opts in SETTINGS:
        for family, fam_opts in FAMILIES:
            tag = f"{family}_{len(rows)}"
            model, pred = WORK / f"{tag}.model", WORK / f"{tag}.pred.jsonl"
            sh("rm", "-rf", model)
            train_s, _ = sh("xml-train", "--text", paths["train"], model, "--algorithm", family,
                            *fam_opts, *opts, "-q")
            sh("xml-predict", "--text", paths["test"], pred, model, "--names", "-k", "5", "-q")
            _, out = sh("xml-eval", "--text", pred, paths["test"], "--train-labels",
                        paths["train"], "--json", "-q")
            m = json.loads(out)["metrics"]
            n_terms = json.loads(sh("xml-info", model, "--json")[1]).get("n_features")
            rows.append({"setting": label, "family": family, "train_s": train_s,
                         "terms": n_terms, **{k: m[k] for k in m}})
    return rows


def synthetic_texts(n, seed=0):
    """n documents of Zipf-distributed words over a 50,000-word vocabulary,
    10 to 300 words each (a stand-in for a larger corpus)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i:05d}" for i in range(50000)])
    ranks = np.minimum(rng.zipf(1.2, size=n * 300), 50000) - 1
    lengths = rng.integers(10, 300, size=n)
    out, at = [], 0
    for m in lengths:
        out.append(" ".join(words[ranks[at:at + m]]))
        at += m
    return out


def throughput(paths):
    """MB of raw text per second featurized in this process (one core):
    fitting, then transforming, on the corpus and on synthetic documents."""
    from xmlkit.text import TextFeaturizer, read_documents
    res = []
    texts = read_documents(paths["train"]).texts + read_documents(paths["test"]).texts
    for name, t in (("Python distributions", texts),
                    ("synthetic, 10,000 documents", synthetic_texts(10000))):
        mb = sum(len(x.encode("utf-8")) for x in t) / 1e6
        f = TextFeaturizer()
        start = time.perf_counter()
        f.fit(t)
        fit_s = time.perf_counter() - start
        start = time.perf_counter()
        f.transform(t)
        tr_s = time.perf_counter() - start
        res.append({"corpus": name, "documents": len(t), "MB": mb, "fit_s": fit_s,
                    "transform_s": tr_s, "terms": f.n_features})
    return res


def pipeline_times(paths, rounds=3):
    """xml-predict --text against xml-text (apply) + xml-predict, FastXML
    defaults, alternating; also: the same bytes from a second xml-text run."""
    model = WORK / "fastxml_0.model"
    feat, xc_train = WORK / "feat.npz", WORK / "pydists_train.txt"
    sh("xml-text", paths["train"], xc_train, feat, "--fit", "-q")
    xc_test, xc_test2 = WORK / "pydists_test.txt", WORK / "pydists_test_again.txt"
    direct, split = [], []
    for _ in range(rounds):
        direct.append(sh("xml-predict", "--text", paths["test"], WORK / "direct.jsonl", model,
                         "--names", "-k", "5", "-q")[0])
        a = sh("xml-text", paths["test"], xc_test, feat, "-q")[0]
        b = sh("xml-predict", xc_test, WORK / "split.txt", model, "-k", "5", "-q")[0]
        split.append(a + b)
    sh("xml-text", paths["test"], xc_test2, feat, "-q")
    feat2 = WORK / "feat_again.npz"
    sh("xml-text", paths["train"], WORK / "train_again.txt", feat2, "--fit", "-q")
    return {"direct": sorted(direct)[rounds // 2], "split": sorted(split)[rounds // 2],
            "same_xc_bytes": xc_test.read_bytes() == xc_test2.read_bytes(),
            "same_featurizer_bytes": feat.read_bytes() == feat2.read_bytes()}


def examples(paths, n=4):
    from xmlkit.text import read_documents
    docs = read_documents(paths["test"])
    preds = [json.loads(line) for line in
             (WORK / "direct.jsonl").read_text(encoding="utf-8").splitlines()]
    picked = []
    for doc_id, labels, p in zip(docs.ids, docs.labels, preds):
        if len(picked) == n:
            break
        if 3 <= len(labels) <= 8:
            picked.append((doc_id, labels, p["labels"]))
    return picked


def render(counts, rows, speed, pipe, shown):
    out = [f"Python distributions' metadata as documents (summary + description, at most "
           f"{MAX_TEXT} characters of it; Trove classifiers as labels): "
           f"{counts['train']} training and {counts['test']} test documents (split by a hash "
           "of the name). Each row: `xml-train --text` with the family's defaults and the "
           "featurizer setting, `xml-predict --text --names -k 5`, `xml-eval --text` "
           "(propensities from the training documents).", "",
           "| featurizer | family | terms | train s | P@1 | P@3 | P@5 | PSP@1 | PSP@3 | PSP@5 |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['setting']} | {r['family']} | {r['terms']} | {r['train_s']:.1f} | "
                   + " | ".join(f"{r[k]:.2f}" for k in
                                ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")) + " |")
    out += ["", "Featurizing (TfidfVectorizer's fit, then xmlkit's transform: scikit-learn's "
            "tokenizer and counts, weighting and unit rows), one core, in one process:", "",
            "| corpus | documents | MB of text | fit s | transform s | transform MB/s | terms |",
            "|---|---|---|---|---|---|---|"]
    for s in speed:
        out.append(f"| {s['corpus']} | {s['documents']} | {s['MB']:.1f} | {s['fit_s']:.2f} | "
                   f"{s['transform_s']:.2f} | {s['MB'] / s['transform_s']:.1f} | {s['terms']} |")
    out += ["", f"Predicting from text, FastXML defaults, test documents (median of 3 "
            f"alternating rounds, whole commands): `xml-predict --text --names` "
            f"{pipe['direct']:.2f} s; `xml-text` + `xml-predict` {pipe['split']:.2f} s (ratio "
            f"{pipe['direct'] / pipe['split']:.2f}). A second `xml-text` run (a new process) "
            f"wrote the same bytes: {'yes' if pipe['same_xc_bytes'] else 'NO'} (test file), "
            f"{'yes' if pipe['same_featurizer_bytes'] else 'NO'} (the featurizer refitted).",
            "", "Named predictions (FastXML defaults, the first test documents with 3 to 8 "
            "classifiers; ✓ marks a true one):", ""]
    for doc_id, labels, pred in shown:
        truth = set(labels)
        out.append(f"- `{doc_id}`: " + "; ".join(
            f"{n}{' ✓' if n in truth else ''}" for n in pred))
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "results" / "text.md"))
    ap.add_argument("--wheels", nargs="*", default=pydists.WHEELS)
    a = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    paths, counts = pydists.write_split(pydists.corpus(a.wheels, MAX_TEXT), WORK / "pydists")
    rows = accuracy(paths)
    speed = throughput(paths)
    pipe = pipeline_times(paths)
    text = render(counts, rows, speed, pipe, examples(paths))
    Path(a.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
