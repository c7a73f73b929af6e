"""A byte-level parser for Server-Sent Events (the framing of streamed completions).

Bytes arrive in arbitrary chunks: an event, a line, a ``\\r\\n`` pair or a
multi-byte UTF-8 character may be split anywhere.  The parser buffers bytes,
splits lines on ``\\n``, ``\\r\\n`` or ``\\r`` *before* decoding (line breaks are
ASCII, so a character is never cut in two), skips ``:`` comments, joins
multiple ``data:`` lines with ``\\n`` and dispatches an event on each blank line,
as the WHATWG EventSource algorithm does.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class SSEEvent:
    """One dispatched event: its type, its data (lines joined) and last id."""

    data: str
    event: str = "message"
    id: str | None = None


class SSEParser:
    """Incremental SSE parser: ``feed(bytes) -> [SSEEvent]``, ``close() -> [SSEEvent]``."""

    __slots__ = ("_at_start", "_buffer", "_data", "_event", "_idle", "_last_id", "_skip_lf")

    def __init__(self) -> None:
        self._buffer = b""
        self._skip_lf = False
        self._at_start = True
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None
        self._idle = False  # True when no partial line or field is pending

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk``; return the events completed by it."""
        events = self._feed(chunk)
        self._idle = not (
            self._at_start or self._skip_lf or self._buffer or self._event or self._data
        )
        return events

    def _feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buffer = self._buffer + chunk if self._buffer else chunk
        if self._at_start:
            if len(buffer) < 3 and b"\xef\xbb\xbf".startswith(buffer):
                self._buffer = buffer
                return []
            self._at_start = False
            if buffer.startswith(b"\xef\xbb\xbf"):
                buffer = buffer[3:]
        if buffer[:5] == b"data:":
            data = self._single(buffer)
            if data is not None:
                return [SSEEvent(data, self._take_event(), self._last_id)]
        events: list[SSEEvent] = []
        if b"\r" not in buffer:
            # The common case (LF line ends only): split once, handle data lines inline.
            lines = buffer.split(b"\n")
            self._buffer = lines.pop()
            for raw in lines:
                if not raw:
                    if self._data:
                        events.append(
                            SSEEvent("\n".join(self._data), self._event or "message", self._last_id)
                        )
                        self._data = []
                    self._event = ""
                elif raw[:5] == b"data:":
                    value = raw[6:] if raw[5:6] == b" " else raw[5:]
                    self._data.append(value.decode("utf-8", "replace"))
                else:
                    self._line(raw, events)
            return events
        lines = buffer.splitlines(keepends=True)
        if lines and not lines[-1].endswith((b"\n", b"\r")):
            self._buffer = lines.pop()
        else:
            self._buffer = b""
        if lines and lines[-1].endswith(b"\r"):
            # A lone CR ends a line; if the next chunk starts with LF, the pair
            # was one CRLF and that LF must not count as a blank line.
            self._skip_lf = True
        for raw in lines:
            self._line(raw.rstrip(b"\r\n"), events)
        return events

    def single_data(self, chunk: bytes) -> str | None:
        """Shortcut for the commonest chunk: exactly one one-line ``data:`` event.

        Returns its data when ``chunk`` is that and the parser holds nothing
        pending (no partial line, no ``event:``/``data:`` field waiting);
        otherwise returns None and consumes nothing, so the caller uses
        :meth:`feed`.  Saves building an :class:`SSEEvent` per chunk.
        """
        if (
            chunk.startswith(b"data:")
            and chunk.endswith(b"\n\n")
            and chunk.count(b"\n") == 2
            and self._idle
            and b"\r" not in chunk
        ):
            if chunk[5] == 32:  # one optional space after the colon
                return chunk[6:-2].decode("utf-8", "replace")
            return chunk[5:-2].decode("utf-8", "replace")
        return None

    def _single(self, buffer: bytes) -> str | None:
        if (
            buffer.endswith(b"\n\n")
            and buffer.count(b"\n") == 2
            and not self._data
            and b"\r" not in buffer
        ):
            self._buffer = b""
            value = buffer[6:-2] if buffer[5:6] == b" " else buffer[5:-2]
            return value.decode("utf-8", "replace")
        return None

    def _take_event(self) -> str:
        event = self._event or "message"
        self._event = ""
        return event

    def close(self) -> list[SSEEvent]:
        """End of stream: an unterminated last line is processed, a half event dropped.

        Per the EventSource algorithm an event is only dispatched by a blank
        line, so data without one is incomplete and discarded.
        """
        events: list[SSEEvent] = []
        if self._buffer:
            self._line(self._buffer, events)
            self._buffer = b""
        self._data = []
        self._event = ""
        self._idle = not (self._at_start or self._skip_lf)
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            if self._data:
                events.append(
                    SSEEvent("\n".join(self._data), self._event or "message", self._last_id)
                )
            self._data = []
            self._event = ""
            return
        if raw[:1] == b":":
            return
        line = raw.decode("utf-8", "replace")
        field, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\x00" not in value:
                self._last_id = value
        # "retry" and unknown fields are ignored: reconnection is ours to decide.
