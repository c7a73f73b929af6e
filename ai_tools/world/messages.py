"""What characters hear: one immutable :class:`WorldMessage` per thing said or shown."""

from __future__ import annotations

import json

import attrs

from ai_tools.json_types import JSONObject

MESSAGE_KINDS = frozenset({"say", "pose", "emit", "whisper", "page", "channel", "system"})
"""Every kind of message the sandbox world delivers."""

ROOM_KINDS = ("say", "pose", "emit")
"""Kinds heard by everyone in the speaker's room."""

DIRECT_KINDS = ("whisper", "page")
"""Kinds addressed to one character."""


def _check_kind(_instance: object, _attribute: object, value: str) -> None:
    if value not in MESSAGE_KINDS:
        raise ValueError(f"unknown message kind {value!r}; one of {sorted(MESSAGE_KINDS)}")


@attrs.frozen
class WorldMessage:
    """A message as heard: who said what, where, to whom, and when.

    ``location_id`` is the room a room message was spoken in (or the sender's
    room for direct messages), ``target_id`` the addressee of a whisper or page,
    ``channel`` the channel key of a channel post.  ``seq`` numbers the world's
    messages in order (0 when built outside a world), so readers of a log can
    ask for what came after the last one they saw.
    """

    kind: str = attrs.field(validator=_check_kind)
    text: str
    sender_id: str | None
    sender_key: str
    location_id: str | None = None
    target_id: str | None = None
    channel: str | None = None
    timestamp: float = 0.0
    seq: int = 0

    def render(self) -> str:
        """The line a player would read, e.g. ``Ada says, "hello"``."""
        who = self.sender_key
        if self.kind == "say":
            return f'{who} says, "{self.text}"'
        if self.kind == "pose":
            return f"{who} {self.text}"
        if self.kind == "whisper":
            return f'{who} whispers to you, "{self.text}"'
        if self.kind == "page":
            return f"{who} pages: {self.text}"
        if self.kind == "channel":
            return f"[{self.channel}] {who}: {self.text}"
        return self.text  # emit, system

    def to_dict(self) -> JSONObject:
        """All fields plus the rendered ``line``, JSON-serialisable (for the HTTP API, logs)."""
        data = attrs.asdict(self)
        data["line"] = self.render()
        return data

    def to_event(self) -> JSONObject:
        """The pending-event dict an assistant receives for this message.

        Same shape as the Evennia adapter's heard events (``type``, ``from``,
        ``from_id``, ``text``, ``line``, ``location``) plus ``target``,
        ``channel``, ``timestamp`` and ``seq``.
        """
        return {
            "type": self.kind,
            "from": self.sender_key,
            "from_id": self.sender_id,
            "text": self.text,
            "line": self.render(),
            "location": self.location_id,
            "target": self.target_id,
            "channel": self.channel,
            "timestamp": self.timestamp,
            "seq": self.seq,
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict())
