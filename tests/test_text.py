"""Raw text in, tag names out: document readers, the featurizer, label names,
and xml-text / xml-train --text / xml-predict --text / xml-eval --text."""
import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("sklearn")

from conftest import run_cli  # noqa: E402
from xmlkit.errors import InputFormatError, XmlkitError  # noqa: E402
from xmlkit.text import (LabelNames, TextFeaturizer, load_featurizer,  # noqa: E402
                         read_documents, save_featurizer)


def corpus(n, seed=0, unseen=False):
    """Documents whose words follow their tags: tag t has words w<t>a..w<t>e
    (and a unicode one); a few noise words. Deterministic."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        tags = sorted(set(rng.choice(12, size=rng.integers(1, 4)).tolist()))
        words = [f"w{t}{c}" for t in tags for c in rng.choice(list("abcde"), 3)]
        words += [f"ünï{t}" for t in tags[:1]] + [f"noise{rng.integers(40)}" for _ in range(2)]
        rng.shuffle(words)
        names = [f"tag {t}" for t in tags] + (["never seen"] if unseen and i == 0 else [])
        docs.append({"id": f"d{i}", "text": " ".join(words), "labels": names})
    return docs


def write_jsonl(path, docs):
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs),
                    encoding="utf-8")
    return path


def test_jsonl_and_tsv_documents(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"id": "x", "text": "a b", "labels": ["t1", "t2"]}\n\n'
                 '{"text": "c", "labels": []}\n{"id": 9, "text": ""}\n', encoding="utf-8")
    d = read_documents(p)
    assert d.ids == ["x", 3, 9] and d.texts == ["a b", "c", ""]
    assert d.labels == [["t1", "t2"], [], None]
    t = tmp_path / "d.tsv"
    t.write_text("t1;t2\tsome text\twith a tab\n\tno labels\n", encoding="utf-8")
    d = read_documents(t, label_sep=";")
    assert d.ids == [1, 2] and d.texts == ["some text\twith a tab", "no labels"]
    assert d.labels == [["t1", "t2"], []]


@pytest.mark.parametrize("text, fmt, line, words", [
    ('{"text": "a"}\nnot json\n', "jsonl", 2, "not a JSON object"),
    ('["a"]\n', "jsonl", 1, "not a JSON object"),
    ('{"labels": ["t"]}\n', "jsonl", 1, "'text' missing"),
    ('{"text": "a", "labels": "t"}\n', "jsonl", 1, "'labels' is not a list"),
    ('{"text": "a", "labels": [""]}\n', "jsonl", 1, "'labels' is not a list"),
    ('{"text": "a", "id": 1.5}\n', "jsonl", 1, "'id' is not"),
    ('t1\tok\nno tab here\n', "tsv", 2, "no TAB"),
    ('t1,,t2\ttext\n', "tsv", 1, "an empty label name"),
])
def test_bad_document_lines_are_refused_with_file_and_line(tmp_path, text, fmt, line, words):
    p = tmp_path / f"bad.{fmt}"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(InputFormatError) as exc:
        read_documents(p)
    assert str(exc.value).startswith(f"{p}:{line}: ") and words in str(exc.value)


def test_not_utf8_and_training_without_labels_are_refused(tmp_path):
    p = tmp_path / "latin1.jsonl"
    p.write_bytes('{"text": "ok"}\n{"text": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(InputFormatError, match=f"{p}:2: not UTF-8"):
        read_documents(p)
    q = write_jsonl(tmp_path / "q.jsonl", [{"text": "a", "labels": ["t"]}, {"text": "b"}])
    with pytest.raises(InputFormatError, match=f"{q}:2: no 'labels'"):
        read_documents(q, need_labels=True)


def test_tfidf_values_by_hand():
    """3 documents, unigrams, min_df 1, plain tf: idf = ln((1 + n) / (1 + df))
    + 1 (scikit-learn's smoothed idf), rows of unit length."""
    f = TextFeaturizer(ngram_max=1, sublinear_tf=False, min_df=1, max_features=None)
    X = f.fit_transform(["apple apple pear", "pear plum", "plum"])
    assert f.terms.tolist() == ["apple", "pear", "plum"]
    idf = np.log(4 / np.array([2, 3, 3])) + 1
    assert np.allclose(f.idf, idf)
    row0 = np.array([2 * idf[0], idf[1], 0.0])
    assert np.allclose(X.toarray()[0], row0 / np.linalg.norm(row0), atol=1e-7)
    s = TextFeaturizer(ngram_max=1, sublinear_tf=True, min_df=1, max_features=None)
    row0 = np.array([(1 + np.log(2)) * idf[0], idf[1], 0.0])
    assert np.allclose(s.fit_transform(["apple apple pear", "pear plum", "plum"]).toarray()[0],
                       row0 / np.linalg.norm(row0), atol=1e-7)
    # an empty text or one with no known word: an empty row
    assert f.transform(["", "kiwi"]).nnz == 0


def test_options_min_df_max_features_and_bigrams():
    texts = ["aa bb cc", "aa bb", "aa dd x"]     # (one-letter words are not terms)
    assert TextFeaturizer(ngram_max=1, min_df=2).fit(texts).terms.tolist() == ["aa", "bb"]
    assert TextFeaturizer(ngram_max=1, min_df=1, max_features=1).fit(texts).terms.tolist() \
        == ["aa"]
    assert "aa bb" in TextFeaturizer(ngram_max=2, min_df=2).fit(texts).terms.tolist()
    for bad in ({"ngram_max": 0}, {"min_df": 0}, {"max_features": 0}):
        with pytest.raises(XmlkitError):
            TextFeaturizer(**bad)


HARD_TEXTS = ["Ünïcode ÉTÉ été_2 x y z_ a1 1 22 İstanbul ΣΊΣΥΦΟΣ straße STRASSE",
              "日本語のテキスト 漢字 mixed日本 e\u0301te cafe\u0301 ﬁne ½ ２３ x²y",
              "", "a b", "one two three one two three one two three " * 3,
              "tabs\tand\nnewlines\r\nand--dashes...dots's quote's don't"]


@pytest.mark.parametrize("ngram_max, lowercase", [(1, True), (2, True), (3, False)])
def test_counts_are_scikit_learns(ngram_max, lowercase):
    """The words and n-grams counted for scoring (without scikit-learn) are
    CountVectorizer's, count for count, on the vocabulary fitted from the
    documents, for text in many scripts, cases, digits and punctuation."""
    from sklearn.feature_extraction.text import CountVectorizer
    texts = [d["text"] for d in corpus(60, seed=3)] + HARD_TEXTS
    f = TextFeaturizer(ngram_max=ngram_max, min_df=1, lowercase=lowercase).fit(texts)
    ptr, idx, val = f._counts(texts + [t.upper() for t in HARD_TEXTS])
    want = CountVectorizer(ngram_range=(1, ngram_max), lowercase=lowercase,
                           vocabulary=list(f.terms), dtype=np.float64).transform(
        texts + [t.upper() for t in HARD_TEXTS]).tocsr()
    want.sort_indices()
    assert ptr.tolist() == want.indptr.tolist() and idx.tolist() == want.indices.tolist()
    assert val.tolist() == want.data.tolist() and len(idx) > 100


def test_label_names_count_unknown_names():
    names = LabelNames.fit([["b", "a"], ["c"], None, []])
    assert names.names == ["a", "b", "c"]
    Y, unknown = names.encode([["c", "zz"], None, ["a", "a", "yy"]])
    assert Y.toarray().tolist() == [[0, 0, 1], [0, 0, 0], [1, 0, 0]] and unknown == 2


@pytest.mark.slow
def test_featurizer_reloads_and_gives_the_same_bytes_in_another_process(tmp_path):
    docs = write_jsonl(tmp_path / "train.jsonl", corpus(300))
    feat = tmp_path / "feat.npz"
    out1, out2, out3 = (tmp_path / f"train{i}.txt" for i in (1, 2, 3))
    r = run_cli("xml-text", docs, out1, feat, "--fit", "-q")
    assert r.returncode == 0, r.stderr
    assert run_cli("xml-text", docs, out2, feat, "-q").returncode == 0
    assert out1.read_bytes() == out2.read_bytes()
    # the same in this process, through the API
    f, names = load_featurizer(feat)
    d = read_documents(docs)
    from xmlkit.io import write_dataset
    write_dataset(out3, f.transform(d.texts), names.encode(d.labels)[0])
    assert out3.read_bytes() == out1.read_bytes()
    # refitting gives the same featurizer file
    feat2 = tmp_path / "feat2.npz"
    assert run_cli("xml-text", docs, tmp_path / "x.txt", feat2, "--fit", "-q").returncode == 0
    assert feat2.read_bytes() == feat.read_bytes()


def test_a_featurizer_file_removes_what_killed_runs_left(tmp_path):
    """A featurizer file is an output of its own (not in a model folder): as
    for any output, the temporary files of runs killed while writing it go."""
    from xmlkit.atomic import _temp_prefix
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    feat = tmp_path / "feat.npz"
    left = tmp_path / f"{_temp_prefix(feat, int(dead))}abcd.tmp"
    left.write_bytes(b"half a file")
    save_featurizer(feat, TextFeaturizer(ngram_max=1, min_df=1).fit(["aa bb", "bb cc"]))
    assert feat.is_file() and not left.exists()


def test_damaged_featurizer_is_refused(tmp_path):
    f = TextFeaturizer(ngram_max=1, min_df=1).fit(["aa bb", "bb cc"])
    arrays = f.to_arrays(LabelNames(["x"]))
    for key, bad in (("idf", np.array([1.0, np.nan, 1.0])), ("terms", np.array(["aa", "aa", "cc"])),
                     ("label_names", np.array(["x", "x"])), ("meta", np.zeros(3, np.uint8))):
        with pytest.raises(XmlkitError, match="damaged text featurizer"):
            TextFeaturizer.from_arrays({**arrays, key: bad}, "f.npz")
    p = save_featurizer(tmp_path / "f.npz", f)
    p.write_bytes(p.read_bytes()[:50])
    with pytest.raises(XmlkitError, match="not a readable text featurizer"):
        load_featurizer(p)


@pytest.fixture(scope="module")
def text_model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("text")
    train = write_jsonl(tmp / "train.jsonl", corpus(400, seed=1))
    model = tmp / "model"
    r = run_cli("xml-train", "--text", train, model, "-t", "4", "-q")
    assert r.returncode == 0, r.stderr
    test_docs = corpus(60, seed=2, unseen=True)
    test_docs[1]["text"] = ""                                  # empty text
    test_docs[2]["text"] = "nothing known ∂∆ here"             # no known word
    test_docs[3]["text"] = "W3A w3b ÜNÏ3 — naïve"              # unicode, case folded
    del test_docs[4]["id"]                                     # the line number stands in
    return tmp, train, model, write_jsonl(tmp / "test.jsonl", test_docs), test_docs


@pytest.mark.slow
def test_predict_names_equal_the_index_scores(text_model):
    """--names: the same top-k as the score matrix, each index mapped to the
    name of that column (label names in sorted order), ids in input order."""
    tmp, train, model, test, docs = text_model
    named, scores = tmp / "pred.jsonl", tmp / "pred.txt"
    assert run_cli("xml-predict", "--text", test, named, model, "--names", "-k", "5",
                   "-q").returncode == 0
    assert run_cli("xml-predict", "--text", test, scores, model, "-k", "5", "-q").returncode == 0
    from xmlkit.io import read_matrix
    S = read_matrix(scores).tocsr()
    names = sorted({n for d in corpus(400, seed=1) for n in d["labels"]})
    lines = [json.loads(line) for line in named.read_text(encoding="utf-8").splitlines()]
    assert [x["id"] for x in lines] == [d.get("id", i + 1) for i, d in enumerate(docs)]
    assert lines[4]["id"] == 5
    for i, x in enumerate(lines):
        s, e = S.indptr[i], S.indptr[i + 1]
        # (the same labels with the same scores; labels whose scores tie in
        # the file's 6 decimals may come in either order)
        assert sorted(zip(np.round(x["scores"], 6).tolist(), x["labels"])) == sorted(
            zip(np.round(S.data[s:e].astype(np.float64), 6).tolist(),
                [names[j] for j in S.indices[s:e]]))
        assert len(x["labels"]) <= 5 and x["scores"] == sorted(x["scores"], reverse=True)
    # the document made of words of tag 3 gets tag 3 first
    assert lines[3]["labels"][0] == "tag 3"


@pytest.mark.slow
def test_eval_on_text_labels_equals_eval_on_xc_files(text_model):
    """xml-eval --text (names matched) gives the metrics of xml-eval on the XC
    files of xml-text. A label the training never saw is a relevant label of
    the text truth (left out of the XC files, with a count): P@k is the same,
    R@k lower."""
    tmp, train, model, test, docs = text_model
    known = write_jsonl(tmp / "known.jsonl", [
        {**d, "labels": [n for n in d["labels"] if n != "never seen"]} for d in docs])
    named, scores = tmp / "e.jsonl", tmp / "e.txt"
    run_cli("xml-predict", "--text", known, named, model, "--names", "-q")
    run_cli("xml-predict", "--text", known, scores, model, "-q")
    feat, xc_test, xc_train = tmp / "f.npz", tmp / "test.txt", tmp / "train.txt"
    assert run_cli("xml-text", train, xc_train, feat, "--fit", "-q").returncode == 0
    assert run_cli("xml-text", known, xc_test, feat, "-q").returncode == 0
    a = json.loads(run_cli("xml-eval", "--text", named, known, "--train-labels", train,
                           "--json").stdout)
    b = json.loads(run_cli("xml-eval", scores, xc_test, "--train-labels", xc_train,
                           "--json").stdout)
    assert a["metrics"].keys() == b["metrics"].keys()
    for key, value in b["metrics"].items():
        assert a["metrics"][key] == pytest.approx(value, abs=1e-9), key
    r = run_cli("xml-text", test, tmp / "test_all.txt", feat)
    assert r.returncode == 0 and "1 label occurrences" in r.stderr
    r = run_cli("xml-eval", "--text", named, test, "--train-labels", train)
    assert r.returncode == 0 and "1 true label occurrences" in r.stderr
    c = json.loads(run_cli("xml-eval", "--text", named, test, "--json").stdout)
    assert c["n_labels"] == a["n_labels"] + 1
    assert c["metrics"]["P@5"] == pytest.approx(a["metrics"]["P@5"], abs=1e-9)
    assert c["metrics"]["R@5"] < a["metrics"]["R@5"]


@pytest.mark.slow
def test_text_options_without_text_and_ids_that_differ(text_model, tmp_path):
    tmp, train, model, test, docs = text_model
    r = run_cli("xml-train", train, tmp_path / "m", "--min-df", "3")
    assert r.returncode == 2 and r.stderr.strip().endswith("--min-df goes with --text")
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "zz", "text": "w1a"}] + docs[1:])
    named = tmp_path / "p.jsonl"
    run_cli("xml-predict", "--text", other, named, model, "--names", "-q")
    r = run_cli("xml-eval", "--text", named, test)
    assert r.returncode == 2 and "prediction 1 is of id 'zz'" in r.stderr
    # a model trained on XC files has no featurizer
    from conftest import TRAIN
    run_cli("xml-train", TRAIN, tmp_path / "xc", "-t", "1", "-q")
    r = run_cli("xml-predict", "--text", test, tmp_path / "o.jsonl", tmp_path / "xc", "--names")
    assert r.returncode == 2 and "was not trained from text" in r.stderr


