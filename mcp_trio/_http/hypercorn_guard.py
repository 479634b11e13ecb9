"""The guard of mcp_trio's hypercorn server: is the installed hypercorn the code our fixes were written for?

mcp_trio's hypercorn server (``hypercorn_server``) runs hypercorn 0.18.0's own ``worker_serve`` and
``TCPServer.run`` with subclasses of its classes; the subclasses override, call and read upstream
methods, attributes and constants.  A hypercorn whose code differs could silently undo a fix (a method
renamed, an exception no longer raised where we catch it), so the server refuses to start unless every
module in :data:`GUARDED_MODULES` is, in its code, hypercorn 0.18.0 (see :func:`check`).

What is compared is the code, not the text, so that a cosmetic difference (comments, docstrings,
formatting, an install that ships only ``.pyc`` files) does not count:

- where the module's source is installed (the usual case): its syntax tree, docstrings and positions
  left out, written down canonically (node types and non-empty fields only, so that the fields a newer
  Python adds with an empty default, ``type_params`` since 3.12, change nothing).  The same on every
  Python 3.11+: one table (``"ast"`` in :func:`expected`).
- where only bytecode is installed: the module's code objects, instruction by instruction, with names
  and constants resolved (not indexes), jumps and the exception table as instruction positions, no
  ``NOP``/``RESUME``/``CACHE``, no docstring: bytecode differs between Python versions, so there is one
  table per interpreter (``sys.implementation.cache_tag``: CPython 3.11, 3.12 and 3.13 here); on
  another one a bytecode-only install cannot be checked and is refused.

At every check, the guarded modules in memory must also be what their code defines
(:func:`_replaced_in_memory`), name by name, whatever an object's ``__module__`` says: once per process
the modules' code (from their installed files) is executed again, each in a namespace of its own, and
every name of each module in memory (functions, classes and each of their attributes, constants,
imported names) is compared with it: the very same object where the code takes it from elsewhere (an
import, a builtin), an object made by the same code where the module defines it (a function: an equal
code object, the module's globals, equal defaults, closure and attributes; a class: the same name,
metaclass and bases, and each attribute compared alike; a constant: the same type and value).  A name
added (a builtin shadowed, a method added to a class) or removed is a difference too.  Not compared:
hypercorn's dependencies, and the content of an ABC's registry.

Each module is compared item by item (``<module>`` for its top-level statements, each class body, each
function or method; nested functions, lambdas and comprehensions count as part of the item they are in),
so that a refusal names what differs.  The tables (:data:`FINGERPRINTS`, a JSON file shipped with the
package) are made by ``python -m mcp_trio._http.hypercorn_guard`` (on each interpreter, for its
bytecode table) from a hypercorn 0.18.0 install.
"""

from __future__ import annotations

import ast
import bisect
import dis
import functools
import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
import sys
import types
from collections.abc import Iterator
from typing import Any

from .hypercorn_memory import module_spec, replaced_in_memory

__all__ = ["GUARDED_MODULES", "HYPERCORN_VERSION", "HypercornGuardError", "check", "fingerprint"]

HYPERCORN_VERSION = "0.18.0"
"""The hypercorn release the fixes were written against (``pyproject.toml`` pins it)."""

GUARDED_MODULES = (
    "hypercorn.events",
    "hypercorn.protocol",
    "hypercorn.protocol.events",
    "hypercorn.protocol.h11",
    "hypercorn.protocol.h2",
    "hypercorn.protocol.http_stream",
    "hypercorn.protocol.ws_stream",
    "hypercorn.trio.run",
    "hypercorn.trio.task_group",
    "hypercorn.trio.tcp_server",
    "hypercorn.trio.worker_context",
    "hypercorn.utils",
)
"""Every hypercorn module whose code a connection of mcp_trio's server runs, and every module whose
names (classes, functions, constants, attributes) the subclasses and the fast path use: compared whole."""

_DOC = "__doc__"


class HypercornGuardError(RuntimeError):
    """The installed hypercorn is not the code mcp_trio's fixes were written for (the message says what
    differs and what to do)."""


# -- the syntax tree --------------------------------------------------------------------------------


def _strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        return body[1:] if isinstance(first.value.value, str) else body
    return body


def _canonical(node: Any) -> Any:
    """A node as nested tuples: its type and its non-empty fields (no positions, no docstrings)."""
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            value = getattr(node, name, None)
            if value is None or (isinstance(value, list) and not value):
                continue
            if name == "body" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                value = _strip_docstring(value)
            fields.append((name, _canonical(value)))
        return (type(node).__name__, tuple(fields))
    if isinstance(node, list):
        return tuple(_canonical(item) for item in node)
    return repr(node)


