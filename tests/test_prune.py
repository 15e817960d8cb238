"""xml-prune / xmlkit.prune: tf-idf and unit rows by hand, idf saved and
reused on a test file, --min-keep, bad input."""
import json

import numpy as np
import pytest
import scipy.sparse as sp

from xmlkit.errors import XmlkitError
from xmlkit.io import read_dataset, read_idf, read_matrix
from xmlkit.prune import fit_idf, prune

from conftest import SAMPLES, run_cli

# 3 points, 3 features, raw counts
TRAIN = """3 3 2
0 0:1 1:3
1 0:2
0,1 1:1 2:1
"""
# N = 3; documents with the feature: f0 2, f1 2, f2 1
#   idf0 = idf1 = ln(1 + 3/2) = 0.916291, idf2 = ln(1 + 3/1) = 1.386294
# row 0: tf ln 2, ln 4 -> weights 0.635124, 1.270249 (ratio 1:2) -> unit: 1/sqrt5, 2/sqrt5
# row 1: one entry -> 1
# row 2: ln 2 * idf1 = 0.635124, ln 2 * idf2 = 0.960906 -> unit 0.551402, 0.834239
UNIT = [[0.447214, 0.894427, 0], [1, 0, 0], [0, 0.551402, 0.834239]]
# threshold 0.5 drops row 0's 0.447; rescaled, row 0's 0.894 alone becomes 1
PRUNED = [[0, 1, 0], [1, 0, 0], [0, 0.551402, 0.834239]]


def write(path, text):
    path.write_text(text)
    return path


def test_tfidf_and_unit_rows_by_hand():
    X = sp.csr_matrix(np.array([[1, 3, 0], [2, 0, 0], [0, 1, 1]], dtype=np.float32))
    assert fit_idf(X) == pytest.approx([0.916291, 0.916291, 1.386294], abs=1e-6)
    P, idf, stats = prune(X, threshold=0)
    assert P.toarray() == pytest.approx(np.array(UNIT), abs=1e-6)
    # threshold 0.5 drops row 0's 0.447 only; the rest is rescaled to unit length
    P, _, stats = prune(X, threshold=0.5)
    assert P.toarray() == pytest.approx(np.array(PRUNED), abs=1e-6)
    assert (stats["nnz_before"], stats["nnz_after"], stats["emptied"]) == (5, 4, 0)
    # the paper's rows: the kept entries at their values in the unit row
    P, _, stats = prune(X, threshold=0.5, rescale=False)
    assert P.toarray() == pytest.approx(np.array(UNIT) * (np.array(UNIT) > 0.5), abs=1e-6)
    # a row that keeps everything is the same bits either way
    assert prune(X, threshold=0)[0].data.tobytes() == \
        prune(X, threshold=0, rescale=False)[0].data.tobytes()
    # weighted data: no tf-idf, only unit length and the threshold
    P, idf, _ = prune(X, threshold=0.5, tfidf=False, rescale=False)
    assert idf is None
    assert P.toarray() == pytest.approx(np.array([[0, 3 / np.sqrt(10), 0], [1, 0, 0],
                                                  [0, 1 / np.sqrt(2), 1 / np.sqrt(2)]]), abs=1e-6)
    P, _, _ = prune(X, threshold=0.5, tfidf=False)
    assert P.toarray() == pytest.approx(np.array([[0, 1, 0], [1, 0, 0],
                                                  [0, 1 / np.sqrt(2), 1 / np.sqrt(2)]]), abs=1e-6)


def test_rescaled_rows_are_unit_rows_of_the_kept_entries():
    """On real counts: the rescaled rows are the unrescaled ones, same
    entries, each at unit length."""
    X, _ = read_dataset(SAMPLES / "bibtex_train.txt.xz")
    A, _, sa = prune(X, threshold=0.1)
    B, _, sb = prune(X, threshold=0.1, rescale=False)
    assert sa == sb and sa["removed_fraction"] > 0.3
    assert np.array_equal(A.indptr, B.indptr) and np.array_equal(A.indices, B.indices)
    norms = np.sqrt(np.asarray(B.multiply(B).sum(axis=1)).ravel())
    full = np.diff(B.indptr) > 0
    assert np.all(norms[full] < 1 + 1e-6) and np.any(norms[full] < 0.9)
    expect = sp.diags(1 / np.where(full, norms, 1)) @ B
    assert np.abs((A - expect).toarray()).max() < 1e-6


def test_min_keep():
    X = sp.csr_matrix(np.array([[1, 3, 0], [2, 0, 0], [0, 1, 1]], dtype=np.float32))
    # threshold 0.9: rows 0 and 2 lose everything (0.894 and 0.834 are their largest)
    P, _, s = prune(X, threshold=0.9, min_keep=0)
    assert np.diff(P.indptr).tolist() == [0, 1, 0] and (s["emptied"], s["saved"]) == (2, 0)
    P, _, s = prune(X, threshold=0.9, min_keep=1, rescale=False)
    assert P.toarray() == pytest.approx(np.array([[0, 0.894427, 0], [1, 0, 0],
                                                  [0, 0, 0.834239]]), abs=1e-6)
    assert (s["emptied"], s["saved"]) == (2, 2)
    P, _, _ = prune(X, threshold=0.9, min_keep=1)
    assert P.toarray() == pytest.approx(np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1]]), abs=1e-6)
    P, _, s = prune(X, threshold=0.9, min_keep=5)     # more than a row has: all of it
    assert P.nnz == 5
    # the floor keeps the K largest, entries above the threshold included
    P, _, _ = prune(X, threshold=0.85, min_keep=2)
    assert P.nnz == 5


