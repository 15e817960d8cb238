"""xml-text: documents (raw text and label names) to XC files, through a
TF-IDF featurizer fitted once (--fit) and applied as it is afterwards."""
import json

import click

from xmlkit.cli.common import (CONTEXT, FEATURIZER_PARAMS, Log, fail, featurizer_options,
                               given_on_command_line, index_base_option, json_option,
                               quiet_option, run, text_input_options, version_option)


def _command(documents, out, featurizer_path, fit, text_format, label_sep, index_base,
             as_json, quiet, **options):
    """Write the documents of DOCUMENTS (JSON Lines {"id", "text", "labels":
    [names]} or TSV labels<TAB>text; see --text-format) to OUT, a single-file
    XC data set 'N D L' (documents without labels get an empty label list),
    featurized by FEATURIZER, a file (.npz) holding the TF-IDF featurizer and
    the label names.

    With --fit, FEATURIZER is made from DOCUMENTS (the training documents)
    first; without it, FEATURIZER is applied as it is: the same text gives
    the same features, and label names it does not know are left out and
    counted. OUT and FEATURIZER are written atomically; '-' as DOCUMENTS
    reads standard input, as OUT writes standard output. Needs
    pip install 'xmlkit[text]'.
    """
    from xmlkit.atomic import output_target, refuse_overwrite
    from xmlkit.io import write_dataset
    from xmlkit.text import (fit_documents, load_featurizer, need_sklearn, read_documents,
                             save_featurizer)
    log = Log(quiet)
    refuse_overwrite([("data set", out), ("featurizer", featurizer_path if fit else None)],
                     [("document file", documents),
                      ("featurizer", None if fit else featurizer_path)])
    need_sklearn()
    ctx = click.get_current_context()
    if not fit:
        given = given_on_command_line(ctx, FEATURIZER_PARAMS)
        if given:
            fail(f"--{given[0].replace('_', '-')} goes with --fit (the featurizer is "
                 "applied as it was fitted)")
    if out != "-":
        output_target(out)
    if fit:
        output_target(featurizer_path)
    docs = read_documents(documents, text_format, label_sep, need_labels=fit)
    if fit:
        featurizer, labels = fit_documents(docs, documents, **options)
    else:
        featurizer, labels = load_featurizer(featurizer_path)
        if labels is None:
            fail(f"{featurizer_path}: holds no label names")
    X = featurizer.transform(docs.texts)
    Y, unknown = labels.encode(docs.labels)
    if fit:
        save_featurizer(featurizer_path, featurizer, labels)
    write_dataset(out, X, Y, index_base=index_base)
    summary = {"documents": len(docs), "features": int(X.shape[1]), "labels": len(labels),
               "unknown_label_occurrences": int(unknown), "out": str(out),
               "featurizer": str(featurizer_path)}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        log(f"{len(docs)} documents, {X.shape[1]} features, {len(labels)} labels -> {out}"
            + (f" (featurizer -> {featurizer_path})" if fit else ""))
    if unknown:
        log(f"{unknown} label occurrences name labels that {featurizer_path} does not know: "
            "left out")


command = _command
for _decorate in reversed([
        click.command(context_settings=CONTEXT),
        click.argument("documents", type=click.Path(dir_okay=False)),
        click.argument("out", type=click.Path(dir_okay=False)),
        click.argument("featurizer_path", metavar="FEATURIZER", type=click.Path(dir_okay=False)),
        click.option("--fit", is_flag=True, default=False,
                     help="Fit FEATURIZER on DOCUMENTS (training documents) and write it."),
        *text_input_options(""), *featurizer_options("With --fit: "),
        index_base_option, json_option, quiet_option, version_option]):
    command = _decorate(command)


def main():
    run(command, "xml-text")
