"""FastXML benchmark: accuracy, train/predict wall time, peak memory and model
size of xmlkit's FastXML, through the command line as a user runs it, and
side by side with the original C++ tool when its binaries are given.

    python scripts/bench_fastxml.py [--data ../shared/data] [--configs bibtex delicious yeast]
                                    [--seeds 0 1 ... 9] [--timing-seeds 0 1 2]
                                    [--threads 1 2] [--trees 50] [--rounds 3]
                                    [--cpp-bin DIR] [--markdown results/fastxml.md]

Each setting runs `xml-train` (50 trees, -m 10 -l 10 -b 1 -c 1),
`xml-predict` and `xml-eval` on the XC files decompressed to plain text;
see benchlib.py for what is timed and how memory is measured. With the C++
FastXML tool's binaries (--cpp-bin DIR or $XMLKIT_CPP_BIN: a folder outside
the project, built from the tool's public source) each setting and thread count also
runs both tools alternately, `--rounds` times, and reports the ratios of
that run; on Bibtex and Delicious it also trains the C++ tool with its own
seeds (its seed s: trees s*50 .. s*50+49) and compares the means.
"""
import benchlib

ARGS = ["-m", "10", "-l", "10", "-b", "1.0", "-c", "1.0"]
CPP_TRAIN = ["fastXML_train", "$X", "$Y", "$model", "-T", "$T", "-s", "0", "-t", "50",
             "-b", "1.0", "-c", "1.0", "-m", "10", "-l", "10", "-q", "1"]
CPP_PREDICT = ["fastXML_predict", "$test_X", "$scores", "$model", "-T", "$T", "-q", "1"]
# Accuracy of the C++ FastXML v2 tool on this machine class (anchors.md).
CONFIGS = [
    {"name": "bibtex", "label": "Bibtex", "set": "bibtex", "train_args": ARGS,
     "cpp": {"acc": "P 64.02/39.81/29.07"}, "target": "P ≥ 63.7/39.5/28.8",
     "cpp_train": CPP_TRAIN, "cpp_predict": CPP_PREDICT, "cpp_seeds": True},
    {"name": "delicious", "label": "Delicious", "set": "delicious", "train_args": ARGS,
     "cpp": {"acc": "P 70.20/64.82/60.26"}, "target": "P ≥ 69.9/64.5/60.0",
     "cpp_train": CPP_TRAIN, "cpp_predict": CPP_PREDICT, "cpp_seeds": True},
    {"name": "yeast", "label": "Yeast (dense)", "set": "yeast", "train_args": ARGS,
     "cpp_train": CPP_TRAIN, "cpp_predict": CPP_PREDICT},
]
COLUMNS = ["P@1", "P@3", "P@5", "nDCG@3", "nDCG@5", "PSP@1", "PSP@3", "PSP@5"]

if __name__ == "__main__":
    benchlib.main(__doc__, "fastxml", CONFIGS, "FastXML, {trees} trees, -m 10 -l 10 -b 1 -c 1.",
                  COLUMNS)
