"""A real browser reads the server card (a draft, SEP-2127): headless Chromium runs a page from another
origin whose script fetches ``mcp-trio demo --server-card``'s card, revalidates it with its ``ETag``
(``If-None-Match``: a preflighted request, 304), fetches the AI Catalog, and asks the endpoint for
``server/discover``; the test holds the card against that answer.

The card is public (CORS for any origin) whatever the endpoint allows: with ``--cors-origins`` naming
the page's origin the page's ``server/discover`` is answered too; without it the browser refuses that
answer (a TypeError) while the card and the catalog are still read.  The page, the browser and their
fixtures are those of ``test_browser.py``.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_http import serve_demo
from test_browser import PAGE_HELPERS, PAGE_REPORT, chromium_binary, page_server, run_page
from tests.required import not_applicable

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason=not_applicable("Chromium from Debian (Linux)")
)

PAGE = (
    """\
<!doctype html>
<html>
<head><meta charset="utf-8"><title>a server card in a browser</title></head>
<body>
<pre id="out">running</pre>
<script>
const MCP = __MCP_URL__;
const CARD = MCP + "/server-card";
const CATALOG = new URL("/.well-known/ai-catalog.json", MCP).href;

"""
    + PAGE_HELPERS
    + """\
async function run() {
  const results = {};
  let etag = "none";
  await step(results, "card", async () => {
    const response = await fetch(CARD, {
      headers: {"accept": "application/mcp-server-card+json"}, cache: "no-store"});
    etag = response.headers.get("etag") || "none";  // readable only if the server exposes it
    return {status: response.status, contentType: response.headers.get("content-type"),
            etag: response.headers.get("etag"), cacheControl: response.headers.get("cache-control"),
            card: await response.json()};
  });
  await step(results, "revalidated", async () => {
    const response = await fetch(CARD, {headers: {"if-none-match": etag}, cache: "no-store"});
    return {status: response.status};
  });
  await step(results, "catalog", async () => {
    const response = await fetch(CATALOG, {cache: "no-store"});
    return {status: response.status, contentType: response.headers.get("content-type"),
            catalog: await response.json()};
  });
  await step(results, "discover", async () => {
    const meta = {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientInfo": {"name": "browser", "version": "1"},
      "io.modelcontextprotocol/clientCapabilities": {},
    };
    const body = {jsonrpc: "2.0", id: 1, method: "server/discover", params: {_meta: meta}};
    const headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
                     "mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover"};
    const response = await fetch(MCP, {method: "POST", headers, body: JSON.stringify(body)});
    const text = await response.text();
    const sse = (response.headers.get("content-type") || "").startsWith("text/event-stream");
    const data = sse ? text.split(/\\r?\\n/).filter(line => line.startsWith("data:")).pop().slice(5) : text;
    return {status: response.status, answer: JSON.parse(data)};
  });
  return results;
}

"""
    + PAGE_REPORT
)


@pytest.fixture
def chromium() -> str:
    """The Chromium binary (a sync fixture, so that a skip keeps its reason)."""
    return chromium_binary()


@pytest.fixture
def tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="mcp-trio-browser-card-") as name:
        yield Path(name)


def check_read(results: dict[str, Any], url: str) -> dict[str, Any]:
    """The page read the card and the catalog with the draft's headers; the card."""
    card = results["card"]
    assert card["status"] == 200, results
    assert card["contentType"] == "application/mcp-server-card+json", results
    assert card["cacheControl"] == "public, max-age=3600", results
    assert card["etag"] is not None and card["etag"].startswith('"'), results  # exposed to the page
    assert results["revalidated"] == {"status": 304}, results  # a preflighted If-None-Match
    catalog = results["catalog"]
    assert catalog["status"] == 200 and catalog["contentType"] == "application/ai-catalog+json", results
    [entry] = catalog["catalog"]["entries"]
    assert entry["url"] == url + "/server-card", results
    document: dict[str, Any] = card["card"]
    assert document["remotes"][0]["url"] == url, results
    return document


async def test_a_page_of_another_origin_reads_the_card_and_it_matches_discover(
    chromium: str, tmp: Path
) -> None:
    with page_server() as pages:
        async with serve_demo("--server-card", "--cors-origins", pages.origin) as demo:
            pages.show(demo.url, PAGE)
            results = await run_page(chromium, pages, tmp)
    card = check_read(results, demo.url)
    discover = results["discover"]
    assert discover["status"] == 200, results
    result = discover["answer"]["result"]
    info = result["_meta"]["io.modelcontextprotocol/serverInfo"]
    assert card["name"] == f"localhost/{info['name']}"
    assert card["version"] == info["version"]
    assert card["remotes"][0]["supportedProtocolVersions"] == result["supportedVersions"]
    assert card["_meta"]["io.github.mcp-trio/capabilities"] == result["capabilities"]


async def test_the_card_is_read_where_the_endpoint_refuses_the_page(chromium: str, tmp: Path) -> None:
    with page_server() as pages:
        async with serve_demo("--server-card") as demo:
            pages.show(demo.url, PAGE)
            results = await run_page(chromium, pages, tmp)
    check_read(results, demo.url)
    assert results["discover"]["failed"] == "TypeError", results  # no CORS on the endpoint for the page
