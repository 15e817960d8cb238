"""xml-train: grow a model from XC training files into a model folder.

Each family has its own options (xmlkit.cli.options), shown by
`xml-train --algorithm NAME --help`; their defaults are the estimators'.
"""
import json
import sys
import time

import click
import numpy as np

from xmlkit.cli.common import (CONTEXT, FEATURIZER_PARAMS, Log, fail, featurizer_options,
                               given_on_command_line, index_base_option, json_option,
                               named_algorithm, quiet_option, read_input, run,
                               text_input_options, version_option)
from xmlkit.cli.options import click_options, families_with, flag_of
from xmlkit import store
from xmlkit._memory import map_large_blocks
from xmlkit.atomic import refuse_overwrite, writable_folder
from xmlkit.models.calibrated import HOLDOUT
from xmlkit.driver import fit_folder
from xmlkit.errors import InvalidParameterError
from xmlkit.models import REGISTRY, get_class
from xmlkit.checks import empty_side

DEFAULT_ALGORITHM = "fastxml"


class FamilyCommand(click.Command):
    """A command whose options are those of one family: an option of another
    family is refused with a message that names the family it belongs to."""

    algorithm = DEFAULT_ALGORITHM

    def format_options(self, ctx, formatter):
        """--help: the command's own options, then the family's by purpose
        (its PARAM_GROUPS: "Tree options", "Solver options", ...)."""
        family = REGISTRY[self.algorithm]
        order = [n for _, names in family.PARAM_GROUPS for n in names]
        sections = {None: []}
        for param in sorted(self.get_params(ctx), key=lambda p: order.index(p.name)
                            if p.name in order else -1):
            record = param.get_help_record(ctx)
            if record is not None:
                sections.setdefault(family.param_group(param.name), []).append(record)
        for title in [None, *(t for t, _ in family.PARAM_GROUPS)]:
            if sections.get(title):
                with formatter.section(f"{title} options" if title else "Options"):
                    formatter.write_dl(sections[title])

    def parse_args(self, ctx, args):
        ctx.meta["xmlkit.args"] = list(args)        # (what --show-defaults was given with)
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            owners = families_with(exc.option_name) or \
                (sorted(DASK_FAMILIES) if exc.option_name in ("--dask", "--dask-data") else [])
            if owners:
                raise click.UsageError(
                    f"{exc.option_name} is an option of --algorithm {' / '.join(owners)}, "
                    f"not of {self.algorithm}", ctx) from None
            raise


#: the families whose work --dask can spread (ModelBase.DASK_TASKS)
DASK_FAMILIES = tuple(sorted(a for a, cls in REGISTRY.items() if cls.DASK_TASKS))
DASK_DATA = ("scatter", "shared")


def dask_options():
    from xmlkit.cluster import CONNECT_TIMEOUT, INSTALL
    return [
        click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
                     help="Run the tasks (one per tree; per label block for linear) on a Dask "
                          "cluster: a scheduler address (tcp://HOST:8786, given up after "
                          f"{CONNECT_TIMEOUT} s without an answer) or local:N (N worker "
                          "processes on this machine, N at most its cores). The model is the "
                          f"same, byte for byte, as without it. Needs {INSTALL}."),
        click.option("--dask-data", type=click.Choice(DASK_DATA), default="scatter",
                     show_default=True,
                     help="How the training data reach the Dask workers: scatter (sent from "
                          "here, once per worker) or shared (every worker reads the same "
                          "path itself)."),
    ]


