"""The estimator conventions (scikit-learn's) and the command-line layer on
top of them: parameters stored unchanged, checked by fit with messages that
name parameters, get_params/set_params/clone/grid search, and per-family
xml-train options whose defaults are the estimators'."""
import inspect
import re

import numpy as np
import pytest
import scipy.sparse as sp

import xmlkit
from xmlkit.cli.options import TRAIN_OPTIONS
from conftest import TRAIN, run_cli

FAMILIES = [xmlkit.FastXML, xmlkit.PfastreXML, xmlkit.Parabel, xmlkit.LdSM, xmlkit.Embed,
            xmlkit.Linear]
#: a small setting per family, for fits that must be quick
QUICK = {"fastxml": dict(n_trees=2), "pfastrexml": dict(n_trees=2), "ldsm": dict(n_trees=1),
         "parabel": dict(n_trees=1, max_leaf=20),
         "embed": dict(rank=8, num_features=64), "linear": dict(epochs=2)}
#: one out-of-range value per family, and the parameter it names
BAD = {"fastxml": ("max_leaf", 0), "pfastrexml": ("alpha", 1.5), "ldsm": ("arity", 9),
       "parabel": ("arity", 1),
       "embed": ("momentum", 1.0), "linear": ("threshold_holdout", 1.0)}


@pytest.fixture(scope="module")
def small(bibtex):
    X, Y, Xt, Yt = bibtex
    return X[:600], Y[:600], Xt[:200], Yt[:200]


@pytest.mark.parametrize("cls", FAMILIES)
def test_init_stores_keywords_unchanged(cls):
    sig = inspect.signature(cls.__init__)
    names = [p for p in sig.parameters if p != "self"]
    assert all(sig.parameters[p].kind == inspect.Parameter.KEYWORD_ONLY for p in names)
    assert sorted(names) == sorted(cls().get_params())
    # any value is stored as given (even a wrong one: fit checks)
    weird = {n: object() for n in names}
    m = cls(**weird)
    assert all(getattr(m, n) is weird[n] for n in names)
    with pytest.raises(TypeError):
        cls(1)                                  # keyword-only


@pytest.mark.parametrize("cls", FAMILIES)
def test_set_params_and_repr(cls):
    m = cls()
    name, _ = BAD[cls.algorithm]
    assert m.set_params(seed=7) is m and m.get_params(deep=True)["seed"] == 7
    assert repr(m) == f"{cls.__name__}(seed=7)"
    with pytest.raises(ValueError, match="no parameter 'nope'"):
        m.set_params(nope=1)


@pytest.mark.parametrize("cls", FAMILIES)
def test_fit_checks_parameters_by_name(cls, small):
    X, Y, _, _ = small
    name, value = BAD[cls.algorithm]
    with pytest.raises(ValueError, match=rf"{cls.__name__}: {name} must be .*got {value}"):
        cls(**{**QUICK[cls.algorithm], name: value}).fit(X, Y)
    with pytest.raises(ValueError, match="seed must be an integer"):
        cls(**QUICK[cls.algorithm], seed=-1).fit(X, Y)


@pytest.mark.slow
@pytest.mark.parametrize("cls", FAMILIES)
def test_clone_and_grid_search(cls, small):
    pytest.importorskip("sklearn")
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV
    X, Y, _, _ = small
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted
    m = cls(**QUICK[cls.algorithm], seed=3)
    with pytest.raises(NotFittedError):
        check_is_fitted(m)                  # fitted state: trailing underscores only
    c = clone(m)
    assert type(c) is cls and c is not m and c.get_params() == m.get_params()

    def p_at_1(est, X, Y):
        S = sp.csr_matrix(est.predict(X, k=1))
        hit = np.asarray(Y[np.arange(X.shape[0]), np.asarray(S.argmax(axis=1)).ravel()])
        return float(hit.mean())

    key = "n_trees" if "n_trees" in m.get_params() else "seed"
    grid = GridSearchCV(m, {key: [1, 2]}, cv=2, scoring=p_at_1, error_score="raise")
    grid.fit(X, Y)
    assert grid.best_params_[key] in (1, 2) and 0 <= grid.best_score_ <= 1
    check_is_fitted(grid.best_estimator_)
    assert grid.best_estimator_.n_features_in_ == X.shape[1]


