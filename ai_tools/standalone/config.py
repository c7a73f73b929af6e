"""The standalone service's configuration file (TOML), checked up front.

``twistd -n ai-assistant --config assistant.toml`` reads one file with these
tables (every one optional; ``examples/assistant.toml`` shows them all)::

    [service]      tick_interval, stop_grace, max_concurrent, min_tick_rate,
                   max_assistants, log_level
    [store]        backend ("sqlite", "memory" or "postgres"), path, synchronous,
                   quick_check, dsn and password_file (postgres)
    [world]        file (the seed world file), log_size
    [models.NAME]  a model profile (ModelProfile fields), or scenario = "file"
                   for the scripted stand-in model of ai_tools.llm.scripted
    [[assistants]] AssistantConfig fields: name, character_id, persona, model,
                   tick_rate, sleep_*, reflection_interval, execution_config
                   (with allowed_tools per context), exit_tools, ...
    [http]         enabled, listen, token / token_env / token_file, max_body,
                   allowed_hosts, and the limits of ``ai_tools.web.limits.HttpLimits``
    [manhole]      enabled, listen, authorized_keys, password_file, host_key
    [workers]      name, lease_ttl, lease_interval, api_hosts (postgres)
    [mcp.servers.NAME]  an MCP server whose tools assistants naming it in
                   ``mcp_servers`` may use (:mod:`ai_tools.mcp.config`)

The deployment settings of :mod:`ai_tools.settings` (model server, database,
listeners, log level...) can also be given as ``twistd`` flags and
``AI_TOOLS_…`` variables, which win over the file (:mod:`.overrides`).
Relative paths in the file are relative to the file's directory; paths given
on the command line or in a variable are relative to the working directory.
Every mistake —
unknown key, wrong type, missing file, an assistant naming an unknown tool or
model profile, a listener off localhost without a token — raises
:class:`~ai_tools.errors.ConfigError` with one line naming the file and the
key, e.g. ``assistant.toml: assistants.pip.tick_rate must be a positive
number, not 'fast'``.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from ai_tools.errors import ConfigError
from ai_tools.llm.profile import ModelProfile
from ai_tools.mcp.config import McpServerConfig, parse_servers
from ai_tools.mcp.serve_config import McpServeConfig, parse_serve_table
from ai_tools.numbers import is_number
from ai_tools.service.assistant import AssistantConfig
from ai_tools.settings import environment_warnings, near_name, setting
from ai_tools.standalone.overrides import Overlay, Overrides, apply_overrides
from ai_tools.tools.registry import ToolRegistry
from ai_tools.web.limits import HttpLimits
from ai_tools.web.origin import parse_allowed_hosts

__all__ = [
    "DEFAULT_HTTP_PORT",
    "DEFAULT_MANHOLE_PORT",
    "LOG_LEVELS",
    "Config",
    "HttpConfig",
    "ManholeConfig",
    "ModelSpec",
    "Overrides",
    "ServiceSettings",
    "StoreConfig",
    "WorldConfig",
    "endpoint_is_local",
    "listen_endpoint",
    "load_config",
    "parse_config",
    "split_endpoint",
]

DEFAULT_HTTP_PORT = 8080
DEFAULT_MANHOLE_PORT = 2222
LOG_LEVELS = ("debug", "info", "warn", "error", "critical")
DEFAULT_DB = "var/assistants.sqlite"
_OFF = frozenset({"off", "none", "no", "false", "disabled"})
_SERVER_ENDPOINTS = frozenset({"tcp", "tcp6", "ssl", "unix"})
_SCRIPTED_ONLY = frozenset({"scenario", "port"})
Origins = Mapping[tuple[str, str], str]
"""``(table, key)`` → the flag or variable that gave the value (see :mod:`.overrides`)."""
_PROFILE_TYPES: dict[str, type | tuple[type, ...]] = {
    "base_url": str, "model": str, "api_key_env": str, "context_window": int,
    "extra_body": dict, "stream": bool, "timeouts": dict, "max_concurrency": int,
    "tool_calling": str, "headers": dict, "stream_usage": bool,
    "retry_after_cap": (int, float), "breaker_threshold": int,
    "breaker_cooldown": (int, float), "repetition": dict, "log_requests": bool,
    "prices": dict,
    "server_slots": int, "server_kind": str,
}
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", dict: "a table",
               float: "a number", list: "a list"}


def _check_kind(value: object, allowed: tuple[type, ...], key: str) -> None:
    """ConfigError unless ``value`` is one of ``allowed`` (a bool only when bool is; a
    float only when finite: TOML has ``nan`` and ``inf``)."""
    if isinstance(value, float) and float in allowed and not is_number(value):
        raise ConfigError(f"{key} must be a finite number, not {value!r}")
    if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
        wanted = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in allowed)
        raise ConfigError(f"{key} must be {wanted}, not {value!r}")


# -- values -------------------------------------------------------------------------


@attrs.frozen
class ServiceSettings:
    """``[service]``: the scheduler and shutdown."""

    tick_interval: float = 1.0
    """Seconds between the scheduler's wake-ups (each assistant has its own tick rate)."""
    stop_grace: float = 10.0
    """Seconds a shutdown waits for ticks in flight before cancelling them."""
    max_concurrent: int = 100
    """Ticks allowed to run at the same time."""
    min_tick_rate: float = 1.0
    """The fastest ``tick_rate`` (and ``sleep_tick_rate``) an assistant may have, in seconds."""
    max_assistants: int = 1000
    """Assistants the service may have (with workers: all of them together)."""
    log_level: str = "info"
    """Lowest level written to the log: debug, info, warn, error or critical."""
    otlp_endpoint: str | None = None
    """The OTLP/HTTP collector's base URL traces go to (None: the ``OTEL_*`` variables
    decide; see ``docs/observability.md``)."""


