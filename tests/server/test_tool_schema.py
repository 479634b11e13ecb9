"""Tools registered with an explicit ``input_schema``: their arguments are validated against that JSON
Schema (2020-12 unless ``$schema`` says otherwise) and invalid ones get the same ``isError`` answer as
the type-hint path, with a short message; hostile arguments cannot blow the validation up."""

from __future__ import annotations

import logging
import socket
import time
import urllib.request
from typing import Any

import pytest
import trio

from mcp_trio import Context, MCPApp, MCPServer, ServerConfig
from mcp_trio._app.tools import InvalidArguments, ToolSpec
from mcp_trio._demo_data import JSON_SCHEMA_2020_12

from .conftest import Client, settle

STRICT = {
    "type": "object",
    "properties": {
        "x": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "region": {"type": "string", "x-mcp-header": "Region", "x-vendor-note": {"any": "thing"}},
    },
    "required": ["x"],
    "additionalProperties": False,
}
TREE = {
    "type": "object",
    "properties": {"tree": {"$ref": "#/$defs/node"}},
    "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
}
DRAFT4 = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "properties": {"n": {"type": "number", "maximum": 10, "exclusiveMaximum": True}},
}
FORMATS = {
    "type": "object",
    "properties": {
        "host": {"type": "string", "format": "hostname"},
        "mail": {"type": "string", "format": "email"},
        "link": {"type": "string", "format": "uri"},
        "name": {"type": "string", "format": "idn-hostname"},
    },
}
REMOTE_REF = {"type": "object", "properties": {"x": {"$ref": "https://example.com/schemas/x.json"}}}
UNIQUE = {"type": "object", "properties": {"items": {"type": "array", "uniqueItems": True}}}
PATTERNED = {
    "type": "object",
    "patternProperties": {"^k": {"type": "integer"}},
    "unevaluatedProperties": False,
}
CONTAINS = {
    "type": "object",
    "properties": {
        "xs": {"type": "array", "contains": {"type": "integer"}, "unevaluatedItems": False},
    },
}
NUMBERS = {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"}}}}
OK = {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"result": "ok"}}  # -> str


def build(calls: list[dict[str, Any]]) -> MCPServer:
    server = MCPServer("schema-test")

    def register(name: str, schema: dict[str, Any]) -> None:
        async def tool(**arguments: Any) -> str:
            calls.append(arguments)
            return "ok"

        server.add_tool(tool, name=name, input_schema=schema)

    for name, schema in {
        "strict": STRICT,
        "tree": TREE,
        "draft4": DRAFT4,
        "formats": FORMATS,
        "remote": REMOTE_REF,
        "unique": UNIQUE,
        "patterned": PATTERNED,
        "contains": CONTAINS,
        "numbers": NUMBERS,
        "contact": JSON_SCHEMA_2020_12,
    }.items():
        register(name, schema)

    @server.tool()
    async def hinted(x: int) -> str:
        return str(x)

    return server


@pytest.fixture
def calls() -> list[dict[str, Any]]:
    return []


@pytest.fixture
async def app(config: ServerConfig, calls: list[dict[str, Any]]) -> MCPApp:
    return MCPApp(build(calls), config)


async def call(client: Client, request_id: int, tool: str, arguments: Any) -> dict[str, Any]:
    message = await client.request(request_id, "tools/call", {"name": tool, "arguments": arguments})
    result: dict[str, Any] = message["result"]
    return result


def error_text(result: dict[str, Any]) -> str:
    assert result.get("isError") is True, result
    text: str = result["content"][0]["text"]
    return text


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


async def test_valid_arguments_reach_the_tool(client: Client, calls: list[dict[str, Any]]) -> None:
    await client.initialize()
    result = await call(client, 2, "strict", {"x": 1, "tags": ["a", "b"], "region": "eu"})
    assert result == OK
    assert calls == [{"x": 1, "tags": ["a", "b"], "region": "eu"}]


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({}, "'x' is a required property"),
        ({"x": "1"}, "x: '1' is not of type 'integer'"),
        ({"x": 1, "y": 2}, "Additional properties are not allowed ('y' was unexpected)"),
        ({"x": 1, "tags": ["a", 2]}, "tags.1: 2 is not of type 'string'"),
        ({"x": 1, "tags": ["a", "a"]}, "tags: items are not unique (item 1 repeats an earlier one)"),
    ],
)
async def test_invalid_arguments_are_a_tool_error(
    client: Client, calls: list[dict[str, Any]], arguments: dict[str, Any], text: str
) -> None:
    await client.initialize()
    result = await call(client, 2, "strict", arguments)
    assert error_text(result) == f"Invalid arguments for tool strict: {text}"
    assert calls == []  # the tool never ran


