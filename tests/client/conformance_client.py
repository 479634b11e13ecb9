"""mcp_trio's client as the client under test of the MCP conformance suite's client scenarios.

    conformance client --command "python3 tests/client/conformance_client.py" --scenario NAME ...

How the suite runs it (``@modelcontextprotocol/conformance`` 0.2.0-alpha.12, ``dist/index.js``): it starts
the scenario's mock server, then runs the command with the server's URL appended as the last argument
(through a shell), with these variables in the environment:

* ``MCP_CONFORMANCE_SCENARIO``: the scenario name (the dispatch key below);
* ``MCP_CONFORMANCE_PROTOCOL_VERSION``: the wire the mock speaks: the run's ``--spec-version`` if given,
  else 2026-07-28 for a scenario introduced in 2026-07-28 and 2025-11-25 for every other one;
* ``MCP_CONFORMANCE_CONTEXT`` (only some scenarios): JSON with scenario data, e.g. the tool calls of
  ``http-custom-headers``.

The client must exit 0 within the suite's timeout (30 s by default).  What each scenario then checks is
in the mock server; the handlers below do what each scenario expects a client to do, through the public
API of ``open_client_session`` only.  The era is chosen from ``MCP_CONFORMANCE_PROTOCOL_VERSION``:
``mode="legacy"`` (``initialize``, with that version) for a 2025 revision, ``mode="auto"`` for
2026-07-28 (``server/discover`` first).  ``MCP_TRIO_CLIENT_MODE`` (auto, legacy or modern) overrides
the mode, so a 2025-era scenario can also be run with ``auto`` to see the fallback to ``initialize``.

Logs go to stderr (the suite stores stdout and stderr next to the checks).  Exit status: 0 when the
scenario's flow completed, 1 when the client raised (the traceback on stderr), 2 for a usage error.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import mcp_types as mt
import trio

from mcp_trio import ClientSession, RPCError, open_client_session
from mcp_trio.auth import ClientCredentials, IDJAGExchange, JWTBearer, OAuth, OAuthError
from mcp_trio.errors import SkillVerificationError

logger = logging.getLogger("conformance_client")

LEGACY_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSION = "2026-07-28"
CLIENT_INFO = {"name": "mcp-trio-conformance-client", "version": "0.1.0"}

Handler = Callable[[str], Awaitable[None]]
HANDLERS: dict[str, Handler] = {}


def scenario(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            HANDLERS[name] = fn
        return fn

    return register


def protocol_version() -> str:
    return os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")


def mode() -> str:
    forced = os.environ.get("MCP_TRIO_CLIENT_MODE")
    if forced:
        return forced
    return "auto" if protocol_version() == MODERN_VERSION else "legacy"


def context() -> dict[str, Any]:
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    loaded: dict[str, Any] = json.loads(raw) if raw else {}
    return loaded


def connect(url: str, **handlers: Any) -> Any:
    version = protocol_version()
    legacy_version = version if version in LEGACY_VERSIONS else "2025-11-25"
    return open_client_session(
        url,
        mode=mode(),  # type: ignore[arg-type]
        client_info=CLIENT_INFO,
        legacy_version=legacy_version,
        **handlers,
    )


def describe(s: ClientSession) -> None:
    """Log what was negotiated, and check the era: against a mock that speaks a 2025 revision the
    session must be a 2025-era one (in ``auto`` mode: the client must have fallen back to
    ``initialize``), against a 2026-07-28 mock a 2026-era one."""
    logger.info(
        "connected: modern=%s protocol=%s server=%s capabilities=%s",
        s.modern,
        s.protocol_version,
        s.server_info,
        s.server_capabilities,
    )
    wanted = protocol_version()
    if s.modern != (wanted == MODERN_VERSION):
        raise AssertionError(
            f"the mock speaks {wanted}, but the {mode()!r} session is in the other era"
            f" (protocol {s.protocol_version}, server info {s.server_info!r})"
        )


def dummy_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A value for every required property of a tool's input schema, after its declared type."""
    samples: dict[str, Any] = {
        "string": "us-west1",
        "integer": 1,
        "number": 1.5,
        "boolean": True,
        "object": {},
        "array": [],
        "null": None,
    }
    properties = schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    for name in schema.get("required") or []:
        kind = (properties.get(name) or {}).get("type", "string")
        arguments[name] = samples.get(kind if isinstance(kind, str) else "string", "x")
    return arguments


