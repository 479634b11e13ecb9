"""The client's answers to a server's requests (``ping``, ``sampling/createMessage``,
``elicitation/create``, ``roots/list``; in the 2026 era, the input requests of a round or a task): the
params validated, the application's callback run, its result checked."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as mt
import pydantic

from ..errors import RPCError
from .callbacks import ElicitationHandler, RootsHandler, SamplingHandler, invoke
from .wire import peer_log

__all__ = ["reply_to", "serve_request"]

logger = logging.getLogger(__name__)

_ELICIT_PARAMS: pydantic.TypeAdapter[mt.ElicitRequestParams] = pydantic.TypeAdapter(mt.ElicitRequestParams)


def _params(model: Any, method: str, params: dict[str, Any]) -> Any:
    """A server's request params validated (``model`` a model class or a TypeAdapter); params of the
    wrong shape are an :class:`RPCError` -32602 (the error answer to the server's request; raised out
    of the call whose input it was, in the 2026 era)."""
    try:
        if isinstance(model, pydantic.TypeAdapter):
            return model.validate_python(params)
        return model.model_validate(params)
    except pydantic.ValidationError as exc:
        peer_log(logging.INFO, "bad-params", "the server's %.100s had invalid params", method)
        raise RPCError(
            mt.INVALID_PARAMS, f"invalid params for {method}: {exc.error_count()} errors"
        ) from None


async def serve_request(
    method: str,
    params: dict[str, Any],
    sampling: SamplingHandler | None,
    elicitation: ElicitationHandler | None,
    roots: RootsHandler | None,
) -> dict[str, Any]:
    """Run the callback that answers a server-to-client request (or input request): its result, or
    :class:`RPCError` (a method without a callback: -32601; invalid params: -32602); a callback's
    exception is raised as it is."""
    result: object
    if method == "ping":
        return {}
    if method == "sampling/createMessage" and sampling is not None:
        name, expected = "sampling", "CreateMessageResult"
        sampling_params = _params(mt.CreateMessageRequestParams, method, params)
        result = await invoke(sampling, sampling_params)
    elif method == "elicitation/create" and elicitation is not None:
        name, expected = "elicitation", "ElicitResult"
        elicit_params: mt.ElicitRequestParams = _params(_ELICIT_PARAMS, method, params)
        result = await invoke(elicitation, elicit_params)
    elif method == "roots/list" and roots is not None:
        name, expected = "roots", "ListRootsResult"
        result = await invoke(roots)
    else:
        raise RPCError(mt.METHOD_NOT_FOUND, f"the client does not handle {method}")
    if not isinstance(result, pydantic.BaseModel):
        raise TypeError(f"the {name}= callback returned {result!r:.200}, not a {expected}")
    dumped: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return dumped


async def reply_to(
    message: dict[str, Any], serve: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """The JSON-RPC answer to a server's request (``serve`` runs its handler): the result, or the error
    (an :class:`RPCError` as it is, any other exception of a handler of ours as -32603, logged)."""
    params = message.get("params")
    try:
        if params is not None and not isinstance(params, dict):
            raise RPCError(mt.INVALID_PARAMS, "params must be an object")
        result = await serve(message["method"], params or {})
        return {"jsonrpc": "2.0", "id": message["id"], "result": result}
    except RPCError as exc:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": exc.code, "message": exc.message}}
    except Exception as exc:  # a handler of ours failed: the server gets an error, the session lives on
        logger.exception("handler of the server's %s failed", message.get("method"))
        error = {"code": mt.INTERNAL_ERROR, "message": str(exc)}
        return {"jsonrpc": "2.0", "id": message["id"], "error": error}
