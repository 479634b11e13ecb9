"""The package's layout holds: every module is small enough to read, no two modules import each other
at run time, the front door is small and light, and the layering contracts in pyproject.toml pass."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mcp_trio"
MAX_LINES = 500
MAX_FRONT_DOOR = 25
PUBLIC_MODULES = [
    "mcp_trio", "mcp_trio.server", "mcp_trio.client", "mcp_trio.errors", "mcp_trio.auth", "mcp_trio.redis",
    "mcp_trio.testing",
]


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): count
        for path in _modules().values()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _runtime_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports when it is imported (module level, outside
    ``if TYPE_CHECKING:``; imports inside functions run later and cannot form an import cycle)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                test = node.test
                checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
                )
                if not checking:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in known:
                        found.add(alias.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module in known:
                    found.add(module)
                for alias in node.names:
                    if f"{module}.{alias.name}" in known:
                        found.add(f"{module}.{alias.name}")

    visit(tree.body)
    found.discard(name)
    return found


def test_no_runtime_import_cycle() -> None:
    modules = _modules()
    known = set(modules)
    graph = {name: _runtime_imports(name, path, known) for name, path in modules.items()}
    # A package's __init__ runs before any of its submodules: importing a.b imports a first.  That edge
    # is how Python works, not a choice of ours, so only the import statements count.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def strongconnect(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                strongconnect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:  # (restored: a test that relies on the default limit may run after this one, in this process)
        for name in sorted(graph):
            if name not in index:
                strongconnect(name)
    finally:
        sys.setrecursionlimit(limit)
    assert not cycles, f"modules that import each other at run time: {cycles}"


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_front_door_is_small() -> None:
    """At most 25 names (that each public module's ``__all__`` is sorted and resolves is
    tests/server/test_public_api.py's)."""
    import mcp_trio

    assert len(mcp_trio.__all__) <= MAX_FRONT_DOOR, f"{len(mcp_trio.__all__)} names: {mcp_trio.__all__}"


def test_no_public_name_shadows_trio() -> None:
    import trio

    for module in PUBLIC_MODULES:
        imported = __import__(module, fromlist=["__all__"])
        shadowing = sorted(set(imported.__all__) & set(dir(trio)))
        assert not shadowing, f"{module} exports names that trio has: {shadowing}"


def test_serving_loads_no_hypercorn_until_asked() -> None:
    """The front door and its ``serve`` entry point load no HTTP/2 or hypercorn code: the embedded h11
    server is served without them, and hypercorn is imported only when it is the server asked for."""
    out = _run(
        "import sys, mcp_trio\n"
        "from mcp_trio import serve, MCPApp, MCPServer\n"
        "import mcp_trio._http.h11_server\n"
        "heavy = ('hypercorn', 'h2', 'priority', 'hpack')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    assert out.strip() == "[]", out


def test_import_contracts_pass() -> None:
    lint = shutil.which("lint-imports")
    assert lint is not None, "import-linter is in the dev group"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [lint, "--no-cache"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
