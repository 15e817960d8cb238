"""Nothing believed, nothing destroyed: each class of untrusted input or
output with more than one of its members. A model folder's files are tied to its manifest
(parts of other runs, edited parameters); inputs of another width, a
byte-order mark, overflowing propensities, outputs named as inputs,
unbounded threads and k, untrusted JSON, a closed pipe: each is refused
with one line and exit 2, or handled, never exit 1 or a signal."""
import json
import os
import resource
import shutil
import subprocess

import numpy as np
import pytest

from conftest import BIN, FAMILIES, SHARED, one_line_error, run_cli
from xmlkit.io import read_dataset, read_matrix, write_dataset

CPP = SHARED / "fixtures" / "cpp_reference"


def _same_files(a, b):
    return all((a / p.name).read_bytes() == p.read_bytes() for p in b.iterdir()
               if p.is_file() and p.name != ".lock")


# ------------------------------------------------- 1: parts of other models

def _tree_run(folder, data, *args):
    r = run_cli("xml-train", data, folder, "-q", *args)
    assert r.returncode == 0, r.stderr
    return folder


@pytest.mark.parametrize("family", ["fastxml", "pfastrexml", "ldsm"])
def test_trees_of_other_runs_are_not_adopted(family, tiny, tmp_path):
    """A tree file copied from a run of another seed, other parameters or
    other training data of the same D and L is refused when training into
    the folder (exit 2, naming the file), and the folder's manifest still
    describes only its own trees; a shard of the same settings merges."""
    algo = ["--algorithm", family] + (["--max-nodes", "40", "--epochs", "2"]
                                      if family == "ldsm" else [])
    train = tiny / "train.txt"
    X, Y = read_dataset(train)
    other = tmp_path / "other.txt"        # (other rows, the same header's D and L)
    write_dataset(other, X[::-1].tocsr(), Y[::-1].tocsr())
    a = _tree_run(tmp_path / "A", train, *algo, "-t", "2")
    tree = "tree_00002.npz"
    variants = {"seed": (train, ["--seed", "9"]), "data": (other, [])}
    if family != "ldsm":
        variants["params"] = (train, ["-l", "50", "-m", "20"])
    for name, (data, extra) in variants.items():
        b = tmp_path / f"B_{name}"
        start = ["-s", "2", "-t", "1"] if family != "ldsm" else ["-t", "3"]
        _tree_run(b, data, *algo, *start, *extra)
        shutil.copy(b / tree, a / tree)
        before = (a / "manifest.json").read_bytes()
        r = run_cli("xml-train", train, a, *algo, "-t", "4", "-q")
        assert one_line_error(r), (name, r.stderr)
        assert f"{a / tree}: damaged model file: belongs to another model" in r.stderr, r.stderr
        assert (a / "manifest.json").read_bytes() == before
        os.unlink(a / tree)
    if family != "ldsm":
        # a shard of the same settings (another tree range) is adopted, unchanged
        b = _tree_run(tmp_path / "B_same", train, *algo, "-s", "2", "-t", "2")
        for t in ("tree_00002.npz", "tree_00003.npz"):
            shutil.copy(b / t, a / t)
        r = run_cli("xml-train", train, a, *algo, "-t", "4", "-q")
        assert r.returncode == 0, r.stderr
        whole = _tree_run(tmp_path / "whole", train, *algo, "-t", "4")
        assert _same_files(a, whole)


def test_a_renamed_tree_file_is_refused(tiny, tmp_path):
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    shutil.copy(m / "tree_00001.npz", m / "tree_00002.npz")     # (tree 1 as tree 2)
    r = run_cli("xml-train", tiny / "train.txt", m, "-t", "3", "-q")
    assert one_line_error(r) and "tree_00002.npz: damaged model file: belongs to another" \
        in r.stderr, r.stderr


def test_training_into_a_folder_of_other_data_is_refused(tiny, tmp_path):
    X, Y = read_dataset(tiny / "train.txt")
    other = tmp_path / "other.txt"
    write_dataset(other, X[1:].tocsr(), Y[1:].tocsr())
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    r = run_cli("xml-train", other, m, "-t", "3", "-q")
    assert one_line_error(r) and "trained on other data" in r.stderr, r.stderr
    assert not (m / "tree_00002.npz").exists()


# ------------------------------------------------- 2: edited manifests

