"""The benchmark helpers users run by hand: the synthetic data generator and
the README updater (the benchmarks themselves are run by `make -C scripts`)."""
import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xmlkit.io import read_dataset

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def synth(tmp_path, name, *args):
    subprocess.run([sys.executable, SCRIPTS / "make_synthetic.py", tmp_path / name,
                    "--points", "3000", "--labels", "300", "--features", "2000",
                    "--test-points", "500", *args], check=True, capture_output=True)
    return tmp_path / f"{name}_train.txt", tmp_path / f"{name}_test.txt"


def test_synthetic_data_is_valid_power_law_and_seeded(tmp_path):
    train, test = synth(tmp_path, "a")
    X, Y = read_dataset(train)
    Xt, Yt = read_dataset(test)
    assert X.shape == (3000, 2000) and Y.shape == (3000, 300)
    assert Xt.shape == (500, 2000) and Yt.shape == (500, 300)
    per_point = np.diff(Y.indptr)
    assert per_point.min() >= 1 and 4 < per_point.mean() < 6       # 1 + Poisson(4)
    freq = np.sort(np.bincount(Y.indices, minlength=300))[::-1]
    # rank r drawn with probability ~ 1/r: the top label ~10x the 10th, ~100x the 100th
    assert 5 < freq[0] / freq[9] < 20 and freq[0] / max(1, freq[99]) > 30
    assert np.all(X.data >= 1) and np.all(X.data == np.round(X.data))  # word counts
    # features depend on the labels: points sharing a label share words
    a = (Y[:, np.argmax(np.bincount(Y.indices))].toarray().ravel() > 0)
    share_with = X[a].getnnz(axis=0) / a.sum()
    share_without = X[~a].getnnz(axis=0) / (~a).sum()
    assert (share_with - share_without).max() > 0.2
    again, _ = synth(tmp_path, "b")
    digest = [hashlib.sha256(f.read_bytes()).hexdigest() for f in (train, again)]
    assert digest[0] == digest[1]
    other, _ = synth(tmp_path, "c", "--seed", "1")
    assert hashlib.sha256(other.read_bytes()).hexdigest() != digest[0]


def load_updater():
    spec = importlib.util.spec_from_file_location("update_readme", SCRIPTS / "update_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_blocks_take_the_results_files(tmp_path):
    mod = load_updater()
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "t.md").write_text("| a |\n|---|\n| 1 |\n")
    mod.ROOT = tmp_path
    text = ("intro\n<!-- begin r/t.md -->\nold table\n<!-- end r/t.md -->\nafter\n")
    new, n = mod.update(text)
    assert n == 1
    assert new == "intro\n<!-- begin r/t.md -->\n| a |\n|---|\n| 1 |\n<!-- end r/t.md -->\nafter\n"
    assert mod.update(new)[0] == new                         # a second run changes nothing
    with pytest.raises(SystemExit, match="no matching end"):
        mod.update("<!-- begin r/t.md -->\nx\n")
    with pytest.raises(SystemExit, match="does not exist"):
        mod.update("<!-- begin r/none.md -->\n<!-- end r/none.md -->\n")


def test_cross_fitted_ece_maps_each_half_by_the_other(tmp_path):
    import warnings

    import scipy.sparse as sp

    from xmlkit.calibration import Calibration
    from xmlkit.metrics import calibration
    spec = importlib.util.spec_from_file_location("bench_calibration",
                                                  SCRIPTS / "bench_calibration.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(0)
    n, L = 400, 12
    S = rng.random((n, L))
    # even rows: relevant with probability the score; odd rows: its cube
    Y = rng.random((n, L)) < np.where(np.arange(n)[:, None] % 2 == 0, S, S ** 3)
    S, Y = sp.csr_matrix(S), sp.csr_matrix(Y.astype(np.float64))
    even, odd = np.arange(0, n, 2), np.arange(1, n, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_even, by_odd = Calibration.fit(Y[even], S[even]), Calibration.fit(Y[odd], S[odd])
    rows = [sp.csr_matrix((by_odd if i % 2 == 0 else by_even).probabilities(S[i]))
            for i in range(n)]
    expected = calibration(Y, sp.vstack(rows, format="csr"), 5)["ECE"]
    assert mod.cross_fitted(Y, S) == pytest.approx(expected, abs=1e-12)
    # each half mapped by its own half instead: well calibrated, unlike the above
    own = [sp.csr_matrix((by_even if i % 2 == 0 else by_odd).probabilities(S[i]))
           for i in range(n)]
    assert calibration(Y, sp.vstack(own, format="csr"), 5)["ECE"] < expected - 0.02


def test_prunex_goal_is_judged_against_the_unpruned_tfidf_rows(monkeypatch):
    """bench_prunex's report: the goal compares the first threshold removing
    half the non-zeros with threshold 0 (the same tf-idf rows unpruned), not
    with the original data; the paper's rows (--no-rescale) share threshold
    0's row with FastXML and have their own ΔP@1 above it."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import bench_prunex as bp

    def rec(th, p1, train_s, removed, family="fastxml"):
        m = dict.fromkeys(("P@3", "P@5", "nDCG@1", "nDCG@3", "nDCG@5", "PSP@1", "PSP@3",
                           "PSP@5"), 1.0)
        return {"set": "s", "threshold": th, "family": family, "removed": removed,
                "emptied": 0, "P@1": p1, "train_s": train_s, "model_mb": 1.0,
                "train_rss": 10.0, **m}
    sweep = [rec(None, 60.0, 4.0, 0.0), rec(0, 50.0, 2.0, 0.0), rec(0.07, 49.6, 1.0, 0.74)]
    text = bp.report(sweep, ["s"], [0, 0.07], [0], 2, 50)
    goal = next(line for line in text.splitlines() if line.startswith("- s:"))
    assert "drop 0.40 against the tf-idf unit rows" in goal and "2.00× faster" in goal
    assert "against the original data: drop 10.40" in goal and goal.endswith(": met.")
    sweep[2]["P@1"] = 49.4                                   # a drop of 0.6: not met
    assert bp.report(sweep, ["s"], [0, 0.07], [0], 2, 50).count("**not met**") == 1

    rows = sweep + [rec(0.07, 48.0, 1.0, 0.74, bp.PAPER_ROWS)]
    table = bp.family_report(rows, ["s"], ["fastxml"], [0, 0.07], [0], [0, 1, 2])
    paper = [line for line in table if line.startswith(f"| s | {bp.PAPER_ROWS} |")]
    assert [line.split(" | ")[2] for line in paper] == ["0", "0.07"]
    assert "| 50.00 |" in paper[0] and "| -2.00 |" in paper[1]
