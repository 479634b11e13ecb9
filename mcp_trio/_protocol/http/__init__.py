"""HTTP request facts -> accept or reject, for the Streamable HTTP transport.

Sans-IO: every function takes plain values and either returns or raises
:class:`~mcp_trio.errors.RemoteProtocolError` carrying the HTTP status, the JSON-RPC code and any extra
headers.  Two parts, both used through this package: :mod:`.request` (what a request's method, head
and body must be) and :mod:`.origins` (who may call: ``Host``/``Origin`` checks and CORS).
"""

from __future__ import annotations

from .origins import (
    CORS_ALLOW_METHODS,
    CORS_EXPOSE_HEADERS,
    CORS_MAX_AGE,
    CORS_REQUEST_HEADERS,
    LOOPBACK_HOSTS,
    CORSPolicy,
    OriginPolicy,
    check_origin,
    cors_preflight,
    is_loopback,
    is_preflight,
    normalize_host,
    normalize_origin,
    protection_applies,
)
from .request import (
    ALLOWED_METHODS,
    AMBIGUOUS_FRAMING,
    RequestFacts,
    accepts,
    app_not_running,
    body_too_large,
    check_delete,
    check_duplicates,
    check_framing,
    check_get,
    check_method,
    check_post,
    check_protocol_version,
    check_session_header,
    server_busy,
    session_not_found,
)

__all__ = [
    "ALLOWED_METHODS",
    "AMBIGUOUS_FRAMING",
    "CORS_ALLOW_METHODS",
    "CORS_EXPOSE_HEADERS",
    "CORS_MAX_AGE",
    "CORS_REQUEST_HEADERS",
    "LOOPBACK_HOSTS",
    "CORSPolicy",
    "OriginPolicy",
    "RequestFacts",
    "accepts",
    "app_not_running",
    "body_too_large",
    "check_delete",
    "check_duplicates",
    "check_framing",
    "check_get",
    "check_method",
    "check_origin",
    "check_post",
    "check_protocol_version",
    "check_session_header",
    "cors_preflight",
    "is_loopback",
    "is_preflight",
    "normalize_host",
    "normalize_origin",
    "protection_applies",
    "server_busy",
    "session_not_found",
]
