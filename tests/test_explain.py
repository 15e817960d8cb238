"""Explanations (model.explain, xml-predict --explain): exact against brute
force for every family, by hand on a tree, the CLI equal to the API."""
import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import FAMILIES, one_line_error, run_cli
from xmlkit.csr import unit_rows, as_rows
from xmlkit.errors import XmlkitError
from xmlkit.models import load_model

ROWS = 12           # test rows checked against brute force


def _removed(X, i, e):
    """Row i of X without its entry e (scipy csr, 1 row)."""
    row = X[i].tocsr().copy()
    keep = np.ones(row.nnz, bool)
    keep[e] = False
    return sp.csr_matrix((row.data[keep], row.indices[keep], [0, int(keep.sum())]),
                         shape=(1, X.shape[1]))


def _brute(model, X, i, labels, **params):
    """{(label, feature): score with the feature - score without it} for
    every feature of row i of X, by predicting each row without it."""
    full = model.predict(X[i], k=None, **params).toarray()[0]
    out = {}
    row = X[i].tocsr()
    for e, j in enumerate(row.indices):
        without = model.predict(_removed(X, i, e), k=None, **params).toarray()[0]
        for lab in labels:
            out[(int(lab), int(j))] = float(full[lab]) - float(without[lab])
    return out


def _reported(E, i):
    return {(lab, f): c for lab, _, feats in E.row(i) for f, c in feats}


@pytest.fixture(scope="module")
def test_rows(tiny):
    from xmlkit.io import read_dataset
    Xt, _ = read_dataset(tiny / "test.txt")
    return sp.csr_matrix(Xt)


@pytest.mark.parametrize("family,params", [("fastxml", {}), ("pfastrexml", {}),
                                           ("pfastrexml", {"trees_only": True}),
                                           ("pfastrexml", {"rerank": 3}),
                                           ("ldsm", {}), ("embed", {})])
def test_removal_effects_equal_brute_force(tiny, test_rows, family, params):
    """Every feature's reported contribution is the score difference of
    predicting the row without it (1e-6 for the trees; embed's float32
    products: 2e-6), and with n_features above the row's size no feature
    with an effect is missing. PfastreXML with rerank 3: a label that a
    removal pushes out of the re-ranked few scores 0 then."""
    model = load_model(tiny / family)
    X = test_rows[:ROWS]
    E = model.explain(X, k=4, n_features=10_000, **params)
    assert E.kind == "removal"
    tol = 2e-6 if family == "embed" else 1e-6
    moved = 0
    for i in range(ROWS):
        labels = [lab for lab, _, _ in E.row(i)]
        truth = _brute(model, X, i, labels, **params)
        got = _reported(E, i)
        assert set(got) <= set(truth)
        for key, d in truth.items():
            assert abs(got.get(key, 0.0) - d) <= tol, (i, key)
            moved += abs(d) > tol
    assert moved > 20              # (the check saw real effects)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_scores_are_predict_scores(tiny, test_rows, family):
    """An explanation's labels and scores are predict's, byte for byte."""
    model = load_model(tiny / family)
    S = model.predict(test_rows, k=5)
    E = model.explain(test_rows, k=5, n_features=3)
    assert (E.scores != S).nnz == 0
    assert np.array_equal(E.scores.indptr, S.indptr)
    assert np.all(np.diff(E.ptr) <= 3)


def test_linear_terms_are_w_times_x(tiny, test_rows):
    """Linear: each contribution is w_lj x_j of the unit row, and the terms
    plus the label's bias are its margin."""
    model = load_model(tiny / "linear")
    X = test_rows[:ROWS]
    E = model.explain(X, k=3, n_features=10_000)
    assert E.kind == "margin"
    U = unit_rows(as_rows(X)).to_scipy().toarray()
    W = model._weights().toarray()
    b = model.arrays_["bias"]
    for i in range(ROWS):
        for lab, _, feats in E.row(i):
            for f, c in feats:
                assert c == pytest.approx(W[f, lab] * U[i, f], rel=1e-6, abs=1e-12)
            expected = {f for f in np.flatnonzero(U[i] * W[:, lab])}
            assert {f for f, _ in feats} == expected
            assert sum(c for _, c in feats) + b[lab] == pytest.approx(U[i] @ W[:, lab] + b[lab],
                                                                      abs=1e-5)


