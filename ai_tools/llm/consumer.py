"""One attempt's answer stream: bytes in, semantic events out, partial output kept.

:class:`StreamConsumer` is the sink a :class:`~ai_tools.llm.body.BodyReader`
feeds.  It runs the SSE parser, the chunk assembler and the repeated-line
detector, tells the reader when an event made progress (a ``: keep-alive``
comment does not), and hands each event to the caller's ``on_event``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.logger import Logger

from ai_tools.errors import RepeatedLineLoop
from ai_tools.llm.events import ChatResponse, LLMEvent, ServerError, TextDelta
from ai_tools.llm.profile import AnswerLimits
from ai_tools.llm.redaction import NO_SECRET, Redactor
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

    def __init__(self, error: object) -> None:
        super().__init__(error)
        self.error = error


class StreamConsumer:
    """Consumes one attempt's body; ``produced`` says whether text reached the caller.

    ``sink`` raises :class:`~ai_tools.errors.RepeatedLineLoop`,
    :class:`StreamServerError`, :class:`~ai_tools.llm.sse.SSELineTooLong` or
    :class:`~ai_tools.llm.stream.StreamProtocolError`; the reader then aborts
    the connection.  Once ``reader`` (set by its owner) is done, dispatching
    stops at once, e.g. when ``on_event`` cancelled the request.  Events
    leave through ``redactor`` (no API key in what the caller sees).
    """

    __slots__ = (
        "_detect",
        "_on_event",
        "_redactor",
        "assembler",
        "detector",
        "parser",
        "produced",
        "reader",
    )

    def __init__(
        self,
        on_event: EventCallback | None,
        repetition: RepetitionConfig,
        limits: AnswerLimits | None = None,
        redactor: Redactor = NO_SECRET,
    ) -> None:
        limits = AnswerLimits() if limits is None else limits
        self.parser = SSEParser(limits.line_bytes)
        self.assembler = ChatStreamAssembler(limits.answer_chars)
        self.detector = RepeatedLineDetector(repetition)
        self._detect = repetition.enabled
        self._on_event = on_event
        self._redactor = redactor
        self.produced = False
        self.reader: Any = None

    @property
    def text(self) -> str:
        """The text received so far (the partial output on failure)."""
        return self.assembler.text

    def sink(self, data: bytes) -> None:
        """Consume one chunk of the body."""
        self.parser.feed(data, self._sse_event)

    def _sse_event(self, data: str, event: str, last_id: str | None) -> None:
        """One SSE event: progress for the reader, chunk events for the caller."""
        reader = self.reader
        if reader is not None:
            if reader.done:
                return
            reader.progressed()
        self.dispatch(self.assembler.feed_data(data, event))

    def dispatch(self, events: list[LLMEvent]) -> None:
        """Deliver events in order; a ServerError ends the stream."""
        for event in events:
            if self.reader is not None and self.reader.done:
                return
            kind = type(event)
            if kind is TextDelta:
                self._text_delta(event)  # type: ignore[arg-type]
            elif kind is ServerError:
                error = self._redactor.value(event.error)  # type: ignore[union-attr]
                emit_event(self._on_event, ServerError(error))
                raise StreamServerError(error)
            else:
                emit_event(self._on_event, event)

    def _text_delta(self, delta: TextDelta) -> None:
        """Deliver a text fragment and watch it for loops."""
        self.produced = True
        if self._on_event is not None:
            if self._redactor.active:
                delta = TextDelta(self._redactor.text(delta.text))
            emit_event(self._on_event, delta)
        if self._detect and self.detector.feed(delta.text):
            raise RepeatedLineLoop(
                f"the model repeated itself ({self.detector.repeated!r})", self.assembler.text
            )

    @property
    def empty(self) -> bool:
        """Whether nothing of an answer has arrived (no text, call, model name, usage)."""
        assembler = self.assembler
        return (assembler.size == 0 and not assembler.model and assembler.usage is None
                and assembler.finish_reason is None and assembler.error is None)

    def close(self) -> bool:
        """End of body: flush the parser; True if the answer is complete."""
        self.parser.close(self._sse_event)
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