# -- 2025-era and cross-era scenarios -----------------------------------------------------------


@scenario("initialize")
async def run_initialize(url: str) -> None:
    """Initialize, list the tools, close."""
    async with connect(url) as s:
        describe(s)
        tools = await s.list_tools()
        logger.info("tools: %s", [t.name for t in tools.tools])


@scenario("tools_call")
async def run_tools_call(url: str) -> None:
    """List the tools; call add_numbers with two numbers."""
    async with connect(url) as s:
        describe(s)
        tools = await s.list_tools()
        assert "add_numbers" in [t.name for t in tools.tools], tools
        result = await s.call_tool("add_numbers", {"a": 5, "b": 3})
        logger.info("add_numbers: %s", result.content)
        assert not result.is_error and isinstance(result.content[0], mt.TextContent)
        assert result.content[0].text == "The sum of 5 and 3 is 8", result


@scenario("sse-retry")
async def run_sse_retry(url: str) -> None:
    """Call test_reconnection: the server closes the POST's SSE stream after its priming event and
    answers on the stream the client resumes (GET with Last-Event-ID, after the retry delay)."""
    async with connect(url) as s:
        describe(s)
        await s.list_tools()
        result = await s.call_tool("test_reconnection")
        logger.info("test_reconnection: %s", result.content)
        assert not result.is_error and isinstance(result.content[0], mt.TextContent)
        assert result.content[0].text == "Reconnection test completed successfully", result


async def accept_with_defaults(params: mt.ElicitRequestParams) -> mt.ElicitResult:
    """Accept a form elicitation with every default of its schema (SEP-1034).

    The client library hands the request to this handler as it is; it does not fill in defaults of
    its own (the TypeScript SDK has an ``applyDefaults`` option for that).  Like the python-sdk's
    conformance client, the handler applies them."""
    content: dict[str, Any] = {}
    if isinstance(params, mt.ElicitRequestFormParams):
        schema = params.requested_schema
        schema_dict = (
            schema if isinstance(schema, dict) else schema.model_dump(by_alias=True, exclude_none=True)
        )
        for name, prop in (schema_dict.get("properties") or {}).items():
            if isinstance(prop, dict) and "default" in prop:
                content[name] = prop["default"]
    logger.info("elicitation %r answered with defaults %s", getattr(params, "message", ""), content)
    return mt.ElicitResult(action="accept", content=content)


@scenario("elicitation-sep1034-client-defaults")
async def run_elicitation_defaults(url: str) -> None:
    async with connect(url, elicitation=accept_with_defaults) as s:
        describe(s)
        await s.list_tools()
        result = await s.call_tool("test_client_elicitation_defaults")
        logger.info("test_client_elicitation_defaults: %s", result.content)
        assert not result.is_error, result


@scenario("json-schema-2020-12-preservation")
async def run_json_schema_preservation(url: str) -> None:
    """Send the focal tool's inputSchema, as the client parsed it, back through the echo tool."""
    async with connect(url) as s:
        describe(s)
        tools = {t.name: t for t in (await s.list_tools()).tools}
        focal = tools["json_schema_2020_12_tool"]
        schema = focal.input_schema
        schema_dict = (
            schema if isinstance(schema, dict) else schema.model_dump(by_alias=True, exclude_none=True)
        )
        logger.info("observed inputSchema: %s", json.dumps(schema_dict))
        result = await s.call_tool("json_schema_echo", {"schema": schema_dict})
        assert not result.is_error, result


@scenario("json-schema-ref-no-deref")
async def run_list_tools_only(url: str) -> None:
    """List the tools (one has a network ``$ref``, which must not be fetched); the mock serves nothing
    else."""
    async with connect(url) as s:
        describe(s)
        tools = await s.list_tools()
        logger.info("tools: %s", [t.name for t in tools.tools])


