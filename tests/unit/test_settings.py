"""The deployment settings: one name, flag, variable and config key each, one precedence.

Every setting of ``ai_tools.settings`` is set three ways here — in the file,
in the environment, on the command line — and read back from the checked
config: the flag wins over the variable, the variable over the file.  The
table in docs/standalone.md is the one the code prints, and every
``AI_TOOLS_…`` name the package reads is a setting.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ai_tools import settings
from ai_tools.settings import SETTINGS, environment_warnings, setting
from ai_tools.standalone import plugin
from ai_tools.standalone.config import Config, Overrides, parse_config
from tests.unit.test_config import ROOT, SCENARIO, WORLD, base_config, error_of

Read = Callable[[Config], Any]


def profile(config: Config) -> Any:
    return config.models["local"].profile


def sqlite_file(tmp_path: Path, name: str) -> str:
    return str(tmp_path / name)


# name → (file value, variable value, flag value, how to read it, what each gives)
CASES: dict[str, tuple[Any, str, str, Read, tuple[Any, Any, Any]]] = {
    "llm_url": ("http://file:1/v1", "http://env:1/v1", "http://flag:1/v1",
                lambda c: profile(c).base_url,
                ("http://file:1/v1", "http://env:1/v1", "http://flag:1/v1")),
    "llm_model": ("file-m", "env-m", "flag-m", lambda c: profile(c).model,
                  ("file-m", "env-m", "flag-m")),
    "llm_api_key_env": ("FILE_KEY", "ENV_KEY", "FLAG_KEY", lambda c: profile(c).api_key_env,
                        ("FILE_KEY", "ENV_KEY", "FLAG_KEY")),
    "llm_context_window": (1000, "2000", "3000", lambda c: profile(c).context_window,
                           (1000, 2000, 3000)),
    "llm_stream": (True, "false", "yes", lambda c: profile(c).stream, (True, False, True)),
    "llm_tool_calling": ("native", "fallback", "native", lambda c: profile(c).tool_calling,
                         ("native", "fallback", "native")),
    "llm_tool_choice": ("auto", "required", "off", lambda c: profile(c).tool_choice,
                        ("auto", "required", None)),
    "llm_max_tokens": (800, "0", "1024", lambda c: profile(c).max_tokens, (800, 0, 1024)),
    "world": (str(WORLD), str(WORLD), str(WORLD), lambda c: c.world.file, (WORLD,) * 3),
    "http": (8001, "8002", "8003", lambda c: c.http.endpoint,
             tuple(f"tcp:{p}:interface=127.0.0.1" for p in (8001, 8002, 8003))),
    "manhole": ("off", "2223", "off", lambda c: c.manhole.enabled, (False, True, False)),
    "log_level": ("error", "warn", "DEBUG", lambda c: c.service.log_level,
                  ("error", "warn", "debug")),
    "tick_interval": (2.0, "3", "4.5", lambda c: c.service.tick_interval, (2.0, 3.0, 4.5)),
    "stop_grace": (1, "2", "3", lambda c: c.service.stop_grace, (1.0, 2.0, 3.0)),
    "max_concurrent": (5, "6", "7", lambda c: c.service.max_concurrent, (5, 6, 7)),
    "otlp_endpoint": ("http://file:1", "http://env:1", "https://flag:1",
                      lambda c: c.service.otlp_endpoint,
                      ("http://file:1", "http://env:1", "https://flag:1")),
    "min_tick_rate": (0.5, "0.25", "2", lambda c: c.service.min_tick_rate, (0.5, 0.25, 2.0)),
    "max_assistants": (5, "6", "7", lambda c: c.service.max_assistants, (5, 6, 7)),
}
"""Settings whose three ways are checked by one test; the others have their own below."""

OWN_TESTS = {"config", "db", "db_dsn", "db_password", "db_password_file", "http_token",
             "http_token_file", "llm_api_key", "gc", "tiktoken_download",
             "worker_name", "lease_ttl", "lease_interval"}  # tests/unit/test_config_postgres.py


def file_with(name: str, value: Any, tmp_path: Path) -> dict[str, Any]:
    """The base config with setting ``name`` at its key in the file."""
    data = base_config()
    entry = setting(name)
    assert entry.section is not None and entry.key is not None
    if entry.section == "models.*":
        data["models"]["local"][entry.key] = value
    else:
        data.setdefault(entry.section, {})[entry.key] = value
    if name == "manhole":
        keys = tmp_path / "authorized_keys"
        keys.write_text("ssh-ed25519 AAAA test\n")
        data["manhole"].update(authorized_keys=str(keys), host_key=str(tmp_path / "hk"))
    return data


def test_every_setting_is_tested_here() -> None:
    assert set(CASES) | OWN_TESTS == {s.name for s in SETTINGS}


@pytest.mark.parametrize("name", sorted(CASES))
def test_flag_beats_variable_beats_file(name: str, tmp_path: Path) -> None:
    in_file, in_env, on_flag, read, (from_file, from_env, from_flag) = CASES[name]
    entry = setting(name)
    data = file_with(name, in_file, tmp_path)
    environ = {entry.env: in_env}
    assert read(parse_config(data, base=ROOT)) == from_file
    assert read(parse_config(data, base=ROOT, overrides=Overrides(environ=environ))) == from_env
    both = Overrides(flags={name: on_flag}, environ=environ)
    assert read(parse_config(data, base=ROOT, overrides=both)) == from_flag


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("llm_context_window", "big", "AI_TOOLS_LLM_CONTEXT_WINDOW must be an integer, not 'big'"),
    ("llm_context_window", "-4", "'context_window' must be a positive integer (given by "
                                 "AI_TOOLS_LLM_CONTEXT_WINDOW)"),
    ("llm_stream", "maybe", "AI_TOOLS_LLM_STREAM must be true or false, not 'maybe'"),
    ("llm_tool_calling", "telepathy", "(given by AI_TOOLS_LLM_TOOL_CALLING)"),
    ("llm_max_tokens", "lots", "AI_TOOLS_LLM_MAX_TOKENS must be an integer, not 'lots'"),
    ("llm_max_tokens", "-5", "(given by AI_TOOLS_LLM_MAX_TOKENS)"),
    ("llm_tool_choice", "sometimes", "(given by AI_TOOLS_LLM_TOOL_CHOICE)"),
    ("tick_interval", "fast", "AI_TOOLS_TICK_INTERVAL must be a number, not 'fast'"),
    ("tick_interval", "-1", "AI_TOOLS_TICK_INTERVAL must be a positive number"),
    ("tick_interval", "nan", "AI_TOOLS_TICK_INTERVAL must be a finite number, not 'nan'"),
    ("tick_interval", "inf", "AI_TOOLS_TICK_INTERVAL must be a finite number, not 'inf'"),
    ("stop_grace", "Infinity", "AI_TOOLS_STOP_GRACE must be a finite number"),
    ("min_tick_rate", "0", "AI_TOOLS_MIN_TICK_RATE must be a positive number"),
    ("max_assistants", "many", "AI_TOOLS_MAX_ASSISTANTS must be an integer"),
    ("max_concurrent", "0", "AI_TOOLS_MAX_CONCURRENT must be a positive integer"),
    ("log_level", "chatty", "AI_TOOLS_LOG_LEVEL must be one of debug, info"),
    ("http", "0.0.0.0:80", "AI_TOOLS_HTTP: the HTTP API listens beyond this machine"),
    ("http", "gopher:x", "AI_TOOLS_HTTP: unknown endpoint type"),
    ("world", "/no/such/world.toml", "AI_TOOLS_WORLD: file not found"),
    ("db", "/no/such/dir/x.sqlite", "AI_TOOLS_DB: the directory /no/such/dir does not exist"),
])
def test_a_bad_variable_is_named_in_the_one_line(name: str, value: str, expected: str) -> None:
    message = error_of(base_config(), Overrides(environ={setting(name).env: value}))
    assert expected in message


def test_a_bad_flag_is_named_by_its_flag() -> None:
    assert "--tick-interval must be a number" in error_of(
        base_config(), Overrides(flags={"tick_interval": "soon"}))


def test_the_config_file_from_the_environment(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``AI_TOOLS_CONFIG`` names the file when ``--config`` is not given."""
    path = tmp_path / "a.toml"
    path.write_text(f'[world]\nfile = "{WORLD}"\n[models.m]\nscenario = "{SCENARIO}"\n')
    monkeypatch.setenv("AI_TOOLS_CONFIG", str(path))
    options = plugin.Options()
    options.parseOptions([])
    assert options.loaded is not None and options.loaded.source == str(path)
    options = plugin.Options()
    options.parseOptions(["--config", str(ROOT / "examples" / "assistant.toml")])
    assert options.loaded is not None and options.loaded.source.endswith("assistant.toml")


