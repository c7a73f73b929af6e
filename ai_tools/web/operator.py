"""The operator's endpoints: create, reconfigure and remove assistants; see the world.

What the endpoints of :mod:`~ai_tools.web.routes.assistants`,
:mod:`~ai_tools.web.routes.stopping` and :mod:`~ai_tools.web.routes.world` do
(the resource checks Host, Origin, token and content type first).  An assistant's
configuration is an :class:`~ai_tools.service.assistant.AssistantConfig`
(the keys of an ``[[assistants]]`` table of the config file); it is saved in
the store with the assistant, and the store keeps the roster across restarts
(:mod:`ai_tools.service.roster`: removed assistants stay removed, those
created here come back).  With several workers (PostgreSQL) the changes are
made for every worker through the lease manager (``service.ownership``): the
configuration is kept in the database, one worker runs the assistant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from twisted.internet import defer

from ai_tools.errors import ConfigError
from ai_tools.json_types import JSONMapping
from ai_tools.service.assistant import AssistantConfig
from ai_tools.service.roster import Roster
from ai_tools.web.errors import ApiError
from ai_tools.web.event_hub import assistants_by_character

if TYPE_CHECKING:
    from ai_tools.service.leases import LeaseManager
    from ai_tools.service.service import AssistantService
    from ai_tools.world.sandbox import SandboxWorld

__all__ = ["Operator", "parse_decision"]

_DECISION_FIELDS = frozenset({"approve", "reason"})
_MAX_REASON = 500

_FIELD = re.compile(r"^assistant(?: '[^']*')?(?:\.(\w+)|: unknown key\(s\) (\w+)|"
                    r": '(\w+)' is required|: unknown (model))")


def _config_error(exc: ConfigError) -> ApiError:
    """A 422 naming the key a ConfigError is about, when the message says it."""
    message = str(exc)
    found = _FIELD.match(message)
    field = next((g for g in found.groups() if g), None) if found else None
    return ApiError(422, message, field=field)


def parse_decision(body: JSONMapping) -> tuple[bool, str]:
    """An approval's body ``{"approve": true|false, "reason"?: str}`` (422 names the field)."""
    unknown = sorted(set(body) - _DECISION_FIELDS)
    if unknown:
        raise ApiError(422, f"unknown field {unknown[0]!r}; the fields are approve, reason",
                       field=unknown[0])
    approve = body.get("approve")
    if not isinstance(approve, bool):
        raise ApiError(422, "approve is required: true (run the call) or false (refuse it)",
                       field="approve")
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > _MAX_REASON:
        raise ApiError(422, f"reason must be a string of at most {_MAX_REASON} characters",
                       field="reason")
    return approve, reason


