"""The ``mcp-trio`` command without a server: typing of ``--arg`` values by a schema, how results and
notifications are shown, the help texts, and the usage errors caught before connecting."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import mcp_types as mt
import pytest

from mcp_trio import RPCError, __version__
from mcp_trio._app.context import LOG_LEVELS
from mcp_trio._cli import _parser, load_app, main
from mcp_trio._cli.client.arguments import accepted_types, parse_arguments, parse_prompt_arguments, type_value
from mcp_trio._cli.client.commands import _failure
from mcp_trio._cli.client.display import (
    Notices,
    format_content,
    format_prompt,
    format_resource,
    format_tool,
    print_contents,
    print_messages,
    print_result,
)
from mcp_trio._cli.client.parsers import MCP_LOG_LEVELS
from mcp_trio._cli.output import COMMAND_HELP, EXIT_STATUS_HELP, UsageError
from mcp_trio._transport.config import ServerConfig
from mcp_trio.errors import TransportError

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="


# -- typing --arg values --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("types", "text", "value"),
    [
        ({"string"}, "42", "42"),
        ({"string"}, "true", "true"),
        ({"string"}, "", ""),
        ({"integer"}, "42", 42),
        ({"integer"}, "-7", -7),
        ({"number"}, "2.5", 2.5),
        ({"number"}, "3", 3),
        ({"number"}, "1e3", 1000.0),
        ({"boolean"}, "true", True),
        ({"boolean"}, "False", False),
        ({"array"}, "[1, 2]", [1, 2]),
        ({"object"}, '{"x": [1]}', {"x": [1]}),
        ({"null"}, "null", None),
        ({"string", "null"}, "null", None),
        ({"string", "null"}, "hello", "hello"),
        ({"string", "null"}, "42", "42"),
        ({"integer", "string"}, "7", 7),
        ({"integer", "string"}, "seven", "seven"),
        ({"number", "null"}, "null", None),
        ({"array", "string"}, "a,b", "a,b"),
        (None, "42", 42),
        (None, "[1", "[1"),
        (None, "NaN", "NaN"),  # not JSON: NaN would break the request
        (None, "hi there", "hi there"),
        ({"no-such-type"}, "[1]", [1]),  # types we do not know: as untyped
    ],
)
def test_values_are_typed(types: set[str] | None, text: str, value: Any) -> None:
    typed = type_value("key", text, types)
    assert typed == value and type(typed) is type(value)


@pytest.mark.parametrize(
    ("types", "text", "expected"),
    [
        ({"integer"}, "4.5", "an integer"),
        ({"integer"}, "true", "an integer"),
        ({"number"}, "NaN", "a number"),
        ({"number"}, "Infinity", "a number"),
        ({"number"}, "true", "a number"),
        ({"boolean"}, "yes", "true or false"),
        ({"array"}, "1,2", "a JSON array (e.g. [1, 2])"),
        ({"object"}, "[]", 'a JSON object (e.g. {"key": 1})'),
        ({"null"}, "None", "null"),
        ({"integer", "null"}, "x", "null or an integer"),
    ],
)
def test_values_that_do_not_fit_are_usage_errors(types: set[str], text: str, expected: str) -> None:
    with pytest.raises(UsageError) as raised:
        type_value("key", text, types)
    assert str(raised.value) == f"--arg key={text}: key expects {expected}, got {text!r}"


def test_accepted_types_of_a_schema() -> None:
    root = {
        "$defs": {"id": {"type": "integer"}, "ref": {"$ref": "#/$defs/id"}, "loop": {"$ref": "#/$defs/loop"}}
    }
    assert accepted_types({"type": "string"}, root) == {"string"}
    assert accepted_types({"type": ["string", "null"]}, root) == {"string", "null"}
    assert accepted_types({"anyOf": [{"type": "string"}, {"type": "null"}]}, root) == {"string", "null"}
    assert accepted_types({"oneOf": [{"$ref": "#/$defs/ref"}, {"const": None}]}, root) == {"integer", "null"}
    assert accepted_types({"enum": ["a", 1, 2.5, True]}, root) == {"string", "integer", "number", "boolean"}
    assert accepted_types({"anyOf": [{"type": "string"}, {}]}, root) is None  # one branch takes anything
    assert accepted_types({"$ref": "#/$defs/loop"}, root) is None  # bounded
    assert accepted_types({"$ref": "#/$defs/missing"}, root) is None
    assert accepted_types({"$ref": "https://example.com/schema"}, root) is None
    assert accepted_types({"description": "anything"}, root) is None
    assert accepted_types(True, root) is None


def test_arguments_from_arg_and_json() -> None:
    schema = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "n": {"type": "integer"},
            "maybe": {"type": ["string", "null"]},
        },
    }
    assert parse_arguments(["text=42", "n=42", "maybe=null", "extra=[1]"], None, schema) == {
        "text": "42",
        "n": 42,
        "maybe": None,
        "extra": [1],
    }
    # --json as given (no typing); --arg wins for the same key; the last --arg of a key wins
    assert parse_arguments(["n=5", "text=a=b", "text=c"], '{"n": 1, "maybe": "null"}', schema) == {
        "n": 5,
        "maybe": "null",
        "text": "c",
    }
    assert parse_arguments([], "{}", schema) == {}
    for bad_json in ("[1]", "{", "NaN", '"text"'):
        with pytest.raises(UsageError, match="--json wants a JSON object"):
            parse_arguments([], bad_json, schema)
    for bad_pair in ("novalue", "=1"):
        with pytest.raises(UsageError, match="--arg wants KEY=VALUE"):
            parse_arguments([bad_pair], None, schema)


# -- results ---------------------------------------------------------------------------------------


def test_content_summaries() -> None:
    image = mt.ImageContent(type="image", data=PNG, mime_type="image/png")
    assert format_content(image) == "[image image/png, 70 bytes]"
    broken = mt.AudioContent(type="audio", data="not base64!", mime_type="audio/wav")
    assert format_content(broken) == "[audio audio/wav, data not valid base64]"
    link = mt.ResourceLink(type="resource_link", name="n", uri="file:///a.txt")
    assert format_content(link) == "[resource_link file:///a.txt]"
    text = mt.TextResourceContents(uri="test://t", text="two\nlines")
    assert (
        format_content(mt.EmbeddedResource(type="resource", resource=text))
        == "[resource test://t, 9 bytes]\ntwo\nlines"
    )
    assert format_content(mt.TextContent(type="text", text="as is\n")) == "as is\n"


def test_structured_content_is_shown_only_without_text(capsys: pytest.CaptureFixture[str]) -> None:
    both = mt.CallToolResult(
        content=[mt.TextContent(type="text", text='{"a": 1}')], structured_content={"a": 1}
    )
    print_result(both, raw=False)
    assert capsys.readouterr().out == '{"a": 1}\n'
    image = mt.ImageContent(type="image", data=PNG, mime_type="image/png")
    alone = mt.CallToolResult(content=[image], structured_content={"a": 1})
    print_result(alone, raw=False)
    assert capsys.readouterr().out == '[image image/png, 70 bytes]\n{\n  "a": 1\n}\n'
    print_result(alone, raw=True)
    raw = json.loads(capsys.readouterr().out)
    assert raw["content"] == [{"type": "image", "data": PNG, "mimeType": "image/png"}]
    assert raw["structuredContent"] == {"a": 1}


def test_tool_listing() -> None:
    schema = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "What to say.\nMore."},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "anything": {},
        },
        "required": ["text", "anything"],
    }
    tool = mt.Tool(name="say", description="Say it.\n\nLonger text.", input_schema=schema)
    assert format_tool(tool) == [
        "say: Say it.",
        "    text: string - What to say.",
        "    tags: array of string (optional, default [])",
        '    mode: string, one of "a", "b" (optional, default "a")',
        "    maybe: integer | null (optional, default null)",
        "    anything: any",
    ]
    assert format_tool(mt.Tool(name="bare", input_schema={"type": "object"})) == ["bare:"]


def test_resource_listing() -> None:
    text = mt.Resource(
        name="notes", title="Notes", uri="file:///notes.txt", mime_type="text/plain", description="A.\nMore."
    )
    assert format_resource(text) == "file:///notes.txt (text/plain): Notes - A."
    assert format_resource(mt.Resource(name="bare", uri="test://bare")) == "test://bare: bare"
    template = mt.ResourceTemplate(name="user", uri_template="users://{id}", description="A user.")
    assert format_resource(template) == "users://{id}: user - A user."


def test_prompt_listing() -> None:
    prompt = mt.Prompt(
        name="review",
        description="Review code.\n\nLonger.",
        arguments=[
            mt.PromptArgument(name="code", description="The code.", required=True),
            mt.PromptArgument(name="style"),
        ],
    )
    assert format_prompt(prompt) == [
        "review: Review code.",
        "    code: string - The code.",
        "    style: string (optional)",
    ]
    assert format_prompt(mt.Prompt(name="bare")) == ["bare:"]


def test_contents_and_messages(capsys: pytest.CaptureFixture[str]) -> None:
    read = mt.ReadResourceResult(
        contents=[
            mt.TextResourceContents(uri="test://t", mime_type="text/plain", text="two\nlines"),
            mt.BlobResourceContents(uri="test://b", mime_type="image/png", blob=PNG),
        ]
    )
    print_contents(read, raw=False)
    assert capsys.readouterr().out == "two\nlines\n[resource test://b image/png, 70 bytes]\n"
    print_contents(read, raw=True)
    assert json.loads(capsys.readouterr().out)["contents"][1] == {
        "uri": "test://b",
        "mimeType": "image/png",
        "blob": PNG,
    }
    got = mt.GetPromptResult(
        messages=[
            mt.PromptMessage(role="user", content=mt.TextContent(type="text", text="Hello")),
            mt.PromptMessage(
                role="assistant", content=mt.ImageContent(type="image", data=PNG, mime_type="image/png")
            ),
        ]
    )
    print_messages(got, raw=False)
    assert capsys.readouterr().out == "user: Hello\nassistant: [image image/png, 70 bytes]\n"
    print_messages(got, raw=True)
    assert json.loads(capsys.readouterr().out)["messages"][0] == {
        "role": "user",
        "content": {"type": "text", "text": "Hello"},
    }


def test_prompt_arguments_are_text() -> None:
    assert parse_prompt_arguments(["n=42", "flag=true", "empty=", "eq=a=b"], '{"n": "1", "s": "x"}') == {
        "n": "42",  # --arg wins, as typed
        "s": "x",
        "flag": "true",
        "empty": "",
        "eq": "a=b",
    }
    expected = r'prompt arguments are text, but n is \[1\] \(write it as a string: "\[1\]"\)'
    with pytest.raises(UsageError, match=expected):
        parse_prompt_arguments([], '{"n": [1]}')
    with pytest.raises(UsageError, match="--json wants a JSON object"):
        parse_prompt_arguments([], '"text"')


def test_the_mcp_log_levels_are_the_protocol_s() -> None:
    assert MCP_LOG_LEVELS == LOG_LEVELS == typing.get_args(mt.LoggingLevel)


# -- notifications ---------------------------------------------------------------------------------


def test_notices_as_lines() -> None:
    stream = io.StringIO()
    notices = Notices(stream, tty=False)
    notices.progress(1, 4, "first")
    notices.progress(2.5, None, None)
    notices.log(mt.LoggingMessageNotificationParams(level="warning", logger="db", data={"rows": 3}))
    notices.log(mt.LoggingMessageNotificationParams(level="info", data="plain"))
    notices.clear()
    assert (
        stream.getvalue()
        == 'progress 1/4 first\nprogress 2.5\nlog warning [db]: {"rows": 3}\nlog info: plain\n'
    )


def test_notices_on_a_terminal() -> None:
    stream = io.StringIO()  # no fileno: 80 columns are assumed
    notices = Notices(stream, tty=True)
    notices.progress(1, 2, "half" + "-" * 100)
    bar = "[############------------] 1/2 half"
    assert stream.getvalue().startswith("\r" + bar) and len(stream.getvalue()) == 1 + 79
    notices.log(mt.LoggingMessageNotificationParams(level="info", data="between"))
    notices.progress(3, None, "no total")
    notices.clear()
    rest = stream.getvalue()[80:]
    room = "\r" + " " * 79 + "\r"  # the bar makes room for the log line...
    back = "\r" + bar + "-" * 44  # ...and comes back
    shorter = "\r[progress] 3 no total" + " " * 58  # covers the longer bar
    erased = "\r" + " " * 21 + "\r"  # at the end
    assert rest == room + "log info: between\n" + back + shorter + erased
    notices.clear()  # nothing left to erase
    assert stream.getvalue()[80:] == rest


# -- errors ----------------------------------------------------------------------------------------


def test_failures_are_explained(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(url="http://127.0.0.1:8000/")
    assert _failure(args, TransportError("HTTP 404 from http://127.0.0.1:8000/: Not Found", status=404)) == 3
    assert capsys.readouterr().err == (
        "mcp-trio: HTTP 404 from http://127.0.0.1:8000/: Not Found\n"
        "mcp-trio: is the path right? MCP endpoints often end in /mcp\n"
    )
    assert _failure(args, RPCError(-32602, "Invalid params", {"field": "n"})) == 4
    assert (
        capsys.readouterr().err
        == 'mcp-trio: error -32602: Invalid params\nmcp-trio: error data: {"field": "n"}\n'
    )
    assert _failure(args, ConnectionRefusedError(111, "Connection refused")) == 3
    assert (
        capsys.readouterr().err
        == "mcp-trio: cannot reach http://127.0.0.1:8000/: [Errno 111] Connection refused\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["call", "http://127.0.0.1:9/mcp", "t", "--json", "[1]"], "mcp-trio: --json wants a JSON object"),
        (["call", "http://127.0.0.1:9/mcp", "t", "--arg", "novalue"], "mcp-trio: --arg wants KEY=VALUE"),
        (["call", "127.0.0.1:9/mcp", "t"], "expected an http(s):// or ws(s):// URL"),
        (["call", "http://127.0.0.1:9/mcp", "t", "--mcp-log-level", "loud"], "invalid choice: 'loud'"),
        (["tools", "http://127.0.0.1:9/mcp", "--log-level", "loud"], "invalid choice: 'LOUD'"),
        (["demo", "--http", "h11", "--bind", "localhost"], "--bind: expected HOST:PORT"),
        (["demo", "--admin-bind", "9100"], "--admin-bind: expected HOST:PORT, got '9100'"),
        (["demo", "--stdio", "--admin-bind", "127.0.0.1:9100"], "--admin-bind is for HTTP"),
        (["demo", "--admin-bind", "0.0.0.0:9100"], "--admin-bind 0.0.0.0:9100: not a loopback address"),
        (["demo", "--admin-bind", "[::]:9100"], "add --admin-bind-public"),
        (["demo", "--admin-bind", "metrics.example:9100"], "not a loopback address"),
        (["demo", "--admin-bind-public"], "--admin-bind-public and --admin-allowed-host are options of"),
        (["demo", "--admin-allowed-host", "a.example"], "are options of --admin-bind"),
        (["demo", "--admin-bind", "127.0.0.1:0", "--admin-allowed-host", "a/b"], "not a host"),
        (["prompt", "http://127.0.0.1:9/mcp", "p", "--json", '{"n": 1}'], "arguments are text, but n is 1"),
        (["prompt", "http://127.0.0.1:9/mcp", "p", "--arg", "novalue"], "mcp-trio: --arg wants KEY=VALUE"),
        (["read", "http://127.0.0.1:9/mcp"], "the following arguments are required: URI"),
        (["read", "test://static-text"], "expected an http(s):// or ws(s):// URL"),
        (["prompts", "http://127.0.0.1:9/mcp", "--arg", "a=1"], "unrecognized arguments: --arg"),
        (["resources", "http://127.0.0.1:9/mcp", "--oauth-scope", "x"], "--oauth-scope goes with --oauth"),
        (["serve", "json"], "mcp-trio: expected MODULE:ATTR, got 'json'"),
        (["serve", "json:no_such_name"], "mcp-trio: json:no_such_name: json has no attribute 'no_such_name'"),
        (["serve", "json:__name__"], "json:__name__ is neither an MCPServer, an MCPApp nor a python-sdk"),
        ([], "usage: mcp-trio"),
    ],
)
def test_usage_errors_exit_2_before_connecting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_an_import_failing_inside_the_module_keeps_its_traceback(tmp_path: Path) -> None:
    (tmp_path / "broken_mcp_server.py").write_text("import no_such_dependency_of_it\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ModuleNotFoundError, match="no_such_dependency_of_it"):
            load_app("broken_mcp_server:server", ServerConfig())
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("broken_mcp_server", None)


# -- help ------------------------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"mcp-trio {__version__}\n"


def test_the_help_fits_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 80
    assert EXIT_STATUS_HELP in text


@pytest.mark.parametrize("command", list(COMMAND_HELP))
def test_each_command_help_is_complete(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: mcp-trio {command} ")
    assert EXIT_STATUS_HELP in text
    assert "example" in text
    assert "not the MCP log level" in " ".join(text.split())  # --log-level says what it is
    assert max(len(line) for line in text.splitlines()) <= 80


def test_every_option_is_explained() -> None:
    parser = _parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(subparsers.choices) == list(COMMAND_HELP)  # in the order of the help
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            assert action.help, (name, action.option_strings or action.dest)


# -- start-up --------------------------------------------------------------------------------------

LOADED = """
import sys
from mcp_trio._cli import main
try:
    main(sys.argv[1:])
