"""xml-eval's tail bins by hand, and --plot / --compare through the CLI."""
import json

import numpy as np
import pytest
import scipy.sparse as sp

from xmlkit.metrics import binned_precision, frequency_bins, ranking_metrics
from conftest import TEST, TRAIN, run_cli


def test_bins_by_hand():
    # training frequencies: label 0: 5, 1: 1, 2: 3, 3: 0 -> ascending (freq, index):
    # 3, 1 | 2, 0 -> bins {1, 3} = 0 and {0, 2} = 1
    Ytr = sp.csr_matrix(np.array([[1, 1, 1, 0], [1, 0, 1, 0], [1, 0, 1, 0],
                                  [1, 0, 0, 0], [1, 0, 0, 0]], np.float32))
    bins, info = frequency_bins(Ytr, 2)
    assert bins.tolist() == [1, 0, 1, 0]
    assert info == [{"labels": 2, "min_freq": 0, "max_freq": 1, "train_positives": 1},
                    {"labels": 2, "min_freq": 3, "max_freq": 5, "train_positives": 8}]
    # point 0: truth {0, 1}, top 2 = 0, 1 (two hits: bins 1 and 0);
    # point 1: truth {3}, top 2 = 2, 3 (one hit: bin 0)
    Y = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 0, 0, 1]], np.float32))
    S = sp.csr_matrix(np.array([[0.9, 0.8, 0.7, 0], [0, 0, 0.9, 0.5]], np.float32))
    q = np.array([1.0, 4.0, 2.0, 8.0])
    r = binned_precision(Y, S, bins, 2, 2, q)
    assert r["hits"].tolist() == [2, 1]
    assert r["P@k"] == pytest.approx([2 / 4, 1 / 4])          # over N k = 4
    # PSP@2: gained q per bin {q1 + q3, q0} = {12, 1} over the best: (4 + 1) + 8 = 13
    assert r["PSP@k"] == pytest.approx([12 / 13, 1 / 13])
    m = ranking_metrics(Y, S, (2,), q)
    assert r["P@k"].sum() == pytest.approx(m["P@2"])
    assert r["PSP@k"].sum() == pytest.approx(m["PSP@2"])


@pytest.mark.slow
def test_cli_plot_and_json(tmp_path):
    models, scores = {}, {}
    for algo in ("fastxml", "pfastrexml"):
        models[algo], scores[algo] = tmp_path / algo, tmp_path / f"{algo}.txt"
        r = run_cli("xml-train", TRAIN, models[algo], "--algorithm", algo, "-t", "2", "-q")
        assert r.returncode == 0, r.stderr
        r = run_cli("xml-predict", TEST, scores[algo], models[algo], "-q")
        assert r.returncode == 0, r.stderr
    r = run_cli("xml-eval", scores["fastxml"], TEST, "--train-labels", TRAIN, "--compare",
                scores["pfastrexml"], "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    tail = out["tail_bins"]
    assert tail["k"] == 5 and len(tail["bins"]) == 10
    assert sum(b["labels"] for b in tail["bins"]) == out["n_labels"]
    mine = tail["scores"][str(scores["fastxml"])]
    assert sum(b["P@k"] for b in mine) == pytest.approx(out["metrics"]["P@5"], abs=1e-9)
    assert sum(b["PSP@k"] for b in mine) == pytest.approx(out["metrics"]["PSP@5"], abs=1e-9)
    assert str(scores["pfastrexml"]) in tail["scores"]
    # --compare without --train-labels: one line, exit 2, no file
    r = run_cli("xml-eval", scores["fastxml"], TEST, "--compare", scores["pfastrexml"],
                "--plot", tmp_path / "x.png")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.png").exists()
    # the picture (with matplotlib); without --train-labels, the reliability diagram alone
    pytest.importorskip("matplotlib")
    r = run_cli("xml-eval", scores["fastxml"], TEST, "--plot", tmp_path / "x.png", "-q")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "x.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    png = tmp_path / "tail.png"
    r = run_cli("xml-eval", scores["fastxml"], TEST, "--train-labels", TRAIN, "--compare",
                scores["pfastrexml"], "--plot", png, "-q")
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
