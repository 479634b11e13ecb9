"""mcp_trio.auth.OAuth against a stub authorization server and protected resource (tests/client/
oauth_stub.py) on real hypercorn servers: what the conformance suite does not reach.

One authorization for many concurrent 401s (the lock is never held across the flow's yield, and a
cancelled authorization leaves nothing held), refresh before expiry and on a revoked token, a refused
refresh that falls back to a new authorization, tokens and registrations reused from a store across
OAuth objects, step-up on 403 with the union of scopes and its bound, the refusals (no PKCE S256, a
resource metadata document for another resource, a wrong state or iss, the user's refusal, broken
answers), the client_credentials grant, and MCP sessions of both eras through open_client_session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from mcp_trio import MCPApp, ServerConfig, open_client_session
from mcp_trio.auth import (
    ClientCredentials,
    FileTokenStore,
    IDJAGExchange,
    JWTBearer,
    MemoryTokenStore,
    OAuth,
    OAuthError,
)
from mcp_trio.demo import build_demo_server

from .conftest import IGNORE_HTTPX_ASYNCGEN_WARNINGS
from .oauth_stub import BrowserRedirect, oauth_world, query_of, s256

pytestmark = IGNORE_HTTPX_ASYNCGEN_WARNINGS


async def get(auth: httpx.Auth, url: str, path: str = "/mcp") -> httpx.Response:
    async with httpx.AsyncClient(timeout=10.0, auth=auth) as client:
        return await client.post(f"{url}{path}", content=b"{}")


# -- the basic flow -----------------------------------------------------------------------------


async def test_first_request_authorizes_and_retries_with_the_token() -> None:
    async with oauth_world(scopes_supported=["mcp:read"]) as (authz, rs):
        browser = BrowserRedirect()
        with trio.fail_after(10):
            response = await get(OAuth(redirect=browser), rs.url)
        assert response.status_code == 200
        assert browser.calls == 1 and authz.grants == {"authorization_code": 1}
        [request] = authz.authorization_requests
        assert request["resource"] == rs.url and request["code_challenge_method"] == "S256"
        assert request["scope"] == "mcp:read offline_access"  # PRM scopes_supported, + offline_access
        assert authz.token_requests[0]["resource"] == rs.url
        [registration] = authz.registrations
        assert registration["application_type"] == "native"
        assert registration["grant_types"] == ["authorization_code", "refresh_token"]
        assert registration["token_endpoint_auth_method"] == "none"
        assert registration["redirect_uris"] == [browser.redirect_uri]
        assert rs.seen_tokens[0] is None and rs.seen_tokens[1] is not None


async def test_send_resource_false_and_explicit_scopes() -> None:
    async with oauth_world(scopes_supported=["mcp:read"]) as (authz, rs):
        authz.metadata_override["scopes_supported"] = ["mcp:read"]
        auth = OAuth(redirect=BrowserRedirect(), scopes=["mcp:write"], send_resource=False)
        with trio.fail_after(10):
            # the stub binds a token to no resource when none was asked for: still valid here
            assert (await get(auth, rs.url)).status_code == 200
        [request] = authz.authorization_requests
        assert "resource" not in request and "resource" not in authz.token_requests[0]
        assert request["scope"] == "mcp:write"


async def test_concurrent_401s_share_one_authorization() -> None:
    async with oauth_world() as (authz, rs):
        browser = BrowserRedirect(delay=0.3)  # a slow user: every request meets the renewal in progress
        auth = OAuth(redirect=browser)
        statuses: list[int] = []
        async with httpx.AsyncClient(timeout=10.0, auth=auth) as client:

            async def one() -> None:
                statuses.append((await client.post(f"{rs.url}/mcp", content=b"{}")).status_code)

            with trio.fail_after(15):
                async with trio.open_nursery() as nursery:
                    for _ in range(8):
                        nursery.start_soon(one)
        assert statuses == [200] * 8
        assert browser.calls == 1
        assert authz.grants == {"authorization_code": 1} and authz.hits["/register"] == 1
        assert len({t for t in rs.seen_tokens if t is not None}) == 1
        assert not auth._lock.locked()


async def test_a_cancelled_authorization_leaves_nothing_held() -> None:
    """The python-sdk deadlock (#3382, #2847): a request abandoned while its flow renews must not leave
    the lock held; the next request authorizes normally."""
    async with oauth_world() as (_, rs):
        browser = BrowserRedirect(delay=30)
        auth = OAuth(redirect=browser)
        async with httpx.AsyncClient(timeout=10.0, auth=auth) as client:
            with trio.move_on_after(0.5) as scope:
                await client.post(f"{rs.url}/mcp", content=b"{}")
            assert scope.cancelled_caught and browser.calls == 1
            assert not auth._lock.locked()
            browser.delay = 0
            with trio.fail_after(10):
                assert (await client.post(f"{rs.url}/mcp", content=b"{}")).status_code == 200
        assert browser.calls == 2


async def test_a_failed_authorization_is_shared_by_the_requests_that_waited() -> None:
    async with oauth_world() as (authz, rs):
        authz.deny = True
        browser = BrowserRedirect(delay=0.3)
        errors: list[str] = []
        async with httpx.AsyncClient(timeout=10.0, auth=OAuth(redirect=browser)) as client:

            async def one() -> None:
                with pytest.raises(OAuthError) as caught:
                    await client.post(f"{rs.url}/mcp", content=b"{}")
                errors.append(str(caught.value))

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    for _ in range(4):
                        nursery.start_soon(one)
        assert browser.calls == 1  # the user is not asked four times
        assert len(errors) == 4 and all("access_denied" in e for e in errors)


# -- refresh ------------------------------------------------------------------------------------


async def test_refresh_before_expiry_without_a_new_authorization() -> None:
    async with oauth_world() as (authz, rs):
        authz.expires_in = 2  # due for a refresh in the last quarter of its lifetime (0.5 s)
        browser = BrowserRedirect()
        auth = OAuth(redirect=browser)
        with trio.fail_after(10):
            assert (await get(auth, rs.url)).status_code == 200
            await trio.sleep(1.6)  # due, not yet expired
            assert (await get(auth, rs.url)).status_code == 200
        assert browser.calls == 1
        assert authz.grants == {"authorization_code": 1, "refresh_token": 1}
        assert rs.hits["/mcp"] == 3  # 401, 200, then 200 at once with the refreshed token


async def test_refresh_on_401_invalid_token() -> None:
    async with oauth_world() as (authz, rs):
        browser = BrowserRedirect()
        auth = OAuth(redirect=browser)
        with trio.fail_after(10):
            assert (await get(auth, rs.url)).status_code == 200
            rs.revoked.add(rs.seen_tokens[-1] or "")
            assert (await get(auth, rs.url)).status_code == 200
        assert browser.calls == 1 and authz.grants["refresh_token"] == 1
        assert rs.seen_tokens[-1] not in rs.revoked


async def test_refused_refresh_falls_back_to_a_new_authorization() -> None:
    async with oauth_world() as (authz, rs):
        store = MemoryTokenStore()
        browser = BrowserRedirect()
        auth = OAuth(redirect=browser, store=store)
        with trio.fail_after(10):
            assert (await get(auth, rs.url)).status_code == 200
            authz.refresh_fails = True
            rs.revoked.add(rs.seen_tokens[-1] or "")
            assert (await get(auth, rs.url)).status_code == 200
        assert browser.calls == 2
        assert authz.grants == {"authorization_code": 2, "refresh_token": 1}
        stored = await store.load_tokens(authz.url, rs.url)
        assert stored is not None and stored.access_token == rs.seen_tokens[-1]


async def test_a_token_the_server_refuses_at_once_is_an_error_not_a_loop() -> None:
    async with oauth_world() as (_, rs):
        rs.refuse_all = True  # e.g. a server that wants another audience
        browser = BrowserRedirect()
        with (
            trio.fail_after(10),
            pytest.raises(OAuthError, match=r"refused \(HTTP 401 \(invalid_token\)\) the token"),
        ):
            await get(OAuth(redirect=browser), rs.url)
        assert browser.calls == 1


# -- stores -------------------------------------------------------------------------------------


async def test_a_file_store_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    async with oauth_world() as (authz, rs):
        browser = BrowserRedirect()
        with trio.fail_after(10):
            assert (await get(OAuth(redirect=browser, store=FileTokenStore(path)), rs.url)).status_code == 200
        assert path.stat().st_mode & 0o777 == 0o600
        # "restart": a new OAuth on a new store object over the same file, and no way to authorize
        with trio.fail_after(10):
            assert (await get(OAuth(redirect=None, store=FileTokenStore(path)), rs.url)).status_code == 200
        assert browser.calls == 1 and authz.grants == {"authorization_code": 1}
        assert rs.seen_tokens[-1] == rs.seen_tokens[1]


async def test_a_stored_registration_is_reused_and_one_for_another_redirect_uri_is_not() -> None:
    async with oauth_world() as (authz, rs):
        store = MemoryTokenStore()
        with trio.fail_after(10):
            await get(OAuth(redirect=BrowserRedirect(), store=store), rs.url)
            await store.delete_tokens(authz.url, rs.url)
            await get(OAuth(redirect=BrowserRedirect(), store=store), rs.url)
            assert authz.hits["/register"] == 1
            await store.delete_tokens(authz.url, rs.url)
            other = BrowserRedirect()
            other.redirect_uri = "http://127.0.0.1:10/elsewhere"
            await get(OAuth(redirect=other, store=store), rs.url)
        assert authz.hits["/register"] == 2


async def test_without_a_redirect_handler_an_authorization_is_a_clear_error() -> None:
    async with oauth_world() as (authz, rs):
        with trio.fail_after(10), pytest.raises(OAuthError, match="no redirect handler"):
            await get(OAuth(), rs.url)
        assert authz.hits["/authorize"] == 0


# -- scopes -------------------------------------------------------------------------------------


async def test_step_up_on_403_asks_for_the_union_of_scopes() -> None:
    async with oauth_world(challenge_scope="mcp:read") as (_, rs):
        rs.required_scopes["tools/call"] = ("mcp:write",)
        browser = BrowserRedirect()
        auth = OAuth(redirect=browser)
        async with httpx.AsyncClient(timeout=10.0, auth=auth) as client:
            with trio.fail_after(10):
                assert (await client.post(f"{rs.url}/mcp", json={"method": "tools/list"})).status_code == 200
                assert (await client.post(f"{rs.url}/mcp", json={"method": "tools/call"})).status_code == 200
        scopes = [query_of(url)["scope"] for url in browser.urls]
        assert scopes == ["mcp:read offline_access", "mcp:read offline_access mcp:write"]


async def test_step_up_is_bounded_by_max_authorizations() -> None:
    async with oauth_world(challenge_scope="mcp:read") as (authz, rs):
        rs.required_scopes["tools/call"] = ("mcp:admin",)
        original = authz.issue

        def without_admin(client_id: str, scopes: tuple[str, ...], resource: str | None) -> dict[str, Any]:
            return original(client_id, tuple(s for s in scopes if s != "mcp:admin"), resource)

        authz.issue = without_admin  # type: ignore[method-assign]  # this stub never grants mcp:admin
        browser = BrowserRedirect()
        auth = OAuth(redirect=browser, max_authorizations=2)
        async with httpx.AsyncClient(timeout=10.0, auth=auth) as client:
            with (
                trio.fail_after(10),
                pytest.raises(OAuthError, match=r"403 .* after 2 authorization attempts"),
            ):
                await client.post(f"{rs.url}/mcp", json={"method": "tools/call"})
        assert browser.calls == 2
        assert "mcp:admin" in query_of(browser.urls[1])["scope"].split()


# -- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("methods", [None, ["plain"]])
async def test_no_pkce_s256_no_authorization(methods: list[str] | None) -> None:
    async with oauth_world() as (authz, rs):
        authz.metadata_override["code_challenge_methods_supported"] = methods
        with trio.fail_after(10), pytest.raises(OAuthError, match="does not advertise PKCE with S256"):
            await get(OAuth(redirect=BrowserRedirect()), rs.url)
        assert authz.hits["/authorize"] == 0 and authz.hits["/register"] == 0


async def test_metadata_for_another_resource_is_refused() -> None:
    async with oauth_world() as (authz, rs):
        rs.resource_override = "https://elsewhere.example/mcp"
        with trio.fail_after(10), pytest.raises(OAuthError, match=r"not for .*refusing"):
            await get(OAuth(redirect=BrowserRedirect()), rs.url)
        assert sum(authz.hits.values()) == 0


async def test_metadata_naming_another_issuer_is_refused() -> None:
    async with oauth_world() as (authz, rs):
        authz.metadata_override["issuer"] = "https://attacker.example"
        with trio.fail_after(10), pytest.raises(OAuthError, match="names the issuer 'https://attacker"):
            await get(OAuth(redirect=BrowserRedirect()), rs.url)
        assert authz.hits["/register"] == 0 and authz.hits["/authorize"] == 0


@pytest.mark.parametrize(
    ("iss", "supported", "match"),
    [
        (None, True, "advertises RFC 9207 iss, but its response has none"),
        ("https://evil.example", True, "comes from issuer 'https://evil.example'"),
        ("https://evil.example", None, "comes from issuer 'https://evil.example'"),
        ("{url}/", True, "comes from issuer"),  # only a trailing slash apart: still not the issuer
    ],
)
async def test_iss_checks(iss: str | None, supported: bool | None, match: str) -> None:
    async with oauth_world() as (authz, rs):
        authz.iss_in_redirect = iss.format(url=authz.url) if iss else None
        authz.metadata_override["authorization_response_iss_parameter_supported"] = supported
        with trio.fail_after(10), pytest.raises(OAuthError, match=match):
            await get(OAuth(redirect=BrowserRedirect()), rs.url)
        assert authz.grants == {}  # the code never reached the token endpoint


async def test_no_iss_when_not_advertised_is_fine() -> None:
    async with oauth_world() as (authz, rs):
        authz.iss_in_redirect = None
        authz.metadata_override["authorization_response_iss_parameter_supported"] = None
        with trio.fail_after(10):
            assert (await get(OAuth(redirect=BrowserRedirect()), rs.url)).status_code == 200


async def test_a_wrong_state_is_refused() -> None:
    async with oauth_world() as (authz, rs):
        browser = BrowserRedirect(rewrite=lambda url: url.replace("state=", "state=x"))
        with trio.fail_after(10), pytest.raises(OAuthError, match="state does not match"):
            await get(OAuth(redirect=browser), rs.url)
        assert authz.grants == {}


async def test_the_users_refusal_is_an_oauth_error() -> None:
    async with oauth_world() as (authz, rs):
        authz.deny = True
        with trio.fail_after(10), pytest.raises(OAuthError, match="access_denied") as caught:
            await get(OAuth(redirect=BrowserRedirect()), rs.url)
        assert caught.value.error == "access_denied"


@pytest.mark.parametrize(
    ("part", "raw", "match"),
    [
        ("metadata", b"not json", "no authorization server metadata"),
        ("metadata", b"[1, 2]", "no authorization server metadata"),
        ("metadata", b"{" + b" " * (2 * 1024 * 1024) + b"}", "no authorization server metadata"),
        ("token", b"<html>oops</html>", "token request .* failed"),
        ("token", b'{"access_token": 5, "token_type": "Bearer"}', "has no access_token"),
        ("token", b'{"access_token": "a", "token_type": "DPoP"}', "only Bearer is supported"),
    ],
)
async def test_broken_answers_are_clear_errors(part: str, raw: bytes, match: str) -> None:
    async with oauth_world() as (authz, rs):
        if part == "metadata":
            authz.metadata_raw = raw
        else:
            authz.token_raw = raw
        with trio.fail_after(10), pytest.raises(OAuthError, match=match):
            await get(OAuth(redirect=BrowserRedirect()), rs.url)


async def test_no_metadata_for_the_named_authorization_server() -> None:
    async with oauth_world() as (authz, rs):
        authz.url = f"{authz.url}/tenant1"  # named by the resource metadata; nothing there
        with trio.fail_after(10), pytest.raises(OAuthError, match="no authorization server metadata for"):
            await get(OAuth(redirect=BrowserRedirect()), rs.url)
        assert authz.hits["/tenant1/.well-known/openid-configuration"] == 1  # the last place tried


async def test_without_resource_metadata_the_2025_03_26_defaults_are_tried() -> None:
    """No protected resource metadata anywhere: the server's origin is the authorization server, with
    the default endpoints when it has no metadata either (here it has none of them: a clear error)."""
    async with oauth_world(serve_metadata=False) as (_, rs):
        with (
            trio.fail_after(10),
            pytest.raises(OAuthError, match=r"registration at http://127\.0\.0\.1:\d+/register"),
        ):
            await get(OAuth(redirect=BrowserRedirect()), rs.url)
        assert rs.hits["/.well-known/oauth-authorization-server"] == 1
        assert rs.hits["/register"] == 1


async def test_an_unreachable_authorization_server_is_a_clear_error() -> None:
    async with oauth_world() as (authz, rs):
        authz.url = "http://127.0.0.1:9"  # discard port: nothing listens
        with trio.fail_after(10), pytest.raises(OAuthError, match=r"GET http://127\.0\.0\.1:9/.* failed"):
            await get(OAuth(redirect=BrowserRedirect()), rs.url)


async def test_a_pre_registered_client_is_not_shown_to_another_server() -> None:
    async with oauth_world() as (authz, rs):
        authz.clients["static"] = {
            "client_id": "static",
            "client_secret": "s3cret",
            "redirect_uris": [BrowserRedirect.redirect_uri],
        }
        auth = OAuth(
            redirect=BrowserRedirect(),
            client_id="static",
            client_secret="s3cret",
            issuer="https://other.example",
        )
        with trio.fail_after(10), pytest.raises(OAuthError, match=r"registered with https://other\.example"):
            await get(auth, rs.url)
        assert authz.hits["/authorize"] == 0
        auth = OAuth(redirect=BrowserRedirect(), client_id="static", client_secret="s3cret")
        with trio.fail_after(10):
            assert (await get(auth, rs.url)).status_code == 200
        assert authz.hits["/register"] == 0


def test_a_sync_client_is_refused() -> None:
    with httpx.Client(auth=OAuth()) as client, pytest.raises(RuntimeError, match=r"httpx\.AsyncClient"):
        client.get("http://127.0.0.1:9/")


def test_bad_options_are_refused() -> None:
    with pytest.raises(TypeError, match="not a string"):
        OAuth(scopes="mcp:read")
    with pytest.raises(ValueError, match="max_authorizations"):
        OAuth(max_authorizations=0)
    with pytest.raises(ValueError, match="needs client_id"):
        OAuth(client_secret="x")
    with pytest.raises(ValueError, match="https URL"):
        OAuth(client_metadata_url="http://example.com/client.json")
    with pytest.raises(ValueError, match="client_secret= or private_key="):
        ClientCredentials(client_id="x")


# -- client_credentials -------------------------------------------------------------------------


async def test_client_credentials_with_a_secret() -> None:
    async with oauth_world(scopes_supported=["mcp:read"]) as (authz, rs):
        authz.client_credentials["robot"] = "p@ss:word"  # form-encoded in the Basic header
        with trio.fail_after(10):
            response = await get(ClientCredentials(client_id="robot", client_secret="p@ss:word"), rs.url)
        assert response.status_code == 200
        [request] = authz.token_requests
        assert request["grant_type"] == "client_credentials" and request["scope"] == "mcp:read"
        assert request["resource"] == rs.url


async def test_client_credentials_with_private_key_jwt() -> None:
    from joserfc.jwk import ECKey

    key = ECKey.generate_key("P-256")
    async with oauth_world() as (authz, rs):
        authz.jwt_keys["robot"] = key
        pem = key.as_pem(private=True).decode()
        with trio.fail_after(10):
            response = await get(ClientCredentials(client_id="robot", private_key=pem), rs.url)
        assert response.status_code == 200
        assert authz.grants == {"client_credentials": 1}


async def test_client_credentials_with_an_unreadable_key() -> None:
    async with oauth_world() as (_, rs):
        with trio.fail_after(10), pytest.raises(OAuthError, match="cannot be read"):
            await get(ClientCredentials(client_id="robot", private_key="not a key"), rs.url)


# -- jwt-bearer, token exchange, DPoP -----------------------------------------------------------


async def test_jwt_bearer_with_an_assertion_made_per_token() -> None:
    async with oauth_world() as (authz, rs):
        authz.assertions.add("workload-token")
        calls: list[tuple[str, str]] = []

        async def workload_token(issuer: str, resource: str) -> str:
            calls.append((issuer, resource))
            return "workload-token"

        with trio.fail_after(10):
            assert (await get(JWTBearer(assertion=workload_token, client_id="w"), rs.url)).status_code == 200
        assert calls == [(authz.url, rs.url)]
        [request] = authz.token_requests
        assert request["assertion"] == "workload-token" and request["client_id"] == "w"


async def test_a_refused_jwt_bearer_grant_is_not_retried() -> None:
    async with oauth_world() as (authz, rs):
        with trio.fail_after(10), pytest.raises(OAuthError, match="invalid_grant") as caught:
            await get(JWTBearer(assertion="expired-token"), rs.url)
        assert caught.value.error == "invalid_grant" and caught.value.status == 400
        assert len(authz.token_requests) == 1 and "client_id" not in authz.token_requests[0]


async def test_enterprise_managed_authorization() -> None:
    async with oauth_world() as (authz, rs):
        exchange = IDJAGExchange(f"{authz.url}/token", authz.id_token, client_id="idp-client")
        with trio.fail_after(10):
            assert (await get(JWTBearer(assertion=exchange), rs.url)).status_code == 200
        exchanged, granted = authz.token_requests
        assert exchanged["audience"] == authz.url and exchanged["resource"] == rs.url
        assert exchanged["requested_token_type"] == "urn:ietf:params:oauth:token-type:id-jag"
        assert granted["assertion"].startswith("jag-")


async def test_a_token_exchange_that_issues_no_id_jag_is_an_error() -> None:
    async with oauth_world() as (authz, rs):
        authz.issued_token_type = "urn:ietf:params:oauth:token-type:access_token"
        exchange = IDJAGExchange(f"{authz.url}/token", authz.id_token, client_id="idp-client")
        with trio.fail_after(10), pytest.raises(OAuthError, match="issued no ID-JAG"):
            await get(JWTBearer(assertion=exchange), rs.url)


async def test_dpop_bound_tokens_with_nonces_at_both_servers() -> None:
    async with oauth_world() as (authz, rs):
        authz.metadata_override["dpop_signing_alg_values_supported"] = ["ES256"]
        authz.dpop_nonce, rs.dpop_nonce = "as-nonce", "rs-nonce"
        authz.expires_in = 2  # the second request, in the token's last quarter, refreshes with a proof
        store = MemoryTokenStore()
        auth = OAuth(redirect=BrowserRedirect(), dpop=True, store=store)
        with trio.fail_after(10):
            assert (await get(auth, rs.url)).status_code == 200
            await trio.sleep(1.6)
            assert (await get(auth, rs.url)).status_code == 200
        # at the token endpoint: challenged once for the nonce, then every proof held
        assert authz.dpop_proofs == ["use_dpop_nonce", "", ""]
        assert authz.grants == {"authorization_code": 2, "refresh_token": 1}  # the challenged one counts
        stored = await store.load_tokens(authz.url, rs.url)
        assert stored is not None and stored.token_type == "DPoP"
        # at the MCP server: no token, then the token with a nonce-less proof (challenged), then accepted
        proofs = [h.get("dpop") for h in rs.seen_headers]
        assert proofs[0] is None and all(proofs[1:]) and len(set(proofs[1:])) == len(proofs) - 1
        assert all(h["authorization"].startswith("DPoP ") for h in rs.seen_headers[1:])
        assert rs.hits["/mcp"] == 4  # 401 (no token), 401 use_dpop_nonce, 200; then 200 at once


async def test_a_dpop_token_presented_as_bearer_is_refused_by_the_stub() -> None:
    """The stub's DPoP check can fail: a bound token without its proof is refused (so the test above
    proves the client's proofs)."""
    async with oauth_world() as (authz, rs):
        authz.metadata_override["dpop_signing_alg_values_supported"] = ["ES256"]
        auth = OAuth(redirect=BrowserRedirect(), dpop=True)
        with trio.fail_after(10):
            assert (await get(auth, rs.url)).status_code == 200
            token = rs.seen_tokens[-1]
            async with httpx.AsyncClient(timeout=5.0) as client:
                refused = await client.post(f"{rs.url}/mcp", headers={"authorization": f"DPoP {token}"})
        assert refused.status_code == 401


async def test_dpop_is_used_only_where_the_server_supports_it() -> None:
    async with oauth_world() as (authz, rs):  # the stub advertises no dpop_signing_alg_values_supported
        with trio.fail_after(10):
            assert (await get(OAuth(redirect=BrowserRedirect(), dpop=True), rs.url)).status_code == 200
        assert all("dpop" not in headers for headers in authz.token_request_headers)
        last = rs.seen_headers[-1]
        assert last["authorization"].startswith("Bearer ") and "dpop" not in last


# -- through open_client_session ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_mcp_session_through_oauth(mode: str) -> None:
    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1))
    async with oauth_world(app, challenge_scope="mcp:read") as (_, rs):
        rs.required_scopes["add"] = ("mcp:write",)
        browser = BrowserRedirect()
        with trio.fail_after(20):
            async with open_client_session(f"{rs.url}/mcp", mode=mode, auth=OAuth(redirect=browser)) as s:  # type: ignore[arg-type]
                assert s.modern == (mode == "auto")
                tools = await s.list_tools()
                assert "add" in [t.name for t in tools.tools]
                result = await s.call_tool("add", {"a": 2, "b": 3})
                assert not result.is_error
        assert browser.calls == 2  # the first request, then the step-up for "add"
        # every request carried a token after the first authorization (POSTs, GET stream, DELETE)
        first = rs.seen_tokens.index(None)
        assert None not in rs.seen_tokens[first + 1 :]


