"""The client's POST bodies are iterated by a plain object, not httpx's async generator: a send cancelled
halfway (a call its caller cancelled) leaves nothing for the garbage collector to finalize, which Trio
reports as a ResourceWarning (an error under this suite's warning filter)."""

from __future__ import annotations

import gc
import inspect

import httpx
import trio

from mcp_trio._client.http import _WholeBody


async def test_a_body_dropped_halfway_leaves_no_generator_behind() -> None:
    stream = aiter(_WholeBody(b"payload"))
    assert await anext(stream) == b"payload"
    del stream  # abandoned before exhaustion, as a cancelled send abandons it
    gc.collect()
    await trio.lowlevel.checkpoint()  # where Trio's finalizer of a generator would report it


async def test_httpx_s_own_body_stream_would_have_warned() -> None:
    """The contrast that makes the test above mean something: httpx's stream is an async generator."""
    request = httpx.Request("POST", "http://127.0.0.1/", content=b"payload")
    assert inspect.isasyncgenfunction(type(request.stream).__aiter__)
    assert not inspect.isasyncgenfunction(_WholeBody.__aiter__)


async def test_the_whole_body_is_sent_once() -> None:
    chunks = [chunk async for chunk in _WholeBody(b"abc")]
    assert chunks == [b"abc"]


async def test_a_post_carries_its_length_and_body() -> None:
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        request = http.build_request("POST", "http://127.0.0.1/mcp", content=b'{"a":1}')
        request.stream = _WholeBody(b'{"a":1}')
        response = await http.send(request)
    assert response.status_code == 202
    assert seen[0].headers["content-length"] == "7" and "transfer-encoding" not in seen[0].headers
    assert await seen[0].aread() == b'{"a":1}'
