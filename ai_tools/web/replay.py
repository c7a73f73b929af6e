"""The event stream's replay buffer: the newest events, kept so a client can catch up.

A browser's ``EventSource`` reconnects by itself after a dropped connection
and sends the id of the last event it got (``Last-Event-ID``); a page that
reloads can send it too.  :class:`ReplayBuffer` keeps the newest encoded
frames, bounded by count and by bytes, and answers "what came after id N":
the frames still kept, and whether some that came after N are not kept any
more (a gap the client must be told about, so it reloads its state).

Event ids rise through a run and across runs: a run's first id is above
every id of the runs before it (:func:`first_event_id`), so an id from a
previous run is told apart from one of this run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import attrs

from ai_tools.web.sse import Frame

__all__ = ["IDS_PER_MS", "Catchup", "ReplayBuffer", "first_event_id"]

IDS_PER_MS = 1000
"""Event ids a run may use per millisecond it lived before the next run's ids begin."""


def first_event_id(now: float) -> int:
    """The id before a run's first event: its start time in milliseconds times IDS_PER_MS.

    A run that lived ``t`` ms used fewer than ``IDS_PER_MS * t`` ids unless it sent
    more than a million events a second, so the next run starts above all of them
    (as long as the clock does not go back).  Below 2**53 until the year 2255, so
    JavaScript reads the ids exactly.
    """
    return int(now * 1000) * IDS_PER_MS


@attrs.frozen
class Catchup:
    """What a client that saw event ``last_id`` gets: the ``frames`` after it still kept,
    and ``gap`` (None, ``"too_old"`` or ``"restarted"``) when some are not kept."""

    frames: tuple[Frame, ...]
    gap: str | None
    oldest_kept: int | None

    def notice(self, last_id: int) -> dict[str, object] | None:
        """The data of the ``gap`` event to send first, or None when nothing was lost."""
        if self.gap is None:
            return None
        return {"last_event_id": last_id, "oldest_kept": self.oldest_kept,
                "reason": self.gap}


@attrs.define(eq=False)
class ReplayBuffer:
    """The newest frames of this run, at most ``max_events`` of them in ``max_bytes``.

    ``start_id`` is the id before this run's first event (:func:`first_event_id`).
    """

    max_events: int
    max_bytes: int
    start_id: int = 0
    _frames: deque[Frame] = attrs.field(factory=deque, init=False)
    _bytes: int = attrs.field(default=0, init=False)
    newest_id: int = attrs.field(init=False)
    """The id of the newest frame added (``start_id`` before the first)."""

    @newest_id.default
    def _newest_default(self) -> int:
        return self.start_id

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def bytes(self) -> int:
        """Bytes of the frames kept."""
        return self._bytes

    def add(self, frame: Frame) -> None:
        """Keep ``frame`` (its id is above every kept one); forget the oldest past the bounds."""
        assert frame.id is not None and frame.id > self.newest_id
        self.newest_id = frame.id
        frames = self._frames
        frames.append(frame)
        self._bytes += len(frame.data)
        while frames and (len(frames) > self.max_events or self._bytes > self.max_bytes):
            self._bytes -= len(frames.popleft().data)

    def after(self, last_id: int) -> Catchup:
        """The kept frames newer than ``last_id``, and whether some newer ones are gone."""
        oldest = self._frames[0].id if self._frames else None
        if last_id < self.start_id or last_id > self.newest_id:
            # from a previous run (or not an id this service gave): nothing to replay
            return Catchup(tuple(self._frames), "restarted", oldest)
        frames = tuple(self._since(last_id))
        first_missing = last_id + 1
        kept_from = oldest if oldest is not None else self.newest_id + 1
        gap = "too_old" if first_missing < kept_from and last_id < self.newest_id else None
        return Catchup(frames, gap, oldest)

    def _since(self, last_id: int) -> Iterator[Frame]:
        frames = self._frames
        if not frames or frames[-1].id is None or frames[-1].id <= last_id:
            return iter(())
        # ids are consecutive in this run: index straight to the first wanted frame
        first = frames[0].id or 0
        start = max(0, last_id + 1 - first)
        return (frames[i] for i in range(start, len(frames)))