def _one_tree():
    """A hand-made tree over 3 features, 2 labels: the root splits on
    x0 - 0.5 x1 - 0.2 (bias 1), its first child is a leaf (label 0: 1.0),
    its second splits on x2 - 0.1 into leaves (label 0: 0.2, label 1: 0.8)
    and (label 1: 1.0)."""
    return {"child": np.array([[1, 2], [-1, -1], [3, 4], [-1, -1], [-1, -1]], np.int32),
            "depth": np.array([0, 1, 1, 2, 2], np.int32),
            "w_ptr": np.array([0, 3, 3, 5, 5, 5], np.int64),
            "w_idx": np.array([0, 1, 3, 2, 3], np.int32),
            "w_val": np.array([1.0, -0.5, -0.2, 1.0, -0.1], np.float32),
            "l_ptr": np.array([0, 0, 1, 1, 3, 4], np.int64),
            "l_idx": np.array([0, 0, 1, 1], np.int32),
            "l_val": np.array([1.0, 0.2, 0.8, 1.0], np.float32)}


def test_tree_effects_by_hand():
    """x = (1, 1, 1): root margin 1 - 0.5 - 0.2 = 0.3 -> leaf 1 (label 0:
    1.0). Without x0 the margin is -0.7: node 2, whose margin 1 - 0.1 =
    0.9 -> leaf 3 (0.2, 0.8): label 0 loses 0.8, label 1 gains 0.8. Without
    x1 (0.8) or x2 (no weight on the path) nothing moves."""
    from xmlkit.models.forest import Forest, tree_effects
    forest = Forest([_one_tree()], 3, 2, 1.0)
    X = as_rows(sp.csr_matrix(np.array([[1.0, 1.0, 1.0]], np.float32)))
    S = as_rows(sp.csr_matrix(np.array([[1.0, 1e-9]], np.float32)))    # labels 0 and 1
    _, entry, feature, effect = tree_effects(forest, X, S)
    got = sorted(zip(entry.tolist(), feature.tolist(), effect.tolist()))
    assert got == [(0, 0, pytest.approx(0.8)), (1, 0, pytest.approx(-0.8))]
    # a margin that removal makes exactly 0 goes to the first child, as routing does
    X = as_rows(sp.csr_matrix(np.array([[1.0, 1.6, 0.0]], np.float32)))  # margin 1-0.8-0.2 = 0
    S = as_rows(sp.csr_matrix(np.array([[1.0, 0.0]], np.float32)))
    before = forest.predict(X).to_scipy().toarray()[0, 0]
    _, entry, feature, effect = tree_effects(forest, X, S)
    for e, j in enumerate(X.indices):
        keep = np.arange(X.nnz) != e
        without = sp.csr_matrix((X.data[keep], X.indices[keep], [0, keep.sum()]), shape=(1, 3))
        after = forest.predict(without).to_scipy().toarray()[0, 0]
        assert dict(zip(feature.tolist(), effect.tolist())).get(int(j), 0.0) == \
            pytest.approx(before - after)


def test_n_features_keeps_the_largest(tiny, test_rows):
    """n_features keeps a label's largest |contributions|, largest first,
    ties to the lower feature: a prefix of the full list's order."""
    model = load_model(tiny / "fastxml")
    full = model.explain(test_rows, k=3, n_features=10_000)
    few = model.explain(test_rows, k=3, n_features=2)
    for i in range(test_rows.shape[0]):
        for (lab, s, feats), (lab2, s2, top) in zip(full.row(i), few.row(i)):
            assert (lab, s) == (lab2, s2)
            assert top == feats[:2]
            mags = [abs(c) for _, c in feats]
            assert mags == sorted(mags, reverse=True)


