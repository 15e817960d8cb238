"""xml-eval as users run it, and parity with the C++ tools' score fixture."""
import json

import numpy as np
import pytest

from conftest import SAMPLES, run_cli
from xmlkit.io import read_dataset, read_inv_propensity, read_matrix
from xmlkit.metrics import calibration, ranking_metrics

def test_cpp_score_fixture_against_an_independent_implementation(shared):
    """xml-eval on the C++ tool's FastXML scores (3 trees) of the Bibtex test
    points, with the fixture's inverse propensities: every P, nDCG, PSP,
    PSnDCG and R @1..5 equals napkinXC's (test_metrics_oracle.py), and the
    Python API gives the same numbers."""
    pytest.importorskip("napkinxc")
    from test_metrics_oracle import ORACLE, rankings
    fx = shared / "fixtures" / "cpp_reference"
    r = run_cli("xml-eval", fx / "fastxml_scores.txt", SAMPLES / "bibtex_test.txt.xz",
                "--inv-propensity", fx / "inv_prop.txt", "-k", "1,2,3,4,5", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["metrics"]
    _, Y = read_dataset(SAMPLES / "bibtex_test.txt.xz")
    S = read_matrix(fx / "fastxml_scores.txt")
    q = read_inv_propensity(fx / "inv_prop.txt", 159)
    labels = [list(map(int, row)) for row in np.split(Y.indices, Y.indptr[1:-1])]
    ranked = rankings(S)
    has = np.diff(Y.indptr) > 0         # napkinXC's R@k divides by |y|: points with labels
    for name, oracle in ORACLE.items():
        if name == "R":
            # xmlkit's mean is over every point (a point without labels adds 0)
            theirs = oracle([l for l, h in zip(labels, has) if h],
                            [r for r, h in zip(ranked, has) if h], q) * has.mean()
        else:
            theirs = oracle(labels, ranked, q)
        for k in range(1, 6):
            assert got[f"{name}@{k}"] == pytest.approx(100 * theirs[k - 1], abs=1e-7), (name, k)
    api = ranking_metrics(Y, S, range(1, 6), q)
    api.update({f"ECE@{k}": calibration(Y, S, k)["ECE"] for k in range(1, 6)})
    assert {k: 100 * v for k, v in api.items()} == pytest.approx(got, abs=1e-9)


def test_table_and_train_label_propensities(shared, tmp_path):
    fx = shared / "fixtures" / "cpp_reference"
    r = run_cli("xml-eval", fx / "fastxml_scores.txt", SAMPLES / "bibtex_test.txt.xz",
                "--train-labels", SAMPLES / "bibtex_train.txt.xz", "-k", "1,3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["metric", "@1", "@3"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[1:]}
    assert rows["P"] == ["53.20", "31.44"]
    # computed from training labels with A=0.55, B=1.5: same as the fixture file
    assert rows["PSP"] == ["40.42", "41.42"]
    assert set(rows) == {"P", "nDCG", "PSP", "PSnDCG", "R", "ECE"}


def test_without_propensities_ps_rows_are_left_out(tmp_path):
    scores = tmp_path / "s.txt"
    scores.write_text("2 3\n0:0.5 2:0.1\n1:1.0\n")
    truth = tmp_path / "y.txt"
    truth.write_text("2 3\n0:1\n2:1\n")
    r = run_cli("xml-eval", scores, truth, "-k", "1,2")
    assert r.returncode == 0
    rows = {ln.split()[0]: ln.split()[1:] for ln in r.stdout.splitlines()[1:]}
    assert set(rows) == {"P", "nDCG", "R", "ECE"}
    assert rows["P"] == ["50.00", "25.00"]
    # top 1: (0.5, relevant), (1.0, not): a bin each; |1 - 0.5| + |0 - 1| over 2 entries.
    # top 2: 0.1 (not), 0.5 (relevant), 1.0 (not): (0.1 + 0.5 + 1) / 3
    assert rows["ECE"] == ["75.00", "53.33"]
    assert "PSP@k" in r.stderr
    assert run_cli("xml-eval", scores, truth, "-q").stderr == ""


@pytest.mark.parametrize("args, words", [
    (["-k", "0"], "-k takes"),
    (["-k", "a,b"], "-k takes"),
    (["-A", "0.5"], "need --train-labels"),
    (["--train-labels", "T", "--inv-propensity", "Q"], "not both"),
    (["--propensity-preset", "bogus"], "Invalid value"),
])
def test_bad_options(tmp_path, args, words):
    scores = tmp_path / "s.txt"
    scores.write_text("1 3\n0:0.5\n")
    r = run_cli("xml-eval", scores, scores, *args)
    assert r.returncode == 2
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_shape_mismatch(tmp_path):
    scores = tmp_path / "s.txt"
    scores.write_text("1 3\n0:0.5\n")
    truth = tmp_path / "y.txt"
    truth.write_text("1 4\n0:1\n")
    r = run_cli("xml-eval", scores, truth)
    assert r.returncode == 2 and "scores 3 labels" in r.stderr


def test_label_set_metrics(tmp_path):
    """--sets reads every stored entry as a predicted label; --threshold cuts scores."""
    truth = tmp_path / "y.txt"
    truth.write_text("3 4\n0:1 1:1\n2:1\n\n")
    pred = tmp_path / "p.txt"
    pred.write_text("3 4\n0:0.9 2:0.4\n2:0.8 3:0.2\n\n")
    r = run_cli("xml-eval", pred, truth, "--sets", "--json")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)["metrics"]
    # sets {0,2}, {2,3}, {}: tp 2, fp 2, fn 1 -> micro-F1 4/7, Hamming 3/12
    assert m["micro_f1"] == pytest.approx(4 / 7) and m["hamming_loss"] == pytest.approx(3 / 12)
    r = run_cli("xml-eval", pred, truth, "--threshold", "0.5", "--json")
    m = json.loads(r.stdout)["metrics"]
    # sets {0}, {2}, {}: tp 2, fn 1 -> micro-F1 4/5, example-F1 (2/3 + 1 + 1) / 3
    assert m["micro_f1"] == pytest.approx(4 / 5)
    assert m["example_f1"] == pytest.approx((2 / 3 + 2) / 3)
    r = run_cli("xml-eval", pred, truth, "--sets")
    assert r.returncode == 0 and "macro_f1" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("family", ["fastxml", "linear"])
def test_one_based_pipeline_equals_the_zero_based_one(family, tmp_path):
    """xml-train, xml-predict and xml-eval all given --index-base 1 on
    1-based copies of the files: the same metrics as the 0-based pipeline;
    the score file is the 0-based one with every label index one higher."""
    from conftest import TEST, TRAIN
    from xmlkit.io import write_dataset
    metrics, scores = {}, {}
    for base in (0, 1):
        d = tmp_path / str(base)
        d.mkdir()
        for name, src, n in (("train", TRAIN, 400), ("test", TEST, 100)):
            X, Y = read_dataset(src)
            write_dataset(d / f"{name}.txt", X[:n], Y[:n], index_base=base)
        flag = ["--index-base", str(base)]
        for cmd in (["xml-train", d / "train.txt", d / "m", "--algorithm", family, "-q"]
                    + (["-t", "2"] if family == "fastxml" else []),
                    ["xml-predict", d / "test.txt", d / "s.txt", d / "m", "-q"],
                    ["xml-eval", d / "s.txt", d / "test.txt", "--train-labels",
                     d / "train.txt", "--json", "-q"]):
            r = run_cli(*cmd, *flag)
            assert r.returncode == 0, (cmd[0], r.stderr)
        metrics[base] = json.loads(r.stdout)["metrics"]
        scores[base] = (d / "s.txt").read_text().splitlines()
    assert metrics[1] == metrics[0] and metrics[0]["P@1"] > 20
    assert scores[1][0] == scores[0][0]
    bump = [" ".join(f"{int(i) + 1}:{v}" for i, v in (e.split(":") for e in line.split()))
            for line in scores[0][1:]]
    assert scores[1][1:] == bump