@pytest.mark.parametrize("cls", FAMILIES)
def test_predict_keeps_five_labels_by_default(cls, small):
    X, Y, Xt, _ = small
    m = cls(**QUICK[cls.algorithm]).fit(X, Y)
    S = sp.csr_matrix(m.predict(Xt))
    assert S.shape == (Xt.shape[0], Y.shape[1])
    assert np.diff(S.indptr).max() == 5
    assert sp.csr_matrix(m.predict(Xt, k=None)).nnz > S.nnz


@pytest.mark.parametrize("cls", [xmlkit.FastXML, xmlkit.Parabel, xmlkit.LdSM])
def test_trees_replaced_through_the_api_are_the_ones_scored(cls, small):
    """The prediction caches follow the tree objects and their arrays: a tree
    taken from another model, a tree's array replaced in its dict, each is
    what is scored next (neither a stale kernel nor an error); the same
    arrays in a new dict change nothing."""
    X, Y, Xt, _ = small
    m = cls(**QUICK[cls.algorithm]).fit(X, Y)
    m.set_params(n_trees=2).fit(X, Y)
    first = m.predict(Xt, k=None)
    m.trees_[0] = cls(**{**QUICK[cls.algorithm], "n_trees": 1, "seed": 7}).fit(X, Y).trees_[0]
    swapped = m.predict(Xt, k=None)
    assert (first != swapped).nnz > 0
    m.trees_[1] = tree = dict(m.trees_[1])
    assert (m.predict(Xt, k=None) != swapped).nnz == 0
    key = max((k for k in tree if tree[k].dtype.kind == "f"), key=lambda k: tree[k].size)
    tree[key] = -tree[key]
    assert (m.predict(Xt, k=None) != swapped).nnz > 0


@pytest.mark.parametrize("algo", sorted(TRAIN_OPTIONS))
def test_train_help_lists_the_family_options_with_estimator_defaults(algo):
    r = run_cli("xml-train", "--algorithm", algo, "--help")
    assert r.returncode == 0
    out = r.stdout
    defaults = xmlkit.REGISTRY[algo].param_defaults()
    own = {d for o in TRAIN_OPTIONS[algo] for d in o.decls}
    for other, opts in TRAIN_OPTIONS.items():
        for o in opts:
            for d in o.decls:
                if d.startswith("--") and d not in own:
                    assert not re.search(rf"{re.escape(d)}\b", out), (algo, d)
    assert set(o.param for o in TRAIN_OPTIONS[algo]) == set(defaults)
    flat = " ".join(out.split())
    for o in TRAIN_OPTIONS[algo]:
        d = defaults[o.param]
        if d is None:
            continue
        shown = int(d) if o.param == "trees_only" else d
        if o.off:               # a --x/--no-x switch shows the spelling of its default
            shown = (o.decls[-1] if d else o.off).lstrip("-")
        assert f"[default: {shown}" in flat.split(o.decls[-1], 1)[1], (algo, o.param)


def test_train_refuses_another_family_option_naming_it(tmp_path):
    r = run_cli("xml-train", TRAIN, tmp_path / "m", "--arity", "3")
    assert r.returncode == 2 and "--arity is an option of --algorithm ldsm" in r.stderr
    r = run_cli("xml-train", TRAIN, tmp_path / "m", "--algorithm", "linear", "-t", "3")
    assert r.returncode == 2 and "-t is an option of --algorithm" in r.stderr
    r = run_cli("xml-train", TRAIN, tmp_path / "m", "--algorithm", "ldsm", "--arity", "9")
    assert r.returncode == 2 and "--arity must be an integer in [2, 8], got 9" in r.stderr
    for twice in (["--algorithm", "ldsm", "--algorithm", "fastxml"],
                  ["--algorithm=nope", "--algorithm", "linear"]):
        r = run_cli("xml-train", TRAIN, tmp_path / "m", *twice)
        assert r.returncode == 2, r.stderr
        assert r.stderr == "xml-train: error: --algorithm is given more than once: name one " \
                           "family\n"
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
@pytest.mark.parametrize("cls", FAMILIES)
def test_save_writes_exactly_the_model(cls, small, tmp_path):
    """save() into a folder holding another model replaces it (trees of the
    older model must not stay and be loaded with the newer one); a
    model holding only tree shapes is refused before the folder is touched,
    and so is a folder that holds something other than a model."""
    X, Y, Xt, _ = small
    quick = QUICK[cls.algorithm]
    big = dict(quick, n_trees=4) if "n_trees" in quick else dict(quick, seed=1)
    folder = tmp_path / "m"
    cls(**big).fit(X, Y).save(folder)
    second = cls(**quick).fit(X, Y)
    second.save(folder)
    back = xmlkit.load_model(folder)
    got, want = back.predict(Xt), second.predict(Xt)
    assert np.array_equal(got.indices, want.indices) and np.array_equal(got.data, want.data)
    if "n_trees" in quick:
        assert sorted(back.trees_) == sorted(second.trees_)
        from xmlkit.driver import fit_folder
        shapes = fit_folder(cls(**quick), X, Y, tmp_path / "f", keep_trees=False)
        before = {p.name: p.read_bytes() for p in folder.iterdir()}
        with pytest.raises(xmlkit.XmlkitError, match="only the shapes"):
            shapes.save(folder)
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(xmlkit.XmlkitError, match="holds no xmlkit model"):
        second.save(other)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]


