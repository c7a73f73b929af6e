"""What a single-process sandbox world keeps in its store besides its rows.

Two parts of :class:`~ai_tools.world.sandbox.SandboxWorld`:

* :class:`Numbering` gives message numbers (``seq``) that keep rising across
  restarts: a run starts above every number the runs before it gave
  (:func:`first_message_seq`), with a floor kept in the world's meta for a
  clock that went back;
* :class:`HeardKeeper` writes what the characters heard to the store's heard
  log (:class:`~ai_tools.interfaces.IHeardLog`), refills the heard logs from it
  at start-up, and tells the HTTP API when the newest message is durable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Protocol

import attrs
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.errors import AIToolsError
from ai_tools.failure_lines import RepeatedFailure
from ai_tools.json_encoding import compact_ascii_json
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.world.hearing import Hearing
from ai_tools.world.messages import WorldMessage

SEQS_PER_MS = 1000
"""Message numbers a run may give per millisecond it lived (see first_message_seq)."""

SEQ_FLOOR_KEY = "message_seq_floor"
"""World meta: no run has given a message number above it (see SEQ_BLOCK)."""
SEQ_BLOCK = 1_000_000
"""Message numbers a run reserves at a time: one meta write per this many messages."""

HEARD_KEEP = 10_000
"""Messages the store's heard log keeps (IHeardLog): what characters heard survives a
restart, each character's newest ``log_size`` of them."""

_UNKEPT_KEEP = 1000
"""Failed heard-log writes remembered (for :meth:`HeardKeeper.kept`)."""


class WorldStore(Protocol):
    """What a sandbox world calls of its store: :class:`~ai_tools.interfaces.IWorldStore`
    as mypy reads it (zope's interfaces declare methods without ``self``)."""

    def load_world(self) -> defer.Deferred[JSONObject | None]: ...
    def write_world(self, put: JSONMapping | None = None,
                    delete: Mapping[str, list[str]] | None = None) -> defer.Deferred[None]: ...


class HeardLogStore(Protocol):
    """:class:`~ai_tools.interfaces.IHeardLog` as mypy reads it (a store that declares it)."""

    def append_heard(self, messages: list[tuple[int, str, str]],
                     keep: int) -> defer.Deferred[None]: ...
    def load_heard(self, limit: int) -> defer.Deferred[list[tuple[int, str, str]]]: ...


def first_message_seq(now: float) -> int:
    """The number before a run's first message: its start time in ms times SEQS_PER_MS.

    A run that lived ``t`` ms gave fewer than ``SEQS_PER_MS * t`` numbers (a
    million messages a second), so a later run starts above all of them with
    nothing written per message, as long as the clock does not go back.  For a
    clock that went back, the store also keeps a floor (:data:`SEQ_FLOOR_KEY`):
    each run reserves :data:`SEQ_BLOCK` numbers ahead and a later run starts at
    the floor when its clock is behind it.
    """
    return int(now * 1000) * SEQS_PER_MS


@attrs.define(eq=False)
class Numbering:
    """Message numbers: from 1 in memory; above every earlier run's with a store.

    ``reserve(limit)`` writes the floor ``limit`` to the store's meta (the world's
    write-through); it is called once per :data:`SEQ_BLOCK` numbers.
    """

    reserve: Callable[[int], defer.Deferred[None]]
    seq: int = 0
    """The last number given."""
    limit: int | None = None
    """Numbers up to here (included) are reserved in the store (None: no store)."""
    floor: int = 0
    """The store's floor as loaded (kept out of the world's meta: not world content)."""

    _log = Logger()

    def take_floor(self, meta: JSONObject) -> None:
        """Take the floor out of world meta just loaded (the highest one seen counts)."""
        floor = meta.pop(SEQ_FLOOR_KEY, None)
        if type(floor) is int:
            self.floor = max(self.floor, floor)

    def start(self, now: float) -> defer.Deferred[None]:
        """A run with a store: go on above the earlier runs' numbers, reserve a block."""
        by_clock = first_message_seq(now)
        if self.floor > by_clock:
            self._log.warn("The clock is behind the messages of an earlier run; message "
                           "numbers go on from the store's floor ({floor})", floor=self.floor)
        self.seq = max(by_clock, self.floor)
        return self._reserve()

    def _reserve(self) -> defer.Deferred[None]:
        self.limit = self.seq + SEQ_BLOCK
        return self.reserve(self.limit)

    def next(self) -> int:
        """The next message number (reserving the next block when this one is used up)."""
        self.seq += 1
        if self.limit is not None and self.seq >= self.limit:
            self._reserve().addErrback(lambda _: None)  # (logged by the world's write)
        return self.seq


