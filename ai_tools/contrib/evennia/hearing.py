"""Hearing: what an assistant's character is told becomes the assistant's input.

Evennia delivers everything a character perceives through ``msg()``, which
calls the ``at_msg_receive`` hook first.  :class:`AssistantCharacterMixin`
overrides that hook: a say in the character's room, a whisper or a page
addressed to it becomes a :class:`HeardMessage` (a ``WorldMessage``) handed to
the listeners registered for the character — the AssistantService registers
one per assistant through ``EvenniaWorld.subscribe`` and queues the message as
a pending event.  When no listener is registered (the service is not running
yet, or is reloading) the event is queued on the character's
``AssistantScript`` instead, so nothing said to an assistant is lost.

Players talk to an assistant the normal way: ``say``, ``whisper``, and (for an
assistant another assistant pages) ``page``.  A message from a speaker without
Builder rights (Evennia's own ``perm(Builder)`` check) names the tick context
``AI_TOOLS_PLAYER_CONTEXT``, whose tool gate by default leaves out DANGEROUS
tools: a player cannot talk an assistant into changing the world.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import attrs
from evennia.objects.objects import DefaultCharacter
from twisted.logger import Logger

from ai_tools.contrib.evennia.conf import ai_setting
from ai_tools.world.messages import WorldMessage

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


@attrs.frozen
class HeardMessage(WorldMessage):
    """A :class:`~ai_tools.world.messages.WorldMessage` heard in Evennia, with more to say.

    ``sender`` repeats the speaker's name (the key prompts read), ``line`` is
    what a player's client showed, ``sender_is_builder`` is Evennia's own
    ``perm(Builder)`` verdict on the speaker, and ``context`` names the tick
    context of an event from a speaker without builder rights (see
    ``AI_TOOLS_PLAYER_CONTEXT``), so the assistant's tool gate for that context
    applies to the whole tick.
    """

    sender: str = ""
    line: str = ""
    sender_is_builder: bool = False
    sender_kind: str = "object"
    context: str | None = None

    def to_event(self) -> dict[str, Any]:
        """The pending-event dict (WorldMessage's, plus this class's extra fields)."""
        event = super().to_event()
        event["line"] = self.line or event["line"]
        event["from_is_builder"] = self.sender_is_builder
        event["from_kind"] = self.sender_kind
        if self.context:
            event["context"] = self.context
        return event


def heard_message(
    receiver: Any,
    text: Any,
    from_obj: Any,
    kinds: Any = HEARD_KINDS,
    player_context: str | None = "player",
) -> HeardMessage | None:
    """What ``receiver`` hears in a ``msg()`` call, or None if it is not speech.

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
    sender_id = None
    is_builder = False
    sender_kind = "object"
    if speaker is not None and getattr(speaker, "id", None) is not None:
        from evennia.utils.utils import inherits_from

        from ai_tools.contrib.evennia.world import EvenniaWorld

        sender_id = f"#{speaker.id}"
        # Evennia's perm() lock function: the puppeting account's rights, unless quelled.
        is_builder = bool(
            hasattr(speaker, "locks")
            and speaker.locks.check_lockstring(speaker, "dummy:perm(Builder)")
        )
        is_object = inherits_from(speaker, "evennia.objects.objects.DefaultObject")
        sender_kind = EvenniaWorld.kind_of(speaker) if is_object else "account"
        if not is_object:
            sender_id = None  # account ids are not object ids
    name = getattr(speaker, "key", None) or who or "someone"
    location = getattr(receiver, "location", None)
    return HeardMessage(
        kind=kind,
        text=speech,
        sender_id=sender_id,
        sender_key=name,
        location_id=f"#{location.id}" if location is not None else None,
        target_id=f"#{receiver.id}" if kind in ("whisper", "page") else None,
        timestamp=time.time(),
        sender=name,
        line=line,
        sender_is_builder=is_builder,
        sender_kind=sender_kind,
        context=None if is_builder else player_context,
    )


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

    def ai_hear(self, text: Any, from_obj: Any) -> HeardMessage | None:
        """Turn one message into a :class:`HeardMessage` and deliver it (or queue it)."""
        from ai_tools.contrib.evennia.lookup import get_assistant_script_for_character

        message = heard_message(
            self,
            text,
            from_obj,
            tuple(ai_setting("AI_TOOLS_HEARD_KINDS")),
            ai_setting("AI_TOOLS_PLAYER_CONTEXT"),
        )
        if message is None:
            return None
        char_id = f"#{self.id}"  # type: ignore[attr-defined]
        if LISTENERS.has_listeners(char_id):
            LISTENERS.deliver(char_id, message)
        else:
            script = get_assistant_script_for_character(self)
            if script is not None:
                script.queue_event(message.to_event())
        return message


class AssistantCharacter(AssistantCharacterMixin, DefaultCharacter):
    """A character an assistant speaks and acts through (the default NPC typeclass)."""
