"""Raw text in, tag names out: documents as people have them, the label
names, and a TF-IDF featurizer saved without pickle. (scipy is imported
where it is used: the commands' option tables import this module, and
xml-predict on XC files does not need scipy.)

Documents are JSON Lines, one object per line::

    {"id": "doc-1", "text": "some words", "labels": ["tag a", "tag b"]}

(`id` optional: the line number stands in; `labels` needed to train), or TSV
lines ``labels<TAB>text`` with the labels separated by a stated character
(`label_sep`, default ","). A bad line is refused with `file:line` (as the XC
readers do); "-" reads standard input; .gz, .bz2 and .xz files are read
decompressed.

The vocabulary is chosen by scikit-learn's TfidfVectorizer when fitting (the
`text` extra: ``pip install 'xmlkit[text]'``); words are counted here with
its tokenizer's rules (scoring text needs no scikit-learn); the counts are then weighted (sublinear
tf, idf) and rows scaled to unit length here, in one way for training and
prediction, so that a reloaded featurizer gives the same features, bit for
bit, in any process. The featurizer and the label names are plain arrays
(strings as numpy unicode arrays, options as JSON text), written as one
`.npz` file that model folders record and check like any other.
"""
import collections
import contextlib
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xmlkit.errors import InputFormatError, XmlkitError

TEXT_EXTRA = "pip install 'xmlkit[text]'"
FORMATS = ("jsonl", "tsv")
#: featurizer defaults (chosen on real text: see docs/benchmarks.md, `make -C scripts text`)
DEFAULTS = {"ngram_max": 2, "sublinear_tf": True, "min_df": 2, "max_features": 100000,
            "lowercase": True}
#: scikit-learn's default token pattern: words of two or more letters or digits
TOKEN = re.compile(r"(?u)\b\w\w+\b")
FEATURIZER_FORMAT = "xmlkit-text-featurizer"
FEATURIZER_VERSION = 1


def need_sklearn():
    """scikit-learn's text module, or an XmlkitError saying how to install it."""
    try:
        from sklearn.feature_extraction import text
    except ImportError:
        raise XmlkitError(f"text input needs scikit-learn: {TEXT_EXTRA}") from None
    return text


# ---- documents ------------------------------------------------------------

@dataclass
class Documents:
    """ids (given, or line numbers), texts and, when the input has them,
    label-name lists (None for a document without a `labels` field)."""
    ids: list = field(default_factory=list)
    texts: list = field(default_factory=list)
    labels: list = field(default_factory=list)

    def __len__(self):
        return len(self.texts)


