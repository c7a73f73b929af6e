"""``POST /messages``: what a player character says, checked, then spoken through the world.

:func:`parse_message` checks the JSON body (422 names the field);
:func:`speak` delivers it through the world's own rules and maps the
world's refusals to answers.  The world calls the hearing listeners while it
delivers: the API then waits for the hearers' state to be durable
(``AssistantService.when_heard_saved``) before it answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
from twisted.internet import defer

from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.json_types import JSONMapping
from ai_tools.web.errors import ApiError, json_type

if TYPE_CHECKING:
    from ai_tools.world.sandbox import SandboxWorld

__all__ = ["MAX_TEXT", "MESSAGE_KINDS", "PlayerMessage", "parse_message", "speak"]

MESSAGE_KINDS = ("say", "pose", "whisper", "page", "channel")
"""What ``POST /messages`` may send (``kind``)."""

ROOM_KINDS = ("say", "pose")
DIRECT_KINDS = ("whisper", "page")
_FIELDS = frozenset({"character", "text", "kind", "target"})
MAX_TEXT = 4000
"""Longest ``text`` a posted message may have (characters)."""


@attrs.frozen
class PlayerMessage:
    """A checked ``POST /messages`` body."""

    character: str
    text: str
    kind: str = "say"
    target: str | None = None


def required_text(body: JSONMapping, key: str, longest: int) -> str:
    """``body[key]``, a non-empty string of at most ``longest`` characters (else 422)."""
    if key not in body or body[key] is None:
        raise ApiError(422, f"{key} is required", field=key)
    value = body[key]
    if not isinstance(value, str):
        raise ApiError(422, f"{key} must be a string, not {json_type(value)}", field=key)
    if not value.strip():
        raise ApiError(422, f"{key} must not be empty", field=key)
    if len(value) > longest:
        raise ApiError(422, f"{key} is too long ({len(value)} > {longest} characters)",
                       field=key)
    return value


def parse_message(body: JSONMapping) -> PlayerMessage:
    """The message a body describes; ApiError 422 naming the first wrong field."""
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise ApiError(422, f"unknown field {unknown[0]!r}; the fields are "
                       f"{', '.join(sorted(_FIELDS))}", field=unknown[0])
    character = required_text(body, "character", 200)
    text = required_text(body, "text", MAX_TEXT)
    kind = body.get("kind", "say")
    if kind not in MESSAGE_KINDS:
        raise ApiError(422, f"kind must be one of {', '.join(MESSAGE_KINDS)}, not "
                       f"{kind!r}", field="kind")
    target = body.get("target")
    if kind in ROOM_KINDS:
        if target is not None:
            raise ApiError(422, f"a {kind} has no target (whisper, page and channel do)",
                           field="target")
    else:
        target = required_text(body, "target", 200)
    return PlayerMessage(character, text, kind, target)


def _send(world: SandboxWorld, message: PlayerMessage) -> object:
    if message.kind in ROOM_KINDS:
        return world.message_location(message.character, message.text, kind=message.kind)
    target = message.target
    assert target is not None  # parse_message requires one for these kinds
    if message.kind in DIRECT_KINDS:
        return world.message_character(message.character, target, message.text,
                                       kind=message.kind)
    return world.channel_send(message.character, target, message.text)


@defer.inlineCallbacks
def speak(world: SandboxWorld, message: PlayerMessage) -> Any:
    """Deliver ``message`` through ``world``; fires with the character ids that heard it.

    The world's refusals become answers: 403 (no right to post there), 404
    (no such channel or page target), 422 (a whisper to someone elsewhere, a
    speaker in no room, a message the world finds malformed).
    """
    try:
        heard_by = yield defer.maybeDeferred(_send, world, message)
    except PermissionDenied as exc:
        raise ApiError(403, str(exc)) from None
    except NotFound as exc:
        if message.kind in ("channel", "page"):
            raise ApiError(404, str(exc), field="target") from None
        field = "target" if message.kind == "whisper" else None
        raise ApiError(422, str(exc), field=field) from None
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None
    return list(heard_by or ())
