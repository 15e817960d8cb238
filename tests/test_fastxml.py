"""FastXML: CLI and API agree, determinism across worker counts, sharded and
resumed training, interop with the C++ tool's model folders, and errors."""
import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

import xmlkit
from xmlkit.csr import Rows
from xmlkit.io import read_matrix, read_xc
from xmlkit.metrics import ranking_metrics
from xmlkit.models.forest import decode_tree, encode_tree

from conftest import TEST, TRAIN, as_format_3, run_cli



def tree_files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.glob("tree_*.npz"))}


def train(*args):
    r = run_cli("xml-train", *args, "-q")
    assert r.returncode == 0, r.stderr
    return r


def test_cli_and_api_give_the_same_scores(tmp_path, bibtex):
    X, Y, Xt, Yt = bibtex
    model_dir, scores = tmp_path / "model", tmp_path / "scores.txt"
    train(TRAIN, model_dir, "-t", "3", "--seed", "7")
    r = run_cli("xml-predict", TEST, scores, model_dir, "-q")
    assert r.returncode == 0, r.stderr
    S_cli = read_matrix(scores)

    model = xmlkit.FastXML(n_trees=3, seed=7).fit(X, Y)
    S_api = model.predict(Xt, k=None)
    assert S_cli.shape == S_api.shape == Yt.shape
    assert np.array_equal(S_cli.indptr, S_api.indptr)
    assert np.array_equal(S_cli.indices, S_api.indices)
    assert np.abs(S_cli.data - S_api.data).max() <= 6e-7   # 6 decimals in the file
    # a real model, not a constant: far above the popularity baseline (P@1 13.6)
    assert ranking_metrics(Yt, S_api, (1,))["P@1"] > 0.5

    # the saved model is the in-memory model
    loaded = xmlkit.load_model(model_dir)
    assert sorted(loaded.trees_) == [0, 1, 2]
    assert (loaded.predict(Xt, k=None) != S_api).nnz == 0
    manifest = json.loads((model_dir / "manifest.json").read_text())
    assert manifest["algorithm"] == "fastxml" and manifest["seed"] == 7
    assert manifest["params"] == {"bias": 1.0, "log_loss_coeff": 1.0, "max_leaf": 10,
                                  "labels_per_leaf": 10, "solver": "newglmnet",
                                  "tol": 0.03, "max_newton": 10, "max_newton_small": 3,
                                  "small_node": 4096, "init": "zero"}
    assert manifest["format_version"] == 4 and manifest["n_labels"] == Y.shape[1]
    assert sorted(manifest["files"]) == [f"tree_{t:05d}.npz" for t in range(3)]


def test_predict_returns_the_kind_of_matrix_it_is_given(bibtex):
    """Bare Rows (the command-line path, no scipy) in, Rows out; the same
    scores as through scipy."""
    X, Y, Xt, Yt = bibtex
    model = xmlkit.FastXML(n_trees=2).fit(X, Y)
    R = read_xc(TEST).feature_rows
    S_rows, S = model.predict(R, k=5), model.predict(Xt, k=5)
    assert isinstance(S_rows, Rows) and sp.issparse(S)
    assert (S_rows.to_scipy() != S).nnz == 0


def test_top_k_scores(tmp_path, bibtex):
    X, Y, Xt, Yt = bibtex
    model = xmlkit.FastXML(n_trees=2).fit(X, Y)
    full, top = model.predict(Xt), model.predict(Xt, k=3)
    assert np.all(np.diff(top.indptr) == np.minimum(3, np.diff(full.indptr)))
    for i in range(0, Xt.shape[0], 97):
        row = full.getrow(i).toarray().ravel()
        order = np.lexsort((np.arange(len(row)), -row))[:3]
        kept = set(top.getrow(i).indices)
        assert kept == {j for j in order if row[j] > 0}


