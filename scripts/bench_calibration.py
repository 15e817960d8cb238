"""Calibrated probabilities and label sets from every family (issue 52).

    python scripts/bench_calibration.py [--out results/calibration.md] [--seeds 3]
        [--threads 2] [--sets bibtex,delicious,yeast,corel5k]

For every family with its defaults on every shared data set: the model is
trained on the training split and calibrated on a third of it held out
(xmlkit.models.calibrated.fit_held_out: what `xml-train --calibrate` does), then
scored on the test split:

- ECE@1/3/5 (percent, 10 equal-mass bins) of the raw and the calibrated
  scores, ECE@10 (the ranks past 5, where the bands' maps apply), and the
  noise floor: the mean ECE@5 of outcomes drawn from the
  calibrated probabilities themselves (50 draws) -- what a perfectly
  calibrated model of these probabilities would show on a test set this
  size -- and the share of those draws at or above the calibration's
  ECE@5; the ECE@5 of the model's test scores cross-fitted on the test
  split's two halves (no held-out copy), and of the calibration on the
  test scores of the copy it was fitted on; P@1/3/5 of both (they must be
  equal);
- label sets: micro-F1 and example-F1 (percent) of the fitted per-label
  thresholds (--decision threshold), against the same without the bands
  (the top 5's map for every rank), each row's top 1 and top 3, and the
  best single global threshold on the raw scores chosen on the test set
  itself (an oracle) or on its other half;
- cost: what a user waits for, `xml-train --calibrate` over `xml-train`
  (whole commands, their defaults, alternated --rounds times, medians;
  --no-cost skips it). (The in-process times of one run per seed, in the
  rows logged to stderr, are too noisy to compare on the small sets: a
  fit of a fraction of a second there varies by half.)

Means over --seeds seeds (model seed and fold split); Embed and Linear have
their seed too.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib import data_file, ensure_data  # noqa: E402

FAMILIES = ("fastxml", "pfastrexml", "ldsm", "embed", "linear")
SETS = ("bibtex", "delicious", "yeast", "corel5k")


def top_sets(S, k):
    from xmlkit.metrics import top_k
    top, _ = top_k(S, k)
    r = np.repeat(np.arange(top.shape[0]), top.shape[1])
    c = top.ravel()
    ok = c >= 0
    return sp.csr_matrix((np.ones(ok.sum()), (r[ok], c[ok])), shape=S.shape)


def oracle_global(Yt, S, k):
    """The best micro-F1 of one cut on the raw scores of each row's k best."""
    from xmlkit.calibration import _best_cut
    from xmlkit.metrics import top_entries
    s, hit = top_entries(Yt, S, k)
    return _best_cut(s.astype(np.float64), hit.astype(np.float64), Yt.nnz)[1]


def halves_global(Yt, S, k):
    """The micro-F1 of one cut on the raw scores chosen on the test set's
    even rows and counted on its odd rows, and the other way round (both
    halves counted together): the oracle cut without its own rows."""
    from xmlkit.calibration import _best_cut
    from xmlkit.metrics import binary_csr, top_k_entries
    Yb = binary_csr(Yt, "y")
    _, s, _, hit, rows = top_k_entries(Yb, S, k, with_rows=True)
    s, hit, half = s.astype(np.float64), hit.astype(np.float64), rows % 2
    relevant = np.bincount(np.arange(Yb.shape[0]) % 2, weights=np.diff(Yb.indptr), minlength=2)
    tp = kept = 0.0
    for h in (0, 1):
        c, _ = _best_cut(s[half == h], hit[half == h], relevant[h])
        keep = s[half != h] >= c
        tp += hit[half != h][keep].sum()
        kept += keep.sum()
    return 2 * tp / (Yb.nnz + kept)


