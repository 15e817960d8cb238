"""A tool you can leave running: damaged and crafted model folders, memory
failures, killed and concurrent runs, unusable outputs, streams, the exit
code contract (0 / 2 / 130 / 143; 1 only for a bug)."""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from xmlkit import store
from xmlkit.io import read_dataset, write_dataset
from xmlkit.models import REGISTRY, load_model

from conftest import (BIN, FAMILIES, ROOT, TEST, TRAIN, as_format_3, one_line_error,
                      run_cli)

# ---------------------------------------------------------------- 1-2: damaged models

@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("resign", [False, True], ids=["damaged", "crafted"])
def test_model_fuzzer(family, resign, tiny, tiny_others):
    """Every array of every file mutated (entries, length, dtype, removal; the
    file truncated or deleted): a damaged folder is refused or gives the same
    scores; a crafted one (records rewritten to match) never crashes. Every
    model-defining field of the manifest edited, and each file swapped for
    the same file of a model of another seed, parameters or data: refused,
    records rewritten or not."""
    args = [sys.executable, str(ROOT / "tests" / "model_fuzz.py"), str(tiny / family),
            str(tiny / "test.txt"), "0", "--others",
            ",".join(map(str, tiny_others[family]))] + (["--resign"] if resign else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]          # a signal would be negative
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) > 20
    allowed = {"refused", "same"} | ({"different"} if resign else set())
    bad = [row for row in rows if row["outcome"] not in allowed]
    assert not bad, bad[:5]
    foreign = [row for row in rows if row["file"] == "manifest.json"
               or row["mutation"].startswith("swapped")]
    assert len(foreign) > 20
    bad = [row for row in foreign if row["outcome"] not in ("refused", "same")]
    assert not bad, bad[:5]
    assert any(row["mutation"].startswith("swapped") for row in foreign)
    assert sum(row["outcome"] == "refused" for row in rows) > len(rows) // 2


@pytest.mark.slow
def test_inuse_fuzzer(tiny, tiny_others, tmp_path):
    """Model files changed while xml-predict uses them (copied over,
    truncated, random bytes in place, at a random moment of a batch or a
    stream; every family) for 20 s: each run answers (exit 0) or stops with
    one line (exit 2); never a signal, an internal error or a hang."""
    for family in FAMILIES:
        (tmp_path / family).symlink_to(tiny / family)
        (tmp_path / f"{family}_seed").symlink_to(tiny_others[family][0])
    (tmp_path / "test.txt").symlink_to(tiny / "test.txt")
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "inuse_fuzz.py"), str(tmp_path),
                        "1", "20"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    *failures, summary = r.stdout.splitlines()
    summary = json.loads(summary)
    assert not failures, failures[:5]
    assert summary["cases"] > 10 and summary.get("answered") and summary.get("refused"), summary


def test_deleted_tree_and_nan_weights_are_refused_by_the_cli(tiny, tmp_path):
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    (m / "tree_00001.npz").unlink()
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m)
    assert one_line_error(r) and "tree_00001.npz: missing" in r.stderr
    assert not (tmp_path / "s.txt").exists()
    shutil.rmtree(m)
    shutil.copytree(tiny / "linear", m)
    a = {k: np.array(v) for k, v in store.load_arrays(m, "linear").items()}
    a["w_val"][len(a["w_val"]) // 2] = np.nan
    store.save_arrays(m, "linear", a)
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m)
    assert one_line_error(r) and "damaged model file" in r.stderr
    store.record_files(m, ["linear"])                   # a crafted folder: still refused
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m)
    assert one_line_error(r) and "NaN" in r.stderr


def test_pointer_entry_changed_is_refused_not_a_crash(tiny, tmp_path):
    """w_ptr[len//2] = -5 in linear.npz, records rewritten: refused."""
    m = tmp_path / "m"
    shutil.copytree(tiny / "linear", m)
    a = {k: np.array(v) for k, v in store.load_arrays(m, "linear").items()}
    a["w_ptr"][len(a["w_ptr"]) // 2] = -5
    store.save_arrays(m, "linear", a)
    store.record_files(m, ["linear"])
    r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m)
    assert one_line_error(r) and "index pointers" in r.stderr