@pytest.mark.parametrize("family", ["fastxml", "linear"])
def test_stored_zeros_explain_as_absent(tiny, test_rows, family):
    """A feature stored as 0 in a row has nothing to remove: the row explains
    as the row without that entry."""
    model = load_model(tiny / family)
    X = sp.csr_matrix(test_rows[:ROWS])
    absent = [int(np.setdiff1d(np.arange(X.shape[1]), X[i].indices)[0]) for i in range(ROWS)]
    Z = sp.csr_matrix((np.concatenate([X.data, np.zeros(ROWS)]),
                       (np.repeat(np.arange(ROWS), np.diff(X.indptr)).tolist() + list(range(ROWS)),
                        np.concatenate([X.indices, absent]))), shape=X.shape)
    Z.sum_duplicates()
    assert Z.nnz == X.nnz + ROWS and not Z.data.all()
    ref = model.explain(X, k=3, n_features=10_000)
    got = model.explain(Z, k=3, n_features=10_000)
    assert np.array_equal(got.features, ref.features)
    assert np.array_equal(got.contributions, ref.contributions)


def test_labels_given_keep_their_scores(tiny, test_rows):
    """labels=: those entries explained, their values the scores reported."""
    model = load_model(tiny / "fastxml")
    S = model.predict(test_rows, k=2)
    S.data[:] = 0.5
    E = model.explain(test_rows, labels=S, n_features=4)
    assert (E.scores != S).nnz == 0
    ref = model.explain(test_rows, k=2, n_features=4)
    assert np.array_equal(E.features, ref.features)
    assert np.array_equal(E.contributions, ref.contributions)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_n_features_refused(tiny, test_rows, bad):
    model = load_model(tiny / "fastxml")
    with pytest.raises(XmlkitError, match="n_features"):
        model.explain(test_rows, n_features=bad)


def test_wide_data_refused(tiny, test_rows):
    model = load_model(tiny / "fastxml")
    wide = sp.hstack([test_rows, sp.csr_matrix((test_rows.shape[0], 3))]).tocsr()
    with pytest.raises(XmlkitError, match="features"):
        model.explain(wide)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cli_equals_api(tiny, family, tmp_path):
    """xml-predict --explain writes, per row, the API's labels (best first),
    scores (6 decimals) and features with their contributions (7
    significant digits); the scores are those xml-predict writes without
    --explain."""
    out = tmp_path / "ex.jsonl"
    r = run_cli("xml-predict", tiny / "test.txt", out, tiny / family, "--explain", "3", "-k",
                "4", "-q")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    from xmlkit.io import read_dataset, read_matrix
    Xt, _ = read_dataset(tiny / "test.txt")
    E = load_model(tiny / family).explain(Xt, k=4, n_features=3)
    assert len(rows) == Xt.shape[0]
    scores = tmp_path / "s.txt"
    assert run_cli("xml-predict", tiny / "test.txt", scores, tiny / family, "-k", "4",
                   "-q").returncode == 0
    S = read_matrix(scores).toarray()
    for i, obj in enumerate(rows):
        want = E.row(i)
        assert obj["labels"] == [lab for lab, _, _ in want]
        assert obj["scores"] == [float(f"{s:.6f}") for _, s, _ in want]
        assert obj["scores"] == [S[i, lab] for lab in obj["labels"]]
        for got, (_, _, feats) in zip(obj["features"], want):
            assert [f for f, _ in got] == [f for f, _ in feats]
            assert [c for _, c in got] == [float(f"{c:.7g}") for _, c in feats]


