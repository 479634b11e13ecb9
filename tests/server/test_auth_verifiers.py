"""JWTVerifier and IntrospectionVerifier against a real issuer: a small ASGI app on hypercorn on
127.0.0.1:0 serving RFC 8414 metadata, a JWKS and an RFC 7662 introspection endpoint, counting every
request it gets.  Tokens are minted here with joserfc.

Every bad token is refused with InvalidToken (never accepted, never another exception); a dead or
silent issuer makes verification fail within its timeout with VerifierUnavailable while tokens of
keys already fetched keep verifying; a key rotation is picked up; a flood of unknown keys costs one
fetch.  :class:`Issuer` is also used by tests/integration/test_auth_server.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
import warnings
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from joserfc import jwk, jwt  # a dev dependency (the auth extra): no skip without it
from joserfc.errors import SecurityWarning

from mcp_trio.auth import AccessToken, IntrospectionVerifier, InvalidToken, JWTVerifier, VerifierUnavailable

RESOURCE = "http://127.0.0.1:8000/mcp"
BOUND = 3.0
"""A verification against a dead or silent issuer must fail within its timeout plus this."""


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class Issuer:
    """A tiny authorization server: metadata, JWKS, introspection.  ``url`` once started."""

    def __init__(self, path: str = "") -> None:
        self.path = path
        self.url = ""
        self.keys: list[Any] = [jwk.RSAKey.generate_key(2048, parameters={"kid": "k1"})]
        self.hits: Counter[str] = Counter()
        self.metadata_at = "/.well-known/oauth-authorization-server"
        self.metadata_issuer: str | None = None
        self.status: dict[str, int] = {}
        """A status to answer instead, by path."""
        self.jwks_padding = 0
        self.introspection: dict[str, dict[str, Any]] = {}
        self.introspection_auth: list[str | None] = []

    @property
    def issuer(self) -> str:
        return self.url + self.path

    def mint(
        self,
        claims: dict[str, Any] | None = None,
        *,
        key: Any = None,
        alg: str = "RS256",
        header: dict[str, Any] | None = None,
        drop: tuple[str, ...] = (),
    ) -> str:
        """A token of this issuer for :data:`RESOURCE`, valid for an hour, with ``claims`` on top."""
        now = int(time.time())
        body = {
            "iss": self.issuer,
            "sub": "alice",
            "aud": RESOURCE,
            "client_id": "client-1",
            "scope": "mcp:tools mcp:read",
            "iat": now,
            "exp": now + 3600,
            "jti": secrets.token_hex(8),
            **(claims or {}),
        }
        for name in drop:
            body.pop(name)
        key = key or self.keys[0]
        head = {"alg": alg, "typ": "at+jwt", **({"kid": key.kid} if key.kid else {}), **(header or {})}
        with warnings.catch_warnings():  # joserfc warns when it signs with EdDSA (deprecated by RFC 9864)
            warnings.simplefilter("ignore", SecurityWarning)
            return jwt.encode({k: v for k, v in head.items() if v is not None}, body, key, algorithms=[alg])

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].rpartition(".")[2]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        self.hits[path] += 1
        status, answer = self.answer(path, scope, body)
        data = json.dumps(answer).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    def answer(self, path: str, scope: dict[str, Any], body: bytes) -> tuple[int, Any]:
        if path in self.status:
            return self.status[path], {"error": "server_error"}
        if path == self.metadata_at:
            return 200, {
                "issuer": self.metadata_issuer or self.issuer,
                "jwks_uri": f"{self.url}/jwks",
                "introspection_endpoint": f"{self.url}/introspect",
            }
        if path == "/jwks":
            keys = [key.as_dict(private=False) for key in self.keys]
            return 200, {"keys": keys, "padding": "x" * self.jwks_padding}
        if path == "/introspect":
            headers = dict(scope["headers"])
            auth = headers.get(b"authorization")
            self.introspection_auth.append(auth.decode() if auth else None)
            token = parse_qs(body.decode())["token"][0]
            return 200, self.introspection.get(token, {"active": False})
        return 404, {"error": "not found"}


@asynccontextmanager
async def running(issuer: Issuer) -> AsyncIterator[Issuer]:
    """``issuer`` served by hypercorn on 127.0.0.1:0 until the block ends."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 0.5
    config.accesslog = None
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: serve(issuer.app, config, shutdown_trigger=stop.wait, task_status=task_status)
        )
        issuer.url = urls[0]
        try:
            yield issuer
        finally:
            stop.set()


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    async with running(Issuer()) as started:
        yield started


