"""One JSON decoder for text a peer sent, whoever the peer is: bounded in size, in nesting depth and in
the length of numbers, strict about Unicode.

``json.loads`` alone is not safe on hostile input: a deeply nested value raises ``RecursionError``
(which the caller rarely expects, and which is unreliable near the stack limit), an integer of a million
digits is parsed in quadratic time unless ``sys.set_int_max_str_digits`` happens to be in force (a
process-wide switch anyone can turn off), ``1e999`` becomes ``inf``, ``NaN`` is accepted, ``bytes``
input lets UTF-8-encoded surrogates through and a ``\\ud800`` escape makes a string that cannot be
encoded again.  :func:`loads` refuses all of these with :class:`JSONRejected`, a ``ValueError`` whose
message says which rule was broken (never the text itself).

Sans-IO and dependency-free; the client uses it for every body, event and message it reads.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

__all__ = ["DEFAULT_MAX_DEPTH", "MAX_NUMBER_LENGTH", "JSONRejected", "loads", "nesting_depth_exceeds"]

DEFAULT_MAX_DEPTH = 128
"""Arrays and objects nested deeper than this are refused (far below the interpreter's recursion limit,
so neither the decoder nor a recursive walk of the value over it can run out of stack)."""

MAX_NUMBER_LENGTH = 1000
"""A number literal longer than this (in characters) is refused, whatever ``sys.int_max_str_digits``."""


class JSONRejected(ValueError):
    """The text is not JSON, or is JSON this decoder refuses (its message says which rule)."""


def _refuse_constant(name: str) -> Any:
    raise JSONRejected(f"{name} is not a JSON number")


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_LENGTH:
        raise JSONRejected(f"a number has too many digits (more than {MAX_NUMBER_LENGTH})")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_LENGTH:
        raise JSONRejected(f"a number has too many characters (more than {MAX_NUMBER_LENGTH})")
    number = float(text)
    if not math.isfinite(number):
        raise JSONRejected("a number is out of range")
    return number


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_float, parse_int=_int)

# A JSON string (or an unterminated one, to the end: so the match never fails and never backtracks,
# which keeps the scan linear on any text).  Possessive: nothing is given back once matched.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def nesting_depth_exceeds(text: str, limit: int) -> bool:
    """Whether ``text`` nests arrays and objects deeper than ``limit`` (brackets inside strings do not
    count).  Linear in the length of ``text``, without recursion; texts with fewer brackets than
    ``limit`` are not scanned at all."""
    if text.count("[") + text.count("{") <= limit:
        return False
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


def loads(
    data: bytes | bytearray | str, *, max_size: int | None = None, max_depth: int = DEFAULT_MAX_DEPTH
) -> Any:
    """The JSON value of ``data`` (UTF-8 bytes, or text already decoded).

    Raises :class:`JSONRejected` for: more than ``max_size`` bytes (characters, for text), bytes that
    are not UTF-8, text that is not JSON, nesting deeper than ``max_depth``, ``NaN``/``Infinity``,
    a number out of the float range or longer than :data:`MAX_NUMBER_LENGTH` characters, a string
    (key or value) holding a lone UTF-16 surrogate.  A UTF-8 byte order mark is tolerated."""
    if max_size is not None and len(data) > max_size:
        raise JSONRejected(f"the JSON text is longer than {max_size} bytes")
    if isinstance(data, str):
        text = data
    else:
        try:
            # strict: Python's UTF-8 codec refuses encoded surrogates and overlong forms
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONRejected("the JSON text is not UTF-8") from exc
        if text.startswith("\ufeff"):
            text = text[1:]
    if _SURROGATE.search(text):  # only possible in text handed in already decoded
        raise JSONRejected("the JSON text holds a lone UTF-16 surrogate")
    if nesting_depth_exceeds(text, max_depth):
        raise JSONRejected(f"the JSON value is nested deeper than {max_depth} levels")
    try:
        value = _DECODER.decode(text)
    except JSONRejected:
        raise
    except json.JSONDecodeError as exc:
        raise JSONRejected(f"body is not valid JSON ({exc.msg} at character {exc.pos})") from None
    except (ValueError, RecursionError) as exc:  # not expected after the checks above; refused all the same
        raise JSONRejected(f"not JSON this decoder accepts ({type(exc).__name__})") from None
    # Only a \uD8xx-\uDFxx escape makes a surrogate now: look for one cheaply, then for a lone one.
    if "\\" in text and _SURROGATE_ESCAPE.search(text) and _has_surrogate(value):
        raise JSONRejected("a JSON string holds a lone UTF-16 surrogate (not Unicode text)")
    return value


def _has_surrogate(value: Any) -> bool:
    """Whether a decoded value holds a string (key or value) with a lone surrogate (iterative)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
