"""Reading and writing the Extreme Classification (XC) repository text formats.

Two layouts, told apart by their header (never by guessing from the rows):

* single-file data set: header ``N D L``; each line ``l1,l2 f:v f:v``; a point
  without labels starts with a space; an empty line is a point with nothing.
* sparse matrix (split feature file, label file, score file): header ``N C``;
  each line ``idx:val idx:val``; an empty line is an empty row.

Indices are 0-based unless ``index_base=1`` is asked for explicitly. The
header is authoritative for the shape; its N may be ``?`` (UNKNOWN_ROWS:
the rows are then what the file holds). Files ending in ``.gz``, ``.bz2`` or
``.xz`` are (de)compressed transparently. Every format problem raises
:class:`~xmlkit.errors.InputFormatError` naming the file and line.

Matrices come back as ``scipy.sparse.csr_matrix`` with float32 values,
int32 indices, sorted indices, int32 or int64 index pointers; an
:class:`XCFile` also holds them as bare :class:`~xmlkit.csr.Rows`, which is
what the commands use (no scipy import on their path).
"""
import bz2
import contextlib
import gzip
import lzma
import os
import re
import sys
import zlib
from pathlib import Path

import numpy as np

from xmlkit._ext.xcparse import RowParser, format_rows
from xmlkit._memory import give_back
from xmlkit.atomic import atomic_path
from xmlkit.csr import Rows, as_rows
from xmlkit.errors import InputFormatError, XmlkitError

__all__ = [
    "read_xc",
    "iter_xc",
    "matrix_writer",
    "read_dataset",
    "read_matrix",
    "write_matrix",
    "write_dataset",
    "read_inv_propensity",
    "write_inv_propensity",
    "read_idf",
    "write_idf",
    "read_vector",
    "write_vector",
    "XCFile",
    "open_for_reading",
    "output_stream",
    "DECOMPRESS_ERRORS",
]

CHUNK_BYTES = 8 << 20
PIECE_BYTES = 1 << 20      # reads when a file is read in pieces (iter_xc)
WRITE_ROWS = 20000         # rows formatted at a time at most,
WRITE_ENTRIES = 1 << 17    # and about this many entries (~2 MB of text)
_COMPRESSED = {".gz": gzip, ".bz2": bz2, ".xz": lzma, ".lzma": lzma}
#: what reading a damaged compressed file raises (besides OSError)
DECOMPRESS_ERRORS = (EOFError, lzma.LZMAError, zlib.error, gzip.BadGzipFile)


class XCFile:
    """What a file held: ``feature_rows`` and ``label_rows`` (:class:`Rows`;
    no labels: None), the same as scipy csr in ``features`` and ``labels``,
    and the layout, ``"dataset"`` (header N D L) or ``"matrix"`` (header N C)."""

    __slots__ = ("feature_rows", "label_rows", "layout")

    def __init__(self, feature_rows, label_rows, layout):
        self.feature_rows = feature_rows
        self.label_rows = label_rows
        self.layout = layout

    @property
    def features(self):
        return self.feature_rows.to_scipy()

    @property
    def labels(self):
        return None if self.label_rows is None else self.label_rows.to_scipy()


#: the UTF-8 byte-order mark
BOM = b"\xef\xbb\xbf"


def strip_bom(data):
    """`data` (the first bytes of a text file) without a UTF-8 byte-order
    mark at its start: the one rule of every reader of text files (XC
    files, documents, named predictions, value files): a BOM there marks
    the encoding and is not part of the data; anywhere else it is data."""
    return data[3:] if data[:3] == BOM else data


#: digits of the longest integer a JSON input may hold (Python refuses to
#: convert more than 4300; an id or a count never needs this many)
JSON_DIGITS = 1000


def _json_int(text):
    if len(text.lstrip("-")) > JSON_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits (at most "
                         f"{JSON_DIGITS})")
    return int(text)


