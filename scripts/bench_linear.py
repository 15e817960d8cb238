"""Elastic-net one-vs-all table: P@1/3/5, example-based and macro F1 with the
learnt per-label thresholds (and with p >= 0.5 for reference), nnz(W), and
training time with lazy against dense (plain) updates, on the XC Bibtex and
Delicious splits. The final model (trained anew on every point, or the
hold-out model continued) and the label blocks: means over seeds on every
set in ../shared/data, against the defaults before them.

    python scripts/bench_linear.py [--data ../shared/data] [--markdown results/linear.md]
                                   (and the step options of benchlib.cli)

Runs through the Python API (the same code as `xml-train --algorithm
linear`; a test checks CLI = API). The lazy/dense timing trains the same
model both ways (defaults, no threshold hold-out) and checks that the
weights agree (the lazy model is saved in work/linear/ for that). Scale:
`xml-train --algorithm linear` on synthetic data with D = 100k features and
L = 20k labels, peak RSS and nnz(W). Every fit is a timed step (its record
in work/linear/): it runs alone.
"""
import json
import shutil
import time
from pathlib import Path

import numpy as np

import benchlib
import xmlkit
from xmlkit.io import read_dataset
from xmlkit.models import linear
from xmlkit.metrics import label_sets, ranking_metrics, set_metrics

TARGET = {"bibtex": "63.4/38.9/28.5", "delicious": "68.7/61.1/56.3"}
BASELINE = {"bibtex": "liblinear L2-SVC 63.90/38.82/28.53, scikit-learn logistic "
                      "63.42/39.39/29.03",
            "delicious": "napkinXC one-vs-rest 69.20/61.56/56.76"}


CONFIGS = (("defaults", {}), ("--l1 1e-4 (sparser W)", {"l1": 1e-4}),
           ("--label-blocks 4", {"label_blocks": 4}),
           ("--label-blocks 16", {"label_blocks": 16}))


def timed_fit(X, Y, **kw):
    start = time.perf_counter()
    m = xmlkit.Linear(**kw).fit(X, Y)
    return m, time.perf_counter() - start


def data(name, part):
    return benchlib.DATA / name / f"{name}_{part}.txt.xz"


def accuracy(step):
    """Fit (with the threshold hold-out), P@k and the label-set F1s."""
    name = step.kw["set"]
    X, Y = read_dataset(data(name, "train"))
    Xt, Yt = read_dataset(data(name, "test"))
    m, train_s = timed_fit(X, Y, **step.kw["params"])
    r = ranking_metrics(Yt, m.predict(Xt, k=5), (1, 3, 5))
    st = set_metrics(Yt, m.predict(Xt, decision="threshold"))
    s5 = set_metrics(Yt, label_sets(m.predict(Xt, k=None), 0.5))
    return {"train_s": train_s, **{k: 100 * v for k, v in r.items()},
            "thresholds": st, "p05": s5, **m.stats()}


#: the final model's table: every set of ../shared/data, FINAL_SEEDS seeds,
#: 2 threads; per set the settings beside the defaults
FINAL_SEEDS = 5
FINAL_SETS = ("bibtex", "delicious", "corel5k", "yeast", "debtags", "manpages")
#: the defaults before the final model could be the hold-out model continued
#: (one label block; the squared hinge's auto epochs at most 10)
BEFORE = {"label_blocks": 1, "final_epochs": 0}
#: the sets whose features are sparse (auto continues the hold-out model there:
#: the "auto chose" column shows it) and the one with the squared hinge's labels
SPARSE_SETS, HINGE_SETS = ("debtags", "manpages"), ("manpages",)