def noise_floor(P, Yt, k, draws=50, seed=0):
    """The ECE@k of `draws` truth matrices drawn from the probabilities P
    themselves (each entry of a row's top k relevant with its probability):
    what a perfect calibration shows on these rows, one value per draw."""
    from xmlkit.metrics import calibration, top_k
    rng = np.random.default_rng(seed)
    tk, tv = top_k(P, k)
    ok = tk.ravel() >= 0
    rows = np.repeat(np.arange(tk.shape[0]), tk.shape[1])[ok]
    c, v = tk.ravel()[ok], tv.ravel().astype(np.float64)[ok]
    out = []
    for _ in range(draws):
        # outcomes drawn from the probabilities: a truth matrix of them
        drawn = rng.random(len(v)) < v
        T = sp.csr_matrix((np.ones(int(drawn.sum())), (rows[drawn], c[drawn])), shape=P.shape)
        out.append(calibration(T, P, k)["ECE"])
    return np.array(out)


def cross_fitted(Yt, S, k=5):
    """The ECE@k of the model's own test scores calibrated without the
    training rows: each half of the test rows (even, odd) mapped by a
    calibration fitted on the other half's scores and labels. No copy of
    the model and no training row is in it: where it also misses, the
    miss is not the held-out copy's."""
    import warnings

    from xmlkit.calibration import Calibration
    from xmlkit.metrics import calibration
    S, Yt = sp.csr_matrix(S), sp.csr_matrix(Yt)
    n = S.shape[0]
    halves = (np.arange(0, n, 2), np.arange(1, n, 2))
    parts, order = [], []
    for fit_on, mapped in (halves, halves[::-1]):
        order.append(mapped)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cal = Calibration.fit(Yt[fit_on], S[fit_on])
        parts.append(sp.csr_matrix(cal.probabilities(S[mapped])))
    P = sp.vstack(parts, format="csr")[np.argsort(np.concatenate(order))]
    return calibration(Yt, P, k)["ECE"]


def one(family, name, seed, threads):
    import xmlkit
    from xmlkit.calibration import CANDIDATES, Calibration
    from xmlkit.models.calibrated import held_out_scores, held_out_split, ranked
    from xmlkit.io import read_dataset
    from xmlkit.metrics import calibrations, ranking_metrics, set_metrics
    X, Y = read_dataset(ensure_data(data_file(name, "train")))
    Xt, Yt = read_dataset(ensure_data(data_file(name, "test")))
    cls = xmlkit.REGISTRY[family]
    est = cls(threads=threads, **({"seed": seed} if "seed" in cls().get_params() else {}))
    t0 = time.perf_counter()
    model = cls(**est.get_params()).fit(X, Y)
    t1 = time.perf_counter()
    Y_held, S_held = held_out_scores(est, X, Y, CANDIDATES, seed=seed, threads=threads)
    cal = Calibration.fit(Y_held, S_held)
    t2 = time.perf_counter()
    # (the same without the bands: the top 5's map for every rank)
    flat = Calibration.fit(Y_held, S_held, banded=False)
    # (one map for the top 5, not one per rank)
    one_map = Calibration.fit(Y_held, S_held, by_rank=False)
    S = model.predict(Xt, k=cal.candidates, threads=threads, **ranked(model))
    P = cal.probabilities(S)
    ks = (1, 3, 5)
    eb, ea = calibrations(Yt, S, ks + (10,)), calibrations(Yt, P, ks + (10,))
    eg = calibrations(Yt, one_map.probabilities(S), (1, 5))
    # (P@k as the score files rank: the raw scores as written, 6 decimals)
    written = sp.csr_matrix(S, dtype=np.float64, copy=True)
    written.data = np.round(written.data, 6)
    pb, pa = ranking_metrics(Yt, written, ks), ranking_metrics(Yt, P, ks)
    sets = set_metrics(Yt, cal.label_sets(P))
    flat_sets = set_metrics(Yt, flat.label_sets(flat.probabilities(S)))
    perfect = noise_floor(P, Yt, 5, seed=seed)
    # the map on the test scores of the very copy it was fitted on (the
    # copy trained again: held_out_scores keeps none)
    (held, kept), = held_out_split(X.shape[0], seed=seed)
    copy = cls(**{**est.get_params(), **est.fold_params(Y)}).fit(X[kept], Y[kept])
    again = sp.csr_matrix(copy.predict(X[held], k=CANDIDATES, threads=threads, **ranked(copy)))
    assert (again != sp.csr_matrix(S_held)).nnz == 0, "the copy is not held_out_scores' copy"
    by_copy = cal.probabilities(copy.predict(Xt, k=cal.candidates, threads=threads,
                                             **ranked(copy)))
    return {"family": family, "set": name, "seed": seed,
            "train_s": t1 - t0, "calibrate_s": t2 - t1,
            **{f"ECE@{k} before": 100 * eb[k]["ECE"] for k in ks + (10,)},
            **{f"ECE@{k} after": 100 * ea[k]["ECE"] for k in ks + (10,)},
            "ECE@1 one map": 100 * eg[1]["ECE"], "ECE@5 one map": 100 * eg[5]["ECE"],
            "ECE@5 floor": 100 * float(np.mean(perfect)),
            "ECE@5 perfect at least": 100 * float(np.mean(perfect >= ea[5]["ECE"])),
            "ECE@5 cross-fitted": 100 * cross_fitted(Yt, S),
            "ECE@5 copy": 100 * calibrations(Yt, by_copy, (5,))[5]["ECE"],
            "P same": all(pb[f"P@{k}"] == pa[f"P@{k}"] for k in ks),
            **{f"P@{k}": 100 * pb[f"P@{k}"] for k in ks},
            "F1 sets": 100 * sets["micro_f1"], "exF1 sets": 100 * sets["example_f1"],
            "F1 no bands": 100 * flat_sets["micro_f1"],
            "F1 top1": 100 * set_metrics(Yt, top_sets(S, 1))["micro_f1"],
            "F1 top3": 100 * set_metrics(Yt, top_sets(S, 3))["micro_f1"],
            "exF1 top1": 100 * set_metrics(Yt, top_sets(S, 1))["example_f1"],
            "exF1 top3": 100 * set_metrics(Yt, top_sets(S, 3))["example_f1"],
            "F1 oracle": 100 * oracle_global(Yt, S, cal.candidates),
            "F1 halves": 100 * halves_global(Yt, S, cal.candidates)}


