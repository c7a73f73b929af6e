"""``twistd ai-assistant`` options: the config is checked while parsing, overrides win."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.application.service import IService, IServiceCollection
from twisted.logger import ILogObserver, LogLevel
from twisted.scripts.twistd import ServerOptions

from ai_tools import log_gate
from ai_tools.errors import ConfigError
from ai_tools.standalone import plugin
from ai_tools.standalone.app import StandaloneService, describe_failure

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "assistant.toml"


def parse(*args: str) -> plugin.Options:
    options = plugin.Options()
    options.parseOptions(list(args))
    return options


def test_options_load_the_config_with_overrides(tmp_path: Path) -> None:
    options = parse("--config", str(EXAMPLE), "--db", str(tmp_path / "x.sqlite"),
                    "--http", "9999", "--log-level", "debug")
    config = options.loaded
    assert config is not None
    assert config.store.path == tmp_path / "x.sqlite"
    assert config.http.endpoint == "tcp:9999:interface=127.0.0.1"
    assert config.service.log_level == "debug"


def test_config_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AI_TOOLS_CONFIG", raising=False)
    with pytest.raises(SystemExit) as info:
        parse()
    assert str(info.value.code) == ("twistd ai-assistant: error: --config is required "
                                    "(or AI_TOOLS_CONFIG), e.g. --config examples/assistant.toml")


def test_a_config_mistake_is_one_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[assistants]]\nname = "pip"\nmodel = "gpt"\n'
                   '[models.local]\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\n')
    with pytest.raises(SystemExit) as info:
        parse("--config", str(bad))
    # SystemExit with a string: Python prints it on stderr and exits with status 1
    message = info.value.code
    assert isinstance(message, str) and "\n" not in message
    assert message == (f"twistd ai-assistant: error: {bad}: assistants.pip.model: unknown "
                       "model profile 'gpt' (declared: local)")


def test_a_bad_override_is_reported_like_the_file() -> None:
    with pytest.raises(SystemExit) as info:
        parse("--config", str(EXAMPLE), "--log-level", "chatty")
    assert "--log-level must be one of" in str(info.value.code)


@pytest.mark.parametrize(("typed", "hint"), [
    ("--colour", ""),
    ("--model", " (did you mean --llm-model?)"),
    ("--llm-modle", " (did you mean --llm-model?)"),
    ("--log-levle", " (did you mean --log-level?)"),
])
def test_an_unknown_option_is_one_line_naming_the_near_one(typed: str, hint: str) -> None:
    with pytest.raises(SystemExit) as info:
        parse("--config", str(EXAMPLE), typed, "blue")
    assert info.value.code == (f"twistd ai-assistant: error: option {typed} not "
                               f"recognized{hint}")


def test_make_service_builds_the_tree_without_starting_anything(tmp_path: Path) -> None:
    options = parse("--config", str(EXAMPLE), "--db", str(tmp_path / "x.sqlite"))
    root = plugin.makeService(options)
    assert IService.providedBy(root)
    (child,) = list(IServiceCollection(root))
    assert isinstance(child, StandaloneService)
    assert child.on_fatal is plugin._exit_on_fatal
    assert not child.running and child.assistants is None
    assert not (tmp_path / "x.sqlite").exists()  # nothing opened before start


def test_make_service_without_post_options_still_checks(tmp_path: Path) -> None:
    options = plugin.Options()
    options["config"] = str(tmp_path / "missing.toml")
    with pytest.raises(SystemExit, match="config file not found"):
        plugin.makeService(options)


class FakeApplication:
    """What twistd hands setServiceParent: a componentized application."""

    def __init__(self) -> None:
        from twisted.application.service import MultiService

        self.components: dict[Any, Any] = {}
        self.collection = MultiService()

    def setComponent(self, interface: Any, component: Any) -> None:
        self.components[interface] = component

    def __conform__(self, interface: Any) -> Any:
        if interface is IServiceCollection:
            return self.collection
        return None


@pytest.fixture(autouse=True)
def keep_log_gate() -> Any:
    """Installing the service's log arms the process's level gate: lift it after."""
    yield
    log_gate.disarm()


@pytest.fixture(autouse=True)
def keep_sigusr1() -> Any:
    """twistd's log file observer installs a SIGUSR1 handler (log rotation): put it back."""
    import signal

    saved = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, saved)


def twistd_options(*args: str) -> Any:
    server = ServerOptions()
    server.parseOptions(["-n", *args, "ai-assistant", "--config", str(EXAMPLE)])
    return server


