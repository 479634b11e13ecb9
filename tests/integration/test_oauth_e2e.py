"""OAuth end to end: a real authorization server (npm ``oidc-provider``, ``tests/oauth_as/``), mcp_trio's
OAuth client and mcp_trio's protected MCP server on a real hypercorn, all on 127.0.0.1.

The first test needs only the authorization server: it registers a client, runs the authorization
code flow with PKCE as a user at a browser, and checks the JWT access token and the refresh token, with
plain HTTP requests.  The others put mcp_trio on both sides.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import mcp_types as mt
import pytest
import trio
from joserfc import jwt
from joserfc.jwk import KeySet
from mcp_http import INIT, POST_HEADERS

import oauth_as
from mcp_trio import open_client_session
from mcp_trio.auth import (
    FileTokenStore,
    IntrospectionVerifier,
    MemoryTokenStore,
    OAuth,
)
from oauth_as import (
    AuthorizationServer,
    Browser,
    BrowserRedirect,
    obtain_tokens,
    pkce_pair,
    run_authorization_server,
    serve_protected,
)

# The shared fixtures (tests use them by name).
oauth_as_installed = oauth_as.oauth_as_installed
authorization_server = oauth_as.authorization_server
browser = oauth_as.browser

REDIRECT_URI = "http://127.0.0.1:33418/callback"
RESOURCE = "http://127.0.0.1:9/mcp"  # a resource indicator only: nothing is asked of it here
STEP = 10.0
"""Deadline of one exchange with the authorization server (a login is several)."""


async def metadata(http: httpx.AsyncClient, server: AuthorizationServer) -> dict[str, Any]:
    response = await http.get(server.metadata_url)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def verify_access_token(http: httpx.AsyncClient, meta: dict[str, Any], token: str) -> dict[str, Any]:
    """The claims of a JWT access token, its signature checked against the server's published keys."""
    keys = (await http.get(meta["jwks_uri"])).json()
    decoded = jwt.decode(token, KeySet.import_key_set(keys), algorithms=["RS256"])
    assert decoded.header["typ"] == "at+jwt", decoded.header  # RFC 9068
    claims: dict[str, Any] = decoded.claims
    return claims