@attrs.frozen
class StoreConfig:
    """``[store]``: where assistant state and the sandbox world live."""

    backend: str = "sqlite"
    """``sqlite`` (one file, survives restarts), ``memory`` (gone at exit) or
    ``postgres`` (a PostgreSQL database several workers can share)."""
    path: Path | None = None
    synchronous: str = "FULL"
    dsn: str | None = None
    """``postgres``: the libpq connection string or URL, without the password."""
    password: str | None = attrs.field(default=None, repr=False)
    """``postgres``: from AI_TOOLS_DB_PASSWORD or AI_TOOLS_DB_PASSWORD_FILE (never the file)."""
    quick_check: bool = True
    """``PRAGMA quick_check`` of the SQLite file at start (a damaged file stops the start)."""


@attrs.frozen
class WorldConfig:
    """``[world]``: the sandbox world's seed file (read only while the store has no world)."""

    file: Path | None = None
    log_size: int = 200


@attrs.frozen
class ModelSpec:
    """``[models.NAME]``: a real model server, or the scripted stand-in model.

    For a real server ``profile`` is set.  For the scripted model
    (``scenario = "file"``) ``scenario`` is the scenario file, ``port`` the
    port of its 127.0.0.1 server (0: any free one) and ``options`` the
    profile fields to use with it (stream, tool_calling...).
    """

    name: str
    profile: ModelProfile | None = None
    scenario: Path | None = None
    port: int = 0
    model_name: str | None = None
    """The model name the scripted server reports (it always says "scripted")."""
    options: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def scripted(self) -> bool:
        """Whether this is the scripted model (no model server needed)."""
        return self.profile is None


@attrs.frozen
class HttpConfig:
    """``[http]``: the HTTP API listener."""

    enabled: bool = True
    endpoint: str = f"tcp:{DEFAULT_HTTP_PORT}:interface=127.0.0.1"
    """A Twisted server endpoint string (``tcp:8080:interface=127.0.0.1``)."""
    token: str | None = attrs.field(default=None, repr=False)
    """The bearer token clients must send (required off localhost); never logged."""
    max_body: int = 64 * 1024
    """Largest request body accepted, in bytes."""
    allowed_hosts: tuple[str, ...] = ()
    """Names (``name`` or ``name:port``) this service answers to besides localhost."""
    limits: HttpLimits = attrs.field(factory=HttpLimits)
    """Connections, request deadlines, event streams (the keys of ``HttpLimits``)."""


@attrs.frozen
class ManholeConfig:
    """``[manhole]``: the SSH Python console (code execution: keep it local)."""

    enabled: bool = False
    endpoint: str = f"tcp:{DEFAULT_MANHOLE_PORT}:interface=127.0.0.1"
    authorized_keys: Path | None = None
    password_file: Path | None = None
    host_key: Path | None = None
    """Created (mode 0600) on first start when missing."""


@attrs.frozen
class WorkersConfig:
    """``[workers]`` (PostgreSQL store): how worker processes share the assistants."""

    name: str | None = None
    """This worker's name among them (default: host name and process id)."""
    lease_ttl: float = 15.0
    """Seconds a worker's leases last without renewal (how long a dead worker's
    assistants wait before another worker takes them)."""
    lease_interval: float = 5.0
    """Seconds between a worker's lease rounds (renewing, taking, giving up)."""
    api_hosts: tuple[str, ...] = ()
    """The only hosts another worker's API address (in the database) may name; empty:
    any ``http(s)://host:port`` (see ``ai_tools.web.worker_auth``)."""


@attrs.frozen
class Config:
    """The whole checked configuration (build the service with :mod:`ai_tools.standalone.app`)."""

    source: str = "<config>"
    """Where it came from (the file path), for messages."""
    service: ServiceSettings = ServiceSettings()
    store: StoreConfig = StoreConfig()
    world: WorldConfig = WorldConfig()
    models: Mapping[str, ModelSpec] = attrs.field(factory=dict)
    assistants: tuple[AssistantConfig, ...] = ()
    http: HttpConfig = HttpConfig()
    manhole: ManholeConfig = ManholeConfig()
    workers: WorkersConfig = WorkersConfig()
    mcp_servers: tuple[McpServerConfig, ...] = ()
    """``[mcp.servers.NAME]``: the MCP servers assistants may use."""
    mcp_serve: McpServeConfig | None = None
    """``[mcp.serve]``: the game's tools as an MCP server at the API's ``/mcp`` (None: off)."""
    warnings: tuple[str, ...] = ()
    """Things worth saying at start-up (an ``AI_TOOLS_…`` variable that is no setting)."""


