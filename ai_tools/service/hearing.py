"""What assistants hear in the world becomes their pending events.

:class:`Hearing` subscribes an assistant's character in the world
(``IWorld.subscribe``) with a listener bound to that assistant: a message the
character hears goes straight to :meth:`~ai_tools.service.assistant.Assistant.queue_event`,
which queues it, brings the assistant's next tick forward (awake, or addressed to
it) and asks for its state to be saved.  :meth:`Hearing.when_saved` is how a message
spoken in the world is acknowledged only once what the assistants heard is durable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, cast

import attrs
from twisted.internet import defer
from twisted.logger import Logger

from ai_tools.interfaces import IWorld
from ai_tools.service.collaborators import HeardWorld
from ai_tools.service.waiting import first_failure

if TYPE_CHECKING:
    from ai_tools.interfaces import IWorld
    from ai_tools.service.assistant import Assistant

__all__ = ["Hearing", "world_message_to_event"]

log = Logger()

_SENDER_KEYS = ("sender_id", "sender", "from_id", "speaker_id", "source")


def world_message_to_event(message: object) -> dict[str, object]:
    """A pending-event dict from what a world delivered to a listener.

    Accepts a ``WorldMessage`` (attrs), a dict, or any object with attributes;
    the message's ``kind`` also becomes the event's ``type``.
    """
    data: dict[str, object]
    if isinstance(message, Mapping):
        data = dict(message)
    elif attrs.has(type(message)):
        data = attrs.asdict(cast("attrs.AttrsInstance", message), recurse=True)
    elif hasattr(message, "__dict__"):
        data = {k: v for k, v in vars(message).items() if not k.startswith("_")}
    else:
        data = {"text": str(message)}
    if "type" not in data:
        data["type"] = data.get("kind") or "message"
    if "from" not in data:
        speaker = data.get("sender_key") or data.get("sender_id")
        if speaker:
            data["from"] = speaker  # how the loop's prompt names the speaker
    return data


def sender_of(event: Mapping[str, object]) -> object:
    """The character id of who sent a heard event (a world's ``sender_id``, Evennia's
    ``from_id``...), or None."""
    for key in _SENDER_KEYS:
        if event.get(key) is not None:
            return event[key]
    return None


def _ignore(_: object) -> None:
    """A failed write of what was heard is logged and counted by the assistant; whoever
    acknowledges the message learns of it through :meth:`Hearing.when_saved`."""


class Hearing:
    """The assistants of one service listening to their characters in ``world``.

    ``save_state(name)`` makes an assistant's state durable (the service's grouped
    writer); :meth:`when_saved` joins those writes.
    """

    def __init__(self, world: IWorld | None,
                 save_state: Callable[[str], defer.Deferred[None]]) -> None:
        self.world = world
        self._save_state = save_state
        self._listening: dict[str, tuple[Assistant, Callable[[], object]]] = {}

    def hear(self, assistant: Assistant, after: int | None = None) -> bool:
        """Subscribe the assistant's character in the world: what it hears becomes events.

        Its own messages are ignored.  With ``after`` (a message ``seq``), what
        the character heard after it (as far as the world's log of what it
        heard goes) is heard again first, in the same turn: a worker taking
        over an assistant hears what came after its saved state.  Returns False
        when there is no world, no character, or it is already subscribed.
        """
        name, char_id = assistant.name, assistant.config.character_id
        world = cast("HeardWorld | None", self.world)  # (a log of what was heard: the sandbox)
        if world is None or not char_id or name in self._listening:
            return False
        listener = functools.partial(self.heard, assistant, char_id)
        if after is not None:
            for message in world.heard(char_id, after=after):
                listener(message)
        try:
            unsubscribe = world.subscribe(char_id, listener)
        except Exception:
            log.failure("Could not subscribe {assistant} ({char}) to the world",
                        assistant=name, char=char_id)
            return False
        self._listening[name] = (assistant, unsubscribe if callable(unsubscribe)
                                 else _nothing)
        return True

    def heard(self, assistant: Assistant, char_id: str, message: object) -> None:
        """What ``assistant``'s character heard becomes its pending event (its own words
        do not); the assistant brings its next tick forward itself."""
        try:
            event = world_message_to_event(message)
            if sender_of(event) == char_id or assistant.host is None:  # (removed)
                return
            assistant.queue_event(event).addErrback(_ignore)
        except Exception:
            log.failure("Hearing of {assistant} failed on {message!r}",
                        assistant=assistant.name, message=message)

    def unhear(self, name: str) -> None:
        """Unsubscribe assistant ``name``'s character (nothing if it does not listen)."""
        listening = self._listening.pop(name, None)
        if listening is not None:
            try:
                listening[1]()
            except Exception:
                log.failure("Unsubscribing {assistant} from the world failed", assistant=name)

    def unhear_all(self) -> None:
        """Unsubscribe every character (the service stops)."""
        for name in list(self._listening):
            self.unhear(name)

    def when_saved(self, character_ids: Iterable[str]) -> defer.Deferred[None]:
        """Fires once what the assistants of ``character_ids`` have heard so far is durable.

        The acknowledgement of a message spoken in the world (``POST /messages``
        answers only after it): the world calls the hearing listeners while it
        delivers, so once the delivery returned, the next state write of each
        hearing assistant whose character is among ``character_ids`` holds
        what it heard.  Those writes join the ones the hearing already asked
        for (no extra transaction).  Fails with the store's error when a write
        fails (a full disk, a missing file): the message may then be lost.
        """
        wanted = set(character_ids)
        saves = [self._save_state(name) for name, (assistant, _) in self._listening.items()
                 if assistant.config.character_id in wanted]
        if not saves:
            return defer.succeed(None)
        saved: defer.Deferred[list[None]] = defer.gatherResults(saves, consumeErrors=True)
        return saved.addCallbacks(_none, first_failure)


def _nothing() -> None:
    """The unsubscriber of a world whose ``subscribe`` returned none."""


def _none(_: object) -> None:
    return None