def loads_json(text):
    """json.loads for text from a file (a line of JSON Lines, a manifest):
    ValueError with a one-line reason for whatever does not give plain
    values: bad syntax, nesting too deep for the parser, integers of more
    than JSON_DIGITS digits, strings that are not Unicode text (lone
    surrogates, which no UTF-8 output could hold)."""
    import json
    try:
        obj = json.loads(text, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise ValueError(exc.msg) from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if "\\u" in text.lower() and _has_surrogate(obj):
        raise ValueError("a string holds a lone surrogate escape (\\ud800-\\udfff): not "
                         "Unicode text")
    return obj


def _has_surrogate(obj):
    """Whether a string in `obj` (JSON values) holds a lone surrogate."""
    todo = [obj]
    while todo:
        o = todo.pop()
        if isinstance(o, str):
            try:
                o.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(o, dict):
            todo.extend(o.keys())
            todo.extend(o.values())
        elif isinstance(o, list):
            todo.extend(o)
    return False


def _open_binary(path, mode):
    path = Path(path)
    module = _COMPRESSED.get(path.suffix.lower())
    if module is None:
        return open(path, mode)
    return module.open(path, mode)


def _open_output(tmp, final_path):
    """Binary stream on the temporary file, compressed by the final name's suffix."""
    module = _COMPRESSED.get(Path(final_path).suffix.lower())
    return open(tmp, "wb") if module is None else module.open(tmp, "wb")


def open_for_reading(path):
    """A binary stream of `path`, decompressed by its suffix; a missing file or
    a folder is a one-line XmlkitError."""
    return opened(path, _open_binary)


def opened(path, opener=open, missing="no such file", kind="a file"):
    """opener(path, "rb"), whose failures are one-line XmlkitErrors naming
    `path`: `missing` when it is not there, "is a folder, not `kind`", or
    why it cannot be read (every reader of input files opens them here)."""
    try:
        return opener(path, "rb")
    except FileNotFoundError:
        raise XmlkitError(f"{path}: {missing}") from None
    except IsADirectoryError:
        raise XmlkitError(f"{path}: is a folder, not {kind}") from None
    except OSError as exc:
        raise XmlkitError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _shown(text, most=60):
    """`text` as a message shows it: at most `most` characters, those that
    do not print (a CR, a TAB, a control character) as escapes."""
    text = text[:most]
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


#: N in a header that does not know it (a stream's producer): the rows are
#: then what the file holds, counted as they are read
UNKNOWN_ROWS = "?"


def _parse_header(path, line):
    """The header's integers: ASCII digits only (no sign, no '_', no other
    script's digits), separated by spaces or tabs, each below 2^63; N may
    be UNKNOWN_ROWS (None)."""
    text = line.decode("utf-8", "replace").rstrip("\r").strip(" \t")
    fields = re.split(r"[ \t]+", text) if text else []
    dims = None
    unknown = bool(fields) and fields[0] == UNKNOWN_ROWS
    if unknown:
        fields = ["0", *fields[1:]]
    if 2 <= len(fields) <= 3 and all(re.fullmatch(r"[0-9]{1,19}", f) for f in fields):
        dims = [int(f) for f in fields]
        if max(dims) >= 2**63:
            dims = None
        elif unknown:
            dims[0] = None
    if dims is None:
        raise InputFormatError(
            path, 1, f"malformed header '{_shown(text)}': expected 'N D L' (data set) "
            f"or 'N C' (sparse matrix) as non-negative integers, N or '{UNKNOWN_ROWS}' "
            "(rows not counted ahead)")
    return dims


_MESSAGES = {
    "feature_token": "malformed entry '{tok}': expected index:value",
    "label_token": "malformed label list '{tok}': expected comma-separated label indices",
    "negative": "negative index in '{tok}'",
    "feature_range": "index {val} in '{tok}' is out of range: the header says {ncols} {cols}",
    "label_range": "label {val} in '{tok}' is out of range: the header says {nlabels} labels",
    "value": "malformed value in '{tok}'",
    "nonfinite": "value in '{tok}' is not finite (NaN, inf or beyond float32 range)",
    "feature_dup": "index {val} appears twice in the row",
    "label_dup": "label {val} appears twice in the row",
    "extra_rows": "more rows than the header's N={nrows}",
    "zero_index": "index 0 in '{tok}' but indices are read as 1-based (index_base=1)",
    "labels_missing": "'{tok}' is a feature, but a line must start with its labels; "
                      "a point without labels starts with a space",
}


def _parse_error(path, parser, buf, layout):
    code, line, tok, val = parser.error_info(buf)
    if code == "value" and tok.split(":", 1)[-1].lower().lstrip("+-").startswith(("nan", "inf")):
        code = "nonfinite"
    cols = "features" if layout == "dataset" else "columns"
    if code in ("feature_range", "label_range"):
        # (the index as written: the parser's value stops at 64 bits)
        bound = parser.n_cols if code == "feature_range" else parser.n_labels
        text = tok.split(":", 1)[0] if code == "feature_range" else tok
        val = next((d for d in re.findall(r"[0-9]+", text)
                    if len(d) > 18 or not 0 <= int(d) - parser.index_base < bound), val)
    msg = _MESSAGES[code].format(tok=tok, val=val, ncols=parser.n_cols, cols=cols,
                                 nlabels=parser.n_labels, nrows=parser.n_rows)
    return InputFormatError(path, line, msg, param="index_base" if code == "zero_index" else None)


def read_xc(path, index_base=0, layout=None, progress=None):
    """Read a data set (``N D L``) or a sparse matrix (``N C``) file.

    ``layout`` may require one of ``"dataset"`` or ``"matrix"``; by default
    the header decides. ``progress`` is an optional callable receiving
    ``(rows parsed so far, rows in the file)`` after every chunk.
    """
    parts = _xc_parts(path, index_base, layout, progress, None)
    next(parts)
    return next(parts)


def iter_xc(path, chunk_rows, index_base=0, layout=None, progress=None, stream=False):
    """Read an XC file as it is read in read_xc, in pieces of about
    `chunk_rows` rows, so that memory does not grow with the file: returns
    (header, pieces), header = (N, C) or (N, D, L) read from the file, then
    each piece an XCFile of the next rows (labels of a data set are parsed
    and checked, then dropped: pieces hold features only). chunk_rows None:
    one piece, the whole file as read_xc gives it. `path` "-" reads
    standard input; with stream=True (a pipe or terminal) as the rows
    arrive: a piece is every complete row read so far, as soon as there is
    one (rows that arrive together come together, up to chunk_rows), and
    the rows before a bad one come as a piece before its error. Errors are
    raised as the rows are read (no piece after a bad row)."""
    chunk_rows = None if chunk_rows is None else max(1, int(chunk_rows))
    parts = _xc_parts(path, index_base, layout, progress, chunk_rows, stream)
    return next(parts), parts


def is_stream(path):
    """Whether input `path` is standard input that is not a regular file (a
    pipe, a terminal, a socket): rows then come as they are written."""
    if str(path) != "-":
        return False
    import stat
    try:
        return not stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)
    except (OSError, ValueError):
        return False