def final_configs(name):
    """(label, parameters) of a set's rows."""
    before = {**BEFORE, "epochs": 10} if name in HINGE_SETS else BEFORE
    out = [("defaults", {}), ("before: " + ", ".join(f"--{k.replace('_', '-')} {v}"
                                                     for k, v in before.items()), before)]
    if name in SPARSE_SETS:
        out.append(("--final-epochs 0 (anew)", {"final_epochs": 0}))
    else:
        out.append(("--final-epochs 3 (continued)", {"final_epochs": 3}))
    if name in HINGE_SETS:
        out.append(("--epochs 10", {"epochs": 10}))
    return out


def final_model(step):
    """One fit (2 threads) of the final model's table: P@k, the thresholds'
    micro and macro F1, fit seconds."""
    name = step.kw["set"]
    X, Y = read_dataset(data(name, "train"))
    Xt, Yt = read_dataset(data(name, "test"))
    m, train_s = timed_fit(X, Y, threads=2, seed=step.kw["seed"], **step.kw["params"])
    r = ranking_metrics(Yt, m.predict(Xt, k=5), (1, 3, 5))
    st = set_metrics(Yt, m.predict(Xt, decision="threshold"))
    return {"train_s": train_s, **{k: 100 * r[k] for k in ("P@1", "P@3", "P@5")},
            "points_per_feature": X.nnz / X.shape[1], "micro_f1": 100 * st["micro_f1"],
            "macro_f1": 100 * st["macro_f1"],
            "resolved": {k: m.model_params()[k] for k in ("loss", "epochs", "final_epochs",
                                                          "label_blocks")}}


def lazy_fit(step):
    """Lazy updates, no hold-out; the model is kept for the dense step's check."""
    X, Y = read_dataset(data(step.kw["set"], "train"))
    m, t = timed_fit(X, Y, threshold_holdout=0)
    if step.kw["model"].exists():
        shutil.rmtree(step.kw["model"])
    m.save(step.kw["model"])
    return {"train_s": t, "D_over_nnz": X.shape[1] / (X.nnz / X.shape[0])}


def dense_fit(step):
    """The same model with plain (dense) updates; max |W_lazy - W_dense|."""
    X, Y = read_dataset(data(step.kw["set"], "train"))
    dense, t = timed_fit(X, Y, threshold_holdout=0, dense_updates=True)
    lazy = xmlkit.load_model(step.kw["model"])
    diff = np.abs((lazy._weights() - dense._weights()).toarray()).max()
    return {"train_s": t, "max_diff": float(diff)}


# At scale, with the defaults: synthetic sets (make_synthetic.py) with D = 100k
# features and L = 20k labels, and 40k points, 32k features, 15k labels.
SYNS = {"synthetic": {"points": 20_000, "test": 2_000, "labels": 20_000,
                      "features": 100_000},
        "synthetic_15k": {"points": 40_000, "test": 5_000, "labels": 15_000,
                          "features": 32_000}}
SYN_ARGS = []


def synthetic_commands(step):
    work = step.target.parent
    name, syn = step.kw["name"], SYNS[step.kw["name"]]
    prefix = work / name
    train, test = Path(f"{prefix}_train.txt"), Path(f"{prefix}_test.txt")
    model, scores = work / f"{name}.model", work / f"{name}.scores"
    return [["python", benchlib.HERE / "make_synthetic.py", prefix, "--points", syn["points"],
             "--test-points", syn["test"], "--labels", syn["labels"], "--features",
             syn["features"]],
            ["xml-train", train, model, "--algorithm", "linear", "-q", *step.kw["args"]],
            ["xml-predict", test, scores, model, "-k", 5, "-q"],
            ["xml-eval", scores, test, "--json", "-q"]]


def synthetic(step):
    """xml-train --algorithm linear on a synthetic set: wall time, peak RSS
    against the D x L doubles a dense W would take, nnz(W), P@k."""
    gen, train, predict, evaluate = synthetic_commands(step)
    model = train[2]
    benchlib.run_rss(benchlib.command(gen))
    if model.exists():
        shutil.rmtree(model)
    tr = benchlib.run_rss(benchlib.command(train))
    pr = benchlib.run_rss(benchlib.command(predict))
    ev = json.loads(benchlib.run_rss(benchlib.command(evaluate))["stdout"])["metrics"]
    m = xmlkit.load_model(model)
    return {"train_s": tr["wall"], "train_rss": tr["rss_mb"], "predict_rss": pr["rss_mb"],
            **m.stats(), **{m: ev[m] for m in ("P@1", "P@3", "P@5")},
            "resolved": {k: m.model_params()[k] for k in ("loss", "lr", "epochs")}}


