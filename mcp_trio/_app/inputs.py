"""Input requests: what a handler asks of the client (sampling, elicitation, roots).

In a 2025-era session they travel as server-to-client JSON-RPC requests on the handler's own stream.
In a 2026-era request they become an ``InputRequiredResult``: the handler is stopped, the client
gathers the answers and retries, and the handler runs again and finds them (see ``docs/api.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types as mt
import pydantic

from .._protocol import versions
from ..errors import RPCError

__all__ = ["InputRequest", "InputRequired", "missing_capability"]

MISSING_REQUIRED_CLIENT_CAPABILITY = -32021


def missing_capability(capability: str) -> RPCError:
    return RPCError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Missing required client capability: {capability}",
        {"requiredCapabilities": {capability: {}}},
    )


def _dump(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    return value


@dataclass(frozen=True, slots=True)
class InputRequest:
    """One request for input from the client; build it with the class methods."""

    method: str
    params: dict[str, Any]
    capability: str
    result: type[pydantic.BaseModel] = field(repr=False)

    @classmethod
    def sampling(
        cls,
        messages: list[mt.SamplingMessage | dict[str, Any]] | str,
        *,
        max_tokens: int = 1000,
        **params: Any,
    ) -> InputRequest:
        """``sampling/createMessage``.  A string is one user text message; ``params`` are further
        params by their wire names (``systemPrompt``, ``modelPreferences`` ...)."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": {"type": "text", "text": messages}}]
        wire = {"messages": [_dump(m) for m in messages], "maxTokens": max_tokens, **params}
        return cls("sampling/createMessage", wire, "sampling", mt.CreateMessageResult)

    @classmethod
    def elicitation(cls, message: str, requested_schema: dict[str, Any]) -> InputRequest:
        """``elicitation/create`` in form mode."""
        params = {"mode": "form", "message": message, "requestedSchema": requested_schema}
        return cls("elicitation/create", params, "elicitation", mt.ElicitResult)

    @classmethod
    def elicitation_url(cls, message: str, url: str, elicitation_id: str | None = None) -> InputRequest:
        """``elicitation/create`` in URL mode (``elicitation_id`` is sent to 2025-11-25 clients only)."""
        params = {"mode": "url", "message": message, "url": url}
        if elicitation_id is not None:
            params["elicitationId"] = elicitation_id
        return cls("elicitation/create", params, "elicitation", mt.ElicitResult)

    @classmethod
    def roots(cls) -> InputRequest:
        """``roots/list``."""
        return cls("roots/list", {}, "roots", mt.ListRootsResult)

    def wire(self, revision: versions.Revision | None) -> dict[str, Any]:
        """``{"method", "params"}`` as the given revision spells it."""
        params = dict(self.params)
        if revision is not None and not revision.elicitation_modes:
            params.pop("mode", None)
        if revision is not None and revision.modern:
            params.pop("elicitationId", None)
        return {"method": self.method, "params": params}

    def parse(self, key: str, answer: Any) -> Any:
        """The client's answer as its result model; -32602 when it is not one."""
        try:
            return self.result.model_validate(answer)
        except pydantic.ValidationError as exc:
            raise RPCError(mt.INVALID_PARAMS, f"Invalid input response {key!r} to {self.method}") from exc


class InputRequired(BaseException):
    """Raised inside a 2026-era handler that needs input it does not have yet: the request is answered
    with an ``InputRequiredResult``.  A ``BaseException`` so that ``except Exception`` in user code
    does not swallow it."""

    def __init__(self, requests: Mapping[str, dict[str, Any]]) -> None:
        super().__init__(sorted(requests))
        self.requests = dict(requests)