def test_a_database_path_from_outside_must_be_in_a_directory_that_exists(
        tmp_path: Path) -> None:
    """A typo in ``--db`` must not start a new, empty world; ``memory`` needs no file."""
    data = base_config()
    data["store"] = {"path": str(tmp_path / "file.sqlite")}
    missing = tmp_path / "typo" / "state.sqlite"
    assert f"--db: the directory {missing.parent} does not exist" in error_of(
        data, Overrides(flags={"db": str(missing)}))
    config = parse_config(data, base=ROOT, overrides=Overrides(
        environ={"AI_TOOLS_DB": str(tmp_path / "env.sqlite")}))
    assert (config.store.backend, config.store.path) == ("sqlite", tmp_path / "env.sqlite")
    config = parse_config(data, base=ROOT, overrides=Overrides(environ={"AI_TOOLS_DB": "memory"}))
    assert (config.store.backend, config.store.path) == ("memory", None)
    # the file's own path (and the default) are created with their directory at start
    data["store"] = {"path": str(missing)}
    assert parse_config(data, base=ROOT).store.path == missing


def test_the_http_token_from_the_environment_or_a_file(tmp_path: Path) -> None:
    """``AI_TOOLS_HTTP_TOKEN`` (no flag: a secret) or ``--http-token-file`` replace the
    file's token settings; a listener beyond localhost then starts."""
    data = base_config()
    data["http"] = {"listen": "0.0.0.0:8080", "token_env": "SOMETHING_UNSET"}
    token = "a-token-of-sixteen-chars"
    config = parse_config(data, base=ROOT, overrides=Overrides(
        environ={"AI_TOOLS_HTTP_TOKEN": token}))
    assert config.http.token == token and token not in repr(config)
    path = tmp_path / "token"
    path.write_text("another-long-token-here\n")
    config = parse_config(data, base=ROOT, overrides=Overrides(
        flags={"http_token_file": str(path)}, environ={"AI_TOOLS_HTTP_TOKEN": token}))
    assert config.http.token == "another-long-token-here"
    assert "AI_TOOLS_HTTP_TOKEN" not in {s.option for s in SETTINGS if s.flag}


