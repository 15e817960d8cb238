"""xml-predict: score a feature file with a trained model folder."""
import copy
import functools
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import click

from xmlkit import store
from xmlkit._memory import one_heap
from xmlkit.atomic import output_target, refuse_overwrite
from xmlkit.cli.common import (CONTEXT, Log, Timeline, fail, index_base_option, named_algorithm,
                               quiet_option, run, text_input, version_option)
from xmlkit.cluster import CONNECT_TIMEOUT
from xmlkit.explanation import EXPLAIN_K
from xmlkit.io import is_stream, iter_xc, matrix_writer
from xmlkit.cli.options import predict_click_options
from xmlkit.models import REGISTRY, load_model
from xmlkit.models.base import C_INT_MAX, usable_threads

PIECE_ROWS = 20000      # rows read, scored and written at a time


@click.argument("features", type=click.Path(dir_okay=False))
@click.argument("scores", type=click.Path(dir_okay=False))
@click.argument("model_dir", type=click.Path(file_okay=False))
@click.option("-T", "--threads", type=click.IntRange(1, C_INT_MAX), default=1, show_default=True,
              help="Threads scoring rows in parallel.")
@click.option("-s", "--start-tree", type=click.IntRange(0, C_INT_MAX), default=None,
              help="First tree to use [default: the first tree in the folder].")
@click.option("-t", "--trees", "n_trees", type=click.IntRange(1, C_INT_MAX), default=None,
              help="Number of trees to use from --start-tree on [default: all of them].")
@click.option("-k", "--top-k", type=click.IntRange(1, C_INT_MAX), default=None,
              help="Keep only the k best-scored labels per row; with label sets "
                   "(--decision threshold or f1), the k likeliest of each set "
                   "[default: every score].")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Score blocks of rows as tasks on a Dask cluster: a scheduler address "
                   f"(tcp://HOST:8786, given up after {CONNECT_TIMEOUT} s without an answer) "
                   "or local:N (N worker processes here, N at most its cores); the blocks are "
                   "written in order as they arrive, the same file byte for byte. Needs "
                   "pip install 'xmlkit[dask]'.")
@click.option("--fewer-features", is_flag=True, default=False,
              help="Score a FEATURES file of fewer columns (D) than the model's, the missing "
                   "last columns taken as zeros (a file of another width is otherwise refused: "
                   "it is usually another featurizer's).")
@click.option("--text", is_flag=True, default=False,
              help="FEATURES is a file of documents (see --text-format; labels, if any, are "
                   "ignored), featurized as MODEL_DIR's training documents were (a model "
                   "trained with xml-train --text). Needs pip install 'xmlkit[text]'.")
@click.option("--raw", "raw", is_flag=True, default=False,
              help="Write the model's own scores where MODEL_DIR holds a calibration "
                   "(xml-calibrate, xml-train --calibrate), instead of the probabilities it "
                   "maps them to. A calibration maps the scores of the whole model with its "
                   "own options: -s/-t picking some of its trees, or a family option that "
                   "scores otherwise, need --raw.")
@click.option("--names", is_flag=True, default=False,
              help="With --text: write SCORES as JSON Lines in input order, "
                   "{\"id\", \"labels\": [names, best first], \"scores\": [...]}, "
                   "instead of a score matrix.")
@click.option("--explain", "explain", type=click.IntRange(1, C_INT_MAX), default=None,
              metavar="N",
              help="Write SCORES as JSON Lines explaining each row's labels (-k of them, "
                   f"{EXPLAIN_K} when not given, or its label set): one object per row, "
                   "{\"labels\": [best first], \"scores\": [...], \"features\": [per label "
                   "[[feature, contribution], ...]]} (with --text also \"id\"), the N features "
                   "of largest |contribution| per label. A contribution is the label's score "
                   "minus its score with the feature removed from the row (exact; on a "
                   "calibrated folder, of the probability), or for linear the feature's term "
                   "w·x of the margin. With --text --names the features are terms and the "
                   "labels names, and SCORES '-' on a terminal prints a table.")
