"""A python-sdk server with every fixture the official conformance suite expects, written with the SDK's
own API (``mcp.server.mcpserver.MCPServer``), for mcp_trio to host: ``mcp-trio serve
sdk_everything:server`` (from this directory).  The python-sdk's conformance "everything" server is the
model; this one uses anyio (it runs on Trio) and leaves the HTTP options (event store, retry interval)
to mcp-trio.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any

import anyio
from mcp.server import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.server.mcpserver.prompts.base import Prompt, UserMessage
from mcp.shared.exceptions import MCPError
from mcp.types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    AudioContent,
    Completion,
    CompletionArgument,
    CompletionContext,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    InputRequest,
    InputRequiredResult,
    ListRootsRequest,
    ListRootsResult,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
STATE_KEY = b"mcp-trio-hosted-conformance-fixture-key!"

server = MCPServer(
    name="mcp-trio-hosted-conformance",
    version="1.0.0",
    request_state_security=RequestStateSecurity(keys=[STATE_KEY]),
)
subscribed: set[str] = set()


def text(value: str) -> TextContent:
    return TextContent(type="text", text=value)


# -- tools: content -------------------------------------------------------------------------------


@server.tool()
def test_simple_text() -> str:
    """Tests simple text content response"""
    return "This is a simple text response for testing."


@server.tool()
def test_image_content() -> list[ImageContent]:
    """Tests image content response"""
    return [ImageContent(type="image", data=PNG, mime_type="image/png")]


@server.tool()
def test_audio_content() -> list[AudioContent]:
    """Tests audio content response"""
    return [AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


def _embedded(uri: str, mime: str, body: str) -> EmbeddedResource:
    return EmbeddedResource(
        type="resource", resource=TextResourceContents(uri=uri, mime_type=mime, text=body)
    )


@server.tool()
def test_embedded_resource() -> list[EmbeddedResource]:
    """Tests embedded resource content response"""
    return [
        _embedded("test://embedded-resource", "text/plain", "This is an embedded resource content.")
    ]


@server.tool()
def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Tests response with multiple content types (text, image, resource)"""
    return [
        text("Multiple content types test:"),
        ImageContent(type="image", data=PNG, mime_type="image/png"),
        _embedded(
            "test://mixed-content-resource", "application/json", '{"test": "data", "value": 123}'
        ),
    ]


@server.tool()
def test_error_handling() -> str:
    """Tests error response handling"""
    raise RuntimeError("This tool intentionally returns an error for testing")


# -- tools: logging, progress, the client's input ---------------------------------------------------


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Tests tool that emits log messages during execution"""
    for step in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(step)
        await anyio.sleep(0.05)
    return "Tool with logging executed successfully"


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Tests tool that reports progress notifications"""
    for done in (0, 50, 100):
        await ctx.report_progress(progress=done, total=100, message=f"Completed step {done} of 100")
        await anyio.sleep(0.05)
    meta = ctx.request_context.meta
    return str(meta.get("progress_token") if meta else 0)


@server.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Tests server-initiated sampling (LLM completion request)"""
    try:
        result = await ctx.session.create_message(
            messages=[SamplingMessage(role="user", content=text(prompt))],
            max_tokens=100,
            related_request_id=ctx.request_id,
        )
    except Exception as exc:
        return f"Sampling not supported or error: {exc}"
    answer = result.content.text if result.content.type == "text" else "No response"
    return f"LLM response: {answer}"


class UserResponse(BaseModel):
    response: str = Field(description="User's response")


@server.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Tests server-initiated elicitation (user input request)"""
    try:
        result = await ctx.elicit(message=message, schema=UserResponse)
    except Exception as exc:
        return f"Elicitation not supported or error: {exc}"
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"User response: action={result.action}, content={content}"


class DefaultsSchema(BaseModel):
    """SEP-1034: a default for every primitive type."""

    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active",
        description="User status",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    verified: bool = Field(default=True, description="Verification status")


