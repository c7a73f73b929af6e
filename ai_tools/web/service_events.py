"""The whole service in one event stream: a worker follows the other workers' streams.

With several workers, ``GET /events`` without ``?assistant=`` shows every
assistant's loop events, whichever worker runs it.  While at least one such
stream is open on a worker (the web console's live view is one),
:class:`ServiceEvents` follows the event stream of every other live worker —
one connection each, however many clients watch — and hands their loop events
to this worker's :class:`~ai_tools.web.event_hub.EventHub`, which numbers them
with its own ids (so ``Last-Event-ID`` works as for its own events) and sends
them to its streams.

* The streams followed are opened with
  :data:`~ai_tools.web.forwarding.FORWARDED_HEADER`: the other worker sends its
  own assistants' events only, never those it relays (no second hop, no loop
  between two workers that follow each other).
* World messages are not taken from other workers: the world is shared, this
  worker's own stream carries each once.
* The live workers and their addresses are read in the database every lease
  interval: a worker that joins is followed, one that left (or moved) is
  let go.  A stream that ends — the other worker stopped, stayed silent past
  the forwarder's ``stream_idle``, or sent a frame larger than the event limit —
  is opened again at the next reading, with ``Last-Event-ID`` so the other
  worker replays what it kept since.
* When the last whole-service stream closes, every followed stream is closed.
"""

from __future__ import annotations

from typing import Any, cast

import attrs
from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.web.event_hub import EventHub
from ai_tools.web.forwarding import EventFeed, ForwardingError
from ai_tools.web.other_workers import OtherWorkers
from ai_tools.web.sse import EventStream

__all__ = ["ServiceEvents"]

log = Logger()

_NOT_RELAYED = frozenset({"world_message"})
"""Event types of other workers not passed on (the shared world: sent here already)."""


@attrs.define(eq=False)
class _Followed:
    """One other worker's stream: where it is, the feed once open, where it resumes."""

    url: str
    resume_from: int | None = None
    feed: EventFeed | None = None