@pytest.mark.slow
def test_same_seed_same_files_at_any_worker_count(tmp_path):
    a, b, b3 = tmp_path / "a", tmp_path / "b", tmp_path / "b3"
    train(TRAIN, a, "-t", "4", "-T", "1")
    train(TRAIN, b, "-t", "4", "-T", "2")
    train(TRAIN, b3, "-t", "4", "-T", "3")
    fa, fb = tree_files(a), tree_files(b)
    assert len(fa) == 4 and fa == fb == tree_files(b3)
    # every file of the folders, hidden ones (the lock file) included
    whole = {p.name: p.read_bytes() for p in a.iterdir()}
    assert ".lock" in whole and "manifest.json" in whole
    assert whole == {p.name: p.read_bytes() for p in b.iterdir()}
    c = tmp_path / "c"
    train(TRAIN, c, "-t", "4", "--seed", "1")
    assert tree_files(c) != fa
    # liblinear's solver grows trees in worker processes: the same there
    la, lb = tmp_path / "la", tmp_path / "lb"
    train(TRAIN, la, "-t", "3", "-T", "1", "--solver", "liblinear")
    train(TRAIN, lb, "-t", "3", "-T", "2", "--solver", "liblinear")
    assert len(tree_files(la)) == 3 and tree_files(la) == tree_files(lb)
    assert tree_files(la) != {k: v for k, v in fa.items() if k in tree_files(la)}


@pytest.mark.slow
def test_shards_merge_and_resume(tmp_path):
    whole, shards = tmp_path / "whole", tmp_path / "shards"
    train(TRAIN, whole, "-s", "0", "-t", "4")
    train(TRAIN, shards, "-s", "0", "-t", "2")
    first = tree_files(shards)
    elsewhere = tmp_path / "elsewhere"
    train(TRAIN, elsewhere, "-s", "2", "-t", "2")
    for p in elsewhere.glob("tree_*.npz"):          # merge by copying tree files
        shutil.copy(p, shards / p.name)
    assert tree_files(shards) == tree_files(whole)

    # a rerun over the whole range keeps the finished trees and grows none:
    # not one file is written again (regrown trees would be the same bytes)
    import os
    stamps = {p.name: (os.stat(p).st_ino, os.stat(p).st_mtime_ns)
              for p in shards.glob("tree_*.npz")}
    r = run_cli("xml-train", TRAIN, shards, "-t", "4")
    assert r.returncode == 0 and "4 of the trees are already" in r.stderr
    assert "growing 0" in r.stderr, r.stderr
    assert {k: v for k, v in tree_files(shards).items() if k in first} == first
    assert {p.name: (os.stat(p).st_ino, os.stat(p).st_mtime_ns)
            for p in shards.glob("tree_*.npz")} == stamps


def test_predict_tree_range_is_the_apis_trees(tmp_path, bibtex):
    """xml-predict -s S -t N scores with trees S..S+N-1, exactly those: the
    API's scores on them, not those of one tree fewer or more."""
    _, _, Xt, _ = bibtex
    folder = tmp_path / "m"
    train(TRAIN, folder, "-t", "4")
    scores = tmp_path / "s.txt"
    r = run_cli("xml-predict", TEST, scores, folder, "-s", "1", "-t", "2", "-q")
    assert r.returncode == 0, r.stderr
    cli = read_matrix(scores)
    for trees, same in (([1, 2], True), ([1], False), ([1, 2, 3], False), ([0, 1], False)):
        api = xmlkit.load_model(folder, trees=trees).predict(Xt, k=None)
        close = cli.shape == api.shape and np.array_equal(cli.indptr, api.indptr) and \
            np.array_equal(cli.indices, api.indices) and np.abs(cli.data - api.data).max() <= 6e-7
        assert close == same, trees


def test_cpp_model_interop(tmp_path, shared):
    ref = shared / "fixtures" / "cpp_reference"
    test = shared / "data" / "bibtex" / "bibtex_test.txt.xz"
    if not test.exists():
        pytest.skip(f"{test} not found")
    scores = tmp_path / "scores.txt"
    r = run_cli("xml-predict", test, scores, ref / "fastxml_model", "-q")
    assert r.returncode == 0, r.stderr
    ours, theirs = read_matrix(scores), read_matrix(ref / "fastxml_scores.txt")
    assert ours.shape == theirs.shape
    assert np.array_equal(ours.indptr, theirs.indptr)
    assert np.array_equal(ours.indices, theirs.indices)
    assert np.abs(ours.data - theirs.data).max() <= 1e-6