EDITS = {
    "fastxml": [("params", "bias", 1e308), ("params", "max_leaf", 11), ("seed", None, 5)],
    "pfastrexml": [("params", "alpha", 0.5), ("predict_params", "rerank", 7),
                   ("params", "inv_propensity_sha256", "0" * 64)],
    "ldsm": [("params", "route_threshold", 0.9), ("params", "bias", 2.0)],
    "parabel": [("params", "loss", "log"), ("params", "bias", 2.0),
                ("predict_params", "beam_width", 3)],
    "embed": [("params", "ridge", 1.0), ("predict_params", "threshold", 0.9)],
    "linear": [("params", "unit_rows", False), ("predict_params", "decision", "threshold")],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_edited_manifest_parameters_are_refused(family, tiny, tmp_path):
    """Every parameter that changes what a model computes, of every family,
    is tied to the files: an edited manifest is refused (exit 2, one line,
    no score file), however plausible the value."""
    out = tmp_path / "s.txt"
    for where, key, value in EDITS[family]:
        m = tmp_path / f"m_{key}"
        shutil.copytree(tiny / family, m)
        manifest = json.loads((m / "manifest.json").read_text())
        if key is None:
            manifest[where] = value
        else:
            manifest[where][key] = value
        (m / "manifest.json").write_text(json.dumps(manifest))
        r = run_cli("xml-predict", tiny / "test.txt", out, m, "-q")
        assert one_line_error(r) and "belongs to another model" in r.stderr, (key, r.stderr)
        assert not out.exists()


# ------------------------------------------------- 3: feature files of another width

def test_a_feature_file_of_another_width_is_refused(tiny, tmp_path, shared):
    """Narrower (a featurizer mix-up) and wider files are refused, naming
    both widths; --fewer-features scores a narrower one as zeros beyond."""
    Xt, Yt = read_dataset(tiny / "test.txt")
    narrow = tmp_path / "narrow.txt"
    write_dataset(narrow, Xt[:, :1000].tocsr(), Yt)
    for model in (tiny / "fastxml", tiny / "embed", CPP / "fastxml_model"):
        r = run_cli("xml-predict", narrow, tmp_path / "s.txt", model)
        assert one_line_error(r) and "D = 1000" in r.stderr and "D = 1836" in r.stderr, \
            r.stderr
        assert "--fewer-features" in r.stderr and not (tmp_path / "s.txt").exists()
    r = run_cli("xml-predict", narrow, tmp_path / "s.txt", tiny / "fastxml", "--fewer-features",
                "-q")
    assert r.returncode == 0, r.stderr
    padded = tmp_path / "padded.txt"
    X = Xt[:, :1000].tocsr()
    X.resize(X.shape[0], 1836)
    write_dataset(padded, X, Yt)
    run_cli("xml-predict", padded, tmp_path / "p.txt", tiny / "fastxml", "-q")
    assert (tmp_path / "s.txt").read_bytes() == (tmp_path / "p.txt").read_bytes()
    wide = tmp_path / "wide.txt"
    Xw = Xt.tocsr()
    Xw.resize(Xt.shape[0], 2000)
    write_dataset(wide, Xw, Yt)
    r = run_cli("xml-predict", wide, tmp_path / "w.txt", tiny / "fastxml", "--fewer-features")
    assert one_line_error(r) and "D = 2000" in r.stderr, r.stderr


# ------------------------------------------------- 4: byte-order marks

BOM = b"\xef\xbb\xbf"


def test_a_bom_is_one_rule_for_every_reader(tiny, tmp_path):
    """A UTF-8 BOM at the start of a file marks the encoding: XC data sets
    and score files, TSV and JSON Lines documents, named predictions and
    value files read as without it."""
    def with_bom(path):
        out = tmp_path / ("bom_" + path.name)
        out.write_bytes(BOM + path.read_bytes())
        return out
    test = tiny / "test.txt"
    s1, s2 = tmp_path / "s1.txt", tmp_path / "s2.txt"
    run_cli("xml-predict", test, s1, tiny / "fastxml", "-q")
    r = run_cli("xml-predict", with_bom(test), s2, tiny / "fastxml", "-q")
    assert r.returncode == 0 and s1.read_bytes() == s2.read_bytes(), r.stderr
    def metrics(*args):
        r = run_cli("xml-eval", *args, "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["metrics"]
    assert metrics(s1, test) == metrics(with_bom(s1), with_bom(test))
    q = tmp_path / "q.txt"
    q.write_text("\n".join(["2.5"] * 159) + "\n")
    assert metrics(s1, test, "--inv-propensity", q) == \
        metrics(s1, test, "--inv-propensity", with_bom(q))
    docs = {"d.tsv": "alpha,beta\tnumpy arrays fast\nbeta\tarrays and tables\n",
            "d.jsonl": '{"id": 1, "text": "numpy arrays fast", "labels": ["alpha", "beta"]}\n'
                       '{"id": 2, "text": "arrays and tables", "labels": ["beta"]}\n'}
    for name, text in docs.items():
        plain = tmp_path / name
        plain.write_text(text)
        outs = []
        for src in (plain, with_bom(plain)):
            r = run_cli("xml-text", src, tmp_path / f"x_{src.name}.txt",
                        tmp_path / f"f_{src.name}.npz", "--fit", "--min-df", "1", "--json")
            assert r.returncode == 0, r.stderr
            outs.append(json.loads(r.stdout)["labels"])
        assert outs == [2, 2], (name, outs)
    named = tmp_path / "named.jsonl"
    named.write_text('{"id": 1, "labels": ["beta"], "scores": [0.9]}\n'
                     '{"id": 2, "labels": ["beta"], "scores": [0.8]}\n')
    assert metrics(named, tmp_path / "d.jsonl", "--text") == \
        metrics(with_bom(named), tmp_path / "d.jsonl", "--text")


def test_a_bom_or_cr_in_a_header_is_shown_escaped(tmp_path, tiny):
    f = tmp_path / "h.txt"
    f.write_bytes(b"2 x3\r\n0:1\n")
    r = run_cli("xml-predict", f, tmp_path / "s.txt", tiny / "fastxml")
    assert one_line_error(r) and "'2 x3'" in r.stderr, r.stderr
    f.write_bytes(b"2\x0b3\n0:1\n")
    r = run_cli("xml-predict", f, tmp_path / "s.txt", tiny / "fastxml")
    assert one_line_error(r) and "'2\\x0b3'" in r.stderr, r.stderr


# ------------------------------------------------- 5: C++ folders' param

def _cpp_copy(tmp_path, name, line, value):
    m = tmp_path / name
    shutil.copytree(CPP / "fastxml_model", m)
    lines = (m / "param").read_text().split("\n")
    lines[line] = value
    (m / "param").write_text("\n".join(lines))
    return m


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


def test_a_cpp_param_that_cannot_be_the_trees_is_refused(shared, tmp_path):
    """num_Xf larger than the trees' (the bias slot moves) is refused; a
    num_Y too large for memory is refused before it is allocated, not
    killed; the data's own width is checked against num_Xf too."""
    test = CPP.parent.parent / "data" / "bibtex" / "bibtex_test.txt.xz"
    for value in ("5000", "1837", "99999"):
        m = _cpp_copy(tmp_path, f"xf{value}", 0, value)
        r = run_cli("xml-predict", test, tmp_path / "s.txt", m, "--fewer-features")
        assert one_line_error(r) and "num_Xf" in r.stderr and "bias" in r.stderr, r.stderr
    m = _cpp_copy(tmp_path, "ny", 1, "2147483647")
    r = run_cli("xml-predict", test, tmp_path / "s.txt", m, preexec_fn=_limit_memory)
    assert one_line_error(r) and "out of memory" in r.stderr, r.stderr
    assert not (tmp_path / "s.txt").exists()


# ------------------------------------------------- 6: propensities that overflow

def test_propensities_that_overflow_are_refused_where_used(tiny, tmp_path):
    """Inverse propensities of 1e308 (finite, but their sums are not) are
    refused with file:line by xml-eval and by training; propensity models
    whose constant overflows a float are computed without overflowing."""
    s = tmp_path / "s.txt"
    run_cli("xml-predict", tiny / "test.txt", s, tiny / "fastxml", "-q")
    q = tmp_path / "q.txt"
    for bad in ("1e308", "1e13", "inf"):
        q.write_text("\n".join(["2"] * 3 + [bad] + ["2"] * 155) + "\n")
        r = run_cli("xml-eval", s, tiny / "test.txt", "--inv-propensity", q)
        assert one_line_error(r) and f"{q}:4:" in r.stderr, r.stderr
        r = run_cli("xml-train", tiny / "train.txt", tmp_path / "m", "--algorithm", "pfastrexml",
                    "--inv-propensity", q, "-t", "1", "-q")
        assert one_line_error(r) and f"{q}:4:" in r.stderr, r.stderr
    for a, b in (("400", "10"), ("1000", "1000"), ("50", "0.01")):
        r = run_cli("xml-eval", s, tiny / "test.txt", "--train-labels", tiny / "train.txt",
                    "-A", a, "-B", b, "--json")
        assert r.returncode in (0, 2) and "internal error" not in r.stderr, r.stderr
        if r.returncode == 0:
            values = json.loads(r.stdout)["metrics"].values()
            assert all(v is not None and np.isfinite(v) for v in values), r.stdout
        else:
            assert one_line_error(r) and f"A={a}, B={b}" in r.stderr, r.stderr
    r = run_cli("xml-train", tiny / "train.txt", tmp_path / "p", "--algorithm", "pfastrexml",
                "-A", "1000", "-B", "1000", "-t", "1", "-q")
    assert r.returncode == 0, r.stderr


# ------------------------------------------------- 7: outputs named as inputs

def _cases(tmp_path, tiny):
    """(command args, the inputs to compare, the output positions) of every
    command: each output named as each input."""
    t, m, s = tiny / "train.txt", tiny / "fastxml", tmp_path / "s.txt"
    run_cli("xml-predict", tiny / "test.txt", s, m, "-q")
    idf = tmp_path / "idf.txt"
    run_cli("xml-prune", t, tmp_path / "pruned.txt", "--idf-out", idf, "-q")
    docs = tmp_path / "d.jsonl"
    docs.write_text('{"id": 1, "text": "numpy arrays fast", "labels": ["alpha"]}\n'
                    '{"id": 2, "text": "arrays and tables", "labels": ["beta"]}\n')
    feat = tmp_path / "f.npz"
    assert run_cli("xml-text", docs, tmp_path / "x.txt", feat, "--fit", "--min-df", "1",
                   "-q").returncode == 0
    q = tmp_path / "q.txt"
    q.write_text("\n".join(["2"] * 159) + "\n")
    copy = tmp_path / "t.txt"
    shutil.copy(t, copy)
    return [
        # (command, arguments with OUT where an output goes, inputs)
        ("xml-predict", [copy, "OUT", m], [copy, m / "manifest.json", m / "tree_00000.npz"]),
        ("xml-prune", [copy, "OUT"], [copy]),
        ("xml-prune", [copy, tmp_path / "o.txt", "--idf-out", "OUT"], [copy]),
        ("xml-prune", [copy, "OUT", "--idf-in", idf], [copy, idf]),
        ("xml-text", [docs, "OUT", tmp_path / "g.npz", "--fit", "--min-df", "1"], [docs]),
        ("xml-text", [docs, tmp_path / "y.txt", "OUT", "--fit", "--min-df", "1"], [docs]),
        ("xml-text", [docs, "OUT", feat], [docs, feat]),
        ("xml-eval", [s, copy, "--train-labels", copy, "--plot", "OUT"], [s, copy]),
        ("xml-eval", [s, copy, "--inv-propensity", q, "--plot", "OUT"], [s, copy, q]),
    ]


@pytest.mark.slow
def test_no_command_writes_over_its_input(tiny, tmp_path):
    """Every command, with each of its outputs named as each of its inputs,
    directly, through a symbolic link and through a hard link: exit 2
    before anything is read or written, the input's bytes unchanged."""
    tried = 0
    for cmd, args, inputs in _cases(tmp_path, tiny):
        for target in inputs:
            before = target.read_bytes()
            link, hard = tmp_path / "link", tmp_path / "hard"
            for p in (link, hard):
                if p.exists() or p.is_symlink():
                    p.unlink()
            link.symlink_to(target)
            os.link(target, hard)
            for name in (target, link, hard):
                argv = [name if a == "OUT" else a for a in args]
                r = run_cli(cmd, *argv)
                assert one_line_error(r), (cmd, argv, r.stderr)
                assert target.read_bytes() == before, (cmd, argv)
                tried += 1
    assert tried >= 40
    # and two outputs of one command named alike
    r = run_cli("xml-text", tmp_path / "d.jsonl", tmp_path / "F.npz", tmp_path / "F.npz", "--fit")
    assert one_line_error(r) and "both" in r.stderr
    # and training data inside the model folder training writes
    m = tmp_path / "mm"
    shutil.copytree(tiny / "fastxml", m)
    shutil.copy(tiny / "train.txt", m / "train.txt")
    r = run_cli("xml-train", m / "train.txt", m, "-t", "3")
    assert one_line_error(r) and not (m / "tree_00002.npz").exists()


# ------------------------------------------------- 8, 9: threads and k bounded

def _limit_2g():
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@pytest.mark.slow
def test_threads_and_k_are_bounded_by_the_work_and_the_machine(tiny, tmp_path):
    """-T far above the cores trains and predicts the same bytes as -T 1 in
    bounded memory; xml-eval -k far above L gives what k = L implies."""
    for family in ("fastxml", "ldsm"):
        args = FAMILIES[family]
        a, b = tmp_path / f"{family}_1", tmp_path / f"{family}_many"
        assert run_cli("xml-train", tiny / "train.txt", a, *args, "-q").returncode == 0
        r = run_cli("xml-train", tiny / "train.txt", b, *args, "-T", "100000", "-q",
                    preexec_fn=_limit_2g)
        assert r.returncode == 0, r.stderr
        assert _same_files(a, b)
        s1, s2 = tmp_path / f"{family}_s1.txt", tmp_path / f"{family}_s2.txt"
        run_cli("xml-predict", tiny / "test.txt", s1, a, "-q")
        r = run_cli("xml-predict", tiny / "test.txt", s2, a, "-T", "2147483647", "-q",
                    preexec_fn=_limit_2g)
        assert r.returncode == 0 and s1.read_bytes() == s2.read_bytes(), r.stderr
    r = run_cli("xml-eval", s1, tiny / "test.txt", "-k", "1,159,200000", "--json",
                preexec_fn=_limit_2g)
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)["metrics"]
    assert m["R@200000"] == m["R@159"] and m["nDCG@200000"] == m["nDCG@159"]
    assert m["P@200000"] == pytest.approx(m["P@159"] * 159 / 200000)
    r = run_cli("xml-eval", s1, tiny / "test.txt", "-k", "5", preexec_fn=_limit_2g)
    assert r.returncode == 0


def test_memory_hints_name_only_options_the_command_has(tmp_path):
    """Out of memory is exit 2 and one line; its hint names -T only for a
    command that has it (xml-eval has none). The commands' shared handler
    (cli.common.run), run as a command would be, with and without -T."""
    import sys
    script = tmp_path / "oom.py"
    script.write_text(
        "import os, click\n"
        "from xmlkit.cli.common import run\n"
        "opts = [click.Option(['-T', '--threads'], default=1)] if os.environ['WITH_T'] else []\n"
        "def body(**kw):\n"
        "    raise MemoryError()\n"
        "run(click.Command('x', params=opts, callback=body), 'xml-x')\n")
    for with_threads in (True, False):
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           env={**os.environ, "WITH_T": "1" if with_threads else ""})
        assert one_line_error(r) and "out of memory" in r.stderr, r.stderr
        assert ("-T" in r.stderr) == with_threads, r.stderr


