"""Garbage-collector settings for a long-running process hosting many assistants (opt-in).

With a thousand model requests in flight, every request's objects live for
the request's latency (tens of milliseconds), long enough to be walked by
many young-generation collections and promoted to the old generation, whose
full collections then walk the whole heap.  In the service benchmark
(``python -m benchmarks service``, part b) the collector was about a third of
the client's CPU.  Two settings help such a process:

* a higher young-generation threshold (``SERVICE_THRESHOLDS``): collections
  come after 20,000 allocations instead of 700, so most of a request's objects
  are freed by reference counting before any collection sees them;
* ``gc.freeze()`` once the assistants are loaded: what was there at start-up
  is never walked again.

They are process-wide, so the library never applies them by itself: the
standalone service (``twistd ai-assistant``) applies them when the
``AI_TOOLS_GC`` environment variable asks for it, and an embedding program
may call :meth:`GCTuning.apply` itself.  The cost: up to the threshold's
worth of young objects wait a little longer to be collected, and frozen
objects that later become cyclic garbage are only freed after
:meth:`GCTuning.restore`.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping

import attrs

from ai_tools.errors import ConfigError

__all__ = ["ENV_GC", "SERVICE_THRESHOLDS", "GCTuning", "tuning_from_environ"]

SERVICE_THRESHOLDS: tuple[int, int, int] = (20_000, 10, 10)
"""The collector thresholds for a service process (Python's default: 700, 10, 10)."""

ENV_GC = "AI_TOOLS_GC"
"""``service`` (or ``on``): tune with the defaults; ``N`` or ``N,N,N``: these thresholds
(and freeze); ``off`` or unset: leave the collector alone."""


@attrs.define(eq=False)
class GCTuning:
    """Applies (once) and restores the collector settings of this process."""

    thresholds: tuple[int, int, int] = SERVICE_THRESHOLDS
    freeze: bool = True
    _previous: tuple[int, int, int] | None = attrs.field(default=None, init=False)

    @property
    def applied(self) -> bool:
        """Whether the settings are in force (applied and not restored)."""
        return self._previous is not None

    def apply(self) -> None:
        """Collect once, freeze what is left (if ``freeze``), set the thresholds."""
        if self._previous is not None:
            return
        self._previous = gc.get_threshold()
        if self.freeze:
            gc.collect()
            gc.freeze()
        gc.set_threshold(*self.thresholds)

    def restore(self) -> None:
        """Put the previous thresholds back and unfreeze (no-op if not applied)."""
        previous = self._previous
        if previous is None:
            return
        self._previous = None
        gc.set_threshold(*previous)
        if self.freeze:
            gc.unfreeze()


def tuning_from_environ(environ: Mapping[str, str]) -> GCTuning | None:
    """The tuning ``AI_TOOLS_GC`` asks for (see :data:`ENV_GC`), or None."""
    value = environ.get(ENV_GC, "").strip().lower()
    if value in ("", "off", "0", "no", "false"):
        return None
    if value in ("service", "on", "1", "yes", "true"):
        return GCTuning()
    try:
        numbers = [int(part) for part in value.split(",")]
    except ValueError:
        numbers = []
    if not 1 <= len(numbers) <= 3 or any(n < 1 for n in numbers):
        raise ConfigError(
            f"{ENV_GC} must be 'service', 'off' or 1-3 positive thresholds like "
            f"'20000,10,10', got {value!r}"
        )
    thresholds = (*numbers, *SERVICE_THRESHOLDS[len(numbers):])
    return GCTuning(thresholds=(thresholds[0], thresholds[1], thresholds[2]))
