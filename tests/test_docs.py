"""The docs: docs/cli.md is each command's --help as printed (regenerate with
python scripts/cli_docs.py); the README stays short."""
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_cli_reference_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli_docs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_readme_is_short_and_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 12 * 1024
    import re
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
    assert (results / "headline.md").read_text() == headline.render()
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

