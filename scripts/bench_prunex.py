"""PrunEX sweep: prune the training set at several thresholds (the test set
with the training idf), train FastXML on each, and report the share of
non-zeros removed, P@k, nDCG@k, training time and model size; then, on the
long documents of man pages (raw counts), every family at a few thresholds.

    python scripts/bench_prunex.py [--data ../shared/data]
        [--sets bibtex delicious manpages_counts]
        [--thresholds 0 0.02 0.04 0.07 0.1 0.15 0.2] [--seeds 0 1 2] [--threads 2] [--trees 50]
        [--family-sets manpages_counts] [--families fastxml pfastrexml parabel linear embed]
        [--family-thresholds 0 0.04 0.07 0.1] [--family-seeds 0]
        [--markdown results/prunex.md] (and the step options of benchlib.cli)

Every command runs as a user runs it: `xml-prune TRAIN P_TRAIN --threshold t
--idf-out IDF`, `xml-prune TEST P_TEST --threshold t --idf-in IDF` (rows
rescaled to unit length after the removal, xml-prune's default; FastXML in
the family table also on the paper's rows, --no-rescale), then
`xml-train` (FastXML, 50 trees, -m 10 -l 10 -b 1 -c 1; in the family table
each family's defaults, FastXML and PfastreXML with 50 trees), `xml-predict`
and `xml-eval` (with the training labels: PSP@k). The first row of each set
is the original data (no tf-idf, no pruning) as a reference; threshold 0 is
tf-idf and unit rows without pruning. Times are whole-command wall seconds
of xml-train, averaged over the seeds; accuracy is averaged over the seeds;
memory is xml-train's peak resident memory.

The goal (≤ 0.5 P@1 lost, ≥ 1.5× faster training, at the first threshold
that removes ≥ 50% of the non-zeros) is judged against threshold 0, the
same tf-idf rows unpruned: the paper compares PrunEX + DiSMEC with DiSMEC on
the same tf-idf features. The original data (raw counts for manpages_counts)
are shown beside it: on them FastXML differs from tf-idf rows before any
pruning.
"""
import json

import benchlib
from benchlib import WORK, Step, command, data_file, load, run_rss

TRAIN_ARGS = ["-m", "10", "-l", "10", "-b", "1.0", "-c", "1.0"]
HERE = WORK / "prunex"


def prune_commands(step):
    k = step.kw
    paper = [] if k["rescale"] else ["--no-rescale"]
    return [["xml-prune", src, dst, "--threshold", k["threshold"], *paper, "--json", "-q",
             idf_arg, k["idf"]] for src, dst, idf_arg in ((k["train"], k["p_train"], "--idf-out"),
                                                         (k["test"], k["p_test"], "--idf-in"))]


def prune_data(step):
    """xml-prune the training file (writing the idf) and the test file (reading it)."""
    stats = [json.loads(run_rss(command(c))["stdout"]) for c in prune_commands(step)][0]
    return {"removed": stats["removed_fraction"], "emptied": stats["emptied"]}


prune_data.commands = prune_commands


#: per family, the xml-train options of the family table (its defaults; the
#: forests with the sweep's number of trees; FastXML: the sweep's own rows)
FAMILY_ARGS = {"fastxml": [], "pfastrexml": ["--algorithm", "pfastrexml",
                                                            "-t", "{trees}"],
               "parabel": ["--algorithm", "parabel"], "linear": ["--algorithm", "linear"],
               "embed": ["--algorithm", "embed"], "ldsm": ["--algorithm", "ldsm"]}
#: the paper's (Khandagale & Babbar) PrunEX + DiSMEC against DiSMEC: (set, threshold, share
#: of the features removed, P@1 with and without pruning)
PAPER = [("EURLex-4K", 0.04, 0.63, 82.46, 82.85), ("Wikipedia-31K", 0.04, 0.7773, 83.66, 84.11),
         ("Amazon-13K", 0.07, 0.5122, 93.24, 93.4), ("Amazon-670K", 0.07, 0.5262, 44.38, 44.7),
         ("WikiLSHTC-325K", 0.07, 0.3072, 62.50, 64.4),
         ("Delicious-200K", 0.07, 0.8819, 44.77, 44.92)]


def prune_step(s, th, rescale=True):
    """The step pruning set s at threshold th (train, then test with its
    idf); rescale False: the paper's rows (--no-rescale)."""
    tag = f"{s}.t{th}" + ("" if rescale else ".paper")
    return Step(HERE / f"{tag}.prune.json", prune_data,
                [data_file(s, "train"), data_file(s, "test")], threshold=th, rescale=rescale,
                train=data_file(s, "train"), test=data_file(s, "test"),
                p_train=HERE / f"{tag}_train.txt", p_test=HERE / f"{tag}_test.txt",
                idf=HERE / f"{tag}.idf")


#: the family-table name of FastXML on the paper's rows (xml-prune --no-rescale)
PAPER_ROWS = "fastxml --no-rescale"


