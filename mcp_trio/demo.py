"""The demo server behind ``mcp-trio demo``: an "everything" server.

It is the example to read first (each feature of the server API once), and it implements every
fixture the official MCP conformance suite expects of a server (the ``test_*`` tools, the ``test://``
resources and the ``test_*`` prompts), so CI can run the suite against it; the media and JSON schemas
of those fixtures are in :mod:`mcp_trio._demo_data`.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as mt
import trio

from . import Context, InputRequest, MCPServer, RPCError
from ._app.tasks import TaskStarter
from ._demo_data import JSON_SCHEMA_2020_12, PNG, SEP1034_DEFAULTS, SEP1330_ENUMS, WAV

__all__ = ["build_demo_server"]


def _text(text: str) -> mt.TextContent:
    return mt.TextContent(type="text", text=text)


def _image() -> mt.ImageContent:
    return mt.ImageContent(type="image", data=PNG, mime_type="image/png")


def _embedded(uri: str, mime_type: str, text: str) -> mt.EmbeddedResource:
    contents = mt.TextResourceContents(uri=uri, mime_type=mime_type, text=text)
    return mt.EmbeddedResource(type="resource", resource=contents)


def build_demo_server() -> MCPServer:
    """A new demo server: every tool, resource, prompt and the completion below."""
    server = MCPServer("mcp-trio-demo", "0.1.0", instructions="The demo server of mcp_trio.")
    _add_content_tools(server)
    _add_basic_tools(server)
    _add_client_request_tools(server)
    _add_input_required_tools(server)
    _add_modern_tools(server)
    _add_task_tools(server)
    _add_resources(server)
    _add_prompts(server)

    @server.completion()
    async def complete(ref: dict[str, Any], argument: dict[str, Any], context: Any) -> list[str]:
        """Complete argument values from a small word list."""
        words = ("alpha", "beta", "gamma", "test", "testing", "trio")
        return [word for word in words if word.startswith(argument.get("value", ""))]

    return server


def _add_basic_tools(server: MCPServer) -> None:
    @server.tool(description="Echo the given text back.")
    async def echo(text: str) -> str:
        return text

    @server.tool(description="Add two numbers.")
    async def add(a: float, b: float) -> dict[str, float]:
        return {"sum": a + b}

    @server.tool(description="Count to `steps`, reporting progress and logging each step.")
    async def count(ctx: Context, steps: int = 3, delay: float = 0.01) -> str:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
            await ctx.info(f"step {step} of {steps}")
            await trio.sleep(delay)
        return f"counted to {steps}"

    @server.tool(description="Sleep for `seconds` (cancellable: try notifications/cancelled).")
    async def sleep(seconds: float) -> str:
        await trio.sleep(seconds)
        return f"slept {seconds}s"

    @server.tool(description="Log three messages while working.")
    async def test_tool_with_logging(ctx: Context) -> str:
        steps = ("Tool execution started", "Tool processing data", "Tool execution completed")
        for n, message in enumerate(steps):
            if n:
                await trio.sleep(0.05)
            await ctx.info(message)
        return "Tool with logging executed successfully"

    @server.tool(description="Report progress 0, 50 and 100 of 100.")
    async def test_tool_with_progress(ctx: Context) -> str:
        for n, progress in enumerate((0, 50, 100)):
            if n:
                await trio.sleep(0.05)
            await ctx.report_progress(progress, 100, f"Completed step {progress} of 100")
        return f"Progress test completed (token {ctx.progress_token!r})"

    @server.tool(description="Always fails: returns a tool error result.")
    async def test_error_handling() -> mt.CallToolResult:
        message = _text("This tool intentionally returns an error for testing")
        return mt.CallToolResult(content=[message], is_error=True)

    @server.tool(description="Closes its SSE connection mid-call; the client resumes it with Last-Event-ID.")
    async def test_reconnection(ctx: Context) -> str:
        ctx.close_sse_stream()
        await trio.sleep(0.1)
        return (
            "Reconnection test completed successfully. If you received this, the client properly "
            "reconnected after stream closure."
        )

    @server.tool(description="Tool with JSON Schema 2020-12 features", input_schema=JSON_SCHEMA_2020_12)
    async def json_schema_2020_12_tool(**arguments: Any) -> str:
        return f"JSON Schema 2020-12 tool called with: {json.dumps(arguments)}"


def _add_content_tools(server: MCPServer) -> None:
    @server.tool(description="Returns simple text.")
    async def test_simple_text() -> str:
        return "This is a simple text response for testing."

    @server.tool(description="Returns an image.")
    async def test_image_content() -> mt.ImageContent:
        return _image()

    @server.tool(description="Returns audio.")
    async def test_audio_content() -> mt.AudioContent:
        return mt.AudioContent(type="audio", data=WAV, mime_type="audio/wav")

    @server.tool(description="Returns an embedded resource.")
    async def test_embedded_resource() -> mt.EmbeddedResource:
        return _embedded("test://embedded-resource", "text/plain", "This is an embedded resource content.")

    @server.tool(description="Returns text, an image and a resource.")
    async def test_multiple_content_types() -> list[mt.ContentBlock]:
        data = '{"test":"data","value":123}'
        resource = _embedded("test://mixed-content-resource", "application/json", data)
        return [_text("Multiple content types test:"), _image(), resource]


def _add_client_request_tools(server: MCPServer) -> None:
    @server.tool(description="Asks the client's model (sampling) and returns its answer.")
    async def test_sampling(ctx: Context, prompt: str) -> str:
        result = await ctx.sample(prompt, max_tokens=100)
        text = result.content.text if isinstance(result.content, mt.TextContent) else str(result.content)
        return f"LLM response: {text}"

    @server.tool(description="Asks the user for a username and an email (elicitation).")
    async def test_elicitation(ctx: Context, message: str) -> str:
        schema = {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        }
        result = await ctx.elicit(message, schema)
        return f"User response: action={result.action}, content={json.dumps(result.content)}"

    @server.tool(description="Elicitation with default values of every primitive type (SEP-1034).")
    async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
        result = await ctx.elicit("Please review and update the form fields with defaults", SEP1034_DEFAULTS)
        return f"Elicitation completed: action={result.action}, content={json.dumps(result.content)}"

    @server.tool(description="Elicitation with every enum shape (SEP-1330).")
    async def test_elicitation_sep1330_enums(ctx: Context) -> str:
        result = await ctx.elicit("Please select options from the enum fields", SEP1330_ENUMS)
        return f"Elicitation completed: action={result.action}, content={json.dumps(result.content)}"


def _add_task_tools(server: MCPServer) -> None:
    """Long-running tools (the tasks extension, 2026 era): a client that declares the extension gets a
    task to poll; others get an ordinary result (or -32021 for a tool that needs a task)."""

    @server.tool(description="Greets `name` at once (never a task).")
    async def greet(name: str) -> str:
        return f"Hello, {name}!"

    @server.tool(description="Sleeps `seconds`, then answers (a task where the client can).", task="optional")
    async def slow_compute(seconds: float, label: str = "") -> str:
        await trio.sleep(max(0.0, min(seconds, 3600.0)))
        return f"Computed {label or 'result'} after {seconds:g} s"

    @server.tool(description="Fails after about a second with a tool error (always a task).", task="required")
    async def failing_job() -> mt.CallToolResult:
        await trio.sleep(1)
        return mt.CallToolResult(content=[_text("The job failed: nothing to do")], is_error=True)

    @server.tool(description="Fails with a JSON-RPC error (the task ends as failed).", task="optional")
    async def protocol_error_job() -> str:
        await trio.sleep(0.1)
        raise RPCError(mt.INTERNAL_ERROR, "The job broke down: internal error")

    @server.tool(description="Asks the user to confirm deleting `filename`, then reports.", task="optional")
    async def confirm_delete(ctx: Context, filename: str) -> str:
        answer = await ctx.ask({"confirm": _form(f"Delete {filename}?", "confirm", "boolean")})
        confirmed = answer["confirm"].action == "accept" and (answer["confirm"].content or {}).get("confirm")
        return f"Deleted {filename}" if confirmed else f"Kept {filename}"

    @server.tool(description="Asks two questions at the same time, then reports both.", task="optional")
    async def multi_input(ctx: Context) -> str:
        answers: dict[str, Any] = {}

        async def ask(key: str, message: str) -> None:
            answers[key] = (await ctx.ask({key: _form(message, "name")}))[key]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "first", "First name?")
            nursery.start_soon(ask, "second", "Second name?")
        names = [(answers[key].content or {}).get("name", "?") for key in ("first", "second")]
        return "Got " + " and ".join(map(str, names))

    @server.tool(description="Asks the user's name first, then works on as a task.", task="required")
    async def test_tool_with_task(ctx: Context, task_status: TaskStarter) -> str:
        answer = (await ctx.ask({"user_name": _form("What is your name?", "name")}))["user_name"]
        task_status.started()  # the answer came with the request: from here on, a task
        await trio.sleep(0.5)
        return f"Hello, {(answer.content or {}).get('name', 'stranger')}, from a task!"


def _form(message: str, field: str, kind: str = "string") -> InputRequest:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return InputRequest.elicitation(message, schema)


def _add_input_required_tools(server: MCPServer) -> None:
    """Handlers that ask the client for input.  The same code serves both eras: in a 2025 session each
    ``ctx.ask`` is a server-to-client request; in a 2026 request it becomes an input-required result
    and the handler runs again when the client retries with the answers."""

    @server.tool(description="Asks the user's name (elicitation), then greets them.")
    async def test_input_required_result_elicitation(ctx: Context) -> str:
        answer = (await ctx.ask({"user_name": _form("What is your name?", "name")}))["user_name"]
        return f"Hello, {(answer.content or {}).get('name', 'stranger')}!"

    @server.tool(description="Asks the client's model a question (sampling).")
    async def test_input_required_result_sampling(ctx: Context) -> str:
        question = InputRequest.sampling("What is the capital of France?", max_tokens=100)
        answer = (await ctx.ask({"capital_question": question}))["capital_question"]
        return f"The model answered: {_text_of(answer)}"

    @server.tool(description="Asks the client for its roots.")
    async def test_input_required_result_list_roots(ctx: Context) -> str:
        roots = (await ctx.ask({"client_roots": InputRequest.roots()}))["client_roots"]
        return "Roots: " + ", ".join(str(root.uri) for root in roots.roots)

    @server.tool(description="Asks for a confirmation; the answer travels with a sealed requestState.")
    async def test_input_required_result_request_state(ctx: Context) -> str:
        answer = (await ctx.ask({"confirm": _form("Please confirm", "ok", "boolean")}))["confirm"]
        return f"state-ok: confirmed={(answer.content or {}).get('ok')}"

    @server.tool(description="Asks for a confirmation (the conformance suite tampers with the state).")
    async def test_input_required_result_tampered_state(ctx: Context) -> str:
        answer = (await ctx.ask({"confirm": _form("Please confirm", "ok", "boolean")}))["confirm"]
        return f"confirmed={(answer.content or {}).get('ok')}"

    @server.tool(description="Asks for three inputs at once: elicitation, sampling and roots.")
    async def test_input_required_result_multiple_inputs(ctx: Context) -> str:
        answers = await ctx.ask(
            {
                "user_name": _form("What is your name?", "name"),
                "greeting": InputRequest.sampling("Generate a greeting", max_tokens=50),
                "client_roots": InputRequest.roots(),
            }
        )
        name = (answers["user_name"].content or {}).get("name")
        return f"{_text_of(answers['greeting'])} {name} ({len(answers['client_roots'].roots)} roots)"

    @server.tool(description="Asks two questions, one round after the other.")
    async def test_input_required_result_multi_round(ctx: Context) -> str:
        name = (await ctx.ask({"step1": _form("Step 1: What is your name?", "name")}))["step1"]
        color = (await ctx.ask({"step2": _form("Step 2: What is your favorite color?", "color")}))["step2"]
        return f"{(name.content or {}).get('name')} likes {(color.content or {}).get('color')}"

    @server.tool(description="Asks only for the inputs the client declared it can give.")
    async def test_input_required_result_capabilities(ctx: Context) -> str:
        wanted: dict[str, InputRequest] = {}
        if "elicitation" in ctx.peer.client_capabilities:
            wanted["user_name"] = _form("What is your name?", "name")
        if "sampling" in ctx.peer.client_capabilities:
            wanted["greeting"] = InputRequest.sampling("Generate a greeting", max_tokens=50)
        if not wanted:
            raise RPCError(
                -32021, "Missing required client capability", {"requiredCapabilities": {"sampling": {}}}
            )
        answers = await ctx.ask(wanted)
        return f"received {sorted(answers)}"


def _text_of(result: mt.CreateMessageResult) -> str:
    return result.content.text if isinstance(result.content, mt.TextContent) else str(result.content)


def _add_modern_tools(server: MCPServer) -> None:
    """Fixtures of the 2026-07-28 scenarios of the conformance suite."""

    @server.tool(description="Needs the client's sampling capability.")
    async def test_missing_capability(ctx: Context) -> str:
        answer = await ctx.sample("Say something", max_tokens=20, key="sample")
        return _text_of(answer)

    @server.tool(description="Asks the user a question (an input request, never a request on the stream).")
    async def test_streaming_elicitation(ctx: Context) -> str:
        answer = (await ctx.ask({"answer": _form("Please answer", "answer")}))["answer"]
        return f"answered: {(answer.content or {}).get('answer')}"

    @server.tool(description="Logs at info level (2026: only when the request names a log level).")
    async def test_logging_tool(ctx: Context) -> str:
        await ctx.info("Logging tool started")
        await ctx.info("Logging tool finished")
        return "Logging tool executed"

    @server.tool(description="Tells subscribed clients that the tool list changed.")
    async def test_trigger_tool_change() -> str:
        await server.notify_tools_changed()
        return "tools/list_changed sent"

    @server.tool(description="Tells subscribed clients that the prompt list changed.")
    async def test_trigger_prompt_change() -> str:
        await server.notify_prompts_changed()
        return "prompts/list_changed sent"

    @server.tool(
        description="Echoes parameters mirrored into Mcp-Param-* headers",
        input_schema={
            "type": "object",
            "properties": {
                "region": {
                    "type": "string",
                    "description": "Mirrored as Mcp-Param-Region",
                    "x-mcp-header": "Region",
                },
                "priority": {
                    "type": "integer",
                    "description": "Mirrored as Mcp-Param-Priority",
                    "x-mcp-header": "Priority",
                },
            },
            "required": ["region", "priority"],
        },
    )
    async def test_custom_headers(region: str, priority: int) -> str:
        return f"region={region} priority={priority}"


def _add_resources(server: MCPServer) -> None:
    @server.resource(
        "test://static-text",
        name="static-text",
        title="Static Text Resource",
        description="A static text resource for testing",
        mime_type="text/plain",
    )
    async def static_text() -> str:
        return "This is the content of the static text resource."

    @server.resource(
        "test://static-binary",
        name="static-binary",
        description="A static binary resource (image) for testing",
        mime_type="image/png",
    )
    async def static_binary() -> mt.BlobResourceContents:
        return mt.BlobResourceContents(uri="test://static-binary", mime_type="image/png", blob=PNG)

    @server.resource(
        "test://watched-resource",
        name="watched-resource",
        description="A resource clients can subscribe to",
        mime_type="text/plain",
    )
    async def watched() -> str:
        return "Watched resource content"

    @server.resource(
        "test://template/{id}/data",
        name="template",
        description="Data for any id",
        mime_type="application/json",
    )
    async def template(id: str) -> str:
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


def _add_prompts(server: MCPServer) -> None:
    @server.prompt(description="A simple prompt without arguments")
    async def test_simple_prompt() -> str:
        return "This is a simple prompt for testing."

    @server.prompt(
        description="A prompt with required arguments",
        argument_descriptions={"arg1": "First test argument", "arg2": "Second test argument"},
    )
    async def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
        return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"

    @server.prompt(
        description="A prompt that includes an embedded resource",
        argument_descriptions={"resourceUri": "URI of the resource to embed"},
    )
    async def test_prompt_with_embedded_resource(resourceUri: str) -> list[Any]:  # the argument's wire name
        return [
            _embedded(resourceUri, "text/plain", "Embedded resource content for testing."),
            "Please process the embedded resource above.",
        ]

    @server.prompt(description="A prompt that includes image content")
    async def test_prompt_with_image() -> list[Any]:
        return [_image(), "Please analyze the image above."]

    @server.prompt(description="A prompt that first asks the user for context")
    async def test_input_required_result_prompt(ctx: Context) -> str:
        answer = await ctx.ask({"user_context": _form("What context should the prompt use?", "context")})
        context = (answer["user_context"].content or {}).get("context")
        return f"Use this context: {context}"