def text_format(path, fmt=None):
    """The format of a document file: `fmt`, else by suffix (.tsv: TSV,
    anything else: JSON Lines)."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise XmlkitError(f"unknown text format {fmt!r} (one of {', '.join(FORMATS)})")
        return fmt
    name = str(path).lower()
    for z in (".gz", ".bz2", ".xz"):
        name = name[:-len(z)] if name.endswith(z) else name
    return "tsv" if name.endswith(".tsv") else "jsonl"


@contextlib.contextmanager
def _lines(path, stream=False):
    """(line number, text) of the lines of a UTF-8 file (or stdin for "-"),
    line ends removed; a line that is not UTF-8 is refused (file:line).
    stream=True (standard input that is a pipe or terminal): batches of the
    lines that have arrived, each a list, as they arrive."""
    from xmlkit.io import DECOMPRESS_ERRORS, open_for_reading, strip_bom
    stdin = str(path) == "-"
    stream = stream and stdin
    source = sys.stdin.buffer if stdin else open_for_reading(path)

    def arrived():
        """Lists of the complete lines read so far (read1: what is there)."""
        rest = b""
        while True:
            more = source.read1(1 << 16)
            if not more:
                if rest:
                    yield [rest]
                return
            rest += more
            *lines, rest = rest.split(b"\n")
            if lines:
                yield [line + b"\n" for line in lines]

    def numbered():
        lineno = 0
        try:
            if stream:
                for batch in arrived():
                    out = []
                    for raw in batch:
                        lineno += 1
                        if lineno == 1:
                            raw = strip_bom(raw)
                        out.append((lineno, raw.decode("utf-8").rstrip("\r\n")))
                    yield out
                return
            for lineno, raw in enumerate(source, 1):
                if lineno == 1:
                    raw = strip_bom(raw)
                yield lineno, raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise InputFormatError(path, lineno, f"not UTF-8 text ({exc.reason})") from None
        except (*DECOMPRESS_ERRORS, OSError) as exc:     # (damaged compressed input)
            raise InputFormatError(path, lineno + 1, f"unreadable ({exc})") from None
    try:
        yield numbered()
    finally:
        if not stdin:
            source.close()


def _jsonl_doc(path, lineno, line):
    from xmlkit.io import loads_json
    try:
        obj = loads_json(line)
    except ValueError as exc:
        raise InputFormatError(path, lineno, f"not a JSON object ({exc})") from None
    if not isinstance(obj, dict):
        raise InputFormatError(path, lineno, "not a JSON object")
    text = obj.get("text")
    if not isinstance(text, str):
        raise InputFormatError(path, lineno, "'text' missing or not a string")
    doc_id = obj.get("id", lineno)
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
        raise InputFormatError(path, lineno, "'id' is not a string or an integer")
    labels = obj.get("labels")
    if labels is not None:
        if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
            raise InputFormatError(path, lineno, "'labels' is not a list of non-empty strings")
    return doc_id, text, labels


def _tsv_doc(path, lineno, line, label_sep):
    head, tab, text = line.partition("\t")
    if not tab:
        raise InputFormatError(path, lineno, "no TAB between the labels and the text")
    labels = [x.strip() for x in head.split(label_sep)] if head.strip() else []
    if any(not x for x in labels):
        raise InputFormatError(path, lineno, f"an empty label name (labels separated by "
                                             f"{label_sep!r})")
    return lineno, text, labels


def iter_documents(path, fmt=None, label_sep=",", chunk=10000, need_labels=False,
                   stream=False):
    """Documents of `path` in pieces of at most `chunk` (memory flat in the
    number of documents). need_labels: every document must have labels.
    stream=True (standard input that is a pipe or terminal): a piece is the
    documents that have arrived, as soon as there is one."""
    fmt = text_format(path, fmt)
    if fmt == "tsv" and (not label_sep or "\t" in label_sep or "\n" in label_sep):
        raise XmlkitError(f"label separator {label_sep!r} cannot be empty, a TAB or a newline")
    docs = Documents()
    with _lines(path, stream) as lines:
        if stream and str(path) == "-":
            for batch in lines:
                for lineno, line in batch:
                    _add_document(docs, path, fmt, label_sep, need_labels, lineno, line)
                if len(docs):
                    yield docs
                    docs = Documents()
            return
        for lineno, line in lines:
            _add_document(docs, path, fmt, label_sep, need_labels, lineno, line)
            if len(docs) >= chunk:
                yield docs
                docs = Documents()
    if len(docs):
        yield docs


def _add_document(docs, path, fmt, label_sep, need_labels, lineno, line):
    """Add the document of a line to `docs` (a blank line adds none)."""
    if not line.strip():
        return
    if fmt == "jsonl":
        doc_id, text, labels = _jsonl_doc(path, lineno, line)
    else:
        doc_id, text, labels = _tsv_doc(path, lineno, line, label_sep)
    if need_labels and labels is None:
        raise InputFormatError(path, lineno, "no 'labels' (training needs them)")
    docs.ids.append(doc_id)
    docs.texts.append(text)
    docs.labels.append(labels)


def read_documents(path, fmt=None, label_sep=",", need_labels=False):
    """All documents of `path` (see iter_documents); an empty input is refused."""
    out = Documents()
    for piece in iter_documents(path, fmt, label_sep, need_labels=need_labels):
        out.ids += piece.ids
        out.texts += piece.texts
        out.labels += piece.labels
    if not len(out):
        raise InputFormatError(path, None, "no documents")
    return out


# ---- label names ----------------------------------------------------------

class LabelNames:
    """Label names <-> column indices (names in sorted order)."""

    def __init__(self, names):
        self.names = list(names)
        self.index = {n: i for i, n in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise XmlkitError("label names are not unique")

    @classmethod
    def fit(cls, label_lists):
        return cls(sorted({n for labels in label_lists if labels for n in labels}))

    def __len__(self):
        return len(self.names)

    def encode(self, label_lists):
        """The label matrix (CSR, 1 for each known name; a document without
        labels gets an empty row) and the number of label occurrences whose
        name is not known (reported, not silently dropped)."""
        indptr, indices, unknown = [0], [], 0
        for labels in label_lists:
            cols = set()
            for n in labels or ():
                i = self.index.get(n)
                if i is None:
                    unknown += 1
                else:
                    cols.add(i)
            indices += sorted(cols)
            indptr.append(len(indices))
        import scipy.sparse as sp
        Y = sp.csr_matrix((np.ones(len(indices), dtype=np.float32),
                           np.asarray(indices, dtype=np.int32),
                           np.asarray(indptr, dtype=np.int64)),
                          shape=(len(label_lists), len(self)))
        return Y, unknown


# ---- the featurizer -------------------------------------------------------

class TextFeaturizer:
    """TF-IDF rows of unit length: word n-grams (1..ngram_max), sublinear tf
    (1 + log tf), smoothed idf (scikit-learn's), terms in at least min_df
    documents, the max_features most frequent kept."""

    def __init__(self, ngram_max=DEFAULTS["ngram_max"], sublinear_tf=DEFAULTS["sublinear_tf"],
                 min_df=DEFAULTS["min_df"], max_features=DEFAULTS["max_features"],
                 lowercase=DEFAULTS["lowercase"]):
        if not (isinstance(ngram_max, int) and 1 <= ngram_max <= 5):
            raise XmlkitError(f"ngram_max must be an integer in [1, 5], got {ngram_max}")
        if not (isinstance(min_df, int) and min_df >= 1):
            raise XmlkitError(f"min_df must be an integer >= 1, got {min_df}")
        if max_features is not None and not (isinstance(max_features, int)
                                             and 1 <= max_features < 2**31):
            raise XmlkitError(f"max_features must be an integer in [1, 2^31), got {max_features}")
        self.options = {"ngram_max": ngram_max, "sublinear_tf": bool(sublinear_tf),
                        "min_df": min_df, "max_features": max_features,
                        "lowercase": bool(lowercase)}
        self.terms = None
        self.idf = None
        self._index = None          # (term -> column, made when first needed)

    @property
    def n_features(self):
        return len(self.terms)

    def _counts(self, texts):
        """Counts of the vocabulary's terms in each text, as CSR arrays (ptr,
        sorted indices, float64 counts): the words and n-grams that
        scikit-learn's CountVectorizer makes with these options (its token
        pattern, lowercasing, space-joined n-grams; test_text checks it),
        counted here so that scoring text does not import scikit-learn."""
        index = self._index
        if index is None:
            index = self._index = {t: i for i, t in enumerate(self.terms.tolist())}
        n_max, lower = self.options["ngram_max"], self.options["lowercase"]
        ptr, idx, val = [0], [], []
        for doc in texts:
            tokens = TOKEN.findall(doc.lower() if lower else doc)
            grams = tokens if n_max == 1 else tokens + [
                " ".join(tokens[i:i + n]) for n in range(2, min(n_max, len(tokens)) + 1)
                for i in range(len(tokens) - n + 1)]
            row = collections.Counter(j for j in map(index.get, grams) if j is not None)
            for j in sorted(row):
                idx.append(j)
                val.append(row[j])
            ptr.append(len(idx))
        return (np.asarray(ptr, np.int64), np.asarray(idx, np.int64),
                np.asarray(val, np.float64))

    def fit(self, texts):
        text = need_sklearn()
        o = self.options
        n = len(texts)
        vec = text.TfidfVectorizer(ngram_range=(1, o["ngram_max"]), lowercase=o["lowercase"],
                                   sublinear_tf=o["sublinear_tf"],
                                   min_df=min(o["min_df"], max(n, 1)),
                                   max_features=o["max_features"], dtype=np.float64)
        try:
            vec.fit(texts)
        except ValueError:         # ("empty vocabulary; ...": in scikit-learn's terms)
            raise XmlkitError(
                f"no term is left: no word of two or more letters or digits (or n-gram of "
                f"up to {o['ngram_max']} of them) is in {o['min_df']} or more of the {n} "
                "documents (min_df)",
                param="min_df") from None
        self.terms = vec.get_feature_names_out().astype(str)
        self.idf = np.asarray(vec.idf_, dtype=np.float64)
        self._index = None
        return self

    def transform(self, texts):
        """Unit-length TF-IDF rows (CSR float32, sorted indices)."""
        if self.terms is None:
            raise XmlkitError("the featurizer is not fitted")
        ptr, indices, v = self._counts(texts)
        n = len(ptr) - 1
        if self.options["sublinear_tf"]:
            v = 1.0 + np.log(v)
        v = v * self.idf[indices]
        rows = np.repeat(np.arange(n), np.diff(ptr))
        norm = np.sqrt(np.bincount(rows, weights=v * v, minlength=n))
        v = v / np.where(norm > 0, norm, 1.0)[rows]
        import scipy.sparse as sp
        return sp.csr_matrix((v.astype(np.float32), indices.astype(np.int32), ptr),
                             shape=(n, len(self.terms)))

    def fit_transform(self, texts):
        return self.fit(texts).transform(texts)

    # -- as arrays (a model folder's `text.npz`, or a featurizer file)
    def to_arrays(self, labels=None):
        from sklearn import __version__ as skv
        meta = {"format": FEATURIZER_FORMAT, "version": FEATURIZER_VERSION,
                "options": self.options, "scikit_learn": skv}
        out = {"meta": np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8),
               "terms": np.asarray(self.terms, dtype=str), "idf": self.idf}
        if labels is not None:
            out["label_names"] = np.asarray(labels.names, dtype=str)
        return out

    @classmethod
    def from_arrays(cls, arrays, where):
        """The featurizer (and LabelNames, or None) of to_arrays' arrays,
        checked: `where` names the file in errors."""
        def bad(what):
            return XmlkitError(f"{where}: damaged text featurizer ({what})")
        try:
            from xmlkit.io import loads_json
            meta = loads_json(bytes(np.asarray(arrays["meta"], dtype=np.uint8)).decode())
            terms, idf = arrays["terms"], arrays["idf"]
        except (KeyError, ValueError, TypeError):
            raise bad("no readable description") from None
        if not isinstance(meta, dict) or meta.get("format") != FEATURIZER_FORMAT:
            raise bad("not a featurizer")
        if meta.get("version") != FEATURIZER_VERSION:
            raise XmlkitError(f"{where}: text featurizer version {meta.get('version')} is not "
                              f"read by this xmlkit (version {FEATURIZER_VERSION})")
        o = meta.get("options")
        if not isinstance(o, dict) or set(o) != set(DEFAULTS):
            raise bad("options")
        try:
            f = cls(**o)
        except (XmlkitError, TypeError) as exc:
            raise bad(f"options: {exc}") from None
        if terms.dtype.kind != "U" or terms.ndim != 1 or idf.shape != terms.shape \
                or idf.dtype != np.float64 or not np.all(np.isfinite(idf)) or np.any(idf < 1):
            raise bad("terms or idf")
        if len(set(terms.tolist())) != len(terms) or not all(terms.tolist()) \
                or not _unicode(terms):
            raise bad("terms are empty or not unique")
        f.terms, f.idf = terms, idf
        labels = None
        if "label_names" in arrays:
            names = arrays["label_names"]
            if names.dtype.kind != "U" or names.ndim != 1 or not all(names.tolist()) \
                    or len(set(names.tolist())) != len(names) or not _unicode(names):
                raise bad("label names")
            labels = LabelNames(names.tolist())
        return f, labels


def fit_documents(docs, where, **options):
    """(TextFeaturizer, LabelNames) fitted on training documents (`where`
    names their file in the error when no document has a label)."""
    names = LabelNames.fit(docs.labels)
    if not len(names):
        raise XmlkitError(f"{where}: no document has a label: nothing to train on")
    try:
        return TextFeaturizer(**options).fit(docs.texts), names
    except XmlkitError as exc:
        raise XmlkitError(f"{where}: {exc}", param=exc.param) from None


def save_featurizer(path, featurizer, labels=None):
    """Write the featurizer (and label names) as the single file `path`,
    under that very name (an .npz archive whatever its name; written
    atomically)."""
    from xmlkit import arrayfile
    path = Path(path)
    # (a file of its own, not in a model folder: temporary files that killed
    # runs left beside it are removed here)
    arrayfile.write(path.parent, path.name, featurizer.to_arrays(labels), remove_dead=True,
                    suffix="")
    return path


def load_featurizer(path):
    """(TextFeaturizer, LabelNames or None) from a file of save_featurizer."""
    from xmlkit.arrayfile import UNREADABLE
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except UNREADABLE as exc:
        raise XmlkitError(f"{path}: not a readable text featurizer ({exc})") from None
    return TextFeaturizer.from_arrays(arrays, path)


# ---- model folders trained from text ---------------------------------------

#: the array file of a model folder holding its featurizer and label names
MODEL_TEXT = "text"


def model_text(folder, model):
    """(TextFeaturizer, LabelNames) kept in the model folder of `model`
    (checked against its record and against the model's dimensions)."""
    from xmlkit import store
    if not store.is_model_folder(folder):
        raise XmlkitError(f"{folder}: not an xmlkit model folder trained from text")
    manifest = store.read_manifest(folder)
    if f"{MODEL_TEXT}.npz" not in (store.records(manifest) or {}):
        raise XmlkitError(f"{folder}: the model was not trained from text (no "
                          f"{MODEL_TEXT}.npz)")
    where = Path(folder) / f"{MODEL_TEXT}.npz"
    featurizer, labels = TextFeaturizer.from_arrays(
        store.load_arrays(folder, MODEL_TEXT, manifest), where)
    if labels is None or featurizer.n_features != model.n_features_in_ \
            or len(labels) != model.n_labels_:
        raise XmlkitError(f"{where}: damaged text featurizer (its terms or label names do not "
                          f"match the model's {model.n_features_in_} features and "
                          f"{model.n_labels_} labels)")
    return featurizer, labels


def ranked(S, i):
    """Label indices and scores of row i of CSR scores, best first (ties to
    the lower label index)."""
    s, e = S.indptr[i], S.indptr[i + 1]
    idx, val = S.indices[s:e], S.data[s:e]
    order = np.lexsort((idx, -val))
    return idx[order], val[order]


@contextlib.contextmanager
def names_writer(path, labels, flush=False):
    """Named predictions as JSON Lines, written piece by piece: yields
    write(ids, S) (the documents' ids and their score rows, CSR), one line
    {"id", "labels": [names, best first], "scores": [...]} per document
    (scores with 6 decimals, as score files). Atomic, compressed by suffix;
    "-" writes standard output (flush: each piece pushed out as written)."""
    import scipy.sparse as sp
    from xmlkit.io import output_stream
    names = labels.names
    with output_stream(path) as out:
        def write(ids, S):
            S = sp.csr_matrix(S)
            lines = []
            for i, doc_id in enumerate(ids):
                idx, val = ranked(S, i)
                lines.append(json.dumps({"id": doc_id, "labels": [names[j] for j in idx],
                                         "scores": [round(float(v), 6) for v in val]},
                                        ensure_ascii=False))
            if lines:
                out.write(("\n".join(lines) + "\n").encode("utf-8"))
                if flush:
                    out.flush()
        yield write


def _unicode(strings):
    """Whether every string of `strings` is Unicode text (no lone
    surrogate): what UTF-8 output can hold."""
    try:
        "".join(strings.tolist()).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _finite_number(v):
    """Whether JSON value v is a number a float holds (finite)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def read_named_predictions(path):
    """ids, then per document its (label names, scores) best first, of a file
    of names_writer (file:line errors)."""
    from xmlkit.io import loads_json
    ids, rows = [], []
    with _lines(path) as lines:
        for lineno, line in lines:
            if not line.strip():
                continue
            try:
                obj = loads_json(line)
            except ValueError as exc:
                raise InputFormatError(path, lineno, f"not a JSON object ({exc})") from None
            labels = obj.get("labels") if isinstance(obj, dict) else None
            scores = obj.get("scores") if isinstance(obj, dict) else None
            if not (isinstance(labels, list) and isinstance(scores, list)
                    and len(labels) == len(scores) and all(isinstance(n, str) for n in labels)
                    and all(_finite_number(v) for v in scores)
                    and len(set(labels)) == len(labels)):
                raise InputFormatError(path, lineno, "not a prediction line ({\"id\", \"labels\": "
                                                     "[names], \"scores\": [numbers]})")
            ids.append(obj.get("id", lineno))
            rows.append((labels, scores))
    return ids, rows


def named_matrices(pred_paths, truth_path, train_path=None, fmt=None, label_sep=","):
    """For evaluating named predictions: the score matrices of the
    prediction files (read_named_predictions), the label matrix of the truth
    documents and, with train_path, of the training documents, over one label
    space (every name seen in any of them, sorted). Predictions and truth
    must list the same ids in the same order. (Unseen: unseen_in_training.)"""
    import scipy.sparse as sp
    preds = [read_named_predictions(p) for p in pred_paths]
    truth = read_documents(truth_path, fmt, label_sep, need_labels=True)
    train = read_documents(train_path, fmt, label_sep, need_labels=True) if train_path else None
    seen = {n for _, rows in preds for labels, _ in rows for n in labels}
    for docs in (truth, train):
        if docs is not None:
            seen.update(n for labels in docs.labels for n in labels)
    space = LabelNames(sorted(seen))
    out = []
    for path, (ids, rows) in zip(pred_paths, preds):
        if len(ids) != len(truth):
            raise XmlkitError(f"{path} has {len(ids)} predictions but {truth_path} has "
                              f"{len(truth)} documents")
        for i, (a, b) in enumerate(zip(ids, truth.ids)):
            if a != b:
                raise XmlkitError(f"{path}: prediction {i + 1} is of id {a!r} but document "
                                  f"{i + 1} of {truth_path} has id {b!r}")
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(labels) for labels, _ in rows], out=indptr[1:])
        idx = np.fromiter((space.index[n] for labels, _ in rows for n in labels),
                          dtype=np.int32, count=indptr[-1])
        val = np.fromiter((v for _, scores in rows for v in scores), dtype=np.float64,
                          count=indptr[-1])
        S = sp.csr_matrix((val, idx, indptr), shape=(len(rows), len(space)))
        S.sort_indices()
        out.append(S)
    Y = space.encode(truth.labels)[0]
    Ytr = space.encode(train.labels)[0] if train is not None else None
    return out, Y, Ytr


def unseen_in_training(Y, Ytr):
    """How many true label occurrences (entries of Y) name a label that no
    training document has (a column of Ytr without entries)."""
    seen = np.asarray(Ytr.getnnz(axis=0)) > 0
    return int((~seen[Y.indices]).sum())
