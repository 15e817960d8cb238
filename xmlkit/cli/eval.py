"""xml-eval: ranking metrics of a score file against true labels."""
import json
import math

import click

from xmlkit.cli.common import (CONTEXT, Log, fail, index_base_option, json_option,
                               quiet_option, read_input, run, text_input, version_option)
from xmlkit.io import read_inv_propensity
from xmlkit.models.base import C_INT_MAX
from xmlkit.metrics import (DEFAULT_KS, PROPENSITY_PRESETS, binned_precision, calibrations,
                            frequency_bins, inverse_propensity, label_sets, propensity_ab,
                            ranking_metrics, set_metrics)

ROW_ORDER = ("P", "nDCG", "PSP", "PSnDCG", "R", "ECE")


def parse_ks(text):
    try:
        ks = sorted({int(t) for t in text.split(",")})      # (an empty item: a typo)
    except ValueError:
        ks = []
    if not ks or ks[0] < 1 or ks[-1] > C_INT_MAX:
        fail(f"-k takes comma-separated integers from 1 to {C_INT_MAX} such as 1,3,5, "
             f"not '{text}'")
    return ks


def format_table(metrics, ks):
    """Rows P, nDCG, PSP, PSnDCG, R, ECE; columns @k; percent with 2 decimals."""
    lines = ["metric  " + "".join(f"{'@' + str(k):>9}" for k in ks)]
    for name in ROW_ORDER:
        if f"{name}@{ks[0]}" not in metrics:
            continue
        cells = "".join(f"{100 * metrics[f'{name}@{k}']:9.2f}" for k in ks)
        lines.append(f"{name:<8}{cells}")
    return "\n".join(lines)


@click.command(context_settings=CONTEXT)
@click.argument("scores", type=click.Path(dir_okay=False))
@click.argument("true_labels", type=click.Path(dir_okay=False))
@click.option("-k", "ks", default=",".join(map(str, DEFAULT_KS)), show_default=True,
              help="Cut-offs k, comma-separated.")
@click.option("--train-labels", type=click.Path(dir_okay=False),
              help="Training labels (label file or single-file data set): inverse "
                   "propensities for PSP@k/PSnDCG@k are computed from them with A and B.")
@click.option("--inv-propensity", type=click.Path(dir_okay=False),
              help="File with one inverse propensity per label (instead of --train-labels).")
@click.option("--propensity-preset", type=click.Choice(sorted(PROPENSITY_PRESETS)),
              default="default", show_default=True,
              help="A/B of the propensity model: " + ", ".join(
                  f"{k} {a}/{b}" for k, (a, b) in sorted(PROPENSITY_PRESETS.items())) + ".")
@click.option("-A", "--A", "prop_a", type=float, default=None,
              help="A of the propensity model (overrides the preset's).")
@click.option("-B", "--B", "prop_b", type=float, default=None,
              help="B of the propensity model (overrides the preset's).")
@click.option("--sets", is_flag=True,
              help="SCORES holds predicted label sets (every stored entry is a predicted "
                   "label): print Hamming loss, micro-, macro- and example-F1 instead.")
@click.option("--threshold", type=float, default=None,
              help="Predict the labels scored >= this and print the label-set metrics, as "
                   "--sets does.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG: the reliability diagram of SCORES' top k (k: the largest "
                   "-k), and with --train-labels the tail: labels in ten bins by training "
                   "frequency, per bin its share of P@k and PSP@k for SCORES and every "
                   "--compare file. Needs pip install 'xmlkit[plot]'.")
@click.option("--compare", "compare", type=click.Path(dir_okay=False), multiple=True,
              help="Another score file of the same points, drawn beside SCORES in --plot "
                   "and binned in --json (repeatable).")
@click.option("--text", is_flag=True, default=False,
              help="SCORES (and every --compare file) are named predictions (xml-predict "
                   "--text --names) and TRUE_LABELS (and --train-labels) files of documents "
                   "with label names (see --text-format); labels are matched by name.")
