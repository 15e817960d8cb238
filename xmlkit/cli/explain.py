"""xml-predict --explain N: each row's labels with the features behind them,
as JSON Lines, or, for a person at a terminal, a small table."""
import json
import sys
import time

import numpy as np

from xmlkit.io import is_stream, iter_xc, output_stream

#: the significant digits a contribution is written with
DIGITS = 7


def explainer(model, n_features, kwargs, calibration=None, calibrate=None):
    """explain(X) -> Explanation of what xml-predict writes for rows X:
    the scores predict gives with `kwargs` (k, threads, family options),
    mapped by `calibrate` when the folder's calibration decides them."""
    from xmlkit.models.calibrated import explain_decided
    family = {n: v for n, v in kwargs.items() if n not in ("k", "threads")}
    threads, k = kwargs["threads"], kwargs["k"]
    # (label sets, or probabilities the calibration makes: the labels
    # predict gives are explained; a ranking: the family's own k best)
    ranking = calibrate is None and \
        model.predict_params(**family).get("decision", "scores") == "scores"

    def explain(X):
        if ranking:
            return model.explain(X, k=k, n_features=n_features, threads=threads, **family)
        S = model.predict(X, **kwargs)
        if calibrate is None:
            return model.explain(X, n_features=n_features, threads=threads, labels=S, **family)
        return explain_decided(model, calibration, X, S, calibrate(S), n_features,
                               threads, **family)
    return explain


def json_lines(E, ids=None, label_names=None, terms=None, index_base=0):
    """One JSON object per row of Explanation E, as text lines: {"id" (when
    ids are given), "labels" (best first), "scores" (6 decimals),
    "features": per label [[feature, contribution], ...]} (contributions
    with DIGITS significant digits); labels and features as names
    (label_names, terms: arrays of strings) or as indices + index_base.
    Ordered on whole arrays; each number formatted once, joined per row."""
    S = E.scores
    n = S.shape[0]
    row = np.repeat(np.arange(n), np.diff(S.indptr))
    order = np.lexsort((S.indices, -S.data, row))           # per row: best first
    labels = _texts(S.indices[order], label_names, index_base)
    scores = ["%.6f" % v for v in S.data[order].tolist()]
    counts = np.diff(E.ptr)[order]
    ends = np.cumsum(counts)
    take = np.repeat(E.ptr[order] - (ends - counts), counts) + np.arange(ends[-1] if len(ends)
                                                                           else 0)
    digits = f"[%s, %.{DIGITS}g]"
    pairs = [digits % fc for fc in zip(_texts(E.features[take], terms, index_base),
                                       E.contributions[take].tolist())]
    per_label = ["[" + ", ".join(pairs[a:b]) + "]"
                 for a, b in zip((ends - counts).tolist(), ends.tolist())]
    starts = S.indptr.tolist()
    out = []
    for i in range(n):                     # (formatting: one line per row)
        a, b = starts[i], starts[i + 1]
        head = f'{{"id": {json.dumps(ids[i], ensure_ascii=False)}, ' if ids is not None else "{"
        out.append(f'{head}"labels": [{", ".join(labels[a:b])}], '
                   f'"scores": [{", ".join(scores[a:b])}], '
                   f'"features": [{", ".join(per_label[a:b])}]}}')
    return out


def _texts(indices, names, index_base):
    """JSON texts of label or feature indices: their names, or the indices
    + index_base."""
    if names is None:
        return list(map(str, (np.asarray(indices, np.int64) + index_base).tolist()))
    picked = np.asarray(names)[indices]
    return [json.dumps(str(t), ensure_ascii=False) for t in picked.tolist()]


def write_jsonl(out, lines):
    if lines:
        out.write(("\n".join(lines) + "\n").encode("utf-8"))


def table(obj, width=100):
    """A document's explanation (a record with names) as lines of text:
    per label its score, then the words for it (positive contributions)
    and against it (negative), wrapped to `width` columns."""
    import textwrap
    lines = [str(obj.get("id", ""))]
    for name, score, feats in zip(obj["labels"], obj["scores"], obj["features"]):
        lines.append(f"  {name}  {score:.4f}")
        for side, keep in (("for", lambda c: c > 0), ("against", lambda c: c < 0)):
            words = ", ".join(f"{f} {c:+.3g}" for f, c in feats if keep(c)) or "-"
            lines.extend(textwrap.wrap(f"{side}: {words}", width, initial_indent=" " * 6,
                                       subsequent_indent=" " * (8 + len(side))))
    return lines


def explain_xc(log, features, output, model, piece, index_base, explain, check_width):
    """--explain on a feature file: rows in pieces, JSON Lines to output
    (check_width(n_cols): the file's width is refused before any work)."""
    # (a stream to standard output: each piece answered as it arrives)
    stream = output == "-" and is_stream(features)
    header, pieces = iter_xc(features, piece, index_base, stream=stream)
    n_rows = header[0]
    check_width(header[1])
    start = time.perf_counter()
    with log.progress(n_rows, "explaining", "points") as bar, output_stream(output) as out:
        for part in pieces:
            X = part.feature_rows
            write_jsonl(out, json_lines(explain(X), index_base=index_base))
            if stream:
                out.flush()
            bar.update(X.shape[0])
    log(f"explained {bar.n} points in {time.perf_counter() - start:.2f} s -> {output}")


def explain_text(log, documents, output, model_dir, model, piece, names, text_format,
                 label_sep, index_base, explain):
    """--explain with --text: documents featurized as the model's were; with
    names, terms and label names (and, written to a terminal, a table)."""
    from xmlkit.text import iter_documents, model_text
    featurizer, labels = model_text(model_dir, model)
    terms = featurizer.terms if names else None
    label_names = labels.names if names else None
    human = names and output == "-" and sys.stdout.isatty()
    # (a stream to standard output: each document answered as it arrives)
    stream = output == "-" and is_stream(documents)
    start, n_rows = time.perf_counter(), 0
    with log.progress(None, "explaining", "documents") as bar, output_stream(output) as out:
        for docs in iter_documents(documents, text_format, label_sep, chunk=piece or 2**62,
                                   stream=stream):
            X = featurizer.transform(docs.texts)
            lines = json_lines(explain(X), ids=docs.ids, label_names=label_names, terms=terms,
                               index_base=index_base)
            if human:
                width = _terminal_width()
                out.write(("\n".join(text for line in lines
                                      for text in table(json.loads(line), width))
                           + "\n").encode("utf-8"))
            else:
                write_jsonl(out, lines)
            if stream:
                out.flush()
            bar.update(len(docs.ids))
            n_rows += len(docs.ids)
    log(f"explained {n_rows} documents in {time.perf_counter() - start:.2f} s -> {output}")


def _terminal_width():
    import shutil
    return max(40, shutil.get_terminal_size((100, 24)).columns)
