import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data_samples"
SHARED = Path(os.environ.get("XMLKIT_SHARED", ROOT.parent / "shared"))
BIN = Path(sys.executable).parent
TRAIN = SAMPLES / "bibtex_train.txt.xz"
TEST = SAMPLES / "bibtex_test.txt.xz"


@pytest.fixture(scope="session")
def bibtex():
    """The sample Bibtex split: (X, Y, Xt, Yt) as scipy csr."""
    from xmlkit.io import read_dataset
    X, Y = read_dataset(TRAIN)
    Xt, Yt = read_dataset(TEST)
    return X, Y, Xt, Yt


@pytest.fixture
def shared():
    """The project's shared data folder (../shared); tests using it skip without it."""
    if not (SHARED / "fixtures").is_dir():
        pytest.skip(f"shared data not found at {SHARED}")
    return SHARED


FAMILIES = {
    "fastxml": ["-t", "2"],
    "pfastrexml": ["--algorithm", "pfastrexml", "-t", "2"],
    "ldsm": ["--algorithm", "ldsm", "-t", "2", "--max-nodes", "40", "--epochs", "2"],
    "parabel": ["--algorithm", "parabel", "-t", "2", "-m", "20"],
    "embed": ["--algorithm", "embed"],
    "linear": ["--algorithm", "linear", "--epochs", "1"],
}


def made_once(tmp_path_factory, name, make):
    """A folder `name` filled by make(folder) once per test run: with
    pytest-xdist, the first worker to ask makes it (under a lock) and the
    others use it; `make` must leave the same files whoever runs it."""
    import time
    from xmlkit import _lock
    base = tmp_path_factory.getbasetemp()
    # (an xdist worker's base is <run>/popen-gwN; a pytest that a test starts
    # inherits PYTEST_XDIST_WORKER but not that base, and shares nothing)
    if "PYTEST_XDIST_WORKER" not in os.environ or not base.name.startswith("popen-"):
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    folder = base.parent / name
    fd = os.open(f"{folder}.lock", os.O_RDWR | os.O_CREAT)
    try:
        while not _lock.try_lock(fd):
            time.sleep(0.1)
        if not (folder / ".made").exists():
            folder.mkdir(exist_ok=True)
            make(folder)
            (folder / ".made").touch()
        _lock.unlock(fd)
    finally:
        os.close(fd)
    return folder


def _make_tiny(root):
    from xmlkit.io import read_dataset, write_dataset
    X, Y = read_dataset(TRAIN)
    write_dataset(root / "train.txt", X[:300], Y[:300])
    Xt, Yt = read_dataset(TEST)
    write_dataset(root / "test.txt", Xt[:50], Yt[:50])
    for family, args in FAMILIES.items():
        r = run_cli("xml-train", root / "train.txt", root / family, *args, "-q")
        assert r.returncode == 0, r.stderr


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """300 training and 50 test points of the sample Bibtex split, and a
    model of each family trained on them (made once per run)."""
    return made_once(tmp_path_factory, "tiny", _make_tiny)


def one_line_error(r, code=2):
    lines = r.stderr.strip().splitlines()
    return r.returncode == code and len(lines) == 1 and "internal error" not in lines[0]


#: per family, options that make another model (for tiny_others)
OTHER_PARAMS = {"fastxml": ["-l", "50", "-m", "20"], "pfastrexml": ["-g", "10"],
                "ldsm": ["--lambda1", "2"], "embed": ["--ridge", "0.1"],
                "parabel": ["--weight-threshold", "0.05"],
                "linear": ["--l2", "1e-4"]}


@pytest.fixture(scope="session")
def tiny_others(tiny, tmp_path_factory):
    """Per family, folders of models that are not tiny's: another seed,
    other parameters, other training data of the same D and L (tiny's
    points in reverse order); made once per run."""
    cases = (("seed", ["--seed", "9"]), ("params", None), ("data", []))

    def make(root):
        from xmlkit.io import read_dataset, write_dataset
        X, Y = read_dataset(tiny / "train.txt")
        write_dataset(root / "train_reversed.txt", X[::-1].tocsr(), Y[::-1].tocsr())
        for family, args in FAMILIES.items():
            for name, extra in cases:
                data = root / "train_reversed.txt" if name == "data" else tiny / "train.txt"
                r = run_cli("xml-train", data, root / f"{family}_other_{name}", *args,
                            *(OTHER_PARAMS[family] if extra is None else extra), "-q")
                assert r.returncode == 0, r.stderr
    root = made_once(tmp_path_factory, "tiny_others", make)
    return {family: [root / f"{family}_other_{name}" for name, _ in cases]
            for family in FAMILIES}


def run_cli(*args, **kw):
    """Run an xmlkit command as a user would (a subprocess)."""
    prog, rest = args[0], [str(a) for a in args[1:]]
    exe = BIN / prog
    cmd = [str(exe)] + rest if exe.exists() else [prog] + rest
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def run_without_scipy(command, *args, cwd):
    """Run xmlkit.cli.<command>'s main with `args` in a fresh interpreter
    (in `cwd`, outside the source tree: `python -c` imports from the
    current folder): returncode 0 when it succeeded without importing
    scipy, 1 when it imported scipy; a failed run fails on its assert."""
    argv = [f"xml-{command}"] + [str(a) for a in args]
    code = (f"import sys; from xmlkit.cli.{command} import main; sys.argv = {argv!r}\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "sys.exit(1 if any(m.startswith('scipy') for m in sys.modules) else 0)")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True)


def pytest_sessionfinish(session, exitstatus):
    """With XMLKIT_NO_SKIP=1 (set by .ci/run) a skipped test fails the run:
    in CI ../shared and every test extra are there, so a skip means a check
    silently not made."""
    if os.environ.get("XMLKIT_NO_SKIP") != "1" or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        for rep in skipped:
            reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else rep.longrepr
            reporter.write_line(f"XMLKIT_NO_SKIP: skipped {rep.nodeid}: {reason}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def as_format_3(folder, edit=None):
    """Rewrite an xmlkit model folder as format version 3 wrote it (files
    without __origin__, no `data` in the manifest), its manifest passed
    through edit(manifest) first when given: a folder of an older xmlkit,
    whose manifest nothing ties to its files."""
    import json
    import numpy as np
    from xmlkit import store
    folder = Path(folder)
    m = json.loads((folder / "manifest.json").read_text())
    for name in m["files"]:
        with np.load(folder / name) as z:
            arrays = {k: z[k] for k in z.files if k not in (store.ORIGIN, "__blocks__")}
        store.save_arrays(folder, name[:-4], arrays)
        m["files"][name] = store.file_record(folder / name)
    m["format_version"] = 3
    m.pop("data", None)
    if edit is not None:
        edit(m)
    (folder / "manifest.json").write_text(json.dumps(m))
    return m