def test_tree_encoding_round_trip(bibtex, tmp_path):
    # both layouts give the tree back: the mapped one as views of the file,
    # the compact one decoded
    from xmlkit import store
    X, Y, _, _ = bibtex
    tree = xmlkit.FastXML(n_trees=1).fit(X, Y).trees_[0]
    planes = decode_tree(encode_tree(tree, compact=True), "t", X.shape[1], Y.shape[1])
    store.save_arrays(tmp_path, "m", encode_tree(tree))
    mapped = decode_tree(store.load_arrays(tmp_path, "m", lazy=True), "m", X.shape[1],
                         Y.shape[1])
    mapped.verify()
    for back in (planes, mapped):
        assert set(back) == set(tree)
        for key in tree:
            assert np.array_equal(back[key], tree[key]), key
            assert back[key].dtype == tree[key].dtype, key


@pytest.mark.parametrize("family", [xmlkit.FastXML, xmlkit.PfastreXML, xmlkit.LdSM])
def test_folders_of_format_2_load_and_score_as_before(family, bibtex, tmp_path):
    """A folder as xmlkit wrote it before format version 3 (compact files,
    SHA-256 records) loads, decoded, and scores as the model did, byte for
    byte; training into it is refused (its trees carry no origin: store)."""
    import hashlib
    import json
    from xmlkit import store
    from xmlkit.models.folders import save_folder
    X, Y, Xt, _ = bibtex
    quick = {"n_trees": 2} if family is not xmlkit.LdSM else {"n_trees": 2, "max_nodes": 60}
    fitted = family(**quick).fit(X[:800], Y[:800])
    old = tmp_path / "old"
    save_folder(fitted, old, compact=True)
    m = json.loads((old / "manifest.json").read_text())
    for name in m["files"]:                         # (no origin, no data digest: version 2)
        arrays = dict(store.load_arrays(old, name[:-4]))
        arrays.pop(store.ORIGIN, None)
        store.save_arrays(old, name[:-4], arrays, compact=True)
    m.pop("data", None)
    m["format_version"] = 2
    m["files"] = {n: {"size": (old / n).stat().st_size,
                      "sha256": hashlib.sha256((old / n).read_bytes()).hexdigest()}
                  for n in m["files"]}
    store.write_manifest(old, m)
    loaded = xmlkit.load_model(old)
    assert not any(getattr(t, "file", None) for t in loaded.trees_.values())
    for k in (None, 5):
        assert (loaded.predict(Xt, k=k) != fitted.predict(Xt, k=k)).nnz == 0
    from xmlkit.driver import fit_folder
    with pytest.raises(xmlkit.XmlkitError, match="format version 2 .* train into a new folder"):
        fit_folder(family(**{**quick, "n_trees": 3}), X[:800], Y[:800], old)
    assert store.read_manifest(old) == m
    (old / "tree_00001.npz").write_bytes((old / "tree_00001.npz").read_bytes()[:-9] + b"x" * 9)
    with pytest.raises(xmlkit.XmlkitError, match="tree_00001.npz: damaged model file"):
        xmlkit.load_model(old)


def test_tree_file_layouts(bibtex, tmp_path):
    # compact: byte planes deflated, but the weight values' (stored); mapped:
    # every array stored as it is, its data at a multiple of 64 bytes, in
    # TREE_KEYS order, then the table of block digests
    import zipfile
    from xmlkit import arrayfile, store
    from xmlkit.models.forest import TREE_KEYS
    X, Y, _, _ = bibtex
    tree = xmlkit.FastXML(n_trees=1).fit(X, Y).trees_[0]
    store.save_arrays(tmp_path, "t", encode_tree(tree, compact=True, lazy=True), compact=True)
    kinds = {i.filename: i.compress_type for i in zipfile.ZipFile(tmp_path / "t.npz").infolist()}
    assert kinds.pop("w_val_planes.npy") == zipfile.ZIP_STORED
    assert set(kinds.values()) == {zipfile.ZIP_DEFLATED}
    back = decode_tree(dict(store.load_arrays(tmp_path, "t")), "t", X.shape[1], Y.shape[1])
    for key in tree:
        assert np.array_equal(back[key], tree[key]), key
    store.save_arrays(tmp_path, "m", encode_tree(tree))
    infos = zipfile.ZipFile(tmp_path / "m.npz").infolist()
    assert [i.filename for i in infos] == [f"{k}.npy" for k in TREE_KEYS] + ["__blocks__.npy"]
    assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
    f = arrayfile.open_file(tmp_path / "m.npz", arrayfile.digest(tmp_path / "m.npz"))
    assert all(start % 64 == 0 for start, _ in f.spans.values())
    assert not f["w_val"].flags.writeable and not f["w_val"].flags.owndata
    assert np.load(tmp_path / "m.npz")["w_idx"].tolist() == tree["w_idx"].tolist()


