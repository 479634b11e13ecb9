"""The contract between mcp_trio's HTTP servers and the ASGI app: two ASGI scope extensions.

Any ASGI server runs :class:`~mcp_trio.MCPApp`; mcp_trio's own servers (hypercorn as mcp_trio runs it,
and the embedded h11 server) also set these extensions, which let the app do less work per request.
The app checks for each one and works without it.  This module is all the transport and the HTTP
servers share: neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["CANCELLABLE_SEND", "DISCONNECT_CALLBACK", "DisconnectHook"]

CANCELLABLE_SEND = "mcp_trio.cancellable_send"
"""ASGI scope extension set by mcp_trio's servers where cancelling the app's ``send()`` is safe: an
interrupted send ends that response and nothing else (HTTP/1.1: it closes that connection; HTTP/2 on
mcp_trio's hypercorn server: it resets that stream, the connection's other streams go on)."""

DISCONNECT_CALLBACK = "mcp_trio.disconnect_callback"
"""ASGI scope extension set by mcp_trio's servers that know when a client disconnects without the app
reading ``receive()``: its value is a :class:`DisconnectHook`.  The app calls ``hook.set(callback)``
and the server calls ``callback()`` (synchronously, from the server's own task) when the client goes,
the moment it puts ``http.disconnect`` on the request's queue; at once if it already went; never
after ``hook.set(None)``.  An app that uses it needs no task watching ``receive()`` for the disconnect."""


class DisconnectHook:
    """The value of the :data:`DISCONNECT_CALLBACK` extension: one request's disconnect callback."""

    __slots__ = ("_callback", "gone")

    def __init__(self) -> None:
        self._callback: Callable[[], object] | None = None
        self.gone = False
        """The client went away (or the server ended the request's stream)."""

    def set(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback()`` when the client goes (at once if it went already); None: no more."""
        self._callback = callback
        if callback is not None and self.gone:
            self.fire()

    def fire(self) -> None:
        """The server saw the client go: call the callback once (it is forgotten first)."""
        self.gone = True
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()

    def complete(self) -> None:
        """The response was sent whole and its stream ended: the callback is forgotten, not called
        (there is nothing left to cancel: cancelling a handler at its very end costs a cancellation
        per request for nothing)."""
        self.gone = True
        self._callback = None
