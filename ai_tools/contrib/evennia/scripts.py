"""AssistantScript: where one assistant's state lives inside an Evennia game.

One ``AssistantScript`` is attached to each assistant's character.  Its
persistent attributes (``db``) survive ``evennia reload`` and restarts:

* ``db.assistant_key`` — the assistant's name (unique in the game);
* ``db.enabled`` — whether the service ticks it;
* ``db.config`` — its own settings, merged over ``AI_TOOLS_ASSISTANT_DEFAULTS``;
* ``db.state`` — the engine's state dict (history, pending events, mode,
  counters) as JSON text, written after every loop iteration by the service's
  store (:mod:`.store`);
* ``db.inbox`` — events heard while no service was listening.

In-memory attributes (``ndb``) hold what must not be saved (the live runtime).
The script is tagged ``ai_assistant:<key>`` in category ``system`` so tools
and commands find it from the character (see :mod:`.lookup`).  It has no
timer of its own: a Script's ``at_repeat`` ignores Deferreds, so ticking is
the AssistantService's job.
"""

from __future__ import annotations

import copy
import json

from evennia.scripts.scripts import DefaultScript

from ai_tools.contrib.evennia.conf import ai_setting
from ai_tools.contrib.evennia.game_objects import GameObject
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.store.serialization import encode_json

TAG_CATEGORY = "system"
"""Category of the lookup tag."""

SCRIPT_KEY = "ai_assistant"
"""Key of every assistant script (several characters may each have one)."""


def assistant_tag(assistant_key: str) -> str:
    """The lookup tag of an assistant: ``ai_assistant:<key>``."""
    return f"ai_assistant:{assistant_key}"


class AssistantScript(DefaultScript):
    """Persistent state of one assistant, attached to its character."""

    def at_script_creation(self) -> None:
        """Evennia hook: first creation only."""
        self.key = SCRIPT_KEY
        self.desc = "AI assistant state"
        self.persistent = True
        self.interval = 0
        self.db.assistant_key = None
        self.db.enabled = False
        self.db.config = {}
        self.db.state = None
        self.db.inbox = []

    # -- identity ------------------------------------------------------

    @property
    def assistant_key(self) -> str | None:
        """The assistant's name."""
        return self.db.assistant_key

    def bind(self, assistant_key: str) -> None:
        """Name the assistant and tag the script (and character) for lookups."""
        old = self.db.assistant_key
        if old and old != assistant_key:
            self.tags.remove(assistant_tag(old), category=TAG_CATEGORY)
        self.db.assistant_key = assistant_key
        self.tags.add(assistant_tag(assistant_key), category=TAG_CATEGORY)
        if self.obj is not None:
            self.obj.db.assistant_key = assistant_key
            self.obj.db.assistant_script_dbref = self.dbref
            self.db.character_dbref = self.obj.dbref

    @property
    def character(self) -> GameObject | None:
        """The character the assistant acts through (the object the script is on)."""
        return self.obj

    # -- config --------------------------------------------------------

    def assistant_config(self) -> JSONObject:
        """The assistant's ``AssistantConfig`` as a mapping.

        ``AI_TOOLS_ASSISTANT_DEFAULTS`` updated by ``db.config``, with the name,
        the character and the enabled flag this script holds.
        """
        config = ai_setting("AI_TOOLS_ASSISTANT_DEFAULTS")
        config.update(copy.deepcopy(dict(self.db.config or {})))
        config["name"] = self.assistant_key
        config["character_id"] = self.obj.dbref if self.obj is not None else None
        config["enabled"] = bool(self.db.enabled)
        return config

    def set_config(self, name: str, value: object) -> None:
        """Set one key of the assistant's own config (None removes it)."""
        config = dict(self.db.config or {})
        if value is None:
            config.pop(name, None)
        else:
            config[name] = value
        self.db.config = config

    # -- events --------------------------------------------------------

    def queue_event(self, event: JSONMapping) -> None:
        """Keep an event heard while no service listens (oldest dropped past the cap)."""
        inbox = list(self.db.inbox or [])
        inbox.append(dict(event))
        cap = int(ai_setting("AI_TOOLS_MAX_PENDING_EVENTS"))
        self.db.inbox = inbox[-cap:]

    def drain_inbox(self) -> list[JSONObject]:
        """Take and clear the events heard while no service listened."""
        inbox = [dict(e) for e in (self.db.inbox or [])]
        self.db.inbox = []
        return inbox

    # -- state ---------------------------------------------------------

    def load_state(self) -> JSONObject | None:
        """The engine's saved state dict (a fresh copy), or None."""
        encoded = self.db.state
        if not encoded:
            return None
        return dict(json.loads(encoded))

    def save_state(self, state: JSONMapping) -> None:
        """Replace the engine's saved state dict (kept as JSON text: one cheap write)."""
        self.db.state = encode_json(dict(state), "assistant state")

    def clear_state(self) -> bool:
        """Forget the saved state; True if there was one."""
        had = bool(self.db.state)
        self.db.state = None
        return had

    def history(self) -> list[JSONObject]:
        """The conversation history saved in the state (chat-completion messages)."""
        state = self.load_state() or {}
        return [dict(m) for m in state.get("history") or ()]

    def pending_events(self) -> list[JSONObject]:
        """Events not yet handled: those in the saved state, then the inbox."""
        state = self.load_state() or {}
        saved = [dict(e) for e in state.get("pending_events") or ()]
        return saved + [dict(e) for e in (self.db.inbox or [])]

    def summary(self) -> JSONObject:
        """What ``aiassistant/status`` shows when the service is not running."""
        state = self.load_state() or {}
        return {
            "key": self.assistant_key,
            "character": self.obj.key if self.obj is not None else None,
            "character_id": self.obj.dbref if self.obj is not None else None,
            "enabled": bool(self.db.enabled),
            "mode": state.get("mode", "awake"),
            "history_length": len(state.get("history") or ()),
            "pending_events": len(self.pending_events()),
            "last_tick": state.get("last_tick"),
            "counters": dict(state.get("counters") or {}),
        }