def _digest(value: Any) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def _add_item(items: dict[str, str], name: str, value: Any) -> None:
    """Record ``value``'s digest as item ``name`` (``name#2``, ``#3``... for a name defined again)."""
    key, n = name, 1
    while key in items:
        n += 1
        key = f"{name}#{n}"
    items[key] = _digest(value)


def _ast_items(source: str) -> dict[str, str]:
    items: dict[str, str] = {}
    add = functools.partial(_add_item, items)

    def scope(body: list[ast.stmt], prefix: str) -> list[Any]:
        """The items of a module or class body; returns what stays in the scope's own item."""
        rest: list[Any] = []
        for statement in body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                add(prefix + statement.name, _canonical(statement))
                rest.append(("def", statement.name))
            elif isinstance(statement, ast.ClassDef):
                name = prefix + statement.name
                inner = scope(_strip_docstring(statement.body), name + ".")
                head = [(field, _canonical(getattr(statement, field))) for field in ("bases", "keywords")]
                head.append(("decorators", _canonical(statement.decorator_list)))
                add(name, (head, inner))
                rest.append(("class", statement.name))
            else:
                rest.append(_canonical(statement))
        return rest

    add("<module>", scope(_strip_docstring(ast.parse(source).body), ""))
    return items


# -- the bytecode -----------------------------------------------------------------------------------

_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs) | frozenset(getattr(dis, "hasjump", ()))
_CONSTS = frozenset(dis.hasconst)
_NAMES = frozenset(dis.hasname)
_LOCALS = frozenset(dis.haslocal) | frozenset(dis.hasfree)
_COMPARES = frozenset(dis.hascompare)
_SKIPPED = frozenset({"NOP", "RESUME", "CACHE", "EXTENDED_ARG"})
_FUNCTION = 0x0001 | 0x0002  # CO_OPTIMIZED | CO_NEWLOCALS: a function's code, not a class or module body


def _instructions(code: types.CodeType) -> list[dis.Instruction]:
    kept: list[dis.Instruction] = []
    for instruction in dis.get_instructions(code):
        if instruction.opname in _SKIPPED:
            continue
        if (
            instruction.opname == "STORE_NAME"
            and instruction.argval == _DOC
            and kept
            and kept[-1].opcode in _CONSTS
            and isinstance(kept[-1].argval, str)
        ):
            kept.pop()  # a class's or module's docstring
            continue
        kept.append(instruction)
    return kept


def _constant(value: Any) -> Any:
    """A constant as a comparable value: a frozenset's order (string hashing is randomized per
    process) does not count."""
    if isinstance(value, tuple):
        return tuple(_constant(item) for item in value)
    if isinstance(value, frozenset):
        return ("frozenset", sorted(repr(_constant(item)) for item in value))
    return repr(value)


def _code_items(module_code: types.CodeType) -> dict[str, str]:
    items: dict[str, str] = {}
    add = functools.partial(_add_item, items)

    def describe(code: types.CodeType, is_item: bool) -> Any:
        """``code`` as a comparable value; in a module or class body, the functions and classes it
        defines are items of their own (named by qualified name) and only referred to here."""
        scope_body = not code.co_flags & _FUNCTION
        instructions = _instructions(code)
        offsets = [instruction.offset for instruction in instructions]

        def position(offset: int) -> int:
            return bisect.bisect_left(offsets, offset)

        out: list[Any] = []
        for instruction in instructions:
            op = instruction.opcode
            if op in _JUMPS:
                argument: Any = ("to", position(instruction.argval))
            elif op in _CONSTS:
                value = instruction.argval
                if isinstance(value, types.CodeType):
                    if scope_body and not value.co_name.startswith("<"):
                        qualname = value.co_qualname
                        add(qualname, describe(value, True))
                        argument = ("item", qualname)
                    else:
                        argument = ("code", describe(value, False))
                else:
                    argument = _constant(value)
            elif op in _NAMES or op in _COMPARES:
                argument = instruction.argrepr
            elif op in _LOCALS:
                argument = instruction.argval
            else:
                argument = (instruction.arg, instruction.argrepr)
            out.append((instruction.opname, argument))
        bytecode: Any = dis.Bytecode(code)
        handlers = [
            (position(entry.start), position(entry.end), position(entry.target), entry.depth, entry.lasti)
            for entry in bytecode.exception_entries  # 3.11+, not in typeshed
        ]
        parameters = (
            code.co_argcount
            + code.co_kwonlyargcount
            + bool(code.co_flags & 0x04)
            + bool(code.co_flags & 0x08)
        )
        header = (
            code.co_argcount,
            code.co_posonlyargcount,
            code.co_kwonlyargcount,
            code.co_flags,
            code.co_varnames[:parameters],
            code.co_freevars,
        )
        return (header, out, handlers)

    add("<module>", describe(module_code, True))
    return items