# ------------------------------------------------- 10: untrusted JSON

JSON_LINES = {
    "deep nesting": '{"id": 1, "text": "aa bb", "labels": ' + "[" * 100000 + "]" * 100000 + "}",
    "a long integer": '{"id": ' + "7" * 5000 + ', "text": "aa bb", "labels": ["x"]}',
    "a lone surrogate id": '{"id": "\\ud800", "text": "aa bb", "labels": ["x"]}',
    "a lone surrogate label": '{"id": 2, "text": "aa bb", "labels": ["\\udfffx"]}',
    "a surrogate key": '{"id": 2, "text": "aa bb", "labels": ["x"], "\\udc00": 1}',
}


@pytest.mark.parametrize("case", sorted(JSON_LINES))
def test_json_readers_refuse_what_is_not_plain_json(case, tmp_path):
    good = '{"id": 1, "text": "aa bb cc", "labels": ["x"]}\n'
    docs = tmp_path / "d.jsonl"
    docs.write_text(good + JSON_LINES[case] + "\n")
    r = run_cli("xml-text", docs, tmp_path / "o.txt", tmp_path / "f.npz", "--fit")
    assert one_line_error(r) and f"{docs}:2:" in r.stderr, r.stderr
    named = tmp_path / "n.jsonl"
    named.write_text(JSON_LINES[case].replace('"text": "aa bb", ', "").replace(
        '"labels"', '"scores": [1], "labels"') + "\n")
    truth = tmp_path / "t.jsonl"
    truth.write_text(good)
    r = run_cli("xml-eval", named, truth, "--text")
    assert one_line_error(r) and f"{named}:1:" in r.stderr, r.stderr