def command_cost(family, name, threads, rounds):
    """Median seconds of whole commands, each pair alternated `rounds`
    times: xml-train and xml-train --calibrate on the training split, then
    xml-predict of the test split by that model and xml-calibrate of a
    copy of it on the test split (as a validation file)."""
    import shutil
    import subprocess
    import tempfile
    train = ensure_data(data_file(name, "train"))
    test = ensure_data(data_file(name, "test"))
    bin_dir = Path(sys.executable).parent
    T = ["-T", str(threads), "-q"]
    pairs = {"train": [bin_dir / "xml-train", train, "m", "--algorithm", family, *T],
             "train --calibrate": [bin_dir / "xml-train", train, "m", "--algorithm", family,
                                   "--calibrate", *T],
             "predict": [bin_dir / "xml-predict", test, "s.txt", "plain", *T],
             "calibrate": [bin_dir / "xml-calibrate", test, "copy", *T]}
    times = {k: [] for k in pairs}
    with tempfile.TemporaryDirectory() as tmp:
        for a, b in (("train", "train --calibrate"), ("predict", "calibrate")):
            for r in range(rounds):
                for key in ((a, b) if r % 2 == 0 else (b, a)):
                    argv = [str(Path(tmp) / x) if x in ("m", "s.txt", "plain", "copy") else str(x)
                            for x in pairs[key]]
                    t = time.perf_counter()
                    subprocess.run(argv, check=True)
                    times[key].append(time.perf_counter() - t)
                    if key == "train" and r == 0:
                        shutil.copytree(Path(tmp) / "m", Path(tmp) / "plain")
                        shutil.copytree(Path(tmp) / "m", Path(tmp) / "copy")
                    if key.startswith("train"):
                        shutil.rmtree(Path(tmp) / "m")
    return {k: float(np.median(v)) for k, v in times.items()}


