"""Predict parameters: declared once per family (PREDICT_PARAMS: default and
constraint), recorded in the model's manifest at training, used when
predict() or xml-predict is not given them; xml-predict's options are
generated from the declarations."""
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

import xmlkit
from conftest import TEST, as_format_3, run_cli
from xmlkit.cli.options import PREDICT_OPTIONS
from xmlkit.io import read_matrix

FAMILIES = sorted(xmlkit.REGISTRY.values(), key=lambda c: c.algorithm)
SMALL = {"fastxml": dict(n_trees=2), "pfastrexml": dict(n_trees=2), "ldsm": dict(n_trees=1),
         "parabel": dict(n_trees=1, max_leaf=20),
         "embed": dict(rank=8, num_features=64), "linear": dict(epochs=1)}


def small_data(bibtex, n=600):
    X, Y, Xt, _ = bibtex
    return X[:n], Y[:n], Xt[:50]


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.algorithm)
def test_declared_once_and_read_from_there(cls):
    """predict()'s family parameters default to None (the model's), every
    declared one is in its signature, and the command spells each one."""
    sig = inspect.signature(cls.predict).parameters
    for name, (default, constraint) in cls.PREDICT_PARAMS.items():
        assert sig[name].default is None, name
        assert constraint(default), name
    assert {o.param for o in PREDICT_OPTIONS.get(cls.algorithm, ())} == set(cls.PREDICT_PARAMS)


def test_no_predict_default_outside_its_declaration():
    """The values the declarations hold appear nowhere else in the command
    or the families' predict code (they did: 0.5 and 1000 in xml-predict)."""
    root = Path(xmlkit.__file__).parent
    src = (root / "cli" / "predict.py").read_text() + (root / "cli" / "options.py").read_text()
    for literal in ("0.5", "1000", '"scores"'):     # as a default, a value or a fallback
        assert not re.search(rf"(=|:|else|or)\s*{re.escape(literal)}(?![\w.])", src), literal
    for cls in FAMILIES:
        code = inspect.getsource(cls.predict)
        for name, (default, _) in cls.PREDICT_PARAMS.items():
            if default is None:         # (None is the signature's "the model's")
                continue
            assert not re.search(rf"\b{name}\s*=\s*{re.escape(repr(default))}", code), \
                (cls.algorithm, name)


def test_help_is_generated_from_the_declarations():
    r = run_cli("xml-predict", "--help")
    assert r.returncode == 0
    text = "".join(r.stdout.split())       # (click wraps lines, even inside words)
    for family, opts in PREDICT_OPTIONS.items():
        cls = xmlkit.REGISTRY[family]
        for o in opts:
            default = cls.PREDICT_PARAMS[o.param][0]
            shown = "the model's" if default is None else default
            said = "".join(f"{o.help} [default: {shown}]".split())
            # (families of one help are named together: "a, b: help")
            at = text.find(":" + said)
            assert at > 0 and family in text[text.rfind("[default:", 0, at) + 1:at], said
            assert all(d in text for d in o.decls)


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.algorithm)
def test_the_manifest_records_them_and_loading_checks_them(cls, bibtex, tmp_path):
    X, Y, Xt = small_data(bibtex)
    model = cls(**SMALL[cls.algorithm]).fit(X, Y)
    assert model.predict_params_ == cls.predict_defaults()
    folder = tmp_path / "m"
    model.save(folder)
    m = json.loads((folder / "manifest.json").read_text())
    if cls.PREDICT_PARAMS:
        assert m["predict_params"] == cls.predict_defaults()
        bad = dict(m, predict_params={**m["predict_params"], "nope": 1})
        (folder / "manifest.json").write_text(json.dumps(bad))
        with pytest.raises(xmlkit.XmlkitError, match=r"predict_params name \['nope'\]"):
            xmlkit.load_model(folder)
        name = next(iter(cls.PREDICT_PARAMS))
        bad = dict(m, predict_params={**m["predict_params"], name: "no such value"})
        (folder / "manifest.json").write_text(json.dumps(bad))
        r = run_cli("xml-predict", TEST, tmp_path / "s.txt", folder, "-q")
        assert r.returncode == 2 and f"predict_params: {name} must be" in r.stderr, r.stderr
        assert not (tmp_path / "s.txt").exists()
    else:
        assert "predict_params" not in m
    # a folder written before they were recorded: the declared defaults
    (folder / "manifest.json").write_text(json.dumps(m))
    as_format_3(folder, lambda manifest: manifest.pop("predict_params", None))
    assert xmlkit.load_model(folder).predict_params_ == cls.predict_defaults()
    # (in a folder of today's format, a manifest without them is an edited one)
    m = json.loads((folder / "manifest.json").read_text())