def test_long_numbers_in_named_predictions_and_manifests(tmp_path, tiny):
    named = tmp_path / "n.jsonl"
    truth = tmp_path / "t.jsonl"
    truth.write_text('{"id": 1, "text": "aa bb", "labels": ["x"]}\n')
    named.write_text('{"id": 1, "labels": ["x"], "scores": [' + "9" * 30 + "]}\n")
    r = run_cli("xml-eval", named, truth, "--text", "--json")
    assert r.returncode == 0, r.stderr
    named.write_text('{"id": 1, "labels": ["x"], "scores": [' + "9" * 400 + "]}\n")
    r = run_cli("xml-eval", named, truth, "--text")
    assert one_line_error(r) and f"{named}:1:" in r.stderr, r.stderr
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    for text in ('{"seed": ' + "1" * 5000 + "}", "[" * 100000 + "]" * 100000):
        (m / "manifest.json").write_text(text)
        for cmd in (["xml-predict", tiny / "test.txt", tmp_path / "s.txt", m], ["xml-info", m]):
            r = run_cli(*cmd)
            assert one_line_error(r) and "manifest" in r.stderr, r.stderr


# ------------------------------------------------- 11-13: overflow, digits, pipes

def test_unicode_digits_are_no_worker_count(tiny, tmp_path):
    for address in ("local:²", "local:٣", "local:" + "9" * 5000):
        r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", tiny / "fastxml",
                    "--dask", address)
        assert one_line_error(r) and "local:N" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", ["xml-predict", "xml-prune", "xml-text"])
