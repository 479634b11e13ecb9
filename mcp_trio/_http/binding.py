"""What the HTTP servers raise when they cannot listen: :class:`BindError`, the ``OSError`` of the bind
with the address it was for.  :func:`mcp_trio.serve` turns it into the public
:class:`~mcp_trio.errors.ListenError` (this package imports no other room, the errors included)."""

from __future__ import annotations

__all__ = ["BindError"]


class BindError(OSError):
    """A server could not listen on ``filename`` (the address as given, ``127.0.0.1:8000``): raised
    bare, before the server reports its URLs; the ``OSError`` of the bind is the ``__cause__``."""

    @classmethod
    def of(cls, exc: OSError, address: str) -> BindError:
        return cls(exc.errno, exc.strerror or str(exc), address)
