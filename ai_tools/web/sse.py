"""Server-sent events: the frames, and one :class:`EventStream` per client of ``GET /events``.

Every event is encoded once, as a :class:`Frame` (``id:``/``event:``/``data:``
bytes, the data one line of JSON), and the same bytes go to every stream that
wants it (:mod:`ai_tools.web.event_hub` does the fan-out).  A stream follows
its connection's flow control: while the client does not read (the transport
paused us) frames wait, bounded by bytes (``buffer_limit``); past it the
oldest are dropped, and when the client reads again it first gets a
``dropped`` event saying how many it missed.  A stream that stays paused
(:meth:`EventStream.stalled`) is closed by the hub.  When the client goes
away the stream runs its ``on_close`` callbacks.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable

import attrs
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.server import Request
from zope.interface import implementer

from ai_tools.web.answers import json_default

__all__ = ["EventStream", "Frame", "format_comment", "format_event"]

log = Logger()

OPENING = b"retry: 3000\n: connected\n\n"

_encode = json.JSONEncoder(default=json_default, separators=(",", ":")).encode
"""Built once: ``json.dumps`` with options builds an encoder per call (every event is encoded)."""


def format_event(event_id: int | None, event_type: str, data: object) -> bytes:
    """One SSE frame: ``id`` (unless None), ``event`` and the JSON ``data`` on one line."""
    payload = _encode(data)
    kind = str(event_type)
    if "\r" in kind or "\n" in kind:
        kind = kind.replace("\r", "").replace("\n", "")
    kind = kind or "message"
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {payload}\n\n".encode()


def format_comment(text: str) -> bytes:
    """An SSE comment line (ignored by clients; keeps the connection alive)."""
    clean = text.replace("\r", " ").replace("\n", " ")
    return f": {clean}\n\n".encode()


KEEP_ALIVE = format_comment("keep-alive")


@attrs.frozen
class Frame:
    """One encoded event, shared by every stream it goes to.

    ``owners`` are the assistants it concerns (for ``?assistant=``): the one
    whose loop it is, or those who heard or said a world message.
    """

    type: str
    owners: frozenset[str]
    data: bytes
    id: int | None = None
    """The event id (None for notices that are not events of the service: ``dropped``, ``gap``)."""
    relayed: bool = False
    """An event of another worker's assistant, passed on by this worker (never to a
    stream another worker opened here: no second hop)."""


@implementer(IPushProducer)
@attrs.define(eq=False)
class EventStream:
    """One open ``text/event-stream`` response.

    ``only``/``types`` are the client's filters; ``buffer_limit`` bounds the
    bytes held while the client does not read; ``address`` is the client's
    address when it counts against a per-address cap (None on loopback);
    ``local_only``: another worker opened it, it gets no relayed frames.
    """

    request: Request
    clock: IReactorTime
    only: str | None = None
    types: frozenset[str] | None = None
    buffer_limit: int = 256 * 1024
    address: str | None = None
    local_only: bool = False
    dropped: int = attrs.field(default=0, init=False)
    """Events dropped in all (the client was told each time it read again)."""
    closed: bool = attrs.field(default=False, init=False)
    _paused_since: float | None = attrs.field(default=None, init=False)
    _queue: deque[Frame] = attrs.field(factory=deque, init=False)
    _queued_bytes: int = attrs.field(default=0, init=False)
    _unreported_drops: int = attrs.field(default=0, init=False)
    _on_close: list[Callable[[], object]] = attrs.field(factory=list, init=False)

    def start(self) -> None:
        """Send the headers and an opening comment; follow the connection's flow control."""
        request = self.request
        request.setResponseCode(200)
        request.setHeader(b"content-type", b"text/event-stream; charset=utf-8")
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"x-accel-buffering", b"no")
        request.registerProducer(self, True)
        request.notifyFinish().addBoth(self._finished)
        self._write(OPENING)

    def on_close(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` once when the stream ends (client gone or :meth:`close`)."""
        if self.closed:
            self._run(callback)
        else:
            self._on_close.append(callback)

    def wants(self, kind: str, owners: frozenset[str]) -> bool:
        """Whether this client's filters keep an event of ``kind`` concerning ``owners``."""
        if self.types is not None and kind not in self.types:
            return False
        return self.only is None or self.only in owners

    def takes(self, frame: Frame) -> bool:
        """Whether ``frame`` goes to this stream: its filters keep it, and it is not a
        relayed frame for a stream another worker opened."""
        return not (frame.relayed and self.local_only) and self.wants(frame.type, frame.owners)

    def send(self, frame: Frame) -> None:
        """Send one frame (held back, within the byte budget, while the client does not read)."""
        if self.closed:
            return
        if self._paused_since is None:
            self._write(frame.data)
            return
        self._queue.append(frame)
        self._queued_bytes += len(frame.data)
        while self._queued_bytes > self.buffer_limit and self._queue:
            oldest = self._queue.popleft()
            self._queued_bytes -= len(oldest.data)
            self.dropped += 1
            self._unreported_drops += 1

    @property
    def buffered(self) -> int:
        """Bytes of events held back now."""
        return self._queued_bytes

    def keep_alive(self) -> None:
        """Send a keep-alive comment (not into a paused connection)."""
        if self._paused_since is None:
            self._write(KEEP_ALIVE)

    def stalled(self, now: float, limit: float) -> bool:
        """Whether the client has read nothing for ``limit`` seconds while we wait on it."""
        return self._paused_since is not None and now - self._paused_since >= limit

    def close(self) -> None:
        """End the response (the server is stopping)."""
        if self.closed:
            return
        try:
            self.request.unregisterProducer()
            self.request.finish()
        except Exception:
            log.failure("Closing an event stream failed")
        self._cleanup()

    def abort(self) -> None:
        """Drop the connection of a client that does not read (nothing more can reach it)."""
        if self.closed:
            return
        transport = getattr(self.request, "transport", None)
        self._cleanup()
        abort = getattr(transport, "abortConnection", None)
        if abort is not None:
            abort()
        elif transport is not None:
            transport.loseConnection()

    # -- IPushProducer (the connection's flow control) -------------------------

    def pauseProducing(self) -> None:
        """The client is not keeping up: hold frames back."""
        if self._paused_since is None:
            self._paused_since = self.clock.seconds()

    def resumeProducing(self) -> None:
        """The client reads again: say how many were dropped, then send what waited."""
        self._paused_since = None
        if self._unreported_drops:
            missed, self._unreported_drops = self._unreported_drops, 0
            self._write(format_event(None, "dropped", {"missed": missed}))
        while self._queue and self._paused_since is None and not self.closed:
            frame = self._queue.popleft()
            self._queued_bytes -= len(frame.data)
            self._write(frame.data)

    def stopProducing(self) -> None:
        """The connection is going away."""
        self._cleanup()

    # -- internals ------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            self.request.write(data)
        except Exception:
            log.failure("Writing to an event stream failed; closing it")
            self._cleanup()

    def _finished(self, result: object) -> None:
        self._cleanup()
        if isinstance(result, Failure):
            return None  # the client went away: that is how streams end
        return None

    def _cleanup(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._queue.clear()
        self._queued_bytes = 0
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            self._run(callback)

    @staticmethod
    def _run(callback: Callable[[], object]) -> None:
        try:
            callback()
        except Exception:
            log.failure("An event stream's close callback failed")