@text_input
@index_base_option
@quiet_option
@version_option
def _command(features, scores, model_dir, threads, start_tree, n_trees, top_k, algorithm,
             dask_address, fewer_features, text, raw, names, explain, text_format, label_sep,
             index_base, quiet, **family):
    """Write the scores of MODEL_DIR's model for the points of FEATURES (a feature
    file 'N D', or a single-file data set 'N D L' whose labels are ignored) to
    SCORES, a score matrix 'N L' (6 decimals, labels ascending).

    MODEL_DIR is an xmlkit model folder or a model folder of the original C++
    FastXML, PfastreXML (param + <t>.tree [+ w]) or Parabel tools (its param
    file names the default trees).
    Rows are read, scored and written in pieces, so memory does not grow with
    the number of points. The SCORES file is written atomically and compressed
    by its suffix (.gz, .bz2, .xz); '-' as FEATURES reads standard input, as
    SCORES writes standard output.

    FAMILIES
    """
    log = Log(quiet)
    timeline = Timeline()
    timeline.mark("main")
    refuse_overwrite([("score file", scores)], [("document file" if text else "feature file",
                                                features), ("model folder", model_dir)])
    if dask_address is not None:            # before any work: a usable cluster address
        from xmlkit import cluster
        cluster.parse_address(dask_address)
        cluster.require()
    if scores != "-":
        output_target(scores)               # before any work: a usable output location
    threads = usable_threads(threads)
    trees = _tree_range(model_dir, start_tree, n_trees)
    model = load_model(model_dir, trees, threads=threads)
    timeline.mark("opened")
    if algorithm is not None and model.algorithm != algorithm:
        fail(f"{model_dir} holds a {model.algorithm} model, not {algorithm} (--algorithm)")
    calibration, calibrate, top_k, family = _calibration(log, model, model_dir, trees, raw,
                                                         top_k, family)
    extra = predict_options(model, **family)
    # rows are read, scored and written in pieces (memory does not grow with
    # the file), except for embed's F1 inference, which needs every row at once
    piece = None if model.needs_all_rows(**extra) else PIECE_ROWS
    if not text and (names or text_format is not None):
        fail(f"--{'names' if names else 'text-format'} goes with --text")
    if explain is not None:
        if dask_address is not None:
            fail("--explain explains on this machine: not with --dask")
        from xmlkit.cli import explain as explaining
        how = explaining.explainer(
            model, explain, dict(k=EXPLAIN_K if top_k is None else top_k, threads=threads,
                                 **extra), calibration, calibrate)
        if text:
            explaining.explain_text(log, features, scores, model_dir, model, piece, names,
                                    text_format, label_sep, index_base, how)
        else:
            explaining.explain_xc(log, features, scores, model, piece, index_base, how,
                                  functools.partial(_check_width, features, model, model_dir,
                                                    fewer_features))
        return
    if calibrate is None and top_k is not None and _own_label_sets(model, extra):
        # (the family's own label sets: -k keeps the k likeliest of each, as
        # it does for a calibration's)
        from xmlkit.csr import as_rows, cap_rows
        k_sets, top_k = top_k, None
        calibrate = lambda S: cap_rows(as_rows(S), k_sets)     # noqa: E731
    if text:
        if dask_address is not None:
            fail("--text scores on this machine: not with --dask")
        _predict_text(log, features, scores, model_dir, model, piece, names, text_format,
                      label_sep, index_base, dict(k=top_k, threads=threads, **extra), calibrate)
        return
    _predict_xc(log, timeline, features, scores, model_dir, model, piece, fewer_features,
                index_base, dask_address, dict(k=top_k, threads=threads, **extra), calibrate)