@server.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Tests elicitation with default values for all primitive types (SEP-1034)"""
    result = await ctx.elicit(message="Please provide user information", schema=DefaultsSchema)
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"Elicitation result: action={result.action}, content={content}"


def _titled(values: list[tuple[str, str]], key: str = "oneOf") -> dict[str, Any]:
    return {key: [{"const": const, "title": title} for const, title in values]}


class EnumSchemas(BaseModel):
    """SEP-1330: the enum schema variations."""

    untitledSingle: str = Field(
        description="Simple enum without titles",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    titledSingle: str = Field(
        description="Enum with titled options (oneOf)",
        json_schema_extra=_titled(
            [("low", "Low Priority"), ("medium", "Medium Priority"), ("high", "High Priority")]
        ),
    )
    untitledMulti: list[str] = Field(
        description="Multi-select without titles",
        json_schema_extra={"items": {"type": "string", "enum": ["read", "write", "execute"]}},
    )
    titledMulti: list[str] = Field(
        description="Multi-select with titled options",
        json_schema_extra={
            "items": _titled(
                [("feature", "New Feature"), ("bug", "Bug Fix"), ("docs", "Documentation")], "anyOf"
            )
        },
    )
    legacyEnum: str = Field(
        description="Legacy enum with enumNames",
        json_schema_extra={
            "enum": ["small", "medium", "large"],
            "enumNames": ["Small Size", "Medium Size", "Large Size"],
        },
    )


@server.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Tests elicitation with enum schema variations per SEP-1330"""
    result = await ctx.elicit(
        message="Please select values using different enum schema types", schema=EnumSchemas
    )
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"Elicitation completed: action={result.action}, content={content}"


@server.tool()
def test_x_mcp_header(
    region: Annotated[
        str,
        Field(
            description="Mirrored into the Mcp-Param-Region header",
            json_schema_extra={"x-mcp-header": "Region"},
        ),
    ] = "<none>",
) -> str:
    """Tests SEP-2243 Mcp-Param-* server-side validation."""
    return f"region={region}"