synthetic.commands = synthetic_commands


def steps(a):
    work = benchlib.WORK / "linear"
    out = [benchlib.Step(work / f"{name}.json", synthetic, [benchlib.HERE / "make_synthetic.py"],
                         timed=True, args=SYN_ARGS, name=name) for name in SYNS]
    for name in ("bibtex", "delicious"):
        deps = [data(name, "train"), data(name, "test")]
        out += [benchlib.Step(work / f"{name}_{i}.json", accuracy, deps, timed=True,
                              set=name, label=label, params=kw)
                for i, (label, kw) in enumerate(CONFIGS)]
        lazy = benchlib.Step(work / f"{name}_lazy.json", lazy_fit, deps[:1], timed=True,
                             set=name, model=work / f"{name}_lazy.model")
        out += [lazy, benchlib.Step(work / f"{name}_dense.json", dense_fit,
                                    [lazy.target], timed=True, set=name,
                                    model=lazy.kw["model"])]
    for name in FINAL_SETS:
        deps = [data(name, "train"), data(name, "test")]
        out += [benchlib.Step(work / f"final_{name}_{i}_{seed}.json", final_model, deps,
                              timed=True, set=name, label=label, params=kw, seed=seed)
                for i, (label, kw) in enumerate(final_configs(name))
                for seed in range(FINAL_SEEDS)]
    return out


def render(a, st):
    d = xmlkit.Linear()
    out = [f"Linear one-vs-all, elastic net. Defaults: loss {d.loss} (logistic below "
           f"{linear.HINGE_LABELS} labels, squared hinge from there), l1 {d.l1}, l2 {d.l2}, "
           f"{d.lr_schedule} rate {d.lr} ({linear.AUTO_LR['logistic']} logistic, "
           f"{linear.AUTO_LR['squared_hinge']} squared hinge), epochs {d.epochs} "
           f"({linear.SMOOTH_EPOCHS} logistic; squared hinge {linear.AUTO_STEPS:,} / N "
           f"rounded, {linear.MIN_AUTO_EPOCHS} to {linear.MAX_AUTO_EPOCHS}), unit rows, "
           "thresholds "
           "from a "
           f"{d.threshold_holdout:.0%} hold-out (F*/2 per label; the pooled F*/2 for labels "
           "with fewer than 5 hold-out positives). Train: wall seconds of fit, hold-out model "
           "included.", "",
           "| data | P@1/3/5 | target | best one-vs-all baseline | example-F1 / macro-F1 "
           "(thresholds) | example-F1 / macro-F1 (p ≥ 0.5) | nnz(W) (% of D×L) | train s |",
           "|---|---|---|---|---|---|---|---|"]
    timing = ["| data | lazy s | dense s | dense / lazy | max |W_lazy − W_dense| | "
              "D / mean nnz(x) |", "|---|---|---|---|---|---|"]
    rec = {s.target.stem: benchlib.load(s.target) for s in st}
    for name in ("bibtex", "delicious"):
        for s in st:
            if s.kw.get("set") != name or s.action is not accuracy:
                continue
            r = rec[s.target.stem]
            th, p5 = r["thresholds"], r["p05"]
            out.append(f"| {name}, {s.kw['label']} | {r['P@1']:.2f}/{r['P@3']:.2f}/"
                       f"{r['P@5']:.2f} | ≥ {TARGET[name]} | {BASELINE[name]} | "
                       f"{th['example_f1']:.4f} / {th['macro_f1']:.4f} | {p5['example_f1']:.4f} "
                       f"/ {p5['macro_f1']:.4f} | {r['nnz_weights']} "
                       f"({100 * r['weight_density']:.1f}%) | {r['train_s']:.1f} |")
        lazy, dense = rec[f"{name}_lazy"], rec[f"{name}_dense"]
        timing.append(f"| {name} | {lazy['train_s']:.1f} | {dense['train_s']:.1f} | "
                      f"{dense['train_s'] / lazy['train_s']:.1f}× | {dense['max_diff']:.1e} | "
                      f"{lazy['D_over_nnz']:.0f} |")
    scale = ["Scale, with the defaults (`xml-train --algorithm linear`; the loss, rate and "
             "epochs are those 'auto' chose): synthetic data (make_synthetic.py, seed 0). "
             "Train: wall seconds of the command (reading, the hold-out model, the final "
             "model, writing), 2 cores.", "",
             "| data | auto chose | nnz(W) (% of D×L) | peak RSS train MB | dense W would take "
             "| train s | peak RSS predict MB | P@1/3/5 |", "|---|---|---|---|---|---|---|---|"]
    for name, syn in SYNS.items():
        r = rec[name]
        dense_gb = syn["features"] * syn["labels"] * 8 / 1e9
        auto = r.get("resolved", {})
        scale.append(f"| {syn['points']:,} points, D = {syn['features']:,}, L = "
                     f"{syn['labels']:,} | {auto.get('loss')}, lr {auto.get('lr')}, "
                     f"{auto.get('epochs')} epochs | {r['nnz_weights']:,} "
                     f"({100 * r['weight_density']:.2f}%) | {r['train_rss']:.0f} | "
                     f"{dense_gb:.1f} GB | {r['train_s']:.0f} | {r['predict_rss']:.0f} | "
                     f"{r['P@1']:.2f}/{r['P@3']:.2f}/{r['P@5']:.2f} |")
    return "\n".join(out + [""] + timing + [""] + scale + [""] + final_table(st, rec)) + "\n"


