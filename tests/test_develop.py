"""docs/develop.md stays true: every path it names exists, and its recipe
for a new predict option, followed to the letter with a throwaway option,
gives a working option (estimator, generated flag, saved folders)."""
import inspect
import re

import numpy as np
import pytest

import xmlkit
from conftest import ROOT, TEST

DEVELOP = ROOT / "docs" / "develop.md"


def test_every_path_in_the_map_exists():
    text = DEVELOP.read_text()
    paths = set(re.findall(r"`((?:xmlkit|cpp_ext|docs|tests|scripts)/[\w./*-]+)`", text))
    paths |= {p for p in re.findall(r"\b((?:xmlkit|cpp_ext|docs|tests|scripts)/[\w./-]+\.\w+)",
                                    text)}
    checked = 0
    for p in sorted(paths):
        if any(x in p for x in ("NAME", "/F.py", "*")):
            continue                    # (a placeholder of a recipe)
        assert (ROOT / p).exists(), p
        checked += 1
    assert checked >= 30
    # the protocol members the map lists are the ones the protocol declares
    from xmlkit.models.protocol import MEMBERS
    section = text[text.index("## The folder protocol"):text.index("## Recipe")]
    bullets = section[section.index("protocol.py`):"):section.index("`ModelBase` (")]
    named = set(re.findall(r"`(\w+)`", bullets))
    assert named == set(MEMBERS), sorted(named ^ set(MEMBERS))


def test_the_setup_installs_what_the_build_needs():
    """The setup's first install is the build's requirements
    (pyproject.toml's build-system), so that the kernel rebuild it
    documents (setup.py build_ext in that environment) finds them, and the
    editable install then builds with them (no isolated environment)."""
    text = DEVELOP.read_text()
    block = text[text.index("## Setting up"):text.index("**Rebuilding one kernel.**")]
    installs = [l.split("#")[0].split() for l in block.splitlines() if l.startswith("pip install")]
    requires = re.search(r"\[build-system\]\nrequires = \[(.*?)\]",
                         (ROOT / "pyproject.toml").read_text()).group(1)
    wanted = [r.strip().strip('"') for r in requires.split(",")]
    assert [a.strip("'") for a in installs[0][2:]] == wanted
    assert "--no-build-isolation" in installs[1] and "-e" in installs[1]
    assert "python setup.py build_ext --inplace" in text


