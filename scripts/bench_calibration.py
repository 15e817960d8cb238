"""Calibrated probabilities and label sets from every family (issue 52).

    python scripts/bench_calibration.py [--out results/calibration.md] [--seeds 1]
        [--threads 2] [--sets bibtex,delicious,yeast,corel5k]

For every family with its defaults on every shared data set: the model is
trained on the training split and calibrated by cross-fitting on it
(xmlkit.calibration.cross_fitted: what `xml-train --calibrate` does), then
scored on the test split:

- ECE@1/3/5 (percent, 10 equal-mass bins) of the raw and the calibrated
  scores, and the noise floor: the mean ECE@5 of outcomes drawn from the
  calibrated probabilities themselves (50 draws) -- what a perfectly
  calibrated model of these probabilities would show on a test set this
  size; P@1/3/5 of both (they must be equal);
- label sets: micro-F1 and example-F1 (percent) of the fitted per-label
  thresholds (--decision threshold), against each row's top 1 and top 3 and
  the best single global threshold on the raw scores chosen on the test set
  itself (an oracle);
- cost: the calibration's time over the training's (the same process, one
  after the other), in-process wall time.

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


def noise_floor(P, Yt, k, draws=50, seed=0):
    from xmlkit.metrics import _binary_csr, _top_entries, calibration
    rng = np.random.default_rng(seed)
    labels, p, _, _ = _top_entries(_binary_csr(Yt, "y"), P, k)
    top = top_sets(P, k).tocoo()
    out = []
    for _ in range(draws):
        # outcomes drawn from the probabilities: a truth matrix of them
        from xmlkit.metrics import top_k
        tk, tv = top_k(P, k)
        rows = np.repeat(np.arange(tk.shape[0]), tk.shape[1])
        c, v = tk.ravel(), tv.ravel().astype(np.float64)
        ok = c >= 0
        drawn = rng.random(int(ok.sum())) < v[ok]
        T = sp.csr_matrix((np.ones(int(drawn.sum())), (rows[ok][drawn], c[ok][drawn])),
                          shape=P.shape)
        out.append(calibration(T, P, k)["ECE"])
    del labels, p, top
    return float(np.mean(out))


def one(family, name, seed, threads):
    import xmlkit
    from xmlkit.calibration import cross_fitted, ranked
    from xmlkit.io import read_dataset
    from xmlkit.metrics import calibrations, ranking_metrics, set_metrics
    X, Y = read_dataset(ensure_data(data_file(name, "train")))
    Xt, Yt = read_dataset(ensure_data(data_file(name, "test")))
    cls = xmlkit.REGISTRY[family]
    est = cls(threads=threads, **({"seed": seed} if "seed" in cls().get_params() else {}))
    t0 = time.perf_counter()
    model = cls(**est.get_params()).fit(X, Y)
    t1 = time.perf_counter()
    cal = cross_fitted(est, X, Y, seed=seed, threads=threads)
    t2 = time.perf_counter()
    S = model.predict(Xt, k=cal.candidates, threads=threads, **ranked(model))
    P = cal.probabilities(S)
    ks = (1, 3, 5)
    eb, ea = calibrations(Yt, S, ks), calibrations(Yt, P, ks)
    pb, pa = ranking_metrics(Yt, S, ks), ranking_metrics(Yt, P, ks)
    sets = set_metrics(Yt, cal.label_sets(P))
    return {"family": family, "set": name, "seed": seed,
            "train_s": t1 - t0, "calibrate_s": t2 - t1,
            **{f"ECE@{k} before": 100 * eb[k]["ECE"] for k in ks},
            **{f"ECE@{k} after": 100 * ea[k]["ECE"] for k in ks},
            "ECE@5 floor": 100 * noise_floor(P, Yt, 5, seed=seed),
            "P same": all(pb[f"P@{k}"] == pa[f"P@{k}"] for k in ks),
            **{f"P@{k}": 100 * pb[f"P@{k}"] for k in ks},
            "F1 sets": 100 * sets["micro_f1"], "exF1 sets": 100 * sets["example_f1"],
            "F1 top1": 100 * set_metrics(Yt, top_sets(S, 1))["micro_f1"],
            "F1 top3": 100 * set_metrics(Yt, top_sets(S, 3))["micro_f1"],
            "exF1 top1": 100 * set_metrics(Yt, top_sets(S, 1))["example_f1"],
            "exF1 top3": 100 * set_metrics(Yt, top_sets(S, 3))["example_f1"],
            "F1 oracle": 100 * oracle_global(Yt, S, cal.candidates)}


def report(rows, seeds, threads):
    keys = [k for k in rows[0] if k not in ("family", "set", "seed", "P same")]
    groups = {}
    for r in rows:
        groups.setdefault((r["family"], r["set"]), []).append(r)
    lines = ["# Calibrated probabilities and label sets, every family (issue 52)", "",
             "Made by `make -C scripts calibration` (scripts/bench_calibration.py): defaults, "
             f"-T {threads}, means over {seeds} seed(s); the calibration is cross-fitted on "
             "the training split (what `xml-train --calibrate` does) and everything is "
             "measured on the test split. ECE in percent (10 equal-mass bins); *floor*: the "
             "ECE@5 of outcomes drawn from the calibrated probabilities themselves, what a "
             "perfect calibration shows on a test set of this size. F1 in percent: micro-F1 "
             "of the fitted thresholds' sets, each row's top 1 and top 3, and the best single "
             "cut on the raw scores chosen on the test set itself (*oracle*).", "",
             "| family | set | ECE@1 | ECE@3 | ECE@5 | ECE@5 floor | P@1/3/5 (same) | "
             "micro-F1 sets | top-1 | top-3 | oracle cut | example-F1 sets | cost |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (family, name), rs in groups.items():
        m = {k: float(np.mean([r[k] for r in rs])) for k in keys}
        same = all(r["P same"] for r in rs)
        best = max(m["F1 top1"], m["F1 top3"], m["F1 oracle"])
        lines.append(
            f"| {family} | {name} | "
            + " | ".join(f"{m[f'ECE@{k} before']:.2f} → {m[f'ECE@{k} after']:.2f}"
                         for k in (1, 3, 5))
            + f" | {m['ECE@5 floor']:.2f} | {m['P@1']:.2f}/{m['P@3']:.2f}/{m['P@5']:.2f} "
            f"({'yes' if same else 'NO'}) | {'**' if m['F1 sets'] >= best else ''}"
            f"{m['F1 sets']:.2f}{'**' if m['F1 sets'] >= best else ''} | {m['F1 top1']:.2f} | "
            f"{m['F1 top3']:.2f} | {m['F1 oracle']:.2f} | {m['exF1 sets']:.2f} | "
            f"{1 + m['calibrate_s'] / m['train_s']:.2f}× |")
    lines += ["", "*cost*: (training + calibration) / training, in-process wall time (the "
              "calibration trains two models on halves of the points and scores the other "
              "halves). Bold: the fitted sets' micro-F1 at least the best of top-1, top-3 "
              "and the oracle cut.", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(HERE / "results" / "calibration.md"))
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--families", default=",".join(FAMILIES))
    args = ap.parse_args()
    rows = []
    for name in args.sets.split(","):
        for family in args.families.split(","):
            for seed in range(args.seeds):
                r = one(family, name, seed, args.threads)
                print(json.dumps(r), file=sys.stderr, flush=True)
                rows.append(r)
    text = report(rows, args.seeds, args.threads)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