def _train(ctx, algorithm, paths, index_base, as_json, quiet, params):
    if params["text_settings"] is not None and len(paths) != 2:
        fail(f"with --text: expected DOCUMENTS MODEL_DIR, got {len(paths)} paths")
    if len(paths) not in (2, 3):
        fail(f"expected DATA MODEL_DIR or FEATURES LABELS MODEL_DIR, got {len(paths)} paths")
    address = params.pop("dask_address", None)
    dask_data = params.pop("dask_data", "scatter")
    names = ["training data"] if len(paths) == 2 else ["feature file", "label file"]
    refuse_overwrite([], [*zip(names, paths[:-1]),
                          ("inverse-propensity file", params.get("inv_propensity"))],
                     folder=("model folder", paths[-1]))
    writable_folder(paths[-1])
    with store.folder_lock(paths[-1]):
        if address is None:
            return _train_locked(algorithm, paths, index_base, as_json, quiet, params)
        from xmlkit import cluster
        with cluster.connect(address) as client:
            shared = None
            if dask_data == "shared":
                if "-" in paths[:-1]:
                    fail("--dask-data shared needs files the workers can read, not stdin")
                import os
                shared = cluster.SharedData([os.path.abspath(p) for p in paths[:-1]],
                                            index_base, get_class(algorithm).MIN_POINTS)
            _train_locked(algorithm, paths, index_base, as_json, quiet, params,
                          cluster.DaskExecutor(client, shared))


def _text_rows(log, data_path, model_dir, settings):
    """Features and labels of a document file: the featurizer is fitted on
    it; returns X, Y and the arrays of MODEL_DIR's text file."""
    from xmlkit.text import fit_documents, read_documents
    docs = read_documents(data_path, settings["text_format"], settings["label_sep"],
                          need_labels=True)
    featurizer, names = fit_documents(docs, data_path,
                                      **{k: settings[k] for k in FEATURIZER_PARAMS})
    X = featurizer.transform(docs.texts)
    Y, _ = names.encode(docs.labels)
    log(f"{data_path}: {len(docs)} documents, {X.shape[1]} terms, {len(names)} labels")
    arrays = featurizer.to_arrays(names)
    _check_text_of(model_dir, arrays)
    return X, Y, arrays


def _check_text_of(model_dir, arrays):
    """A folder that already holds a model from text must hold this
    featurizer (the same documents and options): else training into it
    would mix two vocabularies."""
    from pathlib import Path
    from xmlkit.text import MODEL_TEXT
    if not store.is_model_folder(model_dir):
        return
    manifest = store.read_manifest(model_dir)
    if f"{MODEL_TEXT}.npz" in (store.records(manifest) or {}):
        old = store.load_arrays(model_dir, MODEL_TEXT, manifest)
        same = set(old) == set(arrays) and all(np.array_equal(old[k], arrays[k]) for k in old)
        if not same:
            fail(f"{Path(model_dir)}: holds a model trained on other documents or text "
                 "options; choose a new folder")


def _calibrate(log, cls, params, X, Y, model_dir):
    """xml-train --calibrate: fit MODEL_DIR's calibration on held-out rows
    (xmlkit.models.calibrated.fit_held_out) unless it holds one for this model
    (a rerun that grew nothing); returns what the summary says of it."""
    from xmlkit.models.calibrated import fit_held_out, folder_calibration, save_to_folder
    if folder_calibration(model_dir) is not None:
        log(f"{model_dir}: holds a calibration of this model already")
        return {"seconds": 0.0, "kept": True}
    start = time.perf_counter()
    estimator = cls(**params)
    calibration = fit_held_out(estimator, X, Y, seed=estimator.get_params().get("seed", 0),
                               threads=estimator.get_params().get("threads", 1), log=log)
    save_to_folder(model_dir, calibration)
    seconds = time.perf_counter() - start
    log(f"calibrated in {seconds:.1f} s: {calibration.knots()}, global threshold "
        f"{calibration.threshold:.3f}")
    return {"seconds": round(seconds, 3), "knots": int(len(calibration.map.x)),
            "deep_knots": [int(len(m.x)) for _, m in calibration.deep],
            "threshold": calibration.threshold}


