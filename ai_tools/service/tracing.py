"""Whether a service's loops are traced, and with what (OpenTelemetry).

:class:`Tracing` holds the :class:`~ai_tools.telemetry.setup.Telemetry` the loops of
one service are traced with: the one given, else the one found when the service
starts (:func:`~ai_tools.telemetry.setup.telemetry_for`: the program's own tracer
provider, an OTLP/HTTP export, or off).  One it found is shut down (its last spans
exported, with a bounded wait) when the service stops, and looked for again at the
next start.
"""

from __future__ import annotations

from typing import cast

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime

from ai_tools.clocks import ThreadClock
from ai_tools.telemetry.setup import Telemetry, telemetry_for

__all__ = ["Tracing"]


class Tracing:
    """The tracing of one service (see the module)."""

    def __init__(self, telemetry: Telemetry | None = None,
                 otlp_endpoint: str | None = None) -> None:
        self.telemetry = telemetry
        """The OpenTelemetry tracer loops are traced with (None: tracing off)."""
        self._endpoint = otlp_endpoint
        self._found: Telemetry | None = None

    def start(self) -> None:
        """The service starts: look for tracing unless it was given."""
        if self.telemetry is None:
            self.telemetry = self._found = telemetry_for(self._endpoint)

    def stop(self, clock: IReactorTime) -> defer.Deferred[None] | None:
        """Export the last spans of ai_tools' own OpenTelemetry providers (bounded wait)."""
        telemetry = self.telemetry
        if telemetry is not None and telemetry is self._found:
            self.telemetry = self._found = None  # a restart looks again
        # Providers of its own are made only when the service found tracing itself, in a
        # running program: its clock is then the reactor, which takes calls from threads.
        return telemetry.shutdown(cast("ThreadClock", clock)) if telemetry is not None else None
