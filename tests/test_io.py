"""XC formats: round trips, exact writer output, tolerated quirks, strict errors."""
import bz2
import gzip
import lzma

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import SAMPLES, run_cli
from xmlkit.errors import InputFormatError, XmlkitError
from xmlkit.io import (read_dataset, read_inv_propensity, read_matrix, read_xc,
                       write_dataset, write_inv_propensity, write_matrix)

SUFFIXES = ["", ".gz", ".bz2", ".xz"]
OPENERS = {"": open, ".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def write_text(path, text):
    with OPENERS.get(path.suffix if path.suffix in OPENERS else "", open)(path, "wb") as f:
        f.write(text.encode())
    return path


def random_csr(rng, n, d, density):
    """Values with 3 decimals, so that the text round trip is exact."""
    M = sp.random(n, d, density=density, format="lil", random_state=rng, dtype=np.float64)
    M = M.tocsr()
    M.data = (np.round(M.data * 10, 3) + 0.5).astype(np.float32)
    return M.astype(np.float32).tolil()


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_matrix_round_trip(tmp_path, suffix):
    rng = np.random.default_rng(0)
    M = random_csr(rng, 50, 30, 0.2)
    M[3] = 0                       # an empty row
    M = M.tocsr()
    M.eliminate_zeros()
    path = tmp_path / f"m.txt{suffix}"
    write_matrix(path, M)
    R = read_matrix(path)
    assert R.shape == M.shape and R.dtype == np.float32
    assert (R != M).nnz == 0


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_dataset_round_trip(tmp_path, suffix):
    rng = np.random.default_rng(1)
    X = random_csr(rng, 40, 25, 0.2)
    Y = sp.lil_matrix((rng.random((40, 7)) < 0.3).astype(np.float32))
    Y[0] = 0                       # a point without labels
    X[1] = 0                       # a point without features
    X[2] = 0
    Y[2] = 0                       # a point with nothing
    X, Y = X.tocsr(), Y.tocsr()
    X.eliminate_zeros()
    Y.eliminate_zeros()
    path = tmp_path / f"d.txt{suffix}"
    write_dataset(path, X, Y)
    X2, Y2 = read_dataset(path)
    assert X2.shape == (40, 25) and Y2.shape == (40, 7)
    assert (X2 != X).nnz == 0 and (Y2 != Y).nnz == 0


def test_sample_data_reads_with_header_shapes():
    X, Y = read_dataset(SAMPLES / "bibtex_train.txt.xz")
    assert X.shape == (4880, 1836) and Y.shape == (4880, 159)
    assert X.indices.dtype == np.int32 and X.has_sorted_indices
    assert Y.nnz == 11681


def test_writer_output_is_exactly_the_cpp_layout(tmp_path):
    M = sp.csr_matrix(np.array([[0, 0.5, 0, 1 / 3], [0, 0, 0, 0], [2, 0, 0, 0]],
                               dtype=np.float32))
    write_matrix(tmp_path / "s.txt", M)
    assert (tmp_path / "s.txt").read_text() == "3 4\n1:0.500000 3:0.333333\n\n0:2.000000\n"


@pytest.mark.parametrize("precision", [0, 3, 6, 9])
def test_fixed_decimals_equal_printf(tmp_path, precision):
    """The writer's own fixed-point formatting gives printf's digits: random
    magnitudes, exact ties (k/2^20, rounded half to even), signs, -0.0, and
    values too large for the fast path."""
    rng = np.random.default_rng(precision)
    scale = rng.choice([1e-6, 1e-3, 1.0, 1e3, 1e7, 1e12], 20000)
    vals = np.concatenate([
        (rng.random(20000) * scale * rng.choice([-1, 1], 20000)).astype(np.float32),
        np.arange(1, 3000, dtype=np.float32) / np.float32(2 ** 20),
        np.array([0.0, -0.0, 0.0078125, 5e-7, 2.5e-6, -1e-9, 0.9999995, 1e13, 3e38],
                 np.float32)])
    n = len(vals)
    M = sp.csr_matrix((vals, np.zeros(n, np.int32), np.arange(n + 1)), shape=(n, 1))
    write_matrix(tmp_path / "m.txt", M, precision=precision)
    lines = (tmp_path / "m.txt").read_text().split("\n")[1:-1]
    assert lines == [f"0:{float(v):.{precision}f}" for v in vals]


@pytest.mark.parametrize("fixed", [True, False])
def test_long_precisions_are_written_whole(tmp_path, fixed):
    """Every digit of a long precision is written (%f of the largest float
    takes 40 characters before the point), and a precision beyond 100 is
    refused rather than cut."""
    vals = np.array([3.4e38, -3.4e38, 1e-45, -1 / 3, 0.0], np.float32)
    n = len(vals)
    M = sp.csr_matrix((vals, np.zeros(n, np.int32), np.arange(n + 1)), shape=(n, 1))
    for precision in (12, 30, 100):
        write_matrix(tmp_path / "m.txt", M, precision=precision, fixed=fixed)
        lines = (tmp_path / "m.txt").read_text().split("\n")[1:-1]
        assert lines == [f"0:{float(v):.{precision}{'f' if fixed else 'g'}}" for v in vals]
    with pytest.raises(ValueError, match="precision of 0 to 100"):
        write_matrix(tmp_path / "m.txt", M, precision=101, fixed=fixed)


def test_bare_rows_read_and_write(tmp_path):
    """XCFile carries the arrays as Rows; scipy views of them are the same."""
    f = read_xc(SAMPLES / "bibtex_train.txt.xz")
    R, X = f.feature_rows, f.features
    assert R.shape == X.shape and R.nnz == X.nnz
    assert X.data is R.data or np.shares_memory(X.data, R.data)
    write_matrix(tmp_path / "a.txt", R)
    write_matrix(tmp_path / "b.txt", X)
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()


def test_dataset_writer_layout(tmp_path):
    X = sp.csr_matrix(np.array([[0, 1, 0], [0.25, 0, 0], [0, 0, 0], [0, 0, 0]], np.float32))
    Y = sp.csr_matrix(np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0], [0, 0, 0]], np.float32))
    write_dataset(tmp_path / "d.txt", X, Y)
    assert (tmp_path / "d.txt").read_text() == "4 3 3\n0,2 1:1\n 0:0.25\n1\n\n"