def test_a_closed_pipe_is_the_readers_choice(cmd, tiny, tmp_path):
    """Standard output closed by its reader (`| head -1`): exit 141, nothing
    on stderr, as any tool that a closed pipe stops; never exit 1."""
    big = tmp_path / "big.txt"
    Xt, Yt = read_dataset(tiny / "test.txt")
    import scipy.sparse as sp
    write_dataset(big, sp.vstack([Xt] * 200).tocsr(), sp.vstack([Yt] * 200).tocsr())
    docs = tmp_path / "d.jsonl"
    docs.write_text("".join(f'{{"id": {i}, "text": "numpy arrays {i % 7}", "labels": ["a"]}}\n'
                            for i in range(20000)))
    args = {"xml-predict": [big, "-", tiny / "fastxml"], "xml-prune": [big, "-"],
            "xml-text": [docs, "-", tmp_path / "f.npz", "--fit", "--min-df", "1"]}[cmd]
    p = subprocess.Popen([str(BIN / cmd), *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait() == 141 and err == "", err


# ------------------------------------------------- 14-19: smaller

def test_a_featurizer_name_without_npz_is_written_as_named(tmp_path):
    docs = tmp_path / "d.jsonl"
    docs.write_text('{"id": 1, "text": "numpy arrays", "labels": ["a"]}\n'
                    '{"id": 2, "text": "arrays tables", "labels": ["b"]}\n')
    for name in ("feat", "feat.bin", "feat.npz"):
        f = tmp_path / name
        r = run_cli("xml-text", docs, tmp_path / "a.txt", f, "--fit", "--min-df", "1")
        assert r.returncode == 0 and f.is_file(), r.stderr
        r = run_cli("xml-text", docs, tmp_path / "b.txt", f)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
    assert not (tmp_path / "feat.npz.npz").exists() and not (tmp_path / "feat.bin.npz").exists()


def test_predict_options_given_twice_and_tree_ranges(tiny, tmp_path):
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m, "--algorithm", "ldsm",
                "--algorithm", "fastxml")
    assert one_line_error(r) and "more than once" in r.stderr, r.stderr
    # -t without -s starts at the folder's first tree, as the help says
    r = run_cli("xml-train", tiny / "train.txt", tmp_path / "shard", "-s", "3", "-t", "2", "-q")
    assert r.returncode == 0
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    assert run_cli("xml-predict", tiny / "test.txt", a, tmp_path / "shard", "-t", "1",
                   "-q").returncode == 0
    run_cli("xml-predict", tiny / "test.txt", b, tmp_path / "shard", "-s", "3", "-t", "1", "-q")
    assert a.read_bytes() == b.read_bytes()
    # a range past the last tree index is refused, not written
    for s, t in (("2147483647", "2"), ("2147483600", "100")):
        r = run_cli("xml-train", tiny / "train.txt", tmp_path / f"big{s}", "-s", s, "-t", t)
        assert one_line_error(r) and "--start-tree" in r.stderr, r.stderr
        assert not (tmp_path / f"big{s}").exists()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_data_without_a_label_or_a_point_are_refused(family, tmp_path):
    args = FAMILIES[family]
    nolab = tmp_path / "nolab.txt"
    nolab.write_text("3 4 2\n 0:1\n 1:1 2:1\n 3:1\n")
    r = run_cli("xml-train", nolab, tmp_path / "m", *args)
    assert one_line_error(r) and f"{nolab}: no point has a label" in r.stderr, r.stderr
    empty = tmp_path / "n0.txt"
    empty.write_text("0 4 2\n")
    r = run_cli("xml-train", empty, tmp_path / "m", *args)
    assert one_line_error(r) and f"{empty}: the header says N = 0" in r.stderr, r.stderr
    assert not (tmp_path / "m").exists()
    import scipy.sparse as sp
    import xmlkit
    from xmlkit.models import REGISTRY
    with pytest.raises(xmlkit.XmlkitError, match="no training point has a label"):
        REGISTRY[family]().fit(sp.csr_matrix(np.eye(3, 4)), sp.csr_matrix((3, 2)))


def test_messages_name_the_file_line_and_number(tiny, tmp_path):
    cases = {
        "p.txt": ("2 3\n0:1\n0:1 1:-2\n", ["xml-prune"], ":3: the value -2 is negative"),
        "q.txt": ("2 3\n0:1 12345678901234567890123:1\n0:1\n", ["xml-prune"],
                  ":2: index 12345678901234567890123 in"),
        "r.txt": ("2 2147483647\n0:1\n0:1\n", ["xml-prune"],
                  ":1: the header's C = 2147483647 is more than"),
        "s.txt": ("2 5 3\n0,99999999999999999999999 0:1\n0 1:1\n", ["xml-prune"],
                  ":2: label 99999999999999999999999 in"),
    }
    for name, (text, (cmd,), says) in cases.items():
        f = tmp_path / name
        f.write_text(text)
        r = run_cli(cmd, f, tmp_path / "out.txt")
        assert one_line_error(r) and f"{f}{says}" in r.stderr, r.stderr
    f = tmp_path / "afile"
    f.write_text("x")
    r = run_cli("xml-prune", tiny / "test.txt", f / "out.txt")
    assert one_line_error(r) and "is not a folder" in r.stderr, r.stderr
    docs = tmp_path / "d.jsonl"
    docs.write_text('{"id": 1, "text": "aa bb", "labels": ["x"]}\n'
                    '{"id": 2, "text": "cc dd", "labels": ["y"]}\n')
    r = run_cli("xml-text", docs, tmp_path / "o.txt", tmp_path / "f.npz", "--fit",
                "--min-df", "2")
    assert one_line_error(r) and f"{docs}:" in r.stderr and "--min-df" in r.stderr \
        and "max_df" not in r.stderr, r.stderr


def test_scores_of_narrow_files_match_the_api(tiny, tmp_path):
    """--fewer-features is the API's own handling of a narrower matrix."""
    import xmlkit
    Xt, _ = read_dataset(tiny / "test.txt")
    X = Xt[:, :900].tocsr()
    f = tmp_path / "narrow.txt"
    from xmlkit.io import write_matrix
    write_matrix(f, X, precision=7, fixed=False)
    s = tmp_path / "s.txt"
    r = run_cli("xml-predict", f, s, tiny / "fastxml", "--fewer-features", "-q")
    assert r.returncode == 0, r.stderr
    api = xmlkit.load_model(tiny / "fastxml").predict(X, k=None)
    assert np.abs(read_matrix(s) - api).max() <= 6e-7


@pytest.mark.slow
def test_text_fuzzer_finds_no_crash(tmp_path):
    """Seeded mutations of document and named-prediction files, the JSON
    classes above among them (tests/text_fuzz.py, 8 s here; scripts run it
    for longer): every one read or refused, none an exception or a signal."""
    import sys
    from conftest import ROOT
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "text_fuzz.py"), str(tmp_path),
                        "1", "8"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert len(lines) == 1 and "crash" not in summary, lines[:3]
    # (as many cases as 8 s allow, fewer on a loaded machine: both outcomes
    # must be common, whatever the count)
    n = summary["cases"]
    assert n >= 300 and summary["refused"] > n // 5 and summary["ok"] > n // 5, summary