@pytest.mark.deadline(60)
async def test_the_authorization_server_alone(
    authorization_server: AuthorizationServer, browser: Browser
) -> None:
    """Registration, the code flow with PKCE S256 and ``iss`` in the response, a JWT access token for
    the resource, a refresh (rotated), and what the server refuses."""
    server = authorization_server
    async with httpx.AsyncClient(timeout=STEP) as http:
        with trio.fail_after(STEP):
            meta = await metadata(http, server)
            openid = (await http.get(server.issuer + "/.well-known/openid-configuration")).json()
        assert meta == openid
        assert meta["issuer"] == server.issuer
        assert meta["code_challenge_methods_supported"] == ["S256"]
        assert meta["authorization_response_iss_parameter_supported"] is True
        assert {"authorization_code", "refresh_token"} <= set(meta["grant_types_supported"])
        assert {"mcp:tools", "mcp:admin"} <= set(meta["scopes_supported"])
        assert "none" in meta["token_endpoint_auth_methods_supported"]

        # Dynamic client registration (RFC 7591): a public native client, loopback redirect URI.
        with trio.fail_after(STEP):
            registered = await http.post(
                meta["registration_endpoint"],
                json={
                    "client_name": "e2e",
                    "application_type": "native",
                    "redirect_uris": [REDIRECT_URI],
                    "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"],
                    "token_endpoint_auth_method": "none",
                },
            )
        assert registered.status_code == 201, registered.text
        client_id = registered.json()["client_id"]
        assert "client_secret" not in registered.json()

        def authorization_url(**params: str) -> str:
            return meta["authorization_endpoint"] + "?" + urlencode(params)

        base = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT_URI,
            "resource": RESOURCE,
        }

        # Without PKCE the request is refused (back at the redirect URI, with an error).
        with trio.fail_after(STEP):
            refused = await browser.authorize(authorization_url(**base, scope="mcp:tools", state="s0"))
        answer = parse_qs(urlsplit(refused).query)
        assert answer["error"] == ["invalid_request"], answer
        assert answer["iss"] == [server.issuer]

        # The code flow, as a user at a browser: login form, consent form, redirect with the code.
        verifier, challenge = pkce_pair()
        state = secrets.token_urlsafe(16)
        url = authorization_url(
            **base, scope="mcp:tools", state=state, code_challenge=challenge, code_challenge_method="S256"
        )
        with trio.fail_after(STEP):
            redirected = await browser.authorize(url)
        assert redirected.startswith(REDIRECT_URI + "?"), redirected
        answer = parse_qs(urlsplit(redirected).query)
        assert answer["state"] == [state]
        assert answer["iss"] == [server.issuer]  # RFC 9207
        [code] = answer["code"]
        assert len(browser.pages) == 2, browser.pages  # the login and the consent page

        token_request = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT_URI,
            "client_id": client_id,
            "resource": RESOURCE,
        }
        with trio.fail_after(STEP):
            wrong = await http.post(meta["token_endpoint"], data={**token_request, "code_verifier": "x" * 43})
            assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant", wrong.text
            # a failed redemption does not burn the code: the right verifier still gets tokens
            tokens = await http.post(
                meta["token_endpoint"], data={**token_request, "code_verifier": verifier}
            )
        assert tokens.status_code == 200, tokens.text
        issued = tokens.json()
        assert issued["token_type"] == "Bearer"
        assert issued["scope"] == "mcp:tools"
        assert issued["refresh_token"]
        with trio.fail_after(STEP):
            claims = await verify_access_token(http, meta, issued["access_token"])
        assert claims["iss"] == server.issuer
        assert claims["aud"] == RESOURCE
        assert claims["sub"] == "alice"
        assert claims["client_id"] == client_id
        assert claims["scope"] == "mcp:tools"
        assert claims["exp"] - claims["iat"] == 3600

        # Refresh: a new access token for the same resource; the refresh token rotates.
        with trio.fail_after(STEP):
            refreshed = await http.post(
                meta["token_endpoint"],
                data={
                    "grant_type": "refresh_token",
                    "refresh_token": issued["refresh_token"],
                    "client_id": client_id,
                    "resource": RESOURCE,
                },
            )
        assert refreshed.status_code == 200, refreshed.text
        renewed = refreshed.json()
        assert renewed["access_token"] != issued["access_token"]
        assert renewed["refresh_token"] != issued["refresh_token"]
        with trio.fail_after(STEP):
            new_claims = await verify_access_token(http, meta, renewed["access_token"])
            assert new_claims["aud"] == RESOURCE and new_claims["sub"] == "alice", new_claims
            reused = await http.post(
                meta["token_endpoint"],
                data={
                    "grant_type": "refresh_token",
                    "refresh_token": issued["refresh_token"],
                    "client_id": client_id,
                },
            )
        assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant", reused.text

        # A second authorization in the same browser: the login session is there, only consent is asked
        # for the wider scope.
        verifier, challenge = pkce_pair()
        url = authorization_url(
            **base,
            scope="mcp:tools mcp:admin",
            state="s2",
            code_challenge=challenge,
            code_challenge_method="S256",
        )
        with trio.fail_after(STEP):
            redirected = await browser.authorize(url)
            [code] = parse_qs(urlsplit(redirected).query)["code"]
            wider = await http.post(
                meta["token_endpoint"], data={**token_request, "code": code, "code_verifier": verifier}
            )
        assert wider.status_code == 200, wider.text
        assert set(wider.json()["scope"].split()) == {"mcp:tools", "mcp:admin"}
        assert len(browser.pages) == 3, browser.pages  # one more page: the consent

        with trio.fail_after(STEP):
            events = await server.events()
    grants = [(e["event"], e.get("grant_type")) for e in events if e["event"].startswith("grant.")]
    assert grants == [
        ("grant.error", None),  # the wrong verifier
        ("grant.success", "authorization_code"),
        ("grant.success", "refresh_token"),
        ("grant.error", None),  # the reused refresh token
        ("grant.success", "authorization_code"),
    ], events
    prompts = [e["prompt"] for e in events if e["event"] == "interaction.started"]
    assert prompts == ["login", "consent", "consent"], events