def test_grower_holds_no_root_sized_scratch_between_trees(bibtex):
    # the root's feature columns alone are a copy of X (8 bytes an entry);
    # without giving scratch back as the nodes shrink, and the tree's own
    # vectors once copied out, the grower would hold ~1.5x that between trees
    from xmlkit._ext.fastxml_partition import NdcgPartition
    from xmlkit._ext.fastxml_separator import NodeSeparator
    from xmlkit._ext.fastxml_tree import TreeGrower
    from xmlkit.models.fastxml import _as_training_csr
    X, Y, _, _ = bibtex
    g = TreeGrower(_as_training_csr(X, "f", X.shape[1]), _as_training_csr(Y, "l", Y.shape[1]),
                   NdcgPartition(True), NodeSeparator(1.0, 1.0, "newglmnet", warm=True))
    first = g.grow(0, 0)
    assert g.held_bytes() < X.nnz * 8 / 4
    again = TreeGrower(_as_training_csr(X, "f", X.shape[1]),
                       _as_training_csr(Y, "l", Y.shape[1]), NdcgPartition(True),
                       NodeSeparator(1.0, 1.0, "newglmnet", warm=True)).grow(0, 0)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    g.grow(0, 1)            # a grower that gave its memory back grows on as before
    assert all(np.array_equal(first[k], v) for k, v in g.grow(0, 0).items())


def test_large_node_gate_orders_separators_and_leaves_trees_alone(bibtex):
    # two growers in two threads share a gate that takes every node as
    # large: the nodes past it never hold more points than the training
    # set (a root's columns, shared by the roots at once, count once), and
    # each tree is the one a grower without a gate grows
    from concurrent.futures import ThreadPoolExecutor
    from xmlkit._ext.fastxml_partition import NdcgPartition
    from xmlkit._ext.fastxml_separator import NodeSeparator
    from xmlkit._ext.fastxml_tree import LargeNodeGate, TreeGrower
    from xmlkit.models.fastxml import _as_training_csr
    X, Y, _, _ = bibtex
    n = X.shape[0]
    Xg, Yg = _as_training_csr(X, "f", X.shape[1]), _as_training_csr(Y, "l", Y.shape[1])

    def grower(gate):
        return TreeGrower(Xg, Yg, NdcgPartition(True), NodeSeparator(1.0, 1.0, "newglmnet"),
                          gate=gate)
    alone = [grower(None).grow(0, t) for t in range(4)]

    def same(trees):
        return all(all(np.array_equal(a[k], b[k]) for k in a) for a, b in zip(alone, trees))

    def in_two_threads(gate):
        # thread i grows trees i, i + 2 with a grower of its own
        def grow(i):
            g = grower(gate)
            return [g.grow(0, t) for t in (i, i + 2)]
        with ThreadPoolExecutor(2) as pool:
            (t0, t2), (t1, t3) = pool.map(grow, range(2))
        return [t0, t1, t2, t3]
    gate = LargeNodeGate(n, 1, min_points=0)
    assert same(in_two_threads(gate))
    assert 0 < gate.most_points <= n
    assert 1 <= gate.most_at_once <= 2
    wide = LargeNodeGate(n, 2, min_points=0)
    assert same(in_two_threads(wide))
    assert wide.most_points <= 2 * n
    # roots on a copy of their columns built for another tree's root (kept
    # here, so that every root after the first borrows it): the same trees
    kept = LargeNodeGate(n, 1, min_points=n - 1, keep_root=True)
    g = grower(kept)
    assert same([g.grow(0, t) for t in range(4)])
    assert kept.roots_shared == 3
    assert same(in_two_threads(kept)) and kept.roots_shared == 7
    # the threshold: a quarter of the points, and never LARGE_NODE (32768) or fewer
    assert LargeNodeGate(100_000).min_points == 32768
    assert LargeNodeGate(1_000_000).min_points == 250_000
    with pytest.raises(ValueError):
        LargeNodeGate(10, 0)