async def test_same_answer_shape_as_the_type_hint_path(client: Client) -> None:
    await client.initialize()
    hinted = await call(client, 2, "hinted", {"x": "nope"})
    explicit = await call(client, 3, "strict", {"x": "nope"})
    assert hinted.keys() == explicit.keys() == {"content", "isError"}
    assert error_text(hinted).startswith("Invalid arguments for tool hinted: x: ")
    assert error_text(explicit).startswith("Invalid arguments for tool strict: x: ")


async def test_error_text_is_short_and_does_not_echo_huge_values(client: Client) -> None:
    await client.initialize()
    huge = "v" * 100_000
    for request_id, arguments in enumerate(
        [{"x": huge}, {"x": 1, huge: 1}, {"x": 1, "tags": [huge, huge]}, {"x": [1] * 50_000}], start=2
    ):
        text = error_text(await call(client, request_id, "strict", arguments))
        assert len(text) <= 300, text
        assert text.startswith("Invalid arguments for tool strict: ")


async def test_dialect_from_schema_keyword(client: Client, calls: list[dict[str, Any]]) -> None:
    await client.initialize()
    assert await call(client, 2, "draft4", {"n": 9.5}) == OK
    text = error_text(await call(client, 3, "draft4", {"n": 10}))  # draft-04's boolean exclusiveMaximum
    assert text.startswith("Invalid arguments for tool draft4: n: 10 is greater than")
    assert calls == [{"n": 9.5}]


async def test_demo_2020_12_schema_with_refs_anchors_and_conditionals(client: Client) -> None:
    await client.initialize()
    valid = {"name": "Ann", "contactMethod": "phone", "phone": "123", "address": {"city": "Oslo"}}
    assert await call(client, 2, "contact", valid) == OK
    no_phone = error_text(await call(client, 3, "contact", {"contactMethod": "phone", "email": "a@b"}))
    assert no_phone == "Invalid arguments for tool contact: 'phone' is a required property"
    bad_ref = error_text(await call(client, 4, "contact", {"email": "a@b", "address": {"city": 1}}))
    assert bad_ref == "Invalid arguments for tool contact: address.city: 1 is not of type 'string'"


def test_unknown_keywords_are_accepted_and_headers_still_found() -> None:
    async def tool(**arguments: Any) -> str:
        return "ok"  # pragma: no cover

    spec = ToolSpec.build(
        tool,
        name=None,
        title=None,
        description=None,
        input_schema=STRICT,
        output_schema=None,
        annotations=None,
        task="forbidden",
    )
    assert spec.header_params == {"region": ("region",)}
    assert spec.wire()["inputSchema"] == STRICT  # the schema is listed as given


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "object", "properties": {"x": {"type": "intger"}}},
            "tool bad: invalid input_schema at properties.x.type: 'intger' is not valid under any",
        ),
        ({"type": "object", "required": "x"}, "tool bad: invalid input_schema at required: 'x' is not"),
        ({"type": "object", "properties": {"x": {"pattern": "("}}}, "tool bad: invalid input_schema at"),
        ({**DRAFT4, "$schema": None}, "tool bad: input_schema has an unknown $schema None"),
        (
            {**DRAFT4, "$schema": "https://example.com/my-dialect"},
            "tool bad: input_schema has an unknown $schema 'https://example.com/my-dialect'",
        ),
        ({k: v for k, v in DRAFT4.items() if k != "$schema"}, "tool bad: invalid input_schema at"),
    ],
)
def test_invalid_schemas_fail_at_registration(schema: dict[str, Any], message: str) -> None:
    server = MCPServer("x")

    async def tool(**arguments: Any) -> str:
        return "ok"  # pragma: no cover

    with pytest.raises(ValueError) as raised:
        server.add_tool(tool, name="bad", input_schema=schema)
    assert str(raised.value).startswith(message), raised.value
    assert len(str(raised.value)) <= 240


async def test_deep_nesting_over_http_is_a_clean_error(client: Client, calls: list[dict[str, Any]]) -> None:
    await client.initialize()
    depth = 400  # json.loads takes it; jsonschema recurses several frames per level
    body = '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "tree", "arguments": '
    body += '{"tree": ' + "[" * depth + "]" * depth + "}}}"
    message = await client.read_message(await client.post(body.encode()))
    text = error_text(message["result"])
    assert text == "Invalid arguments for tool tree: arguments are nested too deeply to validate"
    assert await call(client, 3, "tree", {"tree": [[], [[]]]}) == OK
    assert calls == [{"tree": [[], [[]]]}]