def verifier(issuer: Issuer, **options: Any) -> JWTVerifier:
    return JWTVerifier(issuer.issuer, RESOURCE, **options)


@asynccontextmanager
async def silent_listener() -> AsyncIterator[str]:
    """A loopback listener that accepts connections and never answers; yields its base URL."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    held: list[trio.SocketStream] = []

    async def accept() -> None:
        while True:
            held.append(await listeners[0].accept())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept)
        try:
            yield f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        finally:
            nursery.cancel_scope.cancel()
            for stream in held:
                stream.socket.close()
            listeners[0].socket.close()


async def refused_port() -> str:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()
    return f"http://127.0.0.1:{port}"


# -- JWT access tokens -------------------------------------------------------------------------------------


async def test_a_valid_token_verifies(issuer: Issuer) -> None:
    token = issuer.mint({"scope": "mcp:tools mcp:admin"})
    access = await verifier(issuer).verify(token)
    assert isinstance(access, AccessToken)
    assert access.token == token and access.subject == "alice" and access.client_id == "client-1"
    assert access.scopes == {"mcp:tools", "mcp:admin"} and access.issuer == issuer.issuer
    assert access.audience == (RESOURCE,) and access.expires_at == access.claims["exp"]
    assert token not in repr(access) and "alice" in repr(access)
    assert access.owner == (issuer.issuer, "alice", "client-1")


@pytest.mark.parametrize(
    ("make_key", "alg"),
    [
        (lambda: jwk.RSAKey.generate_key(2048, parameters={"kid": "r"}), "PS256"),
        (lambda: jwk.ECKey.generate_key("P-256", parameters={"kid": "e"}), "ES256"),
        (lambda: jwk.ECKey.generate_key("P-384", parameters={"kid": "e3"}), "ES384"),
        (lambda: jwk.OKPKey.generate_key("Ed25519", parameters={"kid": "o"}), "EdDSA"),
        (lambda: jwk.OKPKey.generate_key("Ed25519", parameters={"kid": "o2"}), "Ed25519"),
    ],
)
async def test_each_default_algorithm_verifies(issuer: Issuer, make_key: Any, alg: str) -> None:
    key = make_key()
    issuer.keys.append(key)
    access = await verifier(issuer).verify(issuer.mint(key=key, alg=alg))
    assert access.subject == "alice"


async def test_scp_typ_jwt_azp_and_a_list_audience(issuer: Issuer) -> None:
    token = issuer.mint(
        {"scp": ["a", "b"], "aud": ["https://other.example.com", RESOURCE], "azp": "client-2"},
        header={"typ": "JWT"},
        drop=("scope", "client_id"),
    )
    access = await verifier(issuer).verify(token)
    assert access.scopes == {"a", "b"} and access.client_id == "client-2"
    assert access.audience == ("https://other.example.com", RESOURCE)
    untyped = issuer.mint(header={"typ": None})
    assert (await verifier(issuer).verify(untyped)).subject == "alice"
    with pytest.raises(InvalidToken, match="typ"):
        await verifier(issuer, require_at_jwt=True).verify(token)


def forged(
    header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"sig", key: bytes | None = None
) -> str:
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    if key is not None:
        signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def bad_tokens(issuer: Issuer) -> dict[str, tuple[str, str]]:
    """Name -> (token, what the refusal says)."""
    now = int(time.time())
    claims = {
        "iss": issuer.issuer,
        "sub": "mallory",
        "aud": RESOURCE,
        "exp": now + 3600,
        "scope": "mcp:admin",
    }
    public_pem = issuer.keys[0].as_pem(private=False)
    stranger = jwk.RSAKey.generate_key(2048, parameters={"kid": "k1"})
    anonymous = jwk.RSAKey.generate_key(2048)
    return {
        "alg none": (forged({"alg": "none", "typ": "at+jwt"}, claims), "algorithm"),
        "alg none, empty signature": (forged({"alg": "none"}, claims, b""), "not a signed JWT"),
        "HS256 with the public key": (
            forged({"alg": "HS256", "kid": "k1"}, claims, key=public_pem),
            "algorithm",
        ),
        "RS256 header, HMAC signature": (
            forged({"alg": "RS256", "kid": "k1"}, claims, key=public_pem),
            "signature",
        ),
        "unknown kid": (
            issuer.mint(key=jwk.RSAKey.generate_key(2048, parameters={"kid": "zz"})),
            "does not publish",
        ),
        "another key, same kid": (issuer.mint(key=stranger), "signature"),
        "another key, no kid": (issuer.mint(key=anonymous), "signature"),
        "wrong issuer": (issuer.mint({"iss": "https://evil.example.com"}), "another issuer"),
        "another resource": (issuer.mint({"aud": "https://other.example.com/mcp"}), "another resource"),
        "no audience": (issuer.mint(drop=("aud",)), "another resource"),
        "expired": (issuer.mint({"exp": now - 120}), "expired"),
        "no expiry": (issuer.mint(drop=("exp",)), "expiry"),
        "not yet valid": (issuer.mint({"nbf": now + 600}), "not valid yet"),
        "issued in the future": (issuer.mint({"iat": now + 600}), "not valid yet"),
        "nbf not a number": (issuer.mint({"nbf": "soon"}), "not a number"),
        "sub not a string": (issuer.mint({"sub": 42}), "sub"),
        "typ of another kind": (issuer.mint(header={"typ": "dpop+jwt"}), "typ"),
        "crit header": (forged({"alg": "RS256", "kid": "k1", "crit": ["x"], "x": 1}, claims), "critical"),
        "kid not a string": (forged({"alg": "RS256", "kid": 7}, claims), "kid"),
        "garbage": ("not-a-jwt", "not a signed JWT"),
        "garbage segments": ("a.b.c", "header"),
        "header not an object": (f"{b64(b'[1]')}.{b64(b'{}')}.{b64(b'x')}", "header"),
        "encrypted": ("a.b.c.d.e", "encrypted"),
        "oversized": ("a" * 20_000, "too large"),
        "non-ASCII": ("é.é.é", "not a signed JWT"),
    }


async def test_each_bad_token_is_invalid(issuer: Issuer) -> None:
    check = verifier(issuer)
    for name, (token, reason) in bad_tokens(issuer).items():
        with pytest.raises(InvalidToken, match=reason) as caught:
            await check.verify(token)
        assert token[:40] not in caught.value.description, name
    payload_not_object = forged({"alg": "RS256", "kid": "k1"}, {})
    with pytest.raises(InvalidToken):
        await check.verify(payload_not_object)
    assert issuer.hits["/jwks"] == 1  # one fetch, whatever the tokens said


def test_symmetric_and_none_algorithms_cannot_be_allowed() -> None:
    for algorithms in (["HS256"], ["RS256", "none"], [], ["RS256", "HS512"]):
        with pytest.raises(ValueError, match="asymmetric"):
            JWTVerifier("https://as.example.com", RESOURCE, algorithms=algorithms)
    with pytest.raises(ValueError, match="https"):
        JWTVerifier("http://as.example.com", RESOURCE)
    with pytest.raises(ValueError, match="audience"):
        JWTVerifier("https://as.example.com", [])
    with pytest.raises(ValueError, match="jwks_uri"):
        JWTVerifier("https://as.example.com", RESOURCE, jwks_uri="ftp://as.example.com/jwks")


async def test_an_algorithm_left_out_is_refused(issuer: Issuer) -> None:
    with pytest.raises(InvalidToken, match="algorithm"):
        await verifier(issuer, algorithms=["ES256"]).verify(issuer.mint())


# -- finding the keys ---------------------------------------------------------------------------------------


async def test_openid_discovery_and_an_issuer_with_a_path() -> None:
    async with running(Issuer(path="/tenant1")) as issuer:
        issuer.metadata_at = "/.well-known/openid-configuration/tenant1"
        assert (await verifier(issuer).verify(issuer.mint())).subject == "alice"
        assert issuer.hits["/.well-known/oauth-authorization-server/tenant1"] == 1  # tried first
        issuer.metadata_at = "/tenant1/.well-known/openid-configuration"
        assert (await verifier(issuer).verify(issuer.mint())).subject == "alice"


async def test_metadata_of_another_issuer_is_refused(issuer: Issuer) -> None:
    issuer.metadata_issuer = "https://evil.example.com"
    with pytest.raises(VerifierUnavailable):
        await verifier(issuer).verify(issuer.mint())
    assert issuer.hits["/jwks"] == 0


async def test_an_explicit_jwks_uri_skips_discovery(issuer: Issuer) -> None:
    check = verifier(issuer, jwks_uri=f"{issuer.url}/jwks")
    assert (await check.verify(issuer.mint())).subject == "alice"
    assert sum(issuer.hits.values()) == issuer.hits["/jwks"] == 1


async def test_an_oversized_key_set_is_refused(issuer: Issuer) -> None:
    issuer.jwks_padding = 300_000
    with pytest.raises(VerifierUnavailable, match="larger"):
        await verifier(issuer).verify(issuer.mint())


async def test_a_key_rotation_is_picked_up(issuer: Issuer) -> None:
    check = verifier(issuer, min_refresh_interval=0.1)
    assert (await check.verify(issuer.mint())).subject == "alice"
    new = jwk.ECKey.generate_key("P-256", parameters={"kid": "k2"})
    issuer.keys = [new]  # k1 retired, k2 in
    await trio.sleep(0.15)
    assert (await check.verify(issuer.mint(key=new, alg="ES256"))).subject == "alice"
    assert issuer.hits["/jwks"] == 2


async def test_a_flood_of_unknown_keys_costs_one_fetch(issuer: Issuer) -> None:
    check = verifier(issuer, min_refresh_interval=60)
    outcomes: list[str] = []

    async def forge(n: int) -> None:
        key = jwk.RSAKey.generate_key(2048, parameters={"kid": f"unknown-{n}"}) if n < 3 else issuer.keys[0]
        token = issuer.mint(key=key) if n < 3 else issuer.mint(header={"kid": f"unknown-{n}"})
        try:
            await check.verify(token)
        except InvalidToken as exc:
            outcomes.append(exc.description)

    async with trio.open_nursery() as nursery:
        for n in range(40):
            nursery.start_soon(forge, n)
    assert len(outcomes) == 40 and all("does not publish" in text for text in outcomes)
    assert issuer.hits["/jwks"] == 1 and check.fetches == 1
    for n in range(20):  # later ones, one after the other: still no fetch
        await forge(n + 100)
    assert issuer.hits["/jwks"] == 1


async def test_cached_keys_keep_working_while_the_issuer_is_down() -> None:
    async with running(Issuer()) as issuer:
        check = verifier(issuer, timeout=0.5, min_refresh_interval=0, keys_max_age=0.05)
        token = issuer.mint()
        assert (await check.verify(token)).subject == "alice"
    # the issuer is gone (connection refused); the keys are stale, so each verify tries a fetch
    await trio.sleep(0.1)
    with trio.fail_after(0.5 + BOUND):
        assert (await check.verify(token)).subject == "alice"
        with pytest.raises(VerifierUnavailable):  # an unknown key cannot be ruled out: 503, not 401
            await check.verify(issuer.mint(key=jwk.RSAKey.generate_key(2048, parameters={"kid": "new"})))


async def test_an_issuer_that_refuses_connections_fails_within_the_bound() -> None:
    url = await refused_port()
    check = JWTVerifier(url, RESOURCE, timeout=1.0)
    issuer = Issuer()
    issuer.url = url
    start = trio.current_time()
    with pytest.raises(VerifierUnavailable):
        await check.verify(issuer.mint())
    assert trio.current_time() - start < 1.0 + BOUND
    with pytest.raises(VerifierUnavailable):  # the next one, within min_refresh_interval: no new try
        await check.verify(issuer.mint())
    assert check.fetches == 1


async def test_a_silent_issuer_fails_within_the_timeout_and_cached_keys_keep_working(issuer: Issuer) -> None:
    async with silent_listener() as silent:
        check = JWTVerifier(
            issuer.issuer, RESOURCE, jwks_uri=f"{silent}/jwks", timeout=0.5, min_refresh_interval=0
        )
        outcomes: list[BaseException] = []

        async def attempt() -> None:
            try:
                await check.verify(issuer.mint())
            except VerifierUnavailable as exc:
                outcomes.append(exc)

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(5):  # one fetch in flight; the others wait for it, bounded
                nursery.start_soon(attempt)
        assert len(outcomes) == 5 and check.fetches == 1
        assert trio.current_time() - start < 0.5 + BOUND

        # keys known from before: the silent key set does not stop them
        known = JWTVerifier(issuer.issuer, RESOURCE, timeout=0.5, min_refresh_interval=0, keys_max_age=0.05)
        assert (await known.verify(issuer.mint())).subject == "alice"
        known.jwks_uri = f"{silent}/jwks"
        await trio.sleep(0.1)
        with trio.fail_after(0.5 + BOUND):
            assert (await known.verify(issuer.mint())).subject == "alice"
        assert known.fetches == 2


async def test_an_issuer_answering_errors_is_unavailable(issuer: Issuer) -> None:
    issuer.status["/jwks"] = 500
    check = verifier(issuer, min_refresh_interval=0)
    with pytest.raises(VerifierUnavailable):
        await check.verify(issuer.mint())
    del issuer.status["/jwks"]
    assert (await check.verify(issuer.mint())).subject == "alice"  # and recovers


def test_the_extra_is_named_when_joserfc_is_missing() -> None:
    from mcp_trio.auth.server._verify import _joserfc_missing

    error = _joserfc_missing(ImportError("No module named 'joserfc'"))
    assert "pip install 'mcp_trio[auth]'" in str(error)


# -- introspection ------------------------------------------------------------------------------------------


def introspector(server: Issuer, **options: Any) -> IntrospectionVerifier:
    return IntrospectionVerifier(f"{server.url}/introspect", audience=RESOURCE, **options)


def active(issuer: Issuer, **extra: Any) -> dict[str, Any]:
    return {
        "active": True,
        "sub": "alice",
        "client_id": "client-1",
        "scope": "mcp:tools",
        "aud": RESOURCE,
        "iss": issuer.issuer,
        "exp": int(time.time()) + 3600,
        **extra,
    }


async def test_introspection_active_then_cached(issuer: Issuer) -> None:
    issuer.introspection["t1"] = active(issuer)
    check = introspector(issuer, client_id="rs", client_secret="s3cret:/", issuer=issuer.issuer)
    access = await check.verify("t1")
    assert access.subject == "alice" and access.scopes == {"mcp:tools"} and access.token == "t1"
    assert (await check.verify("t1")) is access
    assert issuer.hits["/introspect"] == 1 and check.requests == 1
    expected = base64.b64encode(b"rs:s3cret%3A%2F").decode()
    assert issuer.introspection_auth == [f"Basic {expected}"]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"active": False}, "not active"),
        ({"active": "true"}, "not active"),
        ({"exp": 1000}, "expired"),
        ({"exp": "later"}, "expired"),
        ({"aud": "https://other.example.com"}, "another resource"),
        ({"aud": None}, "another resource"),
        ({"iss": "https://evil.example.com"}, "another issuer"),
    ],
)
async def test_introspection_refusals_are_not_cached(
    issuer: Issuer, answer: dict[str, Any], reason: str
) -> None:
    issuer.introspection["t"] = {**active(issuer), **answer}
    check = introspector(issuer, issuer=issuer.issuer)
    for _ in range(2):
        with pytest.raises(InvalidToken, match=reason):
            await check.verify("t")
    assert issuer.hits["/introspect"] == 2


async def test_introspection_cache_is_bounded_in_size_and_time(issuer: Issuer) -> None:
    for name in ("a", "b", "c"):
        issuer.introspection[name] = active(issuer)
    check = introspector(issuer, cache_size=2, cache_ttl=60)
    for name in ("a", "b", "c"):
        await check.verify(name)
    await check.verify("c")
    assert issuer.hits["/introspect"] == 3
    await check.verify("a")  # evicted by c
    assert issuer.hits["/introspect"] == 4
    # Time: only lower bounds are waited for (a loaded machine may be slow, never early).
    brief = introspector(issuer, cache_ttl=0.2)
    await brief.verify("b")
    await trio.sleep(0.25)
    await brief.verify("b")  # past cache_ttl
    assert issuer.hits["/introspect"] == 6
    issuer.introspection["soon"] = active(issuer, exp=time.time() + 1.0)
    await check.verify("soon")
    await trio.sleep(max(0.0, issuer.introspection["soon"]["exp"] - time.time()) + 0.05)
    with pytest.raises(InvalidToken, match="expired"):  # never cached past the token's exp
        await check.verify("soon")


async def test_introspection_without_secret_sends_the_client_id_and_no_cache(issuer: Issuer) -> None:
    issuer.introspection["t"] = active(issuer)
    check = introspector(issuer, client_id="rs", cache_size=0)
    await check.verify("t")
    await check.verify("t")
    assert issuer.hits["/introspect"] == 2 and issuer.introspection_auth == [None, None]


async def test_introspection_endpoint_failures_are_unavailable(issuer: Issuer) -> None:
    issuer.status["/introspect"] = 401
    with pytest.raises(VerifierUnavailable, match="401"):
        await introspector(issuer).verify("t")
    with pytest.raises(VerifierUnavailable):
        await IntrospectionVerifier(f"{await refused_port()}/introspect").verify("t")
    async with silent_listener() as silent:
        with trio.fail_after(0.3 + BOUND):
            with pytest.raises(VerifierUnavailable, match="within"):
                await IntrospectionVerifier(f"{silent}/introspect", timeout=0.3).verify("t")
    with pytest.raises(InvalidToken, match="too large"):
        await introspector(issuer).verify("t" * 20_000)


def test_introspection_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match="https"):
        IntrospectionVerifier("http://as.example.com/introspect")
    with pytest.raises(ValueError, match="client_id"):
        IntrospectionVerifier("https://as.example.com/introspect", client_secret="x")
    with pytest.raises(ValueError):
        IntrospectionVerifier("https://as.example.com/introspect", cache_size=-1)