# -- endpoints ----------------------------------------------------------------------


def split_endpoint(description: str) -> list[str]:
    """Split an endpoint string on unescaped colons (``\\:`` stays in a field)."""
    return re.split(r"(?<!\\):", description)


def listen_endpoint(value: object, key: str) -> str | None:
    """A server endpoint string from a config value; None means the listener is off.

    Accepts a port number (``8080``), ``host:port`` (``0.0.0.0:8080``), an
    endpoint string (``tcp:8080:interface=127.0.0.1``) or ``off``.  A TCP
    endpoint without ``interface=`` gets the loopback interface: nothing
    listens beyond this machine unless the config says so.  Raises
    ConfigError (message without the file) for anything else.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a port, host:port or an endpoint string, not {value!r}")
    if isinstance(value, int):
        return f"tcp:{_port(value, key)}:interface=127.0.0.1"
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key} must be a port, host:port or an endpoint string, not {value!r}")
    text = value.strip()
    if text.lower() in _OFF:
        return None
    if text.isdigit():
        return f"tcp:{_port(int(text), key)}:interface=127.0.0.1"
    host_port = (re.fullmatch(r"([A-Za-z0-9.\-]+):(\d+)", text)
                 or re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)", text))
    if host_port and host_port.group(1).lower() not in _SERVER_ENDPOINTS:
        host, port = host_port.group(1), _port(int(host_port.group(2)), key)
        if ":" in host:
            return f"tcp6:{port}:interface={host.replace(':', chr(92) + ':')}"
        return f"tcp:{port}:interface={host}"
    parts = split_endpoint(text)
    kind = parts[0].lower()
    if kind not in _SERVER_ENDPOINTS:
        raise ConfigError(
            f"{key}: unknown endpoint type {parts[0]!r} in {text!r} "
            f"(use a port, host:port, or tcp:PORT:interface=HOST)"
        )
    if kind in ("tcp", "tcp6", "ssl"):
        if len(parts) < 2 or not parts[1].split("=")[-1].isdigit():
            raise ConfigError(f"{key}: {text!r} names no port (e.g. tcp:8080:interface=127.0.0.1)")
        if not any(p.startswith("interface=") for p in parts[1:]):
            text += ":interface=" + ("\\:\\:1" if kind == "tcp6" else "127.0.0.1")
    _check_endpoint_syntax(text, key)
    return text


def _check_endpoint_syntax(description: str, key: str) -> None:
    from twisted.internet import endpoints
    from twisted.internet.testing import MemoryReactor

    try:
        endpoints.serverFromString(MemoryReactor(), description)
    except Exception as exc:
        raise ConfigError(f"{key}: bad endpoint {description!r}: {exc}") from None


def _port(value: int, key: str) -> int:
    if not 0 <= value <= 65535:
        raise ConfigError(f"{key}: port {value} is out of range 0-65535")
    return value


def endpoint_is_local(description: str) -> bool:
    """Whether a server endpoint string only accepts connections from this machine."""
    parts = split_endpoint(description)
    if parts[0].lower() == "unix":
        return True
    for part in parts[1:]:
        if part.startswith("interface="):
            host = part[len("interface="):].replace("\\:", ":").strip("[]")
            if host.lower() == "localhost":
                return True
            try:
                return ipaddress.ip_address(host).is_loopback
            except ValueError:
                return False
    return False


# -- reading tables -----------------------------------------------------------------


class _Table:
    """One TOML table being read: typed getters, and unknown keys reported at the end.

    ``origins`` maps ``(table, key)`` to the flag or variable a value came
    from, so messages about it name that instead of the file's key.
    """

    def __init__(self, data: Any, where: str, base: Path, *, required: bool = False,
                 origins: Mapping[tuple[str, str], str] | None = None) -> None:
        if data is None and not required:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must be a table, not {_type_name(data)}")
        self.data = data
        self.where = where
        self.base = base
        self.origins = origins or {}
        self._seen: set[str] = set()

    def key(self, name: str) -> str:
        """How a message names key ``name``: its flag or variable, else its file key."""
        origin = self.origins.get((self.where, name))
        if origin is not None:
            return origin
        return f"{self.where}.{name}" if self.where else name

    def get(self, name: str, default: Any = None) -> Any:
        self._seen.add(name)
        return self.data.get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.data

    def typed(self, name: str, kinds: type | tuple[type, ...], default: Any) -> Any:
        value = self.get(name, default)
        if value is default:
            return value
        allowed = kinds if isinstance(kinds, tuple) else (kinds,)
        _check_kind(value, allowed, self.key(name))
        return value

    def positive(self, name: str, default: float) -> float:
        value = self.typed(name, (int, float), default)
        if value <= 0:
            raise ConfigError(f"{self.key(name)} must be a positive number, not {value!r}")
        return float(value)

    def positive_int(self, name: str, default: int) -> int:
        value = self.typed(name, int, default)
        if value < 1:
            raise ConfigError(f"{self.key(name)} must be a positive integer, not {value!r}")
        return int(value)

    def choice(self, name: str, choices: tuple[str, ...], default: str,
               aliases: Mapping[str, str] | None = None) -> str:
        value = self.typed(name, str, default)
        chosen = value.strip().lower()
        chosen = (aliases or {}).get(chosen, chosen)
        if chosen not in choices:
            raise ConfigError(
                f"{self.key(name)} must be one of {', '.join(choices)}, not {value!r}"
            )
        return chosen

    def path(self, name: str, *, must_exist: bool = False) -> Path | None:
        value = self.typed(name, str, None)
        if value is None:
            return None
        if not value.strip():
            raise ConfigError(f"{self.key(name)} must not be empty")
        path = resolve_path(value, self.base)
        if must_exist:
            if not path.exists():
                raise ConfigError(f"{self.key(name)}: file not found: {path}")
            if path.is_dir():
                raise ConfigError(f"{self.key(name)}: {path} is a directory, not a file")
        return path

    def finish(self, known: Any = None) -> None:
        unknown = sorted(set(self.data) - self._seen)
        if unknown:
            names = sorted(known) if known is not None else sorted(self._seen)
            raise ConfigError(_unknown(self.where, unknown, names))


def _unknown(where: str, unknown: list[str], known: list[str]) -> str:
    label = f"{where}: unknown key" if where else "unknown key"
    if len(unknown) > 1:
        label += "s"
    hints = []
    for name in unknown:
        close = near_name(name, known)
        hints.append(f"{name!r}" + (f" (did you mean {close!r}?)" if close else ""))
    return f"{label} {', '.join(hints)}; known: {', '.join(known)}"


def _check_keys(data: Mapping[str, Any], where: str, known: Any) -> None:
    """Unknown keys first: a typo'd key is the mistake to report, not what it left missing."""
    unknown = sorted(str(k) for k in set(data) - set(known))
    if unknown:
        raise ConfigError(_unknown(where, unknown, sorted(known)))


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def _label(name: object) -> str:
    """A name as it may appear in a key path: plain when it is plain, else quoted."""
    text = str(name)
    return text if _PLAIN_NAME.fullmatch(text) else repr(text)


