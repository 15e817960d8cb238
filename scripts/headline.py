"""The README's headline figures, read from the results files (each written
from its benchmark's run records), so that the README states no number by
hand:

    python scripts/headline.py [--out results/headline.md]

FastXML and PfastreXML: accuracy against the C++ tool's seeds and the
side-by-side speed ratios of fastxml.md / pfastrexml.md, the means over
more seeds of seeds.md, the 100k / 1M training ratios of scale.md and the
prediction ratios of predict_scaling.md; Parabel: its man-page accuracy
against the C++ tool's seeds and its side-by-side ratios (man pages, debtags,
100k synthetic points; prediction also on Bibtex and Delicious) of
parabel.md; LdSM, embed and linear: their Bibtex rows; PrunEX: FastXML on
man pages at 0.07 in prunex.md's family table. A
results file or row that is missing is an error (run its make target first).
Below the table, the results files read that measured other library
code than the working tree's (provenance.py), if any.
"""
import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
#: the results files read, in the order first read
READ = []


def tables(name):
    """The markdown tables of results/<name>: a list of row lists, each row a
    dict from the table's header to the cell's text."""
    path = RESULTS / name
    if not path.is_file():
        sys.exit(f"{path}: missing (run make -C scripts {path.stem} first)")
    if name not in READ:
        READ.append(name)
    out, header = [], None
    for line in path.read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            out.append([])
        elif not set(line) <= set("|-: "):
            out[-1].append(dict(zip(header, cells)))
    return out


def find(name, column, **match):
    """The rows of results/<name>'s tables that have `column` and whose cells
    start with the given texts (a key names the header it starts, so data
    matches 'data (mulan split)')."""
    def cell(row, key):
        return next((v for h, v in row.items() if h == key or h.startswith(key + " ")), "")
    rows = [r for t in tables(name) for r in t if column in r and all(
        cell(r, k).startswith(v) for k, v in match.items())]
    if not rows:
        sys.exit(f"results/{name}: no row with {column} and {match}")
    return rows


def ratio(cell):
    """The median ratio of a side-by-side cell '0.65 (0.62–0.66)'."""
    return float(cell.split()[0])


def span(values, unit="×"):
    lo, hi = min(values), max(values)
    return f"{lo:.2f}{unit}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}{unit}"


def rss_ratio(cell):
    """The ratio of a peak-RSS cell '161 / 192, 1.20'."""
    return float(cell.rsplit(",", 1)[1])


def train_ratios(results, sets):
    """The side-by-side rows of `sets` in results/<results> and the span of
    their training ratios."""
    sbs = [r for s in sets for r in find(results, "train ratio (range)", setting=s)]
    return sbs, span([ratio(r["train ratio (range)"]) for r in sbs])


def means(row):
    """A comparison row of benchlib.accuracy_comparison: xmlkit's mean, the
    C++ tool's, and their seeds (its setting ends '(10 / 10 seeds)', the
    C++ tool's count first)."""
    seeds = re.search(r"\((\d+) / \d+ seeds\)", row["setting"]).group(1)
    return row["xmlkit mean (se)"].split()[0], row["C++ mean (se)"].split()[0], seeds


def fastxml():
    acc = find("fastxml.md", "C++ mean (se)", setting="Bibtex", metric="P@1")[0]
    _, train = train_ratios("fastxml.md", ["Bibtex", "Delicious"])
    scale = [find("scale.md", "train ratio (range)", setting=f"synthetic {n}")[0]
             for n in ("100,000", "1,000,000")]
    rss = [rss_ratio(r["train peak RSS MB (C++ / xmlkit, ratio)"]) for r in scale]
    ours, cpp, seeds = means(acc)
    # the same comparison over every seed of seeds.md (its last row of Bibtex P@1: all seeds)
    more = means(find("seeds.md", "C++ mean (se)", setting="Bibtex, seeds", metric="P@1")[-1])
    # prediction: every thread count of predict_scaling.md (this machine's)
    predict = [float(r["time ratio"]) for r in find("predict_scaling.md", "time ratio")]
    return (f"P@1 {ours} (C++ {cpp}), means of {seeds} seeds of each ({more[0]} and {more[1]} "
            f"over {more[2]}); training {train} the C++ tool's "
            f"time (Bibtex, Delicious), {span([ratio(r['train ratio (range)']) for r in scale])} "
            f"on 100k and 1M synthetic points; training peak memory {rss[0]:.2f}× (100k) and "
            f"{rss[1]:.2f}× (1M) the C++ tool's; prediction {span(predict)} there (32 and 16 "
            "trees)")


