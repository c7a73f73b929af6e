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

PLAYER_GATE = {"allowed_categories": ["safe_chain", "terminal", "async_required"]}
"""Tool gate of ticks prompted by players without builder rights: no DANGEROUS tools."""

DEFAULTS: dict[str, Any] = {
    # The OpenAI-compatible model every assistant uses (an ai_tools ModelProfile
    # table).  The API key is read from the environment variable named by
    # ``api_key_env`` (the same default variable as the standalone service) and
    # never stored in the database.
    "AI_TOOLS_LLM": {
        "base_url": "http://127.0.0.1:11434/v1",
        "model": "llama3.1",
        "api_key_env": "AI_TOOLS_LLM_API_KEY",
    },
    # More model profiles by name; an assistant picks one with config ``model``.
    "AI_TOOLS_LLMS": {},
    # AssistantConfig fields every assistant starts from; ``aiassistant/config``
    # overrides them per assistant.  ``name`` and ``character_id`` are set by
    # the contrib.
    "AI_TOOLS_ASSISTANT_DEFAULTS": {
        "persona": (
            "You are a character in a text game world. Answer the people who talk "
            "to you briefly and in character, using your tools."
        ),
        "tick_rate": 5.0,
        "sleep_tick_rate": 60.0,
        "execution_config": {"max_iterations": 5, "contexts": {"player": PLAYER_GATE}},
    },
    # Whether the server-services plugin starts the AssistantService.
    "AI_TOOLS_ENABLED": True,
    # How often the service looks for due assistants (seconds).
    "AI_TOOLS_SERVICE_TICK": 1.0,
    # How many assistants may run a loop at the same time.
    "AI_TOOLS_MAX_CONCURRENT": 10,
    # SQLite file for memories, journal, goals and the persistent tool cache
    # (relative paths are relative to the game directory); None keeps them in memory.
    "AI_TOOLS_RECORDS_DB": "server/ai_tools.db3",
    # Extra tool classes to register, as python paths.
    "AI_TOOLS_EXTRA_TOOLS": [],
    # MCP servers whose tools assistants may use: name -> the table of the standalone
    # service's [mcp.servers.NAME] (docs/mcp.md), e.g.
    # {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}}.
    # An assistant uses the servers its config names in ``mcp_servers``.
    "AI_TOOLS_MCP_SERVERS": {},
    # Message types an assistant's character hears as events.
    "AI_TOOLS_HEARD_KINDS": ["say", "whisper", "page"],
    # Tick context named by events from speakers without Builder rights (None: none).
    "AI_TOOLS_PLAYER_CONTEXT": "player",
    # Typeclass ``aiassistant/create`` gives new assistant characters.
    "AI_TOOLS_CHARACTER_TYPECLASS": "ai_tools.contrib.evennia.hearing.AssistantCharacter",
    # Typeclass of the per-assistant state script.
    "AI_TOOLS_SCRIPT_TYPECLASS": "ai_tools.contrib.evennia.scripts.AssistantScript",
    # Most events kept on a script while no service listens (oldest dropped first).
    "AI_TOOLS_MAX_PENDING_EVENTS": 50,
    # How many history messages ``aiassistant/history`` shows by default.
    "AI_TOOLS_HISTORY_LINES": 10,
    # Who may answer a tool call waiting for approval (``aiassistant/approve``,
    # ``/refuse``): an Evennia lock function string, checked against the caller.
    "AI_TOOLS_APPROVAL_LOCK": "perm(aiapprove) or perm(Admin)",
    # The game's tools as an MCP server (None: off): {"character": "#12", "port": 4010,
    # "token_env": "...", ...}; see ai_tools.contrib.evennia.mcp_server.
    "AI_TOOLS_MCP_SERVE": None,
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
