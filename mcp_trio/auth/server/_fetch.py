"""Fetching for a verifier, bounded: a client whose every operation has a deadline, and a JSON body
read to at most :data:`MAX_DOCUMENT_SIZE` bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from ..._protocol import safejson
from ._token import VerifierUnavailable

__all__ = ["MAX_DOCUMENT_SIZE", "bounded_client", "read_json"]

MAX_DOCUMENT_SIZE = 256 * 1024
"""Largest metadata, key set or introspection answer read (bytes)."""


@asynccontextmanager
async def bounded_client(http: httpx.AsyncClient | None, seconds: float) -> AsyncIterator[httpx.AsyncClient]:
    """``http``, or a new client (no redirects) whose every operation is bounded by ``seconds``."""
    if http is not None:
        yield http
        return
    async with httpx.AsyncClient(timeout=seconds, follow_redirects=False) as client:
        yield client


async def read_json(response: httpx.Response, what: str) -> Any:
    """The JSON body of ``response``, read to at most :data:`MAX_DOCUMENT_SIZE` bytes (decoded)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_DOCUMENT_SIZE:
        raise VerifierUnavailable(f"{what} is larger than {MAX_DOCUMENT_SIZE} bytes")
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_DOCUMENT_SIZE:
            raise VerifierUnavailable(f"{what} is larger than {MAX_DOCUMENT_SIZE} bytes")
    try:
        return safejson.loads(bytes(body))
    except ValueError:
        raise VerifierUnavailable(f"{what} is not JSON") from None
