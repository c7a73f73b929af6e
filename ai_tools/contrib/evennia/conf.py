"""The contrib's settings and their defaults.

Every setting is read from the game's ``server/conf/settings.py`` when it is
used (never at import time), so a game overrides only what it needs::

    AI_TOOLS_LLM = {"base_url": "http://127.0.0.1:11434/v1", "model": "llama3.1"}

This module imports neither Django nor Evennia at import time.  See the
contrib's README for what each setting means.
"""

from __future__ import annotations

import copy
from typing import Any

DEFAULTS: dict[str, Any] = {
    # The OpenAI-compatible model endpoint every assistant uses unless its own
    # config names another.  The API key is read from the environment variable
    # named by ``api_key_env`` and never stored in the database.
    "AI_TOOLS_LLM": {
        "base_url": "http://127.0.0.1:11434/v1",
        "model": "llama3.1",
        "api_key_env": "AI_TOOLS_API_KEY",
        "context_window": 8192,
        "timeout": 60.0,
    },
    # Defaults merged under each assistant's own config (``aiassistant/config``).
    "AI_TOOLS_ASSISTANT_DEFAULTS": {
        "persona": "You are a helpful character in this game world.",
        "tick_interval": 5.0,
        "sleep_tick_interval": 60.0,
        "max_iterations": 5,
        "tools": None,  # None: every registered tool
        "exit_tools": [],
        "hear": ["say", "whisper", "page"],
    },
    # Whether the server-services plugin starts the AssistantService.
    "AI_TOOLS_ENABLED": True,
    # How often the service looks for due assistants (seconds).
    "AI_TOOLS_SERVICE_TICK": 1.0,
    # How many assistants may run a loop at the same time.
    "AI_TOOLS_MAX_CONCURRENT": 4,
    # Typeclass ``aiassistant/create`` gives new assistant characters.
    "AI_TOOLS_CHARACTER_TYPECLASS": "ai_tools.contrib.evennia.hearing.AssistantCharacter",
    # Typeclass of the per-assistant state script.
    "AI_TOOLS_SCRIPT_TYPECLASS": "ai_tools.contrib.evennia.scripts.AssistantScript",
    # Most pending events kept per assistant (oldest dropped first).
    "AI_TOOLS_MAX_PENDING_EVENTS": 50,
    # Most history messages ``aiassistant/history`` shows by default.
    "AI_TOOLS_HISTORY_LINES": 10,
}
"""Every setting the contrib reads, with its default value."""


def ai_setting(name: str) -> Any:
    """The value of setting ``name``: the game's, else the default (a copy).

    Mappings are merged one level deep so a game can override one key of
    ``AI_TOOLS_LLM`` without repeating the others.
    """
    from django.conf import settings

    if name not in DEFAULTS:
        raise KeyError(f"unknown ai_tools setting {name!r}")
    default = copy.deepcopy(DEFAULTS[name])
    value = getattr(settings, name, None)
    if value is None:
        return default
    if isinstance(default, dict) and isinstance(value, dict):
        merged = dict(default)
        merged.update(copy.deepcopy(value))
        return merged
    return copy.deepcopy(value)