def _open_input(path):
    if str(path) == "-":
        return sys.stdin.buffer, "standard input"
    return open_for_reading(path), str(path)


def _read_header(read, path, layout):
    """(dimensions, layout found, the bytes read past the header line) of
    an XC file whose bytes read(n) gives: a BOM at its start skipped, the
    header checked (ASCII integers, the layout asked for, dimensions that
    32-bit indices hold)."""
    first = read(CHUNK_BYTES)
    while first and len(first) < 3 and BOM.startswith(first):
        more = read(3 - len(first))     # (a stream may give its BOM in pieces)
        if not more:
            break
        first += more
    buf = strip_bom(first)
    if not buf:
        raise InputFormatError(path, 1, "empty file: expected a header 'N D L' or 'N C'")
    while b"\n" not in buf:
        more = read(CHUNK_BYTES)
        if not more:
            break
        buf += more
    nl = buf.find(b"\n")
    header, buf = (buf, b"") if nl < 0 else (buf[:nl], buf[nl + 1:])
    dims = _parse_header(path, header)
    found = "dataset" if len(dims) == 3 else "matrix"
    if layout is not None and found != layout:
        want = "a data set with header 'N D L'" if layout == "dataset" else \
            "a sparse matrix with header 'N C'"
        raise InputFormatError(path, 1, f"expected {want}, found header "
                               f"'{_shown(header.decode(errors='replace').strip())}'")
    names = ("N", "D", "L") if found == "dataset" else ("N", "C")
    for name, n in zip(names[1:], dims[1:]):
        if n >= 2**31 - 1:
            raise InputFormatError(path, 1, f"the header's {name} = {n} is more than the "
                                   f"{2**31 - 2} columns that 32-bit indices hold")
    return dims, found, buf


