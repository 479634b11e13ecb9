"""Output schemas from return annotations, as the python-sdk derives them: an object type (pydantic model,
dataclass, TypedDict, ``dict[str, T]``) is the schema itself; anything else is wrapped as
``{"result": T}``.  The value is validated and sent as ``structuredContent`` (with its text for older
clients); an explicit ``output_schema`` wins, ``structured_output=False`` opts out, and a value the
schema refuses is a server failure.  In both eras, for task tools too, and listed by ``tools/list``."""

from __future__ import annotations

import dataclasses
import logging
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal, NamedTuple, Optional

import jsonschema
import mcp_types as mt
import mcp_types.methods as mtm
import pydantic
import pytest
import trio
import trio.testing
import typing_extensions

from mcp_trio import MCPApp, MCPServer, ServerConfig
from mcp_trio._app.codec import text_result
from mcp_trio.testing import open_asgi_client

from .conftest import Client
from .test_modern import Modern
from .test_tasks import TaskClient


class Point(pydantic.BaseModel):
    x: int
    y: int = 0


class Tree(pydantic.BaseModel):
    name: str
    children: list[Tree] = []


@dataclasses.dataclass
class Size:
    width: float
    height: float = 1.0


class Weather(typing.TypedDict):
    city: str
    celsius: float


class Forecast(typing_extensions.TypedDict, total=False):
    city: typing_extensions.Required[str]
    days: int


class Pair(NamedTuple):
    left: int
    right: int


class Plain:
    """An ordinary class with annotations (read by attribute)."""

    label: str
    count: int = 0

    def __init__(self, label: str, count: int = 0) -> None:
        self.label, self.count = label, count


EXPLICIT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def build() -> MCPServer:
    server = MCPServer("outputs")

    @server.tool()
    async def point() -> Point:
        return Point(x=1, y=2)

    @server.tool()
    async def point_from_dict() -> Point:
        return {"x": "3"}  # type: ignore[return-value]  # validated (and coerced) into the model

    @server.tool()
    async def tree() -> Tree:
        return Tree(name="root", children=[Tree(name="leaf")])

    @server.tool()
    async def size() -> Size:
        return Size(2.5)

    @server.tool()
    async def weather() -> Weather:
        return {"city": "Oslo", "celsius": -3.5}

    @server.tool()
    async def forecast() -> Forecast:
        return {"city": "Bergen"}

    @server.tool()
    async def pair() -> Pair:
        return Pair(1, 2)

    @server.tool()
    async def plain() -> Plain:
        return Plain("a", 2)

    @server.tool()
    async def text() -> str:
        return "hello"

    @server.tool()
    async def number() -> int:
        return 42

    @server.tool()
    async def ratio() -> float:
        return 0.5

    @server.tool()
    async def flag() -> bool:
        return True

    @server.tool()
    async def numbers() -> list[int]:
        return [1, 2, 3]

    @server.tool()
    async def scores() -> dict[str, float]:
        return {"a": 1.5}

    @server.tool()
    async def nothing() -> None:
        return None

    @server.tool()
    async def maybe() -> Optional[int]:  # noqa: UP045 - the spelling users write too
        return None

    @server.tool()
    async def choice() -> Literal["yes", "no"]:
        return "yes"

    @server.tool(output_schema=EXPLICIT)
    async def explicit() -> dict[str, int]:
        return {"n": 7}

    @server.tool(output_schema=EXPLICIT)
    async def explicit_wrong() -> dict[str, Any]:
        return {"n": "seven"}

    @server.tool(output_schema=EXPLICIT)
    async def explicit_result() -> mt.CallToolResult:
        return mt.CallToolResult(content=[], structured_content={"n": 8})

    @server.tool(structured_output=False)
    async def opted_out() -> Point:
        return Point(x=5)

    @server.tool()
    async def unannotated():  # type: ignore[no-untyped-def]
        return "free"

    @server.tool()
    async def blocks() -> list[mt.TextContent | mt.ImageContent]:
        return [mt.TextContent(type="text", text="a block")]

    @server.tool()
    async def whole() -> mt.CallToolResult:
        return mt.CallToolResult(content=[mt.TextContent(type="text", text="as is")])

    @server.tool()
    async def wrong_type() -> int:
        return "many"  # type: ignore[return-value]

    @server.tool(task="optional")
    async def slow_point() -> Point:
        await trio.sleep(1)
        return Point(x=9, y=9)

    return server