@text_input
@index_base_option
@json_option
@quiet_option
@version_option
def command(scores, true_labels, ks, train_labels, inv_propensity, propensity_preset,
            prop_a, prop_b, sets, threshold, plot_path, compare, text, text_format, label_sep,
            index_base, as_json, quiet):
    """Evaluate SCORES (a score matrix, header 'N L') against TRUE_LABELS (a label
    file 'N L' or a single-file data set 'N D L').

    Prints P@k, nDCG@k and R@k, plus PSP@k and PSnDCG@k when propensities are
    given, and ECE@k, the calibration error of the top-k scores read as
    probabilities (equal-mass bins), in percent; with --sets or --threshold, the label-set metrics
    (Hamming loss, micro-F1, macro-F1, example-F1) as fractions. Ranking:
    stored scores only, higher score first, ties to the lower label index;
    all test points count (XC repository definitions).
    """
    log = Log(quiet)
    from xmlkit.atomic import refuse_overwrite
    refuse_overwrite([("plot", plot_path)],
                     [("score file", scores), ("true-label file", true_labels),
                      ("training-label file", train_labels),
                      ("inverse-propensity file", inv_propensity),
                      *(("compared score file", c) for c in compare)])
    ks = parse_ks(ks)
    if train_labels and inv_propensity:
        fail("give either --train-labels or --inv-propensity, not both")
    if (prop_a is not None or prop_b is not None) and not train_labels:
        fail("-A/-B need --train-labels (the propensity model is fit on training labels)")
    if compare and not train_labels:
        fail("--compare needs --train-labels (the bins are by training frequency)")
    if (plot_path or compare) and (sets or threshold is not None):
        fail("--plot and --compare are for ranking metrics, not with --sets or --threshold")
    if plot_path:
        from xmlkit.atomic import output_target
        from xmlkit.plot import require
        require()
        output_target(plot_path)

    if text:
        S, Y, named, Ytr = _read_named(log, scores, true_labels, train_labels, compare,
                                       inv_propensity, text_format, label_sep)
    elif text_format is not None:
        fail("--text-format goes with --text")
    else:
        S = read_input(log, scores, index_base, layout="matrix").features
        truth = read_input(log, true_labels, index_base)
        Y = truth.labels if truth.layout == "dataset" else truth.features
        named, Ytr = None, None
    if S.shape[0] != Y.shape[0]:
        fail(f"{scores} has {S.shape[0]} rows but {true_labels} has {Y.shape[0]} points")
    if S.shape[1] != Y.shape[1]:
        fail(f"{scores} scores {S.shape[1]} labels but {true_labels} has {Y.shape[1]}")
    if sets or threshold is not None:
        _label_set_metrics(S, Y, threshold, as_json)
        return
    if train_labels and named is None:
        tr = read_input(log, train_labels, index_base)
        Ytr = tr.labels if tr.layout == "dataset" else tr.features
    _ranking_metrics(log, S, Y, Ytr, ks, scores, true_labels, train_labels, inv_propensity,
                     (propensity_preset, prop_a, prop_b), compare, named, plot_path,
                     index_base, as_json)


def _read_named(log, scores, true_labels, train_labels, compare, inv_propensity,
                text_format, label_sep):
    """--text: the score matrices of the named predictions (SCORES first,
    then --compare's), the truth's label matrix and the training documents'
    (or None), over one label space."""
    if inv_propensity:
        fail("--inv-propensity lists labels by index: with --text give --train-labels "
             "(training documents)")
    from xmlkit.text import named_matrices, unseen_in_training
    named, Y, Ytr = named_matrices([scores, *compare], true_labels, train_labels,
                                   text_format, label_sep)
    if Ytr is not None:
        unseen = unseen_in_training(Y, Ytr)
        if unseen:
            log(f"{unseen} true label occurrences in {true_labels} name labels that no "
                f"document of {train_labels} has (counted as missed)")
    return named[0], Y, named, Ytr


