"""The hostile-input findings against ``mcp-trio demo``, each as a test (run on hypercorn and, in the
test command's second pass, on ``serve_h11``).

Each malformed input gets a clean 4xx (or a JSON-RPC error) and never a 5xx; the session it arrived on
stays usable; nothing is left behind (the server returns to its baseline afterwards).  The tests without
server flags share one demo: each measures its baseline first, so each still answers for what it left.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import mcp_types as mt
import pytest
import trio
from mcp_http import (
    INIT,
    POST_HEADERS,
    Baseline,
    DemoServer,
    MCPClient,
    assert_back_to_baseline,
    fetch_stats,
    http_client,
    wait_for,
)

from mcp_trio._protocol import versions

# One demo for the tests without server flags; each runs on a hosted python-sdk server too (conftest.py).
pytestmark = [pytest.mark.shared_demo_server, pytest.mark.also_hosted]

MODERN = versions.LATEST_MODERN.name
SESSION_VERSION = "2025-11-25"


def modern_call(name: str, arguments: dict[str, Any], **params: Any) -> tuple[bytes, dict[str, str]]:
    meta = {versions.PROTOCOL_VERSION_META_KEY: MODERN, mt.CLIENT_CAPABILITIES_META_KEY: {"elicitation": {}}}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": meta, **params},
    }
    headers = {**POST_HEADERS, "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": name}
    return json.dumps(body).encode(), headers


async def post_raw(
    http: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str] | list[tuple[str, str]]
) -> httpx.Response:
    response = await http.post(url, content=body, headers=headers)
    assert response.status_code < 500, (response.status_code, response.text)
    return response


async def session_of(http: httpx.AsyncClient, url: str) -> MCPClient:
    client = MCPClient(http, url)
    await client.initialize()
    await client.initialized()
    return client


def call_body(request_id: int, text: str) -> bytes:
    # text is inserted raw: it may hold JSON escapes Python's json.dumps would never write
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s"}}}'
        % (request_id, text.encode())
    )


HOSTILE_BODIES = {
    "lone surrogate": call_body(11, "\\ud800"),
    "lone low surrogate": call_body(12, "a\\udfffb"),
    "huge integer": b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}',
    "NaN": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":NaN}}}',
    "Infinity": b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":-Infinity}}',
    "overflowing float": b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":1e999}}',
}


async def test_hostile_bodies_get_parse_errors_and_the_session_goes_on(
    demo_server: DemoServer, baseline: Baseline
) -> None:
    # One demo for every body (a demo per body made this the slowest file of the suite).
    async with http_client() as http:
        with trio.fail_after(20):
            client = await session_of(http, demo_server.url)
            body, headers = modern_call("echo", {"text": "x"})
            for name, hostile in HOSTILE_BODIES.items():
                response = await post_raw(http, demo_server.url, hostile, client.headers(**POST_HEADERS))
                assert response.status_code == 400, (name, response.text)
                assert response.json()["error"]["code"] == mt.PARSE_ERROR, (name, response.text)
                assert await client.echo("still here") == "still here"
                # 2026: the same body is refused the same way.
                response = await post_raw(http, demo_server.url, hostile, headers)
                assert response.status_code == 400 and response.json()["error"]["code"] == mt.PARSE_ERROR, (
                    name
                )
                response = await post_raw(http, demo_server.url, body, headers)
                assert response.json()["result"]["content"][0]["text"] == "x"
            await client.delete()
    await assert_back_to_baseline(demo_server, baseline)


async def test_hostile_initialize_leaves_no_session(demo_server: DemoServer, baseline: Baseline) -> None:
    deep: Any = {}
    for _ in range(400):  # deeper than pydantic serializes, shallower than json.loads refuses
        deep = {"x": deep}
    bodies = [
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"initialize","params":{}}',
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": SESSION_VERSION,
                    "capabilities": {"experimental": {"deep": deep}},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        ).encode(),
    ]
    async with http_client() as http:
        with trio.fail_after(10):
            for body in bodies:
                response = await post_raw(http, demo_server.url, body, POST_HEADERS)
                assert response.status_code == 400, response.text
                assert "mcp-session-id" not in response.headers
                assert (await fetch_stats(demo_server))["sessions"] == 0
    await assert_back_to_baseline(demo_server, baseline)


async def test_odd_last_event_id_and_request_state(
    demo_server: DemoServer, baseline: Baseline, served: str
) -> None:
    async with http_client() as http:
        with trio.fail_after(10):
            client = await session_of(http, demo_server.url)
            for event_id in ("0-\u00b2", "\u00b2-0", "1-\u0661", "0-1" + "9" * 60):
                headers = [*client.headers(accept="text/event-stream").items()]
                headers.append(("last-event-id", event_id.encode()))  # type: ignore[arg-type]
                async with http.stream("GET", demo_server.url, headers=headers) as response:
                    # not STREAM-SEQ in ASCII digits (Unicode digits, or too long): refused, not resumed
                    assert response.status_code == 400, response.status_code
                    body = json.loads(await response.aread())
                    assert body["error"]["code"] == mt.INVALID_REQUEST, body
            asks = "test_elicitation" if served == "hosted" else "test_input_required_result_request_state"
            body, headers = modern_call(asks, {}, requestState="caf\u00e9.sig")
            response = await post_raw(http, demo_server.url, body.decode().encode("utf-8"), headers)
            assert response.json()["error"]["code"] == mt.INVALID_PARAMS, response.text
            assert await client.echo("ok") == "ok"
            await client.delete()
    await assert_back_to_baseline(demo_server, baseline)


async def test_a_request_id_in_flight_cannot_be_reused(demo_server: DemoServer, baseline: Baseline) -> None:
    async with http_client() as http:
        with trio.fail_after(10):
            client = await session_of(http, demo_server.url)
            slow = {
                "jsonrpc": "2.0",
                "id": 77,
                "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"seconds": 0.5}},
            }
            first = await client.post_stream(slow)
            assert first.status_code == 200
            again = {**slow, "params": {"name": "echo", "arguments": {"text": "thief"}}}
            response = await post_raw(
                http, demo_server.url, json.dumps(again).encode(), client.headers(**POST_HEADERS)
            )
            assert response.status_code == 400, response.text
            assert response.json()["id"] == 77 and response.json()["error"]["code"] == mt.INVALID_REQUEST
            answer = None
            while (message := await first.next_message()) is not None:
                answer = message
            await first.aclose()
            assert answer is not None and answer["id"] == 77, answer
            assert answer["result"]["content"][0]["text"] != "thief", answer
            assert await client.echo("after") == "after"
            await client.delete()
    await assert_back_to_baseline(demo_server, baseline)


async def test_a_batch_repeating_a_request_id_is_refused(demo_server: DemoServer, baseline: Baseline) -> None:
    async with http_client() as http:
        with trio.fail_after(10):
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-03-26",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
            response = await http.post(demo_server.url, json=init, headers=POST_HEADERS)
            session = {
                "mcp-session-id": response.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-03-26",
            }
            headers = {**POST_HEADERS, **session}
            ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
            response = await post_raw(http, demo_server.url, json.dumps([ping, ping]).encode(), headers)
            assert response.status_code == 400, response.text
            response = await http.post(demo_server.url, json=[ping], headers=headers)
            assert response.status_code == 200, response.text
            await http.delete(demo_server.url, headers=session)
    await assert_back_to_baseline(demo_server, baseline)


@pytest.mark.demo_only  # the transport's streams alone (and a server of its own: seconds to start)
@pytest.mark.server_flags("--json-response")
async def test_json_mode_get_cannot_steal_an_answer(demo_server: DemoServer, baseline: Baseline) -> None:
    async with http_client() as http:
        with trio.fail_after(10):
            response = await http.post(demo_server.url, json=INIT, headers=POST_HEADERS)
            assert response.status_code == 200 and response.json()["id"] == 1, response.text
            client = MCPClient(http, demo_server.url)
            client.session_id = response.headers["mcp-session-id"]
            await client.initialized()
            slow = {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"seconds": 2.0}},
            }
            async with trio.open_nursery() as nursery:
                answers: list[httpx.Response] = []

                async def post() -> None:
                    answers.append(
                        await http.post(demo_server.url, json=slow, headers=client.headers(**POST_HEADERS))
                    )

                nursery.start_soon(post)
                # the POST's stream exists (its request is in flight) before anyone tries to replay it
                await wait_for(demo_server, lambda stats: stats["inflight"] == 1, within=5, what="the POST")
                for stream_id in range(1, 4):  # the POST's stream is one of the first few
                    headers = client.headers(
                        accept="text/event-stream", **{"last-event-id": f"{stream_id}-0"}
                    )
                    async with http.stream("GET", demo_server.url, headers=headers) as response:
                        assert response.status_code == 200
                        body = await response.aread()
                        assert b'"id":5' not in body, body
                # ...and these GETs came while it was still under way (its answer not sent yet)
                assert (await fetch_stats(demo_server))["inflight"] == 1 and not answers
            assert answers[0].status_code == 200 and answers[0].json()["id"] == 5, answers[0].text
            assert "result" in answers[0].json(), answers[0].text
            await client.delete()
    await assert_back_to_baseline(demo_server, baseline)


@pytest.mark.demo_only  # the HTTP layer alone (and a server of its own: seconds to start)
@pytest.mark.server_flags("--body-timeout", "0.5")
async def test_a_stalled_upload_gets_408_and_locks_nobody_out(
    demo_server: DemoServer, baseline: Baseline
) -> None:
    head = (
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b'accept: application/json, text/event-stream\r\ncontent-length: 100\r\n\r\n{"jsonrpc"'
    )
    with trio.fail_after(15):
        streams = []
        for _ in range(50):
            stream = await trio.open_tcp_stream("127.0.0.1", demo_server.port)
            await stream.send_all(head)
            streams.append(stream)
        async with http_client() as http:
            client = await session_of(http, demo_server.url)  # served meanwhile
            assert await client.echo("meanwhile") == "meanwhile"
            await client.delete()
        for stream in streams:
            answer = b""
            while chunk := await stream.receive_some(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
            await stream.aclose()
    await assert_back_to_baseline(demo_server, baseline)


async def test_conflicting_duplicate_headers_are_refused(demo_server: DemoServer, baseline: Baseline) -> None:
    async with http_client() as http:
        with trio.fail_after(10):
            body, headers = modern_call("echo", {"text": "x"})
            pairs = [*headers.items(), ("mcp-method", "tools/list")]
            response = await post_raw(http, demo_server.url, body, pairs)
            assert response.status_code == 400 and response.json()["error"]["code"] == mt.HEADER_MISMATCH
            client = await session_of(http, demo_server.url)
            pairs = [*client.headers(**POST_HEADERS).items(), ("mcp-session-id", "another")]
            response = await post_raw(http, demo_server.url, call_body(4, "x"), pairs)
            assert response.status_code == 400, response.text
            assert await client.echo("ok") == "ok"
            await client.delete()
    await assert_back_to_baseline(demo_server, baseline)


async def test_stats_refuse_a_foreign_host(demo_server: DemoServer) -> None:
    async with http_client() as http:
        response = await http.get(demo_server.stats_url, headers={"host": "evil.example"})
        assert response.status_code == 421, response.text


@pytest.mark.demo_only  # the demo's hand-written schema and Mcp-Param-* headers
async def test_strict_tool_arguments_and_param_headers(demo_server: DemoServer, baseline: Baseline) -> None:
    async with http_client() as http:
        with trio.fail_after(10):
            # A hand-written input schema is enforced (additionalProperties: false, the if/then rule).
            arguments = {"name": "x", "email": "a@b", "intruder": 1}
            body, headers = modern_call("json_schema_2020_12_tool", arguments)
            result = (await post_raw(http, demo_server.url, body, headers)).json()["result"]
            assert result["isError"] is True and "Invalid arguments" in result["content"][0]["text"], result
            # Mcp-Param-* numbers: only the decimal grammar matches; a header for an absent value is refused.
            arguments = {"region": "eu", "priority": 10}
            body, headers = modern_call("test_custom_headers", arguments)
            for priority in ("+10", "1_0", "1e1", "0x0A", "NaN"):
                sent = {**headers, "mcp-param-region": "eu", "mcp-param-priority": priority}
                response = await post_raw(http, demo_server.url, body, sent)
                assert response.status_code == 400, (priority, response.text)
                assert response.json()["error"]["code"] == mt.HEADER_MISMATCH
            sent = {**headers, "mcp-param-region": "eu", "mcp-param-priority": "10.0"}
            response = await post_raw(http, demo_server.url, body, sent)
            assert response.json()["result"]["content"][0]["text"] == "region=eu priority=10", response.text
            body, headers = modern_call("test_custom_headers", {"region": "eu"})
            sent = {**headers, "mcp-param-region": "eu", "mcp-param-priority": "=?base64?***?="}
            response = await post_raw(http, demo_server.url, body, sent)
            assert response.status_code == 400 and response.json()["error"]["code"] == mt.HEADER_MISMATCH
    await assert_back_to_baseline(demo_server, baseline)


@pytest.mark.demo_only  # MCPServer has no resources/subscribe: test_sdk_hosted.py bounds a low-level Server's
async def test_subscriptions_and_kept_events_are_bounded(demo_server: DemoServer, baseline: Baseline) -> None:
    async with http_client() as http:
        with trio.fail_after(30):
            init = {**INIT, "params": {**INIT["params"], "protocolVersion": "2025-03-26"}}  # type: ignore[dict-item]
            response = await http.post(demo_server.url, json=init, headers=POST_HEADERS)
            session = {
                "mcp-session-id": response.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-03-26",
            }
            headers = {**POST_HEADERS, **session, "accept": "application/json, text/event-stream"}
            await http.post(
                demo_server.url,
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                headers=headers,
            )
            # A batch larger than the stream's queue (256) is refused whole; smaller ones are served.
            too_big = [{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(257)]
            response = await post_raw(http, demo_server.url, json.dumps(too_big).encode(), headers)
            assert response.status_code == 400 and "at most 256" in response.json()["error"]["message"]
            answers: dict[int, Any] = {}
            for start in range(0, 1001, 250):
                subscribe = [
                    {
                        "jsonrpc": "2.0",
                        "id": n,
                        "method": "resources/subscribe",
                        "params": {"uri": f"test://{n}"},
                    }
                    for n in range(start, min(start + 250, 1001))
                ]
                response = await http.post(demo_server.url, json=subscribe, headers=headers)
                assert response.status_code == 200, response.text[:500]
                for line in response.text.splitlines():
                    if line.startswith("data:") and line[5:].strip():
                        message = json.loads(line[5:])
                        answers[message["id"]] = message
            assert len(answers) == 1001, (len(answers), response.text[:300])
            refused = [n for n, answer in answers.items() if "error" in answer]
            assert len(refused) == 1 and answers[refused[0]]["error"]["code"] == mt.INVALID_PARAMS, refused
            # 40 answers of 1 MB each: the event store keeps at most 16 MiB of this session.
            for n in range(40):
                call = {
                    "jsonrpc": "2.0",
                    "id": 2000 + n,
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "x" * 1_000_000}},
                }
                response = await http.post(demo_server.url, json=call, headers=headers)
                assert response.status_code == 200
            kept = (await fetch_stats(demo_server))["event_store"]
            assert kept["bytes"] <= 16 * 1024 * 1024 and kept["streams"] <= 32, kept
            await http.delete(demo_server.url, headers=session)
    await assert_back_to_baseline(demo_server, baseline)


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18"])
async def test_a_stream_with_nothing_to_send_yet_gets_its_head_at_once(
    demo_server: DemoServer, baseline: Baseline, version: str
) -> None:
    # A resumed GET with nothing to replay, and (without priming events) a slow call: the status line
    # must not wait for the first event (serve_h11 held it back for the first body bytes).
    async with http_client() as http:
        init = {**INIT, "params": {**INIT["params"], "protocolVersion": version}}  # type: ignore[dict-item]
        response = await http.post(demo_server.url, json=init, headers=POST_HEADERS)
        session = {"mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": version}
        await http.post(
            demo_server.url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**POST_HEADERS, **session},
        )
        with trio.fail_after(2):
            headers = {**session, "accept": "text/event-stream", "last-event-id": "0-0"}
            async with http.stream("GET", demo_server.url, headers=headers) as resumed:
                assert resumed.status_code == 200
        slow = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 3}},
        }
        with trio.fail_after(1.5):
            request = http.build_request(
                "POST", demo_server.url, json=slow, headers={**POST_HEADERS, **session}
            )
            response = await http.send(request, stream=True)
            assert response.status_code == 200
        await response.aclose()
        await http.delete(demo_server.url, headers=session)
    await assert_back_to_baseline(demo_server, baseline)