SCHEMAS: dict[str, dict[str, Any]] = {
    "point": {
        "properties": {
            "x": {"title": "X", "type": "integer"},
            "y": {"default": 0, "title": "Y", "type": "integer"},
        },
        "required": ["x"],
        "title": "Point",
        "type": "object",
    },
    "size": {
        "properties": {
            "width": {"title": "Width", "type": "number"},
            "height": {"default": 1.0, "title": "Height", "type": "number"},
        },
        "required": ["width"],
        "title": "Size",
        "type": "object",
    },
    "weather": {
        "properties": {
            "city": {"title": "City", "type": "string"},
            "celsius": {"title": "Celsius", "type": "number"},
        },
        "required": ["city", "celsius"],
        "title": "Weather",
        "type": "object",
    },
    "text": {
        "properties": {"result": {"title": "Result", "type": "string"}},
        "required": ["result"],
        "title": "textOutput",
        "type": "object",
    },
    "numbers": {
        "properties": {"result": {"items": {"type": "integer"}, "title": "Result", "type": "array"}},
        "required": ["result"],
        "title": "numbersOutput",
        "type": "object",
    },
    "scores": {"additionalProperties": {"type": "number"}, "title": "scoresOutput", "type": "object"},
    "nothing": {
        "properties": {"result": {"title": "Result", "type": "null"}},
        "required": ["result"],
        "title": "nothingOutput",
        "type": "object",
    },
    "maybe": {
        "properties": {"result": {"anyOf": [{"type": "integer"}, {"type": "null"}], "title": "Result"}},
        "required": ["result"],
        "title": "maybeOutput",
        "type": "object",
    },
    "explicit": EXPLICIT,
}

RESULTS: dict[str, dict[str, Any]] = {  # name -> (content texts, structuredContent)
    "point": {"text": ['{"x": 1, "y": 2}'], "structured": {"x": 1, "y": 2}},
    "point_from_dict": {"text": ['{"x": 3, "y": 0}'], "structured": {"x": 3, "y": 0}},
    "tree": {
        "text": ['{"name": "root", "children": [{"name": "leaf", "children": []}]}'],
        "structured": {"name": "root", "children": [{"name": "leaf", "children": []}]},
    },
    "size": {"text": ['{"width": 2.5, "height": 1.0}'], "structured": {"width": 2.5, "height": 1.0}},
    "weather": {
        "text": ['{"city": "Oslo", "celsius": -3.5}'],
        "structured": {"city": "Oslo", "celsius": -3.5},
    },
    "forecast": {"text": ['{"city": "Bergen"}'], "structured": {"city": "Bergen"}},
    "pair": {"text": ['{"left": 1, "right": 2}'], "structured": {"left": 1, "right": 2}},
    "plain": {"text": ['{"label": "a", "count": 2}'], "structured": {"label": "a", "count": 2}},
    "text": {"text": ["hello"], "structured": {"result": "hello"}},
    "number": {"text": ["42"], "structured": {"result": 42}},
    "ratio": {"text": ["0.5"], "structured": {"result": 0.5}},
    "flag": {"text": ["true"], "structured": {"result": True}},
    "numbers": {"text": ["1", "2", "3"], "structured": {"result": [1, 2, 3]}},
    "scores": {"text": ['{"a": 1.5}'], "structured": {"a": 1.5}},
    "nothing": {"text": [], "structured": {"result": None}},
    "maybe": {"text": [], "structured": {"result": None}},
    "choice": {"text": ["yes"], "structured": {"result": "yes"}},
    "explicit": {"text": ['{"n": 7}'], "structured": {"n": 7}},
    "explicit_result": {"text": [], "structured": {"n": 8}},
}
NO_SCHEMA = {"opted_out", "unannotated", "blocks", "whole"}


@pytest.fixture
async def app() -> AsyncIterator[MCPApp]:
    app = MCPApp(build(), ServerConfig())
    async with app.running():
        yield app


@asynccontextmanager
async def legacy_client(app: MCPApp) -> AsyncIterator[Client]:
    async with open_asgi_client(app) as asgi:
        client = Client(asgi, app)
        await client.initialize()
        yield client


def texts(result: dict[str, Any]) -> list[str]:
    return [block["text"] for block in result["content"]]