def cost_report(costs, rounds, threads):
    lines = ["## What a calibration costs (whole commands)", "",
             f"`xml-train TRAIN MODEL --algorithm F -T {threads}` against the same with "
             "`--calibrate`, then `xml-predict TEST SCORES MODEL` against `xml-calibrate TEST "
             f"MODEL` (a validation file: here the test split), each pair alternated {rounds} "
             "times; medians of the whole commands' wall time (starting, reading the data and "
             "writing included), seconds, and their ratios.", "",
             "| family | set | xml-train | --calibrate | ratio | xml-predict | xml-calibrate | "
             "ratio |", "|---|---|---|---|---|---|---|---|"]
    for (family, name), c in costs.items():
        lines.append(f"| {family} | {name} | {c['train']:.2f} | {c['train --calibrate']:.2f} | "
                     f"{c['train --calibrate'] / c['train']:.2f}× | {c['predict']:.2f} | "
                     f"{c['calibrate']:.2f} | {c['calibrate'] / c['predict']:.2f}× |")
    return "\n".join(lines + [""])


def _platt(s, y):
    """Platt scaling on the score's log-odds: p = sigmoid(a·logit(s) + b)
    by Newton's method; returns the map."""
    from xmlkit.calibration import _logit
    z, a, b = _logit(s), 1.0, 0.0
    for _ in range(50):
        q = 1 / (1 + np.exp(-(a * z + b)))
        r, w = y - q, q * (1 - q) + 1e-12
        H = np.array([[(w * z * z).sum(), (w * z).sum()], [(w * z).sum(), w.sum()]])
        a, b = np.array([a, b]) + np.linalg.solve(H + 1e-9 * np.eye(2),
                                                  [(r * z).sum(), r.sum()])
    return lambda t: 1 / (1 + np.exp(-(a * _logit(t) + b)))


def forms(name, seed, threads, ranks=5):
    """FastXML: ECE@5 and the sets' micro-F1 on the test split of the forms
    a calibration could take, fitted on the same scores of held-out rows."""
    import xmlkit
    from xmlkit.calibration import Calibration, IsotonicMap
    from xmlkit.models.calibrated import held_out_scores
    from xmlkit.io import read_dataset
    from xmlkit.metrics import binary_csr, top_k_entries, calibration, set_metrics
    X, Y = read_dataset(ensure_data(data_file(name, "train")))
    Xt, Yt = read_dataset(ensure_data(data_file(name, "test")))
    est = xmlkit.FastXML(threads=threads, seed=seed)
    model = xmlkit.FastXML(**est.get_params()).fit(X, Y)
    S = sp.csr_matrix(model.predict(Xt, k=50, threads=threads))
    lt, st, rt, ht = top_k_entries(binary_csr(Yt, "y"), S, 5)
    st = st.astype(np.float64)

    def ece_of(values):
        from xmlkit.metrics import top_k
        top, _ = top_k(S, 5)
        r = np.repeat(np.arange(top.shape[0]), top.shape[1])[top.ravel() >= 0]
        return 100 * calibration(Yt, sp.csr_matrix((values, (r, lt)), shape=S.shape), 5)["ECE"]
    def ece_sets(cal):
        P = cal.probabilities(S)
        return (100 * calibration(Yt, P, 5)["ECE"], 100 * calibration(Yt, P, 10)["ECE"],
                100 * set_metrics(Yt, cal.label_sets(P))["micro_f1"])
    out = {"raw": (ece_of(st), 100 * calibration(Yt, S, 10)["ECE"], None)}
    for tag, kw in (("isotonic by score and rank, a third held out (the default)", {}),
                    ("isotonic, a fifth held out", {"holdout": 0.2}),
                    ("isotonic, half held out", {"holdout": 0.5}),
                    ("isotonic, 2 folds (every row scored)", {"folds": 2})):
        Y_held, S_held = held_out_scores(est, X, Y, 50, seed=seed, threads=threads, **kw)
        cal = Calibration.fit(Y_held, S_held)
        out[tag] = ece_sets(cal)
        if not kw:
            # the other forms, fitted on the default's held-out scores
            _, sh, rh, hh, _ = _entries(Y_held, S_held)
            top = rh < 5
            platt = _platt(sh[top], hh[top].astype(np.float64))
            per_rank = [IsotonicMap.fit(sh[top & (np.minimum(rh, ranks - 1) == r)],
                                        hh[top & (np.minimum(rh, ranks - 1) == r)])
                        for r in range(ranks)]
            v = np.empty_like(st)
            for r in range(ranks):
                w = np.minimum(rt, ranks - 1) == r
                v[w] = per_rank[r].apply(st[w])
            out["isotonic per rank, each fitted alone (ranks 1-4, 5+)"] = (ece_of(v), None, None)
            out["one isotonic map for the top 5"] = ece_sets(
                Calibration.fit(Y_held, S_held, by_rank=False))
            for bins in (32, 128):
                out[f"isotonic by score and rank, {bins} bins of scores (the default: 64)"] = \
                    ece_sets(Calibration.fit(Y_held, S_held, bins=bins))
            out["Platt on the log-odds"] = (ece_of(platt(st)), None, None)
            # the top 5's maps for every rank past them (no bands), its sets fitted as the default's
            out["the top 5's maps for every rank past them (no bands)"] = ece_sets(
                Calibration.fit(Y_held, S_held, banded=False))
            # sets: one global cut (no per-label shifts)
            glob = Calibration.fit(Y_held, S_held, prior=1e12)
            out["one global cut (no label shifts)"] = (None, None, ece_sets(glob)[2])
    return out