def test_recorded_values_are_the_defaults_of_predict_and_xml_predict(bibtex, tmp_path):
    """A model whose recorded threshold is 0.3 predicts as predict(threshold=0.3)
    when none is given, in the API and in xml-predict; a given one wins."""
    X, Y, Xt = small_data(bibtex)
    model = xmlkit.Embed(**SMALL["embed"]).fit(X, Y)
    want = model.predict(Xt, k=None, decision="threshold", threshold=0.3)
    model.predict_params_ = {"decision": "threshold", "threshold": 0.3}
    got = model.predict(Xt, k=None)
    assert np.array_equal(got.indices, want.indices) and np.array_equal(got.data, want.data)
    assert model.predict(Xt, k=None, threshold=0.6).nnz <= got.nnz
    folder = tmp_path / "m"
    model.save(folder)
    test = tmp_path / "t.txt"
    n, d = Xt.shape
    Xt = Xt.tocsr()
    rows = [" ".join(f"{j}:{v:g}" for j, v in zip(Xt.indices[Xt.indptr[i]:Xt.indptr[i + 1]],
                                                   Xt.data[Xt.indptr[i]:Xt.indptr[i + 1]]))
            for i in range(n)]
    test.write_text(f"{n} {d}\n" + "\n".join(rows) + "\n")
    r = run_cli("xml-predict", test, tmp_path / "s.txt", folder, "-q")
    assert r.returncode == 0, r.stderr
    S = read_matrix(tmp_path / "s.txt")
    assert np.array_equal(S.indptr, got.indptr) and np.array_equal(S.indices, got.indices)
    r = run_cli("xml-predict", test, tmp_path / "s2.txt", folder, "-q", "--decision", "scores",
                "--threshold", "0.2")
    assert r.returncode == 2 and "--threshold goes with --decision threshold" in r.stderr
    r = run_cli("xml-predict", test, tmp_path / "s2.txt", folder, "-q", "--threshold", "inf")
    assert r.returncode == 2 and "--threshold must be a finite number" in r.stderr, r.stderr


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.algorithm)
def test_help_per_family_shows_its_options_only(cls):
    """xml-predict --algorithm NAME --help: that family's options (from the
    declarations), no other family's, no tree picking for models without
    trees."""
    r = run_cli("xml-predict", "--algorithm", cls.algorithm, "--help")
    assert r.returncode == 0, r.stderr
    text = "".join(r.stdout.split())
    mine = {o.param for o in PREDICT_OPTIONS.get(cls.algorithm, ())}
    for family, opts in PREDICT_OPTIONS.items():
        for o in opts:
            if family == cls.algorithm:
                default = cls.PREDICT_PARAMS[o.param][0]
                shown = "the model's" if default is None else default
                assert "".join(f"{o.help[1:]} [default: {shown}]".split()) in text
            elif o.param not in mine:
                assert o.decls[-1] not in r.stdout, (cls.algorithm, o.decls)
    assert ("--start-tree" in r.stdout) == cls.PICKABLE


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.algorithm)
def test_a_new_predict_option_leaves_saved_folders_as_they_were(cls, bibtex, tmp_path,
                                                                 monkeypatch):
    """A folder saved before a predict option was added to its family loads
    and predicts the same bytes afterwards: the option it does not record
    takes its declared default (only names the family does not take are
    refused)."""
    from xmlkit.models.base import integer
    X, Y, Xt = small_data(bibtex)
    model = cls(**SMALL[cls.algorithm]).fit(X, Y)
    folder = tmp_path / "m"
    model.save(folder)
    before = xmlkit.load_model(folder).predict(Xt, k=5)
    monkeypatch.setattr(cls, "PREDICT_PARAMS", {**cls.PREDICT_PARAMS, "beam": (8, integer(1))})
    loaded = xmlkit.load_model(folder)
    assert loaded.predict_params_["beam"] == 8
    after = loaded.predict(Xt, k=5)
    assert (after != before).nnz == 0 and np.array_equal(after.data, before.data)


def test_the_rules_between_predict_parameters_are_the_estimators(bibtex):
    """The rules xml-predict used to hold are the families': a threshold
    without decision="threshold" is refused by Embed itself; F1 inference
    over a batch needs every row at once (needs_all_rows); PfastreXML takes trees_only
    as 0 / 1, as the C++ tool's -S spells it."""
    X, Y, Xt = small_data(bibtex)
    embed = xmlkit.Embed(**SMALL["embed"]).fit(X, Y)
    with pytest.raises(xmlkit.XmlkitError, match="threshold goes with decision=threshold") \
            as info:
        embed.predict(Xt, threshold=0.3)
    assert info.value.param == ("threshold", "decision")
    assert embed.predict(Xt, decision="threshold", threshold=0.3).nnz > 0
    assert embed.needs_all_rows(decision="f1-batch") and not embed.needs_all_rows()
    assert not embed.needs_all_rows(decision="f1")          # (each row alone)
    embed.predict_params_ = {"decision": "f1-batch", "threshold": 0.5}
    assert embed.needs_all_rows()
    p = xmlkit.PfastreXML(**SMALL["pfastrexml"]).fit(X, Y)
    for value, same in ((1, True), (0, False)):
        a = p.predict(Xt, trees_only=value)
        b = p.predict(Xt, trees_only=True)
        assert ((a != b).nnz == 0) == same
    assert not any(xmlkit.REGISTRY[f].needs_all_rows(xmlkit.REGISTRY[f]()) for f in
                   ("fastxml", "ldsm", "linear"))


@pytest.mark.parametrize("family, decision", [("embed", "threshold"), ("embed", "f1"),
                                              ("linear", "threshold")])
def test_k_caps_a_familys_own_label_sets(family, decision, tiny, tmp_path):
    """-k with a label-set decision of the family's own keeps the k likeliest
    labels of each row's set (as it does for a calibration's sets), never
    adds one: every row of -k 1 is its set's most likely label."""
    from xmlkit.io import read_matrix
    extra = ["--threshold", "0.05"] if decision == "threshold" else []
    out = {}
    for k in (None, 1, 2):
        path = tmp_path / f"k{k}.txt"
        r = run_cli("xml-predict", tiny / "test.txt", path, tiny / family, "--decision",
                    decision, *extra, *([] if k is None else ["-k", str(k)]), "-q")
        assert r.returncode == 0, r.stderr
        out[k] = read_matrix(path).tocsr()
    whole = out[None]
    assert np.diff(whole.indptr).max() > 2                  # (sets larger than the caps)
    for k in (1, 2):
        capped = out[k]
        assert np.diff(capped.indptr).max() <= k
        for r in range(whole.shape[0]):
            row = whole[r]
            best = sorted(zip(-row.data, row.indices))[:k]
            assert sorted(capped[r].indices) == sorted(j for _, j in best), (k, r)