def test_cli_idf_saved_and_reused(tmp_path):
    train = write(tmp_path / "train.txt", TRAIN)
    test = write(tmp_path / "test.txt", "2 3 2\n0 0:1 2:3\n1 1:2\n")
    out, idf_file = tmp_path / "train.pruned.txt", tmp_path / "idf.txt"
    r = run_cli("xml-prune", train, out, "--threshold", "0.5", "--idf-out", idf_file, "--json")
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout)
    assert (stats["nnz_before"], stats["nnz_after"]) == (5, 4)
    idf = read_idf(idf_file, 3)
    assert idf == pytest.approx([0.916291, 0.916291, 1.386294], abs=1e-6)
    assert stats["rescale"] is True
    X, Y = read_dataset(out)
    assert X.toarray() == pytest.approx(np.array(PRUNED), abs=1e-6)
    assert Y.toarray().tolist() == [[1, 0], [0, 1], [1, 1]]      # labels untouched
    r = run_cli("xml-prune", train, tmp_path / "paper.txt", "--threshold", "0.5", "--no-rescale",
                "-q")
    assert r.returncode == 0, r.stderr
    assert read_dataset(tmp_path / "paper.txt")[0].toarray() == \
        pytest.approx(np.array(UNIT) * (np.array(UNIT) > 0.5), abs=1e-6)

    # the test set with the training idf: row 0 = (ln2 * 0.916291, ln4 * 1.386294)
    tout = tmp_path / "test.pruned.txt"
    r = run_cli("xml-prune", test, tout, "--threshold", "0", "--idf-in", idf_file, "-q")
    assert r.returncode == 0, r.stderr
    a, b = np.log(2) * 0.9162907, np.log(4) * 1.3862944
    Xt, _ = read_dataset(tout)
    assert Xt.toarray()[0] == pytest.approx([a / np.hypot(a, b), 0, b / np.hypot(a, b)],
                                            abs=1e-6)
    # a feature unseen in training (idf 0) is dropped; here f1 in a second idf file
    write(tmp_path / "idf0.txt", "0.9162907\n0\n1.3862944\n")
    r = run_cli("xml-prune", test, tout, "--threshold", "0", "--idf-in",
                tmp_path / "idf0.txt", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["no_weight"] == 1
    assert read_dataset(tout)[0].getrow(1).nnz == 0

    # a split feature file keeps its layout; the API gives the same values
    feats = write(tmp_path / "X.txt", "3 3\n0:1 1:3\n0:2\n1:1 2:1\n")
    r = run_cli("xml-prune", feats, tmp_path / "X.pruned.txt", "--threshold", "0.5", "-q")
    assert r.returncode == 0, r.stderr
    api, _, _ = prune(read_matrix(feats), threshold=0.5)
    assert np.abs(read_matrix(tmp_path / "X.pruned.txt").toarray() - api.toarray()).max() < 1e-6
    assert "removed" in run_cli("xml-prune", feats, tmp_path / "o.txt").stdout


@pytest.mark.slow
def test_sample_data_summary(tmp_path):
    r = run_cli("xml-prune", SAMPLES / "bibtex_train.txt.xz", tmp_path / "p.txt.xz", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["rows"] == 4880 and 0 < s["nnz_after"] < s["nnz_before"]
    X, _ = read_dataset(tmp_path / "p.txt.xz")
    assert X.nnz == s["nnz_after"]
    assert np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel()) == pytest.approx(1, abs=1e-5)
    # the paper's rows: below the threshold, only the one entry kept in each row
    # --min-keep 1 saved
    r = run_cli("xml-prune", SAMPLES / "bibtex_train.txt.xz", tmp_path / "q.txt", "--no-rescale",
                "-q")
    assert r.returncode == 0, r.stderr
    X, _ = read_dataset(tmp_path / "q.txt")
    assert (X.data <= 0.07).sum() == s["saved"]


@pytest.mark.parametrize("case", ["negative", "idf_length", "malformed", "both_idf",
                                  "idf_no_tfidf", "same_file", "threshold"])
def test_bad_input(tmp_path, case):
    train = write(tmp_path / "train.txt", TRAIN)
    out = tmp_path / "out.txt"
    args = [train, out]
    if case == "negative":
        args = [write(tmp_path / "neg.txt", "1 2 1\n0 0:1 1:-2\n"), out]
    elif case == "idf_length":
        args += ["--idf-in", write(tmp_path / "idf.txt", "1\n2\n")]
    elif case == "malformed":
        args = [write(tmp_path / "bad.txt", "2 3 1\n0 0:1\n0 1:x\n"), out]
    elif case == "both_idf":
        args += ["--idf-in", train, "--idf-out", tmp_path / "i.txt"]
    elif case == "idf_no_tfidf":
        args += ["--no-tfidf", "--idf-out", tmp_path / "i.txt"]
    elif case == "same_file":
        args = [train, train]
    elif case == "threshold":
        args += ["--threshold", "nan"]
    r = run_cli("xml-prune", *args)
    assert r.returncode == 2, (case, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "error" in r.stderr
    assert not out.exists() and not (tmp_path / "i.txt").exists()
    if case == "malformed":
        assert "bad.txt:3" in r.stderr
    assert train.read_text() == TRAIN


def test_api_errors():
    X = sp.csr_matrix(np.array([[1, 2]], dtype=np.float32))
    with pytest.raises(XmlkitError):
        prune(X, idf=[1.0])
    with pytest.raises(XmlkitError):
        prune(X, min_keep=-1)