@pytest.mark.deadline(60)
async def test_a_token_for_another_resource_is_refused(
    authorization_server: AuthorizationServer, browser: Browser
) -> None:
    """Two tokens of the same user from the same authorization server: the one for this server's URL
    is accepted, the one for another resource (RFC 8707 audience) gets 401 ``invalid_token``."""
    async with serve_protected(authorization_server.issuer) as protected:
        with trio.fail_after(STEP):
            ours = await obtain_tokens(
                authorization_server, browser, resource=protected.url, scope="mcp:tools"
            )
            other_url = protected.url.replace("/mcp", "/other")
            theirs = await obtain_tokens(authorization_server, browser, resource=other_url, scope="mcp:tools")
        async with httpx.AsyncClient(timeout=STEP) as http:

            async def initialize(token: str) -> httpx.Response:
                headers = {**POST_HEADERS, "authorization": f"Bearer {token}"}
                with trio.fail_after(STEP):
                    return await http.post(protected.url, json=INIT, headers=headers)

            accepted = await initialize(ours["access_token"])
            assert accepted.status_code == 200, accepted.text
            refused = await initialize(theirs["access_token"])
            assert refused.status_code == 401, refused.text
            challenge = refused.headers["www-authenticate"]
            assert challenge.startswith("Bearer "), challenge
            assert 'error="invalid_token"' in challenge, challenge
            assert f'resource_metadata="{protected.metadata_url}"' in challenge, challenge
            missing = await http.post(protected.url, json=INIT, headers=POST_HEADERS)
            assert missing.status_code == 401, missing.text
            with trio.fail_after(STEP):
                metadata = (await http.get(protected.metadata_url)).json()
    assert metadata["resource"] == protected.url
    assert metadata["authorization_servers"] == [authorization_server.issuer]
    assert [p.subject for p in protected.principals] == []  # no tool ran


# -- mcp_trio's OAuth client against it --------------------------------------------------------------


def grants(events: list[dict[str, Any]], grant_type: str) -> int:
    return sum(1 for e in events if e["event"] == "grant.success" and e.get("grant_type") == grant_type)


