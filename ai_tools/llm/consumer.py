"""One attempt's answer stream: bytes in, semantic events out, partial output kept.

:class:`StreamConsumer` is the sink a :class:`~ai_tools.llm.body.BodyReader`
feeds.  It runs the SSE parser, the chunk assembler and the repeated-line
detector, and hands each event to the caller's ``on_event``.  Most chunks of a
streamed answer are one SSE event holding one text fragment; those take a
short lane that allocates almost nothing, which matters with hundreds of
streams in flight (every object a chunk keeps alive brings the next garbage
collection closer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.logger import Logger

from ai_tools.errors import RepeatedLineLoop
from ai_tools.llm.events import ChatResponse, LLMEvent, ServerError, TextDelta
from ai_tools.llm.repetition import RepeatedLineDetector, RepetitionConfig
from ai_tools.llm.sse import SSEParser
from ai_tools.llm.stream import ChatStreamAssembler

log = Logger()

EventCallback = Callable[[LLMEvent], object]


def emit_event(on_event: EventCallback | None, event: LLMEvent) -> None:
    """Give ``event`` to ``on_event``; a failing callback is logged, not fatal."""
    if on_event is None:
        return
    try:
        on_event(event)
    except Exception:
        log.failure("on_event callback failed on {event!r}", event=event)


class StreamServerError(Exception):
    """The stream carried an error object (a ServerError event)."""

    def __init__(self, error: Any) -> None:
        super().__init__(error)
        self.error = error


class StreamConsumer:
    """Consumes one attempt's body; ``produced`` says whether text reached the caller.

    ``sink`` raises :class:`~ai_tools.errors.RepeatedLineLoop`,
    :class:`StreamServerError` or
    :class:`~ai_tools.llm.stream.StreamProtocolError`; the reader then aborts
    the connection.  Once ``reader`` (set by its owner) is done, dispatching
    stops at once, e.g. when ``on_event`` cancelled the request.
    """

    __slots__ = (
        "_detect",
        "_on_event",
        "assembler",
        "detector",
        "parser",
        "produced",
        "reader",
    )

    def __init__(self, on_event: EventCallback | None, repetition: RepetitionConfig) -> None:
        self.parser = SSEParser()
        self.assembler = ChatStreamAssembler()
        self.detector = RepeatedLineDetector(repetition)
        self._detect = repetition.enabled
        self._on_event = on_event
        self.produced = False
        self.reader: Any = None

    @property
    def text(self) -> str:
        """The text received so far (the partial output on failure)."""
        return self.assembler.text

    def emit(self, event: LLMEvent) -> None:
        """Give ``event`` to the caller; a failing callback is logged, not fatal."""
        on_event = self._on_event
        if on_event is None:
            return
        try:
            on_event(event)
        except Exception:
            log.failure("on_event callback failed on {event!r}", event=event)

    def text_delta(self, delta: TextDelta) -> None:
        """Deliver a text fragment and watch it for loops."""
        self.produced = True
        if self._on_event is not None:
            self.emit(delta)
        if self._detect and self.detector.feed(delta.text):
            raise RepeatedLineLoop(
                f"the model repeated itself ({self.detector.repeated!r})", self.assembler.text
            )

    def sink(self, data: bytes) -> None:
        """Consume one chunk of the body."""
        payload = self.parser.single_data(data)
        if payload is not None:
            delta = self.assembler.text_only(payload)
            if delta is not None:
                # text_delta(), inlined: this runs for nearly every chunk.
                self.produced = True
                if self._on_event is not None:
                    self.emit(delta)
                if self._detect and self.detector.feed(delta.text):
                    raise RepeatedLineLoop(
                        f"the model repeated itself ({self.detector.repeated!r})",
                        self.assembler.text,
                    )
            else:
                self.dispatch(self.assembler.feed_data(payload))
            return
        for sse in self.parser.feed(data):
            self.dispatch(self.assembler.feed(sse))
            if self.reader is not None and self.reader.done:
                return

    def dispatch(self, events: list[LLMEvent]) -> None:
        """Deliver events in order; a ServerError ends the stream."""
        for event in events:
            if self.reader is not None and self.reader.done:
                return
            if type(event) is TextDelta:
                self.text_delta(event)
            elif type(event) is ServerError:
                self.emit(event)
                raise StreamServerError(event.error)
            else:
                self.emit(event)

    def close(self) -> bool:
        """End of body: flush the parser; True if the answer is complete."""
        for sse in self.parser.close():
            self.dispatch(self.assembler.feed(sse))
        if not self.assembler.finished:
            if self.assembler.finish_reason is None:
                return False
            self.dispatch(self.assembler.finish())
        return True

    def looped(self) -> bool:
        """Whether the whole text (last line included) is a loop."""
        return self._detect and self.detector.finish()

    def response(self) -> ChatResponse:
        """The answer assembled from the stream."""
        return self.assembler.response()
