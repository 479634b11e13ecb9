"""The interop tests' server (``interop_server.build_server``) written with the python-sdk's API, for
mcp_trio to host: the same tools, resources, prompt and answers, so the official clients' tests run
unchanged against both.  anyio only (it runs on Trio)."""

from __future__ import annotations

from typing import Annotated

from interop_server import SERVER_NAME, SERVER_VERSION
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import EmptyResult, SamplingMessage, SetLevelRequestParams, TextContent
from pydantic import BaseModel, Field

from mcp_trio import MCPApp, ServerConfig
from mcp_trio.sdk import hosted_app


class Name(BaseModel):
    name: str = Field(description="your name")


def build_sdk_server() -> MCPServer:
    server = MCPServer(SERVER_NAME, version=SERVER_VERSION, instructions="an interop test server")

    @server.tool(description="Add two integers")
    async def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Count to n, logging and reporting progress on the way")
    async def count(ctx: Context, n: int) -> str:
        for i in range(1, n + 1):
            await ctx.session.send_log_message(
                "info", f"step {i} of {n}", logger="count", related_request_id=ctx.request_id
            )
            await ctx.report_progress(i, n, f"step {i}")
        return f"counted to {n}"

    @server.tool(description="Ask the client's model a question")
    async def ask_model(ctx: Context, question: str) -> str:
        result = await ctx.session.create_message(
            [SamplingMessage(role="user", content=TextContent(type="text", text=question))],
            max_tokens=64,
            system_prompt="be brief",
            related_request_id=ctx.request_id,
        )
        assert isinstance(result.content, TextContent), result.content
        return f"{result.model}: {result.content.text}"

    @server.tool(description="Ask the user for their name")
    async def ask_name(ctx: Context) -> str:
        result = await ctx.elicit("What is your name?", Name)
        name = result.data.name if result.action == "accept" else None
        return f"{result.action}: {name}"

    @server.resource("test://readme", name="readme", mime_type="text/plain", description="A text file")
    async def readme() -> str:
        return "hello from mcp_trio"

    @server.resource("test://users/{user_id}/profile", name="profile", mime_type="application/json")
    async def profile(user_id: str) -> str:
        return f'{{"user": "{user_id}"}}'

    @server.prompt(description="Greet someone")
    async def greet(name: Annotated[str, Field(description="who to greet")]) -> str:
        return f"Please greet {name} warmly."

    async def set_level(ctx: object, params: SetLevelRequestParams) -> EmptyResult:
        return EmptyResult()

    server._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)
    return server


def build_hosted() -> MCPApp:
    """The python-sdk twin of ``build_server()``, hosted (``shutdown_grace=2``, as ``serving`` does)."""
    return hosted_app(build_sdk_server(), ServerConfig(shutdown_grace=2))