def _label_set_metrics(S, Y, threshold, as_json):
    """--sets / --threshold: Hamming loss and the F1s, as fractions."""
    if threshold is not None and not math.isfinite(threshold):
        fail("--threshold must be a finite number")
    m = set_metrics(Y, label_sets(S, threshold))
    if as_json:
        click.echo(json.dumps({"n_points": int(Y.shape[0]), "n_labels": int(Y.shape[1]),
                               "threshold": threshold, "unit": "fraction", "metrics": m},
                              indent=2))
    else:
        width = max(len(k) for k in m)
        click.echo("\n".join(f"{k:<{width}}  {v:.4f}" for k, v in m.items()))


def _ranking_metrics(log, S, Y, Ytr, ks, scores, true_labels, train_labels, inv_propensity,
                     propensity, compare, named, plot_path, index_base, as_json):
    """The ranking metrics at ks (with propensities: from training labels
    Ytr and propensity = (preset, A, B), or a file), the tail bins of
    --compare and --plot, as a table or JSON."""
    q, prop = None, None
    if Ytr is not None:
        if Ytr.shape[1] != Y.shape[1]:
            fail(f"{train_labels} has {Ytr.shape[1]} labels but {true_labels} has {Y.shape[1]}")
        a, b = propensity_ab(*propensity)
        q = inverse_propensity(Ytr, a, b)
        prop = {"source": str(train_labels), "A": a, "B": b}
    elif inv_propensity:
        q = read_inv_propensity(inv_propensity, Y.shape[1])
        prop = {"source": str(inv_propensity)}
    else:
        log("PSP@k and PSnDCG@k need --train-labels or --inv-propensity; not reported")
    metrics = ranking_metrics(Y, S, ks, q)
    calibrated = calibrations(Y, S, ks)
    metrics.update({f"ECE@{k}": calibrated[k]["ECE"] for k in ks})
    reliability = calibrated[ks[-1]]
    tail = None
    if Ytr is not None:
        others = []
        for n, path in enumerate(compare):
            O = named[n + 1] if named is not None else \
                read_input(log, path, index_base, layout="matrix").features
            if O.shape != S.shape:
                fail(f"{path} is {O.shape[0]} x {O.shape[1]} but {scores} is "
                     f"{S.shape[0]} x {S.shape[1]}")
            others.append((str(path), O))
        tail = tail_bins(Y, Ytr, q, ks[-1], [(str(scores), S)] + others)
    if plot_path:
        from xmlkit.plot import evaluation_figure
        evaluation_figure(reliability, tail, plot_path)
        log(f"plot -> {plot_path}")
    if as_json:
        out = {"n_points": int(Y.shape[0]), "n_labels": int(Y.shape[1]), "k": ks,
               "unit": "percent", "propensity": prop,
               "metrics": {k: (None if math.isnan(v) else 100 * v) for k, v in metrics.items()}}
        out["calibration"] = reliability
        if tail is not None:
            out["tail_bins"] = tail
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(format_table(metrics, ks))


def tail_bins(Y, Ytr, q, k, named_scores, n_bins=10):
    """The numbers behind --plot: labels in n_bins bins by training
    frequency (rarest first); per bin and score file, the bin's part of P@k
    and PSP@k (percentage points; they sum to P@k and PSP@k) and its share
    of the hits."""
    bins, info = frequency_bins(Ytr, n_bins)
    n_bins = len(info)
    per_file = {}
    for name, S in named_scores:
        r = binned_precision(Y, S, bins, n_bins, k, q)
        total = max(1, int(r["hits"].sum()))
        per_file[name] = [{"P@k": 100 * float(r["P@k"][b]),
                           "PSP@k": None if r["PSP@k"] is None else 100 * float(r["PSP@k"][b]),
                           "hits": int(r["hits"][b]),
                           "share_of_hits": float(r["hits"][b] / total)}
                          for b in range(n_bins)]
    return {"k": int(k), "bins": info, "scores": per_file}


def main():
    run(command, "xml-eval")
