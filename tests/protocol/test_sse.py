"""Tests of the sans-IO Server-Sent Events encoder and decoder (mcp_trio._protocol.sse)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_trio._protocol.sse import (
    ServerSentEvent,
    SSEDecoder,
    SSEProtocolError,
    encode_comment,
    encode_event,
)

SETTINGS = settings(max_examples=200, deadline=None)


def decode(*chunks: bytes, max_event_size: int | None = None) -> list[ServerSentEvent]:
    decoder = SSEDecoder() if max_event_size is None else SSEDecoder(max_event_size=max_event_size)
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.close()


def split(data: bytes, points: Sequence[int]) -> list[bytes]:
    bounds = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


# --- strategies --------------------------------------------------------------------------------------

# codec="utf-8" keeps lone surrogates out: they cannot be encoded (see test_encode_rejects_surrogates).
any_text = st.text(st.one_of(st.characters(codec="utf-8"), st.sampled_from("\r\n\ufeff:")))
line_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"))
id_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\0"))
retries = st.none() | st.integers(min_value=0, max_value=2**70)


@st.composite
def event_args(draw: st.DrawFn) -> tuple[str, str | None, str | None, int | None]:
    return draw(any_text), draw(st.none() | line_text), draw(st.none() | id_text), draw(retries)


@st.composite
def chunkings(draw: st.DrawFn, data: bytes) -> list[bytes]:
    points = draw(st.lists(st.integers(min_value=0, max_value=len(data)), max_size=max(1, len(data))))
    return split(data, points)


_FIELD_TOKENS = b"data id event retry bogus : ; 12 x".split(b" ")
_ODD_TOKENS = b"\r \n \r\n \xef\xbb\xbf \xe2\x82 \xac \xf0\x9f\x98\x80 \x00 \xff".split(b" ")
sse_tokens = st.sampled_from([*_FIELD_TOKENS, *_ODD_TOKENS, b" ", b": "])
sse_like_bytes = st.lists(sse_tokens | st.binary(max_size=4), max_size=40).map(b"".join)


# --- round trip --------------------------------------------------------------------------------------


def expected_events(args: list[tuple[str, str | None, str | None, int | None]]) -> list[ServerSentEvent]:
    expected: list[ServerSentEvent] = []
    in_force: int | None = None
    for data, event, id, retry in args:
        in_force = retry if retry is not None else in_force
        data = re.sub(r"\r\n?", "\n", data)
        expected.append(ServerSentEvent(data, event or "message", id, in_force))
    return expected


@SETTINGS
@given(args=st.lists(event_args(), max_size=6), chunk_data=st.data())
def test_round_trip_in_any_chunking(
    args: list[tuple[str, str | None, str | None, int | None]], chunk_data: st.DataObject
) -> None:
    stream = b"".join(encode_event(d, event=e, id=i, retry=r) for d, e, i, r in args)
    chunks = chunk_data.draw(chunkings(stream))
    assert decode(*chunks) == expected_events(args)


@SETTINGS
@given(args=st.lists(event_args(), max_size=4))
def test_round_trip_byte_by_byte(args: list[tuple[str, str | None, str | None, int | None]]) -> None:
    stream = b"".join(encode_event(d, event=e, id=i, retry=r) for d, e, i, r in args)
    decoder = SSEDecoder()
    events = [event for chunk in bytewise(stream) for event in decoder.feed(chunk)]
    assert events + decoder.close() == expected_events(args)
    last_ids = [i for _, _, i, _ in args if i is not None]
    assert decoder.last_event_id == (last_ids[-1] if last_ids else "")


@SETTINGS
@given(args=st.lists(event_args(), max_size=4), comment=line_text)
def test_comments_between_events_change_nothing(
    args: list[tuple[str, str | None, str | None, int | None]], comment: str
) -> None:
    parts = [encode_comment(comment)]
    for d, e, i, r in args:
        parts += [encode_event(d, event=e, id=i, retry=r), encode_comment(comment)]
    assert decode(b"".join(parts)) == expected_events(args)


# --- chunking independence on arbitrary bytes --------------------------------------------------------


def decode_outcome(chunks: Sequence[bytes], max_event_size: int) -> tuple[list[ServerSentEvent], bool]:
    """Events decoded before any SSEProtocolError, and whether one was raised."""
    decoder = SSEDecoder(max_event_size=max_event_size)
    events: list[ServerSentEvent] = []
    try:
        for chunk in chunks:
            events += decoder.feed(chunk)
        events += decoder.close()
    except SSEProtocolError:
        return events, True
    return events, False


@SETTINGS
@given(stream=st.one_of(sse_like_bytes, st.binary(max_size=64)), chunk_data=st.data())
def test_any_bytes_decode_the_same_in_any_chunking(stream: bytes, chunk_data: st.DataObject) -> None:
    whole = SSEDecoder()
    expected = whole.feed(stream) + whole.close()
    chunked = SSEDecoder()
    events = [event for chunk in chunk_data.draw(chunkings(stream)) for event in chunked.feed(chunk)]
    assert events + chunked.close() == expected
    assert (chunked.last_event_id, chunked.retry) == (whole.last_event_id, whole.retry)
    assert decode(*bytewise(stream)) == expected


@SETTINGS
@given(stream=sse_like_bytes, limit=st.integers(min_value=1, max_value=12), chunk_data=st.data())
def test_size_limit_is_chunking_independent(stream: bytes, limit: int, chunk_data: st.DataObject) -> None:
    unlimited = decode(stream)
    events, raised = decode_outcome([stream], limit)
    chunked_events, chunked_raised = decode_outcome(chunk_data.draw(chunkings(stream)), limit)
    assert chunked_raised == raised
    assert chunked_events == unlimited[: len(chunked_events)]
    if not raised:
        assert events == chunked_events == unlimited


# --- the WHATWG examples -----------------------------------------------------------------------------


def test_whatwg_stock_example() -> None:
    stream = b"data: YHOO\ndata: +2\ndata: 10\n\n"
    assert decode(stream) == [ServerSentEvent("YHOO\n+2\n10")]


def test_whatwg_four_blocks_example() -> None:
    stream = b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n"
    decoder = SSEDecoder()
    assert decoder.feed(stream) == [
        ServerSentEvent("first event", id="1"),
        ServerSentEvent("second event", id=""),
        ServerSentEvent(" third event"),
    ]
    assert decoder.last_event_id == ""


def test_whatwg_empty_data_example() -> None:
    stream = b"data\n\ndata\ndata\n\ndata:"
    assert decode(stream) == [ServerSentEvent(""), ServerSentEvent("\n")]


def test_whatwg_space_after_colon_example() -> None:
    assert decode(b"data:test\n\ndata: test\n\n") == [ServerSentEvent("test"), ServerSentEvent("test")]


def test_whatwg_event_type_example() -> None:
    stream = b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\ndata: plain\n\n"
    assert decode(stream) == [
        ServerSentEvent("73857293", event="add"),
        ServerSentEvent("2153", event="remove"),
        ServerSentEvent("plain"),
    ]


# --- line endings, BOM, UTF-8 ------------------------------------------------------------------------


@pytest.mark.parametrize("ending", [b"\n", b"\r", b"\r\n"])
def test_every_line_ending(ending: bytes) -> None:
    stream = ending.join([b"data: a", b"data: b", b"", b"data: c", b"", b""])
    assert decode(stream) == [ServerSentEvent("a\nb"), ServerSentEvent("c")]


def test_cr_only_stream_fed_byte_by_byte() -> None:
    assert decode(*bytewise(b"id: 1\rdata: a\r\rdata: b\r\r")) == [
        ServerSentEvent("a", id="1"),
        ServerSentEvent("b"),
    ]


def test_crlf_split_across_chunks_is_one_line_ending() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n") == []  # two line endings would have dispatched here
    assert decoder.feed(b"data: b\r\n\r") == [ServerSentEvent("a\nb")]
    assert decoder.feed(b"\ndata: c\n\n") == [ServerSentEvent("c")]


def test_leading_bom_stripped_once() -> None:
    assert decode(b"\xef\xbb\xbfdata: a\n\n") == [ServerSentEvent("a")]
    # A second BOM is part of the first line's field name, so that field is unknown and ignored.
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n") == [ServerSentEvent("b")]


def test_bom_split_across_chunks() -> None:
    assert decode(b"\xef", b"\xbb", b"\xbf", b"data: a\n\n") == [ServerSentEvent("a")]


def test_bom_only_at_stream_start() -> None:
    assert decode(b"data: a\n\n", b"\xef\xbb\xbfdata: b\n\n") == [ServerSentEvent("a")]
    assert decode(b"data: \xef\xbb\xbfx\n\n") == [ServerSentEvent("\ufeffx")]


def test_multibyte_characters_split_across_chunks() -> None:
    stream = "data: é€😀\n\n".encode()
    for cut in range(len(stream) + 1):
        assert decode(stream[:cut], stream[cut:]) == [ServerSentEvent("é€😀")]
    assert decode(*bytewise(stream)) == [ServerSentEvent("é€😀")]


def test_invalid_utf8_is_replaced() -> None:
    assert decode(b"data: a\xffb\xe2\x82\n\n") == [ServerSentEvent("a\ufffdb\ufffd")]


# --- fields ------------------------------------------------------------------------------------------


def test_comments_are_ignored() -> None:
    assert decode(b":hello\n: data: x\ndata: a\n:\n\n") == [ServerSentEvent("a")]


def test_unknown_fields_and_fields_without_colon() -> None:
    assert decode(b"foo: bar\ndata : x\nDATA: y\ndata: a\n\n") == [ServerSentEvent("a")]
    assert decode(b"data\n\n") == [ServerSentEvent("")]


def test_only_one_leading_space_removed_and_later_colons_kept() -> None:
    assert decode(b"data:   a: b\n\n") == [ServerSentEvent("  a: b")]


def test_event_type_resets_after_blank_line_even_without_dispatch() -> None:
    assert decode(b"event: a\n\ndata: x\n\n") == [ServerSentEvent("x")]
    assert decode(b"event:\ndata: x\n\n") == [ServerSentEvent("x")]


@pytest.mark.parametrize("value", [b"10a", b"-1", b"1.5", b"", b" 5", b"\xd9\xa3", b"\xc2\xb2", b"1e3"])
def test_retry_with_non_digits_ignored(value: bytes) -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"retry: " + value + b"\ndata: a\n\n")
    assert events == [ServerSentEvent("a")]
    assert decoder.retry is None


def test_retry_applies_to_this_and_later_events() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"data: a\n\nretry: 0010\ndata: b\n\nretry: x\ndata: c\n\nretry: 0\n\n")
    assert events == [ServerSentEvent("a"), ServerSentEvent("b", retry=10), ServerSentEvent("c", retry=10)]
    assert decoder.retry == 0


def test_huge_retry_never_raises() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"retry: " + b"9" * 10_000 + b"\ndata: a\n\n") == [ServerSentEvent("a")]
    assert decoder.retry is None
    decoder.feed(b"retry: " + b"0" * 10_000 + b"7\n\n")
    assert decoder.retry == 7


def test_id_with_nul_ignored() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 1\n\nid: a\x00b\ndata: x\n\n") == [ServerSentEvent("x")]
    assert decoder.last_event_id == "1"


def test_last_event_id_persists_and_can_be_reset() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 7\ndata: a\n\ndata: b\n\n") == [
        ServerSentEvent("a", id="7"),
        ServerSentEvent("b"),
    ]
    assert decoder.last_event_id == "7"
    decoder.feed(b"id\n\n")
    assert decoder.last_event_id == ""


# --- MCP priming events ------------------------------------------------------------------------------


def test_priming_event_is_dispatched_with_empty_data() -> None:
    encoded = encode_event("", id="x")
    assert encoded in (b"id: x\ndata:\n\n", b"id: x\ndata: \n\n")
    decoder = SSEDecoder()
    assert decoder.feed(encoded) == [ServerSentEvent("", id="x")]
    assert decoder.last_event_id == "x"


@pytest.mark.parametrize("stream", [b"id: x\ndata:\n\n", b"id: x\ndata: \n\n", b"id: x\ndata\n\n"])
def test_priming_event_spellings(stream: bytes) -> None:
    assert decode(stream) == [ServerSentEvent("", id="x")]


def test_id_without_data_updates_last_event_id_but_is_not_dispatched() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: x\n\n") == []
    assert decoder.last_event_id == "x"
    assert decoder.feed(b"data: a\n\n") == [ServerSentEvent("a")]  # the event's own id was not carried over


# --- end of stream -----------------------------------------------------------------------------------


def test_close_discards_incomplete_event() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\nid: 9\nevent: e\ndata: partial\n") == [ServerSentEvent("a")]
    assert decoder.close() == []
    assert decoder.last_event_id == ""  # the unfinished event's id does not count
    assert decoder.close() == []


def test_close_discards_unterminated_line_and_truncated_character() -> None:
    assert decode(b"data: a\n\ndata: b") == [ServerSentEvent("a")]
    assert decode(b"data: a\n\n\xe2\x82") == [ServerSentEvent("a")]


def test_feed_after_close_raises() -> None:
    decoder = SSEDecoder()
    decoder.close()
    with pytest.raises(RuntimeError):
        decoder.feed(b"data: a\n\n")


# --- memory guard ------------------------------------------------------------------------------------


def test_long_line_in_one_chunk_raises() -> None:
    decoder = SSEDecoder(max_event_size=16)
    assert decoder.feed(b"data: " + b"x" * 10 + b"\n\n") == [ServerSentEvent("x" * 10)]
    with pytest.raises(SSEProtocolError):
        decoder.feed(b"data: " + b"x" * 11 + b"\n\n")


def test_long_unterminated_line_raises_before_growing() -> None:
    decoder = SSEDecoder(max_event_size=100)
    with pytest.raises(SSEProtocolError):
        for _ in range(100):
            decoder.feed(b": keep-alive without a line ending ")


def test_large_data_across_many_lines_raises() -> None:
    decoder = SSEDecoder(max_event_size=100)
    with pytest.raises(SSEProtocolError):
        decoder.feed(b"data: 0123456789\n" * 20)


def test_protocol_error_is_value_error() -> None:
    assert issubclass(SSEProtocolError, ValueError)


def test_max_event_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        SSEDecoder(max_event_size=0)


def test_default_limit_accepts_a_large_event() -> None:
    data = "x" * 1_000_000
    assert decode(encode_event(data)) == [ServerSentEvent(data)]


# --- encoding ----------------------------------------------------------------------------------------


def test_encode_field_order_and_line_breaks() -> None:
    encoded = encode_event("a\r\nb\rc\nd", id="1", event="e", retry=5)
    assert encoded == b"id: 1\nevent: e\nretry: 5\ndata: a\ndata: b\ndata: c\ndata: d\n\n"


def test_encode_plain_and_unicode() -> None:
    assert encode_event("hi") == b"data: hi\n\n"
    assert encode_event("é\n") == "data: é\ndata:\n\n".encode()
    assert decode(encode_event("é\n")) == [ServerSentEvent("é\n")]


def test_encode_preserves_leading_spaces() -> None:
    encoded = encode_event(" d", event=" e", id=" i")
    assert decode(encoded) == [ServerSentEvent(" d", event=" e", id=" i")]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"id": "a\nb"},
        {"id": "a\rb"},
        {"id": "a\0b"},
        {"event": "a\nb"},
        {"event": "a\rb"},
        {"retry": -1},
    ],
)
def test_encode_event_rejects_bad_fields(kwargs: dict[str, str | int]) -> None:
    with pytest.raises(ValueError):
        encode_event("x", **kwargs)  # type: ignore[arg-type]


def test_encode_event_rejects_non_int_retry() -> None:
    with pytest.raises(TypeError):
        encode_event("x", retry=True)
    with pytest.raises(TypeError):
        encode_event("x", retry="5")  # type: ignore[arg-type]


def test_encode_rejects_surrogates() -> None:
    with pytest.raises(ValueError):  # UnicodeEncodeError is a ValueError
        encode_event("\ud800")


def test_encode_comment() -> None:
    assert encode_comment() == b":\n\n"
    assert encode_comment("ping") == b": ping\n\n"
    assert decode(encode_comment("ping")) == []
    for bad in ("a\nb", "a\rb"):
        with pytest.raises(ValueError):
            encode_comment(bad)
