"""The notes server of the tutorial (docs/tutorial.md).

Run it with ``python tutorial_server.py [HOST:PORT]`` (127.0.0.1:8000 by default), or with
``mcp-trio serve tutorial_server:server --bind 127.0.0.1:8000``.
"""

import functools
import json
import signal
import sys

import mcp_types as mt
import trio

from mcp_trio import Context, MCPApp, MCPServer, serve

# Step 1: a server with one tool

server = MCPServer("notes", "1.0.0", instructions="Keeps short notes.")
notes: dict[str, str] = {}


@server.tool(description="Store a note under a title.")
async def add_note(title: str, text: str) -> str:
    notes[title] = text
    await server.notify_resources_changed()  # tells the clients that listen for it
    return f"stored {title!r}"


# Step 2: progress, logs and the context


@server.tool(description="Search the notes, slowly.")
async def search(ctx: Context, word: str) -> list[str]:
    hits = []
    for n, title in enumerate(sorted(notes), 1):
        await ctx.report_progress(n, len(notes), f"looked at {title}")
        if word in notes[title]:
            hits.append(title)
        await trio.sleep(0.01)
    await ctx.info(f"{len(hits)} hits for {word!r}")
    return hits or ["nothing found"]


# Step 3: resources and prompts


@server.resource("notes://index", mime_type="application/json")
async def index() -> str:
    return json.dumps(sorted(notes))


@server.resource("notes://{title}", mime_type="text/plain")
async def note(title: str) -> str:
    return notes.get(title, "")


@server.prompt(description="Summarise one note.")
async def summarise(title: str) -> str:
    return f"Summarise this note in one sentence:\n\n{notes.get(title, '')}"


# Step 4: asking the client


@server.tool(description="Let the client's model title a text.")
async def suggest_title(ctx: Context, text: str) -> str:
    answer = await ctx.sample(f"Give a three-word title for: {text}", max_tokens=20)
    return answer.content.text if isinstance(answer.content, mt.TextContent) else "(no text)"


CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}


@server.tool(description="Delete a note once the user confirms.")
async def delete_note(ctx: Context, title: str) -> str:
    if title not in notes:
        return f"no note {title!r}"
    answer = await ctx.elicit(f"Delete the note {title!r}?", CONFIRM)  # ask first ...
    if answer.action != "accept" or not (answer.content or {}).get("confirm"):
        return f"kept {title!r}"
    del notes[title]  # ... act after
    return f"deleted {title!r}"


# Step 5: serve it

app = MCPApp(server)


async def until_signal() -> None:
    """Return on SIGINT or SIGTERM: the server then stops gracefully."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


async def main(bind: str) -> None:
    host, _, port = bind.rpartition(":")
    async with trio.open_nursery() as nursery:
        run = functools.partial(serve, app, host, int(port), shutdown_trigger=until_signal)
        urls = await nursery.start(run)
        print(f"serving on {urls[0]}", flush=True)  # the endpoint: http://HOST:PORT/mcp
        # ... the rest of your program runs here, next to the server


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8000")
