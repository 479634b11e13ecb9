"""HTTP request facts -> accept or reject, for the Streamable HTTP transport.

Sans-IO: every function takes plain values and either returns or raises
:class:`~mcp_trio.errors.RemoteProtocolError` carrying the HTTP status, the JSON-RPC code and any extra
headers.  Two parts, both used through this package: :mod:`.request` (what a request's method, head
and body must be) and :mod:`.origins` (who may call: ``Host``/``Origin`` checks and CORS).
"""

from __future__ import annotations

from . import origins, request
from .origins import *  # noqa: F403
from .request import *  # noqa: F403

__all__ = [*origins.__all__, *request.__all__]