# ------------------------------------------------- manifests: versions and encodings

@pytest.mark.parametrize("family", ["fastxml", "parabel", "linear"])
@pytest.mark.parametrize("version", [3, 2, 1, 4.0, True, "4", None, 99])
def test_an_edited_format_version_is_refused(family, version, tiny, tmp_path):
    """A format version that is not the one the folder's contents were
    written by (records, data digest, origins), or not a whole number, is
    refused by every reader, one line, exit 2; xml-info never reports it."""
    m = tmp_path / "m"
    shutil.copytree(tiny / family, m)
    manifest = json.loads((m / "manifest.json").read_text())
    manifest["format_version"] = version
    (m / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "s.txt"
    r = run_cli("xml-predict", tiny / "test.txt", out, m, "-q")
    assert one_line_error(r) and not out.exists(), (version, r.stderr)
    if not isinstance(version, int) or isinstance(version, bool):
        assert "not a whole number" in r.stderr, r.stderr
    r = run_cli("xml-info", m, "--json")
    assert one_line_error(r) and r.stdout == "", (version, r.stderr)


@pytest.mark.parametrize("version", [2, 1])
def test_an_older_folder_said_older_still_is_refused(version, tiny, tmp_path):
    """A folder as version 3 wrote it (XXH64 records, files without origins)
    whose manifest says 2 or 1: its records are not what those versions
    wrote (SHA-256 ones, none), so the edit is refused, one line, exit 2."""
    from conftest import as_format_3
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    as_format_3(m, lambda manifest: manifest.update(format_version=version))
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m, "-q")
    assert one_line_error(r) and "edited manifest" in r.stderr, r.stderr
    assert not (tmp_path / "s.txt").exists()


