"""The Trio side of an exchange carries out the state machine's rows: one writer, nothing sent by a
writer that comes too late, the request task woken exactly when the writer side is over."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_trio._protocol.exchange import ExchangeState
from mcp_trio._transport.streams import Exchange
from mcp_trio.errors import LocalProtocolError


def recording() -> tuple[Exchange, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    return Exchange(send), sent


async def test_a_writer_that_comes_after_abandonment_sends_nothing() -> None:
    exchange, sent = recording()
    exchange.cancel_writer()  # the client left before any writer ran
    assert exchange.done.is_set() and exchange.state is ExchangeState.ABANDONED
    assert not exchange.claim()
    exchange.end()  # the request task answers for it
    assert exchange.state is ExchangeState.CLOSED and sent == []


async def test_one_writer_at_a_time_and_done_once_finished() -> None:
    exchange, sent = recording()
    assert exchange.claim()
    assert not exchange.claim()
    exchange.cancel_writer()  # a writer owns it: not abandoned behind its back
    assert exchange.state is ExchangeState.CLAIMED and not exchange.done.is_set()
    await exchange.start(200, [])
    await exchange.body(b"x", more=False)
    assert exchange.finished and not exchange.done.is_set()  # not before its writer returns
    exchange.writer_done()
    assert exchange.state is ExchangeState.FINISHED and exchange.done.is_set()
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    with pytest.raises(LocalProtocolError):
        exchange.end()


async def test_a_writer_that_stops_mid_stream_hands_the_end_to_the_request_task() -> None:
    exchange, _sent = recording()
    assert exchange.claim()
    await exchange.start(200, [])
    exchange.writer_done()
    assert exchange.state is ExchangeState.ABANDONED and exchange.started and exchange.done.is_set()
    exchange.end()
    assert exchange.state is ExchangeState.CLOSED