def _xc_parts(path, index_base, layout, progress, chunk_rows, stream=False):
    """Generator: the header's dimensions first, then the file's rows as
    one XCFile (chunk_rows None) or as pieces of chunk_rows rows (stream:
    of the rows read so far, see iter_xc)."""
    if index_base not in (0, 1):
        raise XmlkitError(f"index base must be 0 or 1, not {index_base}")
    raw, path = _open_input(path)
    streaming = stream and raw is sys.stdin.buffer and chunk_rows is not None
    with contextlib.nullcontext(raw) if raw is sys.stdin.buffer else raw as stream:
        # (a stream is read as its bytes arrive: read1 returns what is there)
        read = stream.read1 if streaming else stream.read
        parser = None
        buf = b""
        taken = 0
        try:
            dims, found, buf = _read_header(read, path, layout)
            n_rows, n_cols = dims[0], dims[1]
            n_labels = dims[2] if found == "dataset" else -1
            try:
                parser = RowParser(2**62 if n_rows is None else n_rows, n_cols, n_labels,
                                   index_base)
            except ValueError as exc:
                raise InputFormatError(path, 1, str(exc)) from None
            yield tuple(dims)
            # (in pieces: smaller reads, so that a piece is not much above chunk_rows)
            step = CHUNK_BYTES if chunk_rows is None else PIECE_BYTES
            while True:
                if streaming:
                    # rows already read come out before waiting for more
                    if buf:
                        used = parser.feed(buf, False)
                        if parser.err:
                            yield from _rows_before(parser, taken, n_cols, found)
                            raise _parse_error(path, parser, buf, found)
                        buf = buf[used:]
                    if parser.rows_done > taken:
                        n_new = parser.rows_done - taken
                        taken = parser.rows_done
                        yield _piece(parser.arrays(), n_new, n_cols, found)
                        parser.restart()
                more = read(step)
                final = not more
                if more:
                    buf = buf + more if buf else more
                    more = None         # (the chunk is held once, in buf)
                used = parser.feed(buf, final)
                if parser.err:
                    error = _parse_error(path, parser, buf, found)
                    if streaming:
                        yield from _rows_before(parser, taken, n_cols, found)
                    raise error
                buf = buf[used:]
                if progress is not None:
                    progress(parser.rows_done, n_rows)
                if chunk_rows is not None and parser.rows_done - taken >= chunk_rows:
                    n_new = parser.rows_done - taken
                    taken = parser.rows_done
                    yield _piece(parser.arrays(), n_new, n_cols, found)
                    parser.restart()
                if final:
                    break
        except DECOMPRESS_ERRORS as exc:
            line = parser.line_no if parser is not None else 1
            raise InputFormatError(path, line, f"compressed data is truncated or corrupt ({exc})") \
                from None
        except OSError as exc:
            raise XmlkitError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if n_rows is None:
        n_rows = parser.rows_done
    elif parser.rows_done != n_rows:
        raise InputFormatError(path, parser.line_no,
                               f"file ends after {parser.rows_done} rows but the header says "
                               f"N={n_rows}")
    if chunk_rows is None:
        (xp, xi, xv), y = parser.arrays()
        parser = None
        give_back()         # (the parser's buffers: see xmlkit._memory)
        X = Rows(xp, xi, xv, (n_rows, n_cols))
        Y = None
        if y is not None:
            yp, yi = y
            Y = Rows(yp, yi, np.ones(len(yi), dtype=np.float32), (n_rows, n_labels))
        yield XCFile(X, Y, found)
    elif parser.rows_done > taken:
        yield _piece(parser.arrays(), parser.rows_done - taken, n_cols, found)


def _piece(arrays, n, n_cols, layout):
    (xp, xi, xv), _ = arrays
    end = int(xp[-1])               # (a bad row's entries past the last whole row: dropped)
    return XCFile(Rows(xp, xi[:end], xv[:end], (n, n_cols)), None, layout)


def _rows_before(parser, taken, n_cols, layout):
    """The whole rows a stream's parser read before its error, as a last
    piece (none if there are none): they are answered before the error."""
    if parser.rows_done > taken:
        yield _piece(parser.arrays(), parser.rows_done - taken, n_cols, layout)


def read_dataset(path, index_base=0, progress=None):
    """Single-file data set -> (features csr N×D, labels csr N×L)."""
    f = read_xc(path, index_base, layout="dataset", progress=progress)
    return f.features, f.labels


def read_matrix(path, index_base=0, progress=None):
    """Sparse matrix file (features, labels or scores) -> csr N×C."""
    return read_xc(path, index_base, layout="matrix", progress=progress).features


