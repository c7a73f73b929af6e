"""The world through the API: its characters and rooms, applying its file again
(:mod:`~ai_tools.web.operator`), a player character's message (``POST /messages``,
:mod:`~ai_tools.web.messages`) and what a character heard."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import attrs
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.server import Request

from ai_tools.errors import NotFound
from ai_tools.failure_lines import RepeatedFailure
from ai_tools.web.body import parse_json_body
from ai_tools.web.errors import ApiError
from ai_tools.web.event_hub import assistants_by_character
from ai_tools.web.messages import DIRECT_KINDS, parse_message, speak
from ai_tools.web.query import query_int
from ai_tools.web.routes.parts import ApiParts, the_world
from ai_tools.web.routing import Route

if TYPE_CHECKING:
    from ai_tools.world.sandbox import SandboxWorld

__all__ = ["WorldRoutes"]

log = Logger()

@attrs.define(eq=False)
class WorldRoutes:
    """The world's endpoints over ``api``'s world and service."""

    api: ApiParts
    _unsaved: RepeatedFailure = attrs.field(init=False, factory=lambda: RepeatedFailure(
        "POST /messages answered 503: what its hearers heard was not saved", log))

    def routes(self) -> list[Route]:
        """The endpoints, in the order ``GET /`` lists them."""
        return [
            Route("GET", ("world", "characters"), self.world_characters,
                  "the world's characters, where they are, whose they are"),
            Route("GET", ("world", "rooms"), self.world_rooms,
                  "the world's rooms, their exits and who is in them"),
            Route("POST", ("world", "apply"), self.apply_world_file,
                  "apply the world file again (body: {\"mode\": \"merge\" | \"reseed\"})"),
            Route("POST", ("messages",), self.post_message,
                  "a player character says, poses, whispers, pages or posts on a channel"),
            Route("GET", ("characters", "{character}", "heard"), self.heard,
                  "what a character heard (?limit=, ?after=)"),
        ]

    def world_characters(self, request: Request) -> dict[str, object]:
        """``GET /world/characters``."""
        return self.api.operator.characters()

    def world_rooms(self, request: Request) -> dict[str, object]:
        """``GET /world/rooms``."""
        return self.api.operator.rooms()

    def apply_world_file(self, request: Request) -> defer.Deferred[dict[str, object]]:
        """``POST /world/apply``: answers once the applied world is saved."""
        return self.api.operator.apply_world_file(parse_json_body(request, self.api.max_body))

    def post_message(self, request: Request) -> defer.Deferred[dict[str, object]]:
        """``POST /messages``: a player's message, answered once its hearers saved it."""
        return defer.Deferred.fromCoroutine(self._post_message(request))

    async def _post_message(self, request: Request) -> dict[str, object]:
        world = the_world(self.api.world)
        message = parse_message(parse_json_body(request, self.api.max_body))
        await self._check_speaker(world, message.character)
        if message.kind in DIRECT_KINDS:
            target = await self._target_character(world, str(message.target))
            message = attrs.evolve(message, target=target)
        heard: list[str] = await speak(world, message)
        await self._heard_saved(world, heard)
        assistants = assistants_by_character(self.api.service)
        return {
            "character": message.character,
            "kind": message.kind,
            "target": message.target,
            "text": message.text,
            "heard_by": heard,
            "assistants": sorted({assistants[c] for c in heard if c in assistants}),
        }

    async def _check_speaker(self, world: SandboxWorld, character: str) -> None:
        """A player character: it exists, and no assistant here speaks through it."""
        sender = await defer.maybeDeferred(world.get_object, character)
        if not isinstance(sender, Mapping) or sender.get("kind") != "character":
            raise ApiError(404, f"no character with id {character!r}", field="character")
        service = self.api.service
        owner = assistants_by_character(service).get(character)
        ownership = service.ownership
        if owner is None and ownership is not None:
            # With workers, the assistant may run on another one: ask who shares them.
            owner = ownership.assistant_of_character(character)
        if owner is not None:
            raise ApiError(403, f"{character} is the character of assistant {owner!r}; "
                           "the API speaks only as players", field="character")

    async def _heard_saved(self, world: SandboxWorld, heard: Sequence[str]) -> None:
        """Wait until what the hearers heard is durable (else 503): the hearing assistants'
        pending events, and the world's heard log where it keeps one (players read it).

        Both writes are waited for and both outcomes consumed (one may have failed
        before the other: its failure must not be left unhandled); a failure is
        logged once per class until messages are saved again."""
        keeping = getattr(world, "heard_kept", None)
        writes = [self.api.service.when_heard_saved(heard)]
        if keeping is not None:
            writes.append(keeping())  # (asked now: of this message)
        outcomes = await defer.DeferredList(writes, consumeErrors=True)
        failed = [cast(Failure, result).value for ok, result in outcomes if not ok]
        if not failed:
            self._unsaved.worked()
            return
        exc = failed[0]
        assert exc is not None  # a Failure always holds its exception
        why = str(exc) or type(exc).__name__
        self._unsaved.failed(exc)
        raise ApiError(503, "the message was spoken, but what the assistants heard could "
                       f"not be saved ({why}); it may be lost if the service stops",
                       headers={"Retry-After": "10"})

    async def _target_character(self, world: SandboxWorld, target: str) -> str:
        """A whisper/page target: a character id, or the name of a hosted assistant."""
        found = await defer.maybeDeferred(world.get_object, target)
        if isinstance(found, Mapping) and found.get("kind") == "character":
            return target
        service = self.api.service
        if target in service:
            char_id = service.get(target).config.character_id
            if char_id:
                return char_id
        raise ApiError(404, f"no character (or assistant) called {target!r}", field="target")

    def heard(self, request: Request, character: str) -> dict[str, object]:
        """``GET /characters/{id}/heard?limit=&after=``."""
        world = the_world(self.api.world)
        reader = getattr(world, "heard", None)
        if reader is None:
            raise ApiError(501, "this world keeps no hearing log")
        limit = query_int(request, "limit", 50)
        after = query_int(request, "after", None, 0, 2**62)
        try:
            messages = reader(character, limit=limit, after=after)
        except NotFound:
            raise ApiError(404, f"no character with id {character!r}",
                           field="character") from None
        return {"character": character, "messages": messages}