finally:
    print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""


def loaded(*argv: str) -> set[str]:
    """The modules loaded by ``mcp-trio ARGV`` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    return set(done.stderr.splitlines()[-1].split())


HEAVY = ("trio", "pydantic", "httpx", "hypercorn", "h11", "mcp_types", "mcp_trio._transport")


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["tools", "--help"], ["prompt", "--help"]])
def test_version_and_help_load_only_the_standard_library(argv: list[str]) -> None:
    modules = loaded(*argv)
    assert "mcp_trio._cli.output" in modules  # the wrapper saw the command run
    assert not {name for name in modules if name.split(".")[0] in HEAVY or name in HEAVY}, argv
    mcp_trio_modules = {name for name in modules if name.startswith("mcp_trio")}
    assert mcp_trio_modules <= {
        "mcp_trio",
        "mcp_trio._lazy",
        "mcp_trio._cli",
        "mcp_trio._cli.output",
        "mcp_trio._cli.client",
        "mcp_trio._cli.client.parsers",
        "mcp_trio._cli.client.connection",
    }, argv


def test_a_client_command_loads_no_server() -> None:
    modules = loaded("tools", "http://127.0.0.1:9/mcp")  # nothing listens: exit status 3
    assert "mcp_trio._client.session" in modules
    server_side = (
        "hypercorn",
        "mcp_trio._transport",
        "mcp_trio._app",
        "mcp_trio._http",
        "mcp_trio._cli.serve",
        "mcp_trio._cli.server_options",
    )
    assert not {name for name in modules if name.startswith(server_side)}
