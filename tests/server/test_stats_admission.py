"""``stats_path`` behind the admission of the endpoint: ``Host``/``Origin``, then the bearer check or the
``authenticate`` hook; still open where the endpoint is (no authentication); bounded in cost."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from mcp_trio import MCPApp, ServerConfig
from mcp_trio._transport import asgi as asgi_module
from mcp_trio.demo import build_demo_server
from mcp_trio.errors import RemoteProtocolError
from mcp_trio.server import HTTPRequestInfo
from mcp_trio.testing import ASGIClient, open_asgi_client

from .test_auth_app import Tokens, build, resource


async def by_key(request: HTTPRequestInfo) -> str:
    if request.header("x-api-key") != "k-1":
        raise RemoteProtocolError(
            "Unauthorized", http_status=401, headers=(("www-authenticate", 'ApiKey realm="mcp"'),)
        )
    return "operator"


async def get(asgi: ASGIClient, **headers: str) -> tuple[int, dict[str, str], bytes]:
    response = await asgi.request("GET", "/stats", headers=headers)
    return response.status, response.headers, await response.read()


def oauth_app() -> MCPApp:
    tokens = Tokens()
    tokens.issue("alice-1", "alice", "mcp")
    tokens.issue("no-scope", "carol")
    return MCPApp(build(), ServerConfig(oauth=resource(tokens), stats_path="/stats"))


async def test_oauth_stats_need_a_token_with_the_endpoint_s_scopes() -> None:
    async with open_asgi_client(oauth_app()) as asgi:
        status, headers, body = await get(asgi)
        assert status == 401, body
        assert headers["www-authenticate"].startswith("Bearer ")
        assert "resource_metadata=" in headers["www-authenticate"]
        assert "error" in json.loads(body)  # a JSON-RPC error body, like the endpoint's refusals
        status, headers, _ = await get(asgi, authorization="Bearer forged")
        assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
        status, _, _ = await get(asgi, authorization="Bearer no-scope")
        assert status == 403
        status, headers, body = await get(asgi, authorization="Bearer alice-1")
        assert status == 200 and headers["content-type"] == "application/json"
        assert json.loads(body)["sessions"] == 0


async def test_authenticate_hook_guards_the_stats() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(authenticate=by_key, stats_path="/stats"))
    async with open_asgi_client(app) as asgi:
        status, headers, _ = await get(asgi)
        assert status == 401 and headers["www-authenticate"] == 'ApiKey realm="mcp"'
        status, _, body = await get(asgi, **{"x-api-key": "k-1"})
        assert status == 200 and "process_tasks" in json.loads(body)


@pytest.mark.parametrize("authenticated", [False, True])
async def test_foreign_host_and_origin_are_refused_like_the_endpoint(authenticated: bool) -> None:
    options = {"authenticate": by_key} if authenticated else {}
    app = MCPApp(build_demo_server(), ServerConfig(stats_path="/stats", **options))  # type: ignore[arg-type]
    key = {"x-api-key": "k-1"}
    async with open_asgi_client(app) as asgi:
        status, _, body = await get(asgi, host="evil.example", **key)
        assert status == 421 and "error" in json.loads(body)
        endpoint = await asgi.request("GET", "/mcp", headers={"host": "evil.example", **key})
        assert endpoint.status == 421
        status, _, _ = await get(asgi, origin="http://evil.example", **key)
        assert status == 403
        status, _, _ = await get(asgi, **key)
        assert status == 200


async def test_without_authentication_stats_stay_open_and_only_get() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(stats_path="/stats"))
    async with open_asgi_client(app) as asgi:
        status, _, body = await get(asgi)
        assert status == 200 and json.loads(body)["sessions"] == 0
        response = await asgi.request("POST", "/stats", body=b"{}")
        assert response.status == 405 and response.headers["allow"] == "GET"


async def test_statistics_are_computed_at_most_once_per_max_age(mock_clock: trio.testing.MockClock) -> None:
    """However many GETs come, the statistics (which count every task) are computed once per
    ``STATS_MAX_AGE`` (a clock that moves only when told to)."""
    app = MCPApp(build_demo_server(), ServerConfig(stats_path="/stats"))
    computed = 0
    statistics = app.statistics

    def counting() -> dict[str, object]:
        nonlocal computed
        computed += 1
        return statistics()

    app.statistics = counting  # type: ignore[method-assign]
    async with open_asgi_client(app) as asgi:
        bodies = {(await get(asgi))[2] for _ in range(50)}  # no virtual time passes between them
        assert computed == 1 and len(bodies) == 1
        mock_clock.jump(asgi_module.STATS_MAX_AGE)
        assert (await get(asgi))[0] == 200
        assert computed == 2