@pytest.mark.parametrize("plan_splits", [True, False])
def test_crew_grows_the_trees_one_grower_grows(bibtex, plan_splits):
    # one thread grows trees while another helps it (Crew): nodes of each
    # level are grown by either thread, and each tree is the one a grower
    # alone grows. plan_splits=False plans every level as if no node were
    # split, so that nearly every node is grown again from its corrected
    # place in the random stream: that path gives the same trees too
    from concurrent.futures import ThreadPoolExecutor
    from xmlkit._ext.fastxml_partition import NdcgPartition
    from xmlkit._ext.fastxml_separator import NodeSeparator
    from xmlkit._ext.fastxml_tree import Crew, TreeGrower
    from xmlkit.models.fastxml import _as_training_csr
    X, Y, _, _ = bibtex
    Xg, Yg = _as_training_csr(X, "f", X.shape[1]), _as_training_csr(Y, "l", Y.shape[1])

    def grower(crew=None):
        return TreeGrower(Xg, Yg, NdcgPartition(True), NodeSeparator(1.0, 1.0, "newglmnet"),
                          crew=crew, plan_splits=plan_splits)
    alone = [grower().grow(0, t) for t in range(2)]
    crew = Crew(2)
    owner, helper = grower(crew), grower(crew)
    with ThreadPoolExecutor(2) as pool:
        helping = pool.submit(helper.help)
        shared = [owner.grow(0, t) for t in range(2)]
        helping.result(timeout=60)          # (returns once both trees are done)
    assert crew.helped > 100                # the helper grew nodes of both trees
    for a, b in zip(alone, shared):
        assert all(np.array_equal(a[k], b[k]) for k in a)
    # a helper whose crew expects no tree returns at once; one without a crew
    # has no one to help
    assert grower(Crew(0)).help() is None
    with pytest.raises(ValueError):
        grower().help()


def test_fewer_trees_than_threads_the_same_trees(bibtex):
    # -t 1 -T 2 and -t 3 -T 2: the idle thread grows nodes of the trees
    X, Y, _, _ = bibtex
    for n in (1, 3):
        one = xmlkit.FastXML(n_trees=n, threads=1, seed=5).fit(X, Y)
        two = xmlkit.FastXML(n_trees=n, threads=2, seed=5).fit(X, Y)
        for t in range(n):
            assert all(np.array_equal(one.trees_[t][k], two.trees_[t][k])
                       for k in one.trees_[t])


