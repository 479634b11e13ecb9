"""A client for the notes server of the tutorial (docs/tutorial.md), once in each protocol era.

Run it with ``python tutorial_client.py [URL]`` (http://127.0.0.1:8000/mcp by default) while
``tutorial_server.py`` runs.
"""

import sys

import mcp_types as mt
import trio

from mcp_trio import open_client_session


async def show_log(log: mt.LoggingMessageNotificationParams) -> None:
    print(f"  log ({log.level}): {log.data}")


async def show_progress(progress: float, total: float | None, message: str | None) -> None:
    print(f"  progress {progress}/{total}: {message}")


async def model(params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
    """Stands in for the client's LLM: answers sampling/createMessage."""
    text = mt.TextContent(type="text", text="Weekly Shopping List")
    return mt.CreateMessageResult(role="assistant", model="stand-in", content=text)


async def user(params: mt.ElicitRequestParams) -> mt.ElicitResult:
    """Stands in for the user: answers elicitation/create, always with yes."""
    print(f"  asked: {params.message}")
    return mt.ElicitResult(action="accept", content={"confirm": True})


def texts(result: mt.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, mt.TextContent)]


async def main(url: str) -> None:
    # "auto" (the default) speaks 2026-07-28 if the server does; "legacy" forces a 2025 session.
    for mode in ("auto", "legacy"):
        async with open_client_session(
            url, mode=mode, on_log=show_log, sampling=model, elicitation=user
        ) as session:
            await session.set_logging_level("info")  # 2025: logging/setLevel; 2026: sent with each request
            print(f"{mode}: {session.server_info['name']} speaks {session.protocol_version}")
            await session.call_tool("add_note", {"title": "ideas", "text": "a notes server on Trio"})
            result = await session.call_tool("add_note", {"title": "shopping", "text": "milk, eggs"})
            print(" ", *texts(result))
            result = await session.call_tool("search", {"word": "milk"}, progress=show_progress)
            print("  found:", *texts(result))
            result = await session.call_tool("suggest_title", {"text": "milk, eggs"})
            print("  title:", *texts(result))
            result = await session.call_tool("delete_note", {"title": "shopping"})
            print(" ", *texts(result))


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/mcp")