@pytest.mark.parametrize("tool", ["tree", "unique", "strict"])
async def test_5000_levels_of_nesting_are_a_clean_error(tool: str) -> None:
    calls: list[dict[str, Any]] = []
    spec = build(calls)._tools[tool]
    arguments = {"tree": nested(5000)} if tool == "tree" else {"items": [nested(5000), nested(5000)]}
    if tool == "strict":
        arguments = {"x": nested(5000)}  # the error message would repr the value
    with pytest.raises(InvalidArguments) as raised:
        await spec.call(None, arguments)  # type: ignore[arg-type]
    assert len(str(raised.value)) <= 240
    assert calls == []


async def test_formats_are_not_asserted_and_nothing_is_fetched(
    client: Client,
    calls: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    network: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        network.append(args)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    await client.initialize()
    odd = {"host": "-not a host-", "mail": "nobody", "link": "::", "name": "xn--"}
    assert await call(client, 2, "formats", odd) == OK
    with caplog.at_level(logging.ERROR, logger="mcp_trio.handlers"):
        remote = error_text(await call(client, 3, "remote", {"x": 1}))
    # a schema that cannot be used is the server's bug: logged (with the reference), not told
    assert remote.startswith("Internal error (reference ")
    [record] = caplog.records
    assert record.exc_info is not None and record.getMessage().endswith(remote[len("Internal error ") :])
    assert str(record.exc_info[1]).startswith("tool remote: input_schema has an unresolvable")
    assert network == [] and calls == [odd]


async def test_unique_items_is_linear(client: Client) -> None:
    await client.initialize()
    items: list[Any] = [{"id": n, "tags": [n, str(n)]} for n in range(5_000)]
    started = time.process_time()  # CPU seconds: a busy machine does not count
    assert await call(client, 2, "unique", {"items": items}) == OK
    text = error_text(await call(client, 3, "unique", {"items": [*items, {"tags": [5, "5"], "id": 5.0}]}))
    assert text.endswith(": items: items are not unique (item 5000 repeats an earlier one)")
    assert time.process_time() - started < 5  # jsonschema's own uniqueItems takes half a minute here


@pytest.mark.parametrize(
    ("unique", "items"),
    [
        (True, [1, True]),
        (True, [0, False, None, "0", [0], {"a": 0}, {"a": False}]),
        (False, [1, 1.0]),
        (False, [{"a": 1, "b": [1, {"c": None}]}, {"b": [1.0, {"c": None}], "a": 1}]),
        (False, [[1, 2], [1, 2]]),
    ],
)
def test_unique_items_uses_json_schema_equality(unique: bool, items: list[Any]) -> None:
    spec = build([])._tools["unique"]
    assert spec.schema is not None
    assert (spec.schema.first_error({"items": items}) is None) is unique


async def test_unevaluated_keywords_are_linear(client: Client) -> None:
    await client.initialize()
    started = time.process_time()  # CPU seconds: a busy machine does not count
    keyed = {f"k{n}": n for n in range(20_000)}
    assert await call(client, 2, "patterned", keyed) == OK
    text = error_text(await call(client, 3, "patterned", {**keyed, "z": 1}))
    assert text == "Invalid arguments for tool patterned: Unevaluated property 'z' is not allowed"
    numbers: list[Any] = list(range(20_000))
    assert await call(client, 4, "contains", {"xs": numbers}) == OK
    text = error_text(await call(client, 5, "contains", {"xs": [*numbers, "x", "y"]}))
    assert text == "Invalid arguments for tool contains: xs: Unevaluated items are not allowed (2 unexpected)"
    assert time.process_time() - started < 10  # jsonschema's own versions take 15 s here (1.5 s: these)


async def test_large_arguments_are_validated_off_the_event_loop(client: Client) -> None:
    await client.initialize()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.002)
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await settle()
        ticks = 0
        text = error_text(await call(client, 2, "numbers", {"xs": [*range(100_000), "x"]}))
        nursery.cancel_scope.cancel()
    assert text == "Invalid arguments for tool numbers: xs.100000: 'x' is not of type 'integer'"
    assert ticks >= 5  # the loop kept running while a worker thread validated


async def test_cancelled_validation_does_not_run_the_tool() -> None:
    calls: list[dict[str, Any]] = []
    spec = build(calls)._tools["numbers"]
    with trio.move_on_after(0.01) as scope:
        await spec.call(None, {"xs": list(range(100_000))})  # type: ignore[arg-type]
    assert scope.cancelled_caught and calls == []


async def test_context_parameter_still_works_with_an_explicit_schema() -> None:
    server = MCPServer("ctx")
    seen: list[str] = []

    @server.tool(input_schema={"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})
    async def with_ctx(ctx: Context, a: str) -> str:
        seen.append(ctx.method)
        return a

    spec = server._tools["with_ctx"]
    with pytest.raises(InvalidArguments, match="'a' is a required property"):
        await spec.call(None, {})  # type: ignore[arg-type]
    assert seen == []
