"""The hypercorn guard: mcp_trio's hypercorn server refuses a hypercorn whose code is not the one its fixes
were written for, and does not mind one that differs only in comments, docstrings, formatting or in
shipping bytecode only.

Each case runs a fresh interpreter with an edited copy of the installed hypercorn first on its path
(the installed one is never touched): ``mcp-trio demo``, ``serve()`` and the guard itself."""

from __future__ import annotations

import ast
import compileall
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import hypercorn
import pytest
import trio

from mcp_trio import MCPApp, MCPServer, serve
from mcp_trio._http import (
    hypercorn_close_wait,
    hypercorn_fast_path,
    hypercorn_guard,
    hypercorn_protocols,
    hypercorn_server,
)
from mcp_trio._http.hypercorn_guard import GUARDED_MODULES, HypercornGuardError

CLI = [sys.executable, "-c", "from mcp_trio._cli import main; main()"]
INSTALLED = Path(hypercorn.__file__).parent
TCP_SERVER = "trio/tcp_server.py"
POST = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def replace(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def cosmetic(text: str) -> str:
    """Comments, docstrings (changed, added) and formatting of hypercorn/trio/tcp_server.py."""
    text = '"""A module docstring that 0.18.0 does not have."""\n' + text
    text = replace(text, "class TCPServer:\n", 'class TCPServer:\n    """A class docstring added."""\n\n')
    text = replace(
        text,
        "    async def _close(self) -> None:\n",
        '    async def _close(self) -> None:\n        """A docstring added."""\n        # and a comment\n',
    )
    text = replace(text, "# They're already gone, nothing to do", "# Gone already: a comment reworded")
    indent = " " * 16
    return replace(
        text,
        f"except (\n{indent}trio.ClosedResourceError,\n{indent}trio.BrokenResourceError,\n"
        f"{indent}trio.TooSlowError,\n{indent[4:]}):",
        "except (trio.ClosedResourceError, trio.BrokenResourceError, trio.TooSlowError):  # joined",
    )


def code_change(text: str) -> str:
    """One exception fewer caught in ``TCPServer._close`` (the kind of change that undoes a fix)."""
    return replace(
        text,
        "            trio.BusyResourceError,\n            trio.ClosedResourceError,\n        ):",
        "            trio.ClosedResourceError,\n        ):",
    )


def hypercorn_copy(
    tmp_path: Path, edit: Callable[[str], str], *, bytecode_only: bool = False
) -> dict[str, str]:
    """An environment whose interpreter imports an edited copy of the installed hypercorn."""
    site = tmp_path / "site"
    shutil.copytree(INSTALLED, site / "hypercorn", ignore=shutil.ignore_patterns("__pycache__"))
    target = site / "hypercorn" / TCP_SERVER
    target.write_text(edit(target.read_text()))
    if bytecode_only:  # a .pyc-only install: each module's legacy .pyc beside where its .py was
        assert compileall.compile_dir(site / "hypercorn", legacy=True, quiet=1)
        for source in (site / "hypercorn").rglob("*.py"):
            source.unlink()
    path = [str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONDONTWRITEBYTECODE": "1"}


def guard_verdict(env: dict[str, str]) -> tuple[str, str | None]:
    """(where hypercorn was imported from, what the guard says) in a fresh interpreter."""
    script = (
        "import json, hypercorn\n"
        "from mcp_trio._http.hypercorn_server import hypercorn_fixes_available\n"
        "print(json.dumps([hypercorn.__file__, hypercorn_fixes_available()]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    where, reason = json.loads(done.stdout)
    return where, reason


@pytest.mark.parametrize("bytecode_only", [False, True], ids=["source", "bytecode-only"])
def test_comments_docstrings_and_formatting_are_not_a_difference(tmp_path: Path, bytecode_only: bool) -> None:
    env = hypercorn_copy(tmp_path, cosmetic, bytecode_only=bytecode_only)
    where, reason = guard_verdict(env)
    assert where.startswith(str(tmp_path)), where
    assert reason is None, reason


@pytest.mark.parametrize("bytecode_only", [False, True], ids=["source", "bytecode-only"])
def test_a_code_change_is_named(tmp_path: Path, bytecode_only: bool) -> None:
    env = hypercorn_copy(tmp_path, code_change, bytecode_only=bytecode_only)
    where, reason = guard_verdict(env)
    assert where.startswith(str(tmp_path)), where
    assert reason == "hypercorn.trio.tcp_server: changed TCPServer._close", reason


def start_demo(env: dict[str, str], *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "demo", "--bind", "127.0.0.1:0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    if proc.poll() is None:
        proc.terminate()
    try:
        _, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, stderr


async def test_the_demo_with_a_cosmetically_changed_hypercorn_serves_with_its_fixes(tmp_path: Path) -> None:
    # The copy of the report: one comment changed in TCPServer._close.  It serves with mcp_trio's fixes:
    # three h2c POSTs of 3 MB to a 404 path, which end a server running hypercorn as shipped
    # (request data after its response: KeyError), leave it serving.
    env = hypercorn_copy(
        tmp_path, lambda text: replace(text, "# They're already gone, nothing to do", "# gone already")
    )
    proc = await trio.to_thread.run_sync(lambda: start_demo(env))
    try:
        assert proc.stdout is not None
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert line.startswith("mcp-trio: serving on http://127.0.0.1:"), line
        url = line.split()[-1]
        base = url.rsplit("/", 1)[0]
        async with httpx.AsyncClient(http1=False, http2=True, timeout=10) as client:
            for _ in range(3):
                response = await client.post(base + "/nothing-here", content=b"x" * 3_000_000)
                assert response.status_code == 404
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(url, json=INIT, headers=POST)
            assert response.status_code == 200
        assert proc.poll() is None
    finally:
        code, stderr = await trio.to_thread.run_sync(lambda: stop(proc))
    assert code == 0, stderr
    assert "Traceback" not in stderr, stderr


async def test_the_demo_refuses_a_changed_hypercorn_unless_allowed(tmp_path: Path) -> None:
    env = hypercorn_copy(tmp_path, code_change)
    refused = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [*CLI, "demo", "--bind", "127.0.0.1:0"], env=env, capture_output=True, text=True, timeout=60
        )
    )
    code, stderr = refused.returncode, refused.stderr
    assert refused.stdout == "", refused.stdout  # nothing served
    assert code == 3, stderr
    assert "refuses to serve" in stderr, stderr
    assert "hypercorn.trio.tcp_server: changed TCPServer._close" in stderr, stderr
    assert "hypercorn==0.18.0" in stderr and "--allow-stock-hypercorn" in stderr, stderr
    assert "Traceback" not in stderr, stderr

    # Allowed: served with hypercorn as shipped, and a warning that says so and what differs.
    proc = await trio.to_thread.run_sync(lambda: start_demo(env, "--allow-stock-hypercorn"))
    try:
        assert proc.stdout is not None
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert line.startswith("mcp-trio: serving on http://127.0.0.1:"), line
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(line.split()[-1], json=INIT, headers=POST)
            assert response.status_code == 200
    finally:
        code, stderr = await trio.to_thread.run_sync(lambda: stop(proc))
    assert code == 0, stderr
    assert "WITHOUT MCP_TRIO'S FIXES" in stderr, stderr
    assert "changed TCPServer._close" in stderr and "CLOSE_WAIT" in stderr, stderr


SERVE = """
import sys, trio
from mcp_trio import MCPApp, MCPServer, serve
from mcp_trio.server import hypercorn_config

async def main(allow: bool) -> None:
    app = MCPApp(MCPServer("guarded"))
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(lambda task_status: serve(
            app, "127.0.0.1", 0, task_status=task_status, allow_stock_hypercorn=allow
        ))
        print("served", urls, flush=True)
        nursery.cancel_scope.cancel()

try:
    trio.run(main, sys.argv[1] == "allow")
except BaseException as exc:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    print(type(exc).__name__, exc, flush=True)
"""


def test_serve_raises_on_a_changed_hypercorn_unless_allowed(tmp_path: Path) -> None:
    env = hypercorn_copy(tmp_path, code_change)

    def run(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", SERVE, mode], env=env, capture_output=True, text=True, timeout=60
        )

    refused = run("refuse")
    assert refused.stdout.startswith("HypercornGuardError mcp_trio refuses to serve"), refused
    assert "hypercorn.trio.tcp_server: changed TCPServer._close" in refused.stdout
    assert "allow_stock_hypercorn=True" in refused.stdout

    allowed = run("allow")
    assert re.match(r"served \['http://127\.0\.0\.1:\d+/mcp'\]", allowed.stdout), allowed
    assert "WITHOUT MCP_TRIO'S FIXES" in allowed.stderr


async def test_serve_refuses_before_binding_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    # In process: the expected fingerprint of one item changed (as if the code had), the guard re-run.
    items = hypercorn_guard.expected()["ast"]["hypercorn.protocol.h2"]
    monkeypatch.setitem(items, "H2Protocol._handle_events", "0" * 16)
    hypercorn_guard._installed.cache_clear()
    try:
        with pytest.raises(
            HypercornGuardError, match=r"hypercorn\.protocol\.h2: changed H2Protocol\._handle_events"
        ):
            await serve(MCPApp(MCPServer("refused")), "127.0.0.1", 0)
    finally:
        monkeypatch.undo()
        hypercorn_guard._installed.cache_clear()
    assert hypercorn_guard.check() is None


# -- what is in memory ------------------------------------------------------------------------------

TCP_SERVER_REPLACED = (  # run imported the class tcp_server has no longer
    "hypercorn.trio.run: replaced in memory TCPServer\n"
    "hypercorn.trio.tcp_server: replaced in memory TCPServer"
)
BYPASSES = {
    "a method": (
        "from hypercorn.protocol.h2 import H2Protocol\n"
        "async def _handle_events(self, events): pass\n"
        "H2Protocol._handle_events = _handle_events",
        "hypercorn.protocol.h2: replaced in memory H2Protocol._handle_events",
    ),
    "a module-level function": (
        "import hypercorn.trio.task_group as m\nasync def _handle(*args): pass\nm._handle = _handle",
        "hypercorn.trio.task_group: replaced in memory _handle",
    ),
    "a function re-exported under the original __module__": (
        "import hypercorn.protocol.http_stream as m\n"
        "def build_and_validate_headers(headers): return []\n"
        "build_and_validate_headers.__module__ = 'hypercorn.utils'\n"
        "m.build_and_validate_headers = build_and_validate_headers",
        "hypercorn.protocol.http_stream: replaced in memory build_and_validate_headers",
    ),
    "a function replaced at its home under its own names": (
        "import hypercorn.utils as m\n"
        "def build_and_validate_headers(headers): return []\n"
        "build_and_validate_headers.__module__ = 'hypercorn.utils'\n"
        "m.build_and_validate_headers = build_and_validate_headers",
        # the modules that imported the original now hold another function than utils has
        "hypercorn.protocol.http_stream: replaced in memory build_and_validate_headers\n"
        "hypercorn.protocol.ws_stream: replaced in memory build_and_validate_headers\n"
        "hypercorn.utils: replaced in memory build_and_validate_headers",
    ),
    "a whole class": (
        "import hypercorn.trio.tcp_server as m\nclass TCPServer(m.TCPServer): pass\nm.TCPServer = TCPServer",
        TCP_SERVER_REPLACED,
    ),
    "a whole class under the original names": (
        "import hypercorn.trio.tcp_server as m\n"
        "class TCPServer(m.TCPServer): __module__ = m.__name__\n"
        "m.TCPServer = TCPServer",
        TCP_SERVER_REPLACED,
    ),
    "a constant": (
        "import hypercorn.trio.tcp_server as m\nm.MAX_RECV = 2 ** 10",
        "hypercorn.trio.tcp_server: replaced in memory MAX_RECV",
    ),
    "a constant changed in place": (
        "import hypercorn.protocol.http_stream as m\nm.TRAILERS_VERSIONS.add('1.1')",
        "hypercorn.protocol.http_stream: replaced in memory TRAILERS_VERSIONS",
    ),
    "a function's __code__": (
        "import hypercorn.utils as m\nm.valid_server_name.__code__ = (lambda config, request: True).__code__",
        "hypercorn.utils: replaced in memory valid_server_name",
    ),
    "a function's defaults": (
        "import hypercorn.protocol as m\nm.ProtocolWrapper.__init__.__defaults__ = ('h2',)",
        "hypercorn.protocol: replaced in memory ProtocolWrapper.__init__",
    ),
    "a dataclass's field default": (
        "import dataclasses, hypercorn.events as m\n"
        "m.RawData.__dataclass_fields__['address'].default = ('10.0.0.1', 1)",
        "hypercorn.events: replaced in memory RawData.__dataclass_fields__",
    ),
    "a class attribute added": (
        "import hypercorn.protocol.h11 as m\nm.H11Protocol.__getattr__ = lambda self, name: None",
        "hypercorn.protocol.h11: added in memory H11Protocol.__getattr__",
    ),
    "a builtin shadowed": (
        "import hypercorn.trio.tcp_server as m\nm.min = max",
        "hypercorn.trio.tcp_server: added in memory min",
    ),
    "a module's builtins": (
        "import builtins, hypercorn.utils as m\nm.__builtins__ = {**vars(builtins), 'len': lambda value: 0}",
        "hypercorn.utils: replaced in memory __builtins__",
    ),
    "a name removed": (
        "import hypercorn.protocol.h2 as m\ndel m.BUFFER_LOW_WATER",
        "hypercorn.protocol.h2: removed in memory BUFFER_LOW_WATER",
    ),
}
"""Monkeypatches of the guarded modules (code run in a fresh interpreter) and what the guard says."""

IN_MEMORY = """
import json, os, sys
from mcp_trio._http.hypercorn_server import hypercorn_fixes_available

if sys.argv[1] == "later":  # the guard has seen the modules as imported, before the patch
    assert hypercorn_fixes_available() is None
verdicts = {}
for name, patch in json.loads(sys.argv[2]).items():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # each patch in a process of its own
        try:
            exec(patch, {})
            os.write(write, json.dumps(hypercorn_fixes_available()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        verdicts[name] = json.loads(pipe.read() or '"the patch failed"')
    os.waitpid(pid, 0)
verdicts["untouched"] = hypercorn_fixes_available()
print(json.dumps(verdicts))
"""


@pytest.mark.parametrize("when", ["first", "later"], ids=["patched-before-the-first-check", "patched-later"])
def test_each_monkeypatch_of_the_guarded_modules_is_named(when: str) -> None:
    # A library that patches hypercorn when it is imported (before mcp_trio's first check), or code
    # that patches it while the process runs: either way the guard names what differs.
    patches = {name: patch for name, (patch, _) in BYPASSES.items()}
    done = subprocess.run(
        [sys.executable, "-c", IN_MEMORY, when, json.dumps(patches)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    verdicts = json.loads(done.stdout)
    assert verdicts == {**{name: said for name, (_, said) in BYPASSES.items()}, "untouched": None}


async def test_serve_refuses_a_patched_hypercorn_before_binding() -> None:
    # The port is held by a listening socket of ours: a server that tried to bind it would fail with
    # BindError; the guard's refusal comes first.
    from hypercorn.trio import tcp_server

    held = trio.socket.socket()
    async with trio.open_nursery():
        await held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        try:
            tcp_server.MAX_RECV = 2**10
            with pytest.raises(HypercornGuardError, match=r"tcp_server: replaced in memory MAX_RECV\n"):
                await serve(MCPApp(MCPServer("refused")), "127.0.0.1", port)
        finally:
            tcp_server.MAX_RECV = 2**16
            held.close()
    assert hypercorn_guard.check() is None


async def test_a_patched_hypercorn_is_served_as_shipped_when_allowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from hypercorn.trio import tcp_server

    tcp_server.MAX_RECV = 2**15  # read by the read loop as shipped
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                app = MCPApp(MCPServer("allowed"))
                urls = await nursery.start(
                    lambda task_status: serve(
                        app, "127.0.0.1", 0, task_status=task_status, allow_stock_hypercorn=True
                    )
                )
                async with httpx.AsyncClient(timeout=10) as client:
                    response = await client.post(urls[0], json=INIT, headers=POST)
                assert response.status_code == 200, response.text
                nursery.cancel_scope.cancel()
    finally:
        tcp_server.MAX_RECV = 2**16
    warnings = [r.getMessage() for r in caplog.records if "WITHOUT MCP_TRIO'S FIXES" in r.getMessage()]
    assert len(warnings) == 1 and "tcp_server: replaced in memory MAX_RECV" in warnings[0], warnings
    assert hypercorn_guard.check() is None


async def test_hypercorn_as_served_is_still_its_own_code() -> None:
    # What runs is compared with the code (not the file's text): after requests ran hypercorn's
    # functions (and the interpreter specialised their bytecode), nothing differs.
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            app = MCPApp(MCPServer("served"))
            urls = await nursery.start(
                lambda task_status: serve(app, "127.0.0.1", 0, task_status=task_status)
            )
            async with httpx.AsyncClient(timeout=10) as client:
                for _ in range(20):
                    response = await client.post(urls[0], json=INIT, headers=POST)
                    assert response.status_code == 200, response.text
            nursery.cancel_scope.cancel()
    assert hypercorn_guard.check() is None


def test_the_installed_hypercorn_is_the_guarded_code() -> None:
    assert hypercorn_guard.check() is None
    # Every table covers the same modules and the interpreters CI and users run.
    expected = hypercorn_guard.expected()

    assert set(expected) >= {"ast", "cpython-311", "cpython-312", "cpython-313"}
    for table in expected.values():
        assert sorted(table) == sorted(GUARDED_MODULES)
    assert sys.implementation.cache_tag in expected
    for module in GUARDED_MODULES:
        assert (
            hypercorn_guard.fingerprint(module, sys.implementation.cache_tag)
            == (expected[sys.implementation.cache_tag][module])
        )


# -- what the subclasses use is guarded ------------------------------------------------------------

OURS = (hypercorn_server, hypercorn_protocols, hypercorn_close_wait, hypercorn_fast_path)
NOT_GUARDED = {
    "hypercorn.config": "the user's Config, read and passed through as hypercorn does",
    "hypercorn.trio": "hypercorn.trio.run (guarded) as a module, imported from its package",
}


def module_tree(module: object) -> ast.Module:
    return ast.parse(Path(module.__file__).read_text())


def test_every_hypercorn_name_used_comes_from_a_guarded_module() -> None:
    used: dict[str, set[str]] = {}
    for module in OURS:
        for node in ast.walk(module_tree(module)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hypercorn"):
                used.setdefault(node.module or "", set()).update(alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                used.update({alias.name: set() for alias in node.names if alias.name.startswith("hypercorn")})
    assert used, "no hypercorn import found: the check below would check nothing"
    for name, names in used.items():
        if name in NOT_GUARDED:
            continue
        assert name in GUARDED_MODULES, name
        for imported in names:  # and each name is that module's own, or from another guarded module
            value = getattr(sys.modules[name], imported)
            home = getattr(value, "__module__", name)
            assert home in GUARDED_MODULES or not home.startswith("hypercorn"), (name, imported, home)


def upstream_attributes(cls: type) -> set[str]:
    """Every attribute hypercorn's ``cls`` and its bases define: class members, and ``self.X`` set in
    their methods (read from the source of the guarded modules)."""
    names: set[str] = set()
    for base in cls.__mro__:
        if not base.__module__.startswith("hypercorn"):
            continue  # object, abc.ABC
        assert base.__module__ in GUARDED_MODULES, base
        names.update(vars(base))
        names.update(getattr(base, "__dataclass_fields__", {}))
        tree = ast.parse(Path(sys.modules[base.__module__].__file__ or "").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == base.__name__:
                for inner in ast.walk(node):
                    if (
                        isinstance(inner, ast.Attribute)
                        and isinstance(inner.value, ast.Name)
                        and inner.value.id == "self"
                        and isinstance(inner.ctx, ast.Store)
                    ):
                        names.add(inner.attr)
    return names


def self_attributes(node: ast.ClassDef) -> Iterator[tuple[str, bool]]:
    """(name, stored) for each ``self.X`` and ``super().X`` in the methods of ``node``."""
    for inner in ast.walk(node):
        if not isinstance(inner, ast.Attribute):
            continue
        if isinstance(inner.value, ast.Name) and inner.value.id == "self":
            yield inner.attr, isinstance(inner.ctx, ast.Store)
        elif (
            isinstance(inner.value, ast.Call)
            and isinstance(inner.value.func, ast.Name)
            and inner.value.func.id == "super"
        ):
            yield inner.attr, False


def test_every_upstream_attribute_the_subclasses_use_is_guarded() -> None:
    """A name our subclass reads and does not define itself is defined by the guarded upstream class:
    a rename upstream changes a guarded item, so it cannot pass unnoticed."""
    checked = 0
    for module in OURS:
        for node in ast.walk(module_tree(module)):
            if not isinstance(node, ast.ClassDef):
                continue
            cls = getattr(module, node.name, None)
            if not isinstance(cls, type):
                continue
            upstream = [base for base in cls.__mro__ if base.__module__.startswith("hypercorn")]
            if not upstream:
                continue
            defined = upstream_attributes(upstream[0])
            ours = {name for base in cls.__mro__ if base not in upstream for name in vars(base)}
            ours |= {
                name
                for base in cls.__mro__
                if base not in upstream
                for name in getattr(base, "__annotations__", {})
            }
            ours |= {name for name, stored in self_attributes(node) if stored}
            for name, _ in self_attributes(node):
                if name not in ours:
                    assert name in defined, f"{cls.__qualname__} uses {name}, not defined upstream"
                    checked += 1
    assert checked > 30, checked


def test_every_upstream_attribute_read_through_an_annotated_parameter_is_guarded() -> None:
    """The same for functions' parameters annotated with a hypercorn class (``stream: WSStream``)."""
    checked = 0
    for module in OURS:
        for node in ast.walk(module_tree(module)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            typed = {}
            for argument in node.args.args + node.args.kwonlyargs:
                annotation = argument.annotation
                cls = getattr(module, annotation.id, None) if isinstance(annotation, ast.Name) else None
                concrete = isinstance(cls, type) and not any(
                    sub.__module__.startswith("hypercorn") for sub in cls.__subclasses__()
                )  # a base class (Event) is narrowed by isinstance in the body: not checked
                if concrete and cls.__module__.startswith("hypercorn"):  # type: ignore[union-attr]
                    typed[argument.arg] = upstream_attributes(cls)
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Attribute)
                    and isinstance(inner.value, ast.Name)
                    and inner.value.id in typed
                ):
                    assert inner.attr in typed[inner.value.id], (node.name, inner.value.id, inner.attr)
                    checked += 1
    assert checked >= 3, checked


def test_what_is_rebound_is_what_upstream_looks_up() -> None:
    # _rebind refuses a name the function does not use (a fix that would be silently off).
    with pytest.raises(HypercornGuardError, match="does not use NotAName"):
        hypercorn_server._rebind(hypercorn_server.TCPServer.run, NotAName=object)
    assert hypercorn_server._worker(True, 1.0) is not None
