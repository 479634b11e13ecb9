"""What the client commands print: a tool and its parameters, a resource or template, a prompt and its
arguments (the listings); a result's content, a resource's contents, a prompt's messages (text as is,
anything else summarized in one line), or any of them as JSON (``--raw``); and on stderr the
progress, task status and log notifications of a request (:class:`Notices`)."""

from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any, TextIO

import mcp_types as mt

from ..._protocol.tasks import TaskInfo
from .arguments import accepted_types

__all__ = [
    "Notices",
    "format_content",
    "format_prompt",
    "format_resource",
    "format_tool",
    "print_contents",
    "print_json",
    "print_messages",
    "print_result",
]

BAR_WIDTH = 24
"""Characters between the brackets of the progress bar drawn on a terminal."""


def _decoded_size(data: str) -> str:
    try:
        return f"{len(base64.b64decode(data, validate=True))} bytes"
    except (binascii.Error, ValueError):
        return "data not valid base64"


def _summary(kind: str, *details: str | None, size: str | None = None) -> str:
    words = " ".join(detail for detail in (kind, *details) if detail)
    return f"[{words}, {size}]" if size else f"[{words}]"


def _format_contents(resource: Any, header: bool) -> str:
    """A resource's contents: a blob summarized, text as it is (after the summary if ``header``)."""
    if isinstance(resource, mt.BlobResourceContents):
        return _summary("resource", str(resource.uri), resource.mime_type, size=_decoded_size(resource.blob))
    text: str = resource.text
    if not header:
        return text
    size = f"{len(text.encode())} bytes"
    return f"{_summary('resource', str(resource.uri), resource.mime_type, size=size)}\n{text}"


def format_content(item: Any) -> str:
    """One content block as printed: text as it is, anything else as a one-line summary (an embedded
    text resource: the summary, then its text)."""
    if isinstance(item, mt.TextContent):
        return item.text
    if isinstance(item, mt.ImageContent | mt.AudioContent):
        return _summary(item.type, item.mime_type, size=_decoded_size(item.data))
    if isinstance(item, mt.EmbeddedResource):
        return _format_contents(item.resource, header=True)
    if isinstance(item, mt.ResourceLink):
        known = None if item.size is None else f"{item.size} bytes"
        return _summary("resource_link", str(item.uri), item.mime_type, size=known)
    kind = getattr(item, "type", type(item).__name__)
    return _summary(str(kind))


def print_json(value: Any) -> None:
    """``--raw``: a model (or a list of them, or a dict of lists) as JSON, as it came on the wire."""
    if isinstance(value, list):
        print(json.dumps([_wire(item) for item in value], indent=2))
    elif isinstance(value, dict):
        print(json.dumps({key: [_wire(item) for item in items] for key, items in value.items()}, indent=2))
    else:
        print(json.dumps(_wire(value), indent=2))


