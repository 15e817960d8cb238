"""Explanations (issue 53): are they faithful, and what do they cost?

    python scripts/bench_explain.py [--out results/explain.md] [--threads 2]
        [--sets bibtex,delicious,yeast,corel5k,pydists] [--n 3] [--rows 2000]
        [--families fastxml,pfastrexml,ldsm,embed,linear] [--runs 5]

Faithfulness, for every family with its defaults on every shared set and the
bundled text sample (pydists: the featurizer's defaults, 80 % of the sample
to train, 20 % to test): for each test row's top label, its features are
removed in three ways and the row scored again:

- the N features that explain the label most (its N largest positive
  contributions from model.explain: the words "for" it);
- N random features of the row (seeded);
- the row's N largest feature values (ties: lower feature).

Reported per way: the mean drop of the label's score (the model's own
score: mean over the rows) and how often the label leaves the row's top 5.
Rows with at most N features are left out (removing N of them removes
every feature, whatever the way).

Cost: whole-command wall time of `xml-predict --explain 5` against plain
`xml-predict -k 5` on Bibtex (FastXML, its default 50 trees), the two
alternated, medians of --runs runs, at -T 1 and -T --threads.
"""
import argparse
import json
import lzma
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from benchlib import WORK, data_file, ensure_data, save  # noqa: E402

FAMILIES = ("fastxml", "pfastrexml", "ldsm", "embed", "linear")
SETS = ("bibtex", "delicious", "yeast", "corel5k", "pydists")
CLASSES = {"fastxml": "FastXML", "pfastrexml": "PfastreXML", "ldsm": "LdSM",
           "embed": "Embed", "linear": "Linear"}


def load_set(name):
    """(X, Y, Xt, Yt) of a shared set, or of the text sample (featurized as
    xml-train --text does, with its defaults)."""
    from xmlkit.io import read_dataset
    if name != "pydists":
        X, Y = read_dataset(ensure_data(data_file(name, "train")))
        Xt, Yt = read_dataset(ensure_data(data_file(name, "test")))
        return sp.csr_matrix(X), sp.csr_matrix(Y), sp.csr_matrix(Xt), sp.csr_matrix(Yt)
    from xmlkit.text import LabelNames, TextFeaturizer
    docs = [json.loads(line) for line in
            lzma.open(ROOT / "data_samples" / "pydists_train.jsonl.xz", "rt")]
    docs = [d for d in docs if d.get("labels")]
    cut = int(0.8 * len(docs))
    names = LabelNames.fit([d["labels"] for d in docs[:cut]])
    featurizer = TextFeaturizer().fit([d["text"] for d in docs[:cut]])
    X = featurizer.transform([d["text"] for d in docs[:cut]])
    Xt = featurizer.transform([d["text"] for d in docs[cut:]])
    Y, _ = names.encode([d["labels"] for d in docs[:cut]])
    Yt, _ = names.encode([d["labels"] for d in docs[cut:]])
    return sp.csr_matrix(X), Y, sp.csr_matrix(Xt), Yt


def without(X, drop):
    """X with the entries where `drop` (a boolean per entry) is set removed."""
    keep = ~drop
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    return sp.csr_matrix((X.data[keep], (rows[keep], X.indices[keep])), shape=X.shape)


def rank_in_row(S, labels):
    """The rank (0 = best) of each row's label among the row's scores of S
    (dense, every label), ties to the lower label as predict orders them."""
    s = S[np.arange(S.shape[0]), labels][:, None]
    lower = np.arange(S.shape[1])[None, :] < labels[:, None]
    return (S > s).sum(axis=1) + ((S == s) & lower).sum(axis=1)