@pytest.mark.parametrize("era", ["2025", "2026"])
async def test_tools_list_shows_the_output_schemas(app: MCPApp, era: str) -> None:
    async with open_asgi_client(app) as asgi:
        if era == "2025":
            client = Client(asgi, app)
            await client.initialize()
            tools = (await client.request(2, "tools/list"))["result"]["tools"]
        else:
            status, body = await Modern(asgi).call("tools/list")
            assert status == 200
            tools = body["result"]["tools"]
    schemas = {tool["name"]: tool.get("outputSchema") for tool in tools}
    for name, schema in SCHEMAS.items():
        assert schemas[name] == schema, name
    assert {name for name, schema in schemas.items() if schema is None} == NO_SCHEMA
    assert all(schema["type"] == "object" for schema in schemas.values() if schema is not None)
    tree = schemas["tree"]  # a self-referencing model: an object at the root, its $defs kept
    assert tree["type"] == "object" and "$ref" not in tree and "Tree" in tree["$defs"]
    forecast = schemas["forecast"]  # a key not required stays optional
    assert forecast["required"] == ["city"] and set(forecast["properties"]) == {"city", "days"}
    for schema in schemas.values():
        if schema is not None:
            jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("era", ["2025", "2026"])
async def test_results_carry_the_validated_structured_content(app: MCPApp, era: str) -> None:
    async with open_asgi_client(app) as asgi:
        client: Any
        if era == "2025":
            client = Client(asgi, app)
            await client.initialize()
            tools = (await client.request(2, "tools/list"))["result"]["tools"]
        else:
            client = Modern(asgi)
            tools = (await client.call("tools/list"))[1]["result"]["tools"]
        schemas = {tool["name"]: tool.get("outputSchema") for tool in tools}
        for n, (name, expected) in enumerate(RESULTS.items()):
            params = {"name": name, "arguments": {}}
            if era == "2025":
                result = (await client.request(10 + n, "tools/call", params))["result"]
            else:
                status, body = await client.call("tools/call", params)
                assert status == 200, body
                result = body["result"]
                assert result["resultType"] == "complete"
            assert not result.get("isError"), (name, result)
            assert texts(result) == expected["text"], name
            assert result["structuredContent"] == expected["structured"], name
            jsonschema.validate(result["structuredContent"], schemas[name])  # as a strict client does


async def test_without_a_schema_nothing_changes(app: MCPApp) -> None:
    async with legacy_client(app) as client:
        opted = (await client.request(2, "tools/call", {"name": "opted_out"}))["result"]
        dumped = {"x": 5, "y": 0}
        as_before = {"content": [{"type": "text", "text": '{"x": 5, "y": 0}'}], "structuredContent": dumped}
        assert opted == as_before  # a model: structuredContent as it always was, but no schema
        free = (await client.request(3, "tools/call", {"name": "unannotated"}))["result"]
        assert free == {"content": [{"type": "text", "text": "free"}]}
        blocks = (await client.request(4, "tools/call", {"name": "blocks"}))["result"]
        assert blocks == {"content": [{"type": "text", "text": "a block"}]}
        whole = (await client.request(5, "tools/call", {"name": "whole"}))["result"]
        assert whole == {"content": [{"type": "text", "text": "as is"}], "isError": False}


@pytest.mark.parametrize(
    ("tool", "detail"),
    [
        ("wrong_type", "result: Input should be a valid integer, unable to parse string as an integer"),
        ("explicit_wrong", "n: 'seven' is not of type 'integer'"),
    ],
)
async def test_a_value_the_schema_refuses_is_a_server_failure(
    app: MCPApp, tool: str, detail: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="mcp_trio")
    async with legacy_client(app) as client:
        result = (await client.request(2, "tools/call", {"name": tool}))["result"]
    assert result["isError"] is True and "structuredContent" not in result
    [text] = texts(result)
    assert text.startswith("Internal error (reference ")  # nothing malformed reaches the client
    [record] = caplog.records
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == f"tool {tool} returned a value its output schema refuses: {detail}"


