"""Training and prediction on Dask (`pip install 'xmlkit[dask]'`): the same
bytes as a local run for every family and for prediction; a worker killed
while it grows a tree, a killed xml-train, a failing task, an unreachable
scheduler. Skipped without distributed."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import TEST, run_cli

distributed = pytest.importorskip("distributed")

import xmlkit                                   # noqa: E402
from xmlkit import cluster, store               # noqa: E402
from xmlkit.driver import fit_folder            # noqa: E402
from xmlkit.errors import XmlkitError           # noqa: E402
from xmlkit.io import write_dataset             # noqa: E402


@pytest.fixture(scope="module")
def small(tmp_path_factory, bibtex):
    """The first 1200 training points of the sample as a file."""
    X, Y = bibtex[0][:1200], bibtex[1][:1200]
    path = tmp_path_factory.mktemp("data") / "small.txt"
    write_dataset(path, X, Y)
    return path


def same_folders(a, b):
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b))
    for n in names:
        if not n.startswith("."):
            assert (a / n).read_bytes() == (b / n).read_bytes(), n


@pytest.mark.parametrize("algorithm,args", [
    ("fastxml", ["-t", "4"]), ("pfastrexml", ["-t", "3"]),
    ("ldsm", ["-t", "2", "--max-nodes", "200"]), ("parabel", ["-t", "2", "-m", "20"]),
    ("linear", ["--label-blocks", "4", "--epochs", "2"]),
    ("linear", ["--label-blocks", "3", "--epochs", "2", "--final-epochs", "1"])])
@pytest.mark.slow
def test_local_cluster_equals_local_run(tmp_path, small, algorithm, args):
    local, dask, shared = tmp_path / "local", tmp_path / "dask", tmp_path / "shared"
    r = run_cli("xml-train", small, local, "--algorithm", algorithm, *args, "-q")
    assert r.returncode == 0, r.stderr
    r = run_cli("xml-train", small, dask, "--algorithm", algorithm, *args, "--dask",
                "local:2", "-q")
    assert r.returncode == 0, r.stderr
    same_folders(local, dask)
    if algorithm != "linear":      # the workers read the file themselves
        r = run_cli("xml-train", small, shared, "--algorithm", algorithm, *args, "--dask",
                    "local:2", "--dask-data", "shared", "-q")
        assert r.returncode == 0, r.stderr
        same_folders(local, shared)
    # prediction in blocks of rows on the workers: the same score file
    s_local, s_dask = tmp_path / "local.txt", tmp_path / "dask.txt"
    extra = ["--decision", "threshold"] if algorithm == "linear" else ["-k", "5"]
    r = run_cli("xml-predict", TEST, s_local, local, *extra, "-q")
    assert r.returncode == 0, r.stderr
    r = run_cli("xml-predict", TEST, s_dask, local, *extra, "--dask", "local:2", "-q")
    assert r.returncode == 0, r.stderr
    assert s_local.read_bytes() == s_dask.read_bytes()


@pytest.mark.slow
def test_workers_map_a_loaded_folder_themselves(tmp_path, bibtex):
    """A model loaded from a folder the workers see (the same path and
    manifest) goes to them as that folder, which each maps (one copy per
    machine, the page cache's); a model fitted in memory, or whose folder
    the workers do not see as it is, goes as a copy; the scores are the same."""
    from xmlkit.csr import as_rows
    X, Y, Xt, _ = bibtex
    fitted = xmlkit.FastXML(n_trees=3).fit(X[:1000], Y[:1000])
    fitted.save(tmp_path / "m")
    loaded = xmlkit.load_model(tmp_path / "m")
    R = as_rows(Xt[:300])
    want = fitted.predict(R, k=5)
    with cluster.connect("local:2") as client:
        ex = cluster.DaskExecutor(client)
        assert isinstance(ex._shared_model(loaded), cluster.FolderModel)
        assert not isinstance(ex._shared_model(fitted), cluster.FolderModel)
        for model in (loaded, fitted):
            got = list(ex.predict_blocks(model, {"k": 5}, [R], R.shape[0]))
            assert np.array_equal(np.concatenate([g.indices for g in got]), want.indices)
            assert np.array_equal(np.concatenate([g.data for g in got]), want.data)
        # a folder the workers do not see, or whose manifest changed since
        # the model was loaded from it, is not what the model holds: a copy
        folder, trees, digest = loaded.source_
        loaded.source_ = (folder + "-elsewhere", trees, digest)
        assert not isinstance(ex._shared_model(loaded), cluster.FolderModel)
        loaded.source_ = (folder, trees, digest)
        m = store.read_manifest(tmp_path / "m")
        m["xmlkit_version"] = "changed"
        store.write_manifest(tmp_path / "m", m)
        assert not isinstance(ex._shared_model(loaded), cluster.FolderModel)


def test_split_pieces_cover_every_row(bibtex):
    from xmlkit.csr import as_rows
    R = as_rows(bibtex[2][:103], "x")
    blocks = list(cluster.split_pieces([R], 25))
    assert [b.shape[0] for b in blocks] == [25, 25, 25, 25, 3]
    joined = np.concatenate([b.to_scipy().toarray() for b in blocks])
    assert np.array_equal(joined, R.to_scipy().toarray())


@pytest.mark.slow
def test_addresses_and_unreachable_scheduler(tmp_path, small):
    for bad in ("local:0", "local:x", ""):
        with pytest.raises(XmlkitError):
            cluster.parse_address(bad)
    port = free_port()                      # nobody listens there
    start = time.monotonic()
    # (in-process with a short wait: the command's own wait, and its one
    # line and exit 2, are those of the silent peer's test below)
    with pytest.raises(XmlkitError, match="no Dask scheduler answered within 2 s"):
        with cluster.connect(f"tcp://127.0.0.1:{port}", timeout=2):
            pass
    assert time.monotonic() - start < 2 + 10
    r = run_cli("xml-predict", TEST, tmp_path / "s.txt", tmp_path / "m", "--dask", "local:x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    many = f"local:{cluster.usable_cores() + 1}"
    r = run_cli("xml-train", small, tmp_path / "m", "--dask", many)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"xml-train: error: --dask {many}: this machine has {cluster.usable_cores()} usable "
        f"cores; local:N starts N worker processes, so N may be at most "
        f"{cluster.usable_cores()}"], r.stderr


@pytest.mark.slow
def test_a_peer_that_accepts_but_never_answers_is_given_up(tmp_path, small):
    """Something listens at the address but never speaks Dask: given up
    after the promised CONNECT_TIMEOUT s (one line, exit 2), not hung."""
    import socket
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        start = time.monotonic()
        r = run_cli("xml-train", small, tmp_path / "m", "--dask", f"tcp://127.0.0.1:{port}",
                    timeout=cluster.CONNECT_TIMEOUT + 60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"no Dask scheduler answered within {cluster.CONNECT_TIMEOUT} s" in r.stderr
    assert time.monotonic() - start < cluster.CONNECT_TIMEOUT + 10
    assert not (tmp_path / "m").exists()


def test_a_failing_task_names_its_tree_and_claims_nothing(tmp_path, small, bibtex):
    """Workers that read a damaged file at the shared path: the task's error
    is one line naming the tree and the file; the folder records no tree."""
    bad = tmp_path / "bad.txt"
    bad.write_text("3 5 2\n0 1:1\n1 2:x\n0 3:1\n")
    X, Y = bibtex[0][:1200], bibtex[1][:1200]
    folder = tmp_path / "m"
    with cluster.connect("local:1") as client:
        executor = cluster.DaskExecutor(client, cluster.SharedData([bad], 0, 1))
        with pytest.raises(XmlkitError, match=r"tree 0: .*bad\.txt:3"):
            fit_folder(xmlkit.FastXML(n_trees=2), X, Y, folder, executor=executor)
    manifest = store.read_manifest(folder)
    assert store.listed(manifest, "tree_") == []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def scheduler(tmp_path):
    """A real `dask scheduler` and two `dask worker` processes (one worker
    process of one thread each, under a nanny) on 127.0.0.1."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path / "dask.log", "w")
    # (cwd: not the clone, whose unbuilt xmlkit/ would shadow the installed one
    # for `python -m`)
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                               "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=log, stderr=log, cwd=tmp_path)]
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.2)
    for _ in range(2):
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker",
                                       address, "--nworkers", "1", "--nthreads", "1",
                                       "--no-dashboard"], stdout=log, stderr=log,
                                      cwd=tmp_path))
    with distributed.Client(address, timeout="30s") as c:
        c.wait_for_workers(2, timeout=60)
    yield address, procs[1:]
    for p in procs[::-1]:
        p.terminate()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
    log.close()


