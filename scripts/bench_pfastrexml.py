"""PfastreXML benchmark: propensity-scored and plain accuracy, train/predict
wall time, peak memory and model size of xmlkit's PfastreXML (and PfastXML,
-S 1), through the command line, next to the original C++ tool's figures on
this machine class (../shared/specs/anchors.md).

    python scripts/bench_pfastrexml.py [--data ../shared/data]
        [--configs bibtex delicious] [--seeds 0 1 ... 9]
        [--timing-seeds 0 1 2] [--threads 1 2] [--trees 50]
        [--markdown results/pfastrexml.md]

Settings: the C++ tool's defaults (-m 10 -l 100 -g 30 -a 0.8, propensities
A=0.55 B=1.5 from the training labels) on Bibtex and Delicious; each model is
scored re-ranked (xml-predict -n 1000) and trees only (-S 1: PfastXML's
scores; the trees of -S 0 and -S 1 training are the same, -S 1 only skips the
tail classifiers). PSP@k uses the same propensities. See benchlib.py for what
is timed and how memory is measured.

With the C++ tools' binaries (--cpp-bin DIR or $XMLKIT_CPP_BIN: a folder
outside the project, built from the tools' public source), each setting and
thread count also runs PfastreXML_train / PfastreXML_predict (-n 1000) and
xmlkit alternately, --rounds times, and reports the ratios of that run.
"""
import benchlib

ARGS = ["--algorithm", "pfastrexml", "-m", "10", "-l", "100", "-b", "1.0", "-c", "1.0",
        "-g", "30", "-a", "0.8"]
# Each trained model is scored twice: re-ranked (-n 1000, the C++ default)
# and trees only (-S 1 at predict time: the PfastXML scores of the same trees).
RERANKED = ("", "", ["-n", "1000"])
# the C++ tools' command lines for the side-by-side rounds
SBS = {"cpp_train": ["PfastreXML_train", "$X", "$Y", "$inv_prop", "$model", "-S", "0", "-T", "$T",
                     "-s", "0", "-t", "50", "-b", "1.0", "-c", "1.0", "-m", "10", "-l", "100",
                     "-g", "30", "-a", "0.8", "-q", "1"],
       "cpp_predict": ["PfastreXML_predict", "$test_X", "$scores", "$model", "-T", "$T",
                       "-n", "1000", "-q", "1"],
       "predict_args": ["-n", "1000"]}
CONFIGS = [
    {"name": "bibtex", "label": "Bibtex PfastreXML", "set": "bibtex", "train_args": ARGS, **SBS,
     "variants": [
         RERANKED + ({"cpp": {"acc": "PSP 53.12/55.32/61.89, P 63.54/40.21/29.84"},
                      "target": "PSP ≥ 53.1/55.3/61.9, P ≥ 63.2/39.9/29.5"},),
         ("_trees", ", trees only (-S 1)", ["-S", "1"], {"cpp": {}})]},
    {"name": "delicious", "label": "Delicious PfastreXML", "set": "delicious",
     "train_args": ARGS, **SBS,
     "variants": [
         RERANKED + ({"cpp": {"acc": "PSP 35.82/36.63/37.04, P 60.50/57.04/53.75"}},),
         ("_trees", ", trees only (-S 1)", ["-S", "1"],
          {"cpp": {"acc": "PSP 36.43/37.60/38.31, P 68.41/63.66/59.57"},
           "target": "PSP ≥ 36.1/37.3/38.0"})]},
]
COLUMNS = ["PSP@1", "PSP@3", "PSP@5", "P@1", "P@3", "P@5", "PSnDCG@3", "PSnDCG@5",
           "nDCG@3", "nDCG@5"]

if __name__ == "__main__":
    benchlib.main(__doc__, "pfastrexml", CONFIGS, "PfastreXML, {trees} trees.", COLUMNS)
