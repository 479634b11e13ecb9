"""``WWW-Authenticate`` challenges (RFC 9110 section 11.6.1, RFC 6750, RFC 9728): what a 401 or 403
answer tells the OAuth client about where and how to authorize."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import httpx

__all__ = ["BearerChallenge", "Challenge", "bearer_challenge", "parse_www_authenticate", "split_scope"]

MAX_HEADER = 16 * 1024  # of one WWW-Authenticate value: anything longer is cut there


_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"?'  # an unterminated quoted string runs to the end (tolerated)
_SCHEME_RE = re.compile(rf"({_TOKEN})")
_PARAM_RE = re.compile(rf"({_TOKEN})[ \t]*=[ \t]*({_QUOTED}|{_TOKEN})?")
_TOKEN68_RE = re.compile(r"([A-Za-z0-9\-._~+/]+=*)[ \t]*(?=,|$)")
_SPACE_RE = re.compile(r"[ \t]*")
_GAP_RE = re.compile(r"[ \t,]*")
_ESCAPE_RE = re.compile(r"\\(.)")


@dataclass(frozen=True)
class Challenge:
    """One challenge of a ``WWW-Authenticate`` header: its scheme (lower case), its parameters (names in
    lower case; the first of a repeated name wins) and its token68, if it had one instead."""

    scheme: str
    params: Mapping[str, str] = field(default_factory=dict)
    token68: str | None = None


def _unquote(value: str) -> str:
    if value.startswith('"'):
        inner = value[1:-1] if len(value) > 1 and value.endswith('"') else value[1:]
        return _ESCAPE_RE.sub(r"\1", inner)
    return value


def parse_www_authenticate(values: Iterable[str]) -> list[Challenge]:
    """Every challenge of one or more ``WWW-Authenticate`` header values.

    Tolerant by design: whatever a server sends, this returns what it could read and never raises;
    text it cannot read is skipped (a value longer than 16 KiB is cut there)."""
    challenges: list[Challenge] = []
    for raw in values:
        text = raw[:MAX_HEADER]
        n = len(text)
        i = _GAP_RE.match(text, 0).end()  # type: ignore[union-attr]
        while i < n:
            scheme = _SCHEME_RE.match(text, i)
            if scheme is None:  # not a token: skip the character and resynchronize
                i = _GAP_RE.match(text, i + 1).end()  # type: ignore[union-attr]
                continue
            i = scheme.end()
            params: dict[str, str] = {}
            token68: str | None = None
            gap = _SPACE_RE.match(text, i).end()  # type: ignore[union-attr]
            if gap > i:  # the scheme is followed by a space: a token68 or parameters
                i = gap
                param = _PARAM_RE.match(text, i)
                if param is None or (param.group(2) is None and _TOKEN68_RE.match(text, i)):
                    t68 = _TOKEN68_RE.match(text, i)
                    if t68 is not None:
                        token68 = t68.group(1)
                        i = t68.end()
                while True:
                    param = _PARAM_RE.match(text, i) if token68 is None else None
                    if param is None:
                        break
                    name = param.group(1).lower()
                    params.setdefault(name, _unquote(param.group(2) or ""))
                    i = _SPACE_RE.match(text, param.end()).end()  # type: ignore[union-attr]
                    if i < n and text[i] == ",":
                        i = _GAP_RE.match(text, i).end()  # type: ignore[union-attr]
                        continue
                    break
            challenges.append(Challenge(scheme.group(1).lower(), params, token68))
            # whatever is left up to the next separator is not readable: skip to a comma or space
            while i < n and text[i] not in " \t,":
                if text[i - 1] in " \t," and _SCHEME_RE.match(text, i):
                    break
                i += 1
            i = _GAP_RE.match(text, i).end()  # type: ignore[union-attr]
    return challenges


@dataclass(frozen=True)
class BearerChallenge:
    """What a 401 or 403 answer said about authorization: the parameters of its Bearer challenge
    (RFC 6750 section 3, RFC 9728 section 5.1), None where absent."""

    resource_metadata: str | None = None
    scope: tuple[str, ...] | None = None
    error: str | None = None
    error_description: str | None = None


def split_scope(value: str | None) -> tuple[str, ...]:
    """A space-separated scope string as its scopes, in order, without repeats."""
    return tuple(dict.fromkeys((value or "").split()))


def bearer_challenge(headers: httpx.Headers) -> BearerChallenge:
    """The Bearer challenge of a response's ``WWW-Authenticate`` headers (any challenge carrying
    parameters when there is no Bearer one; an empty one when there is nothing)."""
    challenges = parse_www_authenticate(headers.get_list("www-authenticate"))
    chosen = next((c for c in challenges if c.scheme == "bearer"), None)
    if chosen is None:
        chosen = next((c for c in challenges if c.params), None)
    if chosen is None:
        return BearerChallenge()
    params = chosen.params
    scope = split_scope(params["scope"]) if "scope" in params else None
    return BearerChallenge(
        resource_metadata=params.get("resource_metadata") or None,
        scope=scope or None,
        error=params.get("error") or None,
        error_description=params.get("error_description") or None,
    )
