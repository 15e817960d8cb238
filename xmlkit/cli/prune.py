"""xml-prune: PrunEX data pruning of an XC data set or feature file."""
import json

import click
import numpy as np

from xmlkit.atomic import output_target, refuse_overwrite
from xmlkit.cli.common import (CONTEXT, Log, fail, index_base_option, json_option,
                               quiet_option, read_input, run, version_option)
from xmlkit.io import read_idf, write_dataset, write_idf, write_matrix
from xmlkit.models.base import C_INT_MAX
from xmlkit.prune import DEFAULT_MIN_KEEP, DEFAULT_RESCALE, DEFAULT_THRESHOLD, prune


@click.command(context_settings=CONTEXT)
@click.argument("input_path", metavar="IN", type=click.Path(dir_okay=False))
@click.argument("output_path", metavar="OUT", type=click.Path(dir_okay=False))
@click.option("--threshold", type=float, default=DEFAULT_THRESHOLD, show_default=True,
              help="Entries whose magnitude in the unit-length row is <= this are removed.")
@click.option("--tfidf/--no-tfidf", default=True, show_default=True,
              help="Weight raw term counts by tf-idf first (tf = log(1 + count), idf = "
                   "log(1 + N / n_j)); --no-tfidf for data that are already weighted.")
@click.option("--idf-out", type=click.Path(dir_okay=False),
              help="Save the idf computed on IN (the training set), one value per feature.")
@click.option("--idf-in", type=click.Path(dir_okay=False),
              help="Transform IN (a test set) with this saved training idf instead; "
                   "features unseen in training get weight 0 and are dropped.")
@click.option("--min-keep", type=click.IntRange(0, C_INT_MAX), default=DEFAULT_MIN_KEEP,
              show_default=True,
              help="Keep each row's K largest entries even below the threshold, so no "
                   "point loses all its features (0: no floor).")
@click.option("--rescale/--no-rescale", default=DEFAULT_RESCALE, show_default=True,
              help="Scale each row's kept entries to unit length again; --no-rescale "
                   "leaves them at their values in the unit-length row (as the paper).")
@index_base_option
@json_option
@quiet_option
@version_option
def command(input_path, output_path, threshold, tfidf, idf_out, idf_in, min_keep, rescale,
            index_base, as_json, quiet):
    """Prune IN (a single-file data set 'N D L' or a feature file 'N D') into OUT,
    of the same layout: labels and point order unchanged, every row scaled to
    unit length (after tf-idf weighting unless --no-tfidf), entries <= the
    threshold removed, and the rest scaled to unit length again (unless
    --no-rescale). OUT is written atomically (compressed by its suffix); IN
    '-' reads standard input, OUT '-' writes standard output (the summary then
    goes to stderr).

    Prints nnz before and after, the share removed and the rows the threshold
    emptied (and how many of them --min-keep saved), or JSON with --json.
    """
    log = Log(quiet)
    if idf_in and idf_out:
        fail("give either --idf-in (transform a test set) or --idf-out (save the training "
             "idf), not both")
    if not tfidf and (idf_in or idf_out):
        fail("--idf-in/--idf-out need --tfidf")
    refuse_overwrite([("output", output_path), ("idf file --idf-out", idf_out)],
                     [("input", input_path), ("idf file --idf-in", idf_in)])
    to_stdout = output_path == "-"
    for path in ([] if to_stdout else [output_path]) + ([idf_out] if idf_out else []):
        output_target(path)                 # before any work: a usable output location
    data = read_input(log, input_path, index_base)
    X = data.feature_rows
    idf = read_idf(idf_in, X.shape[1]) if idf_in else None
    if tfidf and X.nnz and X.data.min() < 0:
        at = int(np.argmax(X.data < 0))
        row = int(np.searchsorted(X.indptr, at, side="right")) - 1
        fail(f"{input_path}:{row + 2}: the value {X.data[at]:g} is negative, but tf-idf "
             "weights term counts (--no-tfidf for data that are already weighted)")
    if tfidf and X.nnz and not np.all(X.data == np.floor(X.data)):
        log(f"warning: {input_path} holds non-integer values; tf-idf treats them as term "
            "counts (use --no-tfidf for data that are already weighted)")
    P, idf, stats = prune(X, threshold=threshold, tfidf=tfidf, idf=idf, min_keep=min_keep,
                          rescale=rescale)
    if data.layout == "dataset":
        write_dataset(output_path, P, data.label_rows, index_base=index_base)
    else:
        write_matrix(output_path, P, precision=7, fixed=False, index_base=index_base)
    if idf_out:
        write_idf(idf_out, idf)
    stats.update(input=str(input_path), output=str(output_path), threshold=threshold,
                 tfidf=tfidf, idf="in: " + str(idf_in) if idf_in else
                 ("computed" if tfidf else None), min_keep=min_keep, rescale=rescale)
    # (with OUT "-" the data go to stdout, so the summary goes to stderr)
    text = json.dumps(stats, indent=2) if as_json else format_summary(stats)
    click.echo(text, err=to_stdout)


def format_summary(s):
    emptied = f"{s['emptied']}"
    if s["min_keep"]:
        emptied += f" (saved by --min-keep {s['min_keep']}: {s['saved']})"
    else:
        emptied += " (left empty: --min-keep 0)"
    rows = [("rows", f"{s['rows']}"), ("nnz before", f"{s['nnz_before']}"),
            ("nnz after", f"{s['nnz_after']}"),
            ("removed", f"{100 * s['removed_fraction']:.2f}%"),
            ("rows emptied by the threshold", emptied),
            ("rows without any weight", f"{s['no_weight']}")]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main():
    run(command, "xml-prune")
