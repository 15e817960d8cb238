"""FastXML benchmark: accuracy, train/predict wall time, peak memory and model
size of xmlkit's FastXML, through the command line as a user runs it, next
to the original C++ tool's figures measured on this machine class
(../shared/specs/anchors.md).

    python scripts/bench_fastxml.py [--data ../shared/data] [--configs bibtex delicious]
                                    [--seeds 0 1 ... 9] [--timing-seeds 0 1 2]
                                    [--threads 1 2] [--trees 50]
                                    [--markdown results/fastxml.md]

Each setting runs `xml-train` (50 trees, -m 10 -l 10 -b 1 -c 1),
`xml-predict` and `xml-eval` on the XC files decompressed to plain text;
see benchlib.py for what is timed and how memory is measured.
"""
import benchlib

ARGS = ["-m", "10", "-l", "10", "-b", "1.0", "-c", "1.0"]
# The C++ FastXML v2 tool on this machine class (anchors.md): P@1/3/5, train
# and predict seconds at T=1 and T=2 (first of the two runs listed), model MB.
CONFIGS = [
    {"name": "bibtex", "label": "Bibtex", "set": "bibtex", "train_args": ARGS,
     "cpp": {"acc": "P 64.02/39.81/29.07", "train": {1: 20.4, 2: 9.8},
             "predict": {1: 2.5, 2: 1.4}, "model_mb": 35.4},
     "target": "P ≥ 63.7/39.5/28.8"},
    {"name": "delicious", "label": "Delicious", "set": "delicious", "train_args": ARGS,
     "cpp": {"acc": "P 70.20/64.82/60.26", "train": {1: 36.9, 2: 18.1},
             "predict": {1: 3.5, 2: 1.4}, "model_mb": 78.0},
     "target": "P ≥ 69.9/64.5/60.0"},
]
COLUMNS = ["P@1", "P@3", "P@5", "nDCG@3", "nDCG@5", "PSP@1", "PSP@3", "PSP@5"]

if __name__ == "__main__":
    benchlib.main(__doc__, "fastxml", CONFIGS, "FastXML, {trees} trees, -m 10 -l 10 -b 1 -c 1.", COLUMNS)