@attrs.define(eq=False)
class ServiceEvents:
    """Follows the other live workers' event streams while whole-service streams are open.

    ``others`` is the API's :class:`~ai_tools.web.other_workers.OtherWorkers`
    (the lease manager, the forwarder, the workers' addresses); ``max_frame`` bounds one
    event of another worker in bytes; ``interval`` is how often the live workers
    are read again (default: the lease interval).
    """

    others: OtherWorkers
    hub: EventHub
    clock: IReactorTime
    max_frame: int = 64 * 1024 + 1024
    interval: float | None = None
    followed: dict[str, _Followed] = attrs.field(factory=dict, init=False)
    """The other workers followed (or being connected to): ``{worker: _Followed}``."""
    watchers: int = attrs.field(default=0, init=False)
    """The whole-service streams open on this worker."""
    _resume: dict[str, tuple[str, int]] = attrs.field(factory=dict, init=False)
    """``{worker: (url, newest event id)}`` of the streams that ended while watched."""
    _loop: task.LoopingCall | None = attrs.field(default=None, init=False)
    _failing: set[str] = attrs.field(factory=set, init=False)

    def watch(self, stream: EventStream) -> None:
        """``stream`` shows the whole service: follow the other workers while it is open."""
        self.watchers += 1
        stream.on_close(self._unwatch)
        if self._loop is None:
            loop = task.LoopingCall(self._sync)
            loop.clock = cast(IReactorTime, self.clock)
            self._loop = loop
            seconds = self.interval or float(getattr(self.others.ownership, "interval", 5.0))
            loop.start(seconds, now=True).addErrback(
                lambda f: log.failure("Following the other workers' events stopped", f))

    def _unwatch(self) -> None:
        self.watchers -= 1
        if self.watchers <= 0:
            self.stop()

    def stop(self) -> None:
        """Close every followed stream (no whole-service stream is open, or the API stops)."""
        self.watchers = 0
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None
        self._resume.clear()
        followed, self.followed = self.followed, {}
        for one in followed.values():
            if one.feed is not None:
                one.feed.stop("nobody watches the whole service here")

    # -- which workers ---------------------------------------------------------------

    @defer.inlineCallbacks
    def _sync(self) -> Any:
        """Follow every other live worker with an address; let go of the others."""
        ownership = self.others.ownership
        if ownership is None:
            return
        try:
            workers = yield ownership.store.live_workers()
        except Exception as exc:
            log.warn("The live workers could not be read: {error}", error=str(exc))
            return
        if self._loop is None:
            return  # stopped meanwhile
        wanted = {w: url for w, url in workers.items() if w != ownership.worker and url}
        for worker in [w for w in self._resume if w not in wanted]:
            del self._resume[worker]  # gone: nothing to resume
        for worker, one in list(self.followed.items()):
            if wanted.get(worker) != one.url:
                del self.followed[worker]
                if one.feed is not None:
                    one.feed.stop("it is no longer a live worker at that address")
        for worker, url in wanted.items():
            if worker not in self.followed:
                self._follow(worker, url)

    def _follow(self, worker: str, url: str) -> None:
        """Open ``worker``'s stream (from where it ended, when it was followed before)."""
        resume = self._resume.pop(worker, None)
        one = _Followed(url, resume[1] if resume is not None and resume[0] == url else None)
        self.followed[worker] = one
        headers = {b"accept": b"text/event-stream"}  # (signed by the forwarder: no token)
        if one.resume_from is not None:
            headers[b"last-event-id"] = str(one.resume_from).encode("ascii")
        try:
            events_url = self.others.url(worker, one.url, "/events")
        except ForwardingError as exc:
            d: defer.Deferred[Any] = defer.fail(exc)
        else:
            d = self.others.forwarder.follow(events_url, headers, self._event, self.max_frame)
        d.addCallbacks(self._opened, self._not_opened, callbackArgs=(worker, one),
                       errbackArgs=(worker, one))

    # -- one worker's stream ---------------------------------------------------------

    def _opened(self, feed: EventFeed, worker: str, one: _Followed) -> None:
        if self.followed.get(worker) is not one:  # let go of meanwhile
            feed.stop("it is no longer followed")
            return
        one.feed = feed
        if feed.last_id is None:
            feed.last_id = one.resume_from
        self._failing.discard(worker)
        log.info("Following the events of worker {worker} at {url}", worker=worker,
                 url=one.url)
        feed.ended.addCallback(self._ended, worker, one)

    def _not_opened(self, failure: Failure, worker: str, one: _Followed) -> None:
        if self.followed.get(worker) is one:
            del self.followed[worker]  # tried again at the next reading
            self._keep(worker, one.url, one.resume_from)
        if worker not in self._failing:  # said once, until it works again
            self._failing.add(worker)
            error = failure.value
            why = error.message if isinstance(error, ForwardingError) else str(error)
            log.warn("The events of worker {worker} cannot be followed: {why}",
                     worker=worker, why=why)

    def _ended(self, why: str, worker: str, one: _Followed) -> None:
        if self.followed.get(worker) is not one:
            return  # let go of on purpose
        del self.followed[worker]
        self._keep(worker, one.url, one.feed.last_id if one.feed is not None else None)
        log.info("The events of worker {worker} stopped coming ({why}); following them "
                 "again at the next reading", worker=worker, why=why)

    def _keep(self, worker: str, url: str, last_id: int | None) -> None:
        """Remember where ``worker``'s stream was, for ``Last-Event-ID`` next time."""
        if last_id is not None:
            self._resume[worker] = (url, last_id)

    def _event(self, event_id: int | None, kind: str, data: object) -> None:
        """An event of another worker: its assistants' loop events go to the hub."""
        if event_id is None or kind in _NOT_RELAYED or not isinstance(data, dict):
            return  # notices of that stream (dropped, gap), the world, or not an event
        self.hub.relay(data)
