"""Tests of the notes server of the tutorial (docs/tutorial.md, step 7).

Each test serves the server on a free port of 127.0.0.1 and talks to it with mcp_trio's client, in a
2025 session (``mode="legacy"``) and in the 2026-07-28 era (``mode="auto"``, which picks it).  Run them
with ``pytest test_tutorial.py`` next to ``tutorial_server.py``; they need pytest-trio with
``trio_mode = true``.
"""

import functools
from collections.abc import AsyncIterator
from typing import Literal

import mcp_types as mt
import pytest
import trio
import tutorial_server

from mcp_trio import MCPApp, RPCError, open_client_session, serve


@pytest.fixture
async def url() -> AsyncIterator[str]:
    """The notes server, with no notes, on a free port for one test; stopped after it."""
    tutorial_server.notes.clear()
    app = MCPApp(tutorial_server.server)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        run = functools.partial(serve, app, "127.0.0.1", 0, shutdown_trigger=stop.wait)
        urls = await nursery.start(run)
        yield urls[0]  # the endpoint: http://127.0.0.1:PORT/mcp
        stop.set()


Mode = Literal["legacy", "auto"]


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> Mode:
    """A test that takes ``mode`` runs in each era: a 2025 session, then 2026-07-28."""
    mode: Mode = request.param
    return mode


def texts(result: mt.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, mt.TextContent)]


async def test_notes_as_tools_resources_and_prompts(url: str, mode: Mode) -> None:
    async with open_client_session(url, mode=mode) as session:
        assert session.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        result = await session.call_tool("add_note", {"title": "shopping", "text": "milk, eggs"})
        assert texts(result) == ["stored 'shopping'"]

        index = await session.read_resource("notes://index")
        assert isinstance(index.contents[0], mt.TextResourceContents)
        assert index.contents[0].text == '["shopping"]'
        note = await session.read_resource("notes://shopping")
        assert isinstance(note.contents[0], mt.TextResourceContents)
        assert note.contents[0].text == "milk, eggs"

        prompt = await session.get_prompt("summarise", {"title": "shopping"})
        content = prompt.messages[0].content
        assert isinstance(content, mt.TextContent)
        assert content.text.endswith("milk, eggs")


@pytest.mark.parametrize(
    ("mode", "level", "logged"),
    [
        ("legacy", None, ["1 hits for 'milk'"]),  # 2025: log messages flow ...
        ("legacy", "warning", []),  # ... unless the client raised the level
        ("auto", None, []),  # 2026: no log messages ...
        ("auto", "info", ["1 hits for 'milk'"]),  # ... unless the request names a level
    ],
)
async def test_search_reports_progress_and_logs(
    url: str, mode: Mode, level: mt.LoggingLevel | None, logged: list[str]
) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    logs: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def on_log(log: mt.LoggingMessageNotificationParams) -> None:
        logs.append(log.data)

    async with open_client_session(url, mode=mode, on_log=on_log) as session:
        if level is not None:
            await session.set_logging_level(level)
        await session.call_tool("add_note", {"title": "shopping", "text": "milk, eggs"})
        await session.call_tool("add_note", {"title": "ideas", "text": "a notes server"})
        result = await session.call_tool("search", {"word": "milk"}, progress=on_progress)

    assert texts(result) == ["shopping"]
    assert progress == [(1, 2, "looked at ideas"), (2, 2, "looked at shopping")]  # in both eras
    assert logs == logged


async def test_suggest_title_asks_the_clients_model(url: str, mode: Mode) -> None:
    asked: list[mt.CreateMessageRequestParams] = []

    async def model(params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        asked.append(params)
        text = mt.TextContent(type="text", text="Weekly Shopping List")
        return mt.CreateMessageResult(role="assistant", model="stand-in", content=text)

    async with open_client_session(url, mode=mode, sampling=model) as session:
        result = await session.call_tool("suggest_title", {"text": "milk, eggs"})

    assert texts(result) == ["Weekly Shopping List"]
    assert len(asked) == 1  # 2026: the handler ran twice, the model was asked once
    assert asked[0].max_tokens == 20


async def test_a_client_without_sampling_gets_an_error(url: str, mode: Mode) -> None:
    async with open_client_session(url, mode=mode) as session:  # no sampling= handler
        with pytest.raises(RPCError) as error:
            await session.call_tool("suggest_title", {"text": "milk, eggs"})
    assert error.value.code == -32021  # missing required client capability


async def test_delete_note_asks_first_and_acts_after(url: str, mode: Mode) -> None:
    answers = [mt.ElicitResult(action="decline"), mt.ElicitResult(action="accept", content={"confirm": True})]
    asked: list[str] = []

    async def user(params: mt.ElicitRequestParams) -> mt.ElicitResult:
        asked.append(params.message)
        return answers.pop(0)

    async with open_client_session(url, mode=mode, elicitation=user) as session:
        await session.call_tool("add_note", {"title": "shopping", "text": "milk, eggs"})
        kept = await session.call_tool("delete_note", {"title": "shopping"})
        deleted = await session.call_tool("delete_note", {"title": "shopping"})

    assert texts(kept) == ["kept 'shopping'"]
    assert texts(deleted) == ["deleted 'shopping'"]
    assert asked == ["Delete the note 'shopping'?"] * 2  # once per call, in both eras
    assert tutorial_server.notes == {}


async def test_a_2025_session_hears_of_new_notes_on_its_get_stream(url: str) -> None:
    changed = trio.Event()

    async def on_notification(message: dict[str, object]) -> None:
        if message["method"] == "notifications/resources/list_changed":
            changed.set()

    async with open_client_session(url, mode="legacy", on_notification=on_notification) as session:
        await session.call_tool("add_note", {"title": "shopping", "text": "milk, eggs"})
        with trio.fail_after(5):
            await changed.wait()


async def test_a_2026_client_hears_of_new_notes_when_it_listens(url: str) -> None:
    async with open_client_session(url) as session, session.listen(resources=True) as subscription:
        await session.call_tool("add_note", {"title": "shopping", "text": "milk, eggs"})
        with trio.fail_after(5):
            notification = await anext(subscription)
    assert notification["method"] == "notifications/resources/list_changed"
