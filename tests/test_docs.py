"""The docs: docs/cli.md is each command's --help as printed (regenerate with
python scripts/cli_docs.py); the README stays short."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_cli_reference_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli_docs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _prose_words(text):
    """The words of markdown text outside code blocks, tables and the
    blocks copied from results files."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<!-- begin (\S+) -->.*?<!-- end \1 -->", "", text, flags=re.S)
    return len(" ".join(l for l in text.splitlines() if not l.startswith("|")).split())


def test_readme_is_short_where_a_newcomer_starts():
    """What a newcomer reads first (the README up to its command quick start:
    what xmlkit is, the headline table, how to install and run it) stays at
    most 400 words of prose, and the whole README 1,300; tables, code and
    the headline block do not count, but a headline row stays under 500
    characters and the table under 12 rows (a family or a figure more never
    forces unrelated text out)."""
    readme = (ROOT / "README.md").read_text()
    first = readme[:readme.index("\n## Quick start: commands")]
    assert _prose_words(first) <= 400
    assert _prose_words(readme) <= 1300
    block = readme[readme.index("<!-- begin scripts/results/headline.md -->"):
                   readme.index("<!-- end scripts/results/headline.md -->")]
    rows = [l for l in block.splitlines() if l.startswith("| ") and not l.startswith("| family")]
    assert 0 < len(rows) < 12 and all(len(r) < 500 for r in rows)


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\((docs/[^)#]+)\)", readme):
        assert (ROOT / target).is_file(), target
    for doc in (ROOT / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+)\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name}: {target}"


def test_readme_headline_is_read_from_the_results():
    """The README's headline figures are scripts/headline.py's reading of
    scripts/results/*.md, and README.md and docs/benchmarks.md hold each
    results file as it is (make -C scripts readme)."""
    import importlib.util
    import re
    spec = importlib.util.spec_from_file_location("headline", ROOT / "scripts" / "headline.py")
    headline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(headline)
    results = ROOT / "scripts" / "results"
    made = (results / "headline.md").read_text().rstrip("\n").split("\n\n")
    assert made[0] + "\n" == headline.render()
    # (then, as of its making, the results read that measured older library code)
    assert all(m.startswith("Measured on older library code") for m in made[1:-1])
    assert made[-1].startswith("*Made by `make -C scripts readme` at commit ")
    for doc in ("README.md", "docs/benchmarks.md"):
        text = (ROOT / doc).read_text()
        for name, body in re.findall(r"<!-- begin (\S+) -->\n(.*?)<!-- end \1 -->", text, re.S):
            assert body == (ROOT / name).read_text().rstrip("\n") + "\n", (doc, name)


def test_every_decimal_in_the_docs_is_in_a_results_file():
    """Prose carries no figure of its own: every decimal number in README.md
    and docs/*.md outside the generated blocks and code examples appears in
    a file of scripts/results/ (docs/cli.md is generated from --help), or
    is a constant the docs restate from the code (the propensity presets'
    A and B, which used to pass only when a results file held the same
    digits)."""
    import re
    from xmlkit.metrics import PROPENSITY_PRESETS
    found = {str(v) for ab in PROPENSITY_PRESETS.values() for v in ab}
    for f in (ROOT / "scripts" / "results").glob("*.md"):
        found |= set(re.findall(r"\d+\.\d+", f.read_text()))
    missing = []
    for doc in [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")):
        if doc.name == "cli.md":
            continue
        text = re.sub(r"<!-- begin (\S+) -->.*?<!-- end \1 -->", "", doc.read_text(), flags=re.S)
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        text = re.sub(r"Python ≥ \d+\.\d+", "", text)     # a version requirement
        for line in text.splitlines():
            missing += [(doc.name, n, line.strip()[:80])
                        for n in re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", line) if n not in found]
    assert not missing, missing


def test_every_family_has_its_generated_option_table():
    """docs/algorithms.md's option tables are generated (cli_docs.py; the
    check above keeps them current): one per family, with every option."""
    import xmlkit
    from xmlkit.cli.options import TRAIN_OPTIONS
    text = (ROOT / "docs" / "algorithms.md").read_text()
    for family in xmlkit.REGISTRY:
        start = text.index(f"<!-- begin options-{family} -->")
        table = text[start:text.index(f"<!-- end options-{family} -->")]
        for o in TRAIN_OPTIONS[family]:
            assert f"| `{', '.join(o.decls)}" in table, (family, o.param)


def test_algorithms_prose_does_not_restate_option_defaults():
    """A default has one home in the docs, the generated tables: the prose
    names an option without its value (`--arity`, not `--arity` (2))."""
    import re
    text = (ROOT / "docs" / "algorithms.md").read_text()
    prose = re.sub(r"<!-- begin (\S+) -->.*?<!-- end \1 -->", "", text, flags=re.S)
    found = [prose[m.start():m.end()] for m in
             re.finditer(r"`-{1,2}[a-z][\w-]*`[ ,]*\(?[0-9][0-9.]*\)?", prose)]
    assert not found, found


@pytest.mark.slow
def test_readme_main_job_prints_what_the_readme_shows(tmp_path):
    """The README's main job, run as written (but the install) from another
    folder, prints the table the README shows under it: the figures change
    whenever the trees do, and the README must follow."""
    import re
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("**Main job"):readme.index("**Tests**")]
    command, shown = re.findall(r"```(?:sh)?\n(.*?)```", section, re.S)
    command = command.strip().removeprefix("pip install . && ")
    assert [c.split()[0] for c in command.split(" && ")] == ["xml-train", "xml-predict",
                                                            "xml-eval"]
    r = subprocess.run(command.replace("data_samples/", f"{ROOT}/data_samples/"), shell=True,
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == shown


@pytest.mark.slow
def test_readme_python_quick_start_runs_from_another_folder(tmp_path):
    """The README's Python quick start, pasted into Python run from another
    folder, runs, and prints the main job's P@k (the same trees at any
    thread count). Its one line that depends on the install (where the
    clone's samples are: an editable install's xmlkit/ is in the clone;
    CI installs a copy) is checked to name the clone's data_samples."""
    import json
    import re
    import sys
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Quick start: Python"):readme.index("## Training on")]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    line = 'SAMPLES = Path(xmlkit.__file__).parents[1] / "data_samples"'
    assert line in code
    code = code.replace(line, f"SAMPLES = Path({str(ROOT / 'data_samples')!r})")
    code = code.replace("print(ranking_metrics(Yt, scores, (1, 3, 5)))",
                        "import json; print(json.dumps(ranking_metrics(Yt, scores, (1, 3, 5))))")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[0])
    table = readme[readme.index("**Main job"):readme.index("**Tests**")]
    p_row = next(l for l in table.splitlines() if l.startswith("P "))
    assert [round(100 * got[f"P@{k}"], 2) for k in (1, 3, 5)] == \
        [float(v) for v in p_row.split()[1:]]



def _provenance():
    import importlib.util
    spec = importlib.util.spec_from_file_location("provenance",
                                                  ROOT / "scripts" / "provenance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_results_file_names_its_target_commit_and_sources():
    pv = _provenance()
    names = sorted(p.stem for p in (ROOT / "scripts" / "results").glob("*.md"))
    assert len(names) > 15
    for name in names:
        found = pv.read_stamp(ROOT / "scripts" / "results" / f"{name}.md")
        assert found is not None, name
        target, commit, blobs = found
        assert target == pv.TARGETS.get(name, f"make -C scripts {name}"), name
        assert re.fullmatch(r"[0-9a-f]{7,}(\+changes)?", commit), (name, commit)
        assert set(blobs) == {Path(s).name for s in pv.sources(name)}, name
        for s in pv.sources(name):
            assert (ROOT / "scripts" / s).is_file(), (name, s)
    makefile = (ROOT / "scripts" / "Makefile").read_text()
    readme = makefile[makefile.index("\nreadme:"):].split("\n")[2]
    assert readme.strip() == "$(PYTHON) provenance.py check --scripts"


def test_stale_or_unstamped_results_are_refused(tmp_path, monkeypatch):
    """provenance.py stamps a results file once, with its sources' blob ids
    as they are; check refuses a file without a stamp, and one whose
    sources changed since, naming the file and the script."""
    pv = _provenance()
    scripts = tmp_path / "scripts"
    (scripts / "results").mkdir(parents=True)
    for f in ("bench_toy.py", "benchlib.py"):
        (scripts / f).write_text(f"# {f}\n")
    monkeypatch.setattr(pv, "HERE", scripts)
    monkeypatch.setattr(pv, "RESULTS", scripts / "results")
    out = scripts / "results" / "toy.md"
    out.write_text("| a |\n|---|\n| 1.5 |\n")
    assert pv.problems("toy") and "names no target" in pv.problems("toy")[0]
    pv.stamp("toy")
    text = out.read_text()
    assert text.startswith("| a |\n|---|\n| 1.5 |\n\n*Made by `make -C scripts toy` at commit ")
    assert pv.problems("toy") == []
    pv.stamp("toy")                                 # (once stamped, left as it is)
    assert out.read_text() == text
    (scripts / "bench_toy.py").write_text("# changed\n")
    found = pv.problems("toy")
    assert len(found) == 1 and "toy.md" in found[0] and "bench_toy.py" in found[0]
    assert "benchlib.py" not in found[0]
    assert pv.main(["check", "toy"]) == 2


def test_results_name_the_library_code_they_measured(tmp_path, monkeypatch):
    """A step record holds the library id (the git trees of xmlkit/ and
    cpp_ext/ as they are, committed or not); a results file's stamp names
    those of its records, and check names it once the code changed
    (check --scripts does not), as it does a file from before records held
    the id."""
    pv = _provenance()
    repo = tmp_path / "repo"
    scripts = repo / "scripts"
    for d in ("xmlkit", "cpp_ext", "scripts/results", "scripts/work/toy"):
        (repo / d).mkdir(parents=True)
    (repo / "xmlkit" / "a.py").write_text("x = 1\n")
    (repo / "cpp_ext" / "k.pyx").write_text("# kernel\n")
    for f in ("bench_toy.py", "benchlib.py"):
        (scripts / f).write_text(f"# {f}\n")

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "one")
    monkeypatch.setattr(pv, "HERE", scripts)
    monkeypatch.setattr(pv, "RESULTS", scripts / "results")
    first = pv.library_id()
    tree = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD:xmlkit"],
                          capture_output=True, text=True).stdout[:7]
    assert re.fullmatch(r"[0-9a-f]{7}/[0-9a-f]{7}", first) and first.startswith(tree)
    rec = scripts / "work" / "toy" / "a.json"
    rec.write_text(json.dumps({"P@1": 1.0, "library": first}))
    old = scripts / "work" / "toy" / "b.json"
    (scripts / "work" / "toy.mk").write_text(
        "results/toy.md: work/toy/a.json\n\tpython bench_toy.py --report-only\n")
    (scripts / "results" / "toy.md").write_text("| a |\n|---|\n| 1 |\n")
    pv.stamp("toy")
    assert pv.read_library(scripts / "results" / "toy.md") == [first]
    assert pv.problems("toy") == []
    (repo / "xmlkit" / "a.py").write_text("x = 2\n")     # (not committed: counts too)
    pv._LIBRARY.clear()
    now = pv.library_id()
    assert now != first and now.split("/")[1] == first.split("/")[1]
    found = pv.problems("toy")
    assert len(found) == 1 and "toy.md" in found[0] and first in found[0] and now in found[0]
    assert pv.problems("toy", library=False) == []
    assert pv.main(["check", "toy"]) == 2 and pv.main(["check", "--scripts", "toy"]) == 0
    old.write_text(json.dumps({"P@1": 1.0}))              # (a record from before the id)
    (scripts / "work" / "toy.mk").write_text("results/toy.md: work/toy/a.json work/toy/b.json\n")
    (scripts / "results" / "toy.md").write_text("| a |\n|---|\n| 1 |\n")
    pv.stamp("toy")
    assert pv.read_library(scripts / "results" / "toy.md") == [first, pv.UNRECORDED]
    assert "unrecorded" in pv.problems("toy")[0]