def test_a_damaged_text_file_in_the_model_is_refused(text_model, tmp_path):
    import shutil
    tmp, train, model, test, docs = text_model
    copy = tmp_path / "m"
    shutil.copytree(model, copy)
    data = bytearray((copy / "text.npz").read_bytes())
    data[len(data) // 2] ^= 1
    (copy / "text.npz").write_bytes(bytes(data))
    r = run_cli("xml-predict", "--text", test, tmp_path / "o.jsonl", copy, "--names")
    assert r.returncode == 2 and "text.npz" in r.stderr and len(r.stderr.splitlines()) == 1


@pytest.mark.slow
def test_every_family_trains_from_text(text_model, tmp_path):
    tmp, train, model, test, docs = text_model
    for algo, extra in (("pfastrexml", ["-t", "2"]), ("ldsm", ["-t", "1"]), ("linear", []),
                        ("embed", [])):
        m = tmp_path / algo
        r = run_cli("xml-train", "--text", train, m, "--algorithm", algo, *extra, "-q")
        assert r.returncode == 0, (algo, r.stderr)
        out = tmp_path / f"{algo}.jsonl"
        r = run_cli("xml-predict", "--text", test, out, m, "--names", "-k", "3", "-q")
        assert r.returncode == 0, (algo, r.stderr)
        assert len(out.read_text(encoding="utf-8").splitlines()) == len(docs)


def test_without_scikit_learn_text_says_how_to_install(text_model, tmp_path):
    """Training on text needs scikit-learn (its vocabulary): one line saying
    how to install it; scoring text does not import it."""
    tmp, train, model, test, docs = text_model
    code = ("import sys; sys.modules['sklearn'] = None; sys.argv = sys.argv[1:]; "
            "from xmlkit.cli.predict import main; main()")
    r = subprocess.run([sys.executable, "-c", code, "xml-predict", "--text", str(test), "-",
                        str(model), "--names", "-q"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == len(docs), r.stderr
    code = ("import sys; sys.modules['sklearn'] = None; sys.argv = sys.argv[1:]; "
            "from xmlkit.cli.train import main; main()")
    r = subprocess.run([sys.executable, "-c", code, "xml-train", "--text", str(train),
                        str(tmp_path / "m")], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == ("xml-train: error: text input needs scikit-learn: "
                                "pip install 'xmlkit[text]'")
    assert not (tmp_path / "m").exists()



@pytest.mark.slow
def test_readme_text_quick_start_runs_as_written(tmp_path):
    """The README's "Your own data" commands, run as written (but the
    install) from another folder, on the bundled sample."""
    import re
    from conftest import ROOT
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Your own data.*?```sh\n(.*?)```", readme, re.S).group(1)
    lines = [line for line in block.splitlines() if line and not line.startswith("pip ")]
    assert [line.split()[0] for line in lines] == ["xml-train", "xml-predict", "xml-eval"]
    for line in lines:
        r = subprocess.run(line.replace("data_samples/", f"{ROOT}/data_samples/"), shell=True,
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, (line, r.stderr)
    first = json.loads((tmp_path / "pydists_names.jsonl").read_text(encoding="utf-8")
                       .splitlines()[0])
    assert len(first["labels"]) == 5 and all(isinstance(n, str) for n in first["labels"])
    assert r.stdout.splitlines()[1].startswith("P ")
