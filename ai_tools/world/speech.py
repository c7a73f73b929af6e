"""Who hears what is said in a sandbox world: rooms, whispers and pages, channels.

One part of :class:`~ai_tools.world.sandbox.SandboxWorld` (which composes it as
``world.speech``): it checks a message against the rules (kinds, rights, who is
where), works out who hears it, builds the numbered
:class:`~ai_tools.world.messages.WorldMessage` and hands it to ``deliver`` — the
world's, which makes the receivers hear it (and keeps it in the store's heard
log), or the shared world's, which commits it first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.world.channels import Channels
from ai_tools.world.messages import DIRECT_KINDS, ROOM_KINDS, WorldMessage
from ai_tools.world.model import WorldObject
from ai_tools.world.objects import WorldObjects
from ai_tools.world.permissions import BUILDER, holds

Deliver = Callable[[WorldMessage, list[str]], None]
"""Makes ``receivers`` hear a message said in the world."""


@attrs.define(eq=False)
class Speech:
    """The world's messages: checked, addressed, numbered (``number``), stamped
    (``now``) and handed to ``deliver``."""

    objects: WorldObjects
    channels: Channels
    number: Callable[[], int]
    now: Callable[[], float]
    deliver: Deliver

    def say(self, kind: str, text: str, sender: WorldObject, receivers: list[str], *,
            location_id: str | None = None, target_id: str | None = None,
            channel: str | None = None) -> None:
        """Number ``text`` said by ``sender`` and deliver it to ``receivers``."""
        message = WorldMessage(
            kind=kind, text=text, sender_id=sender.id, sender_key=sender.key,
            location_id=location_id, target_id=target_id, channel=channel,
            timestamp=self.now(), seq=self.number(),
        )
        self.deliver(message, receivers)

    def to_room(self, char_id: str, text: str, kind: str = "say",
                exclude: Iterable[str] = ()) -> list[str]:
        """Say, pose or emit (Builder) in the character's room; returns who heard it
        (everyone there but the speaker and ``exclude``)."""
        if kind not in ROOM_KINDS:
            raise ValueError(f"unknown message kind {kind!r} (say, pose or emit)")
        char = self.objects.character(char_id)
        room = self.objects.room_of(char)
        if kind == "emit" and not holds(char.permissions, BUILDER):
            raise PermissionDenied(f"{char.key} may not emit: needs {BUILDER} rights")
        skip = set(exclude)
        hearers = [
            o.id
            for o in self.objects.inside(room.id)
            if o.kind == "character" and o.id != char.id and o.id not in skip
        ]
        self.say(kind, str(text), char, hearers, location_id=room.id)
        return hearers

    def to_character(self, char_id: str, target_id: str, text: str,
                     kind: str = "whisper") -> list[str]:
        """Whisper (same room) or page (anywhere) to one character; returns ``[target_id]``."""
        if kind not in DIRECT_KINDS:
            raise ValueError(f"unknown message kind {kind!r} (whisper or page)")
        char = self.objects.character(char_id)
        target = self.objects.character(target_id)
        if target.id == char.id:
            raise ValueError(f"{char.key} cannot {kind} to itself")
        if kind == "whisper" and (target.location is None or target.location != char.location):
            raise NotFound(f"{target.key} is not here to whisper to")
        self.say(kind, str(text), char, [target.id], location_id=char.location,
                 target_id=target.id)
        return [target.id]

    def on_channel(self, char_id: str, channel: str, text: str) -> list[str]:
        """Post on a channel; returns the subscribers who received it."""
        char = self.objects.character(char_id)
        chan = self.channels.named(channel)
        receivers = self.channels.receivers(char, chan, self.objects.__contains__)
        self.say("channel", str(text), char, receivers, channel=chan.key)
        return receivers

    def announce(self, char: WorldObject, room_id: str | None, text: str) -> None:
        """The others in ``room_id`` hear ``text`` about ``char`` (a ``system`` message)."""
        hearers = [o.id for o in self.objects.inside(room_id)
                   if o.kind == "character" and o.id != char.id]
        self.say("system", text, char, hearers, location_id=room_id)