def authorizations(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The valid authorization requests (each one a trip of the user to the authorization server)."""
    return [e for e in events if e["event"] == "authorization.accepted"]


def text_of(result: mt.CallToolResult) -> str:
    assert not result.is_error, result
    [item] = result.content
    assert isinstance(item, mt.TextContent), item
    return item.text


class NoUser:
    """A redirect handler for a client that must not need the user: any authorization fails the test."""

    redirect_uri = "http://127.0.0.1:33418/callback"

    async def authorize(self, authorization_url: str) -> str:
        raise AssertionError(f"an authorization was started: {authorization_url}")


@pytest.mark.deadline(60)
@pytest.mark.parametrize("mode", ["legacy", "modern"])
async def test_a_tool_call_with_a_token_from_the_authorization_server(
    authorization_server: AuthorizationServer, browser: Browser, mode: Literal["legacy", "modern"]
) -> None:
    """A 2025 session (initialize, the GET stream, DELETE) and a 2026-07-28 stateless call: the client
    meets 401, discovers the authorization server, registers, sends the user through the login, gets a
    token for this server and calls the tool with it."""
    server = authorization_server
    user = BrowserRedirect(browser)
    oauth = OAuth(redirect=user, client_name="e2e", store=MemoryTokenStore())
    async with serve_protected(server.issuer) as protected:
        with trio.fail_after(STEP * 2):
            async with open_client_session(protected.url, mode=mode, auth=oauth) as session:
                assert session.modern == (mode == "modern")
                first = text_of(await session.call_tool("whoami", {}))
                second = text_of(await session.call_tool("whoami", {}))
    assert first == second == "alice mcp:tools", (first, second)
    assert len(user.authorizations) == 1, user.authorizations
    [request] = [parse_qs(urlsplit(url).query) for url in user.authorizations]
    assert request["resource"] == [protected.url]  # RFC 8707
    assert request["code_challenge_method"] == ["S256"]
    assert "mcp:tools" in request["scope"][0].split()
    with trio.fail_after(STEP):
        events = await server.events()
    registered = [e for e in events if e["event"] == "registration_create.success"]
    assert len(registered) == 1 and registered[0]["application_type"] == "native", events
    assert grants(events, "authorization_code") == 1, events
    assert grants(events, "refresh_token") == 0, events
    assert [e["event"] for e in events if e["event"].endswith(".error")] == [], events
    # every request carried the one token: one subject, one client, the audience of this server
    assert {(p.subject, p.client_id, p.audience) for p in protected.principals} == {
        ("alice", registered[0]["client_id"], (protected.url,))
    }


@pytest.mark.deadline(60)
async def test_step_up_to_a_wider_scope(authorization_server: AuthorizationServer, browser: Browser) -> None:
    """A token with ``mcp:tools`` only: the tool that needs ``mcp:admin`` gets 403 insufficient_scope,
    the client asks the user again for both scopes (consent only: the login session is there) and
    the call goes through; the earlier tool keeps working with the new token."""
    server = authorization_server
    user = BrowserRedirect(browser)
    oauth = OAuth(redirect=user, client_name="e2e", store=MemoryTokenStore())
    async with serve_protected(server.issuer) as protected:
        with trio.fail_after(STEP * 3):
            async with open_client_session(protected.url, mode="legacy", auth=oauth) as session:
                assert text_of(await session.call_tool("whoami", {})) == "alice mcp:tools"
                assert len(user.authorizations) == 1
                done = text_of(await session.call_tool("admin_task", {}))
                assert done == "admin work done for alice"
                assert text_of(await session.call_tool("whoami", {})) == "alice mcp:admin mcp:tools"
    assert len(user.authorizations) == 2, user.authorizations
    scopes = [set(parse_qs(urlsplit(url).query)["scope"][0].split()) for url in user.authorizations]
    assert "mcp:admin" not in scopes[0] and {"mcp:tools", "mcp:admin"} <= scopes[1], scopes
    assert len(browser.pages) == 3, browser.pages  # login + consent, then consent alone
    with trio.fail_after(STEP):
        events = await server.events()
    assert len([e for e in events if e["event"] == "registration_create.success"]) == 1, events
    assert grants(events, "authorization_code") == 2, events
    assert len(authorizations(events)) == 2, events


@pytest.mark.deadline(60)
async def test_refresh_after_expiry(oauth_as_installed: None, browser: Browser) -> None:
    """Access tokens that live 2 s (the server allows no leeway): after they expire the client
    refreshes (a refresh_token grant) instead of sending the user again, and the server sees a new,
    valid token from the same client for the same user."""
    async with run_authorization_server(access_token_ttl=2) as server:
        user = BrowserRedirect(browser)
        oauth = OAuth(redirect=user, client_name="e2e", store=MemoryTokenStore())
        async with serve_protected(server.issuer) as protected:
            with trio.fail_after(STEP * 3):
                async with open_client_session(protected.url, mode="modern", auth=oauth) as session:
                    assert text_of(await session.call_tool("whoami", {})) == "alice mcp:tools"
                    first = protected.principals[-1]
                    refreshes = grants(await server.events(), "refresh_token")
                    assert first.expires_at is not None
                    await trio.sleep(max(0.0, first.expires_at - time.time()) + 1.0)  # past its expiry
                    assert text_of(await session.call_tool("whoami", {})) == "alice mcp:tools"
                    last = protected.principals[-1]
            with trio.fail_after(STEP):
                events = await server.events()
    assert last.token != first.token
    assert (last.subject, last.client_id) == (first.subject, first.client_id)
    assert last.expires_at is not None and last.expires_at > first.expires_at
    assert grants(events, "refresh_token") > refreshes, events
    assert grants(events, "authorization_code") == 1, events
    assert len(user.authorizations) == 1 and len(authorizations(events)) == 1, events


@pytest.mark.deadline(60)
async def test_a_restarted_client_uses_the_stored_token(
    authorization_server: AuthorizationServer, browser: Browser, tmp_path: Path
) -> None:
    """A new OAuth on the same FileTokenStore (a restarted program) calls with the stored token: no
    registration, no authorization, no token request.  When the server refuses the stored access
    token, the stored refresh token gets a new one, still without the user."""
    server = authorization_server
    path = tmp_path / "tokens.json"
    first_user = BrowserRedirect(browser)
    async with serve_protected(server.issuer) as protected:
        with trio.fail_after(STEP * 2):
            oauth = OAuth(redirect=first_user, client_name="e2e", store=FileTokenStore(path))
            async with open_client_session(protected.url, mode="modern", auth=oauth) as session:
                assert text_of(await session.call_tool("whoami", {})) == "alice mcp:tools"
            before = await server.events()
        assert len(first_user.authorizations) == 1
        assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)  # the owner's alone
        issued = protected.principals[-1].token

        with trio.fail_after(STEP):
            again = OAuth(redirect=NoUser(), client_name="e2e", store=FileTokenStore(path))
            async with open_client_session(protected.url, mode="modern", auth=again) as session:
                assert text_of(await session.call_tool("whoami", {})) == "alice mcp:tools"
            assert await server.events() == before  # the authorization server heard nothing
        assert protected.principals[-1].token == issued

        # The stored access token is refused (as after a key rotation): the refresh token replaces it.
        store = FileTokenStore(path)
        stored = await store.load_tokens(server.issuer, protected.url)
        assert stored is not None and stored.access_token == issued
        forged = replace(stored, access_token="forged." + issued)
        await store.save_tokens(server.issuer, protected.url, forged)
        with trio.fail_after(STEP):
            third = OAuth(redirect=NoUser(), client_name="e2e", store=FileTokenStore(path))
            async with open_client_session(protected.url, mode="modern", auth=third) as session:
                assert text_of(await session.call_tool("whoami", {})) == "alice mcp:tools"
            after = await server.events()
        assert protected.principals[-1].token not in (issued, forged.access_token)
    new = after[len(before) :]
    assert [(e["event"], e.get("grant_type")) for e in new] == [("grant.success", "refresh_token")], new
    refreshed = await FileTokenStore(path).load_tokens(server.issuer, protected.url)
    assert refreshed is not None and refreshed.access_token == protected.principals[-1].token


# -- IntrospectionVerifier against the authorization server ---------------------------------------------


@pytest.mark.deadline(90)
async def test_introspection_verifier_against_the_authorization_server(
    oauth_as_installed: None, browser: Browser
) -> None:
    """Opaque access tokens (no JWT: only the authorization server can say what they are), checked by
    ``IntrospectionVerifier`` at its RFC 7662 endpoint, with the resource server's own credentials (a
    confidential client, HTTP Basic): mcp_trio's client gets a token and calls the tool, whose principal
    has the subject, client, audience and scopes of the introspection answer; an unknown token, and the
    same token once revoked (RFC 7009; no cache, so the revocation is seen at once), get 401
    ``invalid_token``."""
    async with (
        run_authorization_server(access_token_format="opaque") as server,
        httpx.AsyncClient(timeout=STEP) as http,
    ):
        with trio.fail_after(STEP):
            meta = await metadata(http, server)
            registered = await http.post(
                meta["registration_endpoint"],
                json={
                    "client_name": "the MCP server (a resource server)",
                    "redirect_uris": ["http://127.0.0.1:9/unused"],
                    "token_endpoint_auth_method": "client_secret_basic",
                },
            )
        assert registered.status_code == 201, registered.text
        resource_server = registered.json()
        verifiers: list[IntrospectionVerifier] = []

        def introspection(resource: str) -> IntrospectionVerifier:
            verifier = IntrospectionVerifier(
                meta["introspection_endpoint"],
                client_id=resource_server["client_id"],
                client_secret=resource_server["client_secret"],
                audience=resource,
                issuer=server.issuer,
                cache_size=0,
            )
            verifiers.append(verifier)
            return verifier

        async with serve_protected(server.issuer, verifier=introspection) as protected:
            oauth = OAuth(redirect=BrowserRedirect(browser), client_name="e2e", store=MemoryTokenStore())
            with trio.fail_after(STEP * 2):
                async with open_client_session(protected.url, mode="modern", auth=oauth) as session:
                    assert text_of(await session.call_tool("whoami", {})) == "alice mcp:tools"
            [principal] = protected.principals
            assert principal.token.count(".") != 2, "a JWT: the verifier need not have asked anyone"
            assert principal.subject == "alice" and principal.scopes == frozenset({"mcp:tools"})
            assert principal.audience == (protected.url,)
            [verifier] = verifiers
            asked = verifier.requests
            assert asked >= 1  # the introspection endpoint answered for the token

            async def initialize(token: str) -> httpx.Response:
                headers = {**POST_HEADERS, "authorization": f"Bearer {token}"}
                with trio.fail_after(STEP):
                    return await http.post(protected.url, json=INIT, headers=headers)

            def refused_as_invalid(response: httpx.Response) -> None:
                assert response.status_code == 401, response.text
                assert 'error="invalid_token"' in response.headers["www-authenticate"], response.headers

            accepted = await initialize(principal.token)
            assert accepted.status_code == 200, accepted.text
            refused_as_invalid(await initialize(secrets.token_urlsafe(32)))  # a token nobody issued
            with trio.fail_after(STEP):
                revoked = await http.post(
                    meta["revocation_endpoint"],
                    data={
                        "token": principal.token,
                        "token_type_hint": "access_token",
                        "client_id": principal.client_id,  # the public client it was issued to
                    },
                )
            assert revoked.status_code == 200, revoked.text
            refused_as_invalid(await initialize(principal.token))
            assert verifier.requests == asked + 3  # each of the three asked the authorization server
        with trio.fail_after(STEP):
            events = await server.events()
    assert [e["event"] for e in events if e["event"].endswith(".error")] == [], events