def test_quirks_tolerated_crlf_whitespace_unsorted(tmp_path):
    p = write_text(tmp_path / "d.txt", "3 5 4\r\n3,1 4:1.5  0:2e-1\t2:3\r\n 1:1 \r\n2\r\n")
    X, Y = read_dataset(p)
    np.testing.assert_allclose(X.toarray(), [[0.2, 0, 3, 0, 1.5], [0, 1, 0, 0, 0],
                                             [0, 0, 0, 0, 0]], rtol=1e-7)
    assert Y.toarray().tolist() == [[0, 1, 0, 1], [0, 0, 0, 0], [0, 0, 1, 0]]
    assert X.has_sorted_indices and np.all(np.diff(X.indices[:3]) > 0)


def test_missing_final_newline_and_header_wider_than_data(tmp_path):
    # the header is authoritative: column 9 exists although no row uses it
    M = read_matrix(write_text(tmp_path / "m.txt", "2 10\n0:1\n3:4"))
    assert M.shape == (2, 10) and M.nnz == 2


def test_one_based_indices_are_an_explicit_option(tmp_path):
    p = write_text(tmp_path / "m.txt", "1 3\n1:1 3:2\n")
    assert read_matrix(p, index_base=1).toarray().tolist() == [[1, 0, 2]]
    with pytest.raises(InputFormatError, match="out of range"):
        read_matrix(p)                          # 0-based: index 3 >= 3


def test_a_header_may_leave_n_unknown(tmp_path):
    """N written '?' (a producer that does not count ahead): the rows are
    what the file holds, in both layouts and compressed; '?' stands for N
    only; a score file written with N unknown says '?' and reads back."""
    from xmlkit.io import iter_xc, matrix_writer
    for suffix in SUFFIXES:
        M = read_matrix(write_text(tmp_path / f"m.txt{suffix}", "? 4\n0:1\n\n3:2.5\n"))
        assert M.shape == (3, 4) and M.toarray().tolist() == [[1, 0, 0, 0], [0] * 4,
                                                                [0, 0, 0, 2.5]]
    X, Y = read_dataset(write_text(tmp_path / "d.txt", "? 3 2\n1 0:1\n0,1 2:1\n"))
    assert X.shape == (2, 3) and Y.toarray().tolist() == [[0, 1], [1, 1]]
    assert read_matrix(write_text(tmp_path / "e.txt", "? 3\n")).shape == (0, 3)
    header, pieces = iter_xc(tmp_path / "m.txt", 2)
    assert header == (None, 4) and sum(p.feature_rows.shape[0] for p in pieces) == 3
    for bad in ("3 ?\n0:1\n", "?? 3\n0:1\n", "? 3 ?\n", "?3 3\n", "-1 3\n"):
        with pytest.raises(InputFormatError, match=r":1: malformed header .*'\?'"):
            read_xc(write_text(tmp_path / "bad.txt", bad))
    out = tmp_path / "s.txt"
    with matrix_writer(out, None, 4) as write:
        write(M[:2])
        write(M[2:])
    assert out.read_text().startswith("? 4\n") and (read_matrix(out) != M).nnz == 0


def test_header_layout_decides(tmp_path):
    p = write_text(tmp_path / "m.txt", "1 3\n0:1\n")
    assert read_xc(p).layout == "matrix"
    with pytest.raises(InputFormatError, match="expected a data set"):
        read_dataset(p)


def test_values_parse_like_strtod(tmp_path):
    vals = ["0.1", "1e-3", "-2.5E+2", "123456789012345678901", "0.000000000000000000001234",
            "+7", ".5", "5.", "3.4028234e38"]
    p = write_text(tmp_path / "m.txt", f"1 {len(vals)}\n" +
                   " ".join(f"{i}:{v}" for i, v in enumerate(vals)) + "\n")
    got = read_matrix(p).toarray()[0]
    assert got.tolist() == np.array([float(v) for v in vals], dtype=np.float32).tolist()