def _config(name, s, th, train_args, family, rescale=True):
    cfg = {"name": name, "set": s, "label": s, "threshold": th, "family": family,
           "train_args": train_args}
    if th is not None:
        prune = prune_step(s, th, rescale)
        cfg.update(prune=prune, train_file=prune.kw["p_train"], test_file=prune.kw["p_test"],
                   deps=[prune.target])
    return cfg


def configs(a):
    """One FastXML configuration per (set, threshold) of the sweep; None =
    the original data."""
    return [_config(f"{s}_orig" if th is None else f"{s}_t{th}", s, th,
                    ["-t", a.trees, *TRAIN_ARGS], "fastxml")
            for s in a.sets for th in [None] + a.thresholds]


def family_configs(a):
    """One configuration per (set, family, threshold) of the family table,
    from tf-idf unit rows (threshold 0) on; FastXML's rows are the sweep's,
    and FastXML on the paper's rows (PAPER_ROWS: pruned, not rescaled; the
    sweep's seeds) is added above threshold 0, where the rows are the same
    bits either way."""
    out = [_config(f"{s}_{f}_t{th}", s, th,
                   [str(x).format(trees=a.trees) for x in FAMILY_ARGS[f]], f)
           for s in a.family_sets for f in a.families if f != "fastxml"
           for th in a.family_thresholds]
    if "fastxml" in a.families:
        for s in a.family_sets:
            for th in a.family_thresholds:
                if th > 0:
                    c = _config(f"{s}_fastxml-paper_t{th}", s, th,
                                ["-t", a.trees, *TRAIN_ARGS], PAPER_ROWS, rescale=False)
                    out.append({**c, "seeds": a.seeds})
    return out


def steps(a):
    out, seen = [], set()
    for c, seeds in [(c, a.seeds) for c in configs(a)] + \
            [(c, c.get("seeds", a.family_seeds)) for c in family_configs(a)]:
        if "prune" in c and c["prune"].target not in seen:
            seen.add(c["prune"].target)
            out.append(c["prune"])
        # every seed is timed: the tables report train time averaged over seeds
        out += benchlib.model_steps(c, HERE, seeds, seeds, [a.threads])
    return out


def rows(cfgs, st):
    """The table's rows: each model's record with its set, threshold and pruning stats."""
    out = []
    for c in cfgs:
        pr = load(c["prune"].target) if "prune" in c else {"removed": 0.0, "emptied": 0}
        for s in st:
            if s.action is benchlib.predict_eval and s.kw["row"]["config"] == c["name"]:
                out.append({"set": c["set"], "threshold": c["threshold"],
                            "family": c["family"], **pr, **load(s.target)})
    return out


