"""The in-memory half of the hypercorn guard (:mod:`.hypercorn_guard`): the guarded modules as they are
in memory, compared name by name with what their own code defines when executed again in a namespace
of its own (see the guard's module docstring for what is compared and why)."""

from __future__ import annotations

import abc
import builtins
import functools
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["module_spec", "replaced_in_memory"]


def module_spec(module: str) -> Any:
    """The import system's spec of ``module``, with a loader (ImportError without)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module {module}")
    return spec


_SET_BY_IMPORT = frozenset({"__builtins__", "__cached__", "__file__", "__loader__", "__path__", "__spec__"})
"""A module's attributes set by the import system, not by its code: not compared (``__builtins__`` is
checked on its own)."""

_MACHINERY = frozenset({"dataclasses", "enum"})
"""Modules whose objects a guarded module's class statements make afresh each time (a dataclass's fields
and parameters, an enum's descriptors): compared by content, as what the guarded modules define."""

_SCALARS = frozenset({type(None), bool, int, str, bytes, type(...), type(NotImplemented)})
_ABC_DATA = type(vars(abc.ABC)["_abc_impl"])
"""An ABC's registry and caches (a C object without readable content): compared by type only."""


@functools.cache
def _slots(kind: type) -> tuple[str, ...]:
    """The slots of ``kind``'s instances (a dataclass's ``Field``)."""
    names = []
    for base in kind.__mro__:
        slots = vars(base).get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    return tuple(name for name in names if name not in ("__dict__", "__weakref__"))


def _cache(name: str, value: Any) -> bool:
    """Whether a module's or class's attribute is one Python adds when asked (not a change): an empty
    ``__annotations__`` (made by reading it), ``__slotnames__`` (copyreg's, made by copying an
    instance)."""
    return name == "__slotnames__" or (name == "__annotations__" and value == {})


class _World:
    """The guarded modules as one world sees them: in memory (``sys.modules``), or as their own code
    defines them (:func:`_reference`).  :meth:`items` describes a module's names so that two worlds'
    descriptions are equal exactly where they hold the very same object (what a module imports, and
    what its code takes from elsewhere) or an object made by the same code (what it defines: a
    function with an equal code object, the same globals, defaults and closure; a class with the same
    name, metaclass, bases and attributes, each compared alike; a constant of the same type and value).

    An object defined by a guarded module is known by its home, its ``__module__`` and
    ``__qualname__``: where it is found at its home, other items refer to it by that name (it is
    compared as the item of its home); anywhere else it is compared whole."""

    def __init__(self, namespaces: dict[str, dict[str, Any]], keep: list[Any] | None = None) -> None:
        self.namespaces = namespaces
        self.globals = {id(namespace): name for name, namespace in namespaces.items()}
        self.keep = keep  # the reference world keeps what it refers to by id alive

    def _id(self, value: Any) -> tuple[str, int]:
        if self.keep is not None:
            self.keep.append(value)
        return ("id", id(value))

    def _home(self, value: Any) -> tuple[str, str] | None:
        """(module, qualified name) where ``value`` is defined, if it is found there in this world."""
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if module not in self.namespaces or not isinstance(qualname, str):
            return None
        first, *rest = qualname.split(".")
        found = self.namespaces[module].get(first)
        for part in rest:
            if not isinstance(found, type):
                return None
            found = vars(found).get(part)
        return (module, qualname) if found is value else None

    def _ours(self, value: Any) -> bool:
        """Whether ``value`` (a function or class) was made by a guarded module's code."""
        if getattr(value, "__module__", None) in self.namespaces:
            return True
        return isinstance(value, types.FunctionType) and id(value.__globals__) in self.globals

    def describe(self, root: Any, item: tuple[str, str], header: bool = False) -> Any:
        """``root``, the value of ``item``, as a comparable value (with ``header``, a class's attributes
        are left out: they are items of their own)."""
        seen: dict[int, int] = {}

        def walk(value: Any) -> Any:
            kind = type(value)
            if kind in _SCALARS:
                return (kind.__name__, value)
            if kind is float or kind is complex:
                return (kind.__name__, repr(value))
            if kind in (tuple, list):
                return (kind.__name__, tuple(walk(part) for part in value))
            if kind is dict:
                return ("dict", tuple((walk(key), walk(part)) for key, part in value.items()))
            if kind in (set, frozenset):
                return (kind.__name__, tuple(sorted(repr(walk(part)) for part in value)))
            if id(value) in seen:
                return ("seen", seen[id(value)])
            if isinstance(value, (types.FunctionType, type)):
                home = self._home(value)
                if home is not None and home != item:
                    return ("at", *home)
                if home is None and not self._ours(value):
                    return self._id(value)
                seen[id(value)] = len(seen)
                if isinstance(value, type):
                    return cls(value, header and value is root)
                return function(value)
            seen[id(value)] = len(seen)
            if kind is types.CellType:
                try:
                    return ("cell", walk(value.cell_contents))
                except ValueError:
                    return ("cell",)
            if kind is property:
                return ("property", walk(value.fget), walk(value.fset), walk(value.fdel), walk(value.__doc__))
            if kind is staticmethod or kind is classmethod:
                return (kind.__name__, walk(value.__func__), walk(vars(value)))
            if kind is types.GetSetDescriptorType or kind is types.MemberDescriptorType:
                return ("descriptor", kind.__name__, value.__name__, walk(value.__objclass__))
            if kind is _ABC_DATA:
                return ("abc",)
            if kind.__module__ in self.namespaces or kind.__module__ in _MACHINERY:
                return ("object", walk(kind), walk(attributes(value)))
            return self._id(value)

        def function(value: types.FunctionType) -> Any:
            home = self.globals.get(id(value.__globals__))
            return (
                "function",
                value.__name__,
                value.__qualname__,
                value.__module__,
                value.__code__,  # compared with ==: the bytecode, constants, names, nested code
                ("globals", home) if home is not None else self._id(value.__globals__),
                walk(value.__defaults__),
                walk(value.__kwdefaults__),
                walk(value.__closure__),
                walk(value.__annotations__),
                walk(value.__doc__),
                walk(getattr(value, "__type_params__", ())),
                walk(vars(value)),
            )

        def cls(value: type, header: bool) -> Any:
            bases = tuple(walk(base) for base in value.__bases__)
            body = None if header else walk(dict(sorted(vars(value).items())))
            return ("class", value.__name__, value.__qualname__, walk(type(value)), bases, body)

        def attributes(value: Any) -> dict[str, Any]:
            found = dict(getattr(value, "__dict__", {}))
            kind: type = type(value)
            for slot in _slots(kind):
                try:
                    found[slot] = getattr(value, slot)
                except AttributeError:
                    found[f"<{slot} unset>"] = None
            return found

        return walk(root)

    def items(self, module: str) -> dict[str, Any]:
        """The items of ``module``: each name of its namespace, and each attribute of a class it
        defines (``Class.attribute``), described."""
        out: dict[str, Any] = {}
        for name, value in self.namespaces[module].items():
            if name in _SET_BY_IMPORT or sys.modules.get(f"{module}.{name}") is value or _cache(name, value):
                continue  # set by the import system (a package's submodules too), or by Python
            if isinstance(value, type) and self._home(value) == (module, name):
                out[name] = self.describe(value, (module, name), header=True)
                for attribute, member in vars(value).items():
                    if not _cache(attribute, member):
                        path = f"{name}.{attribute}"
                        out[path] = self.describe(member, (module, path))
            else:
                out[name] = self.describe(value, (module, name))
        return out