# -- the check --------------------------------------------------------------------------------------


def fingerprint(module: str, kind: str) -> dict[str, str] | None:
    """The items of ``module`` as ``kind`` says (``"ast"``, or a ``cache_tag`` for bytecode: only this
    interpreter's); None where that cannot be computed (no source; another interpreter's bytecode)."""
    loader = module_spec(module).loader
    if kind == "ast":
        source = loader.get_source(module)
        return None if source is None else _ast_items(source)
    if kind != sys.implementation.cache_tag:
        return None
    code = loader.get_code(module)
    return None if code is None else _code_items(code)


def _compare(module: str, found: dict[str, str], expected: dict[str, str]) -> list[str]:
    differ = [name for name in expected if name in found and found[name] != expected[name]]
    missing = [name for name in expected if name not in found]
    new = [name for name in found if name not in expected]
    out = []
    for label, names in (("changed", differ), ("missing", missing), ("new", new)):
        if names:
            out.append(f"{module}: {label} {', '.join(names)}")
    return out


FINGERPRINTS = "hypercorn_0_18_0.json"
"""The expected fingerprints (package data beside this module): ``{"ast" or a cache tag: {module:
{item: fingerprint}}}``.  Made from a hypercorn 0.18.0 install by running ``python -m
mcp_trio._http.hypercorn_guard > TAG.json`` on CPython 3.11, 3.12 and 3.13 (each prints the
syntax-tree table, the same on each, and its own bytecode table), then ``python -m
mcp_trio._http.hypercorn_guard merge A.json B.json C.json > mcp_trio/_http/hypercorn_0_18_0.json``.
Not edited by hand."""


@functools.cache
def expected() -> dict[str, dict[str, dict[str, str]]]:
    """The expected fingerprints (:data:`FINGERPRINTS`), read once per process."""
    text = importlib.resources.files(__package__).joinpath(FINGERPRINTS).read_text(encoding="utf-8")
    table: dict[str, dict[str, dict[str, str]]] = json.loads(text)
    return table


def _differences() -> Iterator[str]:
    table = expected()
    try:
        version = importlib.metadata.version("hypercorn")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - it is a dependency
        version = "unknown"
    if version != HYPERCORN_VERSION:
        yield f"hypercorn {version} is installed (its metadata), not {HYPERCORN_VERSION}"
    tag = sys.implementation.cache_tag
    for module in GUARDED_MODULES:
        try:
            found = fingerprint(module, "ast")
            kind = "ast"
            if found is None:
                kind = tag
                found = fingerprint(module, tag) if tag in table else None
        except (ImportError, SyntaxError, ValueError) as exc:
            yield f"{module}: cannot be read ({type(exc).__name__}: {exc})"
            continue
        if found is None:
            yield f"{module}: no source installed, and no bytecode fingerprint for {tag}"
            continue
        yield from _compare(module, found, table[kind].get(module, {}))


@functools.cache
def _installed() -> tuple[str, ...]:
    return tuple(_differences())


def check() -> str | None:
    """None when the installed hypercorn is the 0.18.0 code the fixes were written for, and the guarded
    modules in memory are what that code defines; otherwise what differs, one line per module and kind
    (each line names the items that differ).  The installed code is read (and executed again to
    compare) once per process; what is in memory is compared at each call (about 10 ms)."""
    lines = [*_installed(), *replaced_in_memory(GUARDED_MODULES)]
    return "\n".join(lines) if lines else None


def _table() -> dict[str, dict[str, dict[str, str]]]:
    """The expected fingerprints of the installed hypercorn: syntax trees and this interpreter's
    bytecode (for :data:`FINGERPRINTS`)."""
    tag = sys.implementation.cache_tag
    table: dict[str, dict[str, dict[str, str]]] = {"ast": {}, tag: {}}
    for module in GUARDED_MODULES:
        for kind in ("ast", tag):
            found = fingerprint(module, kind)
            assert found is not None, (module, kind)
            table[kind][module] = found
    return table


if __name__ == "__main__":  # pragma: no cover - makes the tables
    if sys.argv[1:2] == ["merge"]:
        merged: dict[str, dict[str, dict[str, str]]] = {}
        for path in sys.argv[2:]:
            with open(path) as file:
                for kind, table in json.load(file).items():
                    if merged.setdefault(kind, table) != table:
                        raise SystemExit(f"{path}: its {kind} table differs from an earlier one")
        json.dump(merged, sys.stdout, indent=1, sort_keys=True)
    else:
        json.dump(_table(), sys.stdout, indent=1, sort_keys=True)
    print()
