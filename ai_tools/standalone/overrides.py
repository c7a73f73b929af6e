"""Settings from the command line and the environment, laid over the config file.

The settings of :mod:`ai_tools.settings` can each be given as a flag, as an
``AI_TOOLS_…`` variable or in the config file; the flag wins over the
variable, the variable over the file, the file over the default.
:func:`apply_overrides` writes the values given outside the file into a copy
of the parsed file, at the setting's key, so the file's checks then apply to
them too; it records where each came from (``--http`` or ``AI_TOOLS_HTTP``)
so a message about a bad value names what the user typed.  Paths given
outside the file are relative to the working directory.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from ai_tools.errors import ConfigError
from ai_tools.numbers import is_number
from ai_tools.settings import SETTINGS, Setting, setting

__all__ = ["LAYERS", "Overlay", "Overrides", "apply_overrides"]

FLAG, ENVIRONMENT = 2, 1
LAYERS = {FLAG: "command line", ENVIRONMENT: "environment"}
"""The layers above the file, highest first wins."""
_OFF = frozenset({"off", "none", "no", "false", "disabled"})
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_MEMORY = frozenset({"memory", ":memory:"})
_TOKEN_KEYS = ("token", "token_env", "token_file")


@attrs.frozen
class Given:
    """A setting's value from outside the file: the text, its label, its layer."""

    setting: Setting
    text: str
    label: str
    """``--http`` or ``AI_TOOLS_HTTP``: what the user typed, for messages."""
    layer: int


@attrs.frozen
class Overrides:
    """Setting values from outside the config file.

    ``flags`` maps setting names (``"http"``) to command-line values;
    ``environ`` is the environment the ``AI_TOOLS_…`` variables are read from
    (``os.environ`` for twistd and ``make``; empty by default, so a program
    loading a config reads no variable it did not hand over).
    """

    flags: Mapping[str, str] = attrs.field(factory=dict)
    environ: Mapping[str, str] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        for name in self.flags:
            setting(name)  # KeyError for a name that is not a setting

    def given(self, name: str) -> Given | None:
        """The value of setting ``name`` from the highest layer that sets it, or None."""
        entry = setting(name)
        value = self.flags.get(name) if entry.flag else None
        if value is not None:
            return Given(entry, value, f"--{entry.option}", FLAG)
        value = self.environ.get(entry.env)
        if value is not None and value.strip():
            return Given(entry, value, entry.env, ENVIRONMENT)
        return None


@attrs.define
class Overlay:
    """The file's document with the outside values in place, and where they came from."""

    data: dict[str, object]
    origins: dict[tuple[str, str], str] = attrs.field(factory=dict)
    """``(table, key)`` → the label of the flag or variable that set it."""
    db_password: str | None = attrs.field(default=None, repr=False)
    """The PostgreSQL password, when given outside the file."""
    db_password_file: Given | None = None

    def put(self, table: str, key: str, value: object, label: str) -> None:
        """Set ``table.key`` (a table of the document, created when missing)."""
        target = self.table(table)
        if target is not None:
            target[key] = value
            self.origins[(table, key)] = label

    def table(self, name: str) -> dict[str, object] | None:
        """The document's table ``name`` (None when the file holds something else there)."""
        value = self.data.setdefault(name, {})
        return value if isinstance(value, dict) else None


def _text(given: Given) -> str:
    text = given.text.strip()
    if not text:
        raise ConfigError(f"{given.label} must not be empty")
    return text


def _integer(given: Given) -> int:
    try:
        return int(_text(given))
    except ValueError:
        raise ConfigError(f"{given.label} must be an integer, not {given.text!r}") from None


def _number(given: Given) -> float:
    try:
        number = float(_text(given))
    except ValueError:
        raise ConfigError(f"{given.label} must be a number, not {given.text!r}") from None
    if not is_number(number):  # float() reads "nan" and "inf" too
        raise ConfigError(f"{given.label} must be a finite number, not {given.text!r}")
    return number


def _boolean(given: Given) -> bool:
    text = _text(given).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{given.label} must be true or false, not {given.text!r}")


def _path(given: Given) -> str:
    return os.path.abspath(os.path.expanduser(_text(given)))


_VALUES: dict[str, Callable[[Given], object]] = {
    "llm_context_window": _integer, "llm_max_tokens": _integer, "max_concurrent": _integer,
    "tick_interval": _number, "stop_grace": _number, "min_tick_rate": _number,
    "max_assistants": _integer,
    "lease_ttl": _number, "lease_interval": _number,
    "llm_stream": _boolean,
    "world": _path, "http_token_file": _path, "db_password_file": _path,
}
"""How a setting's text becomes the file's value (default: the stripped text)."""


