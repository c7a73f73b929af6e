"""The byte-level SSE parser: framing rules, any-chunking invariance, its bounds."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.llm.sse import SSEEvent, SSELineTooLong, SSEParser


def parse_all(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.events(chunk))
    events.extend(parser.events(b"", end=True))
    return events


def test_single_event() -> None:
    """A data line and a blank line make one event."""
    assert parse_all([b"data: hello\n\n"]) == [SSEEvent("hello")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    """Several data: lines of one event are joined with \\n."""
    assert parse_all([b"data: a\ndata: b\ndata:c\n\n"]) == [SSEEvent("a\nb\nc")]


def test_comments_and_unknown_fields_are_skipped() -> None:
    """: comments (keep-alives) and unknown fields produce nothing."""
    stream = b": keep-alive\n\nfoo: bar\nretry: 10\ndata: x\n: mid comment\n\n"
    assert parse_all([stream]) == [SSEEvent("x")]


def test_event_type_and_id() -> None:
    """event: and id: fields are carried; the id persists to later events."""
    stream = b"event: error\nid: 7\ndata: {}\n\ndata: next\n\n"
    assert parse_all([stream]) == [SSEEvent("{}", "error", "7"), SSEEvent("next", "message", "7")]


def test_crlf_and_cr_line_endings() -> None:
    """\\r\\n and lone \\r end lines like \\n does."""
    assert parse_all([b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"]) == [
        SSEEvent("a"),
        SSEEvent("b"),
        SSEEvent("c"),
    ]


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    """A \\r at a chunk end followed by \\n must not make an extra blank line."""
    assert parse_all([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [SSEEvent("a\nb")]


def test_multibyte_utf8_split_across_chunks() -> None:
    """A character cut between two chunks is decoded whole."""
    raw = "data: héllo → wörld 🐍\n\n".encode()
    cut = raw.index("🐍".encode()) + 2
    assert parse_all([raw[:cut], raw[cut:]]) == [SSEEvent("héllo → wörld 🐍")]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    """Bytes that are not UTF-8 become U+FFFD instead of an exception."""
    assert parse_all([b"data: \xff\xfe\n\n"]) == [SSEEvent("\ufffd\ufffd")]


def test_unterminated_event_is_dropped_at_close() -> None:
    """Data without the closing blank line is incomplete and discarded."""
    assert parse_all([b"data: done\n\ndata: half"]) == [SSEEvent("done")]


def test_bom_is_skipped_even_when_split() -> None:
    """A UTF-8 byte-order mark at the start is not part of the first field name."""
    assert parse_all([b"\xef\xbb", b"\xbfdata: x\n\n"]) == [SSEEvent("x")]


def test_data_without_colon_and_single_space_strip() -> None:
    """'data' alone is an empty value; only one leading space is removed."""
    assert parse_all([b"data\n\ndata:  two\n\n"]) == [SSEEvent(""), SSEEvent(" two")]


def test_done_marker_is_plain_data() -> None:
    """[DONE] is an ordinary event at this level (the assembler interprets it)."""
    assert parse_all([b"data: [DONE]\n\n"]) == [SSEEvent("[DONE]")]


# -- property: chunking never changes the result ---------------------------------------

_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
    max_size=20,
)
_event = st.fixed_dictionaries(
    {
        "data": st.lists(_text, min_size=1, max_size=3),
        "event": st.one_of(st.none(), _text.filter(lambda s: s != "")),
        "comment": st.booleans(),
    }
)


def _serialise(events: list[dict], newline: bytes, bom: bool) -> bytes:
    out = [b"\xef\xbb\xbf"] if bom else []
    for ev in events:
        if ev["comment"]:
            out.append(b": ping" + newline)
        if ev["event"] is not None:
            out.append(b"event: " + ev["event"].encode() + newline)
        for line in ev["data"]:
            out.append(b"data: " + line.encode() + newline)
        out.append(newline)
    return b"".join(out)


@given(
    events=st.lists(_event, max_size=6),
    newline=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    bom=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_any_chunking_gives_the_same_events(
    events: list[dict], newline: bytes, bom: bool, cuts: list[int]
) -> None:
    """Splitting a valid stream anywhere (inside CRLF, inside a character) changes nothing."""
    raw = _serialise(events, newline, bom)
    positions = sorted({c % (len(raw) + 1) for c in cuts})
    chunks = [raw[a:b] for a, b in zip([0, *positions], [*positions, len(raw)], strict=True)]
    expected = [SSEEvent("\n".join(ev["data"]), ev["event"] or "message") for ev in events]
    assert parse_all([raw]) == expected
    assert parse_all(chunks) == expected


@given(st.binary(max_size=300), st.lists(st.integers(min_value=0, max_value=300), max_size=8))
def test_arbitrary_bytes_never_raise_and_chunking_is_invariant(raw: bytes, cuts: list[int]) -> None:
    """Garbage in: no exception, and the same events whatever the chunking."""
    positions = sorted({c % (len(raw) + 1) for c in cuts})
    chunks = [raw[a:b] for a, b in zip([0, *positions], [*positions, len(raw)], strict=True)]
    assert parse_all(chunks) == parse_all([raw])


# -- bounds: a maximum line length, and no copy of the pending line per chunk --------------


def test_a_line_longer_than_the_limit_is_refused() -> None:
    """Complete or still arriving, a line past max_line_bytes raises SSELineTooLong."""
    with pytest.raises(SSELineTooLong, match="longer than 100 bytes"):
        SSEParser(max_line_bytes=100).events(b"data: " + b"x" * 200 + b"\n\n")
    parser = SSEParser(max_line_bytes=100)
    parser.events(b"data: " + b"x" * 60)
    with pytest.raises(SSELineTooLong):
        parser.events(b"x" * 60)  # no line end yet: refused as it grows
    ok = SSEParser(max_line_bytes=100)
    assert ok.events(b"data: " + b"x" * 94 + b"\n\n") == [SSEEvent("x" * 94)]


def test_a_line_arriving_in_pieces_is_not_copied_per_piece() -> None:
    """A long line fed in small chunks: no chunk allocates the whole pending line again
    (the old buffer copied it per chunk, quadratic in its length)."""
    parser = SSEParser(max_line_bytes=1024 * 1024)
    parser.events(b"data: ")
    piece = b"y" * 1024
    tracemalloc.start()
    try:
        worst = 0
        for _ in range(256):  # a 256 KiB line
            before, _peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            parser.events(piece)
            worst = max(worst, tracemalloc.get_traced_memory()[1] - before)
    finally:
        tracemalloc.stop()
    assert worst < 16 * 1024, f"one chunk allocated {worst} bytes"
    assert parser.events(b"\n\n") == [SSEEvent("y" * 256 * 1024)]
