"""Shared pytest configuration.

Do not import the reactor here: pytest-twisted installs it (``--reactor``).
Unit tests (tests/unit) drive time with ``task.Clock``; tests that need the real
reactor, real sockets on 127.0.0.1 or real processes live in tests/integration.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci")