def pfastrexml():
    row = find("pfastrexml.md", "PSP@1 sd", setting="Bibtex PfastreXML")[0]
    cpp = re.search(r"PSP ([\d.]+)", row["C++ tool"]).group(1)
    sbs, train = train_ratios("pfastrexml.md", ["Bibtex PfastreXML", "Delicious PfastreXML"])
    return (f"PSP@1 {row['PSP@1']} (C++ {cpp}); training {train}, prediction "
            f"{span([ratio(r['predict ratio (range)']) for r in sbs])} the C++ tool's time "
            "(Bibtex, Delicious)")


def parabel():
    acc = find("parabel.md", "C++ mean (se)", setting="manpages Parabel", metric="P@1")[0]
    ours, cpp, seeds = means(acc)
    sbs, train = train_ratios("parabel.md", ["manpages Parabel", "debtags Parabel",
                                             "synthetic 100,000 points"])
    predict = span([ratio(r["predict ratio (range)"]) for r in sbs])
    small = span([ratio(r["predict ratio (range)"]) for s in ("Bibtex", "Delicious")
                  for r in find("parabel.md", "predict ratio (range)", setting=f"{s} Parabel")])
    return (f"P@1 {ours} on man pages (C++ {cpp}, means of {seeds} seeds of each); training "
            f"{train}, prediction {predict} the C++ tool's time (man pages, debtags, 100k "
            f"synthetic points); prediction {small} on Bibtex and Delicious, where Python's "
            "start is about half of the command or more")


def ldsm():
    row = find("ldsm.md", "P@1/3/5", setting="**xmlkit defaults**")[0]
    paper = find("ldsm.md", "P@1/3/5", setting="paper")[0]
    return (f"P@1 {row['P@1/3/5'].split('/')[0]} (paper {paper['P@1/3/5'].split('/')[0]}), "
            f"trees of depth {row['depth'].split()[0]}")


def embed():
    row = find("embed.md", "Hamming (defaults)", data="bibtex")[0]
    lo, hi = row["paper HL"].strip("[]").split(", ")
    return f"Hamming loss {row['Hamming (defaults)']} (paper {lo}–{hi})"


def linear():
    row = find("linear.md", "best one-vs-all baseline", data="bibtex, defaults")[0]
    svc = re.search(r"liblinear L2-SVC ([\d.]+)", row["best one-vs-all baseline"]).group(1)
    return f"P@1 {row['P@1/3/5'].split('/')[0]} (liblinear L2-SVC {svc})"


def prunex():
    rows = find("prunex.md", "ΔP@1", data="manpages_counts", family="fastxml",
                threshold="0.07")
    row = next(r for r in rows if r["family"] == "fastxml")
    paper = [r for r in rows if r["family"] != "fastxml"]      # (--no-rescale)
    removed = float(row["% nnz removed"])
    return (f"man pages at threshold 0.07: {removed:.0f}% of the non-zeros removed, FastXML "
            f"P@1 {row['ΔP@1']} against the unpruned tf-idf rows, training "
            f"{row['× t=0']}× faster"
            + (f" (the paper's rows, not rescaled after pruning: {paper[0]['ΔP@1']})"
               if paper else "")
            + "; every family in [docs/benchmarks.md](docs/benchmarks.md)")


FAMILIES = [
    ("FastXML", "nDCG-splitting trees with L1-logistic separators (Prabhu & Varma, 2014)",
     fastxml),
    ("PfastreXML", "propensity-scored trees and tail-label re-ranking (Jain et al., 2016)",
     pfastrexml),
    ("Parabel", "label trees of 2-means over label centroids, one classifier per node and "
                "label, beam search (Prabhu et al., 2018); Bonsai's wide trees by options",
     parabel),
    ("LdSM", "logarithm-depth streaming multi-label trees (Majzoubi & Choromanska, 2020)",
     ldsm),
    ("embed", "randomized label embedding, random Fourier features, F1 inference "
              "(Karampatziakis & Mineiro)", embed),
    ("linear", "elastic-net one-vs-all by lazy proximal SGD, F1-optimal thresholds "
               "(Lipton & Elkan)", linear),
]


def render():
    out = ["| family | what it is | headline |", "|---|---|---|"]
    out += [f"| {name} | {what} | {figures()} |" for name, what, figures in FAMILIES]
    out.append(f"| PrunEX | data pruning before training (Khandagale & Babbar) | {prunex()} |")
    return "\n".join(out) + "\n"


def older():
    """The line naming the results files read (after render) that measured
    other library code than the working tree's, or ''."""
    sys.path.insert(0, str(HERE))
    from provenance import older_code
    names = [name for name in READ if older_code(Path(name).stem)]
    return (f"\nMeasured on older library code than this commit's: {', '.join(names)} "
            "(`python scripts/provenance.py check` says how).\n" if names else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "headline.md")
    a = ap.parse_args()
    text = render()
    text += older()
    a.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