@attrs.define(eq=False)
class HeardKeeper:
    """The store's heard log (:class:`~ai_tools.interfaces.IHeardLog`): writes in flight,
    the ones that failed (the newest ``_UNKEPT_KEEP``), and the refill at start-up."""

    heard_log: HeardLogStore | None = None
    """The store, when it keeps a heard log and the world numbers messages for it."""
    _keeping: dict[int, defer.Deferred[None]] = attrs.field(factory=dict, init=False)
    _unkept: dict[int, str] = attrs.field(factory=dict, init=False)
    _failures: RepeatedFailure = attrs.field(init=False, default=attrs.Factory(
        lambda self: RepeatedFailure("Heard messages could not be kept in the store",
                                     self._log), takes_self=True))

    _log = Logger()

    def keep(self, message: WorldMessage, receivers: list[str]) -> None:
        """Write ``message`` and who heard it to the heard log (if the store keeps one)."""
        if self.heard_log is None:
            return
        data = attrs.asdict(message)
        seq = data.pop("seq")
        row = (seq, compact_ascii_json(data), compact_ascii_json(list(receivers)))
        writing = self._keeping[seq] = self.heard_log.append_heard([row], HEARD_KEEP)
        writing.addErrback(self._not_kept, seq)
        writing.addBoth(self._written, seq)

    def _written(self, result: object, seq: int) -> object:
        del self._keeping[seq]
        if seq not in self._unkept:
            self._failures.worked()
        return result

    def _not_kept(self, failure: Failure, seq: int) -> None:
        self._unkept[seq] = failure.getErrorMessage() or type(failure.value).__name__
        while len(self._unkept) > _UNKEPT_KEEP:
            del self._unkept[next(iter(self._unkept))]
        self._failures.failed(failure, message=seq)

    def kept(self, seq: int) -> defer.Deferred[None]:
        """Fires once message ``seq`` is in the heard log (at once without a write in
        flight); fails with :class:`~ai_tools.errors.AIToolsError` if its write failed."""
        writing = self._keeping.get(seq)
        if writing is None:
            return self._kept_or_not(seq)
        done: defer.Deferred[None] = defer.Deferred()

        def settled(result: object) -> object:
            self._kept_or_not(seq).chainDeferred(done)
            return result

        writing.addBoth(settled)
        return done

    def _kept_or_not(self, seq: int) -> defer.Deferred[None]:
        error = self._unkept.get(seq)
        if error is None:
            return defer.succeed(None)
        return defer.fail(AIToolsError(f"the heard log was not written: {error}"))

    def restore(self, hearing: Hearing) -> defer.Deferred[None]:
        """Refill ``hearing``'s heard logs from the store's heard log, if it keeps one."""
        if self.heard_log is None:
            return defer.succeed(None)
        loaded: defer.Deferred[list[tuple[int, str, str]]] = self.heard_log.load_heard(HEARD_KEEP)
        return loaded.addCallback(self._remember_all, hearing)

    def _remember_all(self, rows: list[tuple[int, str, str]], hearing: Hearing) -> None:
        restored = 0
        for seq, data, receivers in rows:
            try:
                message = WorldMessage(**json.loads(data), seq=seq)
                heard_by = [str(r) for r in json.loads(receivers)]
            except (TypeError, ValueError) as exc:
                self._log.warn("Heard message {seq} in the store is not valid ({error}); "
                               "skipped", seq=seq, error=str(exc))
                continue
            hearing.remember(message, heard_by)
            restored += 1
        if restored:
            self._log.info("Sandbox world: {count} heard message(s) restored", count=restored)
