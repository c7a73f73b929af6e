"""Deployment settings: one name each, with one flag, one variable and one config key.

Every setting an operator changes per deployment — which model server, which
database, which ports, how much logging — has a name (``llm_url``) from which
the two other spellings follow by one rule:

* the command-line flag of ``twistd ai-assistant`` is ``--`` + the name with
  dashes (``--llm-url``);
* the environment variable is ``AI_TOOLS_`` + the name in capitals
  (``AI_TOOLS_LLM_URL``);

and the config-file key is given per setting (``models.*.base_url``: the
``base_url`` of every ``[models.NAME]`` table).  A value given in several
places is taken from the first of: the flag, the variable, the file, the
default.  Secrets (a password, an API key, a token) have no flag, so they never
show in a process listing; :data:`SETTINGS` marks them.

This module is the one table: the standalone service (``ai_tools.standalone``)
reads the flags and variables through it, ``docs/standalone.md`` shows it
(``python -m ai_tools.settings`` prints that table), and other hosts use the
same key names from here.  It imports nothing of ai_tools, so any layer may
use it.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Collection, Iterable, Mapping

import attrs

__all__ = [
    "ENV_PREFIX",
    "RETIRED_VARIABLES",
    "SETTINGS",
    "TEST_VARIABLE_PREFIXES",
    "Setting",
    "environment_warnings",
    "markdown_table",
    "near_name",
    "setting",
]

ENV_PREFIX = "AI_TOOLS_"


@attrs.frozen
class Setting:
    """One deployment setting (see the module docstring for how its names follow)."""

    name: str
    """The setting's name: ``llm_url``."""
    file_key: str | None
    """Where the config file holds it (``service.log_level``; ``models.*.base_url`` for
    every model profile); None when it is never in the file."""
    help: str
    """What it is, in a few words (twistd's ``--help`` and the docs show it)."""
    example: str = ""
    """An example value, for the docs."""
    flag: bool = True
    """Whether it has a command-line flag (False for secrets and process tuning)."""

    @property
    def env(self) -> str:
        """The environment variable: ``AI_TOOLS_LLM_URL``."""
        return ENV_PREFIX + self.name.upper()

    @property
    def option(self) -> str | None:
        """The flag without its dashes (``llm-url``); None when it has no flag."""
        return self.name.replace("_", "-") if self.flag else None

    @property
    def section(self) -> str | None:
        """The config table holding it: ``service``, ``store``, ``models.*``..."""
        return None if self.file_key is None else self.file_key.rsplit(".", 1)[0]

    @property
    def key(self) -> str | None:
        """The key inside its config table: ``log_level``."""
        return None if self.file_key is None else self.file_key.rsplit(".", 1)[1]


SETTINGS: tuple[Setting, ...] = (
    Setting("config", None, "the TOML configuration file", "examples/assistant.toml"),
    # -- the model server: applies to every [models.NAME] profile
    Setting("llm_url", "models.*.base_url",
            "base URL of an OpenAI-compatible model server (replaces the scripted model)",
            "http://127.0.0.1:11434/v1"),
    Setting("llm_model", "models.*.model", "model name to ask the server for",
            "qwen2.5:7b-instruct"),
    Setting("llm_api_key_env", "models.*.api_key_env",
            "name of the variable holding the server's API key (default AI_TOOLS_LLM_API_KEY)",
            "OPENAI_API_KEY"),
    Setting("llm_api_key", None,
            "the API key itself, when no other variable is named", "sk-...", flag=False),
    Setting("llm_context_window", "models.*.context_window",
            "the model's context window, in tokens", "16384"),
    Setting("llm_stream", "models.*.stream", "stream answers (true) or wait for whole ones",
            "false"),
    Setting("llm_tool_calling", "models.*.tool_calling",
            "native tool calls, or fallback (calls written in the text)", "fallback"),
    Setting("llm_tool_choice", "models.*.tool_choice",
            "tool_choice sent with the tools: auto, required, none, or off (send none)",
            "required"),
    Setting("llm_max_tokens", "models.*.max_tokens",
            "the longest reply, in tokens (default a quarter of the window, at most 4096; "
            "0 sends none)", "1024"),
    # -- the database
    Setting("db", "store.path", "SQLite file holding the state, or memory",
            "/srv/ai/state.sqlite"),
    Setting("db_dsn", "store.dsn", "PostgreSQL connection string, without the password "
            "(selects the postgres store)", "host=db dbname=ai_tools user=ai_tools"),
    Setting("db_password", None, "the PostgreSQL password", "...", flag=False),
    Setting("db_password_file", "store.password_file",
            "a file holding the PostgreSQL password (mode 600)", "/run/secrets/db"),
    Setting("worker_name", "workers.name",
            "this worker's name among those sharing a PostgreSQL store (default host:pid)",
            "worker-1"),
    Setting("lease_ttl", "workers.lease_ttl",
            "seconds a worker's leases last unrenewed (failover delay)", "15"),
    Setting("lease_interval", "workers.lease_interval",
            "seconds between a worker's lease renewals", "5"),
    # -- the world, the listeners, the scheduler, the log
    Setting("world", "world.file", "the world file seeding the sandbox world",
            "examples/world.toml"),
    Setting("http", "http.listen",
            "where the HTTP API listens: a port, host:port, an endpoint, or off", "8081"),
    Setting("http_token", "http.token",
            "the bearer token HTTP clients must send", "(16+ characters)", flag=False),
    Setting("http_token_file", "http.token_file", "a file holding that token",
            "/run/secrets/api-token"),
    Setting("manhole", "manhole.listen",
            "where the SSH console listens: a port, host:port, an endpoint, or off", "2222"),
    Setting("log_level", "service.log_level",
            "lowest level logged: debug, info, warn, error, critical", "warn"),
    Setting("tick_interval", "service.tick_interval",
            "seconds between the scheduler's wake-ups", "1.0"),
    Setting("stop_grace", "service.stop_grace",
            "seconds a stop waits for ticks in flight", "10"),
    Setting("max_concurrent", "service.max_concurrent", "ticks running at the same time",
            "100"),
    Setting("otlp_endpoint", "service.otlp_endpoint",
            "OpenTelemetry: the OTLP/HTTP collector traces and metrics go to (otel extra)",
            "http://127.0.0.1:4318"),
    Setting("min_tick_rate", "service.min_tick_rate",
            "the fastest tick rate an assistant may have (seconds)", "1.0"),
    Setting("max_assistants", "service.max_assistants",
            "assistants the service may have (all workers together)", "1000"),
    # -- process tuning, read from the environment only
    Setting("gc", None, "service: garbage-collector settings for many assistants",
            "service", flag=False),
    Setting("tiktoken_download", None,
            "1: let tiktoken download its encoding files", "1", flag=False),
)
"""Every deployment setting, in the order the docs list them."""

