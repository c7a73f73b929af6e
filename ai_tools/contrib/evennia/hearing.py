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
from collections.abc import Container

import attrs
from evennia.objects.objects import DefaultCharacter
from twisted.logger import Logger

from ai_tools.contrib.evennia.conf import ai_setting
from ai_tools.contrib.evennia.kinds import dbref_of, is_object, kind_of
from ai_tools.contrib.evennia.listeners import LISTENERS, ListenerRegistry
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.world.messages import WorldMessage

__all__ = [
    "HEARD_KINDS",
    "LISTENERS",
    "AssistantCharacter",
    "AssistantCharacterMixin",
    "HeardMessage",
    "ListenerRegistry",
    "heard_message",
]

log = Logger()

HEARD_KINDS = ("say", "whisper", "page")
"""Message types a character hears as events by default."""

_SPEECH = re.compile(
    r"""^(?P<who>.+?)\s+(?:says|whispers|pages|whispers to you)[,:]?\s+"(?P<speech>.*)"\s*$""",
    re.DOTALL,
)
_PAGE = re.compile(r"^(?P<who>.+?)\s+pages(?: you)?:\s*(?P<speech>.*)$", re.DOTALL)
_ACCOUNT_PAGE = re.compile(r"^Account\s+(?P<who>.+?)\s+pages:\s*(?P<speech>.*)$", re.DOTALL)


def _plain(text: object) -> str:
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

    def to_event(self) -> JSONObject:
        """The pending-event dict (WorldMessage's, plus this class's extra fields)."""
        event = super().to_event()
        event["line"] = self.line or event["line"]
        event["from_is_builder"] = self.sender_is_builder
        event["from_kind"] = self.sender_kind
        if self.context:
            event["context"] = self.context
        return event


def _line_and_options(text: object) -> tuple[str, JSONMapping]:
    """The plain text of a ``msg()`` text argument and its options (``type``...)."""
    if isinstance(text, tuple | list):
        line = text[0] if text else ""
        options = text[1] if len(text) > 1 and isinstance(text[1], dict) else {}
    else:
        line, options = text, {}
    return _plain(line), options


def _kind_and_speech(line: str, options: JSONMapping) -> tuple[str | None, str, str]:
    """The message type, the words spoken and who the line says spoke them.

    The type is the one Evennia put in the text tuple, or ``page`` for an
    account page's ``Account X pages:`` header (which carries no type).
    """
    kind = options.get("type")
    match = None
    if kind is None:
        match = _ACCOUNT_PAGE.match(line)
        kind = "page" if match else None
    if match is None:
        match = _SPEECH.match(line) or (_PAGE.match(line) if kind == "page" else None)
    if match is None:
        return kind, line, ""
    return kind, match.group("speech").strip(), match.group("who").strip()


@attrs.frozen
class _Speaker:
    """What hearing needs to know about who spoke."""

    sender_id: str | None = None
    is_builder: bool = False
    kind: str = "object"


def _speaker_facts(speaker: object) -> _Speaker:
    """The speaker's object id (None for an account), rights and kind."""
    if speaker is None or getattr(speaker, "id", None) is None:
        return _Speaker()
    # Evennia's perm() lock function: the puppeting account's rights, unless quelled.
    is_builder = bool(
        hasattr(speaker, "locks")
        and speaker.locks.check_lockstring(speaker, "dummy:perm(Builder)")
    )
    if not is_object(speaker):
        return _Speaker(None, is_builder, "account")  # account ids are not object ids
    return _Speaker(dbref_of(speaker), is_builder, kind_of(speaker))


def heard_message(
    receiver: object,
    text: object,
    from_obj: object,
    kinds: Container[str | None] = HEARD_KINDS,
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
    line, options = _line_and_options(text)
    if not line:
        return None
    speaker = from_obj[0] if isinstance(from_obj, list | tuple) and from_obj else from_obj
    if speaker is not None and speaker == receiver:
        return None
    kind, speech, who = _kind_and_speech(line, options)
    if kind not in kinds:
        return None
    facts = _speaker_facts(speaker)
    name = getattr(speaker, "key", None) or who or "someone"
    location = getattr(receiver, "location", None)
    return HeardMessage(
        kind=kind,
        text=speech,
        sender_id=facts.sender_id,
        sender_key=name,
        location_id=dbref_of(location) if location is not None else None,
        target_id=dbref_of(receiver) if kind in ("whisper", "page") else None,
        timestamp=time.time(),
        sender=name,
        line=line,
        sender_is_builder=facts.is_builder,
        sender_kind=facts.kind,
        context=None if facts.is_builder else player_context,
    )


class AssistantCharacterMixin:
    """Mix into a character typeclass so what it hears reaches its assistant.

    ``at_msg_receive`` turns speech into an event (see :func:`heard_message`), gives
    it to the registered listeners, or queues it on the character's assistant
    script when none listens.  It always lets the message through to any
    session puppeting the character.
    """

    def at_msg_receive(self, text: object = None, from_obj: object = None,
                       **kwargs: object) -> bool:
        """Evennia hook: called by ``msg()`` before the message goes to sessions."""
        try:
            self.ai_hear(text, from_obj)
        except Exception:
            log.failure("hearing hook failed on #{id}", id=getattr(self, "id", "?"))
        return super().at_msg_receive(text=text, from_obj=from_obj, **kwargs)  # type: ignore[misc]

    def ai_hear(self, text: object, from_obj: object) -> HeardMessage | None:
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