@server.tool()
async def test_missing_capability(ctx: Context) -> str:
    """Refuses with -32021 unless the client declared sampling."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.sampling is None:
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="This tool requires the client 'sampling' capability",
            data={"requiredCapabilities": {"sampling": {}}},
        )
    return "Client declared sampling capability; proceeding."


@server.tool()
async def test_reconnection(ctx: Context) -> str:
    """Tests SSE polling by closing the stream mid-call (SEP-1699)"""
    await ctx.info("Before disconnect")
    await ctx.close_sse_stream()
    await anyio.sleep(0.2)
    await ctx.info("After reconnect")
    return "Reconnection test completed"


# -- tools: input-required results (2026-07-28) ----------------------------------------------------

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _ask_name(message: str = "What is your name?") -> ElicitRequest:
    return ElicitRequest(
        params=ElicitRequestFormParams(message=message, requested_schema=NAME_SCHEMA)
    )


def _sample(prompt: str, max_tokens: int) -> CreateMessageRequest:
    return CreateMessageRequest(
        params=CreateMessageRequestParams(
            messages=[SamplingMessage(role="user", content=text(prompt))], max_tokens=max_tokens
        )
    )


def _elicited(answer: object, key: str) -> Any:
    return answer.content.get(key) if isinstance(answer, ElicitResult) and answer.content else None


@server.tool()
async def test_input_required_result_elicitation(ctx: Context) -> str | InputRequiredResult:
    """Tests InputRequiredResult with a single elicitation request"""
    responses = ctx.input_responses
    if responses and "user_name" in responses:
        return f"Hello, {_elicited(responses['user_name'], 'name') or '?'}!"
    return InputRequiredResult(input_requests={"user_name": _ask_name()})


@server.tool()
async def test_input_required_result_sampling(ctx: Context) -> str | InputRequiredResult:
    """Tests InputRequiredResult with a single sampling request"""
    responses = ctx.input_responses
    if responses and "capital_question" in responses:
        answer = responses["capital_question"]
        said = (
            answer.content.text
            if isinstance(answer, CreateMessageResult) and answer.content.type == "text"
            else "?"
        )
        return f"Model said: {said}"
    return InputRequiredResult(
        input_requests={"capital_question": _sample("What is the capital of France?", 100)}
    )


@server.tool()
async def test_input_required_result_list_roots(ctx: Context) -> str | InputRequiredResult:
    """Tests InputRequiredResult with a single roots/list request"""
    responses = ctx.input_responses
    if responses and "client_roots" in responses:
        answer = responses["client_roots"]
        return f"Client exposed {len(answer.roots) if isinstance(answer, ListRootsResult) else 0} root(s)."
    return InputRequiredResult(input_requests={"client_roots": ListRootsRequest()})


CONFIRM = ElicitRequest(
    params=ElicitRequestFormParams(
        message="Please confirm",
        requested_schema={
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
        },
    )
)


@server.tool()
async def test_input_required_result_request_state(ctx: Context) -> str | InputRequiredResult:
    """Tests requestState round-tripping in the InputRequiredResult flow"""
    responses = ctx.input_responses
    if responses and "confirm" in responses and ctx.request_state == "request-state-nonce":
        return "state-ok: confirmation received"
    return InputRequiredResult(
        input_requests={"confirm": CONFIRM}, request_state="request-state-nonce"
    )


@server.tool()
async def test_input_required_result_multiple_inputs(ctx: Context) -> str | InputRequiredResult:
    """Tests InputRequiredResult carrying elicitation, sampling and roots requests together"""
    responses = ctx.input_responses
    if responses and {"user_name", "greeting", "client_roots"} <= responses.keys():
        return "All inputs received."
    requests: dict[str, InputRequest] = {
        "user_name": _ask_name(),
        "greeting": _sample("Generate a greeting", 50),
        "client_roots": ListRootsRequest(),
    }
    return InputRequiredResult(input_requests=requests, request_state="multiple-inputs")


@server.tool()
async def test_input_required_result_multi_round(ctx: Context) -> str | InputRequiredResult:
    """Tests a three-round InputRequiredResult flow with evolving requestState"""
    state = json.loads(ctx.request_state) if ctx.request_state else {"round": 0}
    responses = ctx.input_responses or {}
    if state["round"] == 1 and "step1" in responses:
        color = {
            "type": "object",
            "properties": {"color": {"type": "string"}},
            "required": ["color"],
        }
        step2 = ElicitRequest(
            params=ElicitRequestFormParams(
                message="Step 2: What is your favorite color?", requested_schema=color
            )
        )
        name = _elicited(responses["step1"], "name")
        return InputRequiredResult(
            input_requests={"step2": step2}, request_state=json.dumps({"round": 2, "name": name})
        )
    if state["round"] == 2 and "step2" in responses:
        return f"{state.get('name')} likes {_elicited(responses['step2'], 'color')}."
    return InputRequiredResult(
        input_requests={"step1": _ask_name("Step 1: What is your name?")},
        request_state=json.dumps({"round": 1}),
    )


@server.tool()
async def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequiredResult:
    """The SDK's request-state boundary refuses a tampered requestState echo."""
    if ctx.request_state is None:
        return InputRequiredResult(input_requests={"confirm": CONFIRM}, request_state="round-1")
    return f"state-ok: {ctx.request_state}"


@server.tool()
async def test_input_required_result_capabilities(ctx: Context) -> InputRequiredResult:
    """Tests that inputRequests only include methods the client declared support for"""
    caps = ctx.client_capabilities
    requests: dict[str, InputRequest] = {}
    if caps is None or caps.sampling is not None:
        requests["sample"] = _sample("Say hello", 50)
    if caps is None or caps.elicitation is not None:
        requests["ask"] = _ask_name()
    return InputRequiredResult(input_requests=requests, request_state="capability-gated")


JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@server.tool(name="json_schema_2020_12_tool")
def json_schema_2020_12_tool() -> str:
    """Tests JSON Schema 2020-12 keyword preservation in tools/list."""
    return "json_schema_2020_12_tool"


# The SDK has no public way to give a tool its own input schema yet (its everything server does this too).
server._tool_manager._tools["json_schema_2020_12_tool"].parameters = JSON_SCHEMA_2020_12


