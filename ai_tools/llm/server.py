"""One model server as every client pointed at it shares it: slots, a fair queue, a breaker.

A local model server answers a few requests at once (llama.cpp's
``llama-server`` has ``--parallel`` slots, llama-cpp-python one) and queues
or interrupts the rest: llama-cpp-python ends a running stream when a second
request waits (``interrupt_requests``), and keeps computing a whole answer
its client has left.  So the clients never send it more than it serves at
once: :class:`FairSlots` hands out that many slots and keeps the other
requests in *our* queue, where a request's deadlines have not started yet,
and where the assistants take turns (round robin: an assistant with ten
requests waiting does not pass one with a single request).

:class:`ModelServer` is that server: its root URL, its slots (learned from
the server -- ``/props`` ``total_slots`` of llama.cpp, 1 for llama-cpp-python
-- unless the profile's ``server_slots`` sets them, else the profile's
``max_concurrency``), its kind when known, and the breaker that opens when
the server itself cannot be reached or keeps failing (each assistant has a
breaker of its own for the rest, see :mod:`ai_tools.llm.assistant_model`).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ai_tools.default_reactor import or_global_reactor
from ai_tools.llm.breaker import CircuitBreaker
from ai_tools.llm.profile import ModelProfile

__all__ = ["KEEPS_COMPUTING", "FairSlots", "ModelServer", "ModelServers", "server_key"]

log = Logger(namespace="ai_tools.llm.server")

KEEPS_COMPUTING = frozenset({"llama-cpp-python"})
"""Server kinds known to compute a whole (unstreamed) answer to its end after the client
has left: a request given up on there still holds its slot until the server is done."""

MAX_PARTIES = 10_000
"""Distinct waiting parties kept apart; past this many, the others share one turn."""


def server_key(profile: ModelProfile) -> str:
    """The server a profile talks to: scheme, host and port (profiles naming several
    models of one server share it)."""
    from urllib.parse import urlsplit

    parts = urlsplit(profile.base_url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class _Waiter:
    __slots__ = ("deferred", "party", "since")

    def __init__(self, party: str | None, since: float) -> None:
        self.party = party
        self.since = since
        self.deferred: defer.Deferred[float] | Any = None


class FairSlots:
    """``capacity`` slots; the requests beyond wait, served in turns between parties.

    :meth:`acquire` fires with the seconds the request waited (0.0 when a
    slot was free); cancelling its Deferred leaves the queue.  Each
    :meth:`release` gives the freed slot to the next party in turn: the
    party that got the last slot goes to the back of the line.
    """

    def __init__(self, clock: IReactorTime, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("slots: capacity must be >= 1")
        self._clock = clock
        self.capacity = capacity
        self.in_use = 0
        self._queues: OrderedDict[str | None, deque[_Waiter]] = OrderedDict()
        self.waiting = 0
        self.granted = 0
        """Slots handed out so far (at once or after a wait)."""
        self.waited = 0.0
        """Seconds the requests granted so far waited in the queue, together."""

    def acquire(self, party: str | None = None) -> defer.Deferred[float]:
        """A slot for ``party`` (an assistant's name; None for a call without one)."""
        if self.in_use < self.capacity and not self.waiting:
            self.in_use += 1
            self.granted += 1
            return defer.succeed(0.0)
        if party not in self._queues and len(self._queues) >= MAX_PARTIES:
            party = None
        waiter = _Waiter(party, self._clock.seconds())
        waiter.deferred = defer.Deferred(lambda _: self._leave(waiter))
        self._queues.setdefault(party, deque()).append(waiter)
        self.waiting += 1
        return waiter.deferred

    def release(self) -> None:
        """A slot is free again: the next party in turn gets it."""
        if self.in_use < 1:
            raise RuntimeError("slots: released more than acquired")
        self.in_use -= 1
        self._grant()

    def set_capacity(self, capacity: int) -> None:
        """Serve ``capacity`` at once from now on (requests in flight finish as they are)."""
        self.capacity = max(1, capacity)
        self._grant()

    def waiting_by_party(self) -> dict[str, int]:
        """How many requests each party has waiting (``""``: calls without a party)."""
        return {party or "": len(queue) for party, queue in self._queues.items()}

    def mean_wait(self) -> float:
        """Seconds a granted request waited on average (0.0 before the first)."""
        return self.waited / self.granted if self.granted else 0.0

    def oldest_wait(self) -> float:
        """Seconds the longest-waiting request has waited (0.0 when none waits)."""
        now = self._clock.seconds()
        return max((now - q[0].since for q in self._queues.values() if q), default=0.0)

    def _grant(self) -> None:
        while self.in_use < self.capacity and self._queues:
            party, queue = next(iter(self._queues.items()))
            waiter = queue.popleft()
            if queue:
                self._queues.move_to_end(party)  # its next request waits for its turn
            else:
                del self._queues[party]
            self.waiting -= 1
            self.in_use += 1
            waited = max(0.0, self._clock.seconds() - waiter.since)
            self.granted += 1
            self.waited += waited
            waiter.deferred.callback(waited)

    def _leave(self, waiter: _Waiter) -> None:
        queue = self._queues.get(waiter.party)
        if queue is None or waiter not in queue:
            return
        queue.remove(waiter)
        self.waiting -= 1
        if not queue:
            del self._queues[waiter.party]


class ModelServer:
    """One model server: its slots, what kind it is, and the breaker of the server itself.

    Build one per server and give it to every client pointed there
    (``OpenAIChatClient(profile, server=...)``); a client without one builds
    its own.  ``profile`` gives the defaults: ``server_slots`` (fixed slots:
    never learned), else ``max_concurrency`` until the server tells its own.
    """

    def __init__(self, profile: ModelProfile, clock: IReactorTime) -> None:
        self.key = server_key(profile)
        self.clock = clock
        self.configured_slots = profile.server_slots
        self.slots = FairSlots(clock, profile.server_slots or profile.max_concurrency)
        self.slots_source = ("the configured server_slots" if profile.server_slots
                             else "max_concurrency (the server told none)")
        self.kind: str | None = None
        self.chat_template: str | None = None
        self.breaker = CircuitBreaker(clock, failure_threshold=profile.breaker_threshold,
                                      cooldown=profile.breaker_cooldown,
                                      name=f"model server {self.key}")

    def learn(self, kind: str | None, slots: int | None,
              chat_template: str | None = None) -> None:
        """What discovery found: the server's kind, how many requests it serves at once
        (a configured ``server_slots`` wins; logged when the slots change) and its chat
        template (llama.cpp's)."""
        if kind is not None:
            self.kind = kind
        if chat_template is not None:
            self.chat_template = chat_template
        if slots is None and kind in KEEPS_COMPUTING:
            slots = 1  # llama-cpp-python serves one request at a time
        if slots is None or self.configured_slots:
            return
        source = (f"{kind} GET /props total_slots" if kind == "llama.cpp"
                  else f"{kind} serves one request at a time")
        self._set_slots(slots, source)

    def interrupted(self) -> None:
        """The server interrupted one of our streams for another request: it serves fewer
        at once than we send.  Send one less from now on (never fewer than one)."""
        if self.configured_slots or self.slots.in_use < 2:
            return  # another client of the server made it wait: nothing to learn
        self._set_slots(self.slots.in_use - 1, "the server interrupted a stream for another "
                        "request")

    def _set_slots(self, slots: int, source: str) -> None:
        if slots == self.slots.capacity and source == self.slots_source:
            return
        self.slots_source = source
        log.info("Model server {key}: {slots} request(s) at once ({source})", key=self.key,
                 slots=slots, source=source)
        self.slots.set_capacity(slots)

    def takes_status_at_end(self) -> bool:
        """Whether the loop's status goes after the history by default on this server: a
        local server with a prompt cache whose chat template takes a system message
        after the first.  llama-cpp-python: yes (its chat formats render every role in
        place; the interoperability test checks it).  llama.cpp: when its template
        (``/props``) raises no error (the templates that refuse roles out of order --
        Mistral's, Gemma's -- call ``raise_exception``); ChatML and Llama 3 templates
        do not.  Elsewhere: no (set ``status_at_end`` to choose)."""
        if self.kind == "llama-cpp-python":
            return True
        if self.kind == "llama.cpp":
            return self.chat_template is not None and "raise_exception" not in self.chat_template
        return False

    def keeps_computing(self, streaming: bool) -> bool:
        """Whether a request left by its client still occupies the server to its end."""
        return not streaming and self.kind in KEEPS_COMPUTING

    def status(self) -> dict[str, object]:
        """The server as status pages show it: slots in use, requests waiting (by
        assistant, the oldest's wait), requests granted a slot and their mean wait."""
        slots = self.slots
        return {"server": self.key, "kind": self.kind, "slots": slots.capacity,
                "slots_source": self.slots_source, "in_flight": slots.in_use,
                "waiting": slots.waiting, "waiting_by_assistant": slots.waiting_by_party(),
                "oldest_wait_s": round(slots.oldest_wait(), 3),
                "granted": slots.granted, "mean_wait_s": round(slots.mean_wait(), 3),
                "breaker": self.breaker.state.value}


class ModelServers:
    """The model servers of one service, one per server (see :func:`server_key`): the
    clients of profiles pointed at one server share its slots, queue and breaker."""

    def __init__(self, clock: IReactorTime | None = None) -> None:
        self._clock = or_global_reactor(clock)
        self._servers: dict[str, ModelServer] = {}

    def for_profile(self, profile: ModelProfile) -> ModelServer:
        """The server ``profile`` talks to (built from it the first time)."""
        key = server_key(profile)
        server = self._servers.get(key)
        if server is None:
            server = self._servers[key] = ModelServer(profile, self._clock)
        return server
