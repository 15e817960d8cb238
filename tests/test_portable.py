"""xmlkit off Linux: no platform-only module at import time, and the other
paths of folder locks (msvcrt; none), workers' parent death (a polling
check) and memory give-back (none), run here by simulation
(tests/simulated/sitecustomize.py: fcntl, prctl, malloc_trim and mallopt
made unavailable, Windows' msvcrt.locking stood in)."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

SIMULATED = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(ROOT / "tests" / "simulated"), str(ROOT / "tests")]
    + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}


#: where the tests' own processes start: not the clone's root, whose
#: xmlkit/ (the sources, without the compiled kernels of an installed
#: xmlkit) `python -c` would import
HERE = ROOT / "tests"


def python(code, env=None, **kw):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=HERE, **kw)


def test_importing_xmlkit_loads_no_platform_only_module():
    """Every module of xmlkit imports where fcntl, msvcrt, resource and
    termios do not exist and the C library is never opened."""
    r = python("""
import subprocess, sys, ctypes, pkgutil, importlib
for name in ("fcntl", "msvcrt", "resource", "termios", "pwd", "grp", "winreg"):
    sys.modules[name] = None
def opened(*a, **k):
    raise AssertionError(f"the C library opened at import: {a}")
ctypes.CDLL = opened
import xmlkit
names = [m.name for m in pkgutil.walk_packages(xmlkit.__path__, "xmlkit.")]
for name in names:
    importlib.import_module(name)
print(len(names))
""")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) > 40


def test_the_simulation_takes_the_other_paths():
    code = ("from xmlkit import _lock, _process, _memory; "
            "print(_lock.backend(), _process.backend(), _memory._libc('malloc_trim'))")
    if sys.platform.startswith("linux"):
        real = python(code).stdout.split()
        assert real[:2] == ["flock", "prctl"] and real[2] != "None"
    assert python(code, SIMULATED).stdout.split() == ["msvcrt", "poll", "None"]


HOLD = """
import sys
from xmlkit import store
with store.folder_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""
TRY = """
import sys
from xmlkit import store
from xmlkit.errors import XmlkitError
try:
    with store.folder_lock(sys.argv[1]):
        print("taken")
except XmlkitError as exc:
    print(exc)
"""


@pytest.mark.parametrize("simulated", [False, True], ids=["flock", "msvcrt"])
def test_a_held_folder_lock_refuses_another_process_and_is_given_back(simulated, tmp_path):
    env = SIMULATED if simulated else None
    folder = tmp_path / "m"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], env=env, cwd=HERE,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        out = subprocess.run([sys.executable, "-c", TRY, str(folder)], env=env, cwd=HERE,
                             capture_output=True, text=True).stdout
        assert f"another process (pid {holder.pid}) is writing" in out
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(10) == 0
    finally:
        holder.kill()
    out = subprocess.run([sys.executable, "-c", TRY, str(folder)], env=env, cwd=HERE,
                         capture_output=True, text=True).stdout
    assert out == "taken\n"
    assert not folder.exists()          # (created and left empty: removed)


def test_without_any_lock_a_folder_is_taken(monkeypatch, tmp_path):
    """Where the system has neither flock nor msvcrt, locking is a no-op."""
    from xmlkit import _lock
    monkeypatch.setattr(_lock, "_backend", lambda: ("none", None))
    assert _lock.backend() == "none"
    fds = [os.open(tmp_path / ".lock", os.O_RDWR | os.O_CREAT) for _ in range(2)]
    try:
        assert all(_lock.try_lock(fd) for fd in fds)
        for fd in fds:
            _lock.unlock(fd)
    finally:
        for fd in fds:
            os.close(fd)


def test_the_lock_file_is_read_and_written_without_pread(tmp_path):
    r = python(f"""
import os
from xmlkit import _lock
assert not hasattr(os, "pread")
fd = os.open({str(tmp_path / "f")!r}, os.O_RDWR | os.O_CREAT)
os.lseek(fd, 5, 0)
_lock.write_at(fd, b"1234\\n", 0)
print(_lock.read_at(fd, 64, 0).decode().strip())
""", SIMULATED)
    assert r.stdout == "1234\n", r.stderr


WORKER = """
import os, sys, time
parent = os.getpid()
child = os.fork()
if child == 0:
    from xmlkit._process import die_with
    die_with(parent)
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a worker")
@pytest.mark.parametrize("simulated", [False, True], ids=["prctl", "poll"])
def test_a_worker_ends_when_its_parent_is_killed(simulated, tmp_path):
    from xmlkit._process import POLL_SECONDS, alive
    parent = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE,
                              text=True, env=SIMULATED if simulated else None, cwd=HERE)
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 10 * POLL_SECONDS + 5
    while time.time() < deadline and _running(child):
        time.sleep(0.05)
    assert not _running(child)


def _running(pid):
    """Whether `pid` runs (a zombie, ended but not yet reaped, does not)."""
    from xmlkit._process import alive
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return alive(pid)


def test_alive():
    from xmlkit._process import alive
    assert alive(os.getpid())
    p = subprocess.Popen([sys.executable, "-c", "pass"], cwd=HERE)
    p.wait()
    assert not alive(p.pid)


#: FastXML's tests of training runs: threads and forked workers, shards,
#: resume, interrupted runs, the command against the API
TRAINING = ("worker_count or fewer_trees or shards or interrupted or cli_and_api "
            "or bad_options")


@pytest.mark.slow
def test_lock_fault_and_training_tests_pass_without_linux_calls():
    """tests/test_faults.py (locks, killed runs, parent death, temp files;
    not its fuzzers, nor its memory limits, whose smallest must be refused:
    without malloc_trim the heap keeps what the imports freed, enough for
    the small fits there) and FastXML's training runs (TRAINING), with
    fcntl, prctl, malloc_trim and mallopt unavailable."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "no:xdist", "-k", "not fuzzer and not memory_refused and "
                        "(test_faults or " + TRAINING + ")",
                        "test_faults.py", "test_fastxml.py"],
                       cwd=HERE, env=SIMULATED, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-2000:]