@pytest.mark.parametrize(("level", "shown", "hidden"), [
    ("warn", LogLevel.warn, LogLevel.info),
    ("error", LogLevel.critical, LogLevel.warn),
    ("debug", LogLevel.debug, None),
])
def test_log_level_filters_twistd_observer(tmp_path: Path, level: str, shown: LogLevel,
                                           hidden: LogLevel | None) -> None:
    logfile = tmp_path / "twistd.log"
    server = twistd_options("--logfile", str(logfile))
    root = plugin._Root(level, server)
    application = FakeApplication()
    root.setServiceParent(application)
    observer = application.components[ILogObserver]
    assert ILogObserver.providedBy(observer)
    gate = log_gate.armed()  # the filter is the process's log now: events it drops are not built
    assert gate is not None and gate.keeps(shown, "test")
    assert hidden is None or not gate.keeps(hidden, "test")
    base = {"log_namespace": "test", "log_time": 0.0, "log_system": "-"}
    observer({**base, "log_level": shown, "log_format": "shown line"})
    if hidden is not None:
        observer({**base, "log_level": hidden, "log_format": "hidden line"})
    text = logfile.read_text()
    assert "shown line" in text and "hidden line" not in text
    assert root.parent is application.collection


def test_a_user_logger_is_left_alone() -> None:
    server = twistd_options("--logger", "twisted.logger.textFileLogObserver")
    assert plugin.service_log_observer("warn", server) is None
    assert plugin.service_log_observer("warn", None) is None
    # twistd itself refuses a daemon logging to standard output
    assert plugin.service_log_observer("warn", {"logfile": "-", "nodaemon": False}) is None


def test_in_the_foreground_the_filtered_log_goes_to_standard_output(
        capsys: pytest.CaptureFixture[str]) -> None:
    observer = plugin.service_log_observer("warn", twistd_options())
    base = {"log_namespace": "test", "log_time": 0.0, "log_system": "-"}
    observer({**base, "log_level": LogLevel.error, "log_format": "shown line"})
    observer({**base, "log_level": LogLevel.info, "log_format": "hidden line"})
    out = capsys.readouterr().out
    assert "shown line" in out and "hidden line" not in out


def test_the_log_observer_uses_no_private_twisted_module() -> None:
    """``--log-level`` rests on twisted.logger and twistd's documented options only."""
    import re

    source = (ROOT / "ai_tools" / "standalone" / "plugin.py").read_text()
    assert not re.search(r"twisted\.\w+(\.\w+)*\._\w+|\._getLogObserver", source)


def test_describe_failure_is_one_readable_line() -> None:
    from twisted.internet import error

    listen = error.CannotListenError("127.0.0.1", 8080, OSError(98, "Address already in use"))
    assert describe_failure(listen) == ("cannot listen on port 8080 of 127.0.0.1: "
                                        "Address already in use")
    assert describe_failure(ConfigError("x.toml: bad")) == "x.toml: bad"
    missing = FileNotFoundError(2, "No such file or directory", "/nope")
    assert describe_failure(missing) == "No such file or directory: /nope"
    assert describe_failure(RuntimeError("boom")) == "RuntimeError: boom"
    assert describe_failure(KeyError()) == "KeyError"


def test_the_plugin_module_only_holds_a_service_maker() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "ai_tools_plugin_under_test", ROOT / "twisted" / "plugins" / "ai_tools_plugin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    maker = module.aiAssistant
    assert (maker.tapname, maker.module) == ("ai-assistant", "ai_tools.standalone.plugin")
    assert not any(name.startswith("ai_tools") for name in vars(module) if name != "__name__")


def test_busy_ports_names_a_port_in_use_and_skips_what_needs_no_check(tmp_path: Path) -> None:
    import socket

    from ai_tools.standalone.app import busy_ports
    from ai_tools.standalone.config import Overrides, load_config

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = load_config(EXAMPLE, Overrides(flags={"http": f"127.0.0.1:{port}",
                                                       "db": "memory"}))
        assert busy_ports(config) == [f"cannot listen on port {port} of 127.0.0.1: Address "
                                      "already in use"]
        assert busy_ports(load_config(EXAMPLE, Overrides(flags={"http": "off",
                                                                "db": "memory"}))) == []
    for listen in ("127.0.0.1:0", f"unix:{tmp_path / 'sock'}", f"127.0.0.1:{port}"):
        config = load_config(EXAMPLE, Overrides(flags={"http": listen, "db": "memory"}))
        assert busy_ports(config) == []  # port 0, a socket file, a port free again
