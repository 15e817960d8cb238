"""Interop with the C++ tools' model folders, from a tiny fixture kept in
tests/ (see tests/fixtures/cpp_tiny/README.md): no ../shared needed."""
from pathlib import Path

import numpy as np
import pytest

import xmlkit
from conftest import run_cli
from xmlkit.io import read_matrix

FIX = Path(__file__).parent / "fixtures" / "cpp_tiny"


@pytest.mark.parametrize("family", ["fastxml", "pfastrexml"])
def test_cpp_folder_scores_equal_the_cpp_tool(family, tmp_path):
    expected = read_matrix(FIX / f"{family}_scores.txt")
    out = tmp_path / "s.txt"
    r = run_cli("xml-predict", FIX / "test_X.txt", out, FIX / family, "-q")
    assert r.returncode == 0, r.stderr
    got = read_matrix(out)
    assert got.shape == expected.shape == (6, 61)
    assert (got != expected).nnz == 0              # the same file values, to 6 decimals
    model = xmlkit.load_model(FIX / family)
    assert type(model).algorithm == family and sorted(model.trees_) == [0, 1]
    api = model.predict(read_matrix(FIX / "test_X.txt"), k=None)
    assert np.abs((api - expected).toarray()).max() <= 6e-7   # half a 6th decimal


def test_damaged_cpp_tree_is_refused(tmp_path):
    import shutil
    folder = tmp_path / "m"
    shutil.copytree(FIX / "fastxml", folder)
    text = (folder / "0.tree").read_text().splitlines()
    (folder / "0.tree").write_text("\n".join(text[: len(text) // 2]) + "\n")
    r = run_cli("xml-predict", FIX / "test_X.txt", tmp_path / "s.txt", folder, "-q")
    assert r.returncode == 2 and "0.tree" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "s.txt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("value", ["inf", "nan"])
@pytest.mark.parametrize("line", range(13))
def test_non_finite_cpp_param_is_refused(line, value, tmp_path):
    """Any of the param file's values inf or nan: xml-info and xml-predict
    say which one (one line, exit 2), not an OverflowError (exit 1)."""
    import shutil
    from xmlkit.models.cpp_model import PARAM_KEYS, PFASTRE_KEYS
    folder = tmp_path / "m"
    shutil.copytree(FIX / "pfastrexml", folder)
    values = (folder / "param").read_text().split()
    values[line] = value
    (folder / "param").write_text("\n".join(values) + "\n")
    key = (PARAM_KEYS + PFASTRE_KEYS)[line]
    for cmd in (["xml-info", folder], ["xml-predict", FIX / "test_X.txt", tmp_path / "s.txt",
                                        folder, "-q"]):
        r = run_cli(*cmd)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.endswith(f"{folder}/param: {key} must be a finite number, "
                                 f"got {value}\n"), r.stderr
    assert not (tmp_path / "s.txt").exists()


@pytest.mark.parametrize("name, beam", [("parabel", 3), ("parabel_log", None)])
def test_cpp_parabel_folder_scores_equal_the_cpp_tool(name, beam, tmp_path):
    """A C++ Parabel folder with internal nodes (-m 20: 8 leaves), squared-hinge
    and logistic classifiers, beams of 3 and of the folder's width: every
    label of parabel_predict's rows (its 100 best) scored as it did."""
    expected = read_matrix(FIX / f"{name}_scores.txt")
    out = tmp_path / "s.txt"
    r = run_cli("xml-predict", FIX / "parabel_test_X.txt", out, FIX / name, "-k", "100", "-q",
                *(["-B", str(beam)] if beam else []))
    assert r.returncode == 0, r.stderr
    got = read_matrix(out)
    assert got.shape == expected.shape == (10, 159)
    assert np.array_equal(got.indptr, expected.indptr)
    assert np.array_equal(got.indices, expected.indices)
    # (both files rounded to 6 places: one unit apart at most, read as float32)
    assert np.abs(got.data - expected.data).max() <= 1.2e-6
    model = xmlkit.load_model(FIX / name)
    assert model.algorithm == "parabel" and model.stats()["leaves"] == 8
    assert model.loss == ("log" if name == "parabel_log" else "squared_hinge")


def test_shared_cpp_parabel_fixture(shared, tmp_path):
    """../shared's reference: parabel_train's Bibtex folder (3 trees, the C++
    defaults) and parabel_predict's scores, equal to 1e-6."""
    ref = shared / "fixtures" / "cpp_reference"
    from xmlkit.io import read_dataset, write_matrix
    X, _ = read_dataset(shared / "data" / "bibtex" / "bibtex_test.txt.xz")
    write_matrix(tmp_path / "X.txt", X)
    r = run_cli("xml-predict", tmp_path / "X.txt", tmp_path / "s.txt", ref / "parabel_model",
                "-k", "100", "-q")
    assert r.returncode == 0, r.stderr
    got, expected = read_matrix(tmp_path / "s.txt"), read_matrix(ref / "parabel_scores.txt")
    assert np.array_equal(got.indices, expected.indices)
    assert np.abs(got.data - expected.data).max() <= 1.2e-6


@pytest.mark.parametrize("edit", ["cut", "cycle", "labels", "features"])
def test_damaged_cpp_parabel_tree_is_refused(edit, tmp_path):
    """A cut file, a child pointing back at the root, a label list whose count
    is wrong, another feature count: one line naming the file, exit 2."""
    import shutil
    folder = tmp_path / "m"
    shutil.copytree(FIX / "parabel", folder)
    lines = (folder / "0.tree").read_text().splitlines()
    if edit == "cut":
        lines = lines[: len(lines) // 2]
    elif edit == "cycle":
        lines[4] = "0 2"
    elif edit == "labels":
        lines[6] = "160 " + lines[6].split(" ", 1)[1]
    else:
        lines[0] = "1000"
    (folder / "0.tree").write_text("\n".join(lines) + "\n")
    r = run_cli("xml-predict", FIX / "parabel_test_X.txt", tmp_path / "s.txt", folder, "-q")
    assert r.returncode == 2 and "0.tree" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "s.txt").exists()