def _train_locked(algorithm, paths, index_base, as_json, quiet, params, executor=None):
    log = Log(quiet)
    calibrate = params.pop("calibrate", False)
    map_large_blocks()
    text = params.pop("text_settings", None)
    text_arrays = None
    if text is not None:
        data_path, model_dir = paths
        X, Y, text_arrays = _text_rows(log, data_path, model_dir, text)
    elif len(paths) == 2:
        data_path, model_dir = paths
        data = read_input(log, data_path, index_base, layout="dataset")
        X, Y = data.feature_rows, data.label_rows
    elif len(paths) == 3:
        feat_path, label_path, model_dir = paths
        X = read_input(log, feat_path, index_base, layout="matrix").feature_rows
        Y = read_input(log, label_path, index_base, layout="matrix").feature_rows
        if X.shape[0] != Y.shape[0]:
            fail(f"{feat_path} has {X.shape[0]} points but {label_path} has {Y.shape[0]}")
    # (refused here, naming the file, before anything is written)
    what = empty_side(X, Y)
    label_path = paths[-2] if text is None else paths[0]
    if what:
        path = paths[0] if what == "features" else label_path
        fail(f"{path}: the header says 0 {what}: nothing to train on")
    if X.shape[0] == 0:
        fail(f"{paths[0]}: the header says N = 0 points: nothing to train on")
    if not np.any(Y.data):
        fail(f"{label_path}: no point has a label: nothing to train on")

    cls = get_class(algorithm)
    if params.get("trees_only") is not None:
        params["trees_only"] = bool(params["trees_only"])
    if params.get("inv_propensity") is not None:
        from xmlkit.io import read_inv_propensity
        params["inv_propensity"] = read_inv_propensity(params["inv_propensity"], Y.shape[1])
    model = cls(**params)
    start = time.perf_counter()
    memory = (f"out of memory: {algorithm} on {X.shape[0]} points with D = {X.shape[1]} "
              f"features and L = {Y.shape[1]} labels needs more memory than is available "
              "(each worker holds O(D + L) of its own; fewer threads -T may help)")
    from xmlkit._ext.file_check import exit_on_no_memory
    exit_on_no_memory(f"xml-train: error: {memory}\n")    # (a kernel refused memory)
    try:
        with log.progress(model.progress_total(X.shape[0], Y.shape[1], X), "training",
                          model.progress_unit) as bar:
            fit_folder(model, X, Y, model_dir, progress=bar.update, log=log,
                       executor=executor, keep_trees=False, calibrate=calibrate)
        if text_arrays is not None:
            from xmlkit.text import MODEL_TEXT
            with store.folder_lock(model_dir):
                store.save_arrays(model_dir, MODEL_TEXT, text_arrays,
                                  store.read_manifest(model_dir))
                store.record_files(model_dir, [MODEL_TEXT])
        seconds = time.perf_counter() - start
        calibrated = _calibrate(log, cls, params, X, Y, model_dir) if calibrate else None
    except InvalidParameterError as exc:
        flag = flag_of(algorithm, exc.param)
        fail(str(exc).replace(f"{cls.__name__}: {exc.param}", flag, 1))
    except MemoryError:
        fail(memory)
    summary = {"algorithm": algorithm, "model_dir": str(model_dir),
               "train_seconds": round(seconds, 3), **model.stats()}
    if calibrated is not None:
        summary["calibration"] = calibrated
    if getattr(model, "trees_", None):
        summary["trees"] = sorted(model.trees_)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        log(f"trained in {seconds:.1f} s: {model.summary()}")


TREE_STORAGE = """Each tree is written to MODEL_DIR as soon as it is grown. Training
        into a folder that holds a model with the same settings adds the trees that
        are not there yet: a rerun after a crash resumes, and shards trained with
        different -s merge by copying their tree files into one folder and training
        there with the whole range (the copied trees are checked and recorded, none
        is grown)."""
ARRAY_STORAGE = """The model is one array file, written when training ends; a rerun
        trains again."""


def show_defaults(cls):
    """The click callback of --show-defaults: every default of the family
    (its training parameters and its predict parameters, read from the
    estimator, where they are declared) as JSON on stdout."""
    def callback(ctx, param, value):
        if not value or ctx.resilient_parsing:
            return
        args, others = ctx.meta.get("xmlkit.args", []), []
        i = 0
        while i < len(args):        # (--algorithm NAME picks the family: the one taken)
            if args[i] == "--algorithm":
                i += 2
                continue
            if args[i] != "--show-defaults" and not args[i].startswith("--algorithm="):
                others.append(args[i])
            i += 1
        if others:
            raise click.UsageError(
                f"--show-defaults prints the family's defaults and takes nothing else but "
                f"--algorithm (given: {' '.join(others)})", ctx)
        defaults = {k: v for k, v in cls.param_defaults().items()}
        click.echo(json.dumps({"algorithm": cls.algorithm, "params": defaults,
                               "predict_params": cls.predict_defaults()}, indent=2,
                              sort_keys=True, default=str))
        ctx.exit(0)
    return callback