def _entries(Y_held, S_held):
    """(labels, scores, ranks, relevant) of held-out scores' top 50, and the
    held-out rows' number of relevant labels."""
    from xmlkit.metrics import binary_csr, top_k_entries
    Yh = binary_csr(Y_held, "y")
    lab, s, r, h = top_k_entries(Yh, S_held, 50)
    return lab, s.astype(np.float64), r, h, Yh.nnz


def forms_report(found, seeds):
    names = list(found)
    tags = list(found[names[0]])
    lines = ["## The form of the calibration (FastXML)", "",
             f"ECE@5, ECE@10 (percent) and the sets' micro-F1 on the test split, means over "
             f"{seeds} seed(s); the per-rank and Platt maps, the map without bands and the single "
             "cut are fitted on the same held-out scores as the default (a third of the training "
             "rows).", "",
             "| form | " + " | ".join(f"{n} ECE@5 | {n} ECE@10 | {n} micro-F1"
                                    for n in names) + " |",
             "|---|" + "---|---|---|" * len(names)]
    for tag in tags:
        cells = []
        for n in names:
            cells += ["" if all(v is None for v in col) else
                      f"{np.mean([v for v in col if v is not None]):.2f}"
                      for col in zip(*found[n][tag])]
        lines.append(f"| {tag} | " + " | ".join(cells) + " |")
    return "\n".join(lines + [""])


