"""The base class of the default tools: requirements, refusals and object references.

A default tool subclasses :class:`LibraryTool` and writes ``async def run``.
:meth:`LibraryTool.execute` checks that the actor brings what the tool needs
(a character, a world, a store, an assistant), runs it, and turns the world's
refusals into results the model reads instead of tracebacks:

* :class:`~ai_tools.errors.PermissionDenied` → ``status: permission_denied``
* :class:`~ai_tools.errors.NotFound` → ``status: not_found``
* ``ValueError`` (a request the world cannot carry out as given) → ``status: invalid``
* an ambiguous object name → ``status: ambiguous`` with the candidates.

Anything else propagates, so the execution engine can classify and retry
transient failures (retried with back-off).  Tools only talk to ``actor.world`` and
``actor.store``, which is what lets one implementation serve the sandbox world
and the Evennia adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any, ClassVar, cast

import msgspec
from twisted.internet import defer

from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.interfaces import IAssistantRuntime, IStore, IWorld
from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, Tool

OBJECT_REFERENCE: JSONObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
    "description": "Id, name, 'here' or 'me'.",
}
"""JSON Schema of a parameter naming a world object."""

Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
"""The type of a ``reason`` parameter of a typed-function tool: why, in a few words."""

HERE_WORDS = frozenset({"here", "room", "this room"})
SELF_WORDS = frozenset({"me", "self", "myself"})


class AmbiguousReference(Exception):
    """A name matched several objects equally well."""

    def __init__(self, reference: str, candidates: list[JSONObject]) -> None:
        super().__init__(reference)
        self.reference = reference
        self.candidates = candidates


async def call(function: Callable[..., Any], *args: object, **kwargs: object) -> Any:
    """Call a world/store/assistant method that returns a value or a Deferred."""
    return await defer.maybeDeferred(function, *args, **kwargs)


def summarize(obj: JSONObject) -> JSONObject:
    """The short form of an object dict used in results (id, key, kind, location)."""
    return {
        "id": obj.get("id"),
        "key": obj.get("key"),
        "kind": obj.get("kind"),
        "location": obj.get("location"),
    }


def _names(obj: dict[str, Any]) -> set[str]:
    names = {str(obj.get("key", "")).casefold()}
    names.update(str(a).casefold() for a in obj.get("aliases") or ())
    return names


async def location_of(world: IWorld, char_id: str) -> str | None:
    """The id of the room ``char_id`` stands in (None if it is nowhere)."""
    me = await call(world.get_object, char_id)
    if me is None:
        raise NotFound(f"your character {char_id!r} does not exist in this world")
    location = me.get("location")
    return str(location) if location is not None else None


async def resolve_object(
    world: IWorld, char_id: str, reference: str, kind: str | None = None
) -> JSONObject:
    """Find the object a model means by ``reference``.

    Tries, in order: 'here'/'me', an exact id, then a name search in the
    character's room, then in the whole world.  An exact name (or alias) match
    wins over partial ones; several equally good matches raise
    :class:`AmbiguousReference`; none raise :class:`NotFound`.
    """
    ref = reference.strip()
    folded = ref.casefold()
    if folded in SELF_WORDS:
        found = await call(world.get_object, char_id)
        if found is None:
            raise NotFound(f"your character {char_id!r} does not exist in this world")
        return dict(found)
    if folded in HERE_WORDS:
        room_id = await location_of(world, char_id)
        room = await call(world.get_object, room_id) if room_id else None
        if room is None:
            raise NotFound("you are not in any room")
        return dict(room)
    direct = await call(world.get_object, ref)
    if direct is not None and (kind is None or direct.get("kind") == kind):
        return dict(direct)
    room_id = await location_of(world, char_id)
    scopes: list[str | None] = [room_id, None] if room_id else [None]
    for scope in scopes:
        found_list = await call(
            world.search, ref, char_id=char_id, location=scope, kind=kind, limit=10
        )
        results = [dict(o) for o in found_list or ()]
        if not results:
            continue
        exact = [o for o in results if folded in _names(o)]
        if len(exact) == 1:
            return exact[0]
        if len(exact) > 1:
            raise AmbiguousReference(ref, [summarize(o) for o in exact])
        if len(results) == 1:
            return results[0]
        raise AmbiguousReference(ref, [summarize(o) for o in results])
    what = f"{kind} " if kind else ""
    raise NotFound(f"no {what}object matches {ref!r}")


REFUSALS = (PermissionDenied, NotFound, ValueError, AmbiguousReference)
"""What a tool raises to refuse a call: :func:`refusal` turns it into the model's result."""


def refusal(exc: Exception) -> JSONObject:
    """The result for a refusal a tool raised (one of :data:`REFUSALS`): never retried."""
    if isinstance(exc, PermissionDenied):
        return outcomes.permission_denied(exc)
    if isinstance(exc, NotFound):
        return outcomes.not_found(exc)
    if isinstance(exc, AmbiguousReference):
        return outcomes.refuse(
            f"{exc.reference!r} matches several objects; call again with one of their ids",
            outcomes.AMBIGUOUS,
            candidates=exc.candidates,
        )
    # ValueError: the world's word for a request that cannot work as given
    # (a bad value, an exit asked to hold things...): the model can fix it.
    return outcomes.invalid(str(exc))


class LibraryTool(Tool):
    """A default-library tool: declares what it needs and implements :meth:`run`."""

    needs_world: ClassVar[bool] = True
    needs_store: ClassVar[bool] = False
    needs_assistant: ClassVar[bool] = False
    example: ClassVar[JSONObject] = {}
    """An example call's parameters, shown in docs/tools.md."""

    run: Callable[..., Coroutine[Any, Any, JSONObject]]
    """The tool's work, ``async def run(self, actor, **params)``; subclasses define it.

    It raises PermissionDenied/NotFound for refusals (turned into results).
    """

    def execute(self, actor: Actor, **params: Any) -> defer.Deferred[JSONObject]:
        """Run the tool; fires with a result dict (refusals included)."""
        return defer.ensureDeferred(self._guarded(actor, params))

    def missing_requirement(self, actor: Actor) -> str | None:
        """Why ``actor`` cannot run this tool, or None.

        (A tool that ``requires_character`` is refused by the execution engine
        before it runs, when no character is attached.)
        """
        if self.needs_world and actor.world is None:
            return "no world is attached"
        if self.needs_store and actor.store is None:
            return "no store is attached to keep records"
        if self.needs_assistant and actor.assistant is None:
            return "it needs an assistant and this call is not made by one"
        return None

    async def _guarded(self, actor: Actor, params: JSONObject) -> JSONObject:
        missing = self.missing_requirement(actor)
        if missing is not None:
            return outcomes.unavailable(self.name, missing)
        try:
            return await self.run(actor, **params)
        except REFUSALS as exc:
            return refusal(exc)


    # Typed accessors: present whenever run() is called (missing_requirement checks them).
    @staticmethod
    def world(actor: Actor) -> IWorld:
        """The actor's world (checked present by :meth:`missing_requirement`)."""
        return cast("IWorld", actor.world)

    @staticmethod
    def store(actor: Actor) -> IStore:
        """The actor's store (checked present by :meth:`missing_requirement`)."""
        return cast("IStore", actor.store)

    @staticmethod
    def assistant(actor: Actor) -> IAssistantRuntime:
        """The actor's assistant runtime (checked present by :meth:`missing_requirement`)."""
        return cast("IAssistantRuntime", actor.assistant)

    @staticmethod
    def character(actor: Actor) -> str:
        """The acting character's id (checked present by the engine: ``requires_character``)."""
        return str(actor.character_id)