def test_an_origin_in_a_folder_said_older_is_refused(tiny, tmp_path):
    """A current folder whose manifest was edited to read as version 3
    (data digest dropped too): its files' origins betray it, exit 2."""
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    manifest = json.loads((m / "manifest.json").read_text())
    manifest["format_version"] = 3
    manifest.pop("data", None)
    (m / "manifest.json").write_text(json.dumps(manifest))
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m, "-q")
    assert one_line_error(r) and "edited manifest" in r.stderr, r.stderr


@pytest.mark.parametrize("family", ["fastxml", "parabel", "embed"])
def test_a_file_without_its_origin_in_a_current_folder_is_refused(family, tiny, tmp_path):
    """A current folder, one of its files swapped for the same arrays
    without their __origin__ (as an older xmlkit wrote them) and the
    manifest's record of it edited to match: refused all the same, one
    line naming the file, exit 2, nothing written."""
    from xmlkit import store
    m = tmp_path / "m"
    shutil.copytree(tiny / family, m)
    manifest = json.loads((m / "manifest.json").read_text())
    name = sorted(manifest["files"])[-1]
    with np.load(m / name) as z:
        arrays = {k: z[k] for k in z.files if k not in (store.ORIGIN, "__blocks__")}
    store.save_arrays(m, name[:-4], arrays)
    manifest["files"][name] = store.file_record(m / name)
    (m / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "s.txt"
    r = run_cli("xml-predict", tiny / "test.txt", out, m, "-q")
    assert one_line_error(r) and "lacks its __origin__" in r.stderr and name in r.stderr, \
        r.stderr
    assert not out.exists()


def test_nothing_is_added_to_a_folder_of_an_older_version(tiny, tmp_path):
    """xml-calibrate into a folder of format version 3 is refused (exit 2, the
    folder as it was): a new file there could not be tied to the others, and
    the folder would no longer load."""
    from conftest import as_format_3
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    as_format_3(m)
    before = {p.name: p.read_bytes() for p in m.iterdir() if p.is_file()}
    r = run_cli("xml-calibrate", tiny / "test.txt", m, "-q")
    assert one_line_error(r) and "format version 3" in r.stderr, r.stderr
    assert {p.name: p.read_bytes() for p in m.iterdir() if p.is_file()} == before
    assert run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m,
                   "-q").returncode == 0


