"""The 2025 session's stream bookkeeping (``SessionStreams``) driven without Trio: events in, routes out."""

from __future__ import annotations

import json

import mcp_types as mt
import pytest

from mcp_trio._protocol import versions
from mcp_trio._protocol.session import (
    END,
    GET_STREAM,
    Route,
    SessionStreams,
    StreamRecord,
    check_batch,
)
from mcp_trio.errors import RemoteProtocolError

REVISION = versions.revision("2025-06-18")
PRIMING = versions.revision("2025-11-25")
BATCHES = versions.revision("2025-03-26")


def make(stream_id: int, json_mode: bool, batch: bool) -> StreamRecord:
    return StreamRecord(stream_id, json_mode, batch=batch)


def streams(*, json_mode: bool = False, event_ids: bool = True, revision=REVISION, retry=None):
    assert revision is not None
    return SessionStreams(make, json_mode=json_mode, event_ids=event_ids, revision=revision, retry=retry)


def request(request_id: mt.RequestId, method: str = "tools/call") -> mt.JSONRPCRequest:
    return mt.JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method)


def response(request_id: mt.RequestId) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": {}}


def test_a_new_session_has_only_the_get_stream() -> None:
    book = streams()
    assert list(book.streams) == [GET_STREAM] and book.get_stream.id == GET_STREAM
    assert book.statistics() == {"streams": 1, "pending_responses": 0}


def test_post_streams_count_up_and_owe_their_requests() -> None:
    book = streams()
    first = book.open_post((request(1), request(2)), batch=True)
    second = book.open_post((request("x"),), batch=False)
    assert (first.id, second.id) == (1, 2)
    assert first.pending == {1, 2} and first.batch and not second.batch
    assert book.requests == {1: first, 2: first, "x": second}


def test_request_ids_in_flight_or_repeated_are_refused() -> None:
    book = streams()
    book.open_post((request(1),), batch=False)
    with pytest.raises(RemoteProtocolError, match="already in use"):
        book.check_request_ids((request(1),), inflight=())
    with pytest.raises(RemoteProtocolError, match="already in use"):
        book.check_request_ids((request(7),), inflight={7})
    with pytest.raises(RemoteProtocolError, match="already in use"):
        book.check_request_ids((request(3), request(3)), inflight=())
    book.check_request_ids((request(3), request(4)), inflight=())
    assert set(book.requests) == {1}  # nothing changed


def test_a_response_on_its_sse_stream_is_queued_and_ends_the_stream() -> None:
    book = streams()
    stream = book.open_post((request(1),), batch=False)
    route, target, item = book.outgoing({"jsonrpc": "2.0", "method": "notifications/progress"}, 1)
    assert route is Route.QUEUE and target is stream and item.seq == 0
    route, target, item = book.outgoing(response(1), 1)
    assert route is Route.QUEUE_LAST and target is stream and item.seq == 1
    assert json.loads(item.data) == response(1)
    assert 1 not in book.requests and stream.complete
    assert book.streams[stream.id] is stream  # forgetting it is the driver's (a connection may carry it)
    book.forget_stream(stream)
    assert stream.id not in book.streams


def test_a_batch_stream_ends_with_its_last_response() -> None:
    book = streams()
    stream = book.open_post((request(1), request(2)), batch=True)
    assert book.outgoing(response(2), 2)[0] is Route.QUEUE
    assert book.outgoing(response(1), 1)[0] is Route.QUEUE_LAST and stream.complete


def test_unrelated_messages_and_server_requests_go_to_the_get_stream() -> None:
    book = streams()
    book.open_post((request(1),), batch=False)
    route, target, item = book.outgoing({"jsonrpc": "2.0", "method": "notifications/message"}, None)
    assert route is Route.QUEUE and target.id == GET_STREAM and item.seq == 0
    route, target, _ = book.outgoing({"jsonrpc": "2.0", "id": "s1", "method": "roots/list"}, 99)
    assert route is Route.QUEUE and target.id == GET_STREAM
    route, target, _ = book.outgoing({"jsonrpc": "2.0", "id": "s2", "method": "roots/list"}, 1)
    assert route is Route.QUEUE and target.id == 1  # on the related request's stream


def test_json_mode_keeps_bodies_until_the_stream_is_complete() -> None:
    book = streams(json_mode=True)
    stream = book.open_post((request(1), request(2)), batch=True)
    assert stream.json_mode
    assert book.outgoing(response(1), 1) == (Route.JSON_WAIT, stream, END)
    assert book.outgoing(response(2), 2) == (Route.JSON_DONE, stream, END)
    assert stream.id not in book.streams and not book.requests
    assert json.loads(book.json_body(stream)) == [response(1), response(2)]


