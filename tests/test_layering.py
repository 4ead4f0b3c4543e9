"""The house's layering holds (issue 72): no package of glmcheck/ imports one that imports it back, and no module
another module that imports it back, inside one package too (directly or round a longer loop: function-level
imports count too), `checks/` reads no command line and names no module by
string, and `glmcheck.evaluate`'s lazy names are never shadowed by a submodule of the same name."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections import defaultdict
from pathlib import Path

from glmcheck import evaluate

PACKAGE = Path(__file__).resolve().parents[1] / "glmcheck"


def _imports(path: Path) -> list[str]:
    """Every glmcheck module `path` imports, at any depth of the file (`from a import b` gives a and a.b)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return [name for name in names if name.startswith("glmcheck.")]


def package_graph() -> dict[str, set[str]]:
    """{package: the packages it imports} over glmcheck/'s subpackages (cli.py and __main__.py as their own)."""
    parts = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).parts
        mine = relative[0] if len(relative) > 1 else path.stem
        for name in _imports(path):
            theirs = name.split(".")[1]
            if theirs != mine and (theirs in parts or (PACKAGE / f"{theirs}.py").is_file()):
                graph[mine].add(theirs)
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one package (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                other = stack.pop()
                on.discard(other)
                group.append(other)
                if other == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(set(graph) | {n for targets in graph.values() for n in targets}):
        if node not in index:
            visit(node)
    return found


def test_no_package_imports_one_that_imports_it_back():
    assert loops(package_graph()) == []


def test_a_loop_is_found():
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_checks_read_no_command_line_and_import_by_name_only():
    for path in (PACKAGE / "checks").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        imported += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
        assert "argparse" not in imported, path.name
        calls = [node.func for node in ast.walk(tree) if isinstance(node, ast.Call)]
        by_string = [f for f in calls if (isinstance(f, ast.Attribute) and f.attr == "import_module")
                     or (isinstance(f, ast.Name) and f.id == "__import__")]
        assert not by_string, path.name


def test_no_lazy_name_of_evaluate_is_a_module_name():
    """`from glmcheck.evaluate import X` gives the function X even once every submodule was imported (a submodule
    named X would shadow it: its attribute on the package wins over the lazy `__getattr__`)."""
    modules = {m.name for m in pkgutil.iter_modules(evaluate.__path__)}
    assert not set(evaluate._WHERE) & modules
    assert evaluate.__all__ == sorted(evaluate._WHERE)
    for name in modules:
        importlib.import_module(f"glmcheck.evaluate.{name}")
    for name, module in evaluate._WHERE.items():
        assert module in modules, name
        assert callable(getattr(evaluate, name)) and not isinstance(getattr(evaluate, name), type(evaluate)), name


def module_graph() -> dict[str, set[str]]:
    """{module: the glmcheck modules it imports} over every module of glmcheck/ but the packages' faces
    (`__init__.py`, which gather their submodules' names): `from a import b` is an arrow to the module a.b where
    there is one, else to a."""
    modules = {".".join(("glmcheck", *p.relative_to(PACKAGE).with_suffix("").parts))
               for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py":
            continue
        mine = ".".join(("glmcheck", *path.relative_to(PACKAGE).with_suffix("").parts))
        for name in _imports(path):
            if name in modules and name != mine:
                graph[mine].add(name)
    return graph


def test_no_module_imports_one_that_imports_it_back():
    """Within a package too (checkpoint <-> checkpoint_shard, plots <-> plot_logits were such loops)."""
    assert loops(module_graph()) == []
