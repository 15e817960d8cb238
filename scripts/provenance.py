"""Where each results file comes from: its last line names the make target
that made it, the commit it was made at, and the git blob ids of the
scripts it was made by (its sources), so that a results file made by older
scripts is refused before its numbers reach the README.

    python provenance.py stamp NAME     after results/NAME.md is made (the
                                        Makefile does this): the stamp line,
                                        unless the file has one
    python provenance.py check [NAME ...]
                                        exit 2, naming each file, when a
                                        results file has no stamp or its
                                        sources changed since it was made
                                        (`make readme` runs this first)

A stamp is only ever added to a file that has none: the scripts write each
results file whole, so a file with a stamp was not remade, and keeps the
commit and sources it was made with.
"""
import hashlib
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

#: results files made by something else than `make -C scripts NAME`
TARGETS = {
    "predict_scaling": "make -C scripts predict-scaling",
    "headline": "make -C scripts readme",
    "predict_scaling_16": "bench_predict_scaling.py on a lent 16-core machine "
                          "(../shared/tools/device-scaling)",
}
#: the sources of a results file besides its script and benchlib.py (the
#: Makefile's prerequisites)
EXTRA = {
    "families": ["make_synthetic.py"],
    "dask": ["make_synthetic.py"],
    "text": ["pydists.py"],
    "fuzz": ["../tests/model_fuzz.py", "../tests/text_fuzz.py", "../tests/inuse_fuzz.py"],
}
STAMP = re.compile(r"^\*Made by `(?P<target>[^`]+)` at commit (?P<commit>\S+?)\.? "
                   r"Sources: (?P<sources>[^*]+)\.\*$")


def sources(name):
    """The scripts results/NAME.md is made from (paths relative to scripts/)."""
    if name == "headline":
        return ["headline.py"]
    if name == "fuzz":
        return ["fuzz.py", *EXTRA["fuzz"]]
    script = "bench_predict_scaling.py" if name.startswith("predict_scaling") else \
        f"bench_{name}.py"
    return [script, "benchlib.py", *EXTRA.get(name, [])]


def blob(path):
    """git's blob id of a file as it is now (7 hex digits)."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:7]


def _git(*args):
    try:
        r = subprocess.run(["git", "-C", str(HERE), *args], capture_output=True, text=True)
    except OSError:
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def commit_now(srcs):
    """HEAD's short id; marked when the sources differ from HEAD's."""
    head = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--", *srcs)
    return head + ("+changes" if dirty else "")


def stamp_line(name, commit, blobs):
    target = TARGETS.get(name, f"make -C scripts {name}")
    listed = ", ".join(f"{Path(s).name} {b}" for s, b in blobs.items())
    return f"*Made by `{target}` at commit {commit}. Sources: {listed}.*"


def read_stamp(path):
    lines = path.read_text().rstrip("\n").splitlines()
    m = STAMP.match(lines[-1]) if lines else None
    if not m:
        return None
    blobs = dict(item.rsplit(" ", 1) for item in m.group("sources").split(", "))
    return m.group("target"), m.group("commit"), blobs


def stamp(name):
    path = RESULTS / f"{name}.md"
    if read_stamp(path) is not None:
        return
    srcs = sources(name)
    line = stamp_line(name, commit_now(srcs), {s: blob(HERE / s) for s in srcs})
    text = path.read_text().rstrip("\n") + "\n\n" + line + "\n"
    from xmlkit.atomic import atomic_path
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)


def problems(name):
    """Why results/NAME.md cannot be used ([] when it can)."""
    path = RESULTS / f"{name}.md"
    if not path.is_file():
        return [f"{path.relative_to(HERE)}: missing"]
    found = read_stamp(path)
    if found is None:
        return [f"{path.relative_to(HERE)}: names no target, commit and sources "
                f"(remake it: {TARGETS.get(name, f'make -C scripts {name}')})"]
    target, commit, blobs = found
    changed = [s for s in sources(name)
               if blobs.get(Path(s).name) != blob(HERE / s)]
    if changed:
        return [f"{path.relative_to(HERE)}: made at commit {commit} by older "
                f"{', '.join(Path(s).name for s in changed)} (remake it: {target})"]
    return []


def main(argv):
    if len(argv) >= 2 and argv[0] == "stamp":
        for name in argv[1:]:
            stamp(name)
        return 0
    if argv and argv[0] == "check":
        names = argv[1:] or sorted(p.stem for p in RESULTS.glob("*.md") if p.stem != "headline")
        found = [p for n in names for p in problems(n)]
        for p in found:
            print(p, file=sys.stderr)
        return 2 if found else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
