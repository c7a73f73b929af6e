"""The config file of the standalone service: every mistake is one line naming file and key."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai_tools.errors import ConfigError
from ai_tools.standalone.config import (
    Config,
    Overrides,
    endpoint_is_local,
    listen_endpoint,
    load_config,
    parse_config,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCENARIO = EXAMPLES / "demo-scenario.toml"
WORLD = EXAMPLES / "world.toml"


def base_config() -> dict[str, Any]:
    """A small valid config (as parsed TOML)."""
    return {
        "store": {"backend": "memory"},
        "world": {"file": str(WORLD)},
        "models": {"local": {"base_url": "http://127.0.0.1:11434/v1", "model": "qwen"}},
        "assistants": [
            {"name": "pip", "character_id": "char:pip", "persona": "You are Pip.",
             "execution_config": {"contexts": {"conversation": {
                 "allowed_tools": ["say", "inspect_location"]}}}},
        ],
        "http": {"listen": 0},
    }


def error_of(data: dict[str, Any], overrides: Overrides | None = None,
             source: str = "assistant.toml") -> str:
    """The one-line message of the ConfigError ``data`` raises."""
    with pytest.raises(ConfigError) as info:
        parse_config(data, source=source, base=ROOT, overrides=overrides)
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(f"{source}: "), message
    return message


def with_change(path: str, value: Any) -> dict[str, Any]:
    """The base config with one key (dotted path; ``assistants.0.x`` indexes) replaced."""
    data = base_config()
    target: Any = data
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
    target[keys[-1]] = value
    return data


def test_the_base_config_is_valid() -> None:
    config = parse_config(base_config(), source="assistant.toml", base=ROOT)
    assert isinstance(config, Config)
    assert [a.name for a in config.assistants] == ["pip"]
    assert config.assistants[0].model == "local"  # the only profile
    assert config.http.endpoint == "tcp:0:interface=127.0.0.1"
    assert config.store.backend == "memory"


def test_the_example_config_loads_and_binds_only_loopback() -> None:
    config = load_config(EXAMPLES / "assistant.toml")
    assert {a.name for a in config.assistants} == {"pip", "mason"}
    assert config.models["default"].scripted
    assert config.models["default"].scenario == SCENARIO
    assert config.store.path == ROOT / "var" / "assistants.sqlite"
    assert config.world.file == WORLD
    assert endpoint_is_local(config.http.endpoint)
    assert endpoint_is_local(config.manhole.endpoint)
    assert config.manhole.enabled is False
    pip = next(a for a in config.assistants if a.name == "pip")
    allowed = pip.execution_config["contexts"]["conversation"]["allowed_tools"]
    assert "recall_memories" in allowed


# -- files --------------------------------------------------------------------------------


def test_missing_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"nope\.toml: config file not found$"):
        load_config(path)


def test_config_path_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_invalid_toml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[service]\ntick_interval = = 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not valid TOML")
    assert "line 2" in message and "\n" not in message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.toml"
    path.write_bytes(b"[service]\n# caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


def test_relative_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "w.toml").write_text(WORLD.read_text())
    (tmp_path / "conf" / "a.toml").write_text(
        '[store]\npath = "../state/x.sqlite"\n[world]\nfile = "w.toml"\n')
    config = load_config(tmp_path / "conf" / "a.toml")
    assert config.store.path == tmp_path / "state" / "x.sqlite"
    assert config.world.file == tmp_path / "conf" / "w.toml"


def test_missing_world_file() -> None:
    message = error_of(with_change("world.file", "no/such/world.toml"))
    assert "world.file: file not found" in message


def test_bad_world_file(tmp_path: Path) -> None:
    bad = tmp_path / "world.toml"
    bad.write_text("[[rooms]]\nid = 3\n")
    message = error_of(with_change("world.file", str(bad)))
    assert "world.file" in message and str(bad) in message


def test_missing_scenario_file() -> None:
    data = base_config()
    data["models"] = {"demo": {"scenario": "missing-scenario.toml"}}
    message = error_of(data)
    assert "models.demo.scenario: file not found" in message


def test_bad_scenario_file(tmp_path: Path) -> None:
    bad = tmp_path / "s.toml"
    bad.write_text('turns = ["hi"]\nbogus = 1\n')
    data = base_config()
    data["models"] = {"demo": {"scenario": str(bad)}}
    message = error_of(data)
    assert "models.demo.scenario: cannot load" in message and "bogus" in message


# -- unknown keys and wrong types -----------------------------------------------------------


@pytest.mark.parametrize(("path", "key"), [
    ("servic", "servic"),
    ("service.tick_intervall", "tick_intervall"),
    ("store.file", "file"),
    ("world.seed", "seed"),
    ("http.port", "port"),
    ("manhole.keys", "keys"),
    ("models.local.temperature", "temperature"),
    ("assistants.0.tickrate", "tickrate"),
])
def test_unknown_key(path: str, key: str) -> None:
    message = error_of(with_change(path, 1))
    assert "unknown key" in message and repr(key) in message


def test_unknown_key_suggests_the_close_one() -> None:
    message = error_of(with_change("assistants.0.tick_rat", 2))
    assert message == ("assistant.toml: assistants.pip: unknown key 'tick_rat' (did you mean "
                       "'tick_rate'?); known: " + message.split("known: ", 1)[1])


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("service.tick_interval", "fast", "service.tick_interval must be an integer or a number"),
    ("service.tick_interval", -1, "service.tick_interval must be a positive number"),
    ("service.tick_interval", float("inf"), "service.tick_interval must be a finite number"),
    ("service.stop_grace", float("nan"), "service.stop_grace must be a finite number"),
    ("service.max_assistants", 0, "service.max_assistants must be a positive integer"),
    ("service.min_tick_rate", 10, "assistants.pip.tick_rate must be at least 10 seconds "
     "(service.min_tick_rate)"),
    ("assistants.0.tick_rate", 0.5, "assistants.pip.tick_rate must be at least 1 seconds"),
    ("service.max_assistants", 0.5, "service.max_assistants must be an integer"),
    ("models.local.retry_after_cap", float("inf"), "models.local.retry_after_cap must be a "
     "finite number"),
    ("models.local.breaker_cooldown", -1, "'breaker_cooldown' must be a positive number"),
    ("models.local.timeouts", {"idle": float("nan")}, "timeouts.idle must be a positive"),
    ("assistants.0.tick_rate", float("nan"), "assistants.pip.tick_rate must be a positive"),
    ("assistants.0.sleep_duration", float("inf"), "assistants.pip.sleep_duration must be"),
    ("service.stop_grace", True, "service.stop_grace must be"),
    ("service.max_concurrent", 0, "service.max_concurrent must be a positive integer"),
    ("service.log_level", "loud", "service.log_level must be one of"),
    ("store.backend", "oracle", "store.backend must be one of sqlite, memory, postgres"),
    ("store.path", 3, "store.path must be a string"),
    ("store.quick_check", "yes", "store.quick_check must be true or false"),
    ("world.log_size", "big", "world.log_size must be an integer"),
    ("http.max_body", -5, "http.max_body must be a positive integer"),
    ("http.enabled", "yes", "http.enabled must be true or false"),
    ("http.listen", "gopher:x:70", "http.listen: unknown endpoint type"),
    ("http.listen", 70000, "http.listen: port 70000 is out of range"),
    ("manhole.enabled", 1, "manhole.enabled must be true or false"),
    ("models.local.stream", "yes", "models.local.stream must be true or false"),
    ("models.local.base_url", 12, "models.local.base_url must be a string"),
    ("models.local.base_url", "ftp://x", "models.local"),
    ("models.local.tool_calling", "telepathy", "models.local"),
    ("models", ["local"], "models must be a table"),
    ("assistants", {"name": "pip"}, "assistants must be an array of tables"),
    ("assistants.0.tick_rate", "fast", "assistants.pip.tick_rate must be a positive number"),
    ("assistants.0.reflection_interval", -1, "assistants.pip.reflection_interval must be"),
    ("assistants.0.persona", 5, "assistants.pip.persona must be a string"),
    ("assistants.0.name", "no spaces allowed", "assistants"),
    ("assistants.0.execution_config", {"max_iterations": 99}, "assistants.pip.execution_config"),
    ("assistants.0.exit_tools", "leave", "assistants.pip.exit_tools must be a list"),
])
def test_wrong_type_or_value(path: str, value: Any, expected: str) -> None:
    assert expected in error_of(with_change(path, value))


def test_an_assistant_entry_that_is_not_a_table() -> None:
    data = base_config()
    data["assistants"].append("mason")
    assert "assistants[1] must be a table" in error_of(data)


def test_a_section_that_is_not_a_table() -> None:
    data = base_config()
    data["service"] = 5
    assert "service must be a table, not int" in error_of(data)


# -- assistants, tools, profiles --------------------------------------------------------------


def test_assistant_naming_an_unknown_profile() -> None:
    message = error_of(with_change("assistants.0.model", "gpt"))
    assert message == ("assistant.toml: assistants.pip.model: unknown model profile 'gpt' "
                       "(declared: local)")


def test_assistant_without_any_profile() -> None:
    data = base_config()
    del data["models"]
    assert "assistants.pip: no model profile is declared" in error_of(data)


def test_assistant_must_pick_among_several_profiles() -> None:
    data = base_config()
    data["models"]["other"] = {"base_url": "http://127.0.0.1:8000/v1", "model": "m"}
    assert "assistants.pip.model is required" in error_of(data)
    data["models"]["default"] = {"base_url": "http://127.0.0.1:8001/v1", "model": "m"}
    config = parse_config(data, base=ROOT)
    assert config.assistants[0].model == "default"


@pytest.mark.parametrize("where", ["top", "context"])
def test_assistant_naming_an_unknown_tool(where: str) -> None:
    if where == "top":
        data = with_change("assistants.0.execution_config", {"allowed_tools": ["inspect_locaton"]})
        key = "assistants.pip.execution_config.allowed_tools"
    else:
        data = with_change("assistants.0.execution_config",
                           {"contexts": {"building": {"allowed_tools": ["say", "fly"]}}})
        key = "assistants.pip.execution_config.contexts.building.allowed_tools"
    message = error_of(data)
    assert message.startswith(f"assistant.toml: {key}: unknown tool")
    if where == "top":
        assert "did you mean 'inspect_location'?" in message


def test_exit_tool_named_like_a_tool() -> None:
    data = with_change("assistants.0.exit_tools", [{"name": "say"}])
    assert "assistants.pip.exit_tools: 'say' is already a tool name" in error_of(data)


def test_duplicate_assistant_names() -> None:
    data = base_config()
    data["assistants"].append(dict(data["assistants"][0]))
    assert "a second assistant named 'pip'" in error_of(data)


def test_every_assistant_config_field_passes_through() -> None:
    data = with_change("assistants.0.sleep_tick_rate", 30)
    entry = data["assistants"][0]
    entry.update({"tick_rate": 3, "reflection_interval": 4, "sleep_duration": 600,
                  "tool_budget": 5, "exit_tools": [{"name": "hand_over"}],
                  "compaction": {"preserve_window": 5}})
    (pip,) = parse_config(data, base=ROOT).assistants
    assert (pip.tick_rate, pip.sleep_tick_rate, pip.sleep_duration) == (3, 30, 600)
    assert (pip.reflection_interval, pip.tool_budget) == (4, 5)
    assert [t.name for t in pip.exit_tools] == ["hand_over"]
    assert pip.compaction.preserve_window == 5


def test_scripted_profile_takes_profile_options() -> None:
    data = base_config()
    data["models"] = {"demo": {"scenario": str(SCENARIO), "stream": False, "port": 0,
                               "model": "my-script"}}
    spec = parse_config(data, base=ROOT).models["demo"]
    assert spec.scripted and spec.options == {"stream": False, "name": "demo"}
    assert spec.model_name == "my-script"
    data["models"]["demo"]["base_url"] = "http://127.0.0.1:1/v1"
    assert "either 'scenario'" in error_of(data)


def test_profile_without_base_url() -> None:
    data = base_config()
    data["models"] = {"local": {"model": "qwen"}}
    assert "models.local: 'base_url' is required" in error_of(data)


# -- listeners ----------------------------------------------------------------------------------


def test_http_beyond_localhost_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    data = with_change("http.listen", "0.0.0.0:8080")
    assert "http.listen: the HTTP API listens beyond this machine" in error_of(data)
    data["http"]["token_env"] = "AI_TOOLS_TEST_TOKEN"
    monkeypatch.delenv("AI_TOOLS_TEST_TOKEN", raising=False)
    assert "the environment variable AI_TOOLS_TEST_TOKEN is not set" in error_of(data)
    monkeypatch.setenv("AI_TOOLS_TEST_TOKEN", "short")
    assert "at least 16 characters" in error_of(data)
    monkeypatch.setenv("AI_TOOLS_TEST_TOKEN", "s3cret-token-of-some-length")
    config = parse_config(data, base=ROOT)
    assert config.http.token == "s3cret-token-of-some-length"
    assert "s3cret" not in repr(config)  # the token never shows in logs of the config


def test_token_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a-token-read-from-a-file\n")
    data = with_change("http.token_file", str(token))
    assert parse_config(data, base=ROOT).http.token == "a-token-read-from-a-file"
    data["http"]["token"] = "x" * 20
    assert "give only one of token, token_file" in error_of(data)


def test_manhole_needs_a_login(tmp_path: Path) -> None:
    data = with_change("manhole.enabled", True)
    assert "the manhole needs manhole.authorized_keys or manhole.password_file" in error_of(data)
    data["manhole"]["authorized_keys"] = str(tmp_path / "missing_keys")
    assert "manhole.authorized_keys: file not found" in error_of(data)
    keys = tmp_path / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAA test\n")
    data["manhole"]["authorized_keys"] = str(keys)
    assert "manhole.host_key is required with the memory store" in error_of(data)
    data["manhole"]["host_key"] = str(tmp_path / "host_key")
    manhole = parse_config(data, base=ROOT).manhole
    assert manhole.enabled and manhole.endpoint == "tcp:2222:interface=127.0.0.1"
    assert manhole.host_key == tmp_path / "host_key"


def test_manhole_host_key_defaults_next_to_the_database(tmp_path: Path) -> None:
    keys = tmp_path / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAA test\n")
    data = with_change("manhole.authorized_keys", str(keys))
    data["store"] = {"path": str(tmp_path / "db" / "state.sqlite")}
    config = parse_config(data, base=ROOT, overrides=Overrides(flags={"manhole": "2300"}))
    assert config.manhole.enabled
    assert config.manhole.endpoint == "tcp:2300:interface=127.0.0.1"
    assert config.manhole.host_key == tmp_path / "db" / "manhole_host_key"


def test_same_endpoint_twice(tmp_path: Path) -> None:
    keys = tmp_path / "k"
    keys.write_text("ssh-ed25519 AAAA test\n")
    data = with_change("manhole", {"enabled": True, "listen": 9000, "authorized_keys": str(keys),
                                   "host_key": str(tmp_path / "hk")})
    data["http"]["listen"] = 9000
    assert "name the same endpoint" in error_of(data)


@pytest.mark.parametrize(("value", "expected"), [
    (8080, "tcp:8080:interface=127.0.0.1"),
    ("8080", "tcp:8080:interface=127.0.0.1"),
    ("0.0.0.0:80", "tcp:80:interface=0.0.0.0"),
    ("127.0.0.1:0", "tcp:0:interface=127.0.0.1"),
    ("[::1]:8080", "tcp6:8080:interface=\\:\\:1"),
    ("tcp:9000", "tcp:9000:interface=127.0.0.1"),
    ("tcp6:9000", "tcp6:9000:interface=\\:\\:1"),
    ("tcp:9000:interface=0.0.0.0", "tcp:9000:interface=0.0.0.0"),
    ("unix:/tmp/ai.sock", "unix:/tmp/ai.sock"),
    ("off", None),
    ("None", None),
])
def test_listen_endpoint(value: Any, expected: str | None) -> None:
    assert listen_endpoint(value, "http.listen") == expected


@pytest.mark.parametrize("value", [True, "", "gopher:x:1", "tcp:abc", "tcp:", 3.5, -1, [80],
                                   "tcp:80:backlog=x"])
def test_listen_endpoint_refuses(value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        listen_endpoint(value, "http.listen")
    assert str(info.value).startswith("http.listen")


@pytest.mark.parametrize(("endpoint", "local"), [
    ("tcp:80:interface=127.0.0.1", True),
    ("tcp:80:interface=127.8.9.1", True),
    ("tcp6:80:interface=\\:\\:1", True),
    ("tcp:80:interface=localhost", True),
    ("unix:/tmp/x.sock", True),
    ("tcp:80:interface=0.0.0.0", False),
    ("tcp:80", False),
    ("tcp:80:interface=192.168.1.4", False),
    ("tcp6:80:interface=\\:\\:", False),
    ("tcp:80:interface=example.org", False),
])
def test_endpoint_is_local(endpoint: str, local: bool) -> None:
    assert endpoint_is_local(endpoint) is local


# -- command-line overrides --------------------------------------------------------------------


def test_store_quick_check_is_on_unless_turned_off() -> None:
    """The SQLite file is checked at start by default; ``quick_check = false`` skips it."""
    data = with_change("store", {"path": "var/x.sqlite"})
    assert parse_config(data, base=ROOT).store.quick_check is True
    data["store"]["quick_check"] = False
    assert parse_config(data, base=ROOT).store.quick_check is False


def test_db_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    message = error_of(base_config(), Overrides(flags={"db": "state/x.sqlite"}))
    assert f"--db: the directory {tmp_path / 'state'} does not exist" in message
    (tmp_path / "state").mkdir()
    config = parse_config(base_config(), base=ROOT,
                          overrides=Overrides(flags={"db": "state/x.sqlite"}))
    assert config.store.backend == "sqlite"
    assert config.store.path == tmp_path / "state" / "x.sqlite"  # relative to the cwd
    config = parse_config(with_change("store", {"path": "x.sqlite"}), base=ROOT,
                          overrides=Overrides(flags={"db": "memory"}))
    assert (config.store.backend, config.store.path) == ("memory", None)
    (tmp_path / "adir").mkdir()
    adir = Overrides(flags={"db": str(tmp_path / "adir")})
    assert "is a directory" in error_of(base_config(), adir)


def test_http_override() -> None:
    config = parse_config(base_config(), base=ROOT, overrides=Overrides(flags={"http": "9090"}))
    assert config.http.enabled and config.http.endpoint == "tcp:9090:interface=127.0.0.1"
    config = parse_config(base_config(), base=ROOT, overrides=Overrides(flags={"http": "off"}))
    assert not config.http.enabled
    message = error_of(base_config(), Overrides(flags={"http": "0.0.0.0:9090"}))
    assert "--http: the HTTP API listens beyond this machine" in message
    gopher = Overrides(flags={"http": "gopher:x:1"})
    assert "--http: unknown endpoint type" in error_of(base_config(), gopher)


def test_llm_overrides_replace_every_profile() -> None:
    data = base_config()
    data["models"]["demo"] = {"scenario": str(SCENARIO)}
    data["assistants"][0]["model"] = "demo"
    message = error_of(data, Overrides(flags={"llm_url": "http://127.0.0.1:8000"}))
    assert ("models.demo: 'model' is required (with --llm-url, set --llm-model or "
            "AI_TOOLS_LLM_MODEL too)") in message
    config = parse_config(data, base=ROOT, overrides=Overrides(flags={
        "llm_url": "http://127.0.0.1:8000", "llm_model": "llama3",
        "llm_api_key_env": "MY_KEY"}))
    for spec in config.models.values():
        assert not spec.scripted and spec.profile is not None
        assert spec.profile.base_url == "http://127.0.0.1:8000/v1"
        assert (spec.profile.model, spec.profile.api_key_env) == ("llama3", "MY_KEY")


def test_llm_url_alone_makes_a_default_profile() -> None:
    data = base_config()
    del data["models"]
    config = parse_config(data, base=ROOT, overrides=Overrides(flags={
        "llm_url": "http://127.0.0.1:1/v1", "llm_model": "m"}))
    assert list(config.models) == ["default"]
    assert config.assistants[0].model == "default"


def test_log_level_override() -> None:
    config = parse_config(base_config(), base=ROOT,
                          overrides=Overrides(flags={"log_level": "WARNING"}))
    assert config.service.log_level == "warn"
    chatty = Overrides(flags={"log_level": "chatty"})
    assert "--log-level must be one of" in error_of(base_config(), chatty)


# -- whatever is in the file: a Config or one ConfigError line ------------------------------

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.floats(allow_nan=True)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=6,
)
_paths = st.sampled_from([
    "service", "service.tick_interval", "service.log_level", "store", "store.backend",
    "store.path", "world", "world.file", "world.log_size", "models", "models.local",
    "models.local.model", "models.local.timeouts", "models.local.repetition",
    "models.local.extra_body", "assistants", "assistants.0", "assistants.0.name",
    "assistants.0.model", "assistants.0.tick_rate", "assistants.0.execution_config",
    "assistants.0.exit_tools", "assistants.0.compaction", "http", "http.listen", "http.token",
    "http.max_body", "manhole", "manhole.listen", "manhole.enabled", "extra",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(st.tuples(_paths, _values), min_size=1, max_size=3))
def test_any_value_gives_a_config_or_one_line(changes: list[tuple[str, Any]]) -> None:
    data = base_config()
    for path, value in changes:
        target: Any = data
        keys = path.split(".")
        try:
            for key in keys[:-1]:
                target = target[int(key)] if isinstance(target, list) else target[key]
            if isinstance(target, list):
                target[int(keys[-1])] = copy.deepcopy(value)
            elif isinstance(target, dict):
                target[keys[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    try:
        parse_config(data, source="fuzz.toml", base=ROOT)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("fuzz.toml: ") and "\n" not in message, message


def test_environment_is_not_read_unless_handed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program loading a config reads no variable it did not hand over in Overrides
    (twistd and make hand over the process environment)."""
    monkeypatch.setenv("AI_TOOLS_LLM_URL", "http://127.0.0.1:9/v1")
    config = parse_config(base_config(), base=ROOT)
    profile = config.models["local"].profile
    assert profile is not None and profile.base_url == "http://127.0.0.1:11434/v1"
    config = parse_config(base_config(), base=ROOT, overrides=Overrides(environ=os.environ))
    profile = config.models["local"].profile
    assert profile is not None and profile.base_url == "http://127.0.0.1:9/v1"


def test_names_with_line_breaks_keep_the_message_on_one_line() -> None:
    data = base_config()
    data["models"] = {"a\nb": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}}
    data["assistants"][0]["name"] = "p\nq"
    data["assistants"][0]["model"] = "zz"
    message = error_of(data)
    assert message == ("assistant.toml: assistants[0].model: unknown model profile 'zz' "
                       "(declared: 'a\\nb')")
    data["models"]["a\nb"]["model"] = ""
    assert "models.'a\\nb': 'model' is required" in error_of(data)