def _calibration(log, model, model_dir, trees, raw, top_k, family):
    """(calibration, calibrate, k, family): the folder's calibration (or None),
    the function applied to each scored piece
    (MODEL_DIR's calibration: probabilities, or label sets with --decision
    threshold), the k to score and the family options left to the model;
    calibrate is None for --raw, a folder without a calibration, or a
    decision of the family's own (embed's f1). Refused (exit 2) where the
    trees picked or a family option make scores other than those the
    calibration was fitted to."""
    from xmlkit.calibration import DECISIONS
    from xmlkit.models.calibrated import Calibrated, OtherScores, folder_calibration
    calibration = None if raw else folder_calibration(model_dir)
    if calibration is None:
        manifest = store.read_manifest(model_dir) if store.is_model_folder(model_dir) \
            else {}
        if not raw and store.calibration_planned(manifest):
            fail(f"{model_dir}: {store.unfinished(manifest, None, calibrated=False)} (--raw)")
        return None, None, top_k, family
    decision = family.get("decision") or model.predict_params().get("decision") or DECISIONS[0]
    if decision not in DECISIONS:
        return None, None, top_k, family
    given = predict_options(model, **{**family, "decision": None, "threshold": None})
    try:        # (the model gives its ranked scores; the calibration decides: Calibrated's)
        top_k, family, decide = Calibrated(model, calibration).plan(
            top_k, decision, family.get("threshold"), model_dir, trees, **given)
    except OtherScores as exc:
        if exc.param == "trees":
            fail(f"{model_dir}: its calibration maps the scores of all its trees, not of the "
                 f"{len(trees)} that -s/-t pick: --raw writes their own scores")
        fail(f"{model_dir}: its calibration maps the model's own scores, not those of "
             f"--{exc.param.replace('_', '-')} {given[exc.param]}: --raw writes those")
    log(f"writing {'label sets of ' if decision == DECISIONS[1] else ''}probabilities: the "
        f"scores mapped by {model_dir}'s calibration (--raw for the model's own)")
    return calibration, decide, top_k, family


def _predict_xc(log, timeline, features, scores, model_dir, model, piece, fewer_features,
                index_base, dask_address, kwargs, calibrate=None):
    """xml-predict on a feature file: its rows in pieces of `piece` rows (None:
    all at once), scored here or on the Dask cluster, written to `scores`."""
    stream = is_stream(features)
    header, pieces = iter_xc(features, piece, index_base, stream=stream)
    n_rows, n_cols = header[0], header[1]
    _check_width(features, model, model_dir, fewer_features, n_cols)
    start = time.perf_counter()
    with log.progress(n_rows, "predicting", "points") as bar, \
            matrix_writer(scores, n_rows, model.n_labels_, index_base=index_base) as write:
        if dask_address is None:
            score_pieces(model, pieces, write, kwargs, bar.update, stdout=scores == "-",
                         flush=stream and scores == "-", timeline=timeline,
                         calibrate=calibrate)
        else:
            from xmlkit import cluster
            with cluster.connect(dask_address) as client:
                rows = (part.feature_rows for part in pieces)
                for S in cluster.DaskExecutor(client).predict_blocks(
                        model, kwargs, rows, n_rows, whole=piece is None):
                    write(S if calibrate is None else calibrate(S))
                    bar.update(S.shape[0])
    seconds = time.perf_counter() - start
    timeline.mark("end")
    timeline.save()
    n_trees = len(getattr(model, "trees_", None) or ())
    what = f"{n_trees} trees" if n_trees else model.algorithm
    n_rows = bar.n          # (the rows read: a header may leave N unknown)
    log(f"read and scored {n_rows} points with {what} in {seconds:.2f} s "
        f"({1000 * seconds / max(1, n_rows):.3f} ms/point) -> {scores}")


def _check_width(features, model, model_dir, fewer_features, n_cols):
    """Refuse a feature file of another width than the model's (fewer
    columns only with --fewer-features)."""
    if n_cols > model.n_features_in_ or (n_cols < model.n_features_in_ and not fewer_features):
        hint = "" if n_cols > model.n_features_in_ else \
            " (--fewer-features scores it, the missing columns read as zeros)"
        fail(f"{features} has D = {n_cols} features but the model in {model_dir} was trained "
             f"on D = {model.n_features_in_}: features of another featurizer or data set?"
             + hint)