def test_tree_encoding_by_hand():
    # rows [5 7] [] [3] [9 2] []: differences to the previous index of the row
    # 5 2 | 3 | 9 -7, stored little-endian byte by byte (x86: the machine's order)
    tree = {"child": np.array([[1, 2], [-1, -1], [3, 4], [-1, -1], [-1, -1]]),
            "depth": np.array([0, 1, 1, 2, 2]),
            "w_ptr": np.array([0, 2, 2, 3, 5, 5]), "w_idx": np.array([5, 7, 3, 9, 2]),
            "w_val": np.array([1.0, -2.0, 0.5, 0.0, 3.0]),
            "l_ptr": np.array([0, 0, 1, 1, 1, 1]), "l_idx": np.array([4]),
            "l_val": np.array([1.0])}
    enc = encode_tree(tree, compact=True)
    assert enc["w_count"].tolist() == [2, 0, 1, 2, 0]
    assert enc["w_idx_delta_planes"].tolist() == [[5, 2, 3, 9, 249], [0, 0, 0, 0, 255],
                                                  [0, 0, 0, 0, 255], [0, 0, 0, 0, 255]]
    # 1.0 = 0x3F800000, -2.0 = 0xC0000000, 0.5 = 0x3F000000, 3.0 = 0x40400000
    assert enc["w_val_planes"].tolist() == [[0, 0, 0, 0, 0], [0, 0, 0, 0, 0],
                                            [0x80, 0, 0, 0, 0x40], [0x3F, 0xC0, 0x3F, 0, 0x40]]
    assert enc["l_idx_delta_planes"].tolist() == [[4], [0], [0], [0]]
    back = decode_tree(enc, "t", 10, 5)
    assert back["w_idx"].tolist() == [5, 7, 3, 9, 2]
    assert back["w_val"].tolist() == [1.0, -2.0, 0.5, 0.0, 3.0]
    with pytest.raises(ValueError, match="do not cover"):
        encode_tree(dict(tree, w_ptr=np.array([0, 2, 2, 3, 4, 4])), compact=True)
    with pytest.raises(ValueError, match="decrease"):
        encode_tree(dict(tree, w_ptr=np.array([0, 3, 2, 3, 5, 5])), compact=True)
    # the mapped layout stores the arrays as they are, rows sorted where a
    # row is out of order (a C++ tool's tree may have such rows)
    mapped = encode_tree(tree)
    assert mapped["w_idx"].tolist() == [5, 7, 3, 2, 9]
    assert mapped["w_val"].tolist() == [1.0, -2.0, 0.5, 3.0, 0.0]
    assert mapped["w_ptr"].dtype == np.int64 and mapped["child"].dtype == np.int32