_BY_NAME = {s.name: s for s in SETTINGS}

RETIRED_VARIABLES: Mapping[str, str] = {
    "LLM_URL": "llm_url",
    "LLM_MODEL": "llm_model",
    "LLM_API_KEY": "llm_api_key",
}
"""Variables earlier versions read (``make demo``, ``make run``), with their setting now."""

TEST_VARIABLE_PREFIXES = ("AI_TOOLS_PG_", "AI_TOOLS_LLAMA_", "AI_TOOLS_TEST_")
"""Variables of the test suite (never read by the service): no warning for them."""


def setting(name: str) -> Setting:
    """The setting called ``name`` (KeyError naming the near one)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        close = near_name(name, _BY_NAME)
        hint = f" (did you mean {close!r}?)" if close else ""
        raise KeyError(f"no setting named {name!r}{hint}") from None


def near_name(word: str, names: Iterable[str]) -> str | None:
    """The name of ``names`` nearest to ``word`` (a typo's intended name), or None."""
    close = difflib.get_close_matches(word, list(names), n=1, cutoff=0.6)
    return close[0] if close else None


def environment_warnings(environ: Mapping[str, str],
                         also_known: Collection[str] = ()) -> list[str]:
    """One line per variable that looks like a setting but is not one.

    ``AI_TOOLS_LLM_MODLE`` (a typo) and ``LLM_URL`` (a name no longer read)
    are never used; saying so, with the near name, beats a service that
    silently runs on its defaults.  ``also_known`` are variables the
    configuration names itself (an ``api_key_env``, a ``token_env``).
    """
    known = {s.env for s in SETTINGS}
    lines = []
    for variable in sorted(environ):
        if variable in RETIRED_VARIABLES:
            replacement = setting(RETIRED_VARIABLES[variable]).env
            lines.append(f"{variable} is not read any more: set {replacement} instead")
        elif (variable.startswith(ENV_PREFIX) and variable not in known
              and variable not in also_known
              and not variable.startswith(TEST_VARIABLE_PREFIXES)):
            close = near_name(variable, known)
            hint = f" (did you mean {close}?)" if close else ""
            lines.append(f"{variable} is not an ai_tools setting{hint}; it is ignored")
    return lines


def markdown_table() -> str:
    """The table of ``docs/standalone.md``: every setting, its flag, variable and key."""
    rows = ["| setting | flag | environment variable | config file | example |",
            "| --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        flag = f"`--{s.option}`" if s.flag else "—"
        if s.section == "models.*":
            key = f"`{s.key}` of every `[models.NAME]`"
        else:
            key = f"`[{s.section}] {s.key}`" if s.file_key else "—"
        rows.append(f"| {s.help} | {flag} | `{s.env}` | {key} | `{s.example}` |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover - a documentation helper
    sys.stdout.write(markdown_table())
