"""The byte-level SSE parser: framing rules and any-chunking invariance."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ai_tools.llm.sse import SSEEvent, SSEParser


def parse_all(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
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


@given(
    events=st.lists(_event, max_size=6),
    newline=st.sampled_from([b"\n", b"\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_single_data_shortcut_agrees_with_feed(
    events: list[dict], newline: bytes, cuts: list[int]
) -> None:
    """Taking the single-event shortcut where it applies yields the same data and types."""
    raw = _serialise(events, newline, bom=False)
    positions = sorted({c % (len(raw) + 1) for c in cuts})
    chunks = [raw[a:b] for a, b in zip([0, *positions], [*positions, len(raw)], strict=True)]
    parser = SSEParser()
    got: list[SSEEvent] = []
    for chunk in chunks:
        data = parser.single_data(chunk)
        if data is not None:
            got.append(SSEEvent(data))
        else:
            got.extend(parser.feed(chunk))
    got.extend(parser.close())
    assert got == parse_all([raw])


def test_single_data_declines_when_state_is_pending() -> None:
    """A pending event type or partial line makes the shortcut step aside."""
    parser = SSEParser()
    parser.feed(b": start\n\n")
    assert parser.single_data(b"data: x\n\n") == "x"
    assert parser.single_data(b"data: a\ndata: b\n\n") is None
    parser.feed(b"event: error\n")
    assert parser.single_data(b"data: y\n\n") is None
    assert parser.feed(b"data: y\n\n") == [SSEEvent("y", "error")]
