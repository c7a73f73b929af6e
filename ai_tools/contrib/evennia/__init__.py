"""ai_tools for Evennia: LLM-driven assistant NPCs that act through tools.

Import this package only inside an Evennia game (it needs Django set up); the
ai_tools core never imports it.  See README.md in this folder for installation
and usage.
"""

from ai_tools.contrib.evennia.commands import AIAssistantCmdSet, CmdAIAssistant
from ai_tools.contrib.evennia.hearing import (
    LISTENERS,
    AssistantCharacter,
    AssistantCharacterMixin,
    HeardMessage,
)
from ai_tools.contrib.evennia.lookup import (
    all_assistant_scripts,
    get_assistant_script,
    get_assistant_script_for_character,
)
from ai_tools.contrib.evennia.scripts import AssistantScript
from ai_tools.contrib.evennia.service import (
    EvenniaAssistantHost,
    build_service,
    get_host,
    start_plugin_services,
)
from ai_tools.contrib.evennia.store import ScriptStore
from ai_tools.contrib.evennia.world import EvenniaWorld

__all__ = [
    "LISTENERS",
    "AIAssistantCmdSet",
    "AssistantCharacter",
    "AssistantCharacterMixin",
    "AssistantScript",
    "CmdAIAssistant",
    "EvenniaAssistantHost",
    "EvenniaWorld",
    "HeardMessage",
    "ScriptStore",
    "all_assistant_scripts",
    "build_service",
    "get_assistant_script",
    "get_assistant_script_for_character",
    "get_host",
    "start_plugin_services",
]