def test_option_choices_are_the_estimators_constraints():
    """A parameter that takes one of a list of names is offered by xml-train
    with exactly the values its estimator's constraint allows (one home for
    the list: it was written twice, in the estimator and the option table)."""
    import click
    from xmlkit.cli.train import make_command
    from xmlkit.models import REGISTRY
    seen = 0
    for algorithm, cls in REGISTRY.items():
        options = {p.name: p for p in make_command(algorithm).params}
        for name in cls._get_param_names():
            values = cls.param_choices(name)
            if values and name in options:
                assert isinstance(options[name].type, click.Choice), (algorithm, name)
                assert tuple(options[name].type.choices) == values, (algorithm, name)
                seen += 1
    assert seen >= 7


def test_show_defaults_prints_the_estimators_defaults():
    """xml-train --algorithm NAME --show-defaults: every default of the
    family, read from the estimator, as JSON (the omikuji / PECOS dump);
    with any other option or argument, refused."""
    import json
    from conftest import run_cli
    from xmlkit.models import REGISTRY
    for algorithm, cls in REGISTRY.items():
        r = run_cli("xml-train", "--algorithm", algorithm, "--show-defaults")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["algorithm"] == algorithm
        assert out["params"] == json.loads(json.dumps(cls.param_defaults(), default=str))
        assert out["predict_params"] == cls.predict_defaults()
    # (given with other options it would show defaults they do not change: refused)
    for extra in (["-t", "5"], ["data.txt", "m"], ["--seed", "3"]):
        r = run_cli("xml-train", "--algorithm=fastxml", "--show-defaults", *extra)
        assert r.returncode == 2 and r.stdout == "" and " ".join(extra) in r.stderr, r.stderr


@pytest.mark.parametrize("algorithm", sorted(xmlkit.REGISTRY))
def test_parameters_are_grouped_by_purpose(algorithm):
    """PARAM_GROUPS holds every parameter once, in the signature's order;
    the __init__ docstring describes each in its group's section, and
    xml-train --help shows each option under its group's heading."""
    from click.testing import CliRunner
    from xmlkit.cli.train import make_command
    cls = xmlkit.REGISTRY[algorithm]
    titles = [t for t, _ in cls.PARAM_GROUPS]
    grouped = [n for _, names in cls.PARAM_GROUPS for n in names]
    assert grouped == list(cls.param_defaults())
    doc = inspect.getdoc(cls.__init__)
    assert re.findall(r"^(.+) parameters\n-+$", doc, re.M) == titles
    sections = re.split(r"^.+ parameters\n-+$", doc, flags=re.M)[1:]
    for (title, names), text in zip(cls.PARAM_GROUPS, sections):
        text = re.sub(r",\n\s*", ", ", text)        # (a list of names wrapped)
        described = {n.strip() for line in re.findall(r"^([\w, ]+) : ", text, re.M)
                     for n in line.split(",")}
        assert described == set(names), (title, described ^ set(names))
    out = CliRunner().invoke(make_command(algorithm), ["--help"]).output
    assert re.findall(r"^(\w[\w ]*) options:$", out, re.M) == titles
    parts = re.split(r"^\w[\w ]* options:$", out, flags=re.M)[1:]
    flags = {o.param: [d for d in o.decls if d.startswith("--")][0]
             for o in TRAIN_OPTIONS[algorithm]}
    for (title, names), text in zip(cls.PARAM_GROUPS, parts):
        shown = set(re.findall(r"^  (?:-\w, )?(--[\w-]+)", text, re.M))
        assert {flags[n] for n in names if n in flags} == shown, title