def score_pieces(model, pieces, write, kwargs, progress, stdout=False, flush=False,
                 timeline=None, calibrate=None):
    """Score XCFile `pieces` in order with `model` and write them (a
    MatrixWriter): each piece scored and formatted on the threads (the
    forests: in blocks of rows) while the next one is read; on one thread,
    its text made as it is written.

    A forest's mapped trees are checked as they are read (the blocks the
    rows reach), so that a few rows cost a few blocks; written to a file
    (replaced only when every row is scored), a damaged block stops the
    command before the file appears. Written to standard output (`stdout`),
    every tree is checked whole first, so that no row is written by a
    command that then fails: while the first rows are read, or, for a
    stream (`flush`: each piece written out as soon as it is scored),
    before the first row is read. Otherwise each tree's pages leave memory
    once the rows are routed through it (memory about a tree per thread).
    timeline (cli.common.Timeline): marks "first_piece" when the first rows
    are read, "scored" when the last are written. calibrate(S), when given,
    maps each piece's scores before it is formatted."""
    threads = kwargs["threads"]
    forest = hasattr(model, "verify")
    with ThreadPoolExecutor(2) as helper:
        checks = None
        if forest and flush:
            model.verify(threads)
        elif forest and stdout:
            checks = helper.submit(model.verify, threads)
        more = {"release": True} if forest and not flush else {}
        # (on one thread a piece's text is made as it is written, not held whole)
        fmt = write.format if threads > 1 else functools.partial(write.format, lazy=True)
        for part in (pieces if flush else _read_ahead(pieces, helper)):
            if timeline is not None and "first_piece" not in timeline.marks:
                timeline.mark("first_piece")
            finish = fmt if calibrate is None else (lambda S: fmt(calibrate(S)))
            for text in model.predict_pieces(part.feature_rows, progress=progress,
                                             finish=finish, **kwargs, **more):
                if checks is not None:
                    checks.result()             # (nothing written before it passed)
                    checks = None
                write.write_text(text)
            if flush:
                write.flush()
        if checks is not None:
            checks.result()
    if timeline is not None:
        timeline.mark("scored")


def _read_ahead(items, pool):
    """The items of iterator `items`, each next one made on `pool` while the
    caller works on the one before."""
    items = iter(items)
    end = object()
    ahead = pool.submit(next, items, end)
    while True:
        item = ahead.result()
        if item is end:
            return
        ahead = pool.submit(next, items, end)
        yield item


def _predict_text(log, documents, scores, model_dir, model, piece, names, text_format,
                  label_sep, index_base, kwargs, calibrate=None):
    """xml-predict --text: documents featurized as the model's training
    documents were, scored piece by piece; named JSON Lines (--names) or a
    score matrix (then the documents are counted first, for its header)."""
    from xmlkit.text import iter_documents, model_text, names_writer
    featurizer, labels = model_text(model_dir, model)
    chunk = piece or 2**62
    # a stream of documents (a pipe to standard output): each answered as it
    # arrives, the model checked whole before the first is read
    stream = names and scores == "-" and is_stream(documents)
    if scores == "-" and hasattr(model, "verify"):
        model.verify(kwargs["threads"])         # (no line written by a run that fails)

    def pieces():
        for docs in iter_documents(documents, text_format, label_sep, chunk=chunk,
                                   stream=stream):
            yield docs.ids, featurizer.transform(docs.texts)
    start, n_rows = time.perf_counter(), 0
    with log.progress(None, "predicting", "documents") as bar:
        if names:
            with names_writer(scores, labels, flush=stream) as write:
                for ids, X in pieces():
                    S = model.predict(X, progress=bar.update, **kwargs)
                    write(ids, S if calibrate is None else calibrate(S))
                    n_rows += len(ids)
        else:
            if documents == "-":
                parts = list(pieces())
                n_rows = sum(len(ids) for ids, _ in parts)
            else:
                n_rows = sum(len(d) for d in iter_documents(documents, text_format, label_sep,
                                                            chunk=chunk))
                parts = pieces()
            with matrix_writer(scores, n_rows, model.n_labels_, index_base=index_base) as write:
                for ids, X in parts:
                    S = model.predict(X, progress=bar.update, **kwargs)
                    write(S if calibrate is None else calibrate(S))
    seconds = time.perf_counter() - start
    log(f"featurized and scored {n_rows} documents in {seconds:.2f} s -> {scores}")


