"""The package's layout holds: the folders show the sides, nothing imports in a circle,
and the client never loads the daemon. Read from the source (ast), not by importing."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pgworkerd"
SIDES = {"client", "storage", "config", "cli", "supervisor", "worker", "housekeeping", "ipc"}
DAEMON = ("pgworkerd.supervisor", "pgworkerd.worker", "pgworkerd.housekeeping", "pgworkerd.ipc")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _module_level_imports(path: Path, name: str, known: set[str]) -> Iterator[str]:
    """Modules of the package that `name` imports when it loads (not in functions, not
    under TYPE_CHECKING)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod.
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            if target in known and target != name:
                yield target


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {}
    for name, path in modules.items():
        edges = set(_module_level_imports(path, name, known))
        # Loading a module loads its packages' __init__ first.
        parent = name.rpartition(".")[0]
        while parent and parent != "pgworkerd":
            edges.add(parent)
            parent = parent.rpartition(".")[0]
        edges.discard(name)
        graph[name] = {e for e in edges if not name.startswith(e + ".")}
    return graph


def test_no_module_level_import_cycle() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_at_most_ten_modules_at_the_top_and_the_rest_in_the_folders_of_their_side() -> None:
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(top) <= 10, top
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders >= SIDES, SIDES - folders


def test_the_client_side_never_imports_the_daemon() -> None:
    graph = _graph()
    # The public names of pgworkerd/__init__ load on first use (pgworkerd/__init__.pyi):
    # what they load starts from their modules, not from the package's own imports.
    client = [m for m in graph if m.startswith("pgworkerd.client")]
    reached, todo = set(), ["pgworkerd", *client, *_public_names().values()]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph[module])
    assert sorted(m for m in reached if m.startswith(DAEMON)) == []


def test_statements_run_from_storage_only() -> None:
    """Every `execute` of a statement is in storage/; the housekeeping session's LISTEN
    on connecting (a statement of storage/channels.py) is the one exception."""
    outside = []
    for name, path in _modules().items():
        if name.startswith("pgworkerd.storage"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("execute", "executemany"):
                outside.append(f"{name}:{node.lineno}")
    assert [at for at in outside if not at.startswith("pgworkerd.housekeeping.session:")] == []


def _public_names() -> dict[str, str]:
    """Each public name of the package and the module pgworkerd/__init__.pyi loads it from."""
    names = {}
    for node in ast.parse((PACKAGE / "__init__.pyi").read_text()).body:
        if not isinstance(node, ast.ImportFrom):
            continue  # the docstring, __all__
        assert node.level == 1, ast.unparse(node)  # what lazy_loader can read
        names.update({alias.name: f"pgworkerd.{node.module}" for alias in node.names})
    return names


def test_every_public_name_loads_from_the_module_the_package_says() -> None:
    """`import pgworkerd` loads none of them (pgworkerd/__init__.pyi); each name of
    __all__ is one the stub names, and is its module's object."""
    import importlib

    import pgworkerd

    exports = _public_names()
    assert sorted(pgworkerd.__all__) == sorted(exports)
    for name, module in exports.items():
        assert getattr(pgworkerd, name) is getattr(importlib.import_module(module), name)
    assert set(pgworkerd.__all__) <= set(dir(pgworkerd))
    assert not hasattr(pgworkerd, "no_such_name")
