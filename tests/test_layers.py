"""The package's layers: the library below xmlkit/cli/ names no command-line
flag (the commands spell its parameters), and the dependencies point one way
(kernels <- estimators <- drivers and commands)."""
import ast
import re
from pathlib import Path

import click
import pytest

import xmlkit
from conftest import ROOT as REPO, run_cli
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
    assert r.returncode == 2 and f"{neg}:2: the value -1 is negative" in r.stderr \
        and "(--no-tfidf for data that are already weighted)" in r.stderr, r.stderr
    import numpy as np
    import scipy.sparse as sp
    from xmlkit.prune import prune
    with pytest.raises(XmlkitError, match=r"\(use tfidf=False for data") as info:
        prune(sp.csr_matrix(np.array([[1.0, 0.0, -1.0]])))
    assert info.value.param == "tfidf"


BELOW_THE_DRIVER = sorted(
    p for p in ROOT.rglob("*.py")
    if p.relative_to(ROOT).parts[0] in ("models", "io.py", "store.py", "metrics.py", "csr.py",
                                        "checks.py", "errors.py", "atomic.py"))
ABOVE = ("xmlkit.driver", "xmlkit.cli", "xmlkit.cluster")


def imported_modules(path):
    """Every module a file imports, at any depth of its code (imports inside
    functions included), as dotted names; `from a import b` gives a and a.b."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_the_walk_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\ndef g():\n    from xmlkit import driver\n"
                 "    from xmlkit.cli.common import fail\n")
    assert {"os", "xmlkit.driver", "xmlkit.cli.common"} <= imported_modules(f)


@pytest.mark.parametrize("path", BELOW_THE_DRIVER, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_below_the_driver_imports_it(path):
    """Dependencies point one way: the estimators, formats, store and metrics
    never import the driver, the commands or the cluster code."""
    wrong = sorted(m for m in imported_modules(path)
                   if any(m == a or m.startswith(a + ".") for a in ABOVE))
    assert not wrong, f"{path} imports {wrong}"


#: the foundations: every module of the package's top level but the driver,
#: the cluster code and the package itself (the kernels, xmlkit/_ext, lie below)
FOUNDATIONS = sorted(p for p in ROOT.glob("*.py")
                     if p.name not in ("__init__.py", "driver.py", "cluster.py"))


@pytest.mark.parametrize("path", FOUNDATIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_foundation_imports_a_model_family(path):
    """The foundations (formats, folders, metrics, calibration maps,
    explanations, ...) know no model: nothing of xmlkit.models, at any
    depth of their code."""
    wrong = sorted(m for m in imported_modules(path)
                   if m == "xmlkit.models" or m.startswith("xmlkit.models."))
    assert not wrong, f"{path} imports {wrong}"


def module_graph():
    """{module: the package's modules it imports, at any depth of its code}
    (a name that is not a module counts as the module holding it)."""
    names = {}
    for p in ROOT.rglob("*.py"):
        parts = ("xmlkit",) + p.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p

    def module_of(dotted):
        while dotted and dotted not in names:
            dotted = dotted.rpartition(".")[0]
        return dotted
    return {m: {module_of(d) for d in imported_modules(p)} - {"", m}
            for m, p in names.items()}


def cycles(graph):
    """The import cycles of graph: its strongly connected parts of more than
    one module (Tarjan, without recursion)."""
    index, low, on, stack, found = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                part = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    part.append(w)
                    if w == v:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_the_cycle_check_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    """No module imports, at any depth, one that imports it back: the
    package's modules form layers (imports inside functions included)."""
    assert cycles(module_graph()) == []


def test_the_driver_has_no_family_branch():
    """The driver trains every family through the folder protocol
    (xmlkit.models.family.ModelBase): no test of a model's class."""
    for name in ("driver.py", "models/folders.py"):
        tree = ast.parse((ROOT / name).read_text())
        calls = [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id in ("isinstance", "issubclass")]
        assert not calls, name
        families = {"TreeEnsemble", "ArrayModel", *(c.__name__ for c in xmlkit.REGISTRY.values())}
        named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
            {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert not named & families, (name, named & families)


def test_python_sources_stay_readable():
    """No library module over 800 lines and no function over 100 (the
    Python sources)."""
    too_long = []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 800:
            too_long.append((path.name, "file", len(text.splitlines())))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 100:
                    too_long.append((path.name, node.name, n))
    assert not too_long, too_long


#: a Cython function's first line: def, cpdef or cdef, a name, then its
#: arguments (not a class, struct, extern block or declared variable)
CYTHON_DEF = re.compile(r"^( *)(?:cdef|cpdef|def)\s+(?!class\b|struct\b|extern\b|enum\b)"
                        r"[^=(]*?\b(\w+)\s*\(")


def cython_functions(text):
    """(name, lines) of every function defined in Cython source: from its
    first line to its last line of code (a function ends at the first line
    of code indented no deeper than its own first line)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = CYTHON_DEF.match(line)
        if not m:
            continue
        j = i
        while j < len(lines) and not lines[j].split("#")[0].rstrip().endswith(":"):
            if lines[j].rstrip().endswith("nogil") or lines[j].rstrip().endswith(")"):
                break           # a declaration (.pxd), no body
            j += 1
        if j >= len(lines) or not lines[j].split("#")[0].rstrip().endswith(":"):
            continue
        last = j
        for k in range(j + 1, len(lines)):
            code = lines[k].strip()
            if not code or code.startswith("#"):
                continue
            if len(lines[k]) - len(lines[k].lstrip()) <= len(m.group(1)):
                break
            last = k
        found.append((m.group(2), last - i + 1))
    return found


def test_cython_functions_are_found():
    text = ("cdef class A:\n    cdef int x\n    cdef int f(self, int a,\n"
            "               int b) noexcept nogil:\n        cdef int c = g(a)\n\n"
            "        # note\n        return c\n\n    def h(self):\n        pass\n"
            "cdef int64_t k(int a) noexcept nogil\n")
    assert cython_functions(text) == [("f", 6), ("h", 2)]


def test_kernel_sources_stay_readable():
    """The kernels (cpp_ext/: .pyx and .pxd, not the generated C++) as the
    Python sources: no file over 800 lines, no function over 100."""
    too_long = []
    cpp_ext = REPO / "cpp_ext"
    kernels = sorted([*cpp_ext.rglob("*.pyx"), *cpp_ext.rglob("*.pxd")])
    assert len(kernels) > 20
    for path in kernels:
        text = path.read_text()
        if len(text.splitlines()) > 800:
            too_long.append((path.name, "file", len(text.splitlines())))
        too_long += [(path.name, name, n) for name, n in cython_functions(text) if n > 100]
    assert not too_long, too_long


def test_drivers_call_models_by_public_names_only():
    """Outside xmlkit/models (the drivers, the commands), a model is reached
    through the folder protocol's public members and the estimator API:
    no `model._x` call; and every protocol member the drivers use is one
    the protocol declares."""
    from xmlkit.models.protocol import MEMBERS
    outside = [p for p in LIBRARY if "models" not in p.relative_to(ROOT).parts]
    outside += sorted((ROOT / "cli").glob("*.py"))
    private = []
    for path in outside:
        for m in re.finditer(r"\b(model|cls|family)\._([a-z]\w*)", path.read_text()):
            private.append((path.name, m.group(0)))
    assert not private, private
    driver = "".join((ROOT / p).read_text() for p in ("driver.py", "cluster.py",
                                                       "models/folders.py"))
    used = set(re.findall(r"\bmodel\.([a-z]\w*)\(", driver))
    assert used - {"predict", "verify", "stats"} <= set(MEMBERS), used - set(MEMBERS)


#: data-set names and sizes that a measurement diary cites
DIARY = re.compile(r"\b(Bibtex|Delicious|Eurlex|EURLex|Wiki10|Corel5k|Yeast|Mediamill|"
                   r"\d+k-point|1M-point|\d+k synthetic)\b")


def test_no_measurement_diaries_in_the_library():
    """Measurements live in scripts/results/: library code states a reason
    and points to a results file, it cites no data set (the Python sources
    and the kernels)."""
    sources = [*(REPO / "xmlkit").rglob("*.py"), *(REPO / "cpp_ext").rglob("*.pyx"),
               *(REPO / "cpp_ext").rglob("*.pxd")]
    assert len(sources) > 60
    cited = [(p.name, i + 1) for p in sources
             for i, line in enumerate(p.read_text().splitlines()) if DIARY.search(line)]
    assert not cited, cited
