"""A real browser as the MCP client: headless Chromium runs a page from another origin whose script
speaks MCP with ``fetch`` to ``mcp-trio demo``.

The page is served from ``http://127.0.0.1:<page port>``, the MCP endpoint is
``http://127.0.0.1:<server port>/mcp``: a different origin, so every request is a CORS request and the
ones with MCP's headers (all of them) need a preflight.  With ``--cors-origins`` naming the page's
origin, the page initializes a 2025-11-25 session (reading ``Mcp-Session-Id``, which only an exposed
header allows), sends ``notifications/initialized``, calls ``echo``, opens the GET stream and reads
its priming event, deletes the session, and makes stateless 2026-07-28 calls with the
``MCP-Protocol-Version``/``Mcp-Method``/``Mcp-Name`` (and ``Mcp-Param-*``) headers.  Without the flag
every one of those ``fetch`` calls fails with a TypeError (the browser refuses the preflight's answer).

The page's script reports what happened by POSTing JSON back to the page server (same origin).
Chromium comes from the distribution's ``chromium`` package (``scripts/test.sh`` installs it).
Without it the test is skipped when run by hand, and fails under the test command (``tests/required.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp_http import serve_demo
from tests.required import missing, not_applicable

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason=not_applicable("Chromium from Debian (Linux)")
)

BROWSER_DEADLINE = 60.0
"""From Chromium's start to the page's report (normally one or two seconds)."""

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
]

PAGE_HELPERS = """\
function failure(error) {
  return {failed: error && error.name ? error.name : "Error", message: String(error)};
}

async function step(results, name, action) {
  try {
    results[name] = await action();
  } catch (error) {
    results[name] = failure(error);
  }
}

"""
"""What every page's script uses: a step's failure, and ``step`` (one named part of ``run``)."""
PAGE_REPORT = """\
async function report(results) {
  document.getElementById("out").textContent = JSON.stringify(results);
  await fetch("/result", {method: "POST", headers: {"content-type": "application/json"},
                          body: JSON.stringify(results)});
}

run().then(report, error => report({fatal: failure(error)}));
</script>
</body>
</html>
"""
"""The end of every page: ``run()``'s results POSTed to the page server (``/result``)."""

PAGE = (
    """\
<!doctype html>
<html>
<head><meta charset="utf-8"><title>mcp_trio in a browser</title></head>
<body>
<pre id="out">running</pre>
<script>
const MCP = __MCP_URL__;
const POST_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"};
const META = {
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientInfo": {"name": "browser", "version": "1"},
  "io.modelcontextprotocol/clientCapabilities": {},
};

"""
    + PAGE_HELPERS
    + """\
function sseMessages(text) {
  const messages = [];
  for (const block of text.split(/\\r?\\n\\r?\\n/)) {
    const data = block.split(/\\r?\\n/).filter(line => line.startsWith("data:"))
      .map(line => line.slice(5).replace(/^ /, "")).join("\\n");
    if (data) messages.push(JSON.parse(data));
  }
  return messages;
}

async function messagesOf(response) {
  const text = await response.text();
  const type = response.headers.get("content-type") || "";
  return type.startsWith("application/json") ? [JSON.parse(text)] : sseMessages(text);
}

function toolText(messages) {
  const last = messages[messages.length - 1];
  return last && last.result && last.result.content ? last.result.content[0].text : null;
}

async function run() {
  const results = {};
  // A placeholder keeps every later request a cross-origin one with MCP's headers even when
  // initialize failed: each must meet the preflight on its own.
  let sessionId = "no-session";
  await step(results, "initialize", async () => {
    const body = {jsonrpc: "2.0", id: 1, method: "initialize", params: {
      protocolVersion: "2025-11-25", capabilities: {}, clientInfo: {name: "browser", version: "1"}}};
    const response = await fetch(MCP, {method: "POST", headers: POST_HEADERS, body: JSON.stringify(body)});
    const header = response.headers.get("mcp-session-id");
    const messages = await messagesOf(response);
    if (header) sessionId = header;
    return {status: response.status, sessionId: header !== null,
            protocolVersion: messages[0] && messages[0].result ? messages[0].result.protocolVersion : null};
  });
  const session = {...POST_HEADERS, "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25"};
  await step(results, "initialized", async () => {
    const body = {jsonrpc: "2.0", method: "notifications/initialized"};
    const response = await fetch(MCP, {method: "POST", headers: session, body: JSON.stringify(body)});
    return {status: response.status};
  });
  await step(results, "call", async () => {
    const body = {jsonrpc: "2.0", id: 2, method: "tools/call",
                  params: {name: "echo", arguments: {text: "hi"}}};
    const response = await fetch(MCP, {method: "POST", headers: session, body: JSON.stringify(body)});
    return {status: response.status, text: toolText(await messagesOf(response))};
  });
  await step(results, "stream", async () => {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 10000);
    try {
      const response = await fetch(MCP, {signal: controller.signal, headers: {
        "accept": "text/event-stream", "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25"}});
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let text = "";
      while (!/\\r?\\n\\r?\\n/.test(text)) {
        const {value, done} = await reader.read();
        if (done) break;
        text += decoder.decode(value, {stream: true});
      }
      await reader.cancel();
      return {status: response.status, contentType: response.headers.get("content-type"), firstEvent: text};
    } finally {
      clearTimeout(timer);
    }
  });
  await step(results, "delete", async () => {
    const response = await fetch(MCP, {method: "DELETE", headers: {
      "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25"}});
    return response.ok ? {status: response.status} : {status: response.status, body: await response.text()};
  });
  await step(results, "modern_call", async () => {
    const body = {jsonrpc: "2.0", id: 3, method: "tools/call",
                  params: {name: "echo", arguments: {text: "modern"}, _meta: META}};
    const headers = {...POST_HEADERS, "mcp-protocol-version": "2026-07-28",
                     "mcp-method": "tools/call", "mcp-name": "echo"};
    const response = await fetch(MCP, {method: "POST", headers, body: JSON.stringify(body)});
    return {status: response.status, text: toolText(await messagesOf(response))};
  });
  await step(results, "modern_params", async () => {
    const body = {jsonrpc: "2.0", id: 4, method: "tools/call",
                  params: {name: "test_custom_headers", arguments: {region: "eu", priority: 3}, _meta: META}};
    const headers = {...POST_HEADERS, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call",
                     "mcp-name": "test_custom_headers", "mcp-param-region": "eu", "mcp-param-priority": "3"};
    const response = await fetch(MCP, {method: "POST", headers, body: JSON.stringify(body)});
    return {status: response.status, text: toolText(await messagesOf(response))};
  });
  return results;
}

"""
    + PAGE_REPORT
)