# (file content, line of the error, words of the message)
BAD = {
    "malformed_token": ("2 3\n0:1\n1:1 zz\n", 3, "malformed entry 'zz'"),
    "missing_value": ("1 3\n1:\n", 2, "malformed value"),
    "bad_value": ("1 3\n1:1.2.3\n", 2, "malformed value"),
    "index_out_of_range": ("1 3\n3:1\n", 2, "out of range: the header says 3"),
    "negative_index": ("1 3\n-1:1\n", 2, "negative index"),
    "nan": ("1 3\n0:nan\n", 2, "not finite"),
    "inf": ("1 3\n0:inf\n", 2, "not finite"),
    "overflow": ("1 3\n0:1e39\n", 2, "not finite"),
    "too_few_rows": ("3 3\n0:1\n1:1\n", 4, "ends after 2 rows but the header says N=3"),
    "too_many_rows": ("1 3\n0:1\n1:1\n", 3, "more rows than the header's N=1"),
    "duplicate_index": ("1 3\n1:1 0:1 1:2\n", 2, "index 1 appears twice"),
    "empty_file": ("", 1, "empty file"),
    "bad_header": ("2 x\n", 1, "malformed header"),
    "label_out_of_range": ("1 3 2\n2 0:1\n", 2, "label 2"),
    "duplicate_label": ("1 3 4\n1,2,1 0:1\n", 2, "label 1 appears twice"),
    "bad_label_list": ("1 3 4\n1,,2 0:1\n", 2, "malformed label list"),
    "labels_left_out": ("1 3 4\n0:1 1:1\n", 2, "starts with a space"),
    "header_data_mismatch": ("2 3 4\n0 0:1\n", 3, "header says N=2"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_input_raises_with_file_and_line(tmp_path, kind):
    text, line, words = BAD[kind]
    p = write_text(tmp_path / "bad.txt", text)
    with pytest.raises(InputFormatError) as err:
        read_xc(p)
    assert err.value.line == line
    assert words in str(err.value)
    assert str(err.value).startswith(f"{p}:{line}: ")


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_truncated_compressed_file(tmp_path, suffix):
    good = write_text(tmp_path / f"good.txt{suffix}",
                      "300 5\n" + "".join(f"{i % 5}:{i}\n" for i in range(300)))
    data = good.read_bytes()
    bad = tmp_path / f"bad.txt{suffix}"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputFormatError, match="truncated or corrupt"):
        read_xc(bad)


def test_zero_index_with_base_one(tmp_path):
    p = write_text(tmp_path / "m.txt", "1 3\n0:1\n")
    with pytest.raises(InputFormatError, match="1-based"):
        read_xc(p, index_base=1)


def test_missing_file_is_a_one_line_error(tmp_path):
    with pytest.raises(XmlkitError, match="no such file"):
        read_xc(tmp_path / "nope.txt")


def test_inverse_propensity_file(tmp_path):
    p = write_text(tmp_path / "q.txt", "1.5\n2 3.25\n")
    assert read_inv_propensity(p, 3).tolist() == [1.5, 2, 3.25]
    with pytest.raises(InputFormatError, match="has 3 values but there are 4 labels"):
        read_inv_propensity(p, 4)
    with pytest.raises(InputFormatError, match=":2: malformed value"):
        read_inv_propensity(write_text(tmp_path / "b.txt", "1\nx\n"), 2)
    write_inv_propensity(tmp_path / "w.txt", [1.5, 2.0])
    assert (tmp_path / "w.txt").read_text() == "1.500000\n2.000000\n"


def test_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    import xmlkit.io as xio
    calls = []

    def boom(*a):
        calls.append(1)
        raise RuntimeError("disk full")
    monkeypatch.setattr(xio, "format_rows", boom)
    with pytest.raises(RuntimeError):
        write_matrix(tmp_path / "s.txt", sp.eye(3, format="csr"))
    assert calls and list(tmp_path.iterdir()) == []


def test_writing_nan_is_refused(tmp_path):
    M = sp.csr_matrix(np.array([[np.nan, 1]], dtype=np.float32))
    with pytest.raises(XmlkitError, match="NaN"):
        write_matrix(tmp_path / "s.txt", M)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(BAD))
def test_cli_bad_input_exit_2_one_line(tmp_path, kind):
    """Through xml-eval, as a user meets it: exit 2, one line naming file:line."""
    text, line, words = BAD[kind]
    bad = write_text(tmp_path / "bad.txt", text)
    good = write_text(tmp_path / "good.txt", "1 3\n0:1\n")
    r = run_cli("xml-eval", good, bad)
    assert r.returncode == 2
    assert r.stdout == ""
    msg = r.stderr.strip()
    assert "\n" not in msg and "Traceback" not in msg
    assert f"{bad}:{line}: " in msg and words in msg