@pytest.mark.slow
def test_bad_options_and_folders(tmp_path):
    model_dir = tmp_path / "m"

    def fails(cmd, *args, says):
        r = run_cli(cmd, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert says in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr

    fails("xml-train", TRAIN, model_dir, "-t", "0",
          says="--trees (-t) must be an integer in [1, 100000]")
    fails("xml-train", TRAIN, model_dir, "-m", "x", says="is not a valid integer")
    fails("xml-train", TRAIN, says="expected DATA MODEL_DIR")
    fails("xml-train", TRAIN, TRAIN, TRAIN, model_dir, says="expected DATA MODEL_DIR")
    fails("xml-train", TRAIN, model_dir, "--algorithm", "nope", says="nope")
    assert not model_dir.exists()

    train(TRAIN, model_dir, "-t", "1")
    fails("xml-train", TRAIN, model_dir, "-t", "1", "-m", "20",
          says="max_leaf: 10 there, 20 now")
    fails("xml-train", TRAIN, model_dir, "--seed", "3", says="seed: 0 there, 3 now")
    scores = tmp_path / "s.txt"
    fails("xml-predict", TEST, scores, model_dir, "-s", "5", "-t", "1", says="has no tree 5")
    fails("xml-predict", TEST, scores, tmp_path / "nothing", says="no such model folder")
    fails("xml-predict", TEST, scores, tmp_path, says="not an xmlkit model folder")
    assert not scores.exists()

    manifest = json.loads((model_dir / "manifest.json").read_text())
    manifest["format_version"] = 99
    (model_dir / "manifest.json").write_text(json.dumps(manifest))
    fails("xml-predict", TEST, scores, model_dir, says="model format version 99")

    wide = tmp_path / "wide.txt"
    wide.write_text("1 5000\n4999:1\n")
    train(TRAIN, tmp_path / "ok", "-t", "1")
    fails("xml-predict", wide, scores, tmp_path / "ok", says="trained on D = 1836")
    assert not scores.exists()


def test_api_rejects_bad_parameters(bibtex):
    X, Y, _, _ = bibtex
    for bad, says in ((dict(max_leaf=0),
                       r"max_leaf must be an integer in \[1, 2147483647\], got 0"),
                      (dict(log_loss_coeff=0), "log_loss_coeff must be a finite number > 0"),
                      (dict(solver="sgd"), "solver must be one of")):
        model = xmlkit.FastXML(**bad)          # stored unchanged, checked by fit
        with pytest.raises(ValueError, match=says):
            model.fit(X, Y)


def test_predict_command_does_not_import_scipy(tmp_path):
    """scipy.sparse costs ~0.15 s per xml-predict run; its path avoids it."""
    import subprocess
    import sys
    code = ("import sys, xmlkit.cli.predict, xmlkit.io; "
            "sys.exit(1 if any(m.startswith('scipy') for m in sys.modules) else 0)")
    # run outside the source tree: `python -c` imports from the current folder
    assert subprocess.run([sys.executable, "-c", code], cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("algorithm", ["fastxml", "pfastrexml"])
def test_train_command_does_not_import_scipy(tmp_path, algorithm):
    """Nor does xml-train's for the tree families (PfastreXML's tail
    classifiers and propensities included): a whole run, then the modules."""
    from conftest import run_without_scipy
    r = run_without_scipy("train", TRAIN, "m", "-t", "2", "--algorithm", algorithm, "-q",
                          cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m" / "manifest.json").exists()


def test_folders_before_the_solver_rules_keep_the_cpp_rules(tmp_path, bibtex):
    """A folder whose manifest has no tol, max_newton, max_newton_small or
    init was grown with the C++ tool's rules (tol 0.01, 10 Newton steps from
    zero at every node): loading (and training into it) keeps them."""
    X, Y, _, _ = bibtex
    folder = tmp_path / "m"
    xmlkit.FastXML(n_trees=1, tol=0.01, max_newton=3, init="warm").fit(
        X[:300], Y[:300]).save(folder)
    mf = folder / "manifest.json"
    m = as_format_3(folder)
    del m["params"]["init"]
    del m["params"]["max_newton_small"]
    del m["params"]["small_node"]
    mf.write_text(json.dumps(m))
    loaded = xmlkit.load_model(folder)
    assert (loaded.max_newton, loaded.init, loaded.max_newton_small, loaded.small_node) == (
        3, "zero", 10, 0)
    del m["params"]["max_newton"]
    del m["params"]["tol"]
    mf.write_text(json.dumps(m))
    loaded = xmlkit.load_model(folder)
    assert (loaded.tol, loaded.max_newton, loaded.max_newton_small, loaded.small_node,
            loaded.init) == (0.01, 10, 10, 0, "zero")


def test_tol_001_is_the_cpp_solver(bibtex):
    """tol=0.01 with max_newton_small=10 (10 Newton steps from zero at every
    node) grows the tree of the kernel's C++ rules; the default tolerance,
    the default cap on small nodes and the warm start grow others."""
    from xmlkit._ext.fastxml_partition import NdcgPartition
    from xmlkit._ext.fastxml_separator import NodeSeparator
    from xmlkit._ext.fastxml_tree import TreeGrower
    from xmlkit.models.fastxml import _as_training_csr
    X, Y = bibtex[0][:600], bibtex[1][:600]
    g = TreeGrower(_as_training_csr(X, "f", X.shape[1]), _as_training_csr(Y, "l", Y.shape[1]),
                   NdcgPartition(True), NodeSeparator(1.0, 1.0, "newglmnet"))
    cpp = g.grow(0, 0)
    tree = xmlkit.FastXML(n_trees=1, tol=0.01, max_newton_small=10).fit(X, Y).trees_[0]
    assert all(np.array_equal(cpp[k], tree[k]) for k in cpp)
    tree = xmlkit.FastXML(n_trees=1, tol=0.01, small_node=0).fit(X, Y).trees_[0]
    assert all(np.array_equal(cpp[k], tree[k]) for k in cpp)
    for other in ({}, {"tol": 0.01}, {"tol": 0.01, "max_newton_small": 10, "init": "warm"}):
        tree = xmlkit.FastXML(n_trees=1, **other).fit(X, Y).trees_[0]
        assert not np.array_equal(cpp["w_val"], tree["w_val"]), other


@pytest.mark.parametrize("flag, value, rule", [
    ("--tol", "-0.1", "a finite number >= 0 and < 1"),
    ("--tol", "1.0", "a finite number >= 0 and < 1"),
    ("--tol", "nan", "a finite number >= 0 and < 1"),
    ("--max-newton", "0", "an integer in [1, 2147483647]"),
    ("--max-newton", "-1", "an integer in [1, 2147483647]"),
    ("--max-newton", "2147483648", "an integer in [1, 2147483647]")])
def test_solver_options_out_of_range_are_refused(tmp_path, flag, value, rule):
    r = run_cli("xml-train", TRAIN, tmp_path / "m", "-t", "1", flag, value)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"xml-train: error: {flag} must be {rule}, got {value}"]


def test_one_thread_writes_each_tree_while_the_next_grows():
    """With one thread, after(t, tree) (the tree file's writer) runs on a
    second thread while tree t + 1 grows; (t, tree) comes back in order once
    its file is written, tree t + 2 starts only after tree t is written (two
    trees held at most), and a failed write stops training with its error."""
    import threading
    from xmlkit.models.fastxml import _grow_pipelined

    written, writers = [], set()

    class Grower:
        def __init__(self):
            self.started = []

        def grow(self, seed, t):
            self.started.append((t, set(written)))
            return {"t": t, "seed": seed}

    def after(t, tree):
        writers.add(threading.get_ident())
        written.append(t)

    g = Grower()
    out = list(_grow_pipelined(7, [3, 4, 5, 6], after, g))
    assert out == [(t, {"t": t, "seed": 7}) for t in (3, 4, 5, 6)]
    assert written == [3, 4, 5, 6] and threading.get_ident() not in writers
    assert all(set(range(3, t - 1)) <= seen for t, seen in g.started)

    def failing(t, tree):
        if t == 4:
            raise OSError("disk full")
    got = []
    with pytest.raises(OSError, match="disk full"):
        for t, _ in _grow_pipelined(0, [3, 4, 5, 6], failing, Grower()):
            got.append(t)
    assert got == [3]


def test_records_wait_but_an_interrupted_run_leaves_its_trees_recorded(tmp_path, bibtex,
                                                                         monkeypatch):
    """fit_folder records finished trees at most every RECORD_SECONDS: a run
    that stops (here a KeyboardInterrupt after the third tree) records the
    trees it finished before the interrupt reaches the caller; a run that
    ends records every tree."""
    from xmlkit import driver, store
    X, Y = bibtex[0], bibtex[1]
    monkeypatch.setattr(driver, "RECORD_SECONDS", 3600.0)
    done = []

    def progress(n):
        done.append(n)
        if sum(done) == 3:
            assert store.listed(store.read_manifest(tmp_path / "m"), "tree_") == []
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        driver.fit_folder(xmlkit.FastXML(n_trees=6, max_leaf=100), X, Y, tmp_path / "m",
                          progress=progress)
    assert store.listed(store.read_manifest(tmp_path / "m"), "tree_") == \
        [f"tree_{t:05d}" for t in range(3)]
    driver.fit_folder(xmlkit.FastXML(n_trees=6, max_leaf=100), X, Y, tmp_path / "m")
    assert len(store.listed(store.read_manifest(tmp_path / "m"), "tree_")) == 6


@pytest.mark.parametrize("algorithm", ["fastxml", "pfastrexml"])
def test_nodes_holding_every_feature_and_label(tmp_path, algorithm):
    """Dense data, few labels (Yeast-like): nodes whose points hold every
    feature and every label. Trained by the command under glibc's heap
    checks, which abort the process on a write past a block's end (an
    off-by-one in the kernel's scratch once did so on Yeast)."""
    import os
    from xmlkit.io import write_dataset
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.random((400, 9)).astype(np.float32))
    Y = sp.csr_matrix((rng.random((400, 14)) < 0.6).astype(np.float32))
    write_dataset(tmp_path / "dense.txt", X, Y)
    env = {**os.environ, "MALLOC_CHECK_": "3", "MALLOC_PERTURB_": "165"}
    r = run_cli("xml-train", tmp_path / "dense.txt", tmp_path / "m", "-t", "4", "-T", "2",
                "--algorithm", algorithm, "--quiet", env=env)
    assert r.returncode == 0, r.stderr