STEPS = ("initialize", "initialized", "call", "stream", "delete", "modern_call", "modern_params")


def chromium_binary() -> str:
    found = next(
        (path for name in ("chromium", "chromium-browser") if (path := shutil.which(name)) is not None), None
    )
    if found is None:
        missing("Chromium is not installed (scripts/test.sh installs Debian's chromium package)")
    return found


class PageServer:
    """Serves the page on ``/`` and keeps the JSON the page POSTs to ``/result`` (in a thread)."""

    def __init__(self) -> None:
        self.page = b""
        self.results: Any = None
        self.reported = trio.Event()
        token = trio.lowlevel.current_trio_token()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(outer.page)))
                self.end_headers()
                self.wfile.write(outer.page)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path == "/result" and outer.results is None:
                    outer.results = json.loads(body)
                    token.run_sync_soon(outer.reported.set)
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def show(self, mcp_url: str, page: str = PAGE) -> None:
        """Serve ``page`` (by default the one that speaks MCP) for ``mcp_url`` (its ``__MCP_URL__``)."""
        self.page = page.replace("__MCP_URL__", json.dumps(mcp_url)).encode()


@contextmanager
def page_server() -> Iterator[PageServer]:
    server = PageServer()
    thread = threading.Thread(target=server.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
        thread.join(5)


@asynccontextmanager
async def running_chromium(binary: str, url: str, tmp: Path) -> AsyncIterator[tuple[trio.Process, Path]]:
    """Headless Chromium on ``url`` in a process group of its own, killed (group and all) at the end."""
    log = tmp / "chromium.log"
    profile = tmp / "profile"
    profile.mkdir()
    with log.open("wb") as output:
        process = await trio.lowlevel.open_process(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", url],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            start_new_session=True,
        )
    try:
        yield process, log
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the browser and its helpers: its own group
        except ProcessLookupError:
            pass
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await process.wait()


async def run_page(chromium: str, pages: PageServer, tmp: Path) -> dict[str, Any]:
    """Open the page in Chromium; what its script reported."""
    async with (
        running_chromium(chromium, pages.origin + "/", tmp) as (process, log),
        trio.open_nursery() as nursery,
    ):

        async def browser_exits() -> None:
            await process.wait()
            pages.reported.set()  # nothing more can come

        nursery.start_soon(browser_exits)
        with trio.move_on_after(BROWSER_DEADLINE):
            await pages.reported.wait()
        nursery.cancel_scope.cancel()
        if pages.results is None:
            output = log.read_text(errors="replace")[-3000:]
            raise AssertionError(
                f"the page reported nothing within {BROWSER_DEADLINE} s"
                f" (Chromium exit status {process.returncode}); Chromium's output:\n{output}"
            )
    results: dict[str, Any] = pages.results
    assert "fatal" not in results, results
    return results


@pytest.fixture
def chromium() -> str:
    """The Chromium binary (a sync fixture, so that a skip keeps its reason)."""
    return chromium_binary()


@pytest.fixture
def tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="mcp-trio-browser-") as name:
        yield Path(name)


async def test_a_page_on_an_allowed_origin_speaks_mcp(chromium: str, tmp: Path) -> None:
    with page_server() as pages:
        async with serve_demo("--cors-origins", pages.origin) as demo:
            pages.show(demo.url)
            results = await run_page(chromium, pages, tmp)
    assert results["initialize"] == {"status": 200, "sessionId": True, "protocolVersion": "2025-11-25"}, (
        results
    )
    assert results["initialized"] == {"status": 202}, results
    assert results["call"] == {"status": 200, "text": "hi"}, results
    stream = results["stream"]
    assert stream["status"] == 200 and stream["contentType"] == "text/event-stream", results
    assert stream["firstEvent"].startswith("id:"), results  # the priming event of 2025-11-25
    # Once, not twice: SSE responses are "Cache-Control: no-store", so the GET stream the page cancelled
    # is not left half-written in Chromium's HTTP cache, where it made Chromium send the DELETE again.
    assert results["delete"] == {"status": 200}, results
    assert results["modern_call"] == {"status": 200, "text": "modern"}, results
    assert results["modern_params"] == {"status": 200, "text": "region=eu priority=3"}, results


@pytest.mark.parametrize(
    "flags", [(), ("--cors-origins", "http://127.0.0.1:1")], ids=["no-cors", "other-origin"]
)
async def test_a_page_on_an_origin_not_allowed_is_refused(
    flags: tuple[str, ...], chromium: str, tmp: Path
) -> None:
    with page_server() as pages:
        async with serve_demo(*flags) as demo:
            pages.show(demo.url)
            results = await run_page(chromium, pages, tmp)
    for name in STEPS:
        assert results[name]["failed"] == "TypeError", (name, results)
