"""The soak test's model server: the scripted model with a switch for what goes wrong.

A :class:`SoakModel` replaces the scripted server's model (``server.resource.model``)
and answers every request by the current *mode*: a list of turns played in
rotation, one per request, whatever the conversation.  A healthy answer is a
``say`` naming the player messages it saw (their tokens, ``msg-000042``), so an
answer always ends the assistant's turn (``say`` is a terminal tool).  The
faults are the scripted server's own (:class:`~ai_tools.testing.Fault`): server
errors, dropped connections, malformed bodies, stalls and keep-alive streams
past the client's deadlines; headers that come too late and slow but healthy
streams are turns with latencies.  A model that is down is no mode: the test
stops listening (:func:`refuse_connections`), so connections are refused.

:func:`answered_tokens` reads the server's records afterwards: the tokens a
healthy answer saw and delivered whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from twisted.internet import defer

from ai_tools.llm.scripted import RecordedRequest, ScriptedModel, Turn
from ai_tools.testing import Fault, TestServer

TOKEN = re.compile(r"msg-\d{6}")
"""How a player message is told apart: its token, unique in the whole run."""

HANG = 60.0
"""Seconds a hanging turn waits before its headers: far past every deadline of the client."""


def token(number: int) -> str:
    return f"msg-{number:06d}"


def _healthy(chunk_latency: float = 0.0) -> Turn:
    """A placeholder: the real healthy answer is built per request (it names the tokens)."""
    return Turn(text="", tool_calls=[{"name": "say", "arguments": {"message": "ok"}}],
                chunk_latency=chunk_latency, chunk_chars=8)


HEALTHY = _healthy()
SLOW = _healthy(chunk_latency=0.1)
"""A healthy answer streamed in 8-character chunks 0.1 s apart (under the idle deadline)."""

MODES: dict[str, tuple[Turn, ...]] = {
    "healthy": (HEALTHY,),
    # 5xx and dropped connections between healthy answers (so the breaker closes again);
    # a mode that mixes them starts with a healthy answer: the breaker's probe closes it
    "server_errors": (HEALTHY, Turn(fault=Fault.server_error(500)),
                      Turn(fault=Fault.html_error(502)), Turn(fault=Fault.reset())),
    # answers that never come: headers too late, a stalled stream, keep-alive comments only
    "hangs": (HEALTHY, Turn(latency=HANG), Turn(fault=Fault.stall(after_chunks=2)),
              Turn(fault=Fault.keep_alive(after_chunks=1, interval=0.2)), HEALTHY),
    # bodies that are not JSON, streams cut off or ending in an error
    "malformed": (HEALTHY, Turn(fault=Fault.malformed_json()),
                  Turn(fault=Fault.truncated_stream(2)), Turn(fault=Fault.stream_error())),
    # every answer healthy but slow: many calls in flight at once
    "slow_streams": (SLOW, SLOW, HEALTHY),
    # every answer held back past the test (a call stays in flight)
    "held": (Turn(latency=HANG),),
    # the model answers nothing usable
    "outage": (Turn(fault=Fault.server_error(503)), Turn(fault=Fault.reset()),
               Turn(fault=Fault.malformed_json())),
}


def new_tokens(messages: Any) -> list[str]:
    """The tokens of the user messages after the request's last assistant message.

    That is what this request brings the model that no earlier answer of this
    conversation saw: the ``[EVENTS]`` message the loop just delivered (and one
    left by a crash before it, if any).  Tool results are not user input.
    """
    if not isinstance(messages, list):
        return []
    found: list[str] = []
    for message in reversed(messages):
        if not isinstance(message, Mapping):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "assistant":
            break
        if role == "user" and isinstance(content, str) and not content.startswith("[TOOL"):
            found.extend(TOKEN.findall(content))
    return found


@attrs.define(eq=False)
class SoakModel(ScriptedModel):
    """A scripted model whose answers follow :attr:`mode` (see :data:`MODES`)."""

    mode: str = "healthy"
    played: dict[str, int] = attrs.field(factory=dict)
    """Requests answered so far, per mode."""

    def next_turn(self, conversation: str, messages: Any) -> tuple[Turn | None, str]:
        turns = MODES[self.mode]
        count = self.played.get(self.mode, 0)
        self.played[self.mode] = count + 1
        turn = turns[count % len(turns)]
        if turn is HEALTHY or turn is SLOW:
            said = " ".join(new_tokens(messages)) or "nothing new"
            turn = attrs.evolve(turn, tool_calls=[
                {"name": "say", "arguments": {"message": f"Heard you: {said}"}}])
        return turn, f"soak mode {self.mode}"


def install(server: TestServer) -> SoakModel:
    """Make ``server`` answer as a :class:`SoakModel` (same model name); returns it."""
    model = SoakModel(scripts={}, model_name=server.model_name)
    server.resource.model = model
    return model


def refuse_connections(server: TestServer) -> defer.Deferred[Any]:
    """The model server goes down: stop listening and drop every open connection."""
    stopped = defer.maybeDeferred(server.port.stopListening)
    server.resource.cancel_pending()
    for wrapper in list(server.factory.protocols):
        wrapper.transport.abortConnection()
    return stopped


def accept_connections(server: TestServer, reactor: Any, port: int) -> None:
    """The model server is back, on the port the service was configured with."""
    server.port = reactor.listenTCP(port, server.factory, interface=server.host)


def is_healthy(turn: Turn | None) -> bool:
    return turn is not None and turn.fault is None and turn.latency < HANG and bool(
        turn.tool_calls)


def answered_tokens(requests: Iterable[RecordedRequest]) -> set[str]:
    """Tokens seen by a healthy answer that reached the service whole."""
    seen: set[str] = set()
    for record in requests:
        if is_healthy(record.turn) and _delivered(record):
            seen.update(new_tokens(record.messages))
    return seen


def _delivered(record: RecordedRequest) -> bool:
    """Whether the whole answer went out (``finished`` fired True), without waiting."""
    outcome: list[bool] = []
    record.finished.addCallback(_kept, outcome)
    return outcome == [True]


def _kept(delivered: bool, outcome: list[bool]) -> bool:
    outcome.append(delivered)
    return delivered


def counts(requests: Sequence[RecordedRequest]) -> dict[str, int]:
    """Requests per kind of answer: healthy, a fault kind, or ``hang``."""
    out: dict[str, int] = {}
    for record in requests:
        turn = record.turn
        kind = ("healthy" if is_healthy(turn) else turn.fault.kind if turn and turn.fault
                else "hang")
        out[kind] = out.get(kind, 0) + 1
    return out
