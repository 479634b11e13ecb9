"""The server card's documents, sans-IO (the draft of SEP-2127): what a card says of a
``server/discover`` answer that leaves things out, the request URL it names, the conditional answer."""

from __future__ import annotations

from mcp_trio._protocol.card import ServerCard, card_document, endpoint_url, public_response

INFO = {"name": "weather", "version": "1"}


def test_a_discover_answer_without_versions_or_capabilities() -> None:
    card = card_document({}, INFO, ServerCard(), "http://127.0.0.1:8000/mcp")
    assert card["remotes"] == [{"type": "streamable-http", "url": "http://127.0.0.1:8000/mcp"}]
    assert "_meta" not in card
    assert card["name"] == "localhost/weather" and card["description"] == "weather, an MCP server"


def test_server_info_wins_and_is_cut_to_the_drafts_bounds() -> None:
    info = {
        **INFO,
        "title": "T" * 150,
        "description": "D" * 150,
        "icons": [{"src": "data:image/png;base64,"}],
    }
    card = card_document({}, info, ServerCard(title="other", icons=[{"src": "x"}]), "https://a.example/mcp")
    assert card["title"] == "T" * 99 + "\u2026" and card["description"] == "D" * 99 + "\u2026"
    assert card["icons"] == [{"src": "data:image/png;base64,"}]
    assert card["name"] == "example.a/weather"


def test_the_request_url() -> None:
    assert endpoint_url("https", "mcp.example.com", "10.0.0.1:80", "/mcp") == "https://mcp.example.com/mcp"
    assert endpoint_url("http", "[::1]:8000", "x", "/mcp") == "http://[::1]:8000/mcp"
    assert endpoint_url("http", None, "10.0.0.1:80", "/mcp") == "http://10.0.0.1:80/mcp"
    assert endpoint_url("http", "a b", "10.0.0.1:80", "/") == "http://10.0.0.1:80/"
    assert endpoint_url("http", "evil.example/path?", "10.0.0.1:80", "/mcp") == "http://10.0.0.1:80/mcp"


def test_head_and_conditional_answers() -> None:
    status, headers, body = public_response("GET", {"a": 1}, "application/x", None)
    etag = dict(headers)[b"etag"].decode()
    assert status == 200 and body == b'{"a":1}'
    assert public_response("HEAD", {"a": 1}, "application/x", None)[2] == b""
    assert public_response("GET", {"a": 1}, "application/x", f"W/{etag}")[0] == 304
    assert public_response("GET", {"a": 1}, "application/x", '"nope", W/"nope"')[0] == 200
    assert public_response("GET", {"a": 2}, "application/x", etag)[0] == 200  # another document
