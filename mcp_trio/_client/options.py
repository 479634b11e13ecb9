"""The options every opener takes (:func:`open_client_session`, :func:`open_stdio_client`,
:func:`open_websocket_client`), declared once: what the session is, whatever carries it."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

import mcp_types as mt

from .._protocol import clientsession
from .callbacks import (
    ElicitationHandler,
    LogHandler,
    NotificationHandler,
    RootsHandler,
    SamplingHandler,
    check_callback,
)

__all__ = ["DEFAULT_CLIENT_INFO", "Mode", "SessionOptions", "checked"]

Mode = Literal["auto", "legacy", "modern"]

DEFAULT_CLIENT_INFO: dict[str, Any] = {"name": "mcp-trio", "version": "0.1.0"}


class SessionOptions(TypedDict, total=False):
    """The keyword arguments every opener takes, each optional (their meaning and defaults:
    :func:`open_client_session`).  Declared here once; the session reads each where it is used."""

    mode: Mode
    client_info: dict[str, Any] | None
    sampling: SamplingHandler | None
    elicitation: ElicitationHandler | None
    roots: RootsHandler | None
    on_notification: NotificationHandler | None
    on_log: LogHandler | None
    log_level: mt.LoggingLevel | None
    legacy_version: str
    tasks: bool
    client_session_id: str | None


_CALLBACKS = ("sampling", "elicitation", "roots", "on_notification", "on_log")


def checked(opener: str, options: SessionOptions) -> SessionOptions:
    """``options`` if an opener can take them: an unknown keyword is a :class:`TypeError` (as a
    misspelt keyword argument always was), and so is a callback that cannot be called; both before
    anything is started or sent."""
    for name in options:
        if name not in SessionOptions.__optional_keys__:
            raise TypeError(f"{opener}() got an unexpected keyword argument {name!r}")
    for name in _CALLBACKS:
        check_callback(name, options.get(name))
    given = options.get("client_session_id")
    if given is not None and clientsession.parse(given) is None:
        raise ValueError(f"{opener}(): client_session_id must be a UUID (such as str(uuid.uuid4()))")
    return options