def test_the_api_key_is_read_from_ai_tools_llm_api_key_unless_another_is_named() -> None:
    """The key's variable: ``api_key_env`` when given, else AI_TOOLS_LLM_API_KEY."""
    assert profile(parse_config(base_config(), base=ROOT)).api_key_env == "AI_TOOLS_LLM_API_KEY"
    data = base_config()
    data["models"]["local"]["api_key_env"] = "OPENAI_API_KEY"
    assert profile(parse_config(data, base=ROOT)).api_key_env == "OPENAI_API_KEY"
    assert setting("llm_api_key").env == "AI_TOOLS_LLM_API_KEY"
    assert not setting("llm_api_key").flag  # never on a command line


def test_the_model_server_replaces_the_scripted_model() -> None:
    data = base_config()
    data["models"] = {"default": {"scenario": str(SCENARIO), "model": "my-script"}}
    config = parse_config(data, base=ROOT, overrides=Overrides(environ={
        "AI_TOOLS_LLM_URL": "http://127.0.0.1:8000/v1", "AI_TOOLS_LLM_MODEL": "qwen"}))
    spec = config.models["default"]
    assert not spec.scripted and spec.profile is not None
    assert (spec.profile.base_url, spec.profile.model) == ("http://127.0.0.1:8000/v1", "qwen")
    message = error_of(data, Overrides(environ={"AI_TOOLS_LLM_URL": "http://x:1/v1"}))
    assert ("models.default: 'model' is required (with AI_TOOLS_LLM_URL, set --llm-model or "
            "AI_TOOLS_LLM_MODEL too)") in message
    message = error_of(data, Overrides(environ={"AI_TOOLS_LLM_MODEL": "qwen"}))
    assert ("AI_TOOLS_LLM_MODEL is set, but models.default is the scripted stand-in model: "
            "set AI_TOOLS_LLM_URL (or --llm-url) too") in message
    # profile options apply to the scripted model too
    config = parse_config(data, base=ROOT, overrides=Overrides(
        environ={"AI_TOOLS_LLM_STREAM": "0"}))
    assert config.models["default"].options["stream"] is False


# -- names that look like ours ----------------------------------------------------------


def test_a_config_key_typo_names_the_key_not_what_it_left_missing() -> None:
    """``modle`` is the mistake to report, not the "'model' is required" it causes."""
    data = base_config()
    data["models"]["local"] = {"base_url": "http://127.0.0.1:1/v1", "modle": "qwen"}
    message = error_of(data)
    assert "models.local: unknown key 'modle' (did you mean 'model'?)" in message
    assert "required" not in message
    data = base_config()
    data["modles"] = data.pop("models")
    message = error_of(data)
    assert "unknown key 'modles' (did you mean 'models'?)" in message


