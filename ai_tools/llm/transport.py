"""The model client's HTTP transport: treq over public ``Agent`` composition.

::

    treq.HTTPClient                      (cookies, redirects off, body producer)
      ContentDecoderAgent(gzip: BoundedGzipDecoder)
        Agent.usingEndpointFactory(ModelEndpointFactory, HTTPConnectionPool)

The unit tests swap only the innermost agent (``treq.testing``'s
``RequestTraversalAgent`` over the scripted model), so the transport they
drive is the production one.  Gzip answers are decoded by
:class:`~ai_tools.llm.body.BoundedGzipDecoder` (bounded inflation); treq's own
content decoder, above ours, then finds nothing left to decode.
"""

from __future__ import annotations

import ipaddress
import urllib.request
from http.client import HTTPResponse
from http.cookiejar import CookieJar
from typing import Any

from hyperlink import URL
from treq.client import HTTPClient
from twisted.internet import defer
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
    wrapClientTLS,
)
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
from twisted.web.client import (
    URI,
    Agent,
    BrowserLikePolicyForHTTPS,
    ContentDecoderAgent,
    HTTPConnectionPool,
)
from twisted.web.error import SchemeNotSupported
from twisted.web.iweb import IAgent, IAgentEndpointFactory
from zope.interface import implementer

from ai_tools.llm.body import BoundedGzipDecoder, BytesProducer

try:  # treq >= 24 types its jar as IndexableCookieJar
    from treq.cookies import IndexableCookieJar as _CookieJarBase
except ImportError:  # pragma: no cover - older treq
    _CookieJarBase = CookieJar  # type: ignore[misc,assignment]


class NoCookieJar(_CookieJarBase):
    """A jar that never stores or sends cookies: model APIs are stateless, and the
    standard jar parses every request and response URL for nothing."""

    def add_cookie_header(self, request: urllib.request.Request) -> None:
        """Send no cookies."""

    def extract_cookies(self, response: HTTPResponse, request: urllib.request.Request) -> None:
        """Keep no cookies."""


class PreparedURL(URL):
    """A URL already in URI form whose text is computed once.

    treq converts the URL it is given to a URI and renders it on every
    request (hyperlink parsing, IDNA encoding); a model client sends every
    request to one URL.  Measured gain (callgrind, one
    :meth:`~ai_tools.llm.channel.ModelChannel.send` through treq to an agent
    that answers at once, 2026-11-25): 232k instructions with it, 572k with
    the URL as a string.
    """

    def to_uri(self) -> URL:
        return self

    def to_text(self, with_password: bool = False) -> str:
        cached: str | None = getattr(self, "_cached_text", None)
        if cached is None:
            cached = super().to_text(with_password)
            self._cached_text = cached
        return cached


def prepared_url(url: str) -> URL:
    """``url`` as a URL object treq can use without converting it again."""
    uri = URL.from_text(url).to_uri()
    return PreparedURL.from_text(uri.to_text())


@implementer(IStreamClientEndpoint)
class _QuietEndpoint:
    """An endpoint whose connections log no "Starting factory" line each."""

    def __init__(self, endpoint: IStreamClientEndpoint) -> None:
        self._endpoint = endpoint

    def connect(self, protocolFactory: IProtocolFactory) -> defer.Deferred[IProtocol]:
        # an Agent's factories are Factory instances, which log when noisy
        protocolFactory.noisy = False  # type: ignore[attr-defined]
        return self._endpoint.connect(protocolFactory)


@implementer(IAgentEndpointFactory)
class ModelEndpointFactory:
    """Endpoints for a model server: TCP for ``http``, TLS for ``https``.

    Built once per server (an ``Agent`` of its own builds one per request,
    IDNA-encoding the host name each time) and quiet.
    """

    def __init__(self, reactor: Any, connect_timeout: float) -> None:
        self._reactor = reactor
        self._connect_timeout = connect_timeout
        self._policy = BrowserLikePolicyForHTTPS()
        self._endpoints: dict[tuple[bytes, bytes, int], IStreamClientEndpoint] = {}

    def endpointForURI(self, uri: URI) -> IStreamClientEndpoint:
        key = (uri.scheme, uri.host, uri.port)
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            if len(self._endpoints) >= 8:  # one server is the rule: never grow
                self._endpoints.clear()
            endpoint = self._endpoints[key] = _QuietEndpoint(self._build(uri))
        return endpoint

    def _build(self, uri: URI) -> IStreamClientEndpoint:
        if uri.scheme not in (b"http", b"https"):
            raise SchemeNotSupported(f"Unsupported scheme: {uri.scheme!r}")
        try:
            host = uri.host.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"the host {uri.host!r} is not ASCII") from None
        endpoint = _tcp_endpoint(self._reactor, host, uri.port, self._connect_timeout or 30.0)
        if uri.scheme == b"http":
            return endpoint
        return wrapClientTLS(self._policy.creatorForNetloc(uri.host, uri.port), endpoint)


def _tcp_endpoint(reactor: Any, host: str, port: int, timeout: float
                  ) -> IStreamClientEndpoint:
    """A plain TCP endpoint for an IP address (a refused connection is known at once),
    else a ``HostnameEndpoint`` (it resolves the name and races the addresses it gets,
    reporting a failure only after its 0.3 s attempt delay)."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return HostnameEndpoint(reactor, host, port, timeout=timeout)
    if address.version == 4:
        return TCP4ClientEndpoint(reactor, str(address), port, timeout=timeout)
    return TCP6ClientEndpoint(reactor, str(address), port, timeout=timeout)


def pooled_agent(reactor: Any, connect_timeout: float, connections: int
                 ) -> tuple[IAgent, HTTPConnectionPool]:
    """An ``Agent`` on a persistent pool keeping up to ``connections`` connections."""
    pool = HTTPConnectionPool(reactor, persistent=True)
    pool.maxPersistentPerHost = connections
    agent = Agent.usingEndpointFactory(reactor, ModelEndpointFactory(reactor, connect_timeout),
                                       pool=pool)
    return agent, pool


def http_client(agent: IAgent) -> HTTPClient:
    """treq over ``agent``, decoding gzip answers with bounded inflation."""
    decoding: Any = ContentDecoderAgent(agent, [(b"gzip", BoundedGzipDecoder)])
    producer: Any = BytesProducer
    return HTTPClient(decoding, cookiejar=NoCookieJar(), data_to_body_producer=producer)
