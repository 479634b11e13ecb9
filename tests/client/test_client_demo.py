"""The client against the demo server, in-process on a real socket, in the 2025 (legacy) and 2026
(modern) eras: every feature once, then the server's statistics and the client's tasks and pooled
connections after each session (a legacy session is DELETEd on exit; nothing of the client outlives
its block)."""

from __future__ import annotations

import base64
import gc
import json
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio

from mcp_trio import ClientSession, RPCError, open_client_session
from mcp_trio._demo_data import PNG

from .conftest import Demo, assert_clean, client_tasks, eventually

MODES = ["legacy", "modern"]
LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
ANSWERS = {"name": "Ann", "color": "blue", "username": "ann", "email": "ann@example.com"}


class Peer:
    """The client-side handlers; they record what the server asked."""

    def __init__(self) -> None:
        self.sampled: list[mt.CreateMessageRequestParams] = []
        self.elicited: list[mt.ElicitRequestParams] = []
        self.roots_listed = 0
        self.notifications: list[dict[str, Any]] = []

    async def sampling(self, params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        self.sampled.append(params)
        return mt.CreateMessageResult(
            role="assistant", content=mt.TextContent(type="text", text="Hi"), model="m"
        )

    async def elicitation(self, params: mt.ElicitRequestParams) -> mt.ElicitResult:
        self.elicited.append(params)
        assert isinstance(params, mt.ElicitRequestFormParams)
        wanted = params.requested_schema["properties"]
        return mt.ElicitResult(action="accept", content={key: ANSWERS[key] for key in wanted})

    async def roots(self) -> mt.ListRootsResult:
        self.roots_listed += 1
        return mt.ListRootsResult(roots=[mt.Root(uri="file:///tmp/project", name="project")])

    async def on_notification(self, message: dict[str, Any]) -> None:
        self.notifications.append(message)

    def logs(self) -> list[Any]:
        return [n["params"]["data"] for n in self.notifications if n["method"] == "notifications/message"]

    def kwargs(self) -> dict[str, Any]:
        return {
            "sampling": self.sampling,
            "elicitation": self.elicitation,
            "roots": self.roots,
            "on_notification": self.on_notification,
        }


@asynccontextmanager
async def session(
    demo: Demo, mode: str, http: httpx.AsyncClient, peer: Peer | None = None, **kwargs: Any
) -> AsyncIterator[ClientSession]:
    """A session in ``mode``; afterwards checks that the server holds no session (legacy: the client sent
    DELETE: the idle timeout is 30 minutes) and that nothing of the client is left."""
    assert_clean(http)
    opts = peer.kwargs() if peer is not None else {}
    async with open_client_session(demo.url, mode=mode, http=http, **{**opts, **kwargs}) as s:  # type: ignore[arg-type]
        assert s.modern == (mode == "modern")
        assert demo.stats()["sessions"] == (0 if s.modern else 1)
        yield s
    assert demo.stats()["sessions"] == 0
    assert_clean(http)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def text_of(result: mt.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, mt.TextContent)
    return content.text


async def test_handshake_details(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    async with session(demo, mode, http) as s:
        if mode == "legacy":
            assert s.protocol_version == LEGACY_VERSION
            assert s.server_info == {"name": "mcp-trio-demo", "version": "0.1.0"}
            assert s.instructions == "The demo server of mcp_trio."
            capabilities = s.server_capabilities
            # the standalone GET stream runs in the session's nursery
            assert len(client_tasks()) == 1
        else:
            assert s.protocol_version == MODERN_VERSION
            assert client_tasks() == []  # no GET stream, no background task in the 2026 era
            # mode="modern" skips server/discover (only "auto" sends it): ask for the details here
            discovered = await s.request("server/discover")
            assert discovered["_meta"][mt.SERVER_INFO_META_KEY] == {
                "name": "mcp-trio-demo",
                "version": "0.1.0",
            }
            assert discovered["instructions"] == "The demo server of mcp_trio."
            capabilities = discovered["capabilities"]
        assert {"tools", "resources", "prompts", "completions", "logging"} <= set(capabilities)
        if mode == "legacy":
            await s.ping()  # (the 2026 era has no ping)


async def test_auto_mode_chooses_modern_with_our_server(demo: Demo, http: httpx.AsyncClient) -> None:
    async with open_client_session(demo.url, mode="auto", http=http) as s:
        assert s.modern
        assert s.protocol_version == MODERN_VERSION
        assert s.server_info == {"name": "mcp-trio-demo", "version": "0.1.0"}
        assert s.instructions == "The demo server of mcp_trio."
        assert "tools" in s.server_capabilities
        assert demo.stats()["sessions"] == 0  # no initialize happened
        assert text_of(await s.call_tool("echo", {"text": "auto"})) == "auto"
    assert demo.stats()["sessions"] == 0
    assert demo.stats()["sessions_created"] == 0
    assert_clean(http)


async def test_tools(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    async with session(demo, mode, http) as s:
        tools = {tool.name: tool for tool in (await s.list_tools()).tools}
        assert {"echo", "add", "count", "sleep", "test_sampling", "test_custom_headers"} <= set(tools)
        assert tools["echo"].input_schema["properties"]["text"]["type"] == "string"
        result = await s.call_tool("echo", {"text": "héllo"})
        assert not result.is_error
        assert text_of(result) == "héllo"
        added = await s.call_tool("add", {"a": 2, "b": 0.5})
        assert added.structured_content == {"sum": 2.5}
        image = await s.call_tool("test_image_content")
        assert isinstance(image.content[0], mt.ImageContent)
        assert image.content[0].data == PNG


async def test_progress_callback(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message))

    async with session(demo, mode, http) as s:
        result = await s.call_tool("count", {"steps": 3, "delay": 0}, progress=progress)
        assert text_of(result) == "counted to 3"
        assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
        seen.clear()
        await s.call_tool("test_tool_with_progress", progress=progress)
        assert [value for value, _, _ in seen] == [0, 50, 100]
        seen.clear()
        await s.call_tool("count", {"steps": 2, "delay": 0})  # no callback: no token, nothing recorded
        assert seen == []


async def test_logging_legacy_set_level(demo: Demo, http: httpx.AsyncClient) -> None:
    peer = Peer()
    async with session(demo, "legacy", http, peer) as s:
        await s.set_logging_level("info")
        assert (
            text_of(await s.call_tool("test_tool_with_logging")) == "Tool with logging executed successfully"
        )
        assert peer.logs() == ["Tool execution started", "Tool processing data", "Tool execution completed"]
        levels = {n["params"]["level"] for n in peer.notifications if n["method"] == "notifications/message"}
        assert levels == {"info"}
        peer.notifications.clear()
        await s.set_logging_level("error")
        await s.call_tool("test_tool_with_logging")
        assert peer.logs() == []


async def test_logging_modern_needs_log_level(demo: Demo, http: httpx.AsyncClient) -> None:
    peer = Peer()
    async with session(demo, "modern", http, peer) as s:
        await s.call_tool("test_logging_tool")
        assert peer.logs() == []  # no level named in _meta: the server logs nothing
    async with session(demo, "modern", http, peer, log_level="info") as s:
        assert text_of(await s.call_tool("test_logging_tool")) == "Logging tool executed"
        assert peer.logs() == ["Logging tool started", "Logging tool finished"]
        peer.notifications.clear()
        await s.set_logging_level("error")  # 2026 era: only changes the level sent in _meta
        await s.call_tool("test_logging_tool")
        assert peer.logs() == []


async def test_resources(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    async with session(demo, mode, http) as s:
        listed = {str(r.uri): r for r in (await s.list_resources()).resources}
        assert {"test://static-text", "test://static-binary", "test://watched-resource"} <= set(listed)
        assert listed["test://static-binary"].mime_type == "image/png"
        templates = (await s.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["test://template/{id}/data"]

        text = (await s.read_resource("test://static-text")).contents
        assert len(text) == 1
        assert isinstance(text[0], mt.TextResourceContents)
        assert text[0].text == "This is the content of the static text resource."

        binary = (await s.read_resource("test://static-binary")).contents[0]
        assert isinstance(binary, mt.BlobResourceContents)
        assert base64.b64decode(binary.blob) == base64.b64decode(PNG)

        templated = (await s.read_resource("test://template/42/data")).contents[0]
        assert isinstance(templated, mt.TextResourceContents)
        assert json.loads(templated.text) == {"id": "42", "templateTest": True, "data": "Data for ID: 42"}


async def test_prompts_and_completion(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    async with session(demo, mode, http) as s:
        prompts = {p.name: p for p in (await s.list_prompts()).prompts}
        assert {"test_simple_prompt", "test_prompt_with_arguments", "test_prompt_with_image"} <= set(prompts)
        assert [a.name for a in prompts["test_prompt_with_arguments"].arguments or []] == ["arg1", "arg2"]
        simple = await s.get_prompt("test_simple_prompt")
        assert simple.messages[0].content.text == "This is a simple prompt for testing."  # type: ignore[union-attr]
        got = await s.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
        assert got.messages[0].content.text == "Prompt with arguments: arg1='a', arg2='b'"  # type: ignore[union-attr]

        ref = {"type": "ref/prompt", "name": "test_prompt_with_arguments"}
        completed = await s.complete(ref, {"name": "arg1", "value": "te"})
        assert completed.completion.values == ["test", "testing"]
        completed = await s.complete(
            ref, {"name": "arg1", "value": "zz"}, context={"arguments": {"arg2": "x"}}
        )
        assert completed.completion.values == []


async def test_sampling_handler(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    peer = Peer()
    async with session(demo, mode, http, peer) as s:
        assert text_of(await s.call_tool("test_sampling", {"prompt": "What is 2+2?"})) == "LLM response: Hi"
        assert len(peer.sampled) == 1
        first = peer.sampled[0].messages[0].content
        assert isinstance(first, mt.TextContent)
        assert first.text == "What is 2+2?"
        assert peer.sampled[0].max_tokens == 100


async def test_elicitation_handler(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    peer = Peer()
    async with session(demo, mode, http, peer) as s:
        result = await s.call_tool("test_elicitation", {"message": "Who are you?"})
        content = json.dumps({"username": "ann", "email": "ann@example.com"})
        assert text_of(result) == f"User response: action=accept, content={content}"
        assert [p.message for p in peer.elicited] == ["Who are you?"]


async def test_input_required_multiple_inputs(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    peer = Peer()
    async with session(demo, mode, http, peer) as s:
        result = await s.call_tool("test_input_required_result_multiple_inputs")
        assert text_of(result) == "Hi Ann (1 roots)"
        assert (len(peer.sampled), len(peer.elicited), peer.roots_listed) == (1, 1, 1)
        roots = await s.call_tool("test_input_required_result_list_roots")
        assert text_of(roots) == "Roots: file:///tmp/project"
        assert peer.roots_listed == 2


async def test_input_required_multi_round(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    peer = Peer()
    async with session(demo, mode, http, peer) as s:
        result = await s.call_tool("test_input_required_result_multi_round")
        assert text_of(result) == "Ann likes blue"
        assert [p.message for p in peer.elicited] == [
            "Step 1: What is your name?",
            "Step 2: What is your favorite color?",
        ]


async def test_server_request_without_handler_is_refused(
    demo: Demo, mode: str, http: httpx.AsyncClient
) -> None:
    """No sampling handler: the capability is not declared, and the server refuses the tool (-32021)."""
    async with session(demo, mode, http) as s:
        assert "sampling" not in s.capabilities()
        with pytest.raises(RPCError) as caught:
            await s.call_tool("test_sampling", {"prompt": "q"})
        assert caught.value.code == -32021


async def test_error_result(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    async with session(demo, mode, http) as s:
        result = await s.call_tool("test_error_handling")
        assert result.is_error is True
        assert text_of(result) == "This tool intentionally returns an error for testing"
        assert text_of(await s.call_tool("echo", {"text": "still fine"})) == "still fine"


async def test_unknown_tool_is_rpc_error(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    async with session(demo, mode, http) as s:
        with pytest.raises(RPCError) as caught:
            await s.call_tool("no_such_tool", {})
        assert caught.value.code == -32602
        assert "no_such_tool" in caught.value.message
        assert text_of(await s.call_tool("echo", {"text": "after"})) == "after"


async def test_cancellation_reaches_the_server(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    inflight = "inflight" if mode == "legacy" else "modern_inflight"
    async with session(demo, mode, http) as s:
        start = trio.current_time()
        with trio.move_on_after(0.2) as scope:
            await s.call_tool("sleep", {"seconds": 100})
        assert scope.cancelled_caught
        assert trio.current_time() - start < 1.5  # legacy: notifications/cancelled is bounded too
        await eventually(lambda: demo.stats()[inflight] == 0, within=2)
        # the session is still usable, and the next request is not confused by the cancelled one
        assert text_of(await s.call_tool("echo", {"text": "next"})) == "next"
        await eventually(lambda: demo.stats()[inflight] == 0, within=2)


async def test_custom_headers_non_ascii(demo: Demo) -> None:
    sent: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        sent.append(request)

    timeout = httpx.Timeout(10.0, read=None)
    async with httpx.AsyncClient(timeout=timeout, event_hooks={"request": [record]}) as http:
        async with session(demo, "modern", http) as s:
            await s.list_tools()  # the client learns which arguments travel as Mcp-Param-* headers
            result = await s.call_tool("test_custom_headers", {"region": "Grüße aus Köln", "priority": 3})
            assert text_of(result) == "region=Grüße aus Köln priority=3"
            result = await s.call_tool("test_custom_headers", {"region": "eu-west", "priority": 7})
            assert text_of(result) == "region=eu-west priority=7"
        calls = [r for r in sent if r.headers.get("mcp-name") == "test_custom_headers"]
        assert len(calls) == 2
        encoded = base64.b64encode("Grüße aus Köln".encode()).decode()
        assert calls[0].headers["mcp-param-region"] == f"=?base64?{encoded}?="
        assert calls[0].headers["mcp-param-priority"] == "3"
        assert calls[0].headers["mcp-method"] == "tools/call"
        assert calls[1].headers["mcp-param-region"] == "eu-west"
        assert calls[1].headers["mcp-param-priority"] == "7"
        assert all(r.headers["mcp-protocol-version"] == MODERN_VERSION for r in sent)


async def test_custom_headers_without_listing_tools_first(demo: Demo, http: httpx.AsyncClient) -> None:
    """A tool whose schema mirrors arguments into headers, called before ``list_tools``."""
    async with session(demo, "modern", http) as s:
        result = await s.call_tool("test_custom_headers", {"region": "Grüße", "priority": 1})
        assert text_of(result) == "region=Grüße priority=1"


@pytest.mark.filterwarnings("default")
async def test_no_async_generator_left_to_gc(demo: Demo, mode: str, http: httpx.AsyncClient) -> None:
    """Under Trio an async generator garbage-collected unexhausted is a ResourceWarning (an error with
    ``filterwarnings = error``, in this project and in any user's test suite).  The client must close the
    httpx body iterators it stops reading: a POST's SSE stream once the response arrived (``count``
    streams its progress), and the legacy GET stream cancelled on exit.

    Fails today: ``_aclosing`` (``_client/http.py``) calls ``aclose()`` on ``Response.aiter_bytes()``
    only, which leaves httpx's inner generators (``Response.aiter_raw``, ``BoundAsyncStream.__aiter__``,
    ... httpcore's ``_receive_response_body``) to the GC (encode/httpx#3686; see how
    ``tests/integration/mcp_http.py`` unwinds the chain with a read in a cancelled scope instead)."""

    async def progress(value: float, total: float | None, message: str | None) -> None:
        pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
        del caught[:]  # anything an earlier test left behind
        async with session(demo, mode, http) as s:
            assert (
                text_of(await s.call_tool("count", {"steps": 2, "delay": 0}, progress=progress))
                == "counted to 2"
            )
        gc.collect()
    left = sorted({str(w.message).split("'")[1] for w in caught if "was garbage collected" in str(w.message)})
    assert left == []


async def test_log_level_applies_in_the_legacy_era_too(demo: Demo, http: httpx.AsyncClient) -> None:
    """``log_level=`` means the same in both eras: a 2025 session sends logging/setLevel after
    initialize, so info messages stay away at "error" and arrive at "info"."""
    peer = Peer()
    async with session(demo, "legacy", http, peer, log_level="error") as s:
        await s.call_tool("test_tool_with_logging")
        assert peer.logs() == []
    async with session(demo, "legacy", http, peer, log_level="info") as s:
        await s.call_tool("test_tool_with_logging")
        assert len(peer.logs()) == 3