def test_variables_that_look_like_settings_get_a_warning_with_the_near_name() -> None:
    environ = {
        "AI_TOOLS_LLM_MODLE": "qwen",            # a typo
        "AI_TOOLS_HTTP": "8081",                 # a setting: fine
        "LLM_URL": "http://127.0.0.1:1/v1",      # the name make used to read
        "LLM_API_KEY": "sk-x",
        "AI_TOOLS_PG_BINDIR": "/usr/lib/pg",     # the test suite's
        "AI_TOOLS_MY_KEY": "k",                  # named by the config: its api_key_env
        "HOME": "/root",
    }
    assert environment_warnings(environ, {"AI_TOOLS_MY_KEY"}) == [
        "AI_TOOLS_LLM_MODLE is not an ai_tools setting (did you mean AI_TOOLS_LLM_MODEL?); "
        "it is ignored",
        "LLM_API_KEY is not read any more: set AI_TOOLS_LLM_API_KEY instead",
        "LLM_URL is not read any more: set AI_TOOLS_LLM_URL instead",
    ]
    data = base_config()
    data["models"]["local"]["api_key_env"] = "AI_TOOLS_MY_KEY"
    config = parse_config(data, base=ROOT, overrides=Overrides(environ=environ))
    assert len(config.warnings) == 3


def test_a_setting_name_that_is_not_one() -> None:
    with pytest.raises(KeyError, match="did you mean 'llm_model'"):
        setting("llm_modle")
    with pytest.raises(KeyError):
        Overrides(flags={"model": "x"})


# -- one table --------------------------------------------------------------------------


def test_names_follow_the_rule() -> None:
    for entry in SETTINGS:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", entry.name)
        assert entry.env == "AI_TOOLS_" + entry.name.upper()
        assert entry.option == (entry.name.replace("_", "-") if entry.flag else None)
    # secrets never go on a command line; process tuning is read where it is used
    without_flag = {s.name for s in SETTINGS if not s.flag}
    assert without_flag == {"llm_api_key", "db_password", "http_token", "gc",
                            "tiktoken_download"}


def test_twistd_has_one_option_per_flag_naming_its_variable() -> None:
    options = {entry[0]: entry[3] for entry in plugin.Options.optParameters}
    assert set(options) == {s.option for s in SETTINGS if s.flag}
    for entry in SETTINGS:
        if entry.flag:
            assert f"${entry.env}" in options[str(entry.option)]


def test_the_docs_show_the_table_of_the_code() -> None:
    page = (ROOT / "docs" / "standalone.md").read_text()
    assert settings.markdown_table() in page, "regenerate with: python -m ai_tools.settings"


def _names_read_by_the_package() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "ai_tools").rglob("*.py"):
        if "contrib" in path.parts or path.name == "settings.py":
            continue  # the Evennia contrib's names are Django settings; settings.py is the table
        found |= {name for name in re.findall(r"AI_TOOLS_[A-Z0-9_]+", path.read_text())
                  if not name.endswith("_")}  # a prefix, not a name
    return found


def test_every_variable_the_package_names_is_a_setting() -> None:
    known = {s.env for s in SETTINGS}
    unknown = sorted(n for n in _names_read_by_the_package()
                     if n not in known and not n.startswith(settings.TEST_VARIABLE_PREFIXES))
    assert not unknown, f"add them to ai_tools.settings.SETTINGS: {unknown}"


def test_the_modules_reading_variables_use_the_same_names() -> None:
    from ai_tools.llm import profile as llm_profile
    from ai_tools.standalone.gc_tuning import ENV_GC
    from ai_tools.store.postgres import PASSWORD_ENV, PASSWORD_FILE_ENV

    assert ENV_GC == setting("gc").env
    assert (PASSWORD_ENV, PASSWORD_FILE_ENV) == (setting("db_password").env,
                                                 setting("db_password_file").env)
    for constant, name in [("ENV_URL", "llm_url"), ("ENV_MODEL", "llm_model"),
                           ("ENV_API_KEY_ENV", "llm_api_key_env"),
                           ("ENV_CONTEXT_WINDOW", "llm_context_window"),
                           ("ENV_STREAM", "llm_stream"), ("ENV_TOOL_CALLING", "llm_tool_calling"),
                           ("ENV_TOOL_CHOICE", "llm_tool_choice"),
                           ("ENV_MAX_TOKENS", "llm_max_tokens")]:
        if hasattr(llm_profile, constant):  # ModelProfile.from_environ's own names
            assert getattr(llm_profile, constant) == setting(name).env


def test_a_missing_key_names_the_variable_to_set() -> None:
    """A user who set LLM_API_KEY (the name make used to read) is told, at start, which
    variable holds the key, and a 401 names that variable rather than ``api_key_env``."""
    from ai_tools.llm.http_errors import error_for_status

    config = parse_config(base_config(), base=ROOT,
                          overrides=Overrides(environ={"LLM_API_KEY": "sk-x"}))
    assert config.warnings == (
        "LLM_API_KEY is not read any more: set AI_TOOLS_LLM_API_KEY instead",)
    spec = profile(config)
    message = str(error_for_status(401, spec.chat_url, b"{}", model=spec.model,
                                   api_key_env=spec.api_key_env, api_key_present=False))
    assert "check the API key in $AI_TOOLS_LLM_API_KEY (the variable is not set)" in message
    assert "api_key_env" not in message
