"""Parabel benchmark: accuracy, train/predict wall time, peak memory and model
size of xmlkit's Parabel through the command line, with the C++ defaults (3
trees, -m 100, squared-hinge classifiers, beam 10), on Bibtex, Delicious and
the two real text sets of ../shared/data (debtags: short descriptions;
manpages: long documents), Mulan's Yeast (dense) and Corel5k, and the 100k
synthetic set of bench_scale.py (made here; seed 0 and one side-by-side
round only: a C++ training takes minutes), next to the original C++ tool.

    python scripts/bench_parabel.py [--configs bibtex delicious debtags manpages ...]
        [--seeds 0 1 2 3 4] [--timing-seeds 0 1 2] [--threads 1 2] [--trees 3]
        [--rounds 3] [--markdown results/parabel.md]

With the C++ tools' binaries (--cpp-bin DIR or $XMLKIT_CPP_BIN: a folder
outside the project, built from the tools' public source), each setting and
thread count also runs parabel_train / parabel_predict and xmlkit
alternately, --rounds times (whole commands, medians; both predictions write
each row's 100 best scores, as parabel_predict always does), and the C++ tool's own
seeds (its tree t is seeded by t: seed s is trees 3s .. 3s+2) give its means.
The Bonsai rows train xmlkit's wide trees (--arity 100 --unbalanced
--max-depth 3).
"""
from pathlib import Path

import benchlib
from bench_scaling import generate
from benchlib import HERE, WORK, Step

SYN = 100_000
SYN_PREFIX = WORK / "parabel" / f"syn{SYN}"
# the synthetic set: make_synthetic.py, seed 0, N points, N/10 labels, 100k features
SYN_DATA = Step(WORK / "parabel" / f"syn{SYN}.data.json", generate, [HERE / "make_synthetic.py"],
                prefix=SYN_PREFIX, n=SYN, labels=SYN // 10, features=100000,
                test_points=10000)

ARGS = ["--algorithm", "parabel", "-m", "100", "-b", "1.0", "-c", "1.0"]
BONSAI = ["--algorithm", "parabel", "--arity", "100", "--unbalanced", "--max-depth", "3"]
# the C++ tool's command lines (its README's defaults)
SBS = {"cpp_train": ["parabel_train", "$X", "$Y", "$model", "-T", "$T", "-s", "0", "-t", "3",
                     "-b", "1.0", "-c", "1.0", "-m", "100", "-tcl", "0.1", "-tce", "0",
                     "-e", "0.0001", "-n", "20", "-k", "0", "-q", "1"],
       "cpp_predict": ["parabel_predict", "$test_X", "$model", "$scores", "-T", "$T",
                       "-B", "10", "-q", "1"],
       # parabel_predict writes each row's 100 best scores (it cuts its score
       # matrix to 100 a row before writing); xml-predict writes the same rows
       "predict_args": ["-k", "100"],
       "cpp_seeds": True}
CONFIGS = [
    *({"name": name, "label": f"{label} Parabel", "set": name, "train_args": ARGS, **SBS,
       "variants": [("", "", [], {"cpp": {}, "target": "P@k ≥ the C++ tool's − 0.2"})]}
      for name, label in (("bibtex", "Bibtex"), ("delicious", "Delicious"),
                          ("debtags", "debtags"), ("manpages", "manpages"),
                          ("yeast", "Yeast"), ("corel5k", "Corel5k"))),
    *({"name": f"{name}_bonsai", "label": f"{label} wide trees (Bonsai)", "set": name,
       "train_args": BONSAI, "variants": [("", "", [], {})]}
      for name, label in (("debtags", "debtags"), ("manpages", "manpages"))),
    {"name": f"syn{SYN}", "label": f"synthetic {SYN:,} points Parabel (seed 0)", "set": None,
     "train_file": Path(f"{SYN_PREFIX}_train.txt"), "test_file": Path(f"{SYN_PREFIX}_test.txt"),
     "deps": [SYN_DATA.target], "steps": [SYN_DATA], "seeds": [0], "rounds": 1,
     "train_args": ARGS, **{k: v for k, v in SBS.items() if k != "cpp_seeds"},
     "variants": [("", "", [], {})]},
]
COLUMNS = ["P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5", "nDCG@3", "nDCG@5"]

if __name__ == "__main__":
    benchlib.main(__doc__, "parabel", CONFIGS, "Parabel, {trees} trees.", COLUMNS, trees=3)
