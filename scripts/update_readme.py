"""Copy the results files into the README: every block between

    <!-- begin scripts/results/NAME.md -->
    <!-- end scripts/results/NAME.md -->

is replaced by the current text of that file (`make -C scripts readme`), in
README.md and docs/benchmarks.md (or the files given). A marker naming a
missing file, or a begin without its end, is an error and the file is left
as it was.

    python scripts/update_readme.py [FILE ...]
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- begin (\S+) -->\n)(.*?)(<!-- end \2 -->)", re.S)


def update(text):
    begins = re.findall(r"<!-- begin (\S+) -->", text)
    names = [m.group(2) for m in BLOCK.finditer(text)]
    if begins != names:
        unmatched = [b for b in begins if b not in names]
        sys.exit(f"README: '<!-- begin {unmatched[0]} -->' has no matching end marker")

    def fill(m):
        path = ROOT / m.group(2)
        if not path.is_file():
            sys.exit(f"README: {m.group(2)} does not exist (run make -C scripts first)")
        return m.group(1) + path.read_text().rstrip("\n") + "\n" + m.group(4)
    return BLOCK.sub(fill, text), len(names)


def main():
    from xmlkit.atomic import atomic_path
    files = [Path(a) for a in sys.argv[1:]] or [ROOT / "README.md", ROOT / "docs" / "benchmarks.md"]
    for readme in files:
        text, n = update(readme.read_text())
        with atomic_path(readme) as tmp:
            Path(tmp).write_text(text)
        print(f"{readme}: {n} results blocks updated", file=sys.stderr)


if __name__ == "__main__":
    main()
