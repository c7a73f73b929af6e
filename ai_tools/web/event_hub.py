"""The fan-out behind ``GET /events``: one subscription, each event encoded once.

:class:`EventHub` observes the service's loop events and the world's messages
once for every client; an event becomes one :class:`~ai_tools.web.sse.Frame`
(encoded once), and the same bytes go to each stream whose filters keep it.
Event ids are global and rise with every event (across restarts too), so a
client can tell what it missed; the newest frames are kept in a
:class:`~ai_tools.web.replay.ReplayBuffer`, and a client that reconnects
with ``Last-Event-ID`` first gets what it missed, or a ``gap`` event when
some of it is no longer kept.  The hub caps the streams (in total, and
per address beyond loopback), bounds each stream's backlog by bytes, and
runs one timer for all of them: a keep-alive comment to each, and closing
those whose client has read nothing for ``stream_stall_timeout`` seconds.
With several workers, :meth:`EventHub.relay` takes in the loop events of the
assistants other workers run (:mod:`ai_tools.web.service_events`): they get
this hub's ids and go to every stream but those other workers opened.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import attrs
from twisted.internet import task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.server import Request

from ai_tools.web.connections import remote_host
from ai_tools.web.errors import ApiError
from ai_tools.web.limits import HttpLimits
from ai_tools.web.replay import ReplayBuffer, first_event_id
from ai_tools.web.results import event_owner
from ai_tools.web.sse import EventStream, Frame, format_event

if TYPE_CHECKING:
    from ai_tools.service.service import AssistantService
    from ai_tools.world.sandbox import SandboxWorld

__all__ = ["EventHub", "assistants_by_character"]

log = Logger()


def assistants_by_character(service: AssistantService) -> dict[str, str]:
    """``{character_id: assistant name}`` of the assistants ``service`` hosts and, with
    several workers, of every assistant they share (whichever worker runs it)."""
    ids: dict[str, str] = {}
    ownership = getattr(service, "ownership", None)
    if ownership is not None:
        for name, config in ownership.roster.items():
            if config.character_id:
                ids[config.character_id] = name
    for name, assistant in service.assistants.items():
        char_id = assistant.config.character_id
        if char_id:
            ids[char_id] = name
    return ids


@attrs.define(eq=False)
class EventHub:
    """Every open event stream of one API, fed from one observer of the service and world."""

    service: AssistantService
    world: SandboxWorld | None
    clock: IReactorTime
    limits: HttpLimits = attrs.field(factory=HttpLimits)
    keepalive: float = 15.0
    streams: set[EventStream] = attrs.field(factory=set, init=False)
    replay: ReplayBuffer = attrs.field(init=False)
    """The newest frames, for clients that reconnect with ``Last-Event-ID``."""
    _per_address: Counter[str] = attrs.field(factory=Counter, init=False)
    _unsubscribe: list[Callable[[], object]] = attrs.field(factory=list, init=False)
    _timer: task.LoopingCall | None = attrs.field(default=None, init=False)

    @replay.default
    def _new_replay(self) -> ReplayBuffer:
        return ReplayBuffer(self.limits.replay_events, self.limits.replay_buffer,
                            start_id=first_event_id(self.clock.seconds()))

    @property
    def last_id(self) -> int:
        """The id of the newest event."""
        return self.replay.newest_id

    def start(self) -> None:
        """Observe the service's events and the world's messages."""
        if self._unsubscribe:
            return
        self._unsubscribe.append(self.service.add_observer(self._loop_event))
        add_world_observer = getattr(self.world, "add_observer", None)
        if add_world_observer is not None:
            self._unsubscribe.append(add_world_observer(self._world_message))

    def stop(self) -> None:
        """Close every stream and stop observing."""
        for stream in list(self.streams):
            stream.close()
        callbacks, self._unsubscribe = self._unsubscribe, []
        for unsubscribe in callbacks:
            unsubscribe()

    def open(self, request: Request, only: str | None, types: frozenset[str] | None,
             last_id: int | None = None, local_only: bool = False) -> EventStream:
        """Start a stream on ``request``; ApiError 503 when the caps are reached.

        With ``last_id`` (the client's ``Last-Event-ID``) the stream first
        replays the kept events after it that pass its filters, preceded by a
        ``gap`` event when some are no longer kept.  A ``local_only`` stream
        (another worker's) gets no relayed events.
        """
        address = remote_host(request.getClientAddress())
        limits = self.limits
        if len(self.streams) >= limits.max_streams:
            raise ApiError(503, f"too many event streams are open (the limit is "
                           f"{limits.max_streams}); try again later",
                           headers={"Retry-After": "10"})
        if address is not None and self._per_address[address] >= limits.max_streams_per_address:
            raise ApiError(503, f"too many event streams are open from {address} (the limit "
                           f"is {limits.max_streams_per_address})",
                           headers={"Retry-After": "10"})
        stream = EventStream(request, self.clock, only=only, types=types,
                             buffer_limit=limits.stream_buffer, address=address,
                             local_only=local_only)
        self.streams.add(stream)
        if address is not None:
            self._per_address[address] += 1
        stream.on_close(lambda: self._closed(stream))
        self._start_timer()
        stream.start()
        if last_id is not None:
            self._catch_up(stream, last_id)
        return stream

    def _catch_up(self, stream: EventStream, last_id: int) -> None:
        catchup = self.replay.after(last_id)
        notice = catchup.notice(last_id)
        if notice is not None:
            log.info("An event stream resumed after event {last_id}: {reason}, "
                     "some events are no longer kept", last_id=last_id, reason=notice["reason"])
            stream.send(Frame("gap", frozenset(), format_event(None, "gap", notice)))
        for frame in catchup.frames:
            if stream.takes(frame):
                stream.send(frame)

    def _closed(self, stream: EventStream) -> None:
        self.streams.discard(stream)
        if stream.address is not None:
            self._per_address[stream.address] -= 1
            if self._per_address[stream.address] <= 0:
                del self._per_address[stream.address]
        if not self.streams and self._timer is not None:
            if self._timer.running:
                self._timer.stop()
            self._timer = None

    # -- one timer for every stream --------------------------------------------------

    def _start_timer(self) -> None:
        if self._timer is not None:
            return
        interval = self.keepalive if self.keepalive > 0 else self.limits.stream_stall_timeout
        timer = task.LoopingCall(self._sweep)
        timer.clock = cast(IReactorTime, self.clock)
        self._timer = timer
        timer.start(interval, now=False).addErrback(
            lambda f: log.failure("The event streams' timer failed", f))

    def _sweep(self) -> None:
        """Keep-alives to the streams that read; close those stalled too long."""
        now = self.clock.seconds()
        limit = self.limits.stream_stall_timeout
        for stream in list(self.streams):
            if stream.stalled(now, limit):
                log.info("Closing an event stream whose client read nothing for {limit}s "
                         "({dropped} events dropped)", limit=limit, dropped=stream.dropped)
                stream.abort()
            elif self.keepalive > 0:
                stream.keep_alive()

    # -- events in, frames out ------------------------------------------------------

    def _broadcast(self, kind: str, owners: frozenset[str], data: Mapping[str, object],
                   relayed: bool = False) -> None:
        frame = self._encode(kind, owners, data, relayed)
        self.replay.add(frame)
        for stream in tuple(self.streams):
            if stream.takes(frame):
                stream.send(frame)

    def _encode(self, kind: str, owners: frozenset[str], data: Mapping[str, object],
                relayed: bool = False) -> Frame:
        """The one encoding of an event; an oversized one becomes a notice of its size."""
        event_id = self.replay.newest_id + 1
        encoded = format_event(event_id, kind, data)
        if len(encoded) > self.limits.max_event_bytes:
            notice = {"type": kind, "assistant": data.get("assistant"), "omitted": True,
                      "bytes": len(encoded), "time": data.get("time"),
                      "reason": f"larger than the stream's event limit "
                                f"({self.limits.max_event_bytes} bytes)"}
            encoded = format_event(event_id, kind, notice)
        return Frame(kind, owners, encoded, event_id, relayed)

    def _loop_event(self, event: dict[str, Any], relayed: bool = False) -> None:
        owner = event_owner(event)
        owners = frozenset((owner,)) if owner else frozenset()
        self._broadcast(str(event.get("type", "event")), owners, event, relayed)

    def relay(self, event: dict[str, Any]) -> None:
        """A loop event of an assistant another worker runs, to this hub's streams (with
        this hub's id; not to the streams other workers opened here)."""
        self._loop_event(event, relayed=True)

    def _world_message(self, message: Any, receivers: tuple[str, ...]) -> None:
        characters = assistants_by_character(self.service)
        hearers = sorted({characters[c] for c in receivers if c in characters})
        data = message.to_dict() if hasattr(message, "to_dict") else dict(message)
        sender = characters.get(data.get("sender_id") or "")
        data.update({"type": "world_message", "receivers": list(receivers),
                     "assistants": hearers, "from_assistant": sender,
                     "time": self.clock.seconds()})
        owners = frozenset(hearers) | (frozenset((sender,)) if sender else frozenset())
        self._broadcast("world_message", owners, data)