def _as_csr32(M, name):
    R = as_rows(M, name)
    if not np.all(np.isfinite(R.data)):
        raise XmlkitError(f"{name}: contains NaN or inf values")
    return R.indptr, R.indices, R.data, R.shape


def _put_rows(out, x, y, fixed, precision, index_base):
    """Write the rows of x = (indptr, indices, data, shape) to the stream out
    as text, with y = (indptr, indices) as their labels (single-file data
    set) or None (sparse matrix)."""
    for text in _row_text(x, y, fixed, precision, index_base):
        out.write(text)


def _row_text(x, y, fixed, precision, index_base):
    """The text of the rows of x (see _put_rows) in pieces of a bounded size
    (the text of a piece is held twice while it is written), each formatted
    without the GIL (so formatting runs on whichever thread asks)."""
    xp, xi, xv, shape = x
    if index_base:
        xi = xi + np.int32(index_base)
    yp = yi = None
    if y is not None:
        yp, yi = y
        if index_base:
            yi = yi + np.int32(index_base)
    n = shape[0]
    r0 = 0
    while r0 < n:
        r1 = int(np.searchsorted(xp, xp[r0] + WRITE_ENTRIES, side="right")) - 1
        r1 = min(n, r0 + WRITE_ROWS, max(r1, r0 + 1))
        yield format_rows(xp, xi, xv, yp, yi, r0, r1, fixed, precision)
        r0 = r1


@contextlib.contextmanager
def output_stream(path):
    """A binary stream replacing `path` atomically when the block succeeds
    (compressed by its suffix), or standard output for "-"."""
    if str(path) == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    with atomic_path(path) as tmp, _open_output(tmp, path) as out:
        yield out


@contextlib.contextmanager
def matrix_writer(path, n_rows, n_cols, precision=6, fixed=True, index_base=0):
    """Write a sparse matrix file ``N C`` piece by piece (as write_matrix):
    yields a MatrixWriter `write`; write(M) writes the next rows, until
    n_rows are written (None: as many as come, N written UNKNOWN_ROWS).
    The file is replaced atomically when all rows are there; `path` "-"
    writes to standard output as the rows come."""
    with output_stream(path) as out:
        out.write(f"{UNKNOWN_ROWS if n_rows is None else n_rows} {n_cols}\n".encode())
        write = MatrixWriter(out, path, n_rows, n_cols, precision, fixed, index_base)
        yield write
        if n_rows is not None and write.done != n_rows:
            raise XmlkitError(f"{path}: {write.done} rows written of {n_rows}")
        out.flush()


class MatrixWriter:
    """The rows of a matrix_writer: write(M) writes rows M; format(M) gives
    their text (any thread may format, without the GIL) for write_text,
    which writes it in the order it is called; flush() pushes what is
    written to the stream's reader (standard output: row by row)."""

    def __init__(self, out, path, n_rows, n_cols, precision, fixed, index_base):
        self.out, self.path, self.n_rows, self.n_cols = out, path, n_rows, n_cols
        self.precision, self.fixed, self.index_base = precision, fixed, index_base
        self.done = 0

    def format(self, M, lazy=False):
        """(rows, text pieces) of the rows of M: a list, or with lazy=True
        pieces formatted as write_text takes them (memory: a piece, not the
        rows' text; for a caller that formats and writes on one thread)."""
        x = _as_csr32(M, str(self.path))
        if x[3][0] <= WRITE_ROWS and len(x[1]) <= WRITE_ENTRIES and not self.index_base:
            if x[3][1] != self.n_cols:
                raise XmlkitError(f"{self.path}: rows of {x[3][1]} columns in a matrix of "
                                  f"{self.n_cols}")
            return x[3][0], [format_rows(x[0], x[1], x[2], None, None, 0, x[3][0], self.fixed,
                                         self.precision)]
        if x[3][1] != self.n_cols:
            raise XmlkitError(f"{self.path}: rows of {x[3][1]} columns in a matrix of "
                              f"{self.n_cols}")
        pieces = _row_text(x, None, self.fixed, self.precision, self.index_base)
        return x[3][0], (pieces if lazy else list(pieces))

    def write_text(self, formatted):
        n, pieces = formatted
        if self.n_rows is not None and self.done + n > self.n_rows:
            raise XmlkitError(f"{self.path}: rows beyond the {self.n_rows} x {self.n_cols} "
                              "matrix being written")
        for text in pieces:
            self.out.write(text)
        self.done += n

    def __call__(self, M):
        self.write_text(self.format(M))

    def flush(self):
        self.out.flush()