async def test_an_mcp_session_with_its_own_http_client_and_auth() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1))
    async with oauth_world(app) as (_, rs):
        own = httpx.BasicAuth("someone", "else")  # replaced per request by auth=
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None), auth=own) as http:
            with trio.fail_after(20):
                async with open_client_session(
                    f"{rs.url}/mcp", http=http, auth=OAuth(redirect=BrowserRedirect())
                ) as s:
                    await s.list_tools()


async def test_a_failed_authorization_at_the_delete_does_not_fail_the_block() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1))
    async with oauth_world(app) as (authz, rs):
        with trio.fail_after(20):
            async with open_client_session(
                f"{rs.url}/mcp", mode="legacy", auth=OAuth(redirect=BrowserRedirect())
            ) as s:
                await s.list_tools()
                rs.refuse_all = authz.deny = authz.refresh_fails = True  # the DELETE cannot authorize
        assert authz.grants["refresh_token"] == 1 and len(authz.authorization_requests) == 2


async def test_open_client_session_refuses_a_non_auth() -> None:
    with pytest.raises(TypeError, match=r"auth= takes an httpx\.Auth"):
        async with open_client_session("http://127.0.0.1:9/mcp", auth="token"):  # type: ignore[arg-type]
            pass


async def test_an_oauth_error_ends_the_session_block_with_it() -> None:
    app = MCPApp(build_demo_server(), ServerConfig(shutdown_grace=1))
    async with oauth_world(app) as (authz, rs):
        authz.deny = True
        with trio.fail_after(20), pytest.raises(OAuthError, match="access_denied"):
            async with open_client_session(f"{rs.url}/mcp", auth=OAuth(redirect=BrowserRedirect())):
                pass


async def test_the_stub_checks_the_pkce_verifier() -> None:
    """The stub refuses a code exchanged with another verifier: so the tests above prove the client's
    PKCE, not the stub's leniency."""
    async with oauth_world() as (authz, _):
        redirect_uri = BrowserRedirect.redirect_uri
        async with httpx.AsyncClient(timeout=10.0) as client:
            registered = (
                await client.post(f"{authz.url}/register", json={"redirect_uris": [redirect_uri]})
            ).json()
            params = {
                "response_type": "code",
                "client_id": registered["client_id"],
                "redirect_uri": redirect_uri,
                "code_challenge": s256("the right verifier"),
                "code_challenge_method": "S256",
                "state": "s",
            }
            location = (await client.get(f"{authz.url}/authorize", params=params)).headers["location"]
            form = {
                "grant_type": "authorization_code",
                "code": query_of(location)["code"],
                "redirect_uri": redirect_uri,
                "code_verifier": "another verifier",
                "client_id": registered["client_id"],
            }
            refused = await client.post(f"{authz.url}/token", data=form)
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