def worker_processes(nanny):
    """The worker processes a `dask worker` command runs (its children)."""
    import psutil
    return psutil.Process(nanny.pid).children(recursive=True)


def trees_written(folder):
    """How many complete tree files MODEL_DIR holds (recorded in its
    manifest or not yet: a killed run's are checked and adopted by the
    next)."""
    return len(list(Path(folder).glob("tree_*.npz")))


def wait_for_tree(folder, train, timeout=120):
    deadline = time.monotonic() + timeout
    while not trees_written(folder):
        assert train.poll() is None, f"xml-train ended: {train.stderr.read()}"
        assert time.monotonic() < deadline, "no tree was written"
        time.sleep(0.05)


@pytest.mark.slow
def test_killed_worker_and_killed_client(tmp_path, scheduler):
    """SIGKILL of a worker while it grows a tree: the scheduler runs the tree
    again elsewhere and the model is the local one, byte for byte. SIGKILL of
    xml-train: the same command resumes from the trees in MODEL_DIR."""
    from conftest import TRAIN
    address, workers = scheduler
    args = ["--algorithm", "fastxml", "-t", "8", "-q"]
    local = tmp_path / "local"
    r = run_cli("xml-train", TRAIN, local, *args)
    assert r.returncode == 0, r.stderr

    killed = tmp_path / "killed_worker"
    train = subprocess.Popen([str(Path_bin("xml-train")), str(TRAIN), str(killed), *args,
                              "--dask", address], stderr=subprocess.PIPE, text=True)
    wait_for_tree(killed, train)
    victims = worker_processes(workers[0])
    assert victims
    for p in victims:
        p.send_signal(signal.SIGKILL)
    assert train.wait(300) == 0, train.stderr.read()
    same_folders(local, killed)

    resumed = tmp_path / "killed_client"
    train = subprocess.Popen([str(Path_bin("xml-train")), str(TRAIN), str(resumed), *args,
                              "--dask", address], stderr=subprocess.PIPE, text=True)
    wait_for_tree(resumed, train)
    train.send_signal(signal.SIGKILL)
    train.wait(60)
    assert 1 <= trees_written(resumed) < 8
    r = run_cli("xml-train", TRAIN, resumed, *args[:-1], "--dask", address)
    assert r.returncode == 0, r.stderr
    assert "of the trees are already in" in r.stderr
    same_folders(local, resumed)


def Path_bin(prog):
    from conftest import BIN
    return BIN / prog
