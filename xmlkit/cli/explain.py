"""xml-predict --explain N: each row's labels with the features behind them,
as JSON Lines, or, for a person at a terminal, a small table."""
import json
import sys
import time

from xmlkit.io import iter_xc, output_stream

#: the significant digits a contribution is written with
DIGITS = 7


def explainer(model, n_features, kwargs, calibration=None, calibrate=None):
    """explain(X) -> Explanation of what xml-predict writes for rows X:
    the scores predict gives with `kwargs` (k, threads, family options),
    mapped by `calibrate` when the folder's calibration decides them."""
    from xmlkit.calibration import explain_decided
    family = {n: v for n, v in kwargs.items() if n not in ("k", "threads")}
    threads = kwargs["threads"]

    def explain(X):
        S = model.predict(X, **kwargs)
        if calibrate is None:
            return model.explain(X, n_features=n_features, threads=threads, labels=S, **family)
        return explain_decided(model, calibration.map, X, S, calibrate(S), n_features,
                               threads, **family)
    return explain


def _number(c):
    return float(f"{c:.{DIGITS}g}")


def records(E, ids=None, label_names=None, terms=None, index_base=0):
    """One JSON object per row of Explanation E: {"id" (when ids are given),
    "labels" (best first), "scores", "features": per label [[feature,
    contribution], ...]}; labels and features as names (label_names,
    terms) or as indices + index_base."""
    def label(j):
        return label_names[j] if label_names is not None else int(j) + index_base

    def feature(j):
        return terms[j] if terms is not None else int(j) + index_base
    for i in range(E.shape[0]):
        row = E.row(i)
        out = {} if ids is None else {"id": ids[i]}
        out.update(labels=[label(j) for j, _, _ in row],
                   scores=[round(s, 6) for _, s, _ in row],
                   features=[[[feature(f), _number(c)] for f, c in feats]
                             for _, _, feats in row])
        yield out


def write_jsonl(out, objects):
    lines = [json.dumps(o, ensure_ascii=False) for o in objects]
    if lines:
        out.write(("\n".join(lines) + "\n").encode("utf-8"))


def table(obj, width=100):
    """A document's explanation (a record with names) as lines of text:
    per label its score, then the words for it (positive contributions)
    and against it (negative)."""
    lines = [str(obj.get("id", ""))]
    name_w = max([len(str(n)) for n in obj["labels"]] + [5])
    for name, score, feats in zip(obj["labels"], obj["scores"], obj["features"]):
        pro = ", ".join(f"{f} {c:+.3g}" for f, c in feats if c > 0) or "-"
        con = ", ".join(f"{f} {c:+.3g}" for f, c in feats if c < 0) or "-"
        lines.append(f"  {str(name):<{name_w}}  {score:8.4f}  for: {pro}")
        lines.append(f"  {'':<{name_w}}  {'':8}  against: {con}")
    return [line[:width] if len(line) > width else line for line in lines]


def explain_xc(log, features, output, model, piece, index_base, explain, check_width):
    """--explain on a feature file: rows in pieces, JSON Lines to output
    (check_width(n_cols): the file's width is refused before any work)."""
    header, pieces = iter_xc(features, piece, index_base)
    n_rows = header[0]
    check_width(header[1])
    start = time.perf_counter()
    with log.progress(n_rows, "explaining", "points") as bar, output_stream(output) as out:
        for part in pieces:
            X = part.feature_rows
            write_jsonl(out, records(explain(X), index_base=index_base))
            bar.update(X.shape[0])
    log(f"explained {n_rows} points in {time.perf_counter() - start:.2f} s -> {output}")


def explain_text(log, documents, output, model_dir, model, piece, names, text_format,
                 label_sep, index_base, explain):
    """--explain with --text: documents featurized as the model's were; with
    names, terms and label names (and, written to a terminal, a table)."""
    from xmlkit.text import iter_documents, model_text, need_sklearn
    need_sklearn()
    featurizer, labels = model_text(model_dir, model)
    terms = featurizer.terms if names else None
    label_names = labels.names if names else None
    human = names and output == "-" and sys.stdout.isatty()
    start, n_rows = time.perf_counter(), 0
    with log.progress(None, "explaining", "documents") as bar, output_stream(output) as out:
        for docs in iter_documents(documents, text_format, label_sep, chunk=piece or 2**62):
            X = featurizer.transform(docs.texts)
            objs = records(explain(X), ids=docs.ids, label_names=label_names, terms=terms,
                           index_base=index_base)
            if human:
                width = _terminal_width()
                out.write(("\n".join(line for o in objs for line in table(o, width))
                           + "\n").encode("utf-8"))
            else:
                write_jsonl(out, objs)
            bar.update(len(docs.ids))
            n_rows += len(docs.ids)
    log(f"explained {n_rows} documents in {time.perf_counter() - start:.2f} s -> {output}")


def _terminal_width():
    import shutil
    return max(40, shutil.get_terminal_size((100, 24)).columns)
