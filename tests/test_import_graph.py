"""The layering of src/: no import cycle, and the engine never imports the runtime or the CLI.

Every import counts, those inside functions and under TYPE_CHECKING too; importing
`a.b.c` also imports the packages `a` and `a.b`, except the importer's own ancestors
(a module is loaded after its package). Naming one's own package explicitly counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import the_loop

SRC = Path(the_loop.__file__).parent
ENGINE = ("the_loop.hooks", "the_loop.sdk")
NOT_FROM_ENGINE = ("the_loop.runtime", "the_loop.cli")


def _modules(src: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for file in src.rglob("*.py"):
        parts = list(file.relative_to(src.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = file
    return out


def _ancestors(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """module → the modules of the package at `src` it imports (directly)."""
    modules = _modules(src)
    graph: dict[str, set[str]] = {}
    for name, file in modules.items():
        package = name if file.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in modules else base)
        edges: set[str] = set()
        for target in targets:
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target not in modules:
                continue  # not ours
            # The module named is an edge even when it is the importer's own package
            # (`import the_loop.cli` from the_loop.cli.app); the packages Python loads on
            # the way to it are edges unless they already contain the importer.
            if target != name:
                edges.add(target)
            edges.update(dep for dep in _ancestors(target)
                         if dep != name and dep not in _ancestors(name))
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as a path (first module repeated at the end), or []."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_the_walker_finds_a_cycle_through_an_import_inside_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import b\n")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub.b import g\n    return g\n")
    (pkg / "sub" / "b.py").write_text("from .. import a\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"}  # the package comes with its module
    assert graph["pkg.sub.b"] == {"pkg.a"}  # a relative import; its own package is not an edge
    (pkg / "sub" / "c.py").write_text("import pkg.sub\n")
    assert import_graph(pkg)["pkg.sub.c"] == {"pkg.sub"}  # naming its package is one
    assert find_cycle(graph) in (["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.a"],
                                 ["pkg.a", "pkg.sub.b", "pkg.a"])


def test_src_has_no_import_cycle() -> None:
    assert find_cycle(import_graph()) == []


def test_the_engine_imports_nothing_from_the_runtime_or_the_cli() -> None:
    bad = sorted(
        f"{module} imports {dep}"
        for module, deps in import_graph().items() if module.startswith(ENGINE)
        for dep in deps if dep.startswith(NOT_FROM_ENGINE)
    )
    assert bad == []


COMPILER = "the_loop.jmes"


def test_the_jmespath_compiler_imports_nothing_of_ours_outside_itself() -> None:
    """The compiler stands alone: the policy functions are passed in (`jmes.Compiler`)."""
    def inside(module: str) -> bool:
        return module == COMPILER or module.startswith(COMPILER + ".")

    bad = sorted(
        f"{module} imports {dep}"
        for module, deps in import_graph().items() if inside(module)
        for dep in deps if not inside(dep)
    )
    assert bad == []


def test_the_runtime_imports_nothing_from_the_hook_server() -> None:
    """The loop reaches the decision record through `the_loop.decisions`, metrics through
    `the_loop.metrics` and JSON reading through `the_loop.jsonread`: never the hook server's
    modules (issue 32)."""
    bad = sorted(
        f"{module} imports {dep}"
        for module, deps in import_graph().items() if module.startswith("the_loop.runtime")
        for dep in deps if dep.startswith("the_loop.hooks.serving")
    )
    # (The dialect, which replay asks what facts an old record lacks, is the engine's: the
    # client and the server both speak it.)
    assert bad == []


def test_the_engine_imports_nothing_from_the_hook_server() -> None:
    """The catalog, the chain and the other loop's dialect are the engine's; the hook server
    is built on them, never the other way round."""
    bad = sorted(
        f"{module} imports {dep}"
        for module, deps in import_graph().items() if module.startswith("the_loop.hooks.engine")
        for dep in deps if dep.startswith("the_loop.hooks.serving")
    )
    assert bad == []


def test_the_decision_record_depends_on_neither_the_runtime_nor_the_hook_server() -> None:
    """One home for the record: its package is used by both halves and uses neither's
    delivery or serving code."""
    bad = sorted(
        f"{module} imports {dep}"
        for module, deps in import_graph().items() if module.startswith("the_loop.decisions")
        for dep in deps if dep.startswith(("the_loop.runtime", "the_loop.hooks.serving",
                                           "the_loop.cli", "the_loop.console"))
    )
    assert bad == []


def test_no_module_tells_a_drivers_errors_apart_by_its_module_name() -> None:
    """psycopg's and sqlite3's errors are converted once (`sqldb.converted`)."""
    found = sorted(str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
                   if "__module__" in path.read_text(encoding="utf-8")
                   and "psycopg" in path.read_text(encoding="utf-8"))
    assert found == []
