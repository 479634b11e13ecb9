"""The URLs of OAuth discovery: an MCP endpoint's canonical form, where metadata documents are looked
for, and :class:`URLPolicy`, where the client agrees to be sent."""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ._errors import OAuthError

__all__ = [
    "URLPolicy",
    "canonical_url",
    "host_kind",
    "http_url",
    "origin",
    "resource_matches",
    "resource_metadata_urls",
    "server_metadata_urls",
    "shown",
]


def http_url(value: Any) -> bool:
    if not isinstance(value, str) or len(value) > 4096:
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def canonical_url(url: str) -> str:
    """The canonical URI of an MCP endpoint (RFC 8707 section 2): scheme and host in lower case, no
    fragment, and no trailing slash on an empty path."""
    parts = urlsplit(url)
    path = "" if parts.path == "/" else parts.path
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def origin(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), "", "", ""))


def _port(parts: Any) -> int | None:
    try:
        port: int | None = parts.port
    except ValueError:
        return None
    if port is None:
        port = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return port


def resource_matches(resource: str, server_url: str) -> bool:
    """Whether a protected resource metadata ``resource`` covers the MCP endpoint ``server_url``: the
    same scheme, host and port, and a path that is the endpoint's path or one of its parents."""
    try:
        want, have = urlsplit(resource), urlsplit(server_url)
    except ValueError:
        return False
    if want.scheme.lower() != have.scheme.lower() or want.fragment:
        return False
    if (want.hostname or "").lower() != (have.hostname or "").lower() or _port(want) != _port(have):
        return False
    prefix = want.path.rstrip("/")
    path = have.path.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def _well_known(url: str, suffix: str) -> str:
    """RFC 8414 / RFC 9728 path insertion: ``https://h/p`` -> ``https://h/.well-known/<suffix>/p``."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, f"/.well-known/{suffix}{path}", "", ""))


def resource_metadata_urls(server_url: str, from_header: str | None) -> list[str]:
    """Where to look for protected resource metadata, in order: the challenge's ``resource_metadata``,
    then the path-inserted well-known URL, then the one at the root."""
    urls = [from_header] if from_header and http_url(from_header) else []
    urls.append(_well_known(server_url, "oauth-protected-resource"))
    urls.append(_well_known(origin(server_url), "oauth-protected-resource"))
    return list(dict.fromkeys(urls))


def server_metadata_urls(issuer: str) -> list[str]:
    """Where to look for an authorization server's metadata, in the order of the 2025-11-25
    specification: RFC 8414 path insertion, OpenID Connect path insertion, OpenID Connect path
    appending (the last only for an issuer with a path)."""
    parts = urlsplit(issuer)
    urls = [
        _well_known(issuer, "oauth-authorization-server"),
        _well_known(issuer, "openid-configuration"),
    ]
    path = parts.path.rstrip("/")
    if path:
        urls.append(
            urlunsplit((parts.scheme, parts.netloc, f"{path}/.well-known/openid-configuration", "", ""))
        )
    return urls


# -- which URLs the client may be sent to ---------------------------------------------------------

_NUMERIC_HOST = re.compile(r"[0-9a-fA-FxX.]+")


def host_kind(host: str) -> str:
    """What a URL's host names, as far as can be told without resolving it: ``"loopback"`` (a loopback
    or unspecified address, ``localhost`` and ``*.localhost``), ``"link-local"``, ``"private"`` (private,
    shared and other non-global unicast ranges), ``"forbidden"`` (multicast and reserved addresses) or
    ``"public"`` (a global address, or any other host name: names are not resolved).

    Literal addresses are read the way the socket layer reads them: IPv4 in its legacy forms too
    (``2130706433``, ``0x7f.1``, ``127.1``), IPv6 with a zone, IPv4-mapped IPv6 as its IPv4 address."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return "loopback"
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        if not _NUMERIC_HOST.fullmatch(name):
            return "public"
        try:  # inet_aton reads what getaddrinfo would connect to: 127.1, 0x7f000001, 2130706433
            address = ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return "public"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_unspecified:
        return "loopback"
    if address.is_multicast or address.is_reserved:
        return "forbidden"
    if address.is_link_local:
        return "link-local"
    if address.is_private or not address.is_global:
        return "private"
    return "public"


class URLPolicy:
    """Where the OAuth client agrees to go for one MCP server: every URL it fetches during discovery
    (metadata documents, each redirect) and every endpoint the authorization server's metadata names
    (authorization, token, registration) is checked first, before any connection:

    - ``http`` or ``https`` only; and ``https`` when the MCP server is ``https``, except on loopback;
    - not a multicast or reserved address; not a loopback, link-local or private address (by literal
      address, or a ``localhost`` name) unless the MCP server itself is on an address of the same kind.

    Host names are not resolved: a public name that resolves to a private address is not caught here.
    """

    def __init__(self, server_url: str) -> None:
        parts = urlsplit(server_url)
        self.server_url = server_url
        self.secure = parts.scheme.lower() == "https"
        self.server_kind = host_kind(parts.hostname or "")

    def refusal(self, url: str) -> str | None:
        """Why ``url`` is refused, or None when the client may use it."""
        try:
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError:
            return "it is not a URL"
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not host:
            return "it is not an http(s) URL"
        kind = host_kind(host)
        if self.secure and scheme != "https" and kind != "loopback":
            return "the MCP server uses https, so every authorization URL must too"
        if kind == "forbidden":
            return "it names a multicast or reserved address"
        if kind != "public" and kind != self.server_kind:
            return f"it names a {kind} address and the MCP server is not on one"
        return None

    def check(self, url: str, what: str) -> None:
        """Raise :class:`OAuthError` if ``url`` (``what`` says which URL it is) is refused."""
        why = self.refusal(url)
        if why is not None:
            raise OAuthError(f"refusing {what} {shown(url)}: {why} (the client's URL policy)")


def shown(url: str) -> str:
    """A URL for a message: without its query and fragment (which could carry a secret), and cut."""
    try:
        parts = urlsplit(url)
        text = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
    except ValueError:
        text = url.split("?", 1)[0].split("#", 1)[0]
    return text[:200]
