"""Hearing: what an assistant's character is told becomes the assistant's input.

Evennia delivers everything a character perceives through ``msg()``, which
calls the ``at_msg_receive`` hook first.  :class:`AssistantCharacterMixin`
overrides that hook: a say in the character's room, a whisper or a page
addressed to it is turned into a *heard* event::

    {"type": "say", "from": "Bob", "from_id": "#7", "text": "hello",
     "line": 'Bob says, "hello"', "location": "#2"}

and handed to the listeners registered for the character (the service
registers one per assistant through ``EvenniaWorld.subscribe``).  When no
listener is registered — the service is not running yet, or is reloading —
the event is queued on the character's ``AssistantScript`` instead, so nothing
said to an assistant is lost.  Players talk to an assistant the normal way:
``say``, ``whisper``, and (for an assistant another assistant pages) ``page``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from evennia.objects.objects import DefaultCharacter
from twisted.logger import Logger

log = Logger()

HEARD_KINDS = ("say", "whisper", "page")
"""Message types a character hears as events by default."""

_SPEECH = re.compile(
    r"""^(?P<who>.+?)\s+(?:says|whispers|pages|whispers to you)[,:]?\s+"(?P<speech>.*)"\s*$""",
    re.DOTALL,
)
_PAGE = re.compile(r"^(?P<who>.+?)\s+pages(?: you)?:\s*(?P<speech>.*)$", re.DOTALL)
_ACCOUNT_PAGE = re.compile(r"^Account\s+(?P<who>.+?)\s+pages:\s*(?P<speech>.*)$", re.DOTALL)


class ListenerRegistry:
    """Listeners per character id; delivery never lets a listener's error escape."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Callable[[Any], Any]]] = {}

    def add(self, char_id: str, listener: Callable[[Any], Any]) -> Callable[[], None]:
        """Register ``listener`` for ``char_id``; returns the function that removes it."""
        self._listeners.setdefault(char_id, []).append(listener)

        def unsubscribe() -> None:
            listeners = self._listeners.get(char_id, [])
            if listener in listeners:
                listeners.remove(listener)
            if not listeners:
                self._listeners.pop(char_id, None)

        return unsubscribe

    def has_listeners(self, char_id: str) -> bool:
        """Whether anything listens to ``char_id``."""
        return bool(self._listeners.get(char_id))

    def deliver(self, char_id: str, message: Any) -> int:
        """Call every listener of ``char_id`` with ``message``; returns how many were called."""
        delivered = 0
        for listener in list(self._listeners.get(char_id, ())):
            try:
                listener(message)
            except Exception:
                log.failure("listener of {char} failed on a heard message", char=char_id)
            delivered += 1
        return delivered

    def clear(self) -> None:
        """Forget every listener (service shutdown, tests)."""
        self._listeners.clear()


LISTENERS = ListenerRegistry()
"""The process-wide registry ``EvenniaWorld.subscribe`` adds to."""


def _plain(text: Any) -> str:
    from evennia.utils.ansi import strip_ansi

    return strip_ansi(str(text)).strip()


def heard_event(receiver: Any, text: Any, from_obj: Any, kinds: Any = HEARD_KINDS) -> dict | None:
    """The event ``receiver`` hears in a ``msg()`` call, or None if it is not speech.

    Only speech of another object counts: a say, a whisper or a page (the type
    Evennia puts in the text tuple, or an account page's ``Account X pages:``
    header).  The speaker's own echo, command output and room descriptions are
    not events.
    """
    if text is None:
        return None
    if isinstance(text, tuple | list):
        line = text[0] if text else ""
        options = text[1] if len(text) > 1 and isinstance(text[1], dict) else {}
    else:
        line, options = text, {}
    line = _plain(line)
    if not line:
        return None
    speaker = from_obj[0] if isinstance(from_obj, list | tuple) and from_obj else from_obj
    if speaker is not None and speaker == receiver:
        return None
    kind = options.get("type")
    match = None
    if kind is None:
        account_page = _ACCOUNT_PAGE.match(line)
        if account_page:
            kind, match = "page", account_page
    if kind not in kinds:
        return None
    if match is None:
        match = _SPEECH.match(line) or (_PAGE.match(line) if kind == "page" else None)
    speech = match.group("speech").strip() if match else line
    who = match.group("who").strip() if match else ""
    event: dict[str, Any] = {
        "type": kind,
        "from": getattr(speaker, "key", None) or who or "someone",
        "text": speech,
        "line": line,
        "heard_at": time.time(),
    }
    if speaker is not None and getattr(speaker, "id", None) is not None:
        event["from_id"] = f"#{speaker.id}"
        from evennia.utils.utils import inherits_from

        from ai_tools.contrib.evennia.world import EvenniaWorld

        # Evennia's perm() lock function: the puppeting account's rights, unless quelled.
        event["from_is_builder"] = bool(
            hasattr(speaker, "locks")
            and speaker.locks.check_lockstring(speaker, "dummy:perm(Builder)")
        )
        is_object = inherits_from(speaker, "evennia.objects.objects.DefaultObject")
        event["from_kind"] = EvenniaWorld.kind_of(speaker) if is_object else "account"
    location = getattr(receiver, "location", None)
    if location is not None:
        event["location"] = f"#{location.id}"
    return event


class AssistantCharacterMixin:
    """Mix into a character typeclass so what it hears reaches its assistant.

    ``at_msg_receive`` turns speech into an event (see :func:`heard_event`), gives
    it to the registered listeners, or queues it on the character's assistant
    script when none listens.  It always lets the message through to any
    session puppeting the character.
    """

    def at_msg_receive(self, text: Any = None, from_obj: Any = None, **kwargs: Any) -> Any:
        """Evennia hook: called by ``msg()`` before the message goes to sessions."""
        try:
            self.ai_hear(text, from_obj)
        except Exception:
            log.failure("hearing hook failed on #{id}", id=getattr(self, "id", "?"))
        return super().at_msg_receive(text=text, from_obj=from_obj, **kwargs)  # type: ignore[misc]

    def ai_hear(self, text: Any, from_obj: Any) -> dict | None:
        """Turn one message into an event and deliver it; returns the event or None."""
        from ai_tools.contrib.evennia.lookup import get_assistant_script_for_character

        script = get_assistant_script_for_character(self)
        kinds = HEARD_KINDS
        if script is not None:
            kinds = tuple(script.assistant_config().get("hear") or HEARD_KINDS)
        event = heard_event(self, text, from_obj, kinds)
        if event is None:
            return None
        char_id = f"#{self.id}"  # type: ignore[attr-defined]
        if LISTENERS.has_listeners(char_id):
            LISTENERS.deliver(char_id, event)
        elif script is not None:
            script.queue_event(event)
        return event


class AssistantCharacter(AssistantCharacterMixin, DefaultCharacter):
    """A character an assistant speaks and acts through (the default NPC typeclass)."""