def apply_overrides(data: Mapping[str, object], overrides: Overrides) -> Overlay:
    """The file's document with every setting given outside it written in (see the module)."""
    overlay = Overlay(copy.deepcopy(dict(data)))
    _apply_store(overlay, overrides)
    _apply_models(overlay, overrides)
    for entry in SETTINGS:
        given = overrides.given(entry.name)
        if given is None or entry.section in (None, "store", "models.*"):
            continue
        value = _VALUES.get(entry.name, _text)(given)
        assert entry.section is not None and entry.key is not None
        if entry.section == "http" and entry.key in _TOKEN_KEYS:
            _drop(overlay, "http", [k for k in _TOKEN_KEYS if k != entry.key])
        overlay.put(entry.section, entry.key, value, given.label)
        if entry.name in ("http", "manhole"):  # naming a listener turns it on (or off)
            overlay.put(entry.section, "enabled", _text(given).lower() not in _OFF, given.label)
    return overlay


def _drop(overlay: Overlay, table: str, keys: list[str]) -> None:
    target = overlay.table(table)
    for key in keys:
        if target is not None:
            target.pop(key, None)


def _highest(overrides: Overrides, *names: str) -> Given | None:
    """The value of whichever of ``names`` is set in the highest layer (one of them)."""
    found = [g for g in (overrides.given(n) for n in names) if g is not None]
    if not found:
        return None
    top = max(g.layer for g in found)
    winners = [g for g in found if g.layer == top]
    if len(winners) > 1:
        raise ConfigError(f"give only one of {' and '.join(g.label for g in winners)}")
    return winners[0]


def _apply_store(overlay: Overlay, overrides: Overrides) -> None:
    """``db`` (a SQLite file or memory) or ``db_dsn`` (PostgreSQL), and its password."""
    where = _highest(overrides, "db", "db_dsn")
    if where is not None and where.setting.name == "db":
        text = _text(where)
        _drop(overlay, "store", ["dsn", "path"])
        if text.lower() in _MEMORY:
            overlay.put("store", "backend", "memory", where.label)
        else:
            overlay.put("store", "backend", "sqlite", where.label)
            overlay.put("store", "path", _existing_directory(where), where.label)
    elif where is not None:
        _drop(overlay, "store", ["path"])
        overlay.put("store", "backend", "postgres", where.label)
        overlay.put("store", "dsn", _text(where), where.label)
    password = _highest(overrides, "db_password", "db_password_file")
    if password is not None and password.setting.name == "db_password":
        overlay.db_password = password.text
        _drop(overlay, "store", ["password_file"])
    elif password is not None:
        overlay.put("store", "password_file", _path(password), password.label)


def _existing_directory(given: Given) -> str:
    """A database path given outside the file: its directory must exist.

    A mistyped directory would otherwise start a new, empty world; the
    file's path (and the default) are created with their directory.
    """
    path = Path(_path(given))
    if not path.parent.is_dir():
        raise ConfigError(f"{given.label}: the directory {path.parent} does not exist "
                          f"(create it, or check the path: {given.text})")
    return os.fspath(path)


_PROFILE_SETTINGS = ("llm_url", "llm_model", "llm_api_key_env", "llm_context_window",
                     "llm_stream", "llm_tool_calling", "llm_tool_choice", "llm_max_tokens")
_REAL_SERVER_ONLY = ("llm_model", "llm_api_key_env")


def _apply_models(overlay: Overlay, overrides: Overrides) -> None:
    """The ``llm_*`` settings, into every ``[models.NAME]`` table."""
    given = {n: g for n in _PROFILE_SETTINGS if (g := overrides.given(n)) is not None}
    if not given:
        return
    models = overlay.table("models")
    if models is None:
        return  # the file's own mistake, reported by the parser
    if not models and "llm_url" in given:
        models["default"] = {}
    for name, profile in models.items():
        if isinstance(profile, dict):
            _apply_profile(overlay, f"models.{name}", profile, given)


def _apply_profile(overlay: Overlay, where: str, profile: dict[str, object],
                   given: Mapping[str, Given]) -> None:
    scripted = "scenario" in profile
    url = given.get("llm_url")
    if url is not None and scripted:  # a model server instead of the stand-in
        for key in ("scenario", "port", "model"):
            profile.pop(key, None)
    elif url is None and scripted:
        for name in _REAL_SERVER_ONLY:
            if name in given:
                raise ConfigError(f"{given[name].label} is set, but {where} is the scripted "
                                  f"stand-in model: set {setting('llm_url').env} (or "
                                  f"--llm-url) too, the model server's address")
    for name, value in given.items():
        entry = value.setting
        assert entry.key is not None
        profile[entry.key] = _VALUES.get(name, _text)(value)
        overlay.origins[(where, entry.key)] = value.label