def _execute(modules: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The namespaces of ``modules`` as their code defines them: each module's code (from its installed
    file, as the import system loads it) executed again in a namespace of its own, where importing
    a guarded module gives its namespace here, and anything else what the import system gives."""
    loaded: dict[str, types.ModuleType] = {}

    def load(name: str) -> types.ModuleType:
        if name in loaded:  # (a cycle would find the module partly run, as the import system does)
            return loaded[name]
        spec = module_spec(name)
        code = spec.loader.get_code(name)
        if code is None:
            raise ImportError(f"no code for {name}")
        loaded[name] = reference = types.ModuleType(name)
        namespace = vars(reference)
        namespace.update(__spec__=spec, __package__=spec.parent, __builtins__=builtin_names)
        exec(code, namespace)  # the installed module's own code, as importing it runs it
        return reference

    def importer(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        target = importlib.util.resolve_name("." * level + name, globals["__package__"]) if level else name
        if fromlist and target in modules:
            return load(target)
        return builtins.__import__(name, globals, locals, fromlist, level)

    builtin_names = {**vars(builtins), "__import__": importer}
    return {name: vars(load(name)) for name in modules}


@functools.cache
def _reference(modules: tuple[str, ...]) -> tuple[dict[str, dict[str, Any]], tuple[str, ...], list[Any]]:
    """What the guarded modules' own code defines, described (:class:`_World`: each module's items), what
    could not be compared, and the objects the descriptions refer to by id (kept alive, so that no
    other object takes their id); made once per process."""
    try:
        for module in modules:
            importlib.import_module(module)
        namespaces = _execute(modules)
    except Exception as exc:  # any failure of hypercorn's code is a refusal
        return {}, (f"hypercorn: cannot be compared in memory ({type(exc).__name__}: {exc})",), []
    world = _World(namespaces, keep=[])
    # the functions dataclasses writes for a class take the module in memory as their globals
    world.globals.update({id(vars(sys.modules[name])): name for name in namespaces})
    described = {module: world.items(module) for module in modules}
    return described, (), world.keep or []


def _named(differ: set[str], names: Iterator[str]) -> list[str]:
    """``names`` but the attributes of a class that ``differ`` has replaced whole (it is named alone)."""
    return [name for name in names if "." not in name or name.split(".")[0] not in differ]


def replaced_in_memory(modules: tuple[str, ...]) -> Iterator[str]:
    """What differs between the guarded modules in memory and what their code defines: a name bound to
    another object (a monkeypatch, whatever its ``__module__`` says), a function whose code, defaults
    or closure changed, a class attribute replaced, added or removed, a constant changed."""
    expected_items, failures, _ = _reference(modules)
    yield from failures
    live = {name: vars(sys.modules[name]) for name in expected_items}
    world = _World(live)
    for module, namespace in live.items():
        if not any(namespace.get("__builtins__") is real for real in (builtins, vars(builtins))):
            yield f"{module}: replaced in memory __builtins__"
        found, expected_here = world.items(module), expected_items[module]
        differ = {name for name in expected_here if name in found and found[name] != expected_here[name]}
        changed = _named(differ, (name for name in expected_here if name in differ))
        missing = _named(differ, (name for name in expected_here if name not in found))
        new = _named(differ, (name for name in found if name not in expected_here))
        for label, names in (("replaced", changed), ("added", new), ("removed", missing)):
            if names:
                yield f"{module}: {label} in memory {', '.join(names)}"