def write_matrix(path, M, precision=6, fixed=True, index_base=0):
    """Write a sparse matrix (e.g. a score matrix) as the C++ tools do:
    header ``N C``, ascending ``idx:val`` pairs joined by single spaces,
    values with ``precision`` decimals (fixed) or significant digits."""
    n_rows, n_cols = as_rows(M, str(path)).shape
    with matrix_writer(path, n_rows, n_cols, precision, fixed, index_base) as write:
        write(M)


def write_dataset(path, X, Y, precision=7, index_base=0):
    """Write a single-file data set: header ``N D L``, lines ``l1,l2 f:v``."""
    x = _as_csr32(X, str(path))
    yp, yi, _, yshape = _as_csr32(Y, str(path))
    if yshape[0] != x[3][0]:
        raise XmlkitError(f"{path}: features have {x[3][0]} rows but labels {yshape[0]}")
    yp = yp.astype(x[0].dtype, copy=False)
    with output_stream(path) as out:
        out.write(f"{x[3][0]} {x[3][1]} {yshape[1]}\n".encode())
        _put_rows(out, x, (yp, yi), False, precision, index_base)


def read_vector(path, n, what, of, positive=True, most=np.inf):
    """A file of one float per entry (whitespace separated, as the C++ tools
    read inverse propensities): exactly ``n`` finite values, each > 0
    (``positive``) or >= 0, and at most `most`. ``what``/``of`` name them in
    errors ("inverse propensity", "labels")."""
    path = str(path)
    with open_for_reading(path) as stream:
        try:
            text = strip_bom(stream.read()).decode("utf-8", "replace")
        except DECOMPRESS_ERRORS as exc:
            raise InputFormatError(path, None, f"compressed data is truncated or corrupt ({exc})") \
                from None
    try:
        values = np.array(text.split(), dtype=np.float64)
        bad = values.size == 0 or not np.all(np.isfinite(values)) or \
            not np.all(values > 0 if positive else values >= 0) or not np.all(values <= most)
    except ValueError:
        bad = True
    if bad:   # find the first offending line for the message
        sign = "positive" if positive else "non-negative"
        limit = "" if most == np.inf else f" up to {most:g}"
        for lineno, line in enumerate(text.splitlines(), 1):
            for tok in line.split():
                try:
                    v = float(tok)
                except ValueError:
                    raise InputFormatError(path, lineno, f"malformed value '{tok[:40]}'") from None
                if not np.isfinite(v) or not (v > 0 if positive else v >= 0) or v > most:
                    raise InputFormatError(path, lineno, f"{what} '{tok[:40]}' must be a "
                                           f"finite {sign} number{limit}")
        raise InputFormatError(path, 1, f"empty file: expected one {what} per {of[:-1]}")
    if len(values) != n:
        raise InputFormatError(path, max(1, text.count("\n")),
                               f"has {len(values)} values but there are {n} {of}")
    return values


def write_vector(path, v, fmt="%.6f"):
    """One value per line, atomically."""
    text = "\n".join(np.char.mod(fmt, np.asarray(v, dtype=np.float64))) + "\n"
    with atomic_path(path) as tmp, _open_output(tmp, path) as out:
        out.write(text.encode())


def read_inv_propensity(path, n_labels):
    """Inverse-propensity file: one positive float per label, at most
    xmlkit.metrics.MAX_INV_PROPENSITY."""
    from xmlkit.metrics import MAX_INV_PROPENSITY
    return read_vector(path, n_labels, "inverse propensity", "labels", positive=True,
                       most=MAX_INV_PROPENSITY)


def write_inv_propensity(path, q):
    """One value per line, 6 decimals."""
    write_vector(path, q, "%.6f")


def read_idf(path, n_features):
    """Inverse document frequencies (xml-prune --idf-in): one float >= 0 per feature."""
    return read_vector(path, n_features, "idf", "features", positive=False)


def write_idf(path, idf):
    """17 significant digits: the saved idf reproduces the training transform exactly."""
    write_vector(path, idf, "%.17g")