class Operator:
    """What the operator's endpoints do to ``service`` and see of ``world``."""

    def __init__(self, service: AssistantService, world: SandboxWorld | None) -> None:
        self.service = service
        self.world = world
        self.roster = Roster(service.store)

    @property
    def ownership(self) -> LeaseManager | None:
        """The lease manager when this process is one worker of several, else None."""
        ownership: LeaseManager | None = self.service.ownership
        return ownership

    # -- assistants ----------------------------------------------------------------

    def _config(self, data: JSONMapping) -> AssistantConfig:
        try:
            config = AssistantConfig.from_mapping(data, "assistant")
        except ConfigError as exc:
            raise _config_error(exc) from None
        if config.model not in self.service.llms:
            known = ", ".join(sorted(self.service.llms)) or "none"
            raise ApiError(422, f"unknown model profile {config.model!r} (known: {known})",
                           field="model")
        try:
            self.service.check_config(config)  # the service's bounds (min_tick_rate)
        except ConfigError as exc:
            raise _config_error(exc) from None
        self._check_character(config)
        return config

    def _check_character(self, config: AssistantConfig) -> None:
        char_id = config.character_id
        if char_id is None or self.world is None:
            return
        found = self.world.get_object(char_id)
        if not isinstance(found, Mapping) or found.get("kind") != "character":
            raise ApiError(422, f"no character {char_id!r} in the world (GET /world/characters "
                           "lists them)", field="character_id")
        owner = assistants_by_character(self.service).get(char_id)
        ownership = self.ownership
        if owner is None and ownership is not None:  # run by another worker, perhaps
            owner = ownership.assistant_of_character(char_id)
        if owner is not None and owner != config.name:
            raise ApiError(422, f"{char_id} is already the character of assistant {owner!r}",
                           field="character_id")

    def _answer(self, name: str, **extra: object) -> dict[str, object]:
        assistant = self.service.get(name)
        answer = {"assistant": name, "config": assistant.config.to_dict(), **extra,
                  "status": self.service.status(name)}
        if self.ownership is not None:
            answer["worker"] = self.ownership.worker
        return answer

    @defer.inlineCallbacks
    def create(self, data: JSONMapping) -> Any:
        """``POST /assistants``: 201 with the new assistant's configuration and status."""
        name = data.get("name")
        if isinstance(name, str) and name in self.service:
            raise ApiError(409, f"an assistant named {name!r} already exists "
                           f"(PATCH /assistants/{name} changes it)", field="name")
        config = self._config(data)
        ownership = self.ownership
        self._check_room()
        try:
            if ownership is not None:  # for every worker: kept in the database, run here
                yield ownership.create(config)
            else:
                yield self.service.add_assistant(config)
        except ConfigError as exc:  # added meanwhile, or a model the service lost
            raise ApiError(409 if "already exists" in str(exc) else 422, str(exc)) from None
        except Exception as exc:  # the store refused its first save: it was not added
            raise ApiError(503, f"assistant {config.name!r} could not be saved "
                           f"({str(exc) or type(exc).__name__}); it was not added",
                           headers={"Retry-After": "10"}) from None
        if ownership is None:
            yield self.roster.unmark_removed(config.name)
        elif config.name not in self.service:  # its lease from before lives on elsewhere
            return 201, {"assistant": config.name, "config": config.to_dict(),
                         "status": None, "worker": None}
        return 201, self._answer(config.name)

    def _check_room(self) -> None:
        """409 when the service (with workers: all of them) has ``max_assistants``."""
        ownership = self.ownership
        count = len(ownership.roster) if ownership is not None else len(self.service.names())
        bound = self.service.max_assistants
        if count >= bound:
            raise ApiError(409, f"this service has its maximum of {bound} assistants "
                           "(max_assistants); remove one first")

    def config(self, name: str) -> dict[str, object]:
        """``GET /assistants/{name}/config``."""
        return {"assistant": name, "config": self.service.get(name).config.to_dict()}

    @defer.inlineCallbacks
    def reconfigure(self, name: str, changes: JSONMapping) -> Any:
        """``PATCH /assistants/{name}``: the keys given replace the current ones."""
        if "name" in changes and changes["name"] != name:
            raise ApiError(422, "an assistant cannot be renamed (create another one)",
                           field="name")
        if not changes:
            raise ApiError(422, "nothing to change: send the keys to change")
        current = self.service.get(name).config.to_dict()
        config = self._config({**current, **changes, "name": name})
        ownership = self.ownership  # with workers: kept for every worker too
        changed = yield (ownership or self.service).reconfigure(name, config)
        if "enabled" in changes:  # the configuration's is the initial state: apply it now
            yield (self.service.enable if config.enabled else self.service.disable)(name)
        return self._answer(name, changed=changed)

    @defer.inlineCallbacks
    def remove(self, name: str, forget: bool) -> Any:
        """``DELETE /assistants/{name}``: remove it; it stays removed after a restart."""
        self.service.get(name)
        if self.ownership is not None:  # removed for every worker
            yield self.ownership.remove(name, forget)
        else:
            yield self.service.remove_assistant(name, forget=forget)
            yield self.roster.mark_removed(name)
        return {"assistant": name, "removed": True, "forgotten": forget}

    # -- stopping ------------------------------------------------------------------------

    def stop_all(self) -> dict[str, object]:
        """``POST /stop``: kill the model call or tool in flight of every assistant."""
        stopped = [n for n in self.service.names()
                   if self.service.stop_assistant(n, "stopped through the HTTP API")]
        return {"stopped": stopped}

    def emergency_stop(self, name: str | None, reason: str) -> dict[str, object]:
        """``POST /emergency-stop``: stop, and no tick runs until cleared (saved)."""
        if name is not None:
            self.service.get(name)
        names = self.service.emergency_stop(name, reason or "emergency stop through the API")
        return {"emergency_stopped": sorted(names)}

    def clear_emergency_stop(self, name: str | None) -> dict[str, object]:
        """``POST /emergency-stop/clear``."""
        if name is not None:
            self.service.get(name)
        return {"cleared": sorted(self.service.clear_emergency_stop(name))}

    # -- the world -------------------------------------------------------------------------

    def characters(self) -> dict[str, object]:
        """``GET /world/characters``: every character, where it is, whose it is."""
        world = self._world("character_ids")
        owners = assistants_by_character(self.service)
        found = []
        for char_id in world.character_ids():
            obj = world.get_object(char_id) or {}
            room = world.get_object(obj.get("location")) if obj.get("location") else None
            found.append({"id": char_id, "key": obj.get("key"),
                          "location": obj.get("location"),
                          "location_key": (room or {}).get("key"),
                          "assistant": owners.get(char_id)})
        return {"characters": found}

    def rooms(self) -> dict[str, object]:
        """``GET /world/rooms``: every room, its exits and the characters in it."""
        world = self._world("room_ids")
        rooms = []
        for room_id in world.room_ids():
            room = world.get_object(room_id) or {}
            inside = world.contents(room_id)
            rooms.append({
                "id": room_id, "key": room.get("key"), "description": room.get("description"),
                "exits": [{"id": o["id"], "key": o["key"], "destination": o.get("destination")}
                          for o in inside if o.get("kind") == "exit"],
                "characters": [o["id"] for o in inside if o.get("kind") == "character"],
            })
        return {"rooms": rooms}

    @defer.inlineCallbacks
    def apply_world_file(self, body: JSONMapping) -> Any:
        """``POST /world/apply`` ``{"mode": "merge" | "reseed"}``: apply the world file again."""
        world = self._world("apply_seed")
        unknown = sorted(set(body) - {"mode"})
        if unknown:
            raise ApiError(422, f"unknown field {unknown[0]!r} (only 'mode')", field=unknown[0])
        mode = body.get("mode")
        if mode not in ("merge", "reseed"):
            raise ApiError(422, "mode must be \"merge\" (add and update the file's rows, keep "
                           "what was made in the game) or \"reseed\" (the world becomes the "
                           "file's)", field="mode")
        if world.seed_file is None:
            raise ApiError(409, "this world was not loaded from a world file ([world] file), "
                           "or it is the database's shared world: nothing to apply")
        keep = sorted(assistants_by_character(self.service))
        try:
            applied = yield world.apply_seed(mode, keep=keep)
        except ConfigError as exc:
            raise ApiError(422, str(exc), field="mode") from None
        return {**applied, "file": str(world.seed_file)}

    def _world(self, needs: str) -> SandboxWorld:
        if self.world is None:
            raise ApiError(503, "this service has no world")
        if not hasattr(self.world, needs):
            raise ApiError(501, "this world cannot list its objects")
        return self.world
