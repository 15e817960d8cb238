"""The package's layers: the library below xmlkit/cli/ names no command-line
flag (the commands spell its parameters), and the dependencies point one way
(kernels <- estimators <- drivers and commands)."""
import ast
import re
from pathlib import Path

import click
import pytest

import xmlkit
from conftest import run_cli
from xmlkit.cli.common import spell_flags
from xmlkit.errors import XmlkitError

ROOT = Path(xmlkit.__file__).parent
LIBRARY = sorted(p for p in ROOT.rglob("*.py") if "cli" not in p.relative_to(ROOT).parts)
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[A-Za-z](?![\w-]))")


def strings_outside_docstrings(path):
    """(line, text) of every string constant of a module but its docstrings
    (f-strings' literal parts included)."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_scan_finds_flags():
    for text in ("use --no-tfidf here", "--dask local:2", "give -T 2", "(-k 5)"):
        assert FLAG.search(text), text
    for text in ("tf-idf", "1-based", "a - b", "x-1", "top-k", "e-mail", "-1.5"):
        assert not FLAG.search(text), text


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_flag_below_the_commands(path):
    """Library messages name parameters (the commands map them to flags)."""
    found = [(line, m.group(0)) for line, text in strings_outside_docstrings(path)
             for m in FLAG.finditer(text)]
    assert not found, f"{path}: {found}"


def test_parameters_are_spelled_as_the_command_spells_them():
    @click.command()
    @click.option("--index-base", type=int)
    @click.option("--tfidf/--no-tfidf", default=True)
    @click.option("--dask", "dask_address")
    def cmd(index_base, tfidf, dask_address):
        pass
    assert spell_flags("read as 1-based (index_base=1)", "index_base", cmd) == \
        "read as 1-based (--index-base 1)"
    assert spell_flags("counts (use tfidf=False for weighted data)", "tfidf", cmd) == \
        "counts (use --no-tfidf for weighted data)"
    assert spell_flags("address local:0: N >= 1", "address", cmd) == "--dask local:0: N >= 1"
    # a parameter the command has no option for, and parts of other words: unchanged
    assert spell_flags("seed must be >= 0", "seed", cmd) == "seed must be >= 0"
    assert spell_flags("the index_bases index_base", "index_base", cmd) == \
        "the index_bases --index-base"


def test_a_library_error_reaches_the_command_line_in_flags(tmp_path):
    from xmlkit import cluster
    with pytest.raises(XmlkitError, match="^address local:0: local:N needs") as info:
        cluster.parse_address("local:0")
    assert info.value.param == "address"
    data = tmp_path / "z.txt"
    data.write_text("1 3 2\n0 0:1 2:1\n")
    r = run_cli("xml-train", data, tmp_path / "m", "--index-base", "1")
    assert r.returncode == 2
    assert r.stderr == (f"xml-train: error: {data}:2: index 0 in '0' but indices are read "
                        "as 1-based (--index-base 1)\n")
    neg = tmp_path / "neg.txt"
    neg.write_text("1 3\n0:1 2:-1\n")
    r = run_cli("xml-prune", neg, tmp_path / "o.txt")
    assert r.returncode == 2 and "(use --no-tfidf for data that are already weighted)" \
        in r.stderr, r.stderr
