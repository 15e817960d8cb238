"""Every predict option of every family goes the same way through predict,
explain (xml-predict --explain), calibration and Dask: each option of a
family's PREDICT_PARAMS (the one place the options are declared; the
commands, explain, the calibration and the cluster read them from there)
is tried with values other than its default. A new option needs values in
OTHER (the test names it otherwise) and then is checked everywhere."""
import numpy as np
import pytest
import scipy.sparse as sp

from conftest import FAMILIES
from xmlkit.errors import InvalidParameterError
from xmlkit.models import load_model

#: values other than the defaults of each predict option (those a family
#: refuses are skipped); threshold goes with decision="threshold"
OTHER = {"decision": ["threshold", "f1"], "threshold": [0.3], "beam_width": [2],
         "rerank": [3], "trees_only": [True]}
#: the options that decide label sets from the scores, not the scores
DECIDING = ("decision", "threshold")
ROWS = 40


def option_sets(model):
    """[(option, its predict keywords)] for each option value the family
    takes; an option without values in OTHER fails the test."""
    out = []
    for name in model.PREDICT_PARAMS:
        assert name in OTHER, f"{model.algorithm}: predict option {name!r} has no values in OTHER"
        for value in OTHER[name]:
            kw = {name: value} if name != "threshold" else {"decision": "threshold",
                                                            name: value}
            try:
                if model.predict_params(**kw)[name] == model.predict_params()[name]:
                    continue
            except InvalidParameterError:
                continue                        # (a value the family does not take)
            out.append((name, kw))
    return out


@pytest.fixture(scope="module")
def rows(tiny):
    from xmlkit.io import read_dataset
    Xt, _ = read_dataset(tiny / "test.txt")
    return sp.csr_matrix(Xt)[:ROWS]


def test_every_family_has_options_tried(tiny):
    """Each family's options beyond the decision are tried (a family whose
    only option is its decision, the trees' "scores", has none to try)."""
    tried = {f: {n for n, _ in option_sets(load_model(tiny / f))} for f in FAMILIES}
    assert tried["parabel"] == {"beam_width"}
    assert tried["pfastrexml"] == {"rerank", "trees_only"}
    assert {"decision", "threshold"} <= tried["embed"] and \
        {"decision", "threshold"} <= tried["linear"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_explain_scores_with_every_option(tiny, rows, family):
    """An explanation with an option explains predict's labels with it:
    the same labels and scores, byte for byte."""
    model = load_model(tiny / family)
    for name, kw in option_sets(model):
        S = sp.csr_matrix(model.predict(rows, k=5, **kw))
        E = model.explain(rows, k=5, n_features=3, **kw)
        got = sp.csr_matrix(E.scores)
        assert np.array_equal(got.indptr, S.indptr), (family, kw)
        assert np.array_equal(got.indices, S.indices) and np.array_equal(got.data, S.data), \
            (family, kw)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_calibration_is_told_of_every_option_that_changes_scores(tiny, rows, family):
    """An option that changes the scores a calibration maps (the model's
    ranked scores) is named by other_scores, so that a calibrated model
    refuses it; the deciding options never are."""
    from xmlkit.models.calibrated import ranked
    model = load_model(tiny / family)
    base = sp.csr_matrix(model.predict(rows, k=20, **ranked(model)))
    for name, kw in option_sets(model):
        names = model.other_scores(**kw)
        if name in DECIDING:
            assert name not in names, (family, kw)
            continue
        S = sp.csr_matrix(model.predict(rows, k=20, **{**ranked(model), **kw}))
        both = base.multiply(S > 0) - S.multiply(base > 0)   # (entries both scored)
        if abs(both).max() > 1e-7:
            assert name in names, (family, kw)


@pytest.mark.slow
def test_dask_predicts_with_every_option(tiny, rows):
    """The cluster's prediction with each option is the machine's, byte for
    byte for every family (no prediction's sums follow a BLAS's threads)."""
    from xmlkit import cluster
    from xmlkit.csr import as_rows
    R = as_rows(rows)
    with cluster.connect("local:2") as client:
        ex = cluster.DaskExecutor(client)
        for family in sorted(FAMILIES):
            model = load_model(tiny / family)
            for name, kw in [("", {})] + option_sets(model):
                if model.needs_all_rows(**kw):
                    continue
                want = as_rows(model.predict(R, k=5, **kw)).to_scipy()
                got = sp.vstack([as_rows(g).to_scipy() for g in
                                 ex.predict_blocks(model, {"k": 5, **kw}, [R], R.shape[0])])
                assert np.array_equal(got.indptr, want.indptr), (family, kw)
                assert np.array_equal(got.indices, want.indices), (family, kw)
                assert np.array_equal(got.data, want.data), (family, kw)