def test_cli_index_base(tiny, tmp_path):
    """--index-base 1: labels and features are numbered from 1."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run_cli("xml-predict", tiny / "test.txt", a, tiny / "fastxml", "--explain", "2",
                   "-q").returncode == 0
    from xmlkit.io import read_dataset, write_dataset
    Xt, Yt = read_dataset(tiny / "test.txt")
    write_dataset(tmp_path / "one.txt", Xt, Yt, index_base=1)
    assert run_cli("xml-predict", tmp_path / "one.txt", b, tiny / "fastxml", "--explain", "2",
                   "--index-base", "1", "-q").returncode == 0
    for x, y in zip(a.read_text().splitlines(), b.read_text().splitlines()):
        x, y = json.loads(x), json.loads(y)
        assert [v + 1 for v in x["labels"]] == y["labels"]
        assert [[[f + 1, c] for f, c in lab] for lab in x["features"]] == y["features"]


@pytest.mark.parametrize("args,what", [
    (["--explain", "0"], "--explain"),
    (["--explain", "x"], "--explain"),
    (["--explain", "2", "--dask", "local:1"], "--dask"),
    (["--explain", "2", "--names"], "--names"),
])
def test_cli_refuses(tiny, tmp_path, args, what):
    out = tmp_path / "ex.jsonl"
    r = run_cli("xml-predict", tiny / "test.txt", out, tiny / "fastxml", *args)
    assert one_line_error(r), r.stderr
    assert what in r.stderr
    assert not out.exists()


def test_cli_damaged_input_writes_nothing(tiny, tmp_path):
    bad = tmp_path / "bad.txt"
    lines = (tiny / "test.txt").read_text().splitlines()
    lines[7] = lines[7] + " 12:zz"
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "ex.jsonl"
    r = run_cli("xml-predict", bad, out, tiny / "fastxml", "--explain", "2")
    assert one_line_error(r), r.stderr
    assert f"{bad}:8" in r.stderr
    assert not out.exists()


def test_calibrated_folder(tiny, test_rows, tmp_path):
    """On a calibrated folder the scores are the probabilities xml-predict
    writes, and a removal effect c on score s becomes p(s) - p(s - c), p
    the map of the label's rank (one per rank of the first 5, then the
    bands: k=8 reaches the first band) (Calibrated.explain; xml-predict --explain writes the
    same)."""
    import shutil
    from xmlkit.models.calibrated import Calibrated
    folder = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", folder)
    r = run_cli("xml-calibrate", tiny / "train.txt", folder, "-q")
    assert r.returncode == 0, r.stderr
    cal = Calibrated.load(folder)
    E = cal.explain(test_rows, k=8, n_features=10_000)
    raw = cal.model.explain(test_rows, k=8, n_features=10_000)
    assert (E.scores != cal.predict(test_rows, k=8)).nnz == 0
    maps = [(0, cal.calibration.map), *cal.calibration.deep]
    assert [r for r, _ in maps if r >= 5][0] == 5
    checked = deep = 0
    for i in range(test_rows.shape[0]):
        mapped = {}
        for rank, (lab, s, feats) in enumerate(raw.row(i)):
            p = [m for r, m in maps if r <= rank][-1]
            for f, c in feats:
                mapped[(lab, f)] = float(p.apply(s) - p.apply(s - c))
                deep += rank >= 5
        got = _reported(E, i)
        assert got == pytest.approx({k: v for k, v in mapped.items() if v != 0}, abs=1e-12)
        checked += len(got)
    assert checked > 10 and deep > 10
    out, scores = tmp_path / "ex.jsonl", tmp_path / "p.txt"
    r = run_cli("xml-predict", tiny / "test.txt", out, folder, "--explain", "3", "-k", "3", "-q")
    assert r.returncode == 0, r.stderr
    assert run_cli("xml-predict", tiny / "test.txt", scores, folder, "-k", "3",
                   "-q").returncode == 0
    from xmlkit.io import read_matrix
    P = read_matrix(scores).toarray()
    E3 = cal.explain(test_rows, k=3, n_features=3)
    for i, line in enumerate(out.read_text().splitlines()):
        obj = json.loads(line)
        assert obj["scores"] == [P[i, lab] for lab in obj["labels"]]
        assert obj["features"] == [[[f, float(f"{c:.7g}")] for f, c in feats]
                                   for _, _, feats in E3.row(i)]


@pytest.mark.skipif(os.name != "posix", reason="a terminal by pty")
def test_table_on_a_terminal(tmp_path):
    """--text --names to '-' on a terminal: per document its id, per label
    its name and score, the words for and against it."""
    pytest.importorskip("sklearn")
    import pty
    from conftest import SAMPLES
    model = tmp_path / "m"
    docs = tmp_path / "docs.jsonl"
    import lzma
    lines = lzma.open(SAMPLES / "pydists_train.jsonl.xz", "rt").read().splitlines()
    (tmp_path / "train.jsonl").write_text("\n".join(lines[:300]) + "\n")
    docs.write_text(lines[300] + "\n")
    r = run_cli("xml-train", tmp_path / "train.jsonl", model, "--text", "-q")
    assert r.returncode == 0, r.stderr
    from conftest import BIN
    pid, fd = pty.fork()
    if pid == 0:                                      # (the child: xml-predict)
        os.execv(str(BIN / "xml-predict"), ["xml-predict", str(docs), "-", str(model),
                                            "--text", "--names", "--explain", "3", "-k", "2",
                                            "-q"])
    text = b""
    while True:
        try:
            piece = os.read(fd, 4096)
        except OSError:
            break
        if not piece:
            break
        text += piece
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    shown = text.decode().splitlines()
    doc = json.loads(lines[300])
    assert shown[0].strip() == doc["id"]
    assert sum(line.strip().startswith("for:") for line in shown) == 2
    assert sum(line.strip().startswith("against:") for line in shown) == 2
    # the same run into a file: JSON Lines with terms and names
    out = tmp_path / "ex.jsonl"
    r = run_cli("xml-predict", docs, out, model, "--text", "--names", "--explain", "3", "-k",
                "2", "-q")
    assert r.returncode == 0, r.stderr
    obj = json.loads(out.read_text())
    assert obj["id"] == doc["id"] and all(isinstance(n, str) for n in obj["labels"])
    assert all(isinstance(f, str) for lab in obj["features"] for f, _ in lab)
    for name in obj["labels"]:
        assert any(name in line for line in shown)


@pytest.mark.parametrize("name", ["fastxml_model", "pfastrexml_model"])
def test_cpp_tool_folders(shared, bibtex, name):
    """A C++ tool's model folder (trees whose rows need not be ascending)
    is explained exactly too."""
    model = load_model(shared / "fixtures" / "cpp_reference" / name)
    X = sp.csr_matrix(bibtex[2])[:6]
    E = model.explain(X, k=3, n_features=10_000)
    moved = 0
    for i in range(X.shape[0]):
        labels = [lab for lab, _, _ in E.row(i)]
        got = _reported(E, i)
        for key, d in _brute(model, X, i, labels).items():
            assert abs(got.get(key, 0.0) - d) <= 1e-6, (i, key)
            moved += d != 0
    assert moved > 20


def test_pfastrexml_rerank_cut(tiny, test_rows):
    """With many trees a removal moves other labels' tree scores little:
    whether a label stays among the `rerank` best is told from the row's
    scores (the rows where it cannot be told are scored again); exact
    either way."""
    import xmlkit
    from xmlkit.io import read_dataset
    X, Y = read_dataset(tiny / "train.txt")
    model = xmlkit.PfastreXML(n_trees=24, seed=3).fit(X, Y)
    rows = test_rows[:8]
    E = model.explain(rows, k=3, n_features=10_000, rerank=6)
    moved = 0
    for i in range(rows.shape[0]):
        labels = [lab for lab, _, _ in E.row(i)]
        got = _reported(E, i)
        for key, d in _brute(model, rows, i, labels, rerank=6).items():
            assert abs(got.get(key, 0.0) - d) <= 1e-6, (i, key)
            moved += abs(d) > 1e-6
    assert moved > 20


@pytest.mark.skipif(os.name != "posix", reason="select on a pipe")
def test_cli_stream_answers_each_row(tiny):
    """Rows piped in (standard input, standard output) are explained as they
    arrive, as xml-predict answers a stream: the first before the input
    ends."""
    import subprocess
    from conftest import BIN
    lines = (tiny / "test.txt").read_text().splitlines()
    n, d, L = lines[0].split()
    p = subprocess.Popen([str(BIN / "xml-predict"), "-", "-", str(tiny / "fastxml"),
                          "--explain", "2", "-q"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    p.stdin.write(f"3 {d} {L}\n{lines[1]}\n".encode())
    p.stdin.flush()
    import select
    ready, _, _ = select.select([p.stdout], [], [], 30)     # (before the rest is written)
    if not ready:
        p.kill()
        pytest.fail("no answer to the first row within 30 s of its arrival")
    first = json.loads(p.stdout.readline())
    p.stdin.write(f"{lines[2]}\n{lines[3]}\n".encode())
    p.stdin.close()
    rest = p.stdout.read().decode().splitlines()
    assert p.wait() == 0
    assert len(first["labels"]) == 5 and len(rest) == 2
