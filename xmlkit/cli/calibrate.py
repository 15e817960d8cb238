"""xml-calibrate: fit a model folder's calibration on a validation file."""
import json
import os

import click

from xmlkit.cli.common import (CONTEXT, Log, fail, index_base_option, json_option,
                               quiet_option, read_input, run, version_option)
from xmlkit.calibration import CANDIDATES, FIT_RANKS
from xmlkit.models.base import C_INT_MAX, usable_threads


@click.command(context_settings=CONTEXT)
@click.argument("data", type=click.Path(dir_okay=False))
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("-k", "--top-k", type=click.IntRange(1, C_INT_MAX), default=FIT_RANKS,
              show_default=True,
              help="The ranks with a map each: each point's k best-scored labels, "
              "their maps fitted together (at one score, a lower rank no more probable); the "
              "ranks after them, up to --candidates, get a map per band (k to 2k, 2k to "
              "4k, ...).")
@click.option("--candidates", type=click.IntRange(1, C_INT_MAX), default=CANDIDATES,
              show_default=True, help="The best-scored labels per point among which the "
              "label sets of xml-predict --decision threshold are chosen (and their "
              "thresholds fitted).")
@click.option("-T", "--threads", type=click.IntRange(1, C_INT_MAX), default=1,
              show_default=True, help="Threads scoring DATA's rows in parallel.")
@index_base_option
@json_option
@quiet_option
@version_option
def command(data, model_dir, top_k, candidates, threads, index_base, as_json, quiet):
    """Calibrate the model in MODEL_DIR on DATA (a single-file data set 'N D L' of
    points it was not trained on): fit a monotone map from its scores to the
    probability that a label is relevant (isotonic regression on DATA's top-k
    scores, ranks and labels) and per-label thresholds on those probabilities for the
    micro-F1 of label sets, and keep them in the folder (calibration.npz),
    replacing a calibration it held. xml-predict then writes probabilities, each
    row's ranking unchanged (--raw: the model's own scores), and label sets with
    --decision threshold; training into the folder drops the calibration.
    Prints ECE@k on DATA before and after (in-sample for the map).
    """
    log = Log(quiet)
    from xmlkit import store
    from xmlkit.atomic import refuse_overwrite
    from xmlkit.calibration import Calibration
    from xmlkit.models.calibrated import ranked, save_to_folder
    from xmlkit.metrics import calibration
    from xmlkit.models import load_model
    refuse_overwrite([], [("data file", data), ("model folder", model_dir)])
    if not store.is_model_folder(model_dir):
        if not os.path.isdir(model_dir) or os.path.lexists(os.path.join(model_dir,
                                                                        store.MANIFEST)):
            store.read_manifest(model_dir)  # (why not: missing, not a folder, its manifest)
        fail(f"{model_dir}: not an xmlkit model folder (a C++ tool's folder holds no "
             "calibration)")
    store.require_current(model_dir, store.read_manifest(model_dir), "keep a calibration in it")
    threads = usable_threads(threads)
    model = load_model(model_dir, threads=threads)
    rows = read_input(log, data, index_base, layout="dataset")
    X, Y = rows.feature_rows, rows.label_rows
    if X.shape[1] != model.n_features_in_ or Y.shape[1] != model.n_labels_:
        fail(f"{data} has D = {X.shape[1]} features and L = {Y.shape[1]} labels but the model "
             f"in {model_dir} has D = {model.n_features_in_} and L = {model.n_labels_}")
    if X.shape[0] == 0:
        fail(f"{data}: the header says N = 0 points: nothing to calibrate on")
    # (scored once: the map's ranks and the candidates of the thresholds)
    S = model.predict(X, k=max(top_k, candidates), threads=threads, **ranked(model))
    fitted = Calibration.fit(Y, S, top_k, candidates)
    before = calibration(Y, S, top_k)["ECE"]
    after = calibration(Y, fitted.probabilities(S), top_k)["ECE"]
    save_to_folder(model_dir, fitted)
    out = {"model": str(model_dir), "data": str(data), "k": top_k, "points": int(X.shape[0]),
           "knots": int(len(fitted.map.x)),
           "deep_knots": [int(len(m.x)) for _, m in fitted.deep],
           "candidates": candidates,
           "threshold": fitted.threshold, f"ECE@{top_k} before": 100 * before,
           f"ECE@{top_k} after": 100 * after, "unit": "percent"}
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(f"calibrated {model_dir} on {X.shape[0]} points of {data}: ECE@{top_k} "
                   f"{100 * before:.2f} -> {100 * after:.2f} (percent, on these points), "
                   f"{fitted.knots()}")


def main():
    run(command, "xml-calibrate")
