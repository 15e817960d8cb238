"""Where each results file comes from: its last line names the make target
that made it, the commit it was made at, the git blob ids of the scripts it
was made by (its sources) and the library code it measured (the git tree
ids of xmlkit/ and cpp_ext/ as they were when its steps ran), so that a
results file made by older scripts is refused before its numbers reach the
README, and one that measured older code is named.

    python provenance.py stamp NAME     after results/NAME.md is made (the
                                        Makefile does this): the stamp line,
                                        unless the file has one
    python provenance.py check [--scripts] [NAME ...]
                                        exit 2, naming each file, when a
                                        results file has no stamp, its
                                        sources changed since it was made,
                                        or (but with --scripts) it measured
                                        other library code than the working
                                        tree's (`make readme` runs the
                                        --scripts check first; the headline
                                        says which of its figures measured
                                        older code)
    python provenance.py library        the working tree's library id

The library code a results file measured: each step record of a benchmark
holds the library id of the run that wrote it (benchlib.Step), and the
stamp lists those of the records its results file was made from (the
results rule of work/NAME.mk); "unrecorded" for records made before records
held it. A results file made by one script run (no step records) measured
the library of that run: the id when it is stamped.

A stamp is only ever added to a file that has none: the scripts write each
results file whole, so a file with a stamp was not remade, and keeps the
commit, sources and library it was made with.
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
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
                   r"Sources: (?P<sources>[^*]+?)\.(?: Library: (?P<library>[^*]+)\.)?\*$")
#: the library's folders, whose tree ids name the code a result measured
LIBRARY = ("xmlkit", "cpp_ext")
#: what a record made before records held the library id counts as
UNRECORDED = "unrecorded"


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


def stamp_line(name, commit, blobs, library=None):
    """The stamp of results/NAME.md; library: the ids of the code it measured."""
    target = TARGETS.get(name, f"make -C scripts {name}")
    listed = ", ".join(f"{Path(s).name} {b}" for s, b in blobs.items())
    measured = f" Library: {', '.join(library)}." if library else ""
    return f"*Made by `{target}` at commit {commit}. Sources: {listed}.{measured}*"


_LIBRARY = []


def library_id():
    """The library code as it is in the working tree, as 'X/Y': the git tree
    ids (7 digits) of xmlkit/ and cpp_ext/ as git would commit them (tracked
    and untracked files, not the ignored ones: compiled modules, generated
    C++), through an index of its own; "unknown" outside a git clone."""
    if _LIBRARY:
        return _LIBRARY[0]
    root = HERE.parent
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, GIT_INDEX_FILE=os.path.join(tmp, "index"))

        def git(*args):
            r = subprocess.run(["git", "-C", str(root), *args], env=env, capture_output=True,
                               text=True)
            return r.stdout.strip() if r.returncode == 0 else None
        try:
            tree = (git("read-tree", "HEAD") is not None
                    and git("add", "-A", "--", *LIBRARY) is not None and git("write-tree"))
            ids = [git("rev-parse", "--short=7", f"{tree}:{p}") for p in LIBRARY] \
                if tree else [None]
        except OSError:
            ids = [None]
    _LIBRARY.append("/".join(ids) if all(ids) else "unknown")
    return _LIBRARY[0]


def measured(name):
    """The library ids of the code results/NAME.md measured: those of the
    step records its results rule names (work/NAME.mk), each once, in the
    order met; else (a results file of one script run) the working tree's."""
    rules = HERE / "work" / f"{name}.mk"
    if not rules.is_file():
        return [library_id()]
    head = f"results/{name}.md:"
    line = next((l for l in rules.read_text().splitlines() if l.startswith(head)), "")
    found = []
    for rec in line[len(head):].split():
        try:
            lib = json.loads((HERE / rec).read_text()).get("library", UNRECORDED)
        except (OSError, ValueError, AttributeError):
            lib = UNRECORDED
        if lib not in found:
            found.append(lib)
    return found or [library_id()]


def _stamp_of(path):
    """The STAMP match of a results file's last line, or None."""
    lines = path.read_text().rstrip("\n").splitlines()
    return STAMP.match(lines[-1]) if lines else None


def read_stamp(path):
    m = _stamp_of(path)
    if not m:
        return None
    blobs = dict(item.rsplit(" ", 1) for item in m.group("sources").split(", "))
    return m.group("target"), m.group("commit"), blobs


def read_library(path):
    """The library ids a results file's stamp names ([]: it names none)."""
    m = _stamp_of(path)
    return m.group("library").split(", ") if m and m.group("library") else []


def stamp(name):
    path = RESULTS / f"{name}.md"
    if read_stamp(path) is not None:
        return
    srcs = sources(name)
    line = stamp_line(name, commit_now(srcs), {s: blob(HERE / s) for s in srcs},
                      None if name == "headline" else measured(name))
    text = path.read_text().rstrip("\n") + "\n\n" + line + "\n"
    from xmlkit.atomic import atomic_path
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)


def problems(name, library=True):
    """Why results/NAME.md cannot be used ([] when it can); library: also
    when it measured other library code than the working tree's."""
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
    if library and name != "headline":
        return older_code(name)
    return []


def older_code(name):
    """[why] when results/NAME.md measured other library code than the
    working tree's (or does not say which), else []."""
    path = RESULTS / f"{name}.md"
    libs, now = read_library(path), library_id()
    if libs == [now]:
        return []
    target = TARGETS.get(name, f"make -C scripts {name}")
    what = (f"measured library code {', '.join(libs)}, not the working tree's {now}"
            if libs else "does not name the library code it measured (made before "
            "results named it)")
    return [f"{path.relative_to(HERE)}: {what} (remake it: delete its step records under "
            f"work/ that measured older code, then {target})"]


def main(argv):
    if len(argv) >= 2 and argv[0] == "stamp":
        for name in argv[1:]:
            stamp(name)
        return 0
    if argv == ["library"]:
        print(library_id())
        return 0
    if argv and argv[0] == "check":
        scripts_only = "--scripts" in argv
        names = [a for a in argv[1:] if a != "--scripts"] or sorted(
            p.stem for p in RESULTS.glob("*.md") if p.stem != "headline")
        found = [p for n in names for p in problems(n, library=not scripts_only)]
        for p in found:
            print(p, file=sys.stderr)
        return 2 if found else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