def test_json_mode_single_body_and_all_cancelled() -> None:
    book = streams(json_mode=True)
    one = book.open_post((request(1),), batch=False)
    assert book.outgoing(response(1), 1)[0] is Route.JSON_DONE
    assert json.loads(book.json_body(one)) == response(1)
    cancelled = book.open_post((request(2),), batch=False)
    assert book.answered(2) is cancelled and book.json_body(cancelled) == b""


def test_json_mode_notifications_go_to_the_get_stream() -> None:
    book = streams(json_mode=True)
    book.open_post((request(1),), batch=False)
    route, target, _ = book.outgoing({"jsonrpc": "2.0", "method": "notifications/progress"}, 1)
    assert route is Route.QUEUE and target.id == GET_STREAM


def test_the_last_response_of_a_deferred_stream_is_sent_whole() -> None:
    book = streams(revision=PRIMING, retry=1000)
    stream = book.open_post((request(1),), batch=False)
    stream.deferred = book.first_event(stream, None)
    assert stream.deferred == -2  # primed with seq 0
    route, target, item = book.outgoing(response(1), 1)
    assert route is Route.WHOLE and target is stream and item.seq == 1
    assert stream.id not in book.streams and not book.requests
    body = book.whole_body(stream.id, stream.deferred, item)
    assert body.startswith(b"id: 1-0\nretry: 1000\ndata:\n\n")
    assert body.endswith(b"id: 1-1\ndata: " + item.data + b"\n\n")


def test_a_deferred_stream_owing_more_queues() -> None:
    book = streams()
    stream = book.open_post((request(1), request(2)), batch=True)
    stream.deferred = -1
    assert book.outgoing(response(1), 1)[0] is Route.QUEUE


def test_answered_without_a_response() -> None:
    book = streams()
    stream = book.open_post((request(1), request(2)), batch=True)
    assert book.answered(1) is None and book.answered(1) is None
    assert book.answered(2) is stream and stream.complete
    assert book.answered("unknown") is None


def test_first_event_replay_priming_or_neither() -> None:
    stream = StreamRecord(1)
    assert streams().first_event(stream, 5) == 5
    assert streams().first_event(stream, None) == -1
    assert streams(revision=PRIMING, event_ids=False).first_event(stream, None) == -1
    primed = streams(revision=PRIMING)
    assert primed.first_event(stream, None) == -2 and primed.first_event(stream, None) == -3


def test_events_carry_ids_only_with_an_event_store() -> None:
    assert streams().sse_event(3, 4, b'{"a":1}') == b'id: 3-4\ndata: {"a":1}\n\n'
    assert streams(event_ids=False).sse_event(3, 4, b'{"a":1}') == b'data: {"a":1}\n\n'
    assert streams().sse_event(3, 4, b"a\nb") == b"id: 3-4\ndata: a\ndata: b\n\n"
    assert streams().priming_event(2, 0) == b"id: 2-0\ndata:\n\n"
    assert streams(retry=5).priming_event(2, 0) == b"id: 2-0\nretry: 5\ndata:\n\n"


def test_resume_by_last_event_id() -> None:
    book = streams()
    live = book.open_post((request(1),), batch=False)
    assert book.resume(None) == (book.get_stream, None)
    assert book.resume("garbage") == (book.get_stream, None)
    assert book.resume("1-3") == (live, 3)
    gone, after = book.resume("9-0")
    assert gone.id == 9 and after == 0 and not book.is_live(gone) and book.is_live(live)
    json_book = streams(json_mode=True)
    answer = json_book.open_post((request(1),), batch=False)
    fresh, _ = json_book.resume("1-0")
    assert fresh is not answer and not fresh.json_mode


def test_close_target_needs_a_resumable_sse_stream() -> None:
    book = streams()
    stream = book.open_post((request(1),), batch=False)
    assert book.close_target(None) is book.get_stream and book.close_target(1) is stream
    assert book.close_target(2) is None
    assert streams(event_ids=False).close_target(None) is None
    json_book = streams(json_mode=True)
    json_book.open_post((request(1),), batch=False)
    assert json_book.close_target(1) is None


def test_check_batch() -> None:
    assert REVISION is not None and BATCHES is not None
    check_batch(False, 100, REVISION, 2)
    check_batch(True, 2, BATCHES, 2)
    with pytest.raises(RemoteProtocolError, match="not supported in 2025-06-18"):
        check_batch(True, 1, REVISION, 2)
    with pytest.raises(RemoteProtocolError, match="at most 2 messages"):
        check_batch(True, 3, BATCHES, 2)
