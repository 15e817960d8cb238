"""The tail picture for Bibtex: FastXML against PfastreXML, by label frequency.

    python scripts/bench_tail.py [--out results/tail.md] [--plot results/tail_bibtex.png]

Trains both with their defaults (50 trees, -T 2) on the XC Bibtex split of
../shared/data, scores the test set, and runs
`xml-eval FASTXML_SCORES TEST --train-labels TRAIN --compare PFASTREXML_SCORES
--plot PNG --json`: ten bins of labels by training frequency (rarest first),
per bin its part of P@5 and PSP@5 for each model (needs matplotlib: .[plot]).
The table is the --json numbers behind the bars.
"""
import argparse
import json
from pathlib import Path

import benchlib

HERE = Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "tail.md")
    ap.add_argument("--plot", type=Path, default=HERE / "results" / "tail_bibtex.png")
    ap.add_argument("--work", type=Path, default=HERE / "work" / "tail")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    train, test = benchlib.DATA / "bibtex" / "bibtex_train.txt.xz", \
        benchlib.DATA / "bibtex" / "bibtex_test.txt.xz"
    scores = {}
    for algo in ("fastxml", "pfastrexml"):
        model, scores[algo] = a.work / f"{algo}.model", a.work / f"{algo}.scores.txt"
        benchlib.run_rss([benchlib.BIN / "xml-train", train, model, "--algorithm", algo,
                          "-T", "2", "-q"])
        benchlib.run_rss([benchlib.BIN / "xml-predict", test, scores[algo], model, "-q"])
    r = benchlib.run_rss([benchlib.BIN / "xml-eval", scores["fastxml"], test, "--train-labels",
                          train, "--compare", scores["pfastrexml"], "--plot", a.plot,
                          "--json", "-q"])
    out = json.loads(r["stdout"])
    tail = out["tail_bins"]
    k = tail["k"]
    f, p = (tail["scores"][str(scores[x])] for x in ("fastxml", "pfastrexml"))
    lines = [f"FastXML and PfastreXML (defaults, 50 trees) on Bibtex: the labels in ten bins by "
             f"training frequency, rarest first; per bin its part of P@{k} and PSP@{k} in "
             f"points (they add up to P@{k} and PSP@{k}). Made by `python scripts/"
             "bench_tail.py` (`xml-eval --train-labels ... --compare ... --plot ... --json`).",
             "", f"![part of P@{k} and PSP@{k} per frequency bin]"
             f"(../scripts/results/{a.plot.name})", "",
             f"| bin | labels | training frequency | FastXML P@{k} | PfastreXML P@{k} | "
             f"FastXML PSP@{k} | PfastreXML PSP@{k} |", "|---|---|---|---|---|---|---|"]
    for i, b in enumerate(tail["bins"]):
        lines.append(f"| {i + 1} | {b['labels']} | {b['min_freq']}–{b['max_freq']} | "
                     f"{f[i]['P@k']:.2f} | {p[i]['P@k']:.2f} | {f[i]['PSP@k']:.2f} | "
                     f"{p[i]['PSP@k']:.2f} |")
    lines.append(f"| all | {sum(b['labels'] for b in tail['bins'])} | | "
                 f"{sum(x['P@k'] for x in f):.2f} | {sum(x['P@k'] for x in p):.2f} | "
                 f"{sum(x['PSP@k'] for x in f):.2f} | {sum(x['PSP@k'] for x in p):.2f} |")
    benchlib.save("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    main()