def family_report(rows, sets, families, thresholds, seeds, sweep_seeds):
    """The family table: per set, family and threshold, accuracy (P@k and
    PSP@k), training time against unpruned tf-idf rows, memory and size;
    then the paper's figures."""
    out = ["", f"Every family on long documents (-T 2; seeds {seeds}, FastXML the sweep's "
           f"rows above, seeds {sweep_seeds}; each family's defaults, PfastreXML with the "
           f"sweep's trees; {PAPER_ROWS}: FastXML on the paper's rows, pruned but not "
           f"rescaled to unit length, seeds {sweep_seeds}). × t=0: training time of "
           "threshold 0 (tf-idf unit rows, unpruned) over this row's; ΔP@1 against "
           "threshold 0.", ""]
    head = ["data", "family", "threshold", "% nnz removed", "P@1", "P@3", "P@5", "PSP@1",
            "PSP@3", "PSP@5", "ΔP@1", "train s", "× t=0", "train peak MB", "model MB"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5", "train_s", "train_rss", "model_mb")
    listed = [g for f in families for g in ([f, PAPER_ROWS] if f == "fastxml" else [f])]
    for s in sets:
        for f in listed:
            base = None
            for th in thresholds:
                # (threshold 0: the same rows either way, so the paper's are FastXML's)
                g = "fastxml" if f == PAPER_ROWS and th == 0 else f
                r = [x for x in rows if x["set"] == s and x["family"] == g
                     and x["threshold"] == th]
                if not r:
                    continue
                m = {k: benchlib.mean([x[k] for x in r]) for k in keys}
                if th == 0:
                    base = m
                drop, faster = ((f"{m['P@1'] - base['P@1']:+.2f}",
                                 f"{base['train_s'] / m['train_s']:.2f}") if base else ("–", "–"))
                out.append(f"| {s} | {f} | {th} | {100 * r[0]['removed']:.1f} | "
                           + " | ".join(f"{m[k]:.2f}" for k in keys[:6])
                           + f" | {drop} | {m['train_s']:.1f} | {faster} | "
                           f"{m['train_rss']:.0f} | {m['model_mb']:.1f} |")
    out += ["", "The paper (Khandagale & Babbar, PrunEX + DiSMEC against DiSMEC): "
            + "; ".join(f"{n} at {th}: {100 * rem:.0f}% removed, P@1 {p:.2f} against {b:.2f} "
                        f"({p - b:+.2f})" for n, th, rem, p, b in PAPER) + "."]
    return out


def report(rows, sets, thresholds, seeds, threads, trees, family=()):
    out = [f"PrunEX + FastXML ({trees} trees, -m 10 -l 10 -b 1 -c 1, -T {threads}); "
           f"mean over seeds {seeds}; train time = wall seconds of xml-train. Rows emptied: "
           "rows the threshold would have left without features (xml-prune's --min-keep 1 "
           "keeps their largest entry).", ""]
    head = ["data", "threshold", "% nnz removed", "rows emptied", "P@1", "P@3", "P@5",
            "nDCG@1", "nDCG@3", "nDCG@5", "train s", "× original", "model MB"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    goal = []
    for s in sets:
        base = None
        best = None
        for th in [None] + thresholds:
            r = [x for x in rows if x["set"] == s and x["threshold"] == th]
            m = {k: benchlib.mean([x[k] for x in r]) for k in
                 ("train_s", "model_mb", "P@1", "P@3", "P@5", "nDCG@1", "nDCG@3", "nDCG@5")}
            if th is None:
                base = m
            label = "original (no tf-idf)" if th is None else f"{th}"
            out.append(f"| {s} | {label} | {100 * r[0]['removed']:.1f} | {r[0]['emptied']} | "
                       + " | ".join(f"{m[k]:.2f}" for k in ("P@1", "P@3", "P@5", "nDCG@1",
                                                             "nDCG@3", "nDCG@5"))
                       + f" | {m['train_s']:.1f} | {base['train_s'] / m['train_s']:.2f} | "
                       f"{m['model_mb']:.1f} |")
            if th is not None and r[0]["removed"] >= 0.5 and best is None:
                best = (th, r[0]["removed"], m)
        if best is None:
            goal.append(f"- {s}: no threshold in the sweep removes ≥ 50% of the non-zeros, so "
                        "the goal cannot be measured on it.")
        else:
            th, rem, m = best
            unpruned = [x for x in rows if x["set"] == s and x["threshold"] == 0]
            t0 = {k: benchlib.mean([x[k] for x in unpruned]) for k in ("P@1", "train_s")} \
                if unpruned else None
            line = (f"- {s}: threshold {th} removes {100 * rem:.1f}% of the non-zeros; P@1 "
                    f"{m['P@1']:.2f}")
            if t0:
                line += (f": drop {t0['P@1'] - m['P@1']:.2f} against the tf-idf unit rows "
                         f"unpruned (threshold 0), training "
                         f"{t0['train_s'] / m['train_s']:.2f}× faster")
            line += (f" (against the original data: drop {base['P@1'] - m['P@1']:.2f}, "
                     f"{base['train_s'] / m['train_s']:.2f}× faster)")
            ok = bool(t0) and t0["P@1"] - m["P@1"] <= 0.5 \
                and t0["train_s"] / m["train_s"] >= 1.5
            goal.append(line + "; goal (drop ≤ 0.5, ≥ 1.5× faster, against threshold 0): "
                        + ("met." if ok else "**not met**."))
    out += ["", "Goal, at the first threshold of the sweep that removes ≥ 50% of the "
            "non-zeros (larger ones remove more and lose more), against the same tf-idf "
            "rows unpruned (threshold 0; the paper compares PrunEX + DiSMEC with DiSMEC on "
            "the same features):"] + goal + list(family)
    return "\n".join(out) + "\n"


def add_args(ap):
    ap.add_argument("--sets", nargs="+", default=["bibtex", "delicious", "manpages_counts"])
    ap.add_argument("--thresholds", nargs="+", type=float,
                    default=[0, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2],
                    help="the issue's sweep 0..0.1, plus 0.15 and 0.2: on Bibtex and "
                         "Delicious 0.1 removes less than half of the non-zeros")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trees", type=int, default=50)
    ap.add_argument("--family-sets", nargs="+", default=["manpages_counts"])
    ap.add_argument("--families", nargs="+", choices=sorted(FAMILY_ARGS),
                    default=["fastxml", "pfastrexml", "parabel", "linear", "embed"],
                    help="fastxml: the sweep's rows (its sets must include the set)")
    ap.add_argument("--family-thresholds", nargs="+", type=float, default=[0, 0.04, 0.07, 0.1])
    ap.add_argument("--family-seeds", nargs="+", type=int, default=[0])


def make_report(a, st):
    return report(rows(configs(a), st), a.sets, a.thresholds, a.seeds, a.threads, a.trees,
                  family_report(rows(configs(a) + family_configs(a), st), a.family_sets,
                                a.families, a.family_thresholds, a.family_seeds, a.seeds))


if __name__ == "__main__":
    benchlib.cli(__doc__, "prunex", add_args, steps, make_report)
