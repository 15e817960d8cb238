"""Long runs of the fuzzers of tests/ (make -C scripts fuzz): the model-folder
fuzzer (tests/model_fuzz.py) over a model of every family, damaged and
crafted, with parts of other runs and edited manifests, seed after seed; the
text fuzzer (tests/text_fuzz.py); and the fuzzer of model files changed
while xml-predict uses them (tests/inuse_fuzz.py), one run for each kind of
change. Each for --seconds (default 600), all side by side; writes
results/fuzz.md: cases, outcomes, and every crash or signal (there must be
none).

    python fuzz.py [--seconds S] [--out results/fuzz.md]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TESTS = ROOT / "tests"
TRAIN = ROOT / "data_samples" / "bibtex_train.txt.xz"
TEST = ROOT / "data_samples" / "bibtex_test.txt.xz"
BIN = Path(sys.executable).parent
#: the in-use fuzzer's kinds of change, each run on its own
INUSE_KINDS = {"cp": "a file copied over in place", "truncate": "a file truncated",
               "bytes": "random bytes written in place"}

sys.path.insert(0, str(TESTS))
from conftest import FAMILIES, OTHER_PARAMS  # noqa: E402


def train(data, folder, *args):
    r = subprocess.run([str(BIN / "xml-train"), str(data), str(folder), *args, "-q"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"fuzz.py: training {folder} failed: {r.stderr}")


def models(work):
    """A tiny model of each family (300 Bibtex points) and, per family, its
    others: another seed, other parameters, other data."""
    from xmlkit.io import read_dataset, write_dataset
    X, Y = read_dataset(TRAIN)
    Xt, Yt = read_dataset(TEST)
    write_dataset(work / "train.txt", X[:300], Y[:300])
    write_dataset(work / "reversed.txt", X[:300][::-1].tocsr(), Y[:300][::-1].tocsr())
    write_dataset(work / "test.txt", Xt[:50], Yt[:50])
    out = {}
    for family, args in FAMILIES.items():
        train(work / "train.txt", work / family, *args)
        others = []
        for name, data, extra in (("seed", "train.txt", ["--seed", "9"]),
                                  ("params", "train.txt", OTHER_PARAMS[family]),
                                  ("data", "reversed.txt", [])):
            train(work / data, work / f"{family}_{name}", *args, *extra)
            others.append(str(work / f"{family}_{name}"))
        out[family] = others
    return out


def model_fuzz(work, seconds, others):
    """Rounds of the model fuzzer (each family, damaged and crafted, a new
    seed per round) until `seconds` have passed; counts and failures."""
    counts, failures, runs = {}, [], 0
    end = time.monotonic() + seconds
    seed = 0
    while time.monotonic() < end:
        for family in sorted(FAMILIES):
            for resign in (False, True):
                args = [sys.executable, str(TESTS / "model_fuzz.py"), str(work / family),
                        str(work / "test.txt"), str(seed), "--others", ",".join(others[family])]
                r = subprocess.run(args + (["--resign"] if resign else []),
                                   capture_output=True, text=True)
                runs += 1
                if r.returncode != 0:
                    failures.append(f"{family} seed {seed} resign={resign}: exit "
                                    f"{r.returncode} {r.stderr[-300:]}")
                for line in r.stdout.splitlines():
                    row = json.loads(line)
                    key = row["outcome"].split(" ", 1)[0]
                    foreign = row["file"] == "manifest.json" or \
                        row["mutation"].startswith("swapped")
                    if key == "crash" or (key == "different" and (not resign or foreign)):
                        failures.append(f"{family} seed {seed} resign={resign}: {row}")
                    counts[key] = counts.get(key, 0) + 1
        seed += 1
    return {"runs": runs, "seeds": seed, "counts": counts, "failures": failures}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--out", default=str(HERE / "results" / "fuzz.md"))
    a = ap.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        others = models(work)
        text, *inuse = (subprocess.Popen([sys.executable, str(TESTS / script), str(where), "0",
                                          str(a.seconds), *kind],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
                        for script, where, kind in (("text_fuzz.py", work / "text", []),
                                                    *(("inuse_fuzz.py", work, [k])
                                                      for k in INUSE_KINDS)))
        models_result = model_fuzz(work, a.seconds, others)
        text_summary, text_failures = _summary(text)
        inuse = [_summary(p) for p in inuse]
        inuse_failures = [f for _, fails in inuse for f in fails]
    minutes = (time.monotonic() - start) / 60
    m = models_result
    rows = [
        f"The fuzzers for {a.seconds:.0f} s each, side by side ({minutes:.1f} min in all, "
        f"{os.cpu_count()} cores); made by `python scripts/fuzz.py`. Outcomes: `refused` "
        "(exit 2), `same` (the scores of "
        "the undamaged model), `different` (allowed only for crafted folders' arrays: "
        "records rewritten to match), `ok` (a valid input read), `answered` (exit 0, every "
        "row scored), `crash` (never).",
        "",
        "| fuzzer | runs | cases | outcomes | crashes or signals |",
        "|---|---|---|---|---|",
        f"| model folders (tests/model_fuzz.py: arrays, bytes, manifests, parts of other "
        f"runs; {len(FAMILIES)} families, damaged and crafted, {m['seeds']} seeds) | "
        f"{m['runs']} | {sum(m['counts'].values())} | "
        + ", ".join(f"{k} {v}" for k, v in sorted(m["counts"].items()))
        + f" | {len(m['failures'])} |",
        f"| text (tests/text_fuzz.py: documents and named predictions, JSON classes) | 1 | "
        f"{text_summary.get('cases', 0)} | "
        + ", ".join(f"{k} {v}" for k, v in sorted(text_summary.items()) if k != "cases")
        + f" | {len(text_failures)} |",
    ] + [
        f"| files changed in use, {INUSE_KINDS[kind]} (tests/inuse_fuzz.py {kind}: at a random "
        f"moment of an xml-predict batch or stream; every family) | 1 | "
        f"{summary.get('cases', 0)} | "
        + ", ".join(f"{k} {v}" for k, v in sorted(summary.items()) if k != "cases")
        + f" | {len(fails)} |" for kind, (summary, fails) in zip(INUSE_KINDS, inuse)]
    for f in (m["failures"] + text_failures + inuse_failures)[:20]:
        rows.append(f"\n- {f[:500]}")
    Path(a.out).write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    sys.exit(1 if m["failures"] or text_failures or inuse_failures else 0)


def _summary(process):
    """(summary, failures) of a fuzzer that prints a JSON line per failure,
    then its summary."""
    out, err = process.communicate()
    lines = out.strip().splitlines()
    summary = json.loads(lines[-1]) if lines else {}
    return summary, lines[:-1] + ([f"exit {process.returncode}: {err[-300:]}"]
                                  if process.returncode != 0 else [])


if __name__ == "__main__":
    main()
