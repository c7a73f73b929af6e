"""Server-sent events: one :class:`EventStream` per client of ``GET /events``.

A stream writes ``id:``/``event:``/``data:`` frames (the data is one line of
JSON), a ``: keep-alive`` comment every ``keepalive`` seconds so proxies and
clients see the connection is alive, and follows the connection's flow
control: while the client does not read (the transport paused us) frames wait
in a bounded queue, the oldest dropped first, and the client is told how many
it missed with a ``dropped`` event when it catches up.  When the client goes
away the stream runs its ``on_close`` callbacks (the observers unsubscribe)
and stops its timer.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
from twisted.internet import task
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

__all__ = ["EventStream", "format_comment", "format_event"]

log = Logger()


def _default(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


def format_event(event_id: int, event_type: str, data: Any) -> bytes:
    """One SSE frame: ``id``, ``event`` and the JSON ``data`` on one line."""
    payload = json.dumps(data, default=_default, separators=(",", ":"))
    kind = "".join(c for c in str(event_type) if c not in "\r\n") or "message"
    return f"id: {event_id}\nevent: {kind}\ndata: {payload}\n\n".encode()


def format_comment(text: str) -> bytes:
    """An SSE comment line (ignored by clients; keeps the connection alive)."""
    clean = text.replace("\r", " ").replace("\n", " ")
    return f": {clean}\n\n".encode()


@implementer(IPushProducer)
@attrs.define(eq=False)
class EventStream:
    """One open ``text/event-stream`` response.

    ``request`` is the twisted.web request, ``clock`` drives the keep-alive
    timer, ``max_queue`` bounds the frames held while the client is slow.
    """

    request: Any
    clock: Any
    keepalive: float = 15.0
    max_queue: int = 1000
    sent: int = attrs.field(default=0, init=False)
    dropped: int = attrs.field(default=0, init=False)
    closed: bool = attrs.field(default=False, init=False)
    _paused: bool = attrs.field(default=False, init=False)
    _queue: deque[bytes] = attrs.field(factory=deque, init=False)
    _unreported_drops: int = attrs.field(default=0, init=False)
    _timer: task.LoopingCall | None = attrs.field(default=None, init=False)
    _on_close: list[Callable[[], Any]] = attrs.field(factory=list, init=False)

    def start(self) -> None:
        """Send the headers and an opening comment; start the keep-alive timer."""
        request = self.request
        request.setResponseCode(200)
        request.setHeader(b"content-type", b"text/event-stream; charset=utf-8")
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"x-accel-buffering", b"no")
        request.registerProducer(self, True)
        request.notifyFinish().addBoth(self._finished)
        self._write(b"retry: 3000\n" + format_comment("connected"))
        if self.keepalive > 0:
            timer = task.LoopingCall(self._keep_alive)
            timer.clock = self.clock
            self._timer = timer
            timer.start(self.keepalive, now=False).addErrback(
                lambda f: log.failure("SSE keep-alive timer failed", f))

    def on_close(self, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` once when the stream ends (client gone or :meth:`close`)."""
        if self.closed:
            self._run(callback)
        else:
            self._on_close.append(callback)

    def send(self, event_type: str, data: Any) -> None:
        """Send one event (queued while the client is not reading)."""
        if self.closed:
            return
        self.sent += 1
        frame = format_event(self.sent, event_type, data)
        if self._paused:
            self._queue.append(frame)
            if len(self._queue) > self.max_queue:
                self._queue.popleft()
                self.dropped += 1
                self._unreported_drops += 1
            return
        self._write(frame)

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

    # -- IPushProducer (the connection's flow control) -------------------------

    def pauseProducing(self) -> None:
        """The client is not keeping up: hold frames back."""
        self._paused = True

    def resumeProducing(self) -> None:
        """The client reads again: send what waited (and how much was dropped)."""
        self._paused = False
        if self._unreported_drops:
            missed, self._unreported_drops = self._unreported_drops, 0
            self.sent += 1
            self._write(format_event(self.sent, "dropped", {"missed": missed}))
        while self._queue and not self._paused and not self.closed:
            self._write(self._queue.popleft())

    def stopProducing(self) -> None:
        """The connection is going away."""
        self._cleanup()

    # -- internals ------------------------------------------------------------------

    def _keep_alive(self) -> None:
        if not self._paused:
            self._write(format_comment("keep-alive"))

    def _write(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            self.request.write(data)
        except Exception:
            log.failure("Writing to an event stream failed; closing it")
            self._cleanup()

    def _finished(self, result: Any) -> None:
        self._cleanup()
        if isinstance(result, Failure):
            return None  # the client went away: that is how streams end
        return None

    def _cleanup(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._queue.clear()
        if self._timer is not None and self._timer.running:
            self._timer.stop()
        self._timer = None
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            self._run(callback)

    @staticmethod
    def _run(callback: Callable[[], Any]) -> None:
        try:
            callback()
        except Exception:
            log.failure("An event stream's close callback failed")