def faithfulness(model, Xt, n, n_rows, seed=0):
    """Per way of removing: (mean score drop, share of rows whose top label
    leaves the top 5, rows) over the first n_rows test rows with more than n
    features."""
    rows = np.flatnonzero(np.diff(Xt.indptr) > n)[:n_rows]
    X = Xt[rows]
    keep = np.diff(model.predict(X, k=1).indptr) > 0
    X = X[keep]
    E = model.explain(X, k=1, n_features=10 ** 6)
    top = np.array([E.row(i)[0][0] for i in range(X.shape[0])])
    rng = np.random.default_rng(seed)
    ways = {}
    # the N largest positive contributions of the top label
    explained = np.zeros(X.nnz, bool)
    for i in range(X.shape[0]):
        feats = [f for f, c in E.row(i)[0][2] if c > 0][:n]
        lo, hi = X.indptr[i], X.indptr[i + 1]
        explained[lo:hi] = np.isin(X.indices[lo:hi], feats)
    ways["explained"] = explained
    rand = np.zeros(X.nnz, bool)
    largest = np.zeros(X.nnz, bool)
    for i in range(X.shape[0]):
        lo, hi = X.indptr[i], X.indptr[i + 1]
        rand[lo + rng.choice(hi - lo, n, replace=False)] = True
        order = np.lexsort((X.indices[lo:hi], -X.data[lo:hi]))[:n]
        largest[lo + order] = True
    ways["random"] = rand
    ways["largest values"] = largest
    before = model.predict(X, k=None).toarray()
    base = before[np.arange(X.shape[0]), top]
    out = {}
    for name, drop in ways.items():
        after = model.predict(without(X, drop), k=None).toarray()
        drops = base - after[np.arange(X.shape[0]), top]
        ranks = rank_in_row(after, top)
        out[name] = (float(drops.mean()), float((ranks >= 5).mean()), X.shape[0])
    out["explained features removed"] = float(explained.sum() / X.shape[0])
    return out


def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def cost(threads, runs):
    """Median whole-command seconds of xml-predict --explain 5 and of plain
    xml-predict -k 5, alternated, on Bibtex with FastXML (50 trees)."""
    work = WORK / "explain"
    work.mkdir(parents=True, exist_ok=True)
    train = ensure_data(data_file("bibtex", "train"))
    test = ensure_data(data_file("bibtex", "test"))
    model = work / "bibtex_fastxml"
    if not (model / "manifest.json").exists():
        subprocess.run(["xml-train", str(train), str(model), "-T", str(threads), "-q"],
                       check=True)
    out = {}
    for T in sorted({1, threads}):
        plain, explain = [], []
        for _ in range(runs):
            plain.append(timed(["xml-predict", str(test), str(work / "s.txt"), str(model),
                                "-k", "5", "-T", str(T), "-q"]))
            explain.append(timed(["xml-predict", str(test), str(work / "e.jsonl"), str(model),
                                  "--explain", "5", "-T", str(T), "-q"]))
        out[T] = (statistics.median(plain), statistics.median(explain))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(HERE / "results" / "explain.md"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    import xmlkit
    lines = ["# Explanations: faithfulness and cost", "",
             f"Removing a row's N = {args.n} features from its top label's row, three ways "
             "(scripts/bench_explain.py's docstring): the N that explain the label most (its "
             "largest positive contributions), N random features of the row, the row's N "
             "largest values. *drop*: mean fall of the label's score; *out of top 5*: share "
             "of rows (percent) whose label leaves the row's top 5. Each family with its "
             f"defaults, seed 0, -T {args.threads}; test rows with more than N features "
             f"(the first {args.rows}).", "",
             "| set | family | rows | explained: drop | out of top 5 | random: drop | "
             "out of top 5 | largest values: drop | out of top 5 | explained ÷ random |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in args.sets.split(","):
        X, Y, Xt, Yt = load_set(name)
        for family in args.families.split(","):
            t0 = time.perf_counter()
            cls = getattr(xmlkit, CLASSES[family])
            kw = {"threads": args.threads} if "threads" in cls.param_defaults() else {}
            model = cls(**kw).fit(X, Y)
            f = faithfulness(model, Xt, args.n, args.rows)
            e, r, v = f["explained"], f["random"], f["largest values"]
            ratio = f"{e[1] / r[1]:.1f}" if r[1] > 0 else "∞" if e[1] > 0 else "–"
            lines.append(f"| {name} | {family} | {e[2]} | {e[0]:.4f} | {100 * e[1]:.1f} | "
                         f"{r[0]:.4f} | {100 * r[1]:.1f} | {v[0]:.4f} | {100 * v[1]:.1f} | "
                         f"{ratio} |")
            print(lines[-1], f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    lines += ["", "## Cost of `--explain 5` (Bibtex, FastXML, 50 trees)", "",
              f"Whole-command wall time, plain `xml-predict -k 5` and `xml-predict --explain "
              f"5` alternated, medians of {args.runs} runs each, this machine.", "",
              "| threads | plain (s) | --explain 5 (s) | ratio |", "|---|---|---|---|"]
    for T, (p, x) in cost(args.threads, args.runs).items():
        lines.append(f"| {T} | {p:.2f} | {x:.2f} | {x / p:.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    save("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