@pytest.mark.parametrize("family", ["fastxml", "pfastrexml"])
def test_tree_links_zeroed_in_use_are_refused_not_a_loop(family, tiny, tmp_path):
    """A mapped tree whose child links read zeros after its blocks were
    checked (a file cut mid-page under its mapping reads zeros past its end:
    links back to the root) is refused where the links are used, not
    routed round for ever (found by the in-use fuzzer: a hang)."""
    m = tmp_path / "m"
    shutil.copytree(tiny / family, m)
    code = ("import numpy as np, xmlkit\n"
            "from xmlkit.io import read_dataset\n"
            f"X, _ = read_dataset({str(tiny / 'test.txt')!r})\n"
            f"model = xmlkit.load_model({str(m)!r})\n"
            "model.predict(X, k=5)\n"                       # (every block checked)
            f"path = {str(m / 'tree_00000.npz')!r}\n"
            "child = np.asarray(model.trees_[0]['child']).tobytes()\n"
            "at = open(path, 'rb').read().find(child)\n"
            "with open(path, 'r+b') as f:\n"
            "    f.seek(at)\n"
            "    f.write(bytes(len(child)))\n"
            "try:\n"
            "    model.predict(X, k=5)\n"
            "    print('answered')\n"
            "except Exception as exc:\n"
            "    print(type(exc).__name__, exc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "changed" in r.stdout and "answered" not in r.stdout, r.stdout


def test_copied_tree_files_join_the_model_only_through_xml_train(tiny, tmp_path):
    """A tree file the manifest does not record is not used by xml-predict;
    xml-train over the whole range checks and records it (shard merging)."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli("xml-train", tiny / "train.txt", a, "-t", "1", "-q").returncode == 0
    assert run_cli("xml-train", tiny / "train.txt", b, "-s", "1", "-t", "1",
                   "-q").returncode == 0
    shutil.copy(b / "tree_00001.npz", a / "tree_00001.npz")
    assert xmlkit_trees(a) == [0]
    assert run_cli("xml-train", tiny / "train.txt", a, "-t", "2", "-q").returncode == 0
    assert xmlkit_trees(a) == [0, 1]
    same = tiny / "fastxml"
    assert (a / "tree_00001.npz").read_bytes() == (same / "tree_00001.npz").read_bytes()


def xmlkit_trees(folder):
    import xmlkit
    return sorted(xmlkit.load_model(folder).trees_)


def test_manifest_fields_of_the_wrong_type_are_refused(tiny, tmp_path):
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    manifest = json.loads((m / "manifest.json").read_text())
    for key, value in (("n_labels", "159"), ("n_features", -1), ("params", [1]),
                       ("files", {"../x.npz": {"size": 1, "sha256": "0"}})):
        (m / "manifest.json").write_text(json.dumps({**manifest, key: value}))
        r = run_cli("xml-predict", tiny / "test.txt", tmp_path / "s.txt", m)
        assert one_line_error(r), (key, r.stderr)


@pytest.mark.parametrize("family", ["fastxml", "ldsm", "pfastrexml"])
@pytest.mark.parametrize("key, value", [("n_features", 5000), ("n_labels", 2147483647)])
def test_edited_manifest_dimensions_are_refused(family, key, value, tiny, tmp_path):
    """A tree family's manifest is checked against each file's origin and,
    in a folder of an older format (no origin), against the dimensions each
    tree file holds."""
    m = tmp_path / "m"
    shutil.copytree(tiny / family, m)
    manifest = json.loads((m / "manifest.json").read_text())
    (m / "manifest.json").write_text(json.dumps({**manifest, key: value}))
    out = tmp_path / "s.txt"
    r = run_cli("xml-predict", tiny / "test.txt", out, m)
    assert one_line_error(r), r.stderr
    assert r.stderr.startswith(f"xml-predict: error: {m}/") and "damaged model file" in r.stderr
    assert "belongs to another model" in r.stderr, r.stderr
    assert not out.exists()
    as_format_3(m, lambda manifest: manifest.update({key: value}))
    r = run_cli("xml-predict", tiny / "test.txt", out, m)
    assert one_line_error(r), r.stderr
    if family != "pfastrexml":      # (its tail classifiers' arrays may be read first)
        assert r.stderr.startswith(f"xml-predict: error: {m}/tree_0000") and (
            "the tree was grown for 1836 features and 159 labels" in r.stderr), r.stderr
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_data_without_labels_or_features_is_refused_before_any_file(family, tmp_path):
    """A header of 0 labels (or 0 features): one line naming the data file,
    exit 2, no model folder left behind (so the corrected rerun runs); the
    estimator refuses the same data."""
    import scipy.sparse as sp
    import xmlkit
    for what, text in (("labels", "3 4 0\n 0:1 1:2\n 2:1\n 3:1\n"),
                       ("features", "3 0 5\n1 \n2 \n3 \n")):
        data, m = tmp_path / f"no_{what}.txt", tmp_path / f"m_{what}"
        data.write_text(text)
        r = run_cli("xml-train", data, m, *FAMILIES[family], "-q")
        assert one_line_error(r), r.stderr
        assert r.stderr.startswith(f"xml-train: error: {data}: the header says 0 {what}")
        assert not m.exists()
    from xmlkit.models import get_class
    with pytest.raises(xmlkit.XmlkitError, match="the labels have 0 columns"):
        get_class(family)().fit(sp.csr_matrix(np.ones((3, 4))), sp.csr_matrix((3, 0)))


BIG = "2147483648"      # 2^31: one more than a C int holds

#: (command and arguments with {d} = the tiny folder, the first line expected)
TOO_BIG = [
    ("xml-predict {d}/test.txt {d}/s.txt {d}/fastxml -k " + BIG,
     "'-k' / '--top-k': 2147483648 is not in the range 1<=x<=2147483647"),
    ("xml-predict {d}/test.txt {d}/s.txt {d}/pfastrexml -n " + BIG,
     "'-n' / '--rerank': 2147483648 is not in the range 1<=x<=2147483647"),
    ("xml-eval {d}/test.txt {d}/test.txt -k 1," + BIG,
     "-k takes comma-separated integers from 1 to 2147483647"),
    ("xml-prune {d}/train.txt {d}/p.txt --min-keep " + BIG,
     "'--min-keep': 2147483648 is not in the range 0<=x<=2147483647"),
    ("xml-train {d}/train.txt {d}/m -m " + BIG,
     "--max-leaf (-m) must be an integer in [1, 2147483647], got 2147483648"),
    ("xml-train {d}/train.txt {d}/m -l " + BIG,
     "--labels-per-leaf (-l) must be an integer in [1, 2147483647], got 2147483648"),
    ("xml-train {d}/train.txt {d}/m --algorithm ldsm --epochs " + BIG,
     "--epochs must be an integer in [1, 2147483647], got 2147483648"),
    ("xml-train {d}/train.txt {d}/m -t " + BIG,
     "--trees (-t) must be an integer in [1, 100000], got 2147483648"),
    ("xml-train {d}/train.txt {d}/m --algorithm ldsm -t 100001",
     "--trees (-t) must be an integer in [1, 100000], got 100001"),
]


@pytest.mark.parametrize("command, says", TOO_BIG, ids=[c.split()[0] + " " + c.split()[-2]
                                                        for c, _ in TOO_BIG])
@pytest.mark.slow
def test_integers_beyond_what_the_kernels_hold_are_refused(command, says, tiny):
    """Integers beyond a C int (and more trees than a model may ask for)
    are one line and exit 2, before any work: no OverflowError (exit 1),
    no memory allocated by the number."""
    r = run_cli(*command.format(d=tiny).split(), timeout=60)
    assert one_line_error(r), r.stderr
    assert says in r.stderr, r.stderr
    assert not (tiny / "m").exists() and not (tiny / "p.txt").exists()


# ---------------------------------------------------------------- 3: memory

def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


@pytest.mark.parametrize("family", ["fastxml", "ldsm", "pfastrexml"])
def test_out_of_memory_is_one_line_and_leaves_no_blocking_folder(family, tmp_path):
    data = tmp_path / "d.txt"
    data.write_text("1 2000000000 2\n0 5:1\n")
    m = tmp_path / "m"
    r = run_cli("xml-train", data, m, "-t", "1", "--algorithm", family, "-q",
                preexec_fn=_limit_memory)
    assert one_line_error(r) and "out of memory" in r.stderr and "2000000000" in r.stderr
    good = tmp_path / "ok.txt"
    good.write_text("2 20 2\n0 5:1\n1 3:1\n")
    r = run_cli("xml-train", good, m, "-t", "1", "--algorithm", "ldsm", "-q")
    assert r.returncode == 0, r.stderr


COMMANDS = ("xml-train", "xml-predict", "xml-prune", "xml-eval", "xml-info", "xml-calibrate",
            "xml-text")


def _limit_60m():
    resource.setrlimit(resource.RLIMIT_AS, (60 << 20, 60 << 20))


@pytest.mark.parametrize("command", COMMANDS)
def test_no_memory_to_start_a_command_is_one_line(command, tiny, tmp_path):
    """Every command under an address-space limit too small for numpy's
    start (whose BLAS would give up with exit 1) is one line, exit 2, from
    the launcher, before numpy is imported."""
    r = run_cli(command, tiny / "train.txt", tmp_path / "out", preexec_fn=_limit_60m)
    assert one_line_error(r) and "out of memory" in r.stderr and "MiB" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["train", "predict", "prune", "evaluate", "info",
                                     "calibrate", "text"])
def test_a_module_the_system_cannot_map_is_one_line(command, tmp_path):
    """A compiled module the system refuses to map as the command is
    imported (what a tight memory limit gives: an ImportError before any
    error handling) is out of memory, exit 2; a module missing stays a bug
    (exit 1, traceback)."""
    for error, code in (("failed to map segment from shared object", 2),
                        ("No module named 'nothing'", 1)):
        hook = ("import sys, importlib.abc\n"
                "class Refuse(importlib.abc.MetaPathFinder):\n"
                "    def find_spec(self, name, path=None, target=None):\n"
                "        if name.startswith('xmlkit.cli.') and name != 'xmlkit.cli.launch':\n"
                f"            raise ImportError({error!r})\n"
                "sys.meta_path.insert(0, Refuse())\n"
                f"from xmlkit.cli import launch; launch.{command}()")
        r = subprocess.run([sys.executable, "-c", hook], capture_output=True, text=True,
                           cwd=tmp_path)
        if code == 2:
            assert one_line_error(r) and "out of memory" in r.stderr, r.stderr
        else:
            assert r.returncode == 1 and "Traceback" in r.stderr, r.stderr


def test_a_mapping_or_thread_refused_memory_is_out_of_memory(tmp_path):
    """An OSError of ENOMEM (a mapping or a thread the system refused) is
    the out-of-memory line, exit 2, not the bare system message."""
    code = ("import errno, click\n"
            "from xmlkit.cli.common import run\n"
            "@click.command()\n"
            "@click.option('-T', '--threads', default=1)\n"
            "def cmd(threads):\n"
            "    raise OSError(errno.ENOMEM, 'Cannot allocate memory')\n"
            "run(cmd, 'xml-x')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path)
    assert one_line_error(r) and "out of memory" in r.stderr and "-T" in r.stderr, r.stderr


def test_a_kernel_refused_memory_ends_the_command_at_once(tmp_path):
    """Once a command has installed its line (file_check.exit_on_no_memory),
    an allocation a kernel is refused ends the process there: the line,
    exit 2, nothing printed as ignored and no work going on with a short
    container. Without it the kernel raises MemoryError (the library)."""
    code = ("import resource, numpy as np\n"
            "from xmlkit._ext.parabel_tree import label_centroids\n"
            "from xmlkit._ext.file_check import exit_on_no_memory\n"
            "{install}"
            "resource.setrlimit(resource.RLIMIT_AS, (1 << 33, 1 << 33))\n"
            "a = np.zeros(2, np.int64); i = np.zeros(1, np.int32); v = np.ones(1, np.float32)\n"
            "lp = np.array([0, 1], np.int64)\n"
            "try:\n"
            "    label_centroids(np.array([0, 1], np.int64), i, v, lp, i, 1 << 37, 0.0)\n"
            "except MemoryError:\n"
            "    print('MemoryError')\n")
    r = subprocess.run([sys.executable, "-c", code.format(install="")], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "MemoryError", r.stderr
    install = "exit_on_no_memory('xml-x: error: out of memory (hint)\\n')\n"
    r = subprocess.run([sys.executable, "-c", code.format(install=install)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr == "xml-x: error: out of memory (hint)\n"


#: (family, what, parameters): every kernel that allocates as it works, the
#: wide label trees' too (their own k-means and block solver)
OOM_CASES = [("fastxml", "fit", {}), ("fastxml", "predict", {}), ("fastxml", "explain", {}),
             ("pfastrexml", "fit", {}), ("ldsm", "fit", {}), ("ldsm", "predict", {}),
             ("parabel", "fit", {}), ("parabel", "fit", {"arity": 16, "balanced": False}),
             ("parabel", "predict", {}), ("parabel", "explain", {}),
             ("linear", "fit", {}), ("embed", "fit", {})]
#: address space allowed beyond what the child holds with its data read and the
#: library imported (tests/oom_child.py)
OOM_ALLOWANCES = (1 << 16, 1 << 18, 1 << 20, 3 << 20, 8 << 20, 24 << 20, 64 << 20)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="sizes the limit from /proc")
@pytest.mark.parametrize("family, what, params", OOM_CASES,
                         ids=[f"{f}-{w}{'-wide' if p else ''}" for f, w, p in OOM_CASES])
def test_memory_refused_in_a_kernel_is_a_memory_error(family, what, params, tiny):
    """The library alone (no command's handler installed), under address-space
    limits from a few pages to more than the work needs: each run raises
    MemoryError (or the library's "out of memory" error) or gives the
    result of the same work without a limit, byte for byte;
    never a signal (std::terminate's abort), an error printed as "ignored"
    while the work goes on with a short container, or another result."""
    def child(allowance):
        r = subprocess.run([sys.executable, str(ROOT / "tests" / "oom_child.py"),
                            str(tiny / family), str(tiny / "train.txt"), str(tiny / "test.txt"),
                            what, str(allowance), json.dumps(params)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "ignored" not in r.stderr, (allowance, r.stderr[-2000:])
        return r.stdout.strip()
    expected = child(1 << 40)
    assert expected.startswith("OK ")
    outcomes = {a: child(a) for a in OOM_ALLOWANCES}
    assert set(outcomes.values()) <= {"MemoryError", expected}, outcomes
    assert outcomes[OOM_ALLOWANCES[0]] == "MemoryError" or what != "fit", outcomes


def test_memory_refused_is_said_in_units_that_show_the_sizes(monkeypatch):
    """The out-of-memory message gives what the work needs and what the
    process can still get, each in GiB, or in MiB below 1 GiB (never
    "0.0 GiB")."""
    from xmlkit import _memory
    from xmlkit.errors import XmlkitError
    monkeypatch.setattr(_memory, "available_bytes", lambda: 96 << 20)
    with pytest.raises(XmlkitError, match=r"^out of memory: the work needs about 3\.5 GiB, "
                                          r"more than the 96 MiB this process can still get; "
                                          r"less fits$"):
        _memory.require_memory(7 << 29, "the work", "; less fits")
    monkeypatch.setattr(_memory, "available_bytes", lambda: 5 << 30)
    with pytest.raises(XmlkitError, match=r"about 6\.0 GiB, more than the 5\.0 GiB"):
        _memory.require_memory(6 << 30, "the work")


# ---------------------------------------------------------------- 4, 7: killed runs

def _children(pid):
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers in /proc")
@pytest.mark.parametrize("solver", ["newglmnet", "liblinear"])
def test_killing_the_parent_leaves_no_worker(solver, tmp_path):
    p = subprocess.Popen([str(BIN / "xml-train"), str(TRAIN), str(tmp_path / "m"), "-T", "2",
                          "-t", "200", "--solver", solver, "-q"])
    deadline = time.time() + 20
    kids = []
    while time.time() < deadline and not (tmp_path / "m" / "tree_00000.npz").exists():
        kids = _children(p.pid) or kids
        time.sleep(0.1)
    kids = _children(p.pid) or kids
    p.kill()
    p.wait()
    if solver == "newglmnet":
        assert kids == []           # trees grow in threads: no worker process to leave
        return
    assert len(kids) == 2           # -T 2 forked workers, seen while the parent lived
    deadline = time.time() + 10
    while time.time() < deadline and [k for k in kids if _alive(k)]:
        time.sleep(0.1)
    assert not [k for k in kids if _alive(k)]


@pytest.mark.parametrize("sig, code, said", [(signal.SIGTERM, 143, "terminated"),
                                              (signal.SIGINT, 130, "interrupted")])
@pytest.mark.slow
def test_signals_stop_at_once_and_a_rerun_resumes(sig, code, said, tmp_path):
    """SIGTERM is handled like Ctrl-C (SIGINT): one line, 143 / 130, and
    the next run resumes (and removes a temp file a worker was writing)."""
    m = tmp_path / "m"
    # a shell starts background jobs with SIGINT ignored, and a child keeps an
    # ignored SIGINT (as it should: Python then ignores Ctrl-C too): give the
    # command the default disposition whatever this test runs under
    p = subprocess.Popen([str(BIN / "xml-train"), str(TRAIN), str(m), "-T", "2", "-t", "200",
                          "-q"], stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    start = time.time()
    while time.time() < start + 20 and not (m / "tree_00001.npz").exists():
        time.sleep(0.05)
    running = p.poll() is None
    waited = time.time() - start
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    trees = len(list(m.glob("tree_*.npz")))
    assert running, f"training ended before the signal ({waited:.1f} s, {trees} trees)"
    assert p.returncode == code and err.strip() == f"xml-train: {said}", \
        (p.returncode, err, f"signal after {waited:.1f} s, {trees} trees at the end")
    r = run_cli("xml-train", TRAIN, m, "-t", "3", "-q")
    assert r.returncode == 0 and not list(m.glob(".*.tmp"))


def test_stale_temp_files_are_removed_by_the_next_run(tiny, tmp_path):
    m = tmp_path / "m"
    shutil.copytree(tiny / "fastxml", m)
    (m / ".tree_00005.npz.abc123.tmp").write_bytes(b"x" * 1000)
    r = run_cli("xml-train", tiny / "train.txt", m, "-t", "2", "-q")
    assert r.returncode == 0 and not list(m.glob(".*.tmp"))
    # and by save, which writes the folder under the same lock
    import xmlkit
    (m / ".tree_00001.npz.vm.1.abc123.tmp").write_bytes(b"x")
    xmlkit.load_model(m).save(m)
    assert not list(m.glob(".*.tmp"))


@pytest.mark.slow
def test_a_killed_predict_leaves_no_temp_file_behind_the_next_run(tiny, tmp_path):
    """xml-predict killed with -9 while writing: the next run to the same
    output removes its temporary file; files of live writers and of other
    hosts stay."""
    import socket
    from xmlkit.atomic import _temp_prefix
    out = tmp_path / "s.txt"
    big = tmp_path / "big.txt"
    Xt, Yt = read_dataset(tiny / "test.txt")
    import scipy.sparse as sp
    write_dataset(big, sp.vstack([Xt] * 2000).tocsr(), sp.vstack([Yt] * 2000).tocsr())
    p = subprocess.Popen([str(BIN / "xml-predict"), str(big), str(out), str(tiny / "fastxml"),
                          "-q"])
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob(".s.txt.*.tmp")):
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    [left] = list(tmp_path.glob(".s.txt.*.tmp"))
    assert left.name.startswith(_temp_prefix(out, p.pid)) and not out.exists()
    live = tmp_path / f"{_temp_prefix(out, os.getpid())}x.tmp"
    other = tmp_path / f".s.txt.not-{socket.gethostname()}.{p.pid}.x.tmp"
    live.write_text("x")
    other.write_text("x")
    r = run_cli("xml-predict", tiny / "test.txt", out, tiny / "fastxml", "-q")
    assert r.returncode == 0 and out.exists()
    assert sorted(tmp_path.glob(".s.txt.*.tmp")) == sorted([live, other])


# ---------------------------------------------------------------- 5: concurrent runs

def test_a_second_run_into_a_locked_folder_fails_at_once(tmp_path):
    m = tmp_path / "m"
    p = subprocess.Popen([str(BIN / "xml-train"), str(TRAIN), str(m), "-t", "200", "-q"])
    try:
        deadline = time.time() + 20
        while time.time() < deadline and not (m / "manifest.json").exists():
            time.sleep(0.05)
        start = time.time()
        r = run_cli("xml-train", TRAIN, m, "-s", "4", "-t", "5", "-l", "20")
        assert one_line_error(r) and f"pid {p.pid}" in r.stderr
        assert time.time() - start < 10
    finally:
        p.kill()
        p.wait()


# ---------------------------------------------------------------- 6-7: outputs

def test_unusable_outputs_fail_before_the_work_naming_the_users_path(tiny, tmp_path):
    model, test = tiny / "fastxml", tiny / "test.txt"
    r = run_cli("xml-predict", test, tmp_path / "no" / "s.txt", model)
    assert one_line_error(r) and str(tmp_path / "no" / "s.txt") in r.stderr
    os.mkfifo(tmp_path / "fifo")
    r = run_cli("xml-predict", test, tmp_path / "fifo", model)
    assert one_line_error(r) and "not a regular file" in r.stderr
    r = run_cli("xml-train", tiny / "train.txt", test / "m")
    assert one_line_error(r) and str(test) in r.stderr


def test_a_full_disk_names_the_users_file(tiny, tmp_path):
    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    out = tmp_path / "s.txt"
    r = run_cli("xml-predict", tiny / "test.txt", out, tiny / "fastxml", preexec_fn=small_files)
    assert one_line_error(r) and f"{out}: cannot write" in r.stderr
    assert not list(tmp_path.glob(".*"))
    r = run_cli("xml-train", tiny / "train.txt", tmp_path / "m", "-q", preexec_fn=small_files)
    assert one_line_error(r) and str(tmp_path / "m") in r.stderr and ".tmp" not in r.stderr


@pytest.mark.slow
def test_symlink_output_and_streams(tiny, tmp_path):
    model, test = tiny / "fastxml", tiny / "test.txt"
    ref = tmp_path / "ref.txt"
    assert run_cli("xml-predict", test, ref, model, "-q").returncode == 0
    (tmp_path / "link.txt").symlink_to("target.txt")
    assert run_cli("xml-predict", test, tmp_path / "link.txt", model, "-q").returncode == 0
    assert (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "target.txt").read_bytes() == ref.read_bytes()
    r = subprocess.run([str(BIN / "xml-predict"), "-", "-", str(model), "-q"],
                       input=test.read_bytes(), capture_output=True)
    assert r.returncode == 0 and r.stdout == ref.read_bytes()
    r = subprocess.run([str(BIN / "xml-eval"), "-", str(test), "--json"], input=r.stdout,
                       capture_output=True)
    assert r.returncode == 0 and json.loads(r.stdout)["metrics"]["P@1"] > 0
    pruned = tmp_path / "pruned.txt"
    assert run_cli("xml-prune", test, pruned).returncode == 0
    r = subprocess.run([str(BIN / "xml-prune"), "-", "-"], input=test.read_bytes(),
                       capture_output=True)
    assert r.returncode == 0 and r.stdout == pruned.read_bytes() and b"nnz" in r.stderr


def _row_by_row(model, header, rows):
    """`xml-predict - - model -k 3` fed `header`, then each data-set row's
    features, each line's answer read before the next is written: (the
    process, its stdin still open; the lines read)."""
    p = subprocess.Popen([str(BIN / "xml-predict"), "-", "-", str(model), "-k", "3", "-q"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdin.write(header + "\n")
    p.stdin.flush()
    got = [p.stdout.readline().rstrip("\n")]
    for line in rows:
        p.stdin.write(line.partition(" ")[2] + "\n")         # (the features alone)
        p.stdin.flush()
        got.append(p.stdout.readline().rstrip("\n"))
    return p, got


@pytest.mark.slow
@pytest.mark.parametrize("family", ["fastxml", "pfastrexml", "linear"])
def test_a_stream_is_answered_row_by_row(family, tiny):
    """`producer | xml-predict - - MODEL`: each row's scores come out (flushed)
    once its line has arrived, before the next is written; the same lines as
    the whole file scored at once, a header first as in any score file."""
    model, test = tiny / family, tiny / "test.txt"
    whole = run_cli("xml-predict", test, "-", model, "-k", "3", "-q").stdout.splitlines()
    lines = test.read_text().splitlines()
    n, d, _ = lines[0].split()
    p, got = _row_by_row(model, f"{n} {d}", lines[1:])
    p.stdin.close()
    assert p.stdout.read() == "" and p.wait() == 0
    assert got == whole


@pytest.mark.parametrize("family", ["fastxml", "parabel", "embed"])
def test_a_streams_rows_before_a_bad_one_are_answered(family, tiny):
    """A stream whose bad line arrives in the same read as the rows before it
    (one write): every one of those rows is answered and flushed, as the
    whole file of those rows would be, then exit 2 with the bad line's
    number, one line."""
    model, test = tiny / family, tiny / "test.txt"
    lines = test.read_text().splitlines()
    n, d, _ = lines[0].split()
    rows = [line.partition(" ")[2] for line in lines[1:31]]
    head = subprocess.run([str(BIN / "xml-predict"), "-", "-", str(model), "-k", "3", "-q"],
                          input=f"30 {d}\n" + "\n".join(rows) + "\n", capture_output=True,
                          text=True)
    assert head.returncode == 0, head.stderr
    p = subprocess.Popen([str(BIN / "xml-predict"), "-", "-", str(model), "-k", "3", "-q"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(f"{n} {d}\n" + "\n".join(rows) + "\n1:x\n")
    assert p.returncode == 2 and err.count("\n") == 1 and ":32:" in err, err
    assert out.splitlines()[1:] == head.stdout.splitlines()[1:]


@pytest.mark.parametrize("family", ["fastxml", "parabel"])
def test_a_stream_of_unknown_length_is_answered(family, tiny, tmp_path):
    """A stream whose producer does not count its rows ahead says N is '?':
    each row is answered as it arrives, the scores' header says '?' too,
    the stream ends where its input ends (exit 0), and the scores read back
    (xml-eval) as the whole file's."""
    model, test = tiny / family, tiny / "test.txt"
    whole = run_cli("xml-predict", test, "-", model, "-k", "3", "-q").stdout.splitlines()
    lines = test.read_text().splitlines()
    p, got = _row_by_row(model, f"? {lines[0].split()[1]}", lines[1:6])
    p.stdin.write("".join(line.partition(" ")[2] + "\n" for line in lines[6:]))
    p.stdin.close()
    got += p.stdout.read().splitlines()
    assert p.wait() == 0
    assert got[0] == "? " + whole[0].split()[1] and got[1:] == whole[1:]
    scores = tmp_path / "s.txt"
    scores.write_text("\n".join(got) + "\n")
    (tmp_path / "w.txt").write_text("\n".join(whole) + "\n")
    a, b = (run_cli("xml-eval", f, test, "--json", "-q") for f in (scores, tmp_path / "w.txt"))
    assert a.returncode == 0 and a.stdout == b.stdout


@pytest.mark.parametrize("family", ["fastxml", "pfastrexml", "parabel", "parabel-deep", "ldsm",
                                    "embed", "linear"])
def test_a_model_file_cut_short_in_use_is_exit_2(family, tiny, tmp_path):
    """A stream answering with a model whose files are truncated under their
    mapping (a redeploy gone wrong): no signal. The families whose trees
    stay mapped (BOUNDED_AT_USE) stop at the next row, exit 2 and one line
    naming the folder; the others hold copies of their arrays, verified
    when loaded, and answer every row. Parabel's kernel copies a tree of at
    most 64 leaves (laid out whole) and reads larger ones where they lie
    (parabel-deep: -m 2, 128 leaves a tree)."""
    model = tmp_path / family
    if family == "parabel-deep":
        r = run_cli("xml-train", tiny / "train.txt", model, *FAMILIES["parabel"], "-m", "2",
                    "-q")
        assert r.returncode == 0, r.stderr
        assert not any(load_model(model)._kernel().whole_trees())
        family = "parabel"
    else:
        shutil.copytree(tiny / family, model)
    copied = not REGISTRY[family].BOUNDED_AT_USE or (
        family == "parabel" and all(load_model(model)._kernel().whole_trees()))
    lines = (tiny / "test.txt").read_text().splitlines()
    d = lines[0].split()[1]
    p = subprocess.Popen([str(BIN / "xml-predict"), "-", "-", str(model), "-k", "3", "-q"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdin.write(f"? {d}\n{lines[1].partition(' ')[2]}\n")
    p.stdin.flush()
    assert p.stdout.readline().startswith("? ") and p.stdout.readline()
    for f in model.glob("*.npz"):
        os.truncate(f, 4096)
    try:
        _, err = p.communicate("".join(line.partition(" ")[2] + "\n" for line in lines[2:]),
                               timeout=60)
    except BrokenPipeError:            # (it stopped before reading them all)
        err = p.stderr.read()
    p.wait()
    if copied:
        assert p.returncode == 0 and err == "", err
        return
    assert p.returncode == 2, (p.returncode, err)
    assert err.count("\n") == 1 and str(model) in err and "cut short while in use" in err, err


@pytest.mark.slow
def test_a_text_stream_is_answered_document_by_document(tmp_path):
    """`... | xml-predict --text - - MODEL --names`: each document's names come
    out once its line has arrived; the same as the whole file at once."""
    pytest.importorskip("sklearn")
    docs = ['{"id": %d, "text": "%s", "labels": ["%s"]}' % (i, t, t.split()[0])
            for i, t in enumerate(["red apples and pears", "green pears", "red cherries",
                                   "green apples", "red wine and cherries",
                                   "pears and apples"] * 5)]
    (tmp_path / "docs.jsonl").write_text("\n".join(docs) + "\n")
    model = tmp_path / "m"
    assert run_cli("xml-train", "--text", tmp_path / "docs.jsonl", model, "-t", "2",
                   "--min-df", "1", "-q").returncode == 0
    whole = run_cli("xml-predict", "--text", tmp_path / "docs.jsonl", "-", model, "--names",
                    "-q").stdout.splitlines()
    p = subprocess.Popen([str(BIN / "xml-predict"), "--text", "-", "-", str(model), "--names",
                          "-q"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    got = []
    for doc in docs:
        p.stdin.write(doc + "\n")
        p.stdin.flush()
        got.append(p.stdout.readline().rstrip("\n"))
    p.stdin.close()
    assert p.wait() == 0 and got == whole


def test_commands_give_the_blas_one_thread(tmp_path):
    """xml-train and xml-predict give the BLAS one thread (none predicts with
    it; embed's training then makes the same bytes on any number of cores),
    whatever the arguments, unless the user set its threads."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    for command in ("train", "predict"):
        code = (f"import os, sys; from xmlkit.cli import launch; import xmlkit.cli.{command} "
                "as c; c.main = lambda: print(os.environ.get('OPENBLAS_NUM_THREADS')); "
                f"launch.{command}()")
        for args, extra, want in (([], {}, "1"), (["--algorithm", "embed", "a", "m"], {}, "1"),
                                  ([], {"OPENBLAS_NUM_THREADS": "3"}, "3"),
                                  ([], {"OMP_NUM_THREADS": "2"}, "None")):
            out = subprocess.run([sys.executable, "-c", code, *args], env={**env, **extra},
                                 text=True, capture_output=True, check=True,
                                 cwd=tmp_path).stdout.strip()
            assert out == want, (command, args, extra)


def _damaged_copies(folder, tmp_path):
    """(what, copy of `folder` with it done to a tree file) for each damage
    of the mapped layout the fuzzer also makes (tests/model_fuzz.py)."""
    from model_fuzz import byte_damage, damaged_bytes
    path = folder / "tree_00001.npz"
    rng = np.random.default_rng(3)
    for i, what in enumerate(byte_damage(path)):
        copy = tmp_path / f"{i}_{what.replace(' ', '_')}"
        shutil.copytree(folder, copy)
        if what == "file deleted":
            (copy / path.name).unlink()
        else:
            (copy / path.name).write_bytes(damaged_bytes(path.read_bytes(), what, rng))
        yield what, copy
    arrays = {k: np.array(v) for k, v in store.load_arrays(folder, "tree_00001").items()}
    arrays["w_idx"], arrays["l_idx"] = arrays["l_idx"], arrays["w_idx"]
    copy = tmp_path / "swapped"
    shutil.copytree(folder, copy)
    store.save_arrays(copy, "tree_00001", arrays)
    yield "arrays swapped", copy


@pytest.mark.slow
def test_damaged_mapped_files_are_refused_by_the_cli(tiny, tmp_path):
    """A tree file cut, grown, edited (data, headers, block table,
    directory), deleted or with two arrays swapped: xml-predict exits 2 with
    one line naming the file, writes no score file, and writes nothing to
    standard output; never a signal."""
    for what, copy in _damaged_copies(tiny / "fastxml", tmp_path):
        out = tmp_path / "s.txt"
        r = run_cli("xml-predict", tiny / "test.txt", out, copy)
        assert one_line_error(r) and "tree_00001.npz" in r.stderr, (what, r.stderr)
        assert not out.exists(), what
        r = run_cli("xml-predict", tiny / "test.txt", "-", copy)
        assert one_line_error(r) and r.stdout == "", (what, r.stdout[:100])


@pytest.mark.parametrize("family", ["fastxml", "parabel"])
def test_a_stream_writes_nothing_before_its_trees_are_checked(family, tiny, tmp_path):
    """A stream (rows on standard input, of known or unknown count) into a
    folder whose last tree file was cut: nothing on standard output, not
    even the header, one line naming the file, exit 2."""
    m = tmp_path / "m"
    shutil.copytree(tiny / family, m)
    last = sorted(m.glob("tree_*.npz"))[-1]
    last.write_bytes(last.read_bytes()[:-100])
    lines = (tiny / "test.txt").read_text().splitlines()
    n, d, _ = lines[0].split()
    for header in (f"{n} {d}", f"? {d}"):
        r = run_cli("xml-predict", "-", "-", m, "-q",
                    input="\n".join([header] + lines[1:]) + "\n")
        assert one_line_error(r) and last.name in r.stderr, (header, r.stderr)
        assert r.stdout == "", (header, r.stdout[:100])


# ---------------------------------------------------------------- 8-9: options, headers

def test_eval_checks_the_propensity_model(tiny, tmp_path):
    scores = tmp_path / "s.txt"
    assert run_cli("xml-predict", tiny / "test.txt", scores, tiny / "fastxml").returncode == 0
    for args in (["-B", "-5"], ["-A", "nan"], ["-A", "0"]):
        r = run_cli("xml-eval", scores, tiny / "test.txt", "--train-labels",
                    tiny / "train.txt", *args)
        assert one_line_error(r) and "Warning" not in r.stderr, args


@pytest.mark.parametrize("header", ["+2 3 2", "2_0 3 2", "\uff12 3 2", "2\u00a03 2",
                                    "99999999999999999999 3 2", "2 3 2 1", "-2 3 2"])
def test_headers_are_ascii_integers(header, tiny, tmp_path):
    f = tmp_path / "h.txt"
    f.write_text(f"{header}\n0 1:1\n1 2:1\n", encoding="utf-8")
    r = run_cli("xml-predict", f, tmp_path / "s.txt", tiny / "fastxml")
    assert one_line_error(r) and f"{f}:1: malformed header" in r.stderr


def test_blank_lines_after_the_rows_are_accepted(tiny, tmp_path):
    f = tmp_path / "h.txt"
    f.write_text("2 1836 2\n0 1:1\n1 2:1\n\n  \n")
    assert run_cli("xml-predict", f, tmp_path / "s.txt", tiny / "fastxml").returncode == 0
    f.write_text("2 1836 2\n0 1:1\n1 2:1\n\n1 2:1\n")
    r = run_cli("xml-predict", f, tmp_path / "s.txt", tiny / "fastxml")
    assert one_line_error(r) and f"{f}:5: more rows" in r.stderr


# ---------------------------------------------------------------- 10: streaming

def test_prediction_in_pieces_equals_one_piece(tiny, tmp_path):
    """What xml-predict does: rows read, scored and written in pieces (here
    of 7 rows) give the same file as the whole set at once; the CLI's file
    equals both."""
    import xmlkit
    from xmlkit.io import iter_xc, matrix_writer, write_matrix
    X, _ = read_dataset(tiny / "test.txt")
    for family in ("fastxml", "pfastrexml", "ldsm", "linear"):
        model = xmlkit.load_model(tiny / family)
        whole = tmp_path / f"{family}_whole.txt"
        write_matrix(whole, model.predict(X, k=5))
        header, pieces = iter_xc(tiny / "test.txt", 7)
        out = tmp_path / f"{family}_pieces.txt"
        sizes = []
        with matrix_writer(out, header[0], model.n_labels_) as write:
            for piece in pieces:
                sizes.append(piece.feature_rows.shape[0])
                write(model.predict(piece.feature_rows, k=5))
        assert sizes[:-1] == [7] * (len(sizes) - 1) and sum(sizes) == 50
        assert out.read_bytes() == whole.read_bytes(), family
        cli = tmp_path / f"{family}_cli.txt"
        assert run_cli("xml-predict", tiny / "test.txt", cli, tiny / family, "-k", "5",
                       "-q").returncode == 0
        assert cli.read_bytes() == whole.read_bytes(), family


def test_a_bad_row_in_a_later_piece_leaves_no_output(tiny, tmp_path):
    text = (tiny / "test.txt").read_text().splitlines()
    text[40] = "0 1:x"
    bad = tmp_path / "bad.txt"
    bad.write_text("\n".join(text) + "\n")
    out = tmp_path / "s.txt"
    r = run_cli("xml-predict", bad, out, tiny / "fastxml")
    assert one_line_error(r) and f"{bad}:41:" in r.stderr and not out.exists()
    assert not list(tmp_path.glob(".*"))


# ---------------------------------------------------------------- the exit-code contract

def test_a_bug_exits_1_with_one_line_and_a_traceback_on_request(tiny, tmp_path):
    code = ("import sys; from xmlkit.cli import predict\n"
            "def broken(*a, **k): raise ZeroDivisionError('a bug')\n"
            "predict.load_model = broken\n"
            f"sys.argv = ['xml-predict', {str(tiny / 'test.txt')!r}, "
            f"{str(tmp_path / 's.txt')!r}, {str(tiny / 'fastxml')!r}]\n"
            "predict.main()\n")
    # (run outside the source tree, which `python -c` would import from)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "internal error: ZeroDivisionError: a bug" in r.stderr and "XMLKIT_DEBUG" in r.stderr
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "XMLKIT_DEBUG": "1"}, cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" in r.stderr and "a bug" in r.stderr


def test_damaged_cpp_folders_are_refused(tmp_path):
    """A C++ FastXML folder with a negative node count, children outside the
    tree or a negative dimension: one line, exit 2 (was an internal error)."""
    fixture = ROOT / "tests" / "fixtures" / "cpp_tiny"
    test = fixture / "test_X.txt"
    for target, line, text in (("0.tree", 0, "-3"), ("0.tree", 2, "70 90"), ("param", 0, "-5")):
        m = tmp_path / f"m_{target}_{line}"
        shutil.copytree(fixture / "fastxml", m)
        lines = (m / target).read_text().split("\n")
        if target == "0.tree" and line == 2:
            # the first internal node's children line (node headers are 5 lines)
            line = next(1 + 5 * i + 1 for i in range(int(lines[0]))
                        if lines[1 + 5 * i].strip() == "0")
        lines[line] = text
        (m / target).write_text("\n".join(lines))
        r = run_cli("xml-predict", test, tmp_path / "s.txt", m)
        assert one_line_error(r), (target, text, r.stderr)


def test_a_version_1_folder_loads_but_is_not_trained_into(tiny, tmp_path):
    """A folder written before file records (format 1) still loads, all its
    trees; xml-train refuses to add to it (exit 2, nothing changed): its
    trees carry no origin to check new ones against."""
    import xmlkit
    m = tmp_path / "m"
    assert run_cli("xml-train", tiny / "train.txt", m, "-t", "4", "-q").returncode == 0
    manifest = as_format_3(m)                  # (files without origins, no data digest)
    del manifest["files"]
    manifest["format_version"] = 1
    (m / "manifest.json").write_text(json.dumps(manifest))
    assert sorted(xmlkit.load_model(m).trees_) == [0, 1, 2, 3]
    before = (m / "manifest.json").read_bytes()
    r = run_cli("xml-train", tiny / "train.txt", m, "-t", "6", "-q")
    assert r.returncode == 2 and "format version 1" in r.stderr, r.stderr
    assert (m / "manifest.json").read_bytes() == before
    assert not (m / "tree_00004.npz").exists()


def test_dask_without_distributed_says_how_to_install(tmp_path):
    """Without the [dask] extra (here: an import of distributed that fails),
    --dask is one line naming the extra, exit 2; nothing is written."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "distributed.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    r = run_cli("xml-train", TRAIN, tmp_path / "m", "--dask", "local:2", env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "pip install 'xmlkit[dask]'" in r.stderr
    assert not (tmp_path / "m" / "manifest.json").exists()
    r = run_cli("xml-predict", TEST, tmp_path / "s.txt", tmp_path / "m", "--dask", "local:2",
                env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "pip install 'xmlkit[dask]'" in r.stderr


# ------------------------------------------------- unfinished folders

def _recorded_trees(folder):
    try:
        files = json.loads((folder / "manifest.json").read_text()).get("files", {})
    except (OSError, ValueError):
        return []
    return sorted(int(n[5:10]) for n in files if n.startswith("tree_"))


@pytest.mark.parametrize("family", ["fastxml", "parabel"])
def test_a_killed_training_leaves_a_folder_that_says_so(family, tiny, tmp_path):
    """xml-train killed after some of its trees: xml-predict refuses the
    folder (exit 2, one line, how many trees of how many, how to finish),
    xml-info describes it as unfinished, -s/-t picks the trees there, and
    the same xml-train finishes it."""
    m = tmp_path / "m"
    n = {"fastxml": 40, "parabel": 16}[family]       # (a few seconds of trees)
    args = ["--algorithm", family, "-t", str(n), "-T", "1", "-q"]
    train = subprocess.Popen([str(BIN / "xml-train"), str(TRAIN), str(m), *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(_recorded_trees(m)) < 2:
        assert train.poll() is None, train.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    train.kill()
    train.wait()
    have = _recorded_trees(m)
    assert 2 <= len(have) < n
    out = tmp_path / "s.txt"
    r = run_cli("xml-predict", tiny / "test.txt", out, m, "-q")
    assert one_line_error(r) and not out.exists(), r.stderr
    assert f"training stopped at {len(have)} of {n} trees" in r.stderr
    assert "run the same xml-train" in r.stderr
    r = run_cli("xml-info", m)
    assert r.returncode == 0 and "UNFINISHED:" in r.stdout and f"of {n} trees" in r.stdout
    r = run_cli("xml-info", m, "--json")
    assert json.loads(r.stdout)["trees"] == len(have)
    r = run_cli("xml-predict", tiny / "test.txt", out, m, "-s", "0", "-t", "2", "-q")
    assert r.returncode == 0, r.stderr
    r = run_cli("xml-train", TRAIN, m, *args)
    assert r.returncode == 0, r.stderr
    r = run_cli("xml-predict", tiny / "test.txt", out, m, "-q")
    assert r.returncode == 0, r.stderr
    assert "UNFINISHED" not in run_cli("xml-info", m).stdout


def test_a_calibration_asked_for_and_not_made_is_not_skipped(tiny, tmp_path):
    """A folder whose xml-train --calibrate stopped after the model and
    before its calibration (the manifest's plan says one follows): xml-predict
    refuses to write raw scores for probabilities (exit 2) unless --raw asks
    for them; xml-info says it; the same xml-train --calibrate finishes it."""
    m = tmp_path / "m"
    shutil.copytree(tiny / "embed", m)
    manifest = store.read_manifest(m)
    store.write_manifest(m, store.set_plan(manifest, (), calibration=True))
    out = tmp_path / "s.txt"
    r = run_cli("xml-predict", tiny / "test.txt", out, m, "-q")
    assert one_line_error(r) and "before the calibration it asked for" in r.stderr
    assert "--raw" in r.stderr and not out.exists()
    assert run_cli("xml-predict", tiny / "test.txt", out, m, "--raw", "-q").returncode == 0
    assert "UNFINISHED:" in run_cli("xml-info", m).stdout
    r = run_cli("xml-train", tiny / "train.txt", m, *FAMILIES["embed"], "--calibrate", "-q")
    assert r.returncode == 0, r.stderr
    r = run_cli("xml-predict", tiny / "test.txt", out, m, "-q")
    assert r.returncode == 0, r.stderr
    assert "UNFINISHED" not in run_cli("xml-info", m).stdout



@pytest.mark.parametrize("message,code", [
    ("libx.so: failed to map segment from shared object", 2),
    ("libx.so: cannot allocate memory", 2),
    ("No module named 'nowhere'", 1)])
def test_an_import_failing_for_memory_is_exit_2(message, code, tmp_path):
    """An ImportError of the system refusing the memory to map a module
    is out of memory (exit 2); a module missing stays an internal error
    (exit 1): both one line, never a traceback."""
    code_text = ("import sys, click; from xmlkit.cli import common\n"
                 "@click.command()\n"
                 "def broken():\n"
                 f"    raise ImportError({message!r})\n"
                 "sys.argv = ['xml-x']; common.run(broken, 'xml-x')\n")
    env = {k: v for k, v in os.environ.items() if k != "XMLKIT_DEBUG"}
    r = subprocess.run([sys.executable, "-c", code_text], capture_output=True, text=True,
                       cwd=tmp_path, env=env)
    assert r.returncode == code and r.stderr.count("\n") == 1, r.stderr
    assert ("out of memory" in r.stderr) == (code == 2), r.stderr
