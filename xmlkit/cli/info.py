"""xml-info: what a model folder holds."""
import json
import os
from pathlib import Path

import click

from xmlkit.cli.common import CONTEXT, json_option, run, version_option


def folder_info(folder):
    """A dict describing the model in `folder` (xmlkit or C++ FastXML /
    PfastreXML). The model is loaded and every file checked whole first (a
    mapped tree file: every block, see xmlkit.arrayfile)."""
    from xmlkit import __version__, store
    from xmlkit.models import load_model
    folder = Path(folder)
    stopped, picked = None, None
    if store.is_model_folder(folder):
        # (an unfinished folder is described with the trees it holds)
        from xmlkit.calibration import CALIBRATION
        from xmlkit.models.tree_family import stored_trees
        m = store.read_manifest(folder)
        present = stored_trees(folder, m)
        stopped = store.unfinished(m, present if store.listed(m, "tree_") else None,
                                   f"{CALIBRATION}.npz" in (store.records(m) or {}))
        picked = present if stopped and present else None
    model = load_model(folder, picked)
    if hasattr(model, "verify"):
        model.verify(threads=os.cpu_count() or 1)
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    info = {"folder": str(folder), "algorithm": model.algorithm,
            "n_features": int(model.n_features_in_), "n_labels": int(model.n_labels_)}
    if store.is_model_folder(folder):
        m = store.read_manifest(folder)
        info.update({"format": "xmlkit", "format_version": m.get("format_version", 1),
                     "written_by": f"xmlkit {m.get('xmlkit_version', '?')}",
                     "seed": m.get("seed"), "params": m.get("params", {})})
    else:
        from xmlkit.models.cpp_model import read_param
        info.update({"format": "C++ tool folder", "format_version": None,
                     "written_by": f"the C++ {model.algorithm} tool", "seed": None,
                     "params": {k: int(v) if float(v).is_integer() else v   # its param file
                                for k, v in read_param(folder).items()}})
    if model.PREDICT_PARAMS:
        # (recorded at training; C++ folders and older xmlkit ones: the declared defaults)
        info["predict_params"] = model.predict_params()
    if store.is_model_folder(folder):
        from xmlkit.text import MODEL_TEXT, model_text
        if f"{MODEL_TEXT}.npz" in (store.records(m) or {}):
            featurizer, labels = model_text(folder, model)
            info["text"] = {**featurizer.options, "terms": featurizer.n_features,
                            "label_names": len(labels)}
        from xmlkit.models.calibrated import folder_calibration
        calibration = folder_calibration(folder)
        if calibration is not None:
            info["calibration"] = \
                f"isotonic, {calibration.knots()}, label sets among the " \
                f"{calibration.candidates} best, global threshold " \
                f"{calibration.threshold:.3f} (xml-predict writes probabilities)"
    if stopped:
        info["unfinished"] = stopped
    trees = getattr(model, "trees_", None)
    if trees:
        info["trees"] = len(trees)
        info["tree_indices"] = [int(t) for t in sorted(trees)]
    info.update({k: (round(v, 4) if isinstance(v, float) else v)
                 for k, v in model.stats().items()})
    info["files"] = len(files)
    info["size_bytes"] = int(sum(p.stat().st_size for p in files))
    info["xmlkit_version"] = __version__
    return info


LABELS = (("algorithm", "algorithm"), ("format", "format"), ("format_version", "format version"),
          ("written_by", "written by"), ("n_features", "features (D)"),
          ("n_labels", "labels (L)"), ("seed", "seed"), ("unfinished", "UNFINISHED"),
          ("calibration", "calibration"),
          ("trees", "trees"),
          ("nodes", "nodes per tree (mean)"), ("leaves", "leaves per tree (mean)"),
          ("max_depth", "depth (mean of the trees' maxima)"), ("nnz_weights", "nnz(W)"),
          ("weight_density", "nnz(W) / (D × L)"), ("rank", "embedding rank"),
          ("random_features", "random features"), ("files", "files"),
          ("size_bytes", "size on disk (bytes)"), ("xmlkit_version", "read by xmlkit"))


def format_info(info):
    width = max(len(label) for _, label in LABELS) + 2
    lines = [f"{label + ':':<{width}}{info[key]}" for key, label in LABELS
             if info.get(key) is not None]
    for key, title in (("params", "parameters"),
                       ("predict_params", "predict parameters (what xml-predict uses unless told)"),
                       ("text", "text featurizer (xml-predict --text)")):
        if info.get(key):
            lines.append(f"{title}:")
            lines += [f"  {k} = {v}" for k, v in sorted(info[key].items())]
    return "\n".join(lines)


@click.command(context_settings=CONTEXT)
@click.argument("model_dir", type=click.Path(file_okay=False))
@json_option
@version_option
def command(model_dir, as_json):
    """Describe the model in MODEL_DIR (an xmlkit model folder, or a folder of
    the original C++ FastXML, PfastreXML or Parabel tools): family, format, parameters,
    dimensions, trees (nodes, leaves, depth), weights, size on disk. Every
    file is checked as xml-predict checks it."""
    info = folder_info(model_dir)
    click.echo(json.dumps(info, indent=2) if as_json else format_info(info))


def main():
    run(command, "xml-info")
