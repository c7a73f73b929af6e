"""EvenniaWorld: the IWorld contract over real Evennia objects.

Tools never touch Evennia: they call an ``IWorld``.  This adapter answers them
from Evennia's own ORM and applies Evennia's own rules:

* permissions through locks and the permission hierarchy
  (``obj.access(char, "control")``, ``perm(Builder)``), exactly what the
  builder commands check, so an assistant can do what its character could do
  by typing commands and nothing more;
* messages through ``at_say``/``msg_contents``/``msg``, so they look and
  travel like a player's;
* ``execute_command`` runs the command line through the character's own
  cmdsets (``execute_cmd``) and captures what the character is sent back;
  a line its command sets or the command's ``cmd:`` lock refuse is refused
  before it runs.

Ids are dbref strings (``"#12"``); objects cross the boundary as plain,
JSON-serialisable dicts.  Like Evennia itself, the adapter does its database
work synchronously in the reactor thread (Evennia's idmapper cache makes
these lookups cheap); only ``execute_command`` returns a Deferred, because a
command may itself wait.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import attrs
from django.conf import settings
from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from ai_tools.contrib.evennia.command_line import command_refusal, run_captured
from ai_tools.contrib.evennia.delivery import check_reachable
from ai_tools.contrib.evennia.game_objects import (
    GameChannel,
    GameHelpEntry,
    GameObject,
)
from ai_tools.contrib.evennia.kinds import CHARACTER, EXIT, ROOM, dbref_of, kind_of
from ai_tools.contrib.evennia.listeners import LISTENERS
from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.interfaces import IWorld
from ai_tools.json_types import JSONObject, JSONValue

__all__ = ["CHARACTER", "EXIT", "ROOM", "EvenniaWorld", "dbref_of", "jsonable"]

log = Logger()

EMIT_LOCK = "emit:perm(emit) or perm(Builder)"
"""Who may emit unattributed text (the lock of Evennia's own ``emit`` command)."""

SPAWN_LOCK = "spawn:perm(spawn) or perm(Builder)"
"""Who may spawn prototypes (the lock of Evennia's own ``spawn`` command)."""

SYSTEM_TAG_CATEGORY = "system"
"""Tags in this category (the assistants' own lookup tags) need Developer rights."""

FORBIDDEN_OVERRIDES = frozenset(
    {
        "typeclass",
        "permissions",
        "locks",
        "exec",
        "prototype_key",
        "prototype_parent",
        "prototype_locks",
        "prototype_tags",
    }
)
"""Prototype keys an override may not change (they carry rights or code)."""

MAX_VALUE_CHARS = 4000
"""Attribute values larger than this (as JSON) are refused by set_attribute."""


def jsonable(value: object, depth: int = 0) -> JSONValue:
    """A JSON-serialisable copy of an attribute value.

    Saver collections become lists/dicts, database objects become their
    dbref, anything else unknown becomes its ``repr``.
    """
    if depth > 20:
        return repr(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset) or type(value).__name__.startswith(
        "_Saver"
    ):
        try:
            return [jsonable(v, depth + 1) for v in value]
        except TypeError:
            return repr(value)
    if hasattr(value, "dbref") and hasattr(value, "id"):
        return f"#{value.id}"
    return repr(value)


def _rank(query: str) -> Callable[[GameObject], tuple[int, int]]:
    """Sort key of search results: exact names first, then prefixes, then the rest."""
    folded = query.casefold()

    def rank(obj: GameObject) -> tuple[int, int]:
        names = [obj.key.casefold(), *(a.casefold() for a in obj.aliases.all())]
        if folded in names:
            return (0, obj.id)
        if any(n.startswith(folded) for n in names):
            return (1, obj.id)
        return (2, obj.id)

    return rank


@implementer(IWorld)
@attrs.define(eq=False)
class EvenniaWorld:
    """The running Evennia game as an :class:`~ai_tools.interfaces.IWorld`.

    Create one per server (the service does it); it holds no game state of
    its own, only the listener registry of :mod:`.hearing` is shared.
    """

    name: str = "evennia"

    # ------------------------------------------------------------------
    # lookups
    # ------------------------------------------------------------------

    def _find(self, obj_id: object) -> GameObject | None:
        """The Evennia object for ``obj_id`` (``"#12"``), or None."""
        from evennia.objects.models import ObjectDB
        from evennia.utils.utils import dbref

        if not isinstance(obj_id, str | int):
            return None
        number = dbref(obj_id, reqhash=isinstance(obj_id, str))
        if not number:
            return None
        try:
            return ObjectDB.objects.get(id=number)
        except ObjectDB.DoesNotExist:
            return None

    def _require(self, obj_id: object, what: str = "object") -> GameObject:
        obj = self._find(obj_id)
        if obj is None:
            raise NotFound(f"no {what} with id {obj_id!r}")
        return obj

    def _character(self, char_id: object) -> GameObject:
        return self._require(char_id, "character")

    kind_of = staticmethod(kind_of)

    def as_dict(self, obj: GameObject, detail: str = "normal") -> JSONObject:
        """The contract's dict for an Evennia object."""
        kind = self.kind_of(obj)
        data: JSONObject = {
            "id": dbref_of(obj),
            "key": obj.key,
            "kind": kind,
            "description": "" if detail == "brief" else str(obj.db.desc or ""),
            "location": dbref_of(obj.location) if obj.location else None,
            "aliases": list(obj.aliases.all()),
            "typeclass": obj.typeclass_path,
        }
        if kind == "exit":
            data["destination"] = dbref_of(obj.destination) if obj.destination else None
        if kind == "character":
            data["online"] = bool(obj.sessions.count())
        if detail == "detailed":
            data["attributes"] = self._attributes(obj)
            data["tags"] = self._tags(obj)
        return data

    def get_object(self, obj_id: object) -> JSONObject | None:
        """The object dict of ``obj_id``, or None (also for anything not a dbref)."""
        obj = self._find(obj_id)
        return self.as_dict(obj) if obj is not None else None

    def _visible(self, obj: GameObject, looker: GameObject | None) -> bool:
        return looker is None or obj.access(looker, "view", default=True)

    def describe_location(self, char_id: str, detail: str = "normal") -> JSONObject:
        """The room ``char_id`` stands in, its exits, things and other characters."""
        char = self._character(char_id)
        room = char.location
        if room is None:
            raise NotFound(f"{char.key} ({char_id}) is not in any room")
        exits, contents, characters = [], [], []
        for obj in room.contents:
            if obj == char or not self._visible(obj, char):
                continue
            kind = self.kind_of(obj)
            if kind == "exit":
                exits.append(
                    {
                        "id": dbref_of(obj),
                        "key": obj.key,
                        "destination": dbref_of(obj.destination) if obj.destination else None,
                    }
                )
            elif kind == "character":
                characters.append(self.as_dict(obj, detail))
            else:
                contents.append(self.as_dict(obj, detail))
        return {
            "room": self.as_dict(room, detail),
            "exits": exits,
            "contents": contents,
            "characters": characters,
        }

    def search(
        self,
        query: str,
        *,
        char_id: str | None = None,
        location: str | None = None,
        kind: str | None = None,
        limit: int = 10,
    ) -> list[JSONObject]:
        """Objects whose key or aliases match ``query``, best match first."""
        query = str(query or "").strip()
        if not query or limit <= 0:
            return []
        looker = self._find(char_id) if char_id else None
        results = []
        for obj in sorted(self._matches(query, location, limit), key=_rank(query)):
            if kind is not None and self.kind_of(obj) != kind:
                continue
            if not self._visible(obj, looker):
                continue
            results.append(self.as_dict(obj))
            if len(results) >= limit:
                break
        return results

    def _matches(self, query: str, location: str | None, limit: int) -> list[GameObject]:
        """The object ``query`` names by id, else the objects whose names match it.

        With ``location``, only what is in that room.
        """
        from evennia.objects.models import ObjectDB

        direct = self._find(query)
        if direct is not None:
            if location is None or (direct.location and dbref_of(direct.location) == location):
                return [direct]
            return []
        candidates = None
        if location is not None:
            candidates = list(self._require(location, "location").contents)
            if not candidates:
                return []
        found = list(ObjectDB.objects.search_object(query, exact=True, candidates=candidates))
        if len(found) < limit:
            partial = ObjectDB.objects.get_objs_with_key_or_alias(
                query, exact=False, candidates=candidates
            )
            found.extend(o for o in partial if o not in found)
        return found

    # ------------------------------------------------------------------
    # attributes and tags
    # ------------------------------------------------------------------

    @staticmethod
    def _attributes(obj: GameObject, names: Iterable[str] | None = None) -> JSONObject:
        wanted = set(names) if names is not None else None
        values: JSONObject = {}
        for attr in obj.attributes.all():
            if attr.category is not None or attr.key.startswith("_"):
                continue
            if wanted is not None and attr.key not in wanted:
                continue
            values[attr.key] = jsonable(attr.value)
        return values

    def get_attributes(self, obj_id: str, names: Iterable[str] | None = None) -> JSONObject:
        """``{name: value}`` of the object's (non-internal) attributes."""
        return self._attributes(self._require(obj_id), names)

    def _check_edit(self, char: GameObject, obj: GameObject, action: str) -> None:
        """Refuse unless ``char`` controls or may edit ``obj`` (Evennia's building rule)."""
        if obj.access(char, "control") or obj.access(char, "edit"):
            return
        raise PermissionDenied(f"{char.key} may not {action} on {obj.key} ({dbref_of(obj)})")

    @staticmethod
    def _check_name(name: str) -> str:
        name = str(name or "").strip()
        if not name:
            raise ValueError("attribute name is empty")
        if name.startswith("_"):
            raise PermissionDenied(f"attribute {name!r} is internal (names starting with '_')")
        return name

    def set_attribute(self, char_id: str, obj_id: str, name: str, value: object) -> JSONObject:
        """Set ``name`` to a JSON value on ``obj_id``, as ``char_id``."""
        char = self._character(char_id)
        obj = self._require(obj_id)
        name = self._check_name(name)
        self._check_edit(char, obj, f"set attribute {name!r}")
        encoded = json.dumps(value)
        if len(encoded) > MAX_VALUE_CHARS:
            raise ValueError(f"value too large ({len(encoded)} > {MAX_VALUE_CHARS} characters)")
        obj.attributes.add(name, json.loads(encoded))
        log.info("{char} set attribute {name} on {obj}", char=dbref_of(char), name=name, obj=obj_id)
        return self.as_dict(obj)

    def delete_attribute(self, char_id: str, obj_id: str, name: str) -> bool:
        """Remove attribute ``name`` from ``obj_id`` as ``char_id``; True if it existed."""
        char = self._character(char_id)
        obj = self._require(obj_id)
        name = self._check_name(name)
        self._check_edit(char, obj, f"delete attribute {name!r}")
        if not obj.attributes.has(name):
            return False
        obj.attributes.remove(name)
        return True

    @staticmethod
    def _tags(obj: GameObject, category: str | None = None) -> list[JSONObject]:
        pairs = obj.tags.all(return_key_and_category=True)
        return [
            {"tag": key, "category": cat}
            for key, cat in pairs
            if category is None or cat == category
        ]

    def get_tags(self, obj_id: str, category: str | None = None) -> list[JSONObject]:
        """``[{"tag", "category"}]`` on ``obj_id``."""
        return self._tags(self._require(obj_id), category)

    def _check_tag(self, char: GameObject, obj: GameObject, tag: str, category: str | None) -> str:
        tag = str(tag or "").strip()
        if not tag:
            raise ValueError("tag is empty")
        self._check_edit(char, obj, f"change tag {tag!r}")
        if category == SYSTEM_TAG_CATEGORY and not self._perm(char, "Developer"):
            raise PermissionDenied(f"tags in category {category!r} need Developer rights")
        return tag

    def add_tag(
        self, char_id: str, obj_id: str, tag: str, category: str | None = None
    ) -> JSONObject:
        """Add a tag as ``char_id``; returns the object dict."""
        char = self._character(char_id)
        obj = self._require(obj_id)
        tag = self._check_tag(char, obj, tag, category)
        obj.tags.add(tag, category=category)
        return self.as_dict(obj)

    def remove_tag(self, char_id: str, obj_id: str, tag: str, category: str | None = None) -> bool:
        """Remove a tag as ``char_id``; True if it was there."""
        char = self._character(char_id)
        obj = self._require(obj_id)
        tag = self._check_tag(char, obj, tag, category)
        if not obj.tags.has(tag, category=category):
            return False
        obj.tags.remove(tag, category=category)
        return True

    def search_by_tag(
        self, tag: str, category: str | None = None, limit: int = 50
    ) -> list[JSONObject]:
        """Objects carrying ``tag`` (in ``category`` if given)."""
        from evennia.objects.models import ObjectDB

        found = ObjectDB.objects.get_by_tag(key=tag, category=category)
        return [self.as_dict(obj) for obj in list(found.order_by("id")[: max(limit, 0)])]

    # ------------------------------------------------------------------
    # permissions
    # ------------------------------------------------------------------

    @staticmethod
    def _perm(char: GameObject, permission: str) -> bool:
        """Evennia's ``perm()`` lock function (hierarchy, account perms, superuser)."""
        return bool(char.locks.check_lockstring(char, f"dummy:perm({permission})"))

    def has_permission(self, char_id: str, permission: str) -> bool:
        """Whether ``char_id`` holds ``permission`` or one above it in the hierarchy."""
        char = self._find(char_id)
        if char is None:
            return False
        return self._perm(char, str(permission))

    # ------------------------------------------------------------------
    # prototypes
    # ------------------------------------------------------------------

    def list_prototypes(self) -> list[JSONObject]:
        """``[{"key", "description"}]`` of every prototype (modules and database)."""
        from evennia.prototypes import prototypes as protlib

        listed = []
        for prototype in protlib.search_prototype():
            key = prototype.get("prototype_key")
            if key:
                listed.append({"key": key, "description": prototype.get("prototype_desc", "")})
        return sorted(listed, key=lambda p: p["key"])

    @classmethod
    def _apply_overrides(cls, prototype: JSONObject, overrides: JSONObject) -> None:
        """Apply a spawn's overrides: ``key``, ``aliases``, ``description`` and
        ``attributes`` (a mapping); any other key is an attribute, as in Evennia's
        own prototypes.  Keys that carry rights or code are refused."""
        attrs_list = list(prototype.get("attrs") or ())
        extra: JSONObject = {}
        for key, value in overrides.items():
            if key in FORBIDDEN_OVERRIDES:
                raise PermissionDenied(f"a spawn may not override {key!r}")
            if key in ("key", "aliases"):
                prototype[key] = value
            elif key in ("description", "desc"):
                extra["desc"] = str(value)
            elif key == "attributes":
                if not isinstance(value, dict):
                    raise ValueError("attributes must be a mapping of name to value")
                extra.update(value)
            else:
                extra[key] = value
        for name, value in extra.items():
            name = cls._check_name(name)
            attrs_list = [a for a in attrs_list if a[0] != name]
            attrs_list.append((name, json.loads(json.dumps(value)), None, ""))
            prototype.pop(name, None)
        if attrs_list:
            prototype["attrs"] = attrs_list

    def spawn_prototype(
        self,
        char_id: str,
        prototype_key: str,
        location: str | None = None,
        overrides: JSONObject | None = None,
    ) -> JSONObject:
        """Spawn ``prototype_key`` as ``char_id`` (Builder rights and the prototype's lock)."""
        from evennia.locks.lockhandler import check_lockstring
        from evennia.prototypes import prototypes as protlib
        from evennia.prototypes import spawner

        char = self._character(char_id)
        if not char.locks.check_lockstring(char, SPAWN_LOCK):
            raise PermissionDenied(f"{char.key} may not spawn prototypes (needs Builder)")
        wanted = str(prototype_key or "").strip().casefold()
        matches = [
            p
            for p in protlib.search_prototype(key=prototype_key)
            if str(p.get("prototype_key", "")).casefold() == wanted
        ]
        if not matches:
            raise NotFound(f"no prototype called {prototype_key!r}")
        prototype = dict(matches[0])
        locks = prototype.get("prototype_locks")
        if locks and not check_lockstring(char, locks, access_type="spawn", default=True):
            raise PermissionDenied(f"the prototype {prototype_key!r} is locked against spawning")
        self._apply_overrides(prototype, overrides or {})
        # Builders may build anywhere (Evennia's spawn command lets them, too).
        target = self._require(location, "location") if location else char.location
        prototype.pop("location", None)
        created = spawner.spawn(prototype, caller=char)
        if not created:
            raise NotFound(f"prototype {prototype_key!r} spawned nothing")
        obj = created[0]
        if target is not None:
            obj.location = target
        log.info(
            "{char} spawned {key} as {obj}",
            char=dbref_of(char),
            key=prototype_key,
            obj=dbref_of(obj),
        )
        return self.as_dict(obj)

    # ------------------------------------------------------------------
    # commands
    # ------------------------------------------------------------------

    def execute_command(self, char_id: str, command: str) -> defer.Deferred[JSONObject]:
        """Run ``command`` as the character would type it; capture what it is sent.

        A line the character may not run — no command of its command sets
        matches, or only commands whose ``cmd:`` lock refuses it — is not run:
        the answer is a refusal (``success`` false, ``error``
        ``permission_denied`` or ``not_found``) decided from the command sets
        and locks, never from Evennia's error text (see :mod:`.command_line`).
        """
        char = self._character(char_id)
        d = command_refusal(char, command)
        d.addCallback(lambda refusal: refusal or run_captured(char, command))
        return d

    # ------------------------------------------------------------------
    # messages
    # ------------------------------------------------------------------

    @staticmethod
    def _hearers(room: GameObject, speaker: GameObject,
                 exclude: Iterable[str] = ()) -> list[GameObject]:
        skip = set(exclude)
        return [
            obj
            for obj in room.contents
            if obj != speaker
            and dbref_of(obj) not in skip
            and EvenniaWorld.kind_of(obj) == "character"
        ]

    def message_location(
        self, char_id: str, text: str, kind: str = "say", exclude: Iterable[str] = (),
        dedupe_key: str | None = None,
    ) -> list[str]:
        """Say, pose or emit ``text`` in the character's room; returns who heard it.

        ``dedupe_key`` is not needed here (one Server process runs each call
        once); the same for :meth:`message_character` and :meth:`channel_send`.

        Nothing is sent when a player in the room could not see it (the
        Server's link to the Portal is down): :class:`.delivery.PortalUnreachable`.
        """
        char = self._character(char_id)
        room = char.location
        if room is None:
            raise NotFound(f"{char.key} is not in any room")
        if kind not in ("say", "pose", "emit"):
            raise ValueError(f"unknown message kind {kind!r} (say, pose or emit)")
        if kind == "emit" and not char.locks.check_lockstring(char, EMIT_LOCK):
            raise PermissionDenied(f"{char.key} may not emit (needs Builder)")
        skip = set(exclude)
        skipped = [o for o in room.contents if dbref_of(o) in skip]
        hearers = self._hearers(room, char, exclude)
        check_reachable([o for o in room.contents if o != char and o not in skipped], kind)
        self._speak_in(room, char, str(text), kind, skipped)
        return [dbref_of(o) for o in hearers]

    @staticmethod
    def _speak_in(room: GameObject, char: GameObject, text: str, kind: str,
                  skipped: list[GameObject]) -> None:
        """Send one say, pose or emit to the room (all but ``char`` and ``skipped``)."""
        if kind == "say" and not skipped:
            # The game's own at_say, so customised speech looks as it does for players.
            char.at_say(text, msg_self=False)
            return
        mapping = None
        if kind == "say":
            shown: tuple[str, JSONObject] = ('{object} says, "{speech}"', {"type": "say"})
            mapping = {"object": char, "speech": text, "location": room}
        elif kind == "pose":
            shown = (f"{char.key} {text}", {"type": "pose"})
        else:
            shown = (text, {"type": "emit"})
        room.msg_contents(
            text=shown, exclude=[char, *skipped], from_obj=char, mapping=mapping
        )

    def message_character(
        self, char_id: str, target_id: str, text: str, kind: str = "whisper",
        dedupe_key: str | None = None,
    ) -> list[str]:
        """Whisper (same room) or page (anywhere) ``text`` to one character."""
        char = self._character(char_id)
        target = self._require(target_id, "character")
        if self.kind_of(target) != "character":
            raise NotFound(f"{target_id!r} is not a character")
        text = str(text)
        if kind == "whisper":
            if target.location is None or target.location != char.location:
                raise NotFound(f"{target.key} is not here to whisper to")
            check_reachable([target], kind)
            char.at_say(text, whisper=True, receivers=[target], msg_self=False)
        elif kind == "page":
            account = target.account
            if not target.access(char, "msg", default=True) or (
                account is not None and not account.access(char, "msg", default=True)
            ):
                raise PermissionDenied(f"{char.key} may not page {target.key}")
            check_reachable([target], kind)
            target.msg(text=(f"{char.key} pages: {text}", {"type": "page"}), from_obj=char)
        else:
            raise ValueError(f"unknown message kind {kind!r} (whisper or page)")
        return [dbref_of(target)]

    # ------------------------------------------------------------------
    # channels
    # ------------------------------------------------------------------

    @staticmethod
    def _channel(channel: str) -> GameChannel:
        from evennia.comms.models import ChannelDB

        found = ChannelDB.objects.get_channel(str(channel or "").strip())
        if found is None:
            raise NotFound(f"no channel called {channel!r}")
        return found

    def channel_send(self, char_id: str, channel: str, text: str,
                     dedupe_key: str | None = None) -> list[str]:
        """Post on a channel (its ``send`` lock decides); returns the receiving characters."""
        char = self._character(char_id)
        chan = self._channel(channel)
        if not chan.access(char, "send"):
            raise PermissionDenied(f"{char.key} may not send to channel {chan.key}")
        subscribers = list(chan.subscriptions.all())
        check_reachable([s for s in subscribers if s != char], f"the message on {chan.key}")
        chan.msg(str(text), senders=char)
        receivers: list[str] = []
        for subscriber in subscribers:
            if hasattr(subscriber, "get_all_puppets"):
                candidates = list(subscriber.get_all_puppets())
            else:
                candidates = [subscriber]
            receivers.extend(
                dbref_of(obj)
                for obj in candidates
                if obj != char and dbref_of(obj) not in receivers
            )
        return receivers

    def list_channels(self) -> list[JSONObject]:
        """``[{"key", "description"}]`` of every channel."""
        from evennia.comms.models import ChannelDB

        return [
            {"key": chan.key, "description": str(chan.db.desc or "")}
            for chan in ChannelDB.objects.all().order_by("db_key")
        ]

    # ------------------------------------------------------------------
    # help
    # ------------------------------------------------------------------

    def help_search(self, query: str, limit: int = 5) -> list[JSONObject]:
        """Search the game's help: database entries, file entries and command help."""
        from evennia.help.utils import LunrSearch
        from lunr.exceptions import QueryParseError

        query = str(query or "").strip()
        if not query or limit <= 0:
            return []
        documents: dict[str, dict[str, str]] = {}
        texts: dict[str, str] = {}
        for entry in self._help_entries():
            index = entry.search_index_entry
            key = str(index.get("key", "")).strip()
            if not key or key in documents:
                continue
            text = str(index.get("text", "") or "")
            documents[key] = {
                "key": key,
                "aliases": str(index.get("aliases", "") or ""),
                "category": str(index.get("category", "") or ""),
                "tags": str(index.get("tags", "") or ""),
                "text": text,
            }
            texts[key] = text
        if not documents:
            return []
        fields = [
            {"field_name": "key", "boost": 10},
            {"field_name": "aliases", "boost": 7},
            {"field_name": "category", "boost": 6},
            {"field_name": "tags", "boost": 5},
            {"field_name": "text", "boost": 1},
        ]
        index = LunrSearch().index(ref="key", fields=fields, documents=list(documents.values()))
        try:
            matches = index.search(query)
        except QueryParseError:
            matches = []
        if not matches:
            # Lunr's query syntax trips on punctuation: retry with plain words.
            words = " ".join(w for w in "".join(c if c.isalnum() else " " for c in query).split())
            try:
                matches = index.search(words) if words else []
            except QueryParseError:
                matches = []
        return [
            {"key": m["ref"], "text": texts[m["ref"]], "score": round(float(m["score"]), 4)}
            for m in matches[:limit]
        ]

    @staticmethod
    def _help_entries() -> list[GameHelpEntry]:
        """Database help entries, file help entries and the default character commands."""
        from evennia.help.filehelp import FILE_HELP_ENTRIES
        from evennia.help.models import HelpEntry
        from evennia.utils.utils import class_from_module

        entries: list[GameHelpEntry] = list(HelpEntry.objects.all())
        entries.extend(FILE_HELP_ENTRIES.all())
        try:
            cmdset = class_from_module(settings.CMDSET_CHARACTER)()
            cmdset.at_cmdset_creation()
            entries.extend(cmd for cmd in cmdset.commands if getattr(cmd, "auto_help", True))
        except Exception:
            log.failure("could not load the character command set for help search")
        return entries

    # ------------------------------------------------------------------
    # hearing
    # ------------------------------------------------------------------

    def subscribe(self, char_id: str, listener: Callable[[object], object]) -> Callable[[], None]:
        """Call ``listener`` with each message ``char_id`` hears; returns the unsubscriber."""
        char = self._character(char_id)
        return LISTENERS.add(dbref_of(char), listener)
