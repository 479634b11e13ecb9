"""Replay a recorded client (``tests/compat/clients/*.jsonl``) against a server, checking each answer.

A recording's first line describes the client (``client``, ``mode``, ``source``: where the sequence
comes from); each further line is one HTTP request: ``http`` (the method), ``headers`` (the ones that
matter, ``{session}`` standing for the ``Mcp-Session-Id`` the last ``initialize`` got,
``{client_session}`` for one client session id per replay) and ``body`` (the JSON-RPC message, or
null), and optionally ``expect`` (``status``, ``error``: the JSON-RPC error code a step must get).

Every request must be served as the client expects it: 200 with its answer (a result, never an error
unless the step expects one), 202 for a notification, 200 (or 405) for the GET stream, 2xx for the
DELETE.  Besides, in each answer: ``initialize`` agrees to the version asked for, ``server/discover``
offers 2026-07-28, and every 2026-era list result (``tools/list``, ``prompts/list``,
``resources/list``, ``resources/templates/list``, and ``resources/read``) carries ``ttlMs`` and
``cacheScope`` (Claude Code rejects one without them).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

CLIENTS = Path(__file__).resolve().parent / "clients"
MODERN = "2026-07-28"
CACHEABLE = frozenset(
    {"tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)


@dataclass
class Recording:
    name: str
    client: str
    mode: str
    source: str
    steps: list[dict[str, Any]]


def recordings() -> list[Recording]:
    """Every recording, by file name."""
    found = []
    for path in sorted(CLIENTS.glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        head, steps = lines[0], lines[1:]
        found.append(Recording(path.stem, head["client"], head["mode"], head["source"], steps))
    return found


@dataclass
class Replayed:
    """What a replay saw: ``(http method, JSON-RPC method, status)`` per step, and the answers."""

    steps: list[tuple[str, str | None, int]] = field(default_factory=list)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The last result of each JSON-RPC method."""
    session: str | None = None
    """The ``Mcp-Session-Id`` of the last ``initialize`` (None: none, or the replay deleted it)."""


def _fill(value: str, session: str | None, client_session: str) -> str:
    if "{session}" in value:
        assert session is not None, "a step names the session before any initialize made one"
        value = value.replace("{session}", session)
    return value.replace("{client_session}", client_session)


def _modern(step: dict[str, Any]) -> bool:
    body = step.get("body") or {}
    meta = (body.get("params") or {}).get("_meta") or {}
    version = step["headers"].get("mcp-protocol-version") or meta.get(
        "io.modelcontextprotocol/protocolVersion"
    )
    return bool(version == MODERN)


async def _answer(response: httpx.Response, request_id: object) -> dict[str, Any]:
    """The JSON-RPC answer to ``request_id`` in a JSON body or an SSE stream (its notifications and
    requests skipped)."""
    kind = response.headers.get("content-type", "")
    if kind.startswith("application/json"):
        message: dict[str, Any] = json.loads(await response.aread())
        return message
    assert kind.startswith("text/event-stream"), kind
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            text, data = "\n".join(data), []
            if not text:  # a priming event (an event id to resume from, no message)
                continue
            message = json.loads(text)
            if message.get("id") == request_id and "method" not in message:
                return message
    raise AssertionError(f"the stream ended without the answer to {request_id!r}")


async def replay(http: httpx.AsyncClient, url: str, recording: Recording) -> Replayed:
    """Send each step of ``recording`` to ``url`` and check each answer (see the module docstring)."""
    seen = Replayed()
    session: str | None = None
    client_session = str(uuid.uuid4())
    for number, step in enumerate(recording.steps, 1):
        where = f"{recording.name} step {number}"
        headers = {name: _fill(value, session, client_session) for name, value in step["headers"].items()}
        body = step.get("body")
        content = json.dumps(body).encode() if body is not None else None
        method = body.get("method") if isinstance(body, dict) else None
        expect = step.get("expect", {})
        async with http.stream(step["http"], url, headers=headers, content=content) as response:
            status = response.status_code
            seen.steps.append((step["http"], method, status))
            if "status" in expect:
                assert status == expect["status"], (where, status, await response.aread())
            if step["http"] == "GET":
                assert status in (200, 405), (where, status)
                continue  # the standalone stream: open is enough
            if step["http"] == "DELETE":
                assert 200 <= status < 300, (where, status)
                seen.session = None
                continue
            if not isinstance(body, dict) or "id" not in body or "method" not in body:
                assert status == 202, (where, status, await response.aread())
                continue
            if "status" not in expect:
                assert status == 200, (where, status, await response.aread())
            answer = await _answer(response, body["id"])
            if "error" in expect:
                assert answer.get("error", {}).get("code") == expect["error"], (where, answer)
                continue
            assert "result" in answer, (where, answer)
            result = answer["result"]
            seen.answers[str(method)] = result
            if method == "initialize":
                assert result["protocolVersion"] == body["params"]["protocolVersion"], (where, result)
                session = seen.session = response.headers.get("mcp-session-id")
                assert session, (where, "no Mcp-Session-Id")
            elif method == "server/discover":
                assert MODERN in result["supportedVersions"], (where, result)
            if _modern(step):
                assert result.get("resultType") == "complete", (where, result)
                if method in CACHEABLE or method == "server/discover":
                    assert isinstance(result.get("ttlMs"), int) and result["ttlMs"] >= 0, (where, result)
                    assert result.get("cacheScope") in ("public", "private"), (where, result)
    return seen
