"""xml-train: grow a model from XC training files into a model folder.

The options are generated from the parameter dataclasses of the registered
model families (xmlkit.models.REGISTRY): their defaults live there only.
"""
import json
import time

import click
from click.core import ParameterSource

from xmlkit.cli.common import (CONTEXT, Log, fail, index_base_option, json_option,
                               quiet_option, read_input, run, version_option)
from xmlkit.models import REGISTRY, get_class
from xmlkit.models.ensemble import param_fields

DEFAULT_ALGORITHM = "fastxml"


def _collect_options():
    """One click option per parameter name across the model families."""
    specs = {}
    for algo, cls in REGISTRY.items():
        for f in param_fields(cls.Params):
            spec = specs.setdefault(f.name, {"field": f, "defaults": {}, "choices": []})
            spec["defaults"][algo] = f.default
            for c in f.metadata.get("choices") or ():
                if c not in spec["choices"]:      # each family checks its own
                    spec["choices"].append(c)
    return specs


OPTION_SPECS = _collect_options()


def _click_type(f, choices):
    if choices:
        return click.Choice(choices)
    kind = f.metadata.get("type") or type(f.default)
    return click.Path(dir_okay=False) if kind == "path" else kind


def _param_options(func):
    for name, spec in reversed(list(OPTION_SPECS.items())):
        f, defaults = spec["field"], spec["defaults"]
        long = f.metadata["long"]
        if isinstance(f.default, bool):    # --x/--no-x (the off spelling in metadata)
            long = f"{long}/{f.metadata.get('off') or '--no-' + long[2:]}"
        decls = [d for d in (f.metadata["short"], long) if d] + [name]
        values = set(defaults.values())
        help_text = f.metadata["help"]
        if len(defaults) < len(REGISTRY):
            help_text += f" [{', '.join(sorted(defaults))} only]"
        kind = None if isinstance(f.default, bool) else _click_type(f, spec["choices"])
        if len(values) == 1:
            option = click.option(*decls, type=kind, default=f.default,
                                  show_default=f.default is not None, help=help_text)
        else:
            per_algo = ", ".join(f"{a} {d}" for a, d in sorted(defaults.items()))
            option = click.option(*decls, type=kind, default=None,
                                  help=f"{help_text} [default: {per_algo}]")
        func = option(func)
    return func


@click.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, required=True,
                metavar="DATA MODEL_DIR | FEATURES LABELS MODEL_DIR")
@click.option("--algorithm", type=click.Choice(sorted(REGISTRY)), default=DEFAULT_ALGORITHM,
              show_default=True, help="Model family.")
@_param_options
@index_base_option
@json_option
@quiet_option
@version_option
@click.pass_context
def command(ctx, paths, algorithm, index_base, as_json, quiet, **options):
    """Train a model on DATA (single-file XC data set 'N D L') or on FEATURES
    ('N D') and LABELS ('N L') split files, into the folder MODEL_DIR.

    Each tree is written to MODEL_DIR as soon as it is grown. Training into a
    folder that holds a model with the same settings adds the trees -s .. -s+t-1
    that are not there yet: a rerun after a crash resumes, and shards trained
    with different -s merge by copying their tree files into one folder.
    """
    log = Log(quiet)
    if len(paths) == 2:
        data_path, model_dir = paths
        data = read_input(log, data_path, index_base, layout="dataset")
        X, Y = data.feature_rows, data.label_rows
    elif len(paths) == 3:
        feat_path, label_path, model_dir = paths
        X = read_input(log, feat_path, index_base, layout="matrix").feature_rows
        Y = read_input(log, label_path, index_base, layout="matrix").feature_rows
        if X.shape[0] != Y.shape[0]:
            fail(f"{feat_path} has {X.shape[0]} points but {label_path} has {Y.shape[0]}")
    else:
        fail(f"expected DATA MODEL_DIR or FEATURES LABELS MODEL_DIR, got {len(paths)} paths")

    cls = get_class(algorithm)
    own = {f.name for f in param_fields(cls.Params)}
    params = {}
    for name, value in options.items():
        given = ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
        if name not in own:
            if given:
                fail(f"option --{OPTION_SPECS[name]['field'].metadata['long'].lstrip('-')} "
                     f"does not apply to --algorithm {algorithm}")
            continue
        if value is not None:
            params[name] = value
    model = cls(**params)
    start = time.perf_counter()
    with log.progress(model.progress_total, "training", "steps") as bar:
        model.fit(X, Y, model_dir=model_dir, progress=bar.update, log=log)
    seconds = time.perf_counter() - start
    stats = model.stats()
    summary = {"algorithm": algorithm, "model_dir": str(model_dir),
               "train_seconds": round(seconds, 3), **stats}
    if model.trees:
        summary["trees"] = sorted(model.trees)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        log(f"trained in {seconds:.1f} s: {model.summary()}")


def main():
    run(command, "xml-train")