def final_table(st, rec):
    """Means over seeds per set and setting."""
    out = [f"The final model and the label blocks: means over seeds 0-{FINAL_SEEDS - 1}, 2 "
           "threads, through the API. With a threshold hold-out the final model is trained "
           "anew on every point (--final-epochs 0, side by side with the hold-out model) or "
           "is the hold-out model continued over every point (--final-epochs N); auto: "
           f"{linear.FINAL_SHARE:g} x epochs below {linear.CONTINUE_BELOW} points per feature "
           f"on average, else 0; --label-blocks {xmlkit.Linear().label_blocks} by default. "
           "Train: wall seconds of fit (both models). Micro / macro F1: label sets by the "
           "fitted thresholds. Points per feature: nnz(X) / D of the training set.", "",
           "| data | points per feature | setting | auto chose | P@1 | P@3 | P@5 | micro-F1 | "
           "macro-F1 | train s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for name in FINAL_SETS:
        for label in dict.fromkeys(s.kw["label"] for s in st
                                   if s.action is final_model and s.kw["set"] == name):
            rs = [rec[s.target.stem] for s in st if s.action is final_model
                  and s.kw["set"] == name and s.kw["label"] == label]
            auto = rs[0]["resolved"]

            def mean(k):
                return sum(r[k] for r in rs) / len(rs)
            out.append(f"| {name} | {rs[0]['points_per_feature']:.0f} | {label} | "
                       f"{auto['loss']}, {auto['epochs']} + "
                       f"{auto['final_epochs']} epochs, {auto['label_blocks']} blocks | "
                       + " | ".join(f"{mean(k):.2f}" for k in ("P@1", "P@3", "P@5", "micro_f1",
                                                               "macro_f1"))
                       + f" | {mean('train_s'):.1f} |")
    return out


if __name__ == "__main__":
    benchlib.cli(__doc__, "linear", lambda ap: None, steps, render)
