"""Browsers on this machine are not trusted: the Host, Origin and Sec-Fetch-Site checks.

A listener on 127.0.0.1 is reachable by every web page the user opens: a page
can post to it (a "simple" request needs no permission), and a page whose
name an attacker re-points at 127.0.0.1 (DNS rebinding) can read its answers
too.  Two checks stop both, before the token and before any handler:

* **Host** must name this service: ``localhost``, ``127.0.0.1`` or ``[::1]``
  (or the address it is bound to) with the port it listens on, or a name of
  ``allowed_hosts``.  A rebound page sends its own name, which is not there.
  On a listener bound to every interface any IP address is accepted too (an
  address cannot be rebound).
* **Origin**, when a browser sends one, must pass the same test (the page the
  request comes from is this service, or an allowed name); ``Origin: null``
  never does.  ``Sec-Fetch-Site: cross-site`` is refused outright.

``allowed_hosts`` entries are ``name`` (any port) or ``name:port`` (``[v6]:port``
for IPv6): the public name of a reverse proxy, or ``localhost:9000`` for an
SSH tunnel forwarding another port.  See ``docs/http-api.md``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

import attrs
from twisted.web.server import Request

from ai_tools.errors import ConfigError
from ai_tools.web.errors import ApiError

__all__ = ["OriginPolicy", "parse_allowed_hosts", "split_authority"]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_authority(text: str, default_port: int | None) -> tuple[str, int | None] | None:
    """``(host, port)`` of ``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; None if malformed.

    The host is lower-cased, an IPv6 address loses its brackets; without a
    port, ``default_port``.
    """
    text = text.strip().lower()
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not host or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    else:
        host, colon, port_text_or_empty = text.partition(":")
        port_text = port_text_or_empty if colon else None
    if not host or any(c in host for c in "/@?# \t"):
        return None
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return host, int(port_text)


def parse_allowed_hosts(value: object, where: str = "allowed_hosts") -> tuple[str, ...]:
    """Check an ``allowed_hosts`` setting: a list of ``name`` or ``name:port`` strings."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(f"{where} must be a list of host names, not {value!r}")
    entries = []
    for entry in value:
        if not isinstance(entry, str) or split_authority(entry, None) is None:
            raise ConfigError(f"{where}: {entry!r} is not a host name or name:port "
                              "(no scheme, no path, no wildcard)")
        if "*" in entry:
            raise ConfigError(f"{where}: {entry!r}: wildcards are not allowed")
        entries.append(entry.strip().lower())
    return tuple(entries)


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


@attrs.define(eq=False)
class OriginPolicy:
    """The Host/Origin rule of one listener.

    ``port`` and ``interface`` are what it is bound to (:meth:`bind` sets them
    once it listens; None: not known, so any port, any address).
    """

    allowed_hosts: tuple[str, ...] = attrs.field(default=(), converter=parse_allowed_hosts)
    port: int | None = None
    interface: str | None = None
    _allowed: tuple[tuple[str, int | None], ...] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        pairs = (split_authority(entry, None) for entry in self.allowed_hosts)
        self._allowed = tuple(pair for pair in pairs if pair is not None)

    def bind(self, address: object) -> None:
        """Take the port and address from the listening port's ``getHost()``."""
        port = getattr(address, "port", None)
        host = getattr(address, "host", None)
        self.port = port if isinstance(port, int) and port > 0 else None
        self.interface = host if isinstance(host, str) and _ip(host) is not None else None

    def allows(self, host: str, port: int | None) -> bool:
        """Whether ``host:port`` names this service."""
        if any(host == name and (want is None or want == port) for name, want in self._allowed):
            return True
        if self.port is not None and port != self.port:
            return False
        if host in LOOPBACK_NAMES:
            return True
        address = _ip(host)
        if address is None:
            return False  # a name: only through allowed_hosts
        bound = _ip(self.interface) if self.interface is not None else None
        if bound is None or bound.is_unspecified:
            return True
        return address == bound or (bound.is_loopback and address.is_loopback)

    def check(self, request: Request) -> None:
        """Raise ApiError unless the request's Host, Origin and Sec-Fetch-Site pass."""
        raw_host = request.getHeader(b"host")
        if not raw_host:
            raise ApiError(400, "the request has no Host header")
        host_text = raw_host.decode("latin-1")
        default_port = 443 if request.isSecure() else 80
        authority = split_authority(host_text, default_port)
        if authority is None or not self.allows(*authority):
            raise ApiError(403, f"Host {host_text!r} is not a name of this service; add it "
                           "to the HTTP API's allowed_hosts if it is (a reverse proxy, "
                           "a tunnel)")
        fetch_site = request.getHeader(b"sec-fetch-site")
        if fetch_site is not None and fetch_site.strip().lower() == b"cross-site":
            raise ApiError(403, "cross-site requests are refused (Sec-Fetch-Site: cross-site)")
        origin = request.getHeader(b"origin")
        if origin is not None and not self._origin_allowed(origin.decode("latin-1")):
            raise ApiError(403, f"requests from pages of {origin.decode('latin-1')!r} are "
                           "refused; add its host to the HTTP API's allowed_hosts if it "
                           "is this service")

    def _origin_allowed(self, origin: str) -> bool:
        try:
            parts = urlsplit(origin.strip())
        except ValueError:
            return False
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS or parts.path not in ("", "/") or parts.query:
            return False
        authority = split_authority(parts.netloc, _DEFAULT_PORTS[scheme])
        return authority is not None and self.allows(*authority)
