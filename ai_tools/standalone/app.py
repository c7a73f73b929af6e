"""Build and run the standalone service from a checked :class:`~ai_tools.standalone.config.Config`.

:class:`StandaloneService` is the root of the tree ``twistd ai-assistant``
runs (and ``python -m ai_tools.standalone.demo`` too).  Starting it, in order:

1. the model clients: one :class:`~ai_tools.llm.client.OpenAIChatClient` per
   model profile; a scripted profile first starts the scripted model server of
   :mod:`ai_tools.llm.scripted` on 127.0.0.1 and points its client there;
2. the store (SQLite file, memory or PostgreSQL), opened and migrated;
3. the sandbox world, loaded from the store (seeded from the world file the
   first time) — with PostgreSQL, the shared world of
   :mod:`ai_tools.world.shared`, which follows the database;
4. the :class:`~ai_tools.service.service.AssistantService` with the configured
   assistants and those created over the API (each restored from its saved
   state; which configuration wins is :mod:`ai_tools.service.roster`'s rule);
5. the listeners: the HTTP API and, when enabled, the SSH manhole;
6. opt-in (``AI_TOOLS_GC=service``): the garbage-collector settings of
   :mod:`ai_tools.standalone.gc_tuning` for this process, restored when it stops.

So nothing listens before the world and the assistants are there.  A failure
on the way is logged as one line and handed to ``on_fatal`` (twistd stops
with a non-zero exit status); :meth:`StandaloneService.when_ready` fails
with it too.  Stopping closes the listeners first, then the assistants (their
state saved), the model clients, the store and the scripted model servers.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any, cast

from twisted.application.service import IService, MultiService
from twisted.internet import defer, error
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from ai_tools.default_reactor import global_reactor
from ai_tools.errors import AIToolsError
from ai_tools.settings import near_name
from ai_tools.standalone.config import Config, ModelSpec, split_endpoint
from ai_tools.standalone.gc_tuning import GCTuning, tuning_from_environ

if TYPE_CHECKING:
    from ai_tools.llm.client import OpenAIChatClient
    from ai_tools.llm.scripted import TestServer
    from ai_tools.service.service import AssistantService

__all__ = ["StandaloneService", "build_service", "busy_ports", "describe_failure"]

log = Logger()

WebFactory = Callable[..., IService]
_SHOWN = 12
"""Characters named at most in the message about an unknown one."""
FatalHandler = Callable[[str], None]


def describe_failure(failure: Failure | BaseException) -> str:
    """One line saying what went wrong, for a person (no traceback)."""
    exc = failure.value if isinstance(failure, Failure) else failure
    if isinstance(exc, error.CannotListenError):
        why = exc.socketError
        reason = getattr(why, "strerror", None) or str(why)
        interface = exc.interface or "every interface"
        return f"cannot listen on port {exc.port} of {interface}: {reason}"
    if isinstance(exc, AIToolsError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def busy_ports(config: Config) -> list[str]:
    """Why a configured TCP listener cannot listen now (a port in use), one line each.

    twistd reports a daemon's start as successful once ``makeService`` and
    ``startService`` returned, before the listeners open (after the store and
    the world); so the ports are tried here first, with the options twistd's
    listeners use, and released at once.  (Port 0 and UNIX sockets need no check.)
    """
    problems = []
    for enabled, endpoint in ((config.http.enabled, config.http.endpoint),
                              (config.manhole.enabled, config.manhole.endpoint)):
        address = _tcp_address(endpoint) if enabled else None
        if address is None:
            continue
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                problems.append(describe_failure(error.CannotListenError(host, port, exc)))
    return problems


def _tcp_address(endpoint: str) -> tuple[str, int] | None:
    """``(interface, port)`` of a TCP endpoint string with a fixed port, else None."""
    kind, *fields = split_endpoint(endpoint)
    if kind.lower() not in ("tcp", "tcp6", "ssl") or not fields:
        return None
    port = int(fields[0].split("=")[-1])
    options = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
    host = options.get("interface", "::" if kind.lower() == "tcp6" else "0.0.0.0")
    host = host.replace("\\:", ":").strip("[]")
    return (host, port) if port else None


def _optional_factory(module: str, name: str) -> WebFactory | None:
    """A listener factory, or None when its module is not part of this build."""
    import importlib

    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and module.startswith(exc.name):
            return None
        raise
    factory = getattr(loaded, name, None)
    return factory if callable(factory) else None


class StandaloneService(MultiService):
    """The whole standalone service, built on start from ``config`` (see the module).

    ``reactor`` defaults to the global one (looked up on start);
    ``on_fatal(message)`` is called when start-up fails; ``web_factory`` and
    ``manhole_factory`` replace ``ai_tools.web.api.make_web_service`` and
    ``ai_tools.standalone.console.make_manhole_service`` (tests); ``gc_tuning`` is
    applied once ready (default: what ``AI_TOOLS_GC`` in ``environ``, the
    process environment by default, asks for; usually nothing).  After
    :meth:`when_ready` fires, ``assistants`` (the ``AssistantService``),
    ``world``, ``store``, ``registry``, ``scripted`` (the scripted model
    servers by profile name) and ``listeners`` (by name) are set.
    """

    def __init__(
        self,
        config: Config,
        *,
        reactor: Any = None,
        on_fatal: FatalHandler | None = None,
        web_factory: WebFactory | None = None,
        manhole_factory: WebFactory | None = None,
        gc_tuning: GCTuning | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.gc_tuning = gc_tuning
        self._environ = environ
        self.config = config
        self._reactor = reactor
        self.on_fatal = on_fatal
        self._web_factory = web_factory
        self._manhole_factory = manhole_factory
        self.assistants: Any = None
        self.leases: Any = None
        """The lease manager when this process is one of several workers (PostgreSQL)."""
        self.world: Any = None
        self.store: Any = None
        self.registry: Any = None
        self.mcp_client: Any = None
        """The :class:`~ai_tools.mcp.servers.McpClientService` (None without MCP servers)."""
        self.clients: dict[str, OpenAIChatClient] = {}
        self.scripted: dict[str, TestServer] = {}
        self.listeners: dict[str, IService] = {}
        self.addresses: dict[str, str] = {}
        self.failure: str | None = None
        self._startup: defer.Deferred[None] | None = None
        self._ready_waiters: list[defer.Deferred[StandaloneService]] = []
        self._ready = False
        self._store_opened = False

    @property
    def reactor(self) -> Any:
        """The reactor everything runs on."""
        if self._reactor is None:
            self._reactor = global_reactor()
        return self._reactor

    # -- start -------------------------------------------------------------------------

    def startService(self) -> None:
        """Start the children (none yet), then build and start everything in order."""
        super().startService()
        self._startup = self._start()
        self._startup.addErrback(self._start_failed)

    @defer.inlineCallbacks
    def _start(self) -> Any:
        config = self.config
        for warning in config.warnings:
            log.warn("Configuration: {warning}", warning=warning)
        if self.gc_tuning is None:  # a bad value stops the start like a bad config
            self.gc_tuning = tuning_from_environ(
                os.environ if self._environ is None else self._environ)
        yield self._start_models()
        yield self._open_store()
        from ai_tools.world.sandbox import SandboxWorld
        from ai_tools.world.shared import SharedWorld

        world_type = SharedWorld if config.store.backend == "postgres" else SandboxWorld
        self.world = yield world_type.load(self.store, seed=config.world.file,
                                           clock=self.reactor, log_size=config.world.log_size)
        yield self._start_assistants()
        if self.running:
            self._start_listeners()
        yield self._log_addresses()
        if self.leases is not None and "http" in self.addresses:
            # the other workers forward requests about this worker's assistants here
            yield self.leases.advertise(_api_url(self.addresses["http"]))
        self._ready = True
        if self.gc_tuning is not None and self.running:
            self.gc_tuning.apply()
            log.info("Garbage collector tuned for a service: thresholds {thresholds}, "
                     "start-up objects frozen: {freeze}",
                     thresholds=self.gc_tuning.thresholds, freeze=self.gc_tuning.freeze)
        log.info(
            "ai_tools service ready: {count} assistant(s) ({names}); store {store}; "
            "world {world}; HTTP API {http}; manhole {manhole}",
            count=len(self.assistants.names()),
            names=", ".join(self.assistants.names()) or "none",
            store=self._store_label(), world=self.world.meta.get("name", "sandbox"),
            http=self.addresses.get("http", "off"), manhole=self.addresses.get("manhole", "off"),
        )
        waiters, self._ready_waiters = self._ready_waiters, []
        for waiter in waiters:
            waiter.callback(self)

    def _start_failed(self, failure: Failure) -> None:
        self.failure = describe_failure(failure)
        if failure.check(AIToolsError, OSError, error.CannotListenError):
            log.critical("ai_tools service could not start: {error}", error=self.failure)
        else:  # a bug: keep the traceback in the log
            log.failure("ai_tools service could not start: {error}", failure,
                        LogLevel.critical, error=self.failure)
        waiters, self._ready_waiters = self._ready_waiters, []
        for waiter in waiters:
            waiter.errback(failure)
        if self.on_fatal is not None:
            self.on_fatal(self.failure)

    def when_ready(self) -> defer.Deferred[StandaloneService]:
        """Fires with this service once everything listens; fails if start-up failed."""
        if self._ready:
            return defer.succeed(self)
        if self.failure is not None:
            return defer.fail(AIToolsError(self.failure))
        waiter: defer.Deferred[StandaloneService] = defer.Deferred()
        self._ready_waiters.append(waiter)
        return waiter

    @defer.inlineCallbacks
    def _start_models(self) -> Any:
        from ai_tools.llm.client import OpenAIChatClient
        from ai_tools.llm.profile import ModelProfile
        from ai_tools.llm.server import ModelServers

        servers = ModelServers(self.reactor)  # profiles of one server share its slots
        for name, spec in self.config.models.items():
            if spec.scripted:
                server = yield self._start_scripted(spec)
                self.scripted[name] = server
                profile = ModelProfile.from_mapping(
                    {"base_url": server.url, "model": server.model_name, "name": name,
                     **dict(spec.options)},
                    where=f"models.{name}",
                )
                log.info("Model profile {name}: the scripted stand-in model playing {scenario} "
                         "(no model server; answers come from a script)",
                         name=name, scenario=str(spec.scenario))
            else:
                assert spec.profile is not None
                profile = spec.profile
                log.info("Model profile {name}: {model} at {url}", name=name,
                         model=profile.model, url=profile.base_url)
            client = self.clients[name] = OpenAIChatClient(
                profile, reactor=self.reactor, server=servers.for_profile(profile))
            # the model's window, from its server when it tells it (logged with its source);
            # never fails, and a slow server does not hold the start (its first call waits)
            client.learn_context_window()

    def _start_scripted(self, spec: ModelSpec) -> defer.Deferred[TestServer]:
        from ai_tools.llm.scripted import Script, start_test_server

        assert spec.scenario is not None
        try:
            script = Script.from_file(spec.scenario)
        except (OSError, ValueError, TypeError) as exc:
            return defer.fail(AIToolsError(f"models.{spec.name}.scenario: {exc}"))
        return start_test_server(script, self.reactor, interface="127.0.0.1", port=spec.port,
                                 model_name=spec.model_name)

    @defer.inlineCallbacks
    def _open_store(self) -> Any:
        """Open the store; a failure is one line naming it (the SQLite errors name the file)."""
        from ai_tools.store.sqlite_file import DatabaseFileError

        self.store = self._make_store()
        try:
            yield self.store.open()
        except DatabaseFileError as exc:
            raise AIToolsError(f"cannot open the store: {exc}") from exc
        except Exception as exc:
            raise AIToolsError(f"cannot open the store ({self._store_label()}): "
                               f"{describe_failure(exc)}") from exc
        self._store_opened = True

    def _make_store(self) -> Any:
        store = self.config.store
        if store.backend == "postgres":
            from ai_tools.store.postgres import PostgreSQLStore

            assert store.dsn is not None
            return PostgreSQLStore(store.dsn, password=store.password, clock=self.reactor,
                                   reactor=self.reactor)
        if store.backend == "memory":
            from ai_tools.store.memory import MemoryStore

            return MemoryStore(clock=self.reactor)
        from ai_tools.store.sqlite import SQLiteStore

        assert store.path is not None
        return SQLiteStore(os.fspath(store.path), clock=self.reactor, reactor=self.reactor,
                           synchronous=store.synchronous, quick_check=store.quick_check)

    def _store_label(self) -> str:
        store = self.config.store
        if store.backend == "postgres":
            return str(getattr(self.store, "label", "PostgreSQL"))
        return "in memory" if store.backend == "memory" else f"SQLite {store.path}"

    @defer.inlineCallbacks
    def _start_assistants(self) -> Any:
        from ai_tools.service.roster import start_assistants
        from ai_tools.service.service import AssistantService
        from ai_tools.tools import register_default_tools

        settings = self.config.service
        self._check_characters()
        self.registry = register_default_tools()
        service = AssistantService(
            llms=self.clients, store=self.store,
            registry=self.registry, world=self.world,
            clock=self.reactor, tick_interval=settings.tick_interval,
            max_concurrent=settings.max_concurrent, stop_grace=settings.stop_grace,
            otlp_endpoint=settings.otlp_endpoint,
            min_tick_rate=settings.min_tick_rate, max_assistants=settings.max_assistants,
        )
        self.assistants = service
        self._start_mcp_client(service)
        service.setServiceParent(self)
        yield service.when_ready()
        if self.config.store.backend == "postgres":
            # one worker of several: the assistants of the config are shared by lease
            yield self._share_assistants(service)
        else:
            # the config file seeds, the store keeps; the last change wins (see roster)
            yield start_assistants(service, self.config.assistants)

    def _start_mcp_client(self, service: AssistantService) -> None:
        """The MCP servers of ``[mcp.servers]``, connected before the assistants tick.

        A child of this service started before the assistants' (so stopped after
        them: no loop is left calling a server that is gone); each loop gets the
        tools of the servers its assistant names (``mcp_servers``) that are ready.
        """
        if not self.config.mcp_servers:
            return
        from ai_tools.mcp.servers import McpClientService

        self.mcp_client = McpClientService(self.config.mcp_servers, self.reactor,
                                           base=self.registry,
                                           telemetry=lambda: service.telemetry)
        self.mcp_client.setServiceParent(self)
        service.tool_sources = self.mcp_client

    def _share_assistants(self, service: AssistantService) -> defer.Deferred[None]:
        """With PostgreSQL this process is one worker of several: it runs the assistants
        whose lease it holds (:mod:`ai_tools.service.leases`)."""
        import socket

        from ai_tools.service.leases import LeaseManager

        workers = self.config.workers
        self.leases = LeaseManager(
            service, self.store, self.config.assistants,
            worker=workers.name or f"{socket.gethostname()}:{os.getpid()}",
            ttl=workers.lease_ttl, interval=workers.lease_interval)
        log.info("Worker {worker}: sharing {count} assistant(s) with the other workers "
                 "(leases of {ttl:g}s renewed every {interval:g}s)", worker=self.leases.worker,
                 count=len(self.config.assistants), ttl=workers.lease_ttl,
                 interval=workers.lease_interval)
        return self.leases.start()

    def _check_characters(self) -> None:
        """Every assistant of the config (and ``[mcp.serve]``) plays a character of the world:
        else one error."""
        characters = set(self.world.character_ids())
        serve = self.config.mcp_serve
        wanted = [(f"assistants.{a.name}.character_id", a.character_id)
                  for a in self.config.assistants]
        if serve is not None:
            wanted.append(("mcp.serve.character", serve.character))
        for key, char in wanted:
            if not char or char in characters:
                continue
            close = near_name(char, characters)
            known = ", ".join(sorted(characters)[:_SHOWN]) + (
                ", ..." if len(characters) > _SHOWN else "")
            hint = f"did you mean {close!r}? " if close else ""
            raise AIToolsError(
                f"{key}: no character {char!r} in the "
                f"world {self.world.meta.get('name', 'sandbox')} ({hint}characters: "
                f"{known or 'none'})")

    def _start_listeners(self) -> None:
        config = self.config
        if config.http.enabled:
            factory = self._web_factory or _optional_factory("ai_tools.web.api",
                                                             "make_web_service")
            if factory is None:
                log.warn("The HTTP API is not part of this build; not listening on {endpoint}",
                         endpoint=config.http.endpoint)
            else:
                serve = {"mcp": config.mcp_serve} if config.mcp_serve is not None else {}
                web = factory(self.assistants, self.world, endpoint=config.http.endpoint,
                              token=config.http.token, max_body=config.http.max_body,
                              allowed_hosts=config.http.allowed_hosts,
                              worker_hosts=config.workers.api_hosts,
                              limits=config.http.limits, **serve)
                self._add_listener("http", web)
        manhole = config.manhole
        if manhole.enabled:
            factory = self._manhole_factory or _optional_factory("ai_tools.standalone.console",
                                                                 "make_manhole_service")
            if factory is None:
                log.warn("The manhole is not part of this build; not listening on {endpoint}",
                         endpoint=manhole.endpoint)
            else:
                console = factory(
                    self.namespace(), endpoint=manhole.endpoint,
                    authorized_keys=_path_or_none(manhole.authorized_keys),
                    password_file=_path_or_none(manhole.password_file),
                    host_key=_path_or_none(manhole.host_key),
                )
                self._add_listener("manhole", console)

    def _add_listener(self, name: str, listener: IService) -> None:
        self.listeners[name] = listener
        cast(Any, listener).setServiceParent(self)  # listens now; raises if it cannot

    def namespace(self) -> dict[str, object]:
        """The manhole's globals: the service, the world, the registry, the store, the config."""
        return {"service": self.assistants, "world": self.world, "registry": self.registry,
                "store": self.store, "config": self.config, "app": self}

    @defer.inlineCallbacks
    def _log_addresses(self) -> Any:
        for name, listener in self.listeners.items():
            when = getattr(listener, "when_listening", None)
            if when is None:
                continue
            port = yield when()
            host = port.getHost()
            address = getattr(host, "host", None)
            number = getattr(host, "port", None)
            if address is None or number is None:
                label = str(getattr(host, "name", host))
            else:
                label = f"[{address}]:{number}" if ":" in address else f"{address}:{number}"
            self.addresses[name] = label
            if name == "http":
                log.info("HTTP API listening on http://{address}/", address=label)
            else:
                log.info("{name} listening on {address}", name=name, address=label)

    # -- stop --------------------------------------------------------------------------

    def stopService(self) -> defer.Deferred[None]:
        """Wait for start-up to settle, stop listeners then assistants, close everything."""
        startup = self._startup
        if startup is not None and not startup.called:
            waiting: defer.Deferred[None] = defer.Deferred()

            def settled(result: object) -> object:
                waiting.callback(None)
                return result

            startup.addBoth(settled)
        else:
            waiting = defer.succeed(None)
        waiting.addCallback(lambda _: self._stop())
        return waiting

    @defer.inlineCallbacks
    def _stop(self) -> Any:
        if self.gc_tuning is not None:
            self.gc_tuning.restore()
        stop_following = getattr(self.world, "stop", None)  # a shared world follows the database
        if stop_following is not None:
            stop_following()
        try:
            yield defer.maybeDeferred(super().stopService)
        except Exception:
            log.failure("Stopping the services failed")
        if self.assistants is None:
            for name, client in self.clients.items():
                yield self._quietly(client.close, f"closing model client {name}")
            if self._store_opened and self.store is not None:
                yield self._quietly(self.store.close, "closing the store")
        for name, server in self.scripted.items():
            yield self._quietly(server.stop, f"stopping the scripted model {name}")
        log.info("ai_tools service stopped")

    @staticmethod
    @defer.inlineCallbacks
    def _quietly(fn: Callable[[], object], what: str
                 ) -> Generator[defer.Deferred[object], object, None]:
        try:
            yield defer.maybeDeferred(fn)
        except Exception as exc:
            log.error("Shutdown: {what} failed: {error}", what=what, error=describe_failure(exc))


def _api_url(address: str) -> str:
    """The URL other workers reach this worker's API at, from the address it listens on
    (``host:port``; on every interface, the host name stands for it)."""
    host, _, port = address.rpartition(":")
    if host in ("0.0.0.0", "[::]", "::"):
        host = socket.gethostname()
    return f"http://{host}:{port}"


def _path_or_none(path: os.PathLike[str] | None) -> str | None:
    return None if path is None else os.fspath(path)


def build_service(
    config: Config,
    *,
    reactor: Any = None,
    on_fatal: FatalHandler | None = None,
    factories: Mapping[str, WebFactory] | None = None,
) -> StandaloneService:
    """The root service for ``config`` (nothing happens until it is started)."""
    factories = factories or {}
    return StandaloneService(config, reactor=reactor, on_fatal=on_fatal,
                             web_factory=factories.get("http"),
                             manhole_factory=factories.get("manhole"))