def report(rows, seeds, threads):
    keys = [k for k in rows[0] if k not in ("family", "set", "seed", "P same")]
    groups = {}
    for r in rows:
        groups.setdefault((r["family"], r["set"]), []).append(r)
    lines = ["# Calibrated probabilities and label sets, every family (issue 52)", "",
             "Made by `make -C scripts calibration` (scripts/bench_calibration.py): defaults, "
             f"-T {threads}, means over {seeds} seed(s); the calibration is fitted on a third of "
             "the training split held out (what `xml-train --calibrate` does) and everything is "
             "measured on the test split. ECE in percent (10 equal-mass bins); *one map*: "
             "ECE@1 and ECE@5 of one isotonic map for each row's top 5 instead of the default's "
             "map per rank (fitted together, by score and rank); *floor*: the "
             "ECE@5 of outcomes drawn from the calibrated probabilities themselves, what a "
             "perfect calibration shows on a test set of this size (mean of 50 draws), and "
             "*perfect ≥ it*: the share of those draws (percent) whose ECE@5 is at least the "
             "calibration's (a few percent or less: a miss beyond the test set's noise); "
             "*cross-fitted on test*: the ECE@5 of the model's own test scores, each half of "
             "the test rows (even, odd) mapped by a calibration fitted on the other half (no "
             "held-out copy, no training row: where it misses too, the held-out copy is not "
             "why); *the copy's test scores*: the ECE@5 of the calibration on the test scores "
             "of the held-out copy it was fitted on (the copy's own scores: where it misses "
             "too, the training rows' difference from the test rows is why, not the copy's "
             "being weaker than the model); "
             "ECE@10 takes in ranks 6-10, "
             "mapped by the first band past the top 5. F1 in percent: micro-F1 "
             "of the fitted thresholds' sets, each row's top 1 and top 3, the best single "
             "cut on the raw scores chosen on the test set itself (*oracle*), and that cut "
             "chosen on the test set's even rows and counted on its odd rows, and the other way "
             "round (*cut from the other half*: the oracle without the optimism of choosing on "
             "the rows it is counted on).", "",
             "| family | set | ECE@1 | ECE@3 | ECE@5 | one map: ECE@1, ECE@5 | ECE@5 floor | "
             "perfect ≥ it | "
             "cross-fitted on test | the copy's test scores | ECE@10 | "
             "P@1/3/5 (same) | "
             "micro-F1 sets | without the bands | top-1 | top-3 | oracle cut | "
             "cut from the other half | example-F1 sets |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (family, name), rs in groups.items():
        m = {k: float(np.mean([r[k] for r in rs])) for k in keys}
        same = all(r["P same"] for r in rs)
        best = max(m["F1 top1"], m["F1 top3"], m["F1 oracle"])
        lines.append(
            f"| {family} | {name} | "
            + " | ".join(f"{m[f'ECE@{k} before']:.2f} → {m[f'ECE@{k} after']:.2f}"
                         for k in (1, 3, 5))
            + f" | {m['ECE@1 one map']:.2f}, {m['ECE@5 one map']:.2f}"
            f" | {m['ECE@5 floor']:.2f} | {m['ECE@5 perfect at least']:.0f} | "
            f"{m['ECE@5 cross-fitted']:.2f} | {m['ECE@5 copy']:.2f} | "
            f"{m['ECE@10 before']:.2f} → {m['ECE@10 after']:.2f}"
            f" | {m['P@1']:.2f}/{m['P@3']:.2f}/{m['P@5']:.2f} "
            f"({'yes' if same else 'NO'}) | {'**' if m['F1 sets'] >= best else ''}"
            f"{m['F1 sets']:.2f}{'**' if m['F1 sets'] >= best else ''} | "
            f"{m['F1 no bands']:.2f} | {m['F1 top1']:.2f} | "
            f"{m['F1 top3']:.2f} | {m['F1 oracle']:.2f} | {m['F1 halves']:.2f} | "
            f"{m['exF1 sets']:.2f} |")
    lines += ["", "Bold: the fitted sets' micro-F1 at least the best of top-1, top-3 and the "
              "oracle cut. *Without the bands*: the sets of the top 5's maps for every rank "
              "past them, their thresholds fitted the same way. What the calibration costs: "
              "the last table.", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(HERE / "results" / "calibration.md"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--no-forms", action="store_true")
    ap.add_argument("--no-cost", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for name in args.sets.split(","):
        for family in args.families.split(","):
            for seed in range(args.seeds):
                r = one(family, name, seed, args.threads)
                print(json.dumps(r), file=sys.stderr, flush=True)
                rows.append(r)
    text = report(rows, args.seeds, args.threads)
    if not args.no_forms:
        found = {}
        for name in args.sets.split(","):
            for seed in range(args.seeds):
                for tag, v in forms(name, seed, args.threads).items():
                    found.setdefault(name, {}).setdefault(tag, []).append(v)
                print(json.dumps({"forms": name, "seed": seed}), file=sys.stderr, flush=True)
        text += "\n" + forms_report(found, args.seeds)
    if not args.no_cost:
        costs = {}
        for name in args.sets.split(","):
            for family in args.families.split(","):
                costs[family, name] = command_cost(family, name, args.threads, args.rounds)
                print(json.dumps({"cost": [family, name, costs[family, name]]}),
                      file=sys.stderr, flush=True)
        text += "\n" + cost_report(costs, args.rounds, args.threads)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
