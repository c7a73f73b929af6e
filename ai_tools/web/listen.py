"""Where a listener binds: parse a strports description and tell whether it is local-only.

The HTTP API needs a bearer token as soon as it listens beyond the loopback
interface, and the manhole warns about it; both ask :func:`binds_locally`.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.default_reactor import or_global_reactor
from ai_tools.errors import ConfigError

__all__ = ["ListeningService", "binds_locally", "endpoint_interface", "split_endpoint"]

log = Logger()

_NETWORK_KINDS = frozenset({"tcp", "tcp6", "ssl"})
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def split_endpoint(description: str) -> tuple[str, list[str], dict[str, str]]:
    """``(kind, positional, keywords)`` of a strports description.

    Follows the strports rules: fields split on ``:``, a backslash escapes the
    next character (``interface=\\:\\:1``), ``key=value`` fields are keywords.
    Raises ConfigError for something that is not a description.
    """
    if not isinstance(description, str) or not description.strip():
        raise ConfigError(f"a listening endpoint must be a strports string, not {description!r}")
    fields: list[str] = []
    current: list[str] = []
    chars = iter(description)
    for char in chars:
        if char == "\\":
            current.append(next(chars, ""))
        elif char == ":":
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    fields.append("".join(current))
    kind = fields[0].strip().lower()
    if kind.isdigit():  # the old "8080" form means tcp:8080
        fields.insert(0, "tcp")
        kind = "tcp"
    positional: list[str] = []
    keywords: dict[str, str] = {}
    for field in fields[1:]:
        key, sep, value = field.partition("=")
        if sep:
            keywords[key.strip()] = value
        else:
            positional.append(field)
    return kind, positional, keywords


def endpoint_interface(description: str) -> str | None:
    """The address a tcp/tcp6/ssl endpoint binds (None: every interface, or not TCP)."""
    kind, _, keywords = split_endpoint(description)
    if kind not in _NETWORK_KINDS:
        return None
    interface = keywords.get("interface", "").strip()
    return interface or None


def binds_locally(description: str) -> bool:
    """Whether the endpoint can only be reached from this machine.

    True for a tcp/tcp6/ssl endpoint whose ``interface`` is a loopback address
    (``127.0.0.1``, any ``127.x``, ``::1``, ``localhost``) and for a UNIX
    socket; False for every interface (no ``interface=``, ``0.0.0.0``,
    ``::``), any other address or host name, and endpoint kinds we cannot
    judge (systemd sockets, plugins).
    """
    kind, _, keywords = split_endpoint(description)
    if kind == "unix":
        return True
    if kind not in _NETWORK_KINDS:
        return False
    interface = keywords.get("interface", "").strip().strip("[]")
    if not interface:
        return False
    if interface.lower() in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(interface.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class ListeningService(Service):
    """Listens on a strports endpoint while running (like ``strports.service``).

    A listen that fails at once (address in use, bad interface) raises from
    :meth:`startService`, so a server refuses to start rather than run deaf.
    :meth:`when_listening` gives the ``IListeningPort`` (tests bind port 0 and
    read the real port from it).
    """

    def __init__(self, description: str, factory: Any, reactor: Any = None) -> None:
        self.description = description
        self.factory = factory
        self._reactor = reactor
        self.port: Any = None
        self._listening: defer.Deferred[Any] | None = None
        self._waiters: list[defer.Deferred[IListeningPort]] = []

    def _endpoint(self) -> Any:
        reactor = or_global_reactor(self._reactor)
        try:
            return serverFromString(reactor, self.description)
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"bad listening endpoint {self.description!r}: {exc}") from None

    def privilegedStartService(self) -> None:
        """Start listening (before privileges are dropped, like strports)."""
        super().privilegedStartService()
        if self._listening is None:
            self._listen()

    def startService(self) -> None:
        """Start listening unless :meth:`privilegedStartService` did."""
        super().startService()
        if self._listening is None:
            self._listen()

    def _listen(self) -> None:
        failed: list[Failure] = []
        synchronous = True
        d = self._endpoint().listen(self.factory)
        self._listening = d

        def listening(port: IListeningPort) -> IListeningPort:
            self.port = port
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter.callback(port)
            return port

        def not_listening(failure: Failure) -> None:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter.errback(failure)
            if synchronous:
                failed.append(failure)  # raised below, to whoever starts us
            elif not failure.check(defer.CancelledError):
                log.failure("Could not listen on {endpoint}", failure,
                            endpoint=self.description)

        d.addCallbacks(listening, not_listening)
        synchronous = False
        if failed:
            self._listening = None
            self.running = False
            failed[0].raiseException()

    def when_listening(self) -> defer.Deferred[IListeningPort]:
        """Fires with the listening port once it listens."""
        if self.port is not None:
            return defer.succeed(self.port)
        waiter: defer.Deferred[IListeningPort] = defer.Deferred()
        self._waiters.append(waiter)
        return waiter

    def stopService(self) -> defer.Deferred[None]:
        """Stop listening (or give up a listen still pending); fires once closed."""
        super().stopService()
        listening, self._listening = self._listening, None
        port: Any = self.port
        self.port = None
        if port is not None:
            return defer.maybeDeferred(port.stopListening)
        if listening is not None and not listening.called:
            listening.cancel()
        return defer.succeed(None)