# -- 2026-era scenarios -------------------------------------------------------------------------


@scenario("request-metadata")
async def run_request_metadata(url: str) -> None:
    """Discover, list the tools.  The mock rejects the first request with -32022
    (UnsupportedProtocolVersion, ``data.supported = ["2026-07-28"]``) to see whether the client retries
    with a supported version; every request's headers and ``_meta`` are checked.

    The library does not renegotiate: the rejection surfaces as an RPCError (from ``open_client_session``
    in ``auto`` mode, which re-raises -32022 from ``server/discover``).  This program does not retry for
    it (that would hide the gap: the retry check stays a WARNING); it reports the error and ends."""
    try:
        # handlers for every server-to-client request, so that the capabilities are declared (and checked)
        async with connect(
            url, sampling=decline_sampling, elicitation=accept_with_defaults, roots=no_roots
        ) as s:
            describe(s)
            tools = await s.list_tools()
            logger.info("tools: %s", [t.name for t in tools.tools])
    except RPCError as exc:
        if exc.code != mt.UNSUPPORTED_PROTOCOL_VERSION:
            raise
        logger.warning(
            "the server refused the protocol version (%s: %s, data=%s); the client gave up",
            exc.code,
            exc.message,
            exc.data,
        )


async def decline_sampling(params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
    raise RPCError(mt.INVALID_REQUEST, "this conformance client has no model")


async def no_roots() -> mt.ListRootsResult:
    return mt.ListRootsResult(roots=[])


@scenario("http-standard-headers")
async def run_standard_headers(url: str) -> None:
    """Every kind of request that carries Mcp-Method / Mcp-Name: list and call the tools, list and read
    the resources, list and get the prompts."""
    async with connect(url) as s:
        describe(s)
        for tool in (await s.list_tools()).tools:
            await s.call_tool(tool.name, dummy_arguments(dict(tool.input_schema)))
        for resource in (await s.list_resources()).resources:
            await s.read_resource(str(resource.uri))
        for prompt in (await s.list_prompts()).prompts:
            await s.get_prompt(prompt.name)


@scenario("http-custom-headers")
async def run_custom_headers(url: str) -> None:
    """List the tools (to learn their ``x-mcp-header`` parameters), then make the tool calls the scenario
    passes in MCP_CONFORMANCE_CONTEXT (``toolCalls``)."""
    calls = context().get("toolCalls") or []
    async with connect(url) as s:
        describe(s)
        await s.list_tools()
        for call in calls:
            result = await s.call_tool(call["name"], call.get("arguments") or {})
            logger.info("%s: %s", call["name"], result.content)


@scenario("http-invalid-tool-headers")
async def run_invalid_tool_headers(url: str) -> None:
    """List the tools and call each tool the client offers.  Ten of the eleven listed tools carry an
    invalid ``x-mcp-header`` annotation; a conforming client excludes them from what it offers, so only
    ``valid_tool`` gets called."""
    async with connect(url) as s:
        describe(s)
        tools = (await s.list_tools()).tools
        logger.info("the client offers: %s", [t.name for t in tools])
        for tool in tools:
            arguments = (
                {"region": "us-west1"}
                if tool.name == "valid_tool"
                else dummy_arguments(dict(tool.input_schema))
            )
            result = await s.call_tool(tool.name, arguments)
            logger.info("%s: %s", tool.name, result.content)


@scenario("sep-2322-client-request-state")
async def run_request_state(url: str) -> None:
    """Multi-round tool calls (``input_required``): the library answers the input requests and retries.
    ``test_mrtr_echo_state`` sends a ``requestState`` that must come back byte for byte, under a new
    JSON-RPC id; ``test_mrtr_no_state`` sends none and none may come back; ``test_mrtr_unrelated`` is
    called from inside the elicitation handler, i.e. while another call's rounds are in progress, and
    must carry nothing of them; ``test_mrtr_no_result_type`` answers without ``resultType``, which means
    complete (no retry)."""
    holder: dict[str, ClientSession] = {}
    unrelated: list[str] = []

    async def elicitation(params: mt.ElicitRequestParams) -> mt.ElicitResult:
        if not unrelated:
            result = await holder["session"].call_tool("test_mrtr_unrelated")
            assert isinstance(result.content[0], mt.TextContent)
            unrelated.append(result.content[0].text)
        return mt.ElicitResult(action="accept", content={"confirmed": True})

    async with connect(url, elicitation=elicitation) as s:
        holder["session"] = s
        describe(s)
        await s.list_tools()
        for name, expected in (
            ("test_mrtr_echo_state", "echo-state-ok"),
            ("test_mrtr_no_state", "no-state-ok"),
            ("test_mrtr_no_result_type", "no-result-type-test-ok"),
        ):
            result = await s.call_tool(name)
            assert isinstance(result.content[0], mt.TextContent)
            logger.info("%s: %s", name, result.content[0].text)
            assert result.content[0].text == expected, result
        assert unrelated == ["unrelated-ok"], unrelated


# -- the skills extension (io.modelcontextprotocol/skills, SEP-2640) ----------------------------


@scenario("sep-2640-client-no-prefetch")
async def run_skills_listing(url: str) -> None:
    """List the skills; read nothing (files are retrieved only when a skill is loaded)."""
    async with connect(url) as s:
        describe(s)
        skills = await s.list_skills()
        logger.info("skills: %s", [skill.get("uri") for skill in skills])


@scenario(
    "sep-2640-client-verify-digest", "sep-2640-client-verify-size", "sep-2640-client-verify-frontmatter"
)
async def run_skills_loading(url: str) -> None:
    """Load the first skill (its SKILL.md, verified), then, only if it verified, read its other files."""
    async with connect(url) as s:
        describe(s)
        skill = (await s.list_skills())[0]
        try:
            await s.load_skill(skill)
        except SkillVerificationError as exc:
            logger.info("skill rejected: %s", exc)
            return
        for entry in skill.get("resources") or ():
            if entry["uri"] != skill["uri"]:
                await s.read_skill_file(skill, entry["uri"])


# -- authorization scenarios (auth/*) --------------------------------------------------------------
#
# The suite starts a mock authorization server next to the mock MCP server.  Its authorization endpoint
# redirects at once (no login page), so the "browser" of these runs is one GET with redirects off.  The
# client is configured as a real one would be: a Client ID Metadata Document URL (used only where the
# server supports them), pre-registered credentials when the scenario passes some in
# MCP_CONFORMANCE_CONTEXT, dynamic registration otherwise.

CIMD_URL = "https://conformance-test.local/client-metadata.json"  # what auth/basic-cimd expects
REDIRECT_URI = "http://localhost:3000/callback"


class FollowRedirect:
    """A :class:`~mcp_trio.auth.RedirectHandler` for the mock authorization server: GET the authorization
    URL, return where it redirects."""

    redirect_uri = REDIRECT_URI

    async def authorize(self, authorization_url: str) -> str:
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.get(authorization_url, follow_redirects=False)
        location = response.headers.get("location")
        if response.status_code not in (301, 302, 303, 307, 308) or not location:
            raise AssertionError(f"the authorization endpoint answered {response.status_code}: no redirect")
        logger.info("authorization redirect: %s", location)
        return location


def oauth(**options: Any) -> OAuth:
    ctx = context()
    return OAuth(
        redirect=FollowRedirect(),
        client_name="mcp-trio-conformance-client",
        client_metadata_url=CIMD_URL,
        client_id=ctx.get("client_id"),
        client_secret=ctx.get("client_secret"),
        **options,
    )


async def use_protected_server(url: str, auth: httpx.Auth) -> None:
    """Connect, list the tools and call the mock's one tool, authorizing on the way."""
    async with connect(url, auth=auth) as s:
        describe(s)
        tools = await s.list_tools()
        logger.info("tools: %s", [t.name for t in tools.tools])
        result = await s.call_tool("test-tool", {})
        logger.info("test-tool: %s", result.content)
        assert not result.is_error, result


@scenario(
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
)
async def run_auth(url: str) -> None:
    await use_protected_server(url, oauth())


# scenario -> what the client must refuse (a pattern of its OAuthError's message)
REFUSALS = {
    "auth/resource-mismatch": r"protected resource metadata .* is for 'https://evil\.example\.com/mcp'",
    "auth/iss-supported-missing": r"advertises RFC 9207 iss, but its response has none",
    "auth/iss-wrong-issuer": r"comes from issuer 'https://evil\.example\.com'",
    "auth/iss-unexpected": r"comes from issuer 'https://evil\.example\.com'",
    "auth/iss-normalized": r"comes from issuer 'http://[^']+/', not from 'http://[^/']+'",
    "auth/metadata-issuer-mismatch": r"names the issuer 'https://attacker\.example\.com'",
    "auth/scope-retry-limit": r"HTTP 403 \(insufficient_scope.* after 3 authorization attempts",
}


@scenario(*REFUSALS)
async def run_auth_refusal(url: str) -> None:
    """The scenario makes the authorization unsafe (or endless): the client must refuse with an
    OAuthError that says why; the program then ends normally.  Completing the flow is a failure."""
    name = os.environ["MCP_CONFORMANCE_SCENARIO"]
    try:
        await use_protected_server(url, oauth())
    except OAuthError as exc:
        logger.info("refused, as it must be: %s", exc)
        if not re.search(REFUSALS[name], str(exc)):
            raise AssertionError(f"refused for another reason than expected ({REFUSALS[name]!r})") from exc
        return
    raise AssertionError("the client completed the flow; it had to refuse")


@scenario("auth/client-credentials-basic", "auth/client-credentials-jwt")
async def run_client_credentials(url: str) -> None:
    """The client_credentials grant with the credentials the scenario passes in the context: a secret
    (client_secret_basic) or a private key (private_key_jwt)."""
    ctx = context()
    if "private_key_pem" in ctx:
        auth = ClientCredentials(
            client_id=ctx["client_id"],
            private_key=ctx["private_key_pem"],
            signing_algorithm=ctx.get("signing_algorithm") or "ES256",
        )
    else:
        auth = ClientCredentials(client_id=ctx["client_id"], client_secret=ctx["client_secret"])
    await use_protected_server(url, auth)


@scenario("auth/dpop", "auth/dpop-nonce")
async def run_dpop(url: str) -> None:
    """DPoP (RFC 9449): a token bound to the client's key, presented with a fresh proof per request
    (with the servers' nonces in auth/dpop-nonce)."""
    await use_protected_server(url, oauth(dpop=True))


@scenario("auth/wif-jwt-bearer")
async def run_workload_identity(url: str) -> None:
    """Workload identity federation: the platform's token (``valid_jwt`` of the context) as the
    assertion of a jwt-bearer grant."""
    ctx = context()
    await use_protected_server(url, JWTBearer(assertion=ctx["valid_jwt"], client_id=ctx["client_id"]))


@scenario("auth/enterprise-managed-authorization", "auth/cross-app-access-complete-flow")
async def run_enterprise_managed(url: str) -> None:
    """Enterprise-managed authorization: the identity provider's ID token exchanged there for an ID-JAG
    (RFC 8693), then the ID-JAG for an access token (jwt-bearer, client_secret_basic)."""
    ctx = context()
    exchange = IDJAGExchange(ctx["idp_token_endpoint"], ctx["idp_id_token"], client_id=ctx["idp_client_id"])
    auth = JWTBearer(assertion=exchange, client_id=ctx["client_id"], client_secret=ctx["client_secret"])
    await use_protected_server(url, auth)


async def main(url: str, name: str) -> None:
    await HANDLERS[name](url)


def cli(argv: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    name = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    if len(argv) < 2 or name not in HANDLERS:
        names = ", ".join(sorted(HANDLERS))
        print(
            f"usage: MCP_CONFORMANCE_SCENARIO=NAME {argv[0]} SERVER_URL (NAME: {names}; got {name!r})",
            file=sys.stderr,
        )
        return 2
    url = argv[-1]
    logger.info("scenario %s against %s (protocol %s, mode %s)", name, url, protocol_version(), mode())
    try:
        trio.run(main, url, name)
    except BaseException:
        logger.exception("scenario %s failed", name)
        return 1
    logger.info("scenario %s done", name)
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv))
