"""The HTTP API's bounds: connections, request deadlines, event streams.

Every figure is a setting of the ``[http]`` table of the standalone config
(the same names) and of :func:`ai_tools.web.api.make_web_service`
(``limits=HttpLimits(...)``).  Caps "per address" apply to clients beyond
the loopback interface: every client of a reverse proxy or an SSH tunnel on
this machine comes from 127.0.0.1, and those count only towards the totals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ai_tools.errors import ConfigError
from ai_tools.numbers import is_positive_number

__all__ = ["HttpLimits"]


def _positive_int(_: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{attribute.name} must be a positive integer, not {value!r}")


def _positive_number(_: object, attribute: attrs.Attribute[float], value: object) -> None:
    if not is_positive_number(value):
        raise ConfigError(f"{attribute.name} must be a positive number, not {value!r}")


@attrs.frozen
class HttpLimits:
    """What one client, and all of them together, may hold of the service."""

    max_connections: int = attrs.field(default=500, validator=_positive_int)
    """Open connections in all.  When full, a new connection takes the place of the
    oldest one waiting idle for its next request; with none idle it gets ``503``."""
    max_connections_per_address: int = attrs.field(default=50, validator=_positive_int)
    """Open connections from one address beyond loopback."""
    header_timeout: float = attrs.field(default=10.0, validator=_positive_number)
    """Seconds a connection has to send a request's whole head (request line and
    headers), counted from when it opened or its last answer ended; bytes that
    dribble in do not extend it.  An idle keep-alive connection is closed then."""
    body_timeout: float = attrs.field(default=30.0, validator=_positive_number)
    """Seconds a request has to send its whole body once its head arrived."""
    max_streams: int = attrs.field(default=400, validator=_positive_int)
    """Open ``GET /events`` streams in all."""
    max_streams_per_address: int = attrs.field(default=10, validator=_positive_int)
    """Open event streams from one address beyond loopback."""
    stream_buffer: int = attrs.field(default=256 * 1024, validator=_positive_int)
    """Bytes of events one stream may hold back while its client does not read; past
    it the oldest are dropped, and the client is told how many when it reads again."""
    stream_stall_timeout: float = attrs.field(default=60.0, validator=_positive_number)
    """Seconds a stream may go without its client reading anything while events
    wait for it; then it is closed."""
    max_event_bytes: int = attrs.field(default=64 * 1024, validator=_positive_int)
    """Largest event a stream carries; a larger one is sent as a short notice
    saying what was left out and how big it was."""
    replay_events: int = attrs.field(default=2000, validator=_positive_int)
    """Newest events kept for clients that reconnect with ``Last-Event-ID``."""
    replay_buffer: int = attrs.field(default=1024 * 1024, validator=_positive_int)
    """Bytes of those kept events; past either bound the oldest are forgotten (a
    client that missed one of them is told, with a ``gap`` event)."""
    forward_timeout: float = attrs.field(default=10.0, validator=_positive_number)
    """With several workers: seconds the worker that runs an assistant has to answer a
    request another worker passes on (its whole answer; an event stream passed on may
    stay silent this long past two keep-alive intervals)."""
    forward_tick_timeout: float = attrs.field(default=300.0, validator=_positive_number)
    """The same for the requests that wait for a tick (``POST …/tick``; ``PATCH`` and
    ``DELETE`` of an assistant, which wait for its tick in flight to stop)."""
    forward_max_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=_positive_int)
    """With several workers: bytes of such an answer; a larger one is refused (``502``)."""
    traces_kept: int = attrs.field(default=50, validator=_positive_int)
    """Loop traces the store keeps per assistant for ``GET /traces`` and the console's
    trace view (the newest; each at most 64 KiB)."""

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        """The names of the settings (the keys of :meth:`from_mapping`)."""
        return tuple(field.name for field in attrs.fields(cls))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str = "") -> HttpLimits:
        """The limits with ``values`` replacing defaults; ConfigError names ``where.key``."""
        unknown = sorted(set(values) - set(cls.setting_names()))
        prefix = f"{where}." if where else ""
        if unknown:
            raise ConfigError(f"{prefix}{unknown[0]}: not an HTTP limit; the limits are "
                              f"{', '.join(cls.setting_names())}")
        try:
            return cls(**values)
        except ConfigError as exc:
            raise ConfigError(f"{prefix}{exc}") from None
