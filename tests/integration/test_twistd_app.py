"""The service tree ``twistd ai-assistant`` runs, in-process on the real reactor.

Start-up order (models, store, world, assistants, then listeners), what the
listener factories receive, start-up failures handed to ``on_fatal`` with
everything closed again, and a stop that arrives while starting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest_twisted
from twisted.application.service import Service
from twisted.logger import LogLevel, globalLogPublisher

from ai_tools.errors import AIToolsError, ConfigError
from ai_tools.standalone.app import StandaloneService, build_service
from ai_tools.standalone.config import Config, parse_config
from ai_tools.web.limits import HttpLimits

ROOT = Path(__file__).resolve().parents[2]
WORLD = ROOT / "examples" / "world.toml"


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


def config(tmp_path: Path, **changes: Any) -> Config:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text("turns = []\n")
    data: dict[str, Any] = {
        "store": {"path": str(tmp_path / "state.sqlite")},
        "world": {"file": str(WORLD)},
        "models": {"default": {"scenario": str(scenario)}},
        "assistants": [{"name": "pip", "character_id": "char:pip"}],
        "http": {"listen": "127.0.0.1:0"},
    }
    data.update(changes)
    return parse_config(data, source="test.toml", base=tmp_path)


class Recorded(Service):
    """A stand-in listener: records what its factory was given and whether it ran."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.args = args
        self.kwargs = kwargs
        self.started_with: dict[str, Any] = {}

    def startService(self) -> None:
        super().startService()
        app = self.parent
        assert isinstance(app, StandaloneService)
        self.started_with = {"assistants": list(app.assistants.names()),
                             "world": app.world is not None}


class Factories:
    def __init__(self) -> None:
        self.made: dict[str, Recorded] = {}

    def web(self, *args: Any, **kwargs: Any) -> Any:
        self.made["http"] = Recorded(args, kwargs)
        return self.made["http"]

    def manhole(self, *args: Any, **kwargs: Any) -> Any:
        self.made["manhole"] = Recorded(args, kwargs)
        return self.made["manhole"]