def _one_line(message: str) -> str:
    """Whatever a value held, the message stays on one line."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


def _type_name(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"a string ({value!r})"
    return type(value).__name__


def resolve_path(value: str | os.PathLike[str], base: Path) -> Path:
    """``value`` with ``~`` expanded, relative to ``base`` unless absolute."""
    path = Path(os.path.expanduser(os.fspath(value)))
    return Path(os.path.normpath(path if path.is_absolute() else base / path))


# -- sections -----------------------------------------------------------------------


def _service(table: _Table) -> ServiceSettings:
    settings = ServiceSettings(
        tick_interval=table.positive("tick_interval", 1.0),
        stop_grace=table.positive("stop_grace", 10.0),
        max_concurrent=table.positive_int("max_concurrent", 100),
        min_tick_rate=table.positive("min_tick_rate", 1.0),
        max_assistants=table.positive_int("max_assistants", 1000),
        log_level=table.choice("log_level", LOG_LEVELS, "info", aliases={"warning": "warn"}),
        otlp_endpoint=_otlp_endpoint(table),
    )
    table.finish()
    return settings


def _otlp_endpoint(table: _Table) -> str | None:
    """``otlp_endpoint``: an http(s) base URL (a collector's, port 4318 by default)."""
    value = table.typed("otlp_endpoint", str, None)
    if value is None:
        return None
    value = value.strip()
    if not value.startswith(("http://", "https://")) or len(value) <= len("https://"):
        raise ConfigError(f"{table.key('otlp_endpoint')} must be an http:// or https:// URL "
                          f"(an OTLP/HTTP collector, e.g. http://127.0.0.1:4318), not {value!r}")
    return value


def _postgres(table: _Table, dsn: str | None, overlay: Overlay) -> StoreConfig:
    """``backend = "postgres"``: the DSN checked, the password from outside the file."""
    from ai_tools.store.postgres import (
        PASSWORD_ENV,
        PASSWORD_FILE_ENV,
        check_dsn,
        database_password,
    )

    if dsn is None:
        raise ConfigError(f"{table.key('dsn')} is required with backend = \"postgres\" "
                          f"(e.g. \"host=127.0.0.1 dbname=ai_tools user=ai_tools\")")
    try:
        check_dsn(dsn)
    except ConfigError as exc:
        raise ConfigError(f"{table.key('dsn')}: {exc}") from None
    password_file = table.path("password_file")
    sources = {PASSWORD_ENV: overlay.db_password or "",
               PASSWORD_FILE_ENV: "" if password_file is None else os.fspath(password_file)}
    try:
        password = database_password({k: v for k, v in sources.items() if v})
    except ConfigError as exc:
        message = str(exc)
        if message.startswith(PASSWORD_FILE_ENV):
            message = table.key("password_file") + message[len(PASSWORD_FILE_ENV):]
        raise ConfigError(message) from None
    return StoreConfig(backend="postgres", dsn=dsn, password=password)


def _store(table: _Table, overlay: Overlay) -> StoreConfig:
    backend = table.choice("backend", ("sqlite", "memory", "postgres"), "sqlite")
    path = table.path("path")
    synchronous = table.choice("synchronous", ("off", "normal", "full", "extra"), "full").upper()
    dsn = table.typed("dsn", str, None)
    quick_check = table.typed("quick_check", bool, True)
    table.get("password_file")
    table.finish()
    if backend == "postgres":
        if path is not None:
            raise ConfigError(f"{table.key('path')} is only for backend = \"sqlite\"")
        return _postgres(table, dsn, overlay)
    for key in ("dsn", "password_file"):
        if key in table:
            raise ConfigError(f"{table.key(key)} is only for backend = \"postgres\"")
    if backend == "sqlite":
        if path is None:
            path = table.base / DEFAULT_DB
        if path.is_dir():
            raise ConfigError(f"{table.key('path')}: {path} is a directory, not a database file")
    elif path is not None:
        raise ConfigError(f"{table.key('path')} is only for backend = \"sqlite\"")
    return StoreConfig(backend=backend, path=path, synchronous=synchronous,
                       quick_check=quick_check)


def _workers(table: _Table, store: StoreConfig) -> WorkersConfig:
    """``[workers]``: only with the PostgreSQL store (SQLite is one process)."""
    given = [key for key in ("name", "lease_ttl", "lease_interval", "api_hosts")
             if key in table]
    if given and store.backend != "postgres":
        raise ConfigError(f"{table.key(given[0])} is only for [store] backend = \"postgres\"")
    name = table.typed("name", str, None)
    if name is not None and not name.strip():
        raise ConfigError(f"{table.key('name')} must not be empty")
    workers = WorkersConfig(name=name, lease_ttl=table.positive("lease_ttl", 15.0),
                            lease_interval=table.positive("lease_interval", 5.0),
                            api_hosts=_api_hosts(table))
    table.finish()
    if workers.lease_interval >= workers.lease_ttl:
        raise ConfigError(f"{table.key('lease_interval')} ({workers.lease_interval:g}) must be "
                          f"shorter than {table.key('lease_ttl')} ({workers.lease_ttl:g})")
    return workers


def _api_hosts(table: _Table) -> tuple[str, ...]:
    """``[workers] api_hosts``: host names or addresses, as a worker's URL names them."""
    hosts = table.typed("api_hosts", list, [])
    for host in hosts:
        if not isinstance(host, str) or not host.strip() or any(
                c.isspace() or c in "/@?#[]" for c in host) or not host.isascii():
            raise ConfigError(f"{table.key('api_hosts')}: {host!r} is not a host name or "
                              "address (write it as in http://HOST:port)")
    return tuple(h.lower() for h in hosts)


def _world(table: _Table) -> WorldConfig:
    path = table.path("file", must_exist=True)
    log_size = table.positive_int("log_size", 200)
    table.finish()
    if path is not None:
        from ai_tools.world.worldfile import load_world_file

        try:
            load_world_file(path)
        except ConfigError as exc:
            raise ConfigError(f"{table.key('file')}: {exc}") from None
    return WorldConfig(file=path, log_size=log_size)


def _check_profile_types(table: Mapping[str, Any], where: str) -> None:
    for key, kinds in _PROFILE_TYPES.items():
        if key not in table:
            continue
        value = table[key]
        allowed = kinds if isinstance(kinds, tuple) else (kinds,)
        _check_kind(value, allowed, f"{where}.{key}")


def _profile(values: Mapping[str, Any], where: str, origins: Origins | None = None
             ) -> ModelProfile:
    """The checked profile; a bad value given outside the file is named by its origin."""
    _check_profile_types(values, where)
    try:
        return ModelProfile.from_mapping(values, where=where)
    except ConfigError as exc:
        message = str(exc)
        for (table, key), origin in (origins or {}).items():
            if table == where and f"'{key}'" in message:
                message += f" (given by {origin})"
        raise ConfigError(message) from None


def _model(name: str, data: Any, base: Path, origins: Origins) -> ModelSpec:
    where = f"models.{_label(name)}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a table, not {_type_name(data)}")
    known = {f.name for f in attrs.fields(ModelProfile)} | _SCRIPTED_ONLY
    _check_keys(data, where, known)
    values = dict(data)
    values.setdefault("name", name)
    scenario = values.pop("scenario", None)
    port = values.pop("port", None)
    if scenario is not None:
        if "base_url" in values:
            raise ConfigError(f"{where}: give either 'scenario' (scripted model) or 'base_url'")
        return _scripted_model(name, where, values, scenario, port, base)
    if port is not None:
        raise ConfigError(f"{where}.port is only for the scripted model (with 'scenario')")
    return _served_model(name, where, values, origins)