def test_a_manifest_with_a_bom_is_read(tiny, tmp_path):
    """A manifest saved with a UTF-8 byte-order mark (an editor's) reads as
    any text file of xmlkit does: the same scores."""
    m = tmp_path / "m"
    shutil.copytree(tiny / "parabel", m)
    (m / "manifest.json").write_bytes(b"\xef\xbb\xbf" + (m / "manifest.json").read_bytes())
    for folder, out in ((tiny / "parabel", "a.txt"), (m, "b.txt")):
        r = run_cli("xml-predict", tiny / "test.txt", tmp_path / out, folder, "-q")
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()


def test_small_messages_say_what_is_wrong(tiny, tmp_path):
    """A manifest that is a folder, a missing folder given to xml-calibrate,
    an empty item in xml-eval -k: each one line, exit 2, naming the cause;
    /dev/null takes scores (a timing run's output thrown away)."""
    m = tmp_path / "m"
    (m / "manifest.json").mkdir(parents=True)
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m, "-q")
    assert one_line_error(r) and "manifest.json: not a regular file" in r.stderr, r.stderr
    r = run_cli("xml-calibrate", tiny / "test.txt", tmp_path / "missing", "-q")
    assert one_line_error(r) and "no such model folder" in r.stderr, r.stderr
    assert "C++" not in r.stderr
    scores = tmp_path / "s.txt"
    assert run_cli("xml-predict", tiny / "test.txt", scores, tiny / "fastxml",
                   "-q").returncode == 0
    r = run_cli("xml-eval", scores, tiny / "test.txt", "-k", "1,,3", "-q")
    assert one_line_error(r) and "'1,,3'" in r.stderr, r.stderr
    if os.path.exists(os.devnull):
        r = run_cli("xml-predict", tiny / "test.txt", os.devnull, tiny / "fastxml", "-q")
        assert r.returncode == 0 and r.stderr == "", r.stderr


def test_embeds_random_feature_system_too_large_is_exit_2(tiny, tmp_path):
    """Random features whose system cannot fit (under a 300 MB address-space
    limit, or any: 200,000 of them need 320 GB) are refused before the BLAS
    is called, one line, exit 2, naming what to lower."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (300 << 20, 300 << 20))
    for cap in (limit, None):
        r = run_cli("xml-train", tiny / "train.txt", tmp_path / "m", "--algorithm", "embed",
                    "--num-features", "200000", "-q", preexec_fn=cap)
        assert one_line_error(r) and "out of memory" in r.stderr, r.stderr
        assert "random features" in r.stderr


@pytest.mark.parametrize("megabytes", [160, 220, 300])
def test_too_little_memory_to_start_the_blas_is_exit_2(megabytes, tiny, tmp_path):
    """embed under an address-space limit that leaves too little for
    scipy.linalg's BLAS to start (whose start, refused memory, retries for
    ever or gives up with exit 1), or for a module to load: one line, out of
    memory, exit 2, no folder left half made. At 300 MB an environment
    that imports less may have room: then the model is whole."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))
    m = tmp_path / "m"
    r = run_cli("xml-train", tiny / "train.txt", m, "--algorithm", "embed", "-q",
                preexec_fn=limit, timeout=300)
    if r.returncode == 0 and megabytes >= 300:     # (room enough in this environment)
        assert run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m,
                       "-q").returncode == 0
        return
    assert one_line_error(r) and "out of memory" in r.stderr, r.stderr
    assert not any(m.glob("*.npz"))
