"""A byte-level parser for Server-Sent Events (the framing of streamed completions).

Bytes arrive in arbitrary chunks: an event, a line, a ``\\r\\n`` pair or a
multi-byte UTF-8 character may be split anywhere.  The parser splits each
chunk into lines on ``\\n``, ``\\r\\n`` or ``\\r`` *before* decoding (line breaks
are ASCII, so a character is never cut in two), skips ``:`` comments, joins
multiple ``data:`` lines with ``\\n`` and dispatches an event on each blank
line, as the WHATWG EventSource algorithm does.

Bounded and linear: the unfinished last line of a chunk is kept as a list of
pieces, joined once when its line ends (never copied per chunk), and a line
longer than ``max_line_bytes`` is a :class:`SSELineTooLong` error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

DEFAULT_MAX_LINE_BYTES = 1024 * 1024
_BOM = b"\xef\xbb\xbf"


class SSEEvent(NamedTuple):
    """One dispatched event: its data (lines joined), its type and the last id."""

    data: str
    event: str = "message"
    id: str | None = None


class SSELineTooLong(ValueError):
    """A line of the stream is longer than the parser's limit."""


Dispatch = Callable[[str, str, "str | None"], object]
"""Receives each event as it completes: ``(data, event type, last id)``."""


class SSEParser:
    """Incremental SSE parser: ``feed(bytes, dispatch)``, ``close(dispatch)``.

    Each completed event goes to ``dispatch(data, event, id)`` at once (no
    object per event: a streamed answer is thousands of them);
    :meth:`events` collects them as :class:`SSEEvent` values instead.
    """

    __slots__ = (
        "_at_start",
        "_data",
        "_event",
        "_last_id",
        "_max_line",
        "_pending",
        "_pending_size",
        "_skip_lf",
        "retry_ms",
    )

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._max_line = max_line_bytes
        self._pending: list[bytes] = []  # pieces of the unfinished line
        self._pending_size = 0
        self._skip_lf = False  # the last chunk ended in \r: a leading \n is its pair
        self._at_start = True  # a byte-order mark may open the first line
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None
        self.retry_ms: int | None = None
        """The last ``retry:`` field (milliseconds), for callers that reconnect."""

    @property
    def last_event_id(self) -> str | None:
        """The last ``id:`` field seen (an event without data may set it)."""
        return self._last_id

    def feed(self, chunk: bytes, dispatch: Dispatch) -> None:
        """Parse ``chunk``, dispatching the events it completes.

        Raises :class:`SSELineTooLong` when a line grows past the limit.
        """
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            lines = chunk.splitlines()
            self._skip_lf = chunk[-1:] == b"\r"
            tail = b"" if chunk[-1:] in (b"\n", b"\r") else lines.pop()
        else:
            lines = chunk.split(b"\n")
            tail = lines.pop()  # the unfinished last line (empty after a final \n)
        if lines:
            if self._pending:
                lines[0] = self._take_pending(lines[0])
            if self._at_start:
                lines[0] = self._skip_bom(lines[0])
            self._lines(lines, dispatch)
        if tail:
            self._keep(tail)

    def close(self, dispatch: Dispatch) -> None:
        """End of stream: an unterminated last line is processed, a half event dropped.

        Per the EventSource algorithm an event is only dispatched by a blank
        line, so data without one is incomplete and discarded.
        """
        if self._pending:
            line = self._take_pending(b"")
            self._lines([self._skip_bom(line) if self._at_start else line], dispatch)
        self._data = []
        self._event = ""

    def events(self, chunk: bytes, end: bool = False) -> list[SSEEvent]:
        """The events ``chunk`` completes (and, with ``end``, the stream's end), as values."""
        found: list[SSEEvent] = []

        def collect(data: str, event: str, last_id: str | None) -> None:
            found.append(SSEEvent(data, event, last_id))

        self.feed(chunk, collect)
        if end:
            self.close(collect)
        return found

    def _skip_bom(self, first: bytes) -> bytes:
        """The first line without a byte-order mark."""
        self._at_start = False
        return first[3:] if first[:3] == _BOM else first

    def _keep(self, piece: bytes) -> None:
        """Keep the start of an unfinished line (a bounded list of pieces)."""
        self._pending_size += len(piece)
        if self._pending_size > self._max_line:
            raise self._too_long()
        self._pending.append(piece)

    def _take_pending(self, end: bytes) -> bytes:
        self._pending.append(end)
        line = b"".join(self._pending)
        self._pending = []
        self._pending_size = 0
        return line

    def _too_long(self) -> SSELineTooLong:
        return SSELineTooLong(f"a line of the event stream is longer than "
                              f"{self._max_line} bytes")

    def _lines(self, lines: list[bytes], dispatch: Dispatch) -> None:
        """Interpret complete lines (without their line breaks), in order."""
        max_line = self._max_line
        for raw in lines:
            if len(raw) > max_line:
                raise self._too_long()
            if raw[:5] == b"data:":
                value = raw[6:] if raw[5:6] == b" " else raw[5:]
                self._data.append(value.decode("utf-8", "replace"))
            elif not raw:  # a blank line dispatches the event
                if self._data:
                    data, self._data = self._data, []
                    dispatch("\n".join(data), self._event or "message", self._last_id)
                self._event = ""
            elif raw[:1] != b":":  # not a comment (keep-alive)
                self._field(raw.decode("utf-8", "replace"))

    def _field(self, line: str) -> None:
        field, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\x00" not in value:
            self._last_id = value
        elif field == "retry" and value.isascii() and value.isdigit() and len(value) <= 9:
            self.retry_ms = int(value)  # MCP's Streamable HTTP reconnects by it
        # Unknown fields are ignored.