def predict_options(model, **given):
    """predict() keyword arguments from the family options (name -> value,
    None when not given): those given, once the model has checked them with
    the values it recorded for the others (its rules: predict_params); an
    option the family does not take is an error."""
    takes = model.PREDICT_PARAMS
    wrong = sorted(n for n, v in given.items() if v is not None and n not in takes)
    if wrong:
        names = ", ".join("--" + n.replace("_", "-") for n in wrong)
        fail(f"{names} cannot be used with a {model.algorithm} model")
    out = {n: v for n, v in given.items() if n in takes and v is not None}
    model.predict_params(**out)
    return out


def _own_label_sets(model, extra):
    """Whether the model itself writes label sets with these options (a
    decision of its own other than scores: embed's and linear's)."""
    decision = extra.get("decision") or model.predict_params().get("decision")
    return decision not in (None, "scores")


def _tree_range(model_dir, start_tree, n_trees):
    """Trees picked by -s/-t, or None for the model's default set."""
    if start_tree is None and n_trees is None:
        return None
    if n_trees is None:
        from xmlkit.models import tree_indices
        present = [t for t in tree_indices(model_dir) if t >= start_tree]
        if not present:
            fail(f"{model_dir}: has no tree numbered {start_tree} or above")
        return present
    if start_tree is None:
        from xmlkit.models import tree_indices
        present = tree_indices(model_dir)
        start_tree = present[0] if present else 0      # (none: the loader says why)
    return list(range(start_tree, start_tree + n_trees))


ALL_FAMILIES = """The options after -k are those of the families named in their help;
    `xml-predict --algorithm NAME --help` lists one family's."""
ONE_FAMILY = """The options below are those of --algorithm ALGORITHM (MODEL_DIR must
    hold a model of it); each family lists its own with `xml-predict
    --algorithm NAME --help`."""


def make_command(algorithm=None):
    """xml-predict with the options of every family, or of `algorithm`'s."""
    @functools.wraps(_command)
    def command(**kwargs):
        if kwargs["algorithm"] != algorithm:
            # (the options were chosen by the first --algorithm, click kept the last)
            fail("--algorithm is given more than once: name one family")
        return _command(**kwargs)
    text = ONE_FAMILY.replace("ALGORITHM", algorithm) if algorithm else ALL_FAMILIES
    command.__doc__ = _command.__doc__.replace("FAMILIES", text)
    family = [click.Option(["--algorithm"], type=click.Choice(sorted(REGISTRY)), default=None,
                           help="Only the options of this family (and --help lists only "
                                "them); MODEL_DIR must hold a model of it."),
              *predict_click_options(REGISTRY, algorithm)]
    # (click keeps the decorators' options bottom-up: the family's go right after -k)
    params = list(_command.__click_params__)
    if algorithm and not REGISTRY[algorithm].PICKABLE:     # (no trees to pick: not shown)
        params = [copy.copy(p) for p in params]
        for p in params:
            if p.name in ("start_tree", "n_trees"):
                p.hidden = True
    at = next(i for i, p in enumerate(params) if p.name == "top_k")
    command.__click_params__ = params[:at] + family[::-1] + params[at:]
    return click.command(context_settings=CONTEXT)(command)


def main():
    one_heap()
    run(make_command(named_algorithm(sys.argv[1:])), "xml-predict")
