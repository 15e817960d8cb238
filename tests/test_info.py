"""xml-info: an xmlkit folder and the C++ tools' fixture folders."""
import json

import pytest

import xmlkit
from conftest import run_cli


def test_xmlkit_folder(tmp_path, bibtex):
    X, Y = bibtex[0][:600], bibtex[1][:600]
    folder = tmp_path / "m"
    model = xmlkit.FastXML(n_trees=2, max_leaf=20)
    xmlkit.fit_folder(model, X, Y, folder)
    r = run_cli("xml-info", folder, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["algorithm"] == "fastxml" and info["format"] == "xmlkit"
    assert info["format_version"] == 4 and info["trees"] == 2 and info["tree_indices"] == [0, 1]
    assert (info["n_features"], info["n_labels"]) == (X.shape[1], Y.shape[1])
    assert info["params"]["max_leaf"] == 20 and info["seed"] == 0
    stats = model.stats()
    assert info["nodes"] == pytest.approx(stats["nodes"])
    assert info["leaves"] == pytest.approx(stats["leaves"])
    assert info["size_bytes"] == sum(p.stat().st_size for p in folder.iterdir()
                                     if not p.name.startswith("."))
    r = run_cli("xml-info", folder)
    assert r.returncode == 0 and "trees:" in r.stdout and "max_leaf = 20" in r.stdout
    # a linear model: its weights
    lin = tmp_path / "lin"
    xmlkit.fit_folder(xmlkit.Linear(epochs=1, threshold_holdout=0), X, Y, lin)
    info = json.loads(run_cli("xml-info", lin, "--json").stdout)
    assert info["algorithm"] == "linear" and info["nnz_weights"] > 0 and "trees" not in info
    # damaged or missing: one line, exit 2
    (folder / "tree_00001.npz").write_bytes(b"junk")
    for bad in (folder, tmp_path / "nothing"):
        r = run_cli("xml-info", bad)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("name,algorithm", [("fastxml_model", "fastxml"),
                                            ("pfastrexml_model", "pfastrexml")])
def test_cpp_folder(shared, name, algorithm):
    r = run_cli("xml-info", shared / "fixtures" / "cpp_reference" / name, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["algorithm"] == algorithm and info["format"] == "C++ tool folder"
    assert info["trees"] == 3 and (info["n_features"], info["n_labels"]) == (1836, 159)
    assert info["nodes"] > 1 and info["max_depth"] > 1


def test_predict_parameters_and_text_featurizer_are_shown(tmp_path, bibtex):
    """xml-info shows what xml-predict will use (the recorded predict
    parameters) and, for a model trained from text, its featurizer."""
    X, Y, _, _ = bibtex
    folder = tmp_path / "e"
    model = xmlkit.Embed(rank=8, num_features=64).fit(X[:400], Y[:400])
    model.predict_params_ = {"decision": "threshold", "threshold": 0.25}
    model.save(folder)
    r = run_cli("xml-info", folder, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["predict_params"] == {"decision": "threshold", "threshold": 0.25}
    text = run_cli("xml-info", folder).stdout
    assert "predict parameters (what xml-predict uses unless told):\n  decision = threshold\n" \
           "  threshold = 0.25" in text
    pytest.importorskip("sklearn")
    from conftest import SAMPLES
    tx = tmp_path / "tx"
    r = run_cli("xml-train", SAMPLES / "pydists_train.jsonl.xz", tx, "--text", "-t", "1", "-q",
                "--ngram-max", "1")
    assert r.returncode == 0, r.stderr
    info = json.loads(run_cli("xml-info", tx, "--json").stdout)
    assert info["text"]["ngram_max"] == 1 and info["text"]["terms"] == info["n_features"]
    assert info["text"]["label_names"] == info["n_labels"] \
        and info["predict_params"] == xmlkit.FastXML.predict_defaults()