def _scripted_model(name: str, where: str, values: dict[str, Any], scenario_value: Any,
                    port_value: Any, base: Path) -> ModelSpec:
    """``[models.NAME]`` with ``scenario``: the scripted stand-in model, its script loaded."""
    raw = {"scenario": scenario_value}
    if port_value is not None:
        raw["port"] = port_value
    table = _Table(raw, where, base)
    scenario = table.path("scenario", must_exist=True)
    port = table.typed("port", int, 0)
    _port(port, f"{where}.port")
    assert scenario is not None
    from ai_tools.llm.scripted import Script

    try:
        Script.from_file(scenario)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"{where}.scenario: cannot load {scenario}: {exc}") from None
    options = {k: v for k, v in values.items() if k != "model"}
    _profile({"base_url": "http://127.0.0.1:1/v1", "model": "scripted", **options}, where)
    model_name = values.get("model")
    if model_name is not None and not isinstance(model_name, str):
        raise ConfigError(f"{where}.model must be a string, not {model_name!r}")
    return ModelSpec(name=name, scenario=scenario, port=port, model_name=model_name,
                     options=options)


def _served_model(name: str, where: str, values: dict[str, Any], origins: Origins
                  ) -> ModelSpec:
    """``[models.NAME]`` of a model server; the key comes from AI_TOOLS_LLM_API_KEY unless
    the profile names another variable."""
    if "base_url" not in values:
        raise ConfigError(f"{where}: 'base_url' is required (or 'scenario' for the scripted "
                          f"model)")
    if not values.get("model"):
        url_from = origins.get((where, "base_url"))
        model = setting("llm_model")
        hint = (f" (with {url_from}, set --{model.option} or {model.env} too)"
                if url_from else "")
        raise ConfigError(f"{where}: 'model' is required{hint}")
    values.setdefault("api_key_env", setting("llm_api_key").env)
    return ModelSpec(name=name, profile=_profile(values, where, origins))