def test_the_map_names_every_module():
    """The map of the layers names every module of the package (by its path
    from the repository, or, in xmlkit/models and xmlkit/cli, by its file
    name in its layer's list)."""
    text = DEVELOP.read_text()
    layers = text[text.index("## The layers"):text.index("## The folder protocol")]
    missing = []
    for p in sorted((ROOT / "xmlkit").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if f"`{rel}`" in layers:
            continue
        if p.parent.name in ("models", "cli") and re.search(rf"`{re.escape(p.name)}`", layers):
            continue
        missing.append(rel)
    assert not missing, missing


def test_the_predict_option_recipe(bibtex, tmp_path, monkeypatch):
    """Steps 1 and 2 of the recipe for family `linear` with a throwaway
    `beam`: the estimator declares it, the option table spells it, and then
    xml-predict offers --beam with the declared default in its help, passes
    it to predict(), and a folder saved before the option existed loads and
    predicts the same bytes."""
    from click.testing import CliRunner
    from xmlkit.cli.options import PREDICT_OPTIONS, Opt
    from xmlkit.cli.predict import make_command
    from xmlkit.models import REGISTRY
    from xmlkit.models.base import integer
    from xmlkit.models.linear import Linear

    X, Y, Xt, _ = bibtex
    before_folder = tmp_path / "saved_before"
    Linear(epochs=1).fit(X[:600], Y[:600]).save(before_folder)
    before = xmlkit.load_model(before_folder).predict(Xt[:50], k=5)

    seen = []

    class Beamed(Linear):           # step 1: PREDICT_PARAMS and predict()
        PREDICT_PARAMS = {**Linear.PREDICT_PARAMS, "beam": (4, integer(1))}

        def predict(self, X, k=5, threads=1, progress=None, decision=None, beam=None):
            seen.append(self._predict_params(decision=decision, beam=beam)["beam"])
            return super().predict(X, k=k, threads=threads, progress=progress,
                                   decision=decision)
    monkeypatch.setitem(REGISTRY, "linear", Beamed)
    monkeypatch.setitem(PREDICT_OPTIONS, "linear",      # step 2: the option table
                        (*PREDICT_OPTIONS["linear"], Opt("beam", ("--beam",), "beam width.")))

    assert inspect.signature(Beamed.predict).parameters["beam"].default is None
    command = make_command("linear")
    help_text = CliRunner().invoke(command, ["--help"]).output
    assert "--beam" in help_text and "[default: 4]" in "".join(help_text.split("\n"))
    loaded = xmlkit.load_model(before_folder)
    assert isinstance(loaded, Beamed) and loaded.predict_params_["beam"] == 4
    after = loaded.predict(Xt[:50], k=5)
    assert (after != before).nnz == 0 and np.array_equal(after.data, before.data)
    scores = tmp_path / "s.txt"
    r = CliRunner().invoke(command, [str(TEST), str(scores), str(before_folder), "--beam", "7",
                                     "--algorithm", "linear",
                                     "-q"])
    assert r.exit_code == 0, r.output
    assert seen[-1] == 7
    r = CliRunner().invoke(command, [str(TEST), str(scores), str(before_folder), "--beam", "0",
                                     "--algorithm", "linear"])
    assert r.exit_code != 0
    # step 1: a new option changes the scores until KEEPS_SCORES says otherwise
    assert loaded.other_scores(beam=2) == ["beam"]
    # step 4: the options test names an option without values, then runs it
    import test_predict_options as options_test
    with pytest.raises(AssertionError, match="beam"):
        options_test.option_sets(loaded)
    monkeypatch.setitem(options_test.OTHER, "beam", [2])
    assert ("beam", {"beam": 2}) in options_test.option_sets(loaded)


@pytest.mark.parametrize("family", sorted(xmlkit.REGISTRY))
def test_every_family_follows_the_family_recipe(family):
    """Each family is where the recipe puts it: its module, its registry
    entry, its option table, its generated option block in algorithms.md
    (the embedding and the linear model have theirs in docs/cli.md only),
    its name on the package, and the tests' tiny settings."""
    from conftest import FAMILIES, OTHER_PARAMS
    from xmlkit.cli.options import PREDICT_OPTIONS, TRAIN_OPTIONS
    cls = xmlkit.REGISTRY[family]
    assert (ROOT / "xmlkit" / "models" / f"{family}.py").is_file()
    assert inspect.getsourcefile(cls).endswith(f"{family}.py")
    assert family in TRAIN_OPTIONS and family in FAMILIES and family in OTHER_PARAMS
    assert family in PREDICT_OPTIONS and getattr(xmlkit, cls.__name__) is cls
    text = (ROOT / "docs" / "algorithms.md").read_text()
    assert f"<!-- begin options-{family} -->" in text


def test_every_ranking_metric_follows_the_metric_recipe():
    """Each metric the kernel sums (xmlkit._ext.ranking.ROWS: a mean, or a
    ratio's numerator and denominator) is where the metric recipe puts it:
    reported by ranking_metrics under its name, a function of its own in
    xmlkit.metrics, a row of xml-eval's table, a definition in
    docs/metrics.md, an oracle in tests/test_metrics_oracle.py, its function
    in docs/api.md's table and its name in the README's xml-eval row."""
    import scipy.sparse as sp
    from test_metrics_oracle import ORACLE
    from xmlkit import metrics
    from xmlkit._ext.ranking import ROWS
    from xmlkit.cli.eval import ROW_ORDER
    names = [r.removesuffix(" num") for r in ROWS if not r.endswith(" den")]
    assert all(r.removesuffix(" den").removesuffix(" num") in names for r in ROWS)
    Y = sp.csr_matrix(np.array([[1, 0, 1], [0, 1, 0]], dtype=np.float32))
    S = sp.csr_matrix(np.array([[0.9, 0.5, 0.1], [0.2, 0.8, 0.4]], dtype=np.float32))
    got = metrics.ranking_metrics(Y, S, (1, 2), np.ones(3))
    assert list(got) == [f"{n}@{k}" for n in names for k in (1, 2)]
    functions = {f: getattr(metrics, f) for f in metrics.__all__ if f.endswith("_at_k")}
    doc = (ROOT / "docs" / "metrics.md").read_text()
    values = {f: fn(Y, S, np.ones(3), k=2) if "inv_prop" in inspect.signature(fn).parameters
              else fn(Y, S, k=2) for f, fn in functions.items()}
    for name in names:
        assert name in ROW_ORDER and name in ORACLE and f"{name}@k" in doc, name
        want = [got[f"{name}@1"], got[f"{name}@2"]]
        assert any(np.allclose(v, want) for v in values.values()), name
    assert len(functions) == len(names)
    # step 6: the API's table names each function, the README's xml-eval row each metric
    api = (ROOT / "docs" / "api.md").read_text()
    assert all(f"`{f}`" in api for f in functions), sorted(functions)
    row = next(l for l in (ROOT / "README.md").read_text().splitlines()
               if l.startswith("| `xml-eval` |"))
    assert all(f"{name}@k" in row for name in names), row
