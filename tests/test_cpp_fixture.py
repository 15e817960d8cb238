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