async def test_a_task_tool_keeps_its_structured_content(
    app: MCPApp, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_asgi_client(app) as asgi:
        tasks = TaskClient(asgi)
        task_id = (await tasks.start("slow_point"))["taskId"]
        task = await tasks.wait(task_id, "completed")
        ordinary = (await tasks.tool("slow_point", tasks=False))["result"]  # no extension: a plain call
    assert task["result"]["structuredContent"] == ordinary["structuredContent"] == {"x": 9, "y": 9}
    assert texts(task["result"]) == texts(ordinary) == ['{"x": 9, "y": 9}']


def test_registration_options() -> None:
    server = MCPServer("options")

    async def unannotated():  # type: ignore[no-untyped-def]
        return 1  # pragma: no cover

    with pytest.raises(TypeError, match="tool unannotated: its return annotation gives no output schema"):
        server.add_tool(unannotated, structured_output=True)

    async def forced() -> Point:
        return Point(x=1)  # pragma: no cover

    server.add_tool(forced, structured_output=True)
    assert server._tools["forced"].wire()["outputSchema"] == SCHEMAS["point"]

    async def opaque() -> object:
        return object()  # pragma: no cover

    server.add_tool(opaque)  # a type without annotations: no schema, as the python-sdk does
    assert "outputSchema" not in server._tools["opaque"].wire()

    with pytest.raises(ValueError, match="tool bad: invalid output_schema at type"):
        server.add_tool(forced, name="bad", output_schema={"type": "objekt"})


def test_the_text_fast_path_answers_what_the_serializer_does() -> None:
    """A text result with a scalar ``{"result": ...}`` skips the serializer's validation pass and
    answers exactly what it would have (in every revision, with the 2026 result metadata)."""
    meta = {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}}
    layouts: dict[Any, Any] = {}
    for version in ("2025-06-18", "2025-11-25", "2026-07-28"):
        for scalar in ("text", 7, False):
            result: dict[str, Any] = {
                "content": [{"type": "text", "text": str(scalar)}],
                "structuredContent": {"result": scalar},
            }
            if version == "2026-07-28":
                result.update(resultType="complete", _meta=meta)
            fast = text_result(layouts, version, result)
            slow = mtm.serialize_server_result("tools/call", version, result)
            assert fast == slow and list(fast) == list(slow), (version, scalar)  # in the same order
    # anything else is left to the serializer
    for structured in ({"result": 1.5}, {"result": [1]}, {"a": "b"}, {"result": "x", "more": 1}):
        result = {"content": [{"type": "text", "text": "x"}], "structuredContent": structured}
        assert text_result(layouts, "2025-11-25", result) is None, structured


UserId = typing.NewType("UserId", int)


class Odd(pydantic.BaseModel):
    """A model whose default has no JSON form: pydantic would leave it out of the schema with a warning."""

    when: Any = object()


async def test_annotations_at_the_edges() -> None:
    server = MCPServer("edges")

    async def annotated() -> typing.Annotated[Point, "a note"]:
        return Point(x=1)

    async def odd() -> Odd:
        return Odd()  # pragma: no cover

    async def user() -> UserId:
        return UserId(5)

    async def bare_dict() -> dict:  # type: ignore[type-arg]
        return {"any": ["thing"]}

    async def noted_blocks() -> list[typing.Annotated[mt.TextContent, "a block"]]:
        return [mt.TextContent(type="text", text="b")]  # pragma: no cover

    async def unannotated_objects():  # type: ignore[no-untyped-def]
        return [Size(1.0, 2.0)]

    for fn in (annotated, odd, user, bare_dict, noted_blocks, unannotated_objects):
        server.add_tool(fn)
    tools = server._tools
    assert tools["annotated"].wire()["outputSchema"] == SCHEMAS["point"]
    assert "outputSchema" not in tools["odd"].wire()  # a schema pydantic can only get wrong: none
    assert tools["user"].wire()["outputSchema"]["properties"]["result"]["type"] == "integer"
    assert tools["bare_dict"].wire()["outputSchema"]["type"] == "object"
    assert "outputSchema" not in tools["noted_blocks"].wire()
    assert await tools["user"].result(await tools["user"].call(None, {})) == {  # type: ignore[arg-type]
        "content": [{"type": "text", "text": "5"}],
        "structuredContent": {"result": 5},
    }
    assert (await tools["bare_dict"].result({"any": ["thing"]}))["structuredContent"] == {"any": ["thing"]}
    objects = await tools["unannotated_objects"].result([Size(1.0, 2.0)])  # no schema: JSON text as before
    assert objects == {"content": [{"type": "text", "text": '{"width": 1.0, "height": 2.0}'}]}


async def test_explicit_schemas_at_the_edges() -> None:
    from mcp_trio._app.outputs import OutputMismatch

    server = MCPServer("explicit-edges")

    async def model() -> Point:
        return Point(x=1)  # pragma: no cover

    server.add_tool(model, output_schema={"type": "object", "required": ["x"]})
    server.add_tool(model, name="anything", output_schema={})  # no type: anything passes the schema
    spec, anything = server._tools["model"], server._tools["anything"]
    assert await spec.result(Point(x=2)) == {
        "content": [{"type": "text", "text": '{"x": 2, "y": 0}'}],
        "structuredContent": {"x": 2, "y": 0},
    }
    with pytest.raises(OutputMismatch, match="the value has no JSON form"):
        await spec.result({"x": object()})
    with pytest.raises(OutputMismatch, match="tool anything returned int, not an object"):
        await anything.result(3)
    failed = mt.CallToolResult(content=[mt.TextContent(type="text", text="no")], is_error=True)
    assert (await spec.result(failed))["isError"] is True  # an error result owes no structured content
    with pytest.raises(OutputMismatch, match="'x' is a required property"):
        await spec.result(mt.CallToolResult(content=[], structured_content={"y": 1}))