def make_command(algorithm):
    """xml-train with the options of `algorithm`."""
    cls = get_class(algorithm)
    family = algorithm

    def command(paths, algorithm, text, text_format, label_sep, index_base, as_json, quiet,
                **params):
        """Train a model on DATA (single-file XC data set 'N D L') or on FEATURES
        ('N D') and LABELS ('N L') split files, into the folder MODEL_DIR.

        STORAGE MODEL_DIR is locked while training: a second run into it fails
        at once.

        The options below are those of --algorithm ALGORITHM; each family lists
        its own with `xml-train --algorithm NAME --help`.
        """
        if algorithm != family:
            # (the options were chosen by the first --algorithm, click kept the last)
            fail("--algorithm is given more than once: name one family")
        ctx = click.get_current_context()
        featurize = {k: params.pop(k) for k in FEATURIZER_PARAMS}
        if text:
            from xmlkit.text import need_sklearn
            need_sklearn()
            params["text_settings"] = {"text_format": text_format, "label_sep": label_sep,
                                       **featurize}
        else:
            given = given_on_command_line(ctx, (*FEATURIZER_PARAMS, "text_format", "label_sep"))
            if given:
                fail(f"--{given[0].replace('_', '-')} goes with --text")
            params["text_settings"] = None
        _train(ctx, algorithm, paths, index_base, as_json, quiet, params)

    storage = TREE_STORAGE if cls.RESUMABLE else ARRAY_STORAGE
    command.__doc__ = command.__doc__.replace("ALGORITHM", algorithm).replace(
        "STORAGE", storage)
    for decorate in reversed([
            click.argument("paths", nargs=-1, required=True,
                           metavar="DATA MODEL_DIR | FEATURES LABELS MODEL_DIR"),
            click.option("--algorithm", type=click.Choice(sorted(REGISTRY)),
                         default=DEFAULT_ALGORITHM, show_default=True,
                         help="Model family: " + ", ".join(sorted(REGISTRY)) + "."),
            click.option("--text", is_flag=True, default=False,
                         help="DATA is a file of documents (raw text and label names; see "
                              "--text-format): a TF-IDF featurizer is fitted on it and kept "
                              "with the label names in MODEL_DIR, for xml-predict --text. "
                              "Needs pip install 'xmlkit[text]'."),
            click.option("--calibrate", is_flag=True, default=False,
                         help="Also fit a calibration, kept in MODEL_DIR: a map from scores "
                              "to probabilities and per-label thresholds for xml-predict "
                              f"--decision threshold, fitted on {HOLDOUT:.0%} of the "
                              "training points scored by a model trained on the others (on "
                              "this machine): 1.2 to 2.1 times the training time. A folder can "
                              "also be calibrated later on a validation file "
                              "(xml-calibrate): one drawn like the points to be tagged, of a "
                              "thousand points or more, gives truer probabilities than this "
                              "(docs/algorithms.md)."),
            *text_input_options(), *featurizer_options(),
            *click_options(algorithm, cls.param_defaults()),
            *(dask_options() if algorithm in DASK_FAMILIES else []),
            click.option("--show-defaults", is_flag=True, expose_value=False, is_eager=True,
                         callback=show_defaults(cls),
                         help="Print every default of --algorithm's family (training and "
                              "prediction parameters, as the Python API names them) as JSON, "
                              "and exit."),
            index_base_option, json_option, quiet_option, version_option]):
        command = decorate(command)
    cmd = click.command(cls=FamilyCommand, context_settings=CONTEXT)(command)
    cmd.algorithm = algorithm
    return cmd


def main():
    run(make_command(named_algorithm(sys.argv[1:]) or DEFAULT_ALGORITHM), "xml-train")
