"""The docs: docs/cli.md is each command's --help as printed (regenerate with
python scripts/cli_docs.py); the README stays short."""
import subprocess
import sys

from conftest import ROOT


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