# -- list changes (subscriptions/listen, 2026-07-28) -----------------------------------------------


def _dynamic() -> str:
    """Registered and removed again by the list-change tools."""
    return "dynamic"


@server.tool()
async def test_trigger_tool_change(ctx: Context) -> str:
    """Mutates the tool list and announces it (SEP-2575)"""
    server.add_tool(_dynamic, name="test_dynamic_tool")
    server.remove_tool("test_dynamic_tool")
    await ctx.notify_tools_changed()
    return "tool list changed"


@server.tool()
async def test_trigger_prompt_change(ctx: Context) -> str:
    """Mutates the prompt list and announces it (SEP-2575)"""
    server.add_prompt(
        Prompt.from_function(_dynamic, name="test_dynamic_prompt", description="dynamic")
    )
    server.remove_prompt("test_dynamic_prompt")
    await ctx.notify_prompts_changed()
    return "prompt list changed"


# -- resources ------------------------------------------------------------------------------------


@server.resource("test://static-text")
def static_text() -> str:
    """A static text resource for testing"""
    return "This is the content of the static text resource."


@server.resource("test://static-binary")
def static_binary() -> bytes:
    """A static binary resource (image) for testing"""
    return base64.b64decode(PNG)


@server.resource("test://template/{id}/data")
def template_data(id: str) -> str:
    """A resource template with parameter substitution"""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@server.resource("test://watched-resource")
def watched() -> str:
    """A resource that can be subscribed to for updates"""
    return "Watched resource content"


# -- prompts --------------------------------------------------------------------------------------


@server.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """A simple prompt without arguments"""
    return [UserMessage(role="user", content=text("This is a simple prompt for testing."))]


@server.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """A prompt with required arguments"""
    return [
        UserMessage(
            role="user", content=text(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")
        )
    ]


@server.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    """A prompt that includes an embedded resource"""
    return [
        UserMessage(
            role="user",
            content=_embedded(resourceUri, "text/plain", "Embedded resource content for testing."),
        ),
        UserMessage(role="user", content=text("Please process the embedded resource above.")),
    ]


@server.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """A prompt that includes image content"""
    return [
        UserMessage(
            role="user", content=ImageContent(type="image", data=PNG, mime_type="image/png")
        ),
        UserMessage(role="user", content=text("Please analyze the image above.")),
    ]


@server.prompt()
async def test_input_required_result_prompt(
    ctx: Context,
) -> list[UserMessage] | InputRequiredResult:
    """Tests InputRequiredResult from prompts/get (SEP-2322 non-tool request)"""
    responses = ctx.input_responses
    if responses and "user_context" in responses:
        use = _elicited(responses["user_context"], "context") or "?"
        return [UserMessage(role="user", content=text(f"Use the following context: {use}"))]
    schema = {
        "type": "object",
        "properties": {"context": {"type": "string"}},
        "required": ["context"],
    }
    ask = ElicitRequest(
        params=ElicitRequestFormParams(
            message="What context should the prompt use?", requested_schema=schema
        )
    )
    return InputRequiredResult(input_requests={"user_context": ask})


# -- what MCPServer has no decorator for: log level, resource subscriptions (low-level handlers) ---


async def set_level(ctx: ServerRequestContext, params: SetLevelRequestParams) -> EmptyResult:
    return EmptyResult()


async def subscribe(ctx: ServerRequestContext, params: SubscribeRequestParams) -> EmptyResult:
    subscribed.add(str(params.uri))
    return EmptyResult()


async def unsubscribe(ctx: ServerRequestContext, params: UnsubscribeRequestParams) -> EmptyResult:
    subscribed.discard(str(params.uri))
    return EmptyResult()


lowlevel = server._lowlevel_server
lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)
lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)


@server.completion()
async def complete(
    ref: PromptReference | ResourceTemplateReference,
    argument: CompletionArgument,
    context: CompletionContext | None,
) -> Completion:
    return Completion(values=[], total=0, has_more=False)