def _models(data: Any, base: Path, origins: Origins) -> dict[str, ModelSpec]:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"models must be a table of model profiles, not {_type_name(data)}")
    return {str(name): _model(str(name), table, base, origins) for name, table in data.items()}


def _tool_lists(config: Mapping[str, Any], where: str) -> Iterator[tuple[str, Any]]:
    """Every ``allowed_tools`` list of an execution config, with its key."""
    if "allowed_tools" in config:
        yield f"{where}.allowed_tools", config["allowed_tools"]
    contexts = config.get("contexts")
    if isinstance(contexts, Mapping):
        for context, sub in contexts.items():
            if isinstance(sub, Mapping) and "allowed_tools" in sub:
                yield f"{where}.contexts.{context}.allowed_tools", sub["allowed_tools"]


def _unknown_tool(key: str, name: object, registry: ToolRegistry) -> ConfigError:
    names = [t.name for t in registry.get_all_tools()]
    close = difflib.get_close_matches(str(name), names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else " (see docs/tools.md for the names)"
    return ConfigError(f"{key}: unknown tool {name!r}{hint}")


def _assistant(index: int, data: Any, models: Mapping[str, ModelSpec],
               registry: ToolRegistry) -> AssistantConfig:
    if not isinstance(data, Mapping):
        raise ConfigError(f"assistants[{index}] must be a table, not {_type_name(data)}")
    name = data.get("name")
    where = (f"assistants.{name}" if isinstance(name, str) and _PLAIN_NAME.fullmatch(name)
             else f"assistants[{index}]")
    values = dict(data)
    values["model"] = _assistant_model(values.get("model"), where, models)
    known = sorted(f.name for f in attrs.fields(AssistantConfig))
    unknown = sorted(str(k) for k in set(values) - set(known))
    if unknown:
        raise ConfigError(_unknown(where, unknown, known))
    config = AssistantConfig.from_mapping(values, where)
    _check_assistant_tools(config, where, registry)
    return config


def _assistant_model(model: Any, where: str, models: Mapping[str, ModelSpec]) -> str:
    """The model profile an assistant uses: the one named, else the only or ``default`` one."""
    if model is None:
        if len(models) == 1:
            return next(iter(models))
        if "default" in models:
            return "default"
        if not models:
            url, model = setting("llm_url"), setting("llm_model")
            raise ConfigError(f"{where}: no model profile is declared (add a [models.NAME] "
                              f"table, or set {url.env} and {model.env})")
        raise ConfigError(f"{where}.model is required: several model profiles are "
                          f"declared ({', '.join(sorted(models))})")
    if not isinstance(model, str):
        raise ConfigError(f"{where}.model must be a string, not {model!r}")
    if model not in models:
        declared = ", ".join(_label(m) for m in sorted(models)) or "none"
        raise ConfigError(f"{where}.model: unknown model profile {model!r} "
                          f"(declared: {declared})")
    return model


def _check_assistant_tools(config: AssistantConfig, where: str, registry: ToolRegistry) -> None:
    """Every allowed tool exists; no exit tool takes a real tool's name."""
    for key, tools in _tool_lists(config.execution_config, f"{where}.execution_config"):
        for tool in tools:
            if tool not in registry:
                raise _unknown_tool(key, tool, registry)
    for exit_tool in config.exit_tools:
        if exit_tool.name in registry:
            raise ConfigError(f"{where}.exit_tools: {exit_tool.name!r} is already a tool "
                              f"name; an exit tool needs a name of its own")


def _listener_token(table: _Table) -> str | None:
    given = [k for k in ("token", "token_env", "token_file") if k in table]
    if len(given) > 1:
        raise ConfigError(f"{table.where}: give only one of {', '.join(given)}")
    token = table.typed("token", str, None)
    env = table.typed("token_env", str, None)
    path = table.path("token_file", must_exist=True)
    if env is not None:
        token = os.environ.get(env, "")
        if not token.strip():
            raise ConfigError(f"{table.key('token_env')}: the environment variable {env} "
                              f"is not set")
    elif path is not None:
        try:
            token = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{table.key('token_file')}: cannot read {path}: {exc}") from None
    if token is not None:
        token = token.strip()
        if len(token) < 16:
            raise ConfigError(f"{table.where}: the API token must be at least 16 characters")
    return token


def _http(table: _Table) -> HttpConfig:
    enabled = table.typed("enabled", bool, True)
    endpoint = listen_endpoint(table.get("listen", DEFAULT_HTTP_PORT), table.key("listen"))
    token = _listener_token(table)
    max_body = table.positive_int("max_body", 64 * 1024)
    allowed_hosts = parse_allowed_hosts(table.get("allowed_hosts", []),
                                        table.key("allowed_hosts"))
    given = {name: table.get(name) for name in HttpLimits.setting_names()}
    limits = HttpLimits.from_mapping({k: v for k, v in given.items() if v is not None},
                                     table.where)
    table.finish()
    key = table.key("listen")
    if endpoint is None:
        enabled = False
        endpoint = HttpConfig().endpoint
    if enabled and token is None and not endpoint_is_local(endpoint):
        raise ConfigError(f"{key}: the HTTP API listens beyond this machine ({endpoint}); "
                          f"set {setting('http_token').env}, {setting('http_token_file').env} "
                          f"or http.token_env so clients need a token")
    return HttpConfig(enabled=enabled, endpoint=endpoint, token=token, max_body=max_body,
                      allowed_hosts=allowed_hosts, limits=limits)


def _manhole(table: _Table, store: StoreConfig) -> ManholeConfig:
    enabled = table.typed("enabled", bool, False)
    endpoint = listen_endpoint(table.get("listen", DEFAULT_MANHOLE_PORT), table.key("listen"))
    authorized_keys = table.path("authorized_keys")
    password_file = table.path("password_file")
    host_key = table.path("host_key")
    table.finish()
    why = table.key("listen") if (table.where, "listen") in table.origins else table.where
    if endpoint is None:
        enabled, endpoint = False, ManholeConfig().endpoint
    if not enabled:
        return ManholeConfig(enabled=False, endpoint=endpoint, authorized_keys=authorized_keys,
                             password_file=password_file, host_key=host_key)
    if authorized_keys is None and password_file is None:
        raise ConfigError(f"{why}: the manhole needs manhole.authorized_keys or "
                          f"manhole.password_file (it runs Python code: no anonymous access)")
    for key, path in (("authorized_keys", authorized_keys), ("password_file", password_file)):
        if path is not None and not path.is_file():
            raise ConfigError(f"{table.key(key)}: file not found: {path}")
    if host_key is None:
        if store.path is None:
            raise ConfigError(f"{table.key('host_key')} is required with the memory store")
        host_key = store.path.parent / "manhole_host_key"
    if host_key.is_dir():
        raise ConfigError(f"{table.key('host_key')}: {host_key} is a directory")
    return ManholeConfig(enabled=True, endpoint=endpoint, authorized_keys=authorized_keys,
                         password_file=password_file, host_key=host_key)


# -- the file -------------------------------------------------------------------------

_SECTIONS = ("service", "store", "world", "models", "assistants", "http", "manhole", "workers",
             "mcp")
_MCP_KEYS = ("servers", "serve")


def parse_config(
    data: Mapping[str, Any],
    *,
    source: str = "<config>",
    base: Path | None = None,
    overrides: Overrides | None = None,
    registry: ToolRegistry | None = None,
) -> Config:
    """Check a parsed TOML document; ConfigError (``source: key: problem``) on a mistake.

    ``base`` is the directory relative paths start from (the file's);
    ``registry`` the tools assistants may name (default: the default library).
    """
    try:
        return _parse(data, source, base or Path.cwd(), overrides or Overrides(), registry)
    except ConfigError as exc:
        raise ConfigError(_one_line(f"{source}: {exc}")) from None


def _parse(data: Mapping[str, Any], source: str, base: Path, overrides: Overrides,
           registry: ToolRegistry | None) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError(f"the configuration must be a table, not {_type_name(data)}")
    _check_keys(data, "", _SECTIONS)
    overlay = apply_overrides(data, overrides)
    document, origins = overlay.data, overlay.origins

    def table(name: str) -> _Table:
        return _Table(document.get(name), name, base, origins=origins)

    if registry is None:
        from ai_tools.tools import register_default_tools

        registry = register_default_tools()
    service = _service(table("service"))
    store = _store(table("store"), overlay)
    world = _world(table("world"))
    models = _models(document.get("models"), base, origins)
    mcp_servers, mcp_serve = _mcp(table("mcp"))
    assistants = _assistants(document.get("assistants", []), models, registry)
    _check_assistant_bounds(assistants, service)
    _check_mcp_names(assistants, mcp_servers)
    http = _http(table("http"))
    manhole = _manhole(table("manhole"), store)
    workers = _workers(table("workers"), store)
    if mcp_serve is not None and not http.enabled:
        raise ConfigError("mcp.serve: the game serves MCP at the HTTP API's /mcp; "
                          "the HTTP API is disabled")
    if (http.enabled and manhole.enabled and http.endpoint == manhole.endpoint
            and split_endpoint(http.endpoint)[1:2] != ["0"]):
        raise ConfigError("http.listen and manhole.listen name the same endpoint")
    return Config(source=source, service=service, store=store, world=world, models=models,
                  assistants=assistants, http=http, manhole=manhole, workers=workers,
                  mcp_servers=mcp_servers, mcp_serve=mcp_serve,
                  warnings=_warnings(document, models, overrides))


def _mcp(table: _Table) -> tuple[tuple[McpServerConfig, ...], McpServeConfig | None]:
    """``[mcp]``: the servers assistants use (``[mcp.servers.NAME]``,
    :mod:`ai_tools.mcp.config`) and the game served over MCP (``[mcp.serve]``,
    :mod:`ai_tools.mcp.serve_config`)."""
    servers = parse_servers(table.get("servers"))
    serve = parse_serve_table({"serve": table.get("serve")})
    table.finish(_MCP_KEYS)
    return servers, serve


def _check_mcp_names(assistants: tuple[AssistantConfig, ...],
                     servers: tuple[McpServerConfig, ...]) -> None:
    """Every server an assistant names in ``mcp_servers`` is declared."""
    declared = {s.name for s in servers}
    for assistant in assistants:
        for name in assistant.mcp_servers:
            if name not in declared:
                known = ", ".join(sorted(declared)) or "none"
                raise ConfigError(f"assistants.{assistant.name}.mcp_servers: no MCP server "
                                  f"{name!r} is declared (declared: {known})")


def _assistants(raw: Any, models: Mapping[str, ModelSpec], registry: ToolRegistry
                ) -> tuple[AssistantConfig, ...]:
    if not isinstance(raw, list):
        raise ConfigError("assistants must be an array of tables ([[assistants]]), not "
                          f"{_type_name(raw)}")
    assistants: list[AssistantConfig] = []
    for index, entry in enumerate(raw):
        config = _assistant(index, entry, models, registry)
        if any(a.name == config.name for a in assistants):
            raise ConfigError(f"assistants[{index}]: a second assistant named {config.name!r}")
        assistants.append(config)
    return tuple(assistants)


def _check_assistant_bounds(assistants: tuple[AssistantConfig, ...],
                            service: ServiceSettings) -> None:
    """The service's bounds (see ``AssistantService.check_config``): no more than
    ``max_assistants``, no tick rate below ``min_tick_rate``."""
    if len(assistants) > service.max_assistants:
        raise ConfigError(f"assistants: {len(assistants)} assistants, more than "
                          f"service.max_assistants ({service.max_assistants})")
    for config in assistants:
        for key in ("tick_rate", "sleep_tick_rate"):
            rate = getattr(config, key)
            if rate < service.min_tick_rate:
                raise ConfigError(f"assistants.{config.name}.{key} must be at least "
                                  f"{service.min_tick_rate:g} seconds "
                                  f"(service.min_tick_rate), not {rate!r}")


def _warnings(document: Mapping[str, Any], models: Mapping[str, ModelSpec],
              overrides: Overrides) -> tuple[str, ...]:
    """Variables that look like settings but are none (the config's own names excepted)."""
    named = {m.profile.api_key_env for m in models.values()
             if m.profile is not None and m.profile.api_key_env}
    http = document.get("http")
    if isinstance(http, Mapping) and isinstance(http.get("token_env"), str):
        named.add(http["token_env"])
    mcp = document.get("mcp")
    servers = mcp.get("servers") if isinstance(mcp, Mapping) else None
    for server in servers.values() if isinstance(servers, Mapping) else ():
        if isinstance(server, Mapping) and isinstance(server.get("bearer_token_env"), str):
            named.add(server["bearer_token_env"])
    return tuple(environment_warnings(overrides.environ, named))


def load_config(
    path: str | os.PathLike[str],
    overrides: Overrides | None = None,
    *,
    registry: ToolRegistry | None = None,
) -> Config:
    """Read and check a TOML config file (see the module docstring)."""
    source = os.fspath(path)
    file = Path(os.path.expanduser(source))
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a directory, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the config file: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    return parse_config(data, source=source, base=file.resolve().parent, overrides=overrides,
                        registry=registry)