class Captured:
    """Log events at warn and above."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("log_level", LogLevel.info) >= LogLevel.warn:
            self.events.append(event)

    def __enter__(self) -> Captured:
        globalLogPublisher.addObserver(cast(Any, self))
        return self

    def __exit__(self, *exc: Any) -> None:
        globalLogPublisher.removeObserver(cast(Any, self))

    def text(self) -> str:
        from twisted.logger import formatEvent

        return "\n".join(formatEvent(e) for e in self.events)


@pytest_twisted.ensureDeferred
async def test_start_order_and_what_the_listeners_get(tmp_path: Path) -> None:
    keys = tmp_path / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAA test\n")
    cfg = config(tmp_path, manhole={"enabled": True, "listen": "127.0.0.1:0",
                                    "authorized_keys": str(keys)})
    factories = Factories()
    app = build_service(cfg, reactor=reactor(),
                        factories={"http": factories.web, "manhole": factories.manhole})
    app.startService()
    try:
        assert await app.when_ready() is app
        web, manhole = factories.made["http"], factories.made["manhole"]
        # listeners start last: the world and the assistants are there already
        assert web.started_with == {"assistants": ["pip"], "world": True}
        assert web.args == (app.assistants, app.world)
        assert web.kwargs == {"endpoint": "tcp:0:interface=127.0.0.1", "token": None,
                              "max_body": 65536, "allowed_hosts": (),
                              "worker_hosts": (), "limits": HttpLimits()}
        (namespace,) = manhole.args
        assert {"service", "world", "registry", "store", "config"} <= set(namespace)
        assert namespace["service"] is app.assistants
        assert manhole.kwargs["authorized_keys"] == str(keys)
        assert manhole.kwargs["host_key"] == str(tmp_path / "manhole_host_key")
        assert manhole.kwargs["endpoint"] == "tcp:0:interface=127.0.0.1"
        scripted = app.scripted["default"]
        assert app.clients["default"].profile.base_url == scripted.url
        assert await app.when_ready() is app  # again, once ready
    finally:
        await app.stopService()
    assert not web.running and not manhole.running
    assert scripted.open_connections == 0
    assert not app.assistants.running


@pytest_twisted.ensureDeferred
async def test_the_real_http_api_is_used_by_default(tmp_path: Path) -> None:
    import treq
    from twisted.web.client import Agent, HTTPConnectionPool

    app = build_service(config(tmp_path), reactor=reactor())
    app.startService()
    pool = HTTPConnectionPool(reactor(), persistent=False)
    try:
        await app.when_ready()
        address = app.addresses["http"]
        assert address.startswith("127.0.0.1:")
        client = treq.client.HTTPClient(Agent(reactor(), pool=pool))  # type: ignore[arg-type]
        response = await client.get(f"http://{address}/assistants/pip")
        assert response.code == 200
        assert (await response.json())["name"] == "pip"
    finally:
        await pool.closeCachedConnections()
        await app.stopService()


@pytest_twisted.ensureDeferred
async def test_a_missing_listener_module_is_logged_not_fatal(tmp_path: Path,
                                                            monkeypatch: Any) -> None:
    import ai_tools.standalone.app as app_module

    monkeypatch.setattr(app_module, "_optional_factory", lambda module, name: None)
    fatal: list[str] = []
    app = build_service(config(tmp_path), reactor=reactor(), on_fatal=fatal.append)
    with Captured() as captured:
        app.startService()
        try:
            await app.when_ready()
        finally:
            await app.stopService()
    assert fatal == [] and "http" not in app.addresses
    assert "The HTTP API is not part of this build" in captured.text()


@pytest_twisted.ensureDeferred
async def test_a_listener_that_fails_is_fatal_and_everything_closes(tmp_path: Path) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ConfigError("the HTTP API endpoint is reachable from other machines")

    fatal: list[str] = []
    app = build_service(config(tmp_path), reactor=reactor(), on_fatal=fatal.append,
                        factories={"http": broken})
    with Captured() as captured:
        app.startService()
        try:
            await app.when_ready()
        except AIToolsError as exc:
            failure = str(exc)
        else:
            raise AssertionError("start-up should have failed")
        await app.stopService()
    assert fatal == ["the HTTP API endpoint is reachable from other machines"] == [failure]
    assert "ai_tools service could not start" in captured.text()
    assert "Traceback" not in captured.text()
    assert app.scripted["default"].open_connections == 0
    assert not app.assistants.running
    # the store was closed: another connection can take the file over
    import sqlite3

    conn = sqlite3.connect(str(tmp_path / "state.sqlite"))
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


@pytest_twisted.ensureDeferred
async def test_a_store_that_cannot_open(tmp_path: Path) -> None:
    (tmp_path / "state.sqlite").write_bytes(b"definitely not sqlite " * 64)
    fatal: list[str] = []
    app = build_service(config(tmp_path), reactor=reactor(), on_fatal=fatal.append)
    with Captured():
        app.startService()
        await app.stopService()
    (message,) = fatal
    assert message.startswith(f"cannot open the store: {tmp_path / 'state.sqlite'} is damaged "
                              "or not a database (SQLite: file is not a database)")
    assert app.assistants is None  # never built
    assert app.scripted["default"].open_connections == 0


@pytest_twisted.ensureDeferred
async def test_stop_while_starting_waits_then_closes(tmp_path: Path) -> None:
    app = build_service(config(tmp_path), reactor=reactor())
    app.startService()
    await app.stopService()  # at once: start-up finishes first, then all stops
    assert app.assistants is not None and not app.assistants.running
    assert app.failure is None


@pytest_twisted.ensureDeferred
async def test_leftover_assistants_and_the_memory_store(tmp_path: Path) -> None:
    first = build_service(config(tmp_path, assistants=[
        {"name": "pip", "character_id": "char:pip"},
        {"name": "old", "character_id": "char:mason"}]), reactor=reactor())
    first.startService()
    await first.when_ready()
    await first.stopService()

    app = build_service(config(tmp_path), reactor=reactor())
    app.startService()
    await app.when_ready()
    assert await app.store.list_assistants() == ["old", "pip"]  # old left asleep on disk
    assert app.assistants.names() == ["pip"]
    await app.stopService()

    memory = build_service(config(tmp_path, store={"backend": "memory"}), reactor=reactor())
    memory.startService()
    await memory.when_ready()
    assert type(memory.store).__name__ == "MemoryStore"
    await memory.stopService()


@pytest_twisted.ensureDeferred
async def test_an_unknown_character_is_one_start_up_error(tmp_path: Path) -> None:
    """An assistant whose character is not in the world stops the start with one line
    naming the near character; nothing is left running or open."""
    cfg = config(tmp_path, assistants=[
        {"name": "pip", "character_id": "char:pip"},
        {"name": "ghost", "character_id": "char:pipp"}])
    fatal: list[str] = []
    app = build_service(cfg, reactor=reactor(), on_fatal=fatal.append)
    with Captured() as captured:
        app.startService()
        await app.stopService()
    (message,) = fatal
    assert message == ("assistants.ghost.character_id: no character 'char:pipp' in the world "
                       "Saltmarsh (did you mean 'char:pip'? characters: char:alice, char:bob, "
                       "char:mason, char:pip)")
    assert "Traceback" not in captured.text()
    assert app.assistants is None and app.listeners == {}  # nothing started
    assert not app.store.is_open and app.scripted["default"].open_connections == 0


@pytest_twisted.ensureDeferred
async def test_gc_tuning_is_opt_in_and_undone_on_stop(tmp_path: Path) -> None:
    """AI_TOOLS_GC=service tunes the collector once ready and restores it on stop."""
    import gc

    from ai_tools.standalone.app import StandaloneService
    from ai_tools.standalone.gc_tuning import SERVICE_THRESHOLDS

    before = gc.get_threshold()
    plain = StandaloneService(config(tmp_path), reactor=reactor(), environ={})
    plain.startService()
    try:
        await plain.when_ready()
        assert plain.gc_tuning is None
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    finally:
        await plain.stopService()
    tuned = StandaloneService(config(tmp_path), reactor=reactor(),
                              environ={"AI_TOOLS_GC": "service"})
    tuned.startService()
    try:
        await tuned.when_ready()
        assert gc.get_threshold() == SERVICE_THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        await tuned.stopService()
        applied = gc.get_threshold()
        gc.set_threshold(*before)  # whatever happened, leave the process as it was
        if gc.get_freeze_count():
            gc.unfreeze()
    assert applied == before


@pytest_twisted.ensureDeferred
async def test_a_bad_gc_setting_stops_the_start_with_one_line(tmp_path: Path) -> None:
    import gc

    from ai_tools.standalone.app import StandaloneService

    before = gc.get_threshold()
    fatal: list[str] = []
    app = StandaloneService(config(tmp_path), reactor=reactor(), on_fatal=fatal.append,
                            environ={"AI_TOOLS_GC": "fast"})
    with Captured():
        app.startService()
        await app.stopService()
    (message,) = fatal
    assert "AI_TOOLS_GC" in message and "'fast'" in message
    assert gc.get_threshold() == before


def test_importing_and_building_the_service_leave_the_collector_alone() -> None:
    """Only the opt-in touches the collector: not an import, not building a service."""
    import subprocess
    import sys

    code = (
        "import gc; t = gc.get_threshold()\n"
        "import ai_tools.standalone.app, ai_tools.service.service, ai_tools.standalone.gc_tuning\n"
        "from ai_tools.service.service import AssistantService\n"
        "AssistantService()\n"
        "assert gc.get_threshold() == t and gc.get_freeze_count() == 0, gc.get_threshold()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