def _wire(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def print_result(result: mt.CallToolResult, raw: bool) -> None:
    if raw:
        print_json(result)
        return
    for item in result.content:
        print(format_content(item))
    has_text = any(isinstance(item, mt.TextContent) for item in result.content)
    if result.structured_content is not None and not has_text:
        print(json.dumps(result.structured_content, indent=2))


def print_contents(result: mt.ReadResourceResult, raw: bool) -> None:
    """``mcp-trio read``: each of the contents, text as it is, a blob summarized."""
    if raw:
        print_json(result)
        return
    for contents in result.contents:
        print(_format_contents(contents, header=False))


def print_messages(result: mt.GetPromptResult, raw: bool) -> None:
    """``mcp-trio prompt``: each message as ``ROLE: `` and its content, as a result's is printed."""
    if raw:
        print_json(result)
        return
    for message in result.messages:
        print(f"{message.role}: {format_content(message.content)}")


def _type_text(schema: Any, root: dict[str, Any]) -> str:
    if not isinstance(schema, dict):
        return "any"
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        return f"array of {_type_text(schema['items'], root)}"
    branches = schema.get("anyOf") or schema.get("oneOf")
    if "type" not in schema and isinstance(branches, list) and branches:
        return " | ".join(dict.fromkeys(_type_text(branch, root) for branch in branches))
    types = accepted_types(schema, root)
    text = " | ".join(sorted(types)) if types else "any"
    if isinstance(schema.get("enum"), list):
        text += ", one of " + ", ".join(json.dumps(value) for value in schema["enum"])
    return text


def format_tool(tool: mt.Tool) -> list[str]:
    """The lines ``mcp-trio tools`` prints for one tool."""
    first_line = (tool.description or "").strip().splitlines()[:1]
    lines = [f"{tool.name}: {first_line[0] if first_line else ''}".rstrip()]
    schema = tool.input_schema or {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    for name, prop in properties.items():
        notes = []
        if name not in required:
            notes.append("optional")
            if isinstance(prop, dict) and "default" in prop:
                notes.append(f"default {json.dumps(prop['default'])}")
        line = f"    {name}: {_type_text(prop, schema)}"
        if notes:
            line += f" ({', '.join(notes)})"
        description = prop.get("description") if isinstance(prop, dict) else None
        if isinstance(description, str) and description.strip():
            line += f" - {description.strip().splitlines()[0]}"
        lines.append(line)
    return lines


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0].strip() if lines else ""


def format_resource(item: mt.Resource | mt.ResourceTemplate) -> str:
    """The line ``mcp-trio resources`` prints for a resource or a template:
    ``URI (MIME TYPE): TITLE OR NAME - DESCRIPTION``."""
    uri = str(item.uri) if isinstance(item, mt.Resource) else item.uri_template
    line = f"{uri} ({item.mime_type})" if item.mime_type else uri
    line += f": {item.title or item.name}"
    description = _first_line(item.description)
    return f"{line} - {description}" if description else line


def format_prompt(prompt: mt.Prompt) -> list[str]:
    """The lines ``mcp-trio prompts`` prints for one prompt (its arguments are text, as the tools'
    parameters are listed with their types)."""
    lines = [f"{prompt.name}: {_first_line(prompt.description)}".rstrip()]
    for argument in prompt.arguments or ():
        line = f"    {argument.name}: string" + ("" if argument.required else " (optional)")
        description = _first_line(argument.description)
        lines.append(f"{line} - {description}" if description else line)
    return lines


# -- progress, task status and log notifications on stderr ------------------------------------------


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


class Notices:
    """Shows progress and log notifications on ``stream``: on a terminal a progress bar redrawn in
    place (log lines go above it), otherwise one line per notification."""

    def __init__(self, stream: TextIO, tty: bool) -> None:
        self.stream = stream
        self.tty = tty
        self.bar = ""

    def _width(self) -> int:
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):
            columns = 0
        return max(20, columns - 1) if columns > 0 else 79  # a fresh pty says 0 columns

    def _draw(self, text: str) -> None:
        """Replace the bar's line with ``text`` (blanks cover a longer previous bar); an empty
        ``text`` erases the line and leaves the cursor at its start."""
        text = text[: self._width()]
        line = "\r" + text + " " * max(0, len(self.bar) - len(text))
        self.stream.write(line if text else line + "\r")
        self.stream.flush()
        self.bar = text

    def clear(self) -> None:
        """Erase the progress bar (before the result is printed, or a log line)."""
        if self.bar:
            self._draw("")

    def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """``progress=`` of the call: the bar redrawn, or one line ``progress 3/10 message``."""
        count = _number(progress) if total is None else f"{_number(progress)}/{_number(total)}"
        if not self.tty:
            self.stream.write(" ".join(filter(None, ("progress", count, message))) + "\n")
            self.stream.flush()
            return
        if total:
            filled = max(0, min(BAR_WIDTH, round(BAR_WIDTH * progress / total)))
            bar = "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "] "
        else:
            bar = "[progress] "
        self._draw(bar + " ".join(filter(None, (count, message))))

    def task(self, task: TaskInfo) -> None:
        """``on_task_status`` of the call: the status line redrawn, or one line
        ``task ID STATUS: message`` per change."""
        if not self.tty:
            line = f"task {task.task_id} {task.status}"
            if task.status_message:
                line += f": {task.status_message}"
            self.stream.write(line + "\n")
            self.stream.flush()
            return
        self._draw(f"[task {task.status}] " + (task.status_message or task.task_id))

    def log(self, log: mt.LoggingMessageNotificationParams) -> None:
        """``on_log``: one line ``log LEVEL [LOGGER]: DATA`` (above the bar on a terminal)."""
        text = log.data if isinstance(log.data, str) else json.dumps(log.data)
        where = f" [{log.logger}]" if log.logger else ""
        bar = self.bar
        self.clear()
        self.stream.write(f"log {log.level}{where}: {text}\n")
        if bar:
            self._draw(bar)
        self.stream.flush()
