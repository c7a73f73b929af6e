"""The sandbox world: a small persistent MUD-like world for the standalone service.

The whole world lives in memory (like Evennia's object cache), so reads are
plain synchronous calls; every change is written through to a store
(``IWorldStore``: the memory or SQLite store) so it survives a restart.

What returns what:

* **reads** return plain values: :meth:`get_object`, :meth:`describe_location`,
  :meth:`search`, :meth:`get_attributes`, :meth:`get_tags`,
  :meth:`search_by_tag`, :meth:`has_permission`, :meth:`list_prototypes`,
  :meth:`list_channels`, :meth:`help_search`, :meth:`heard`, :meth:`snapshot`;
* **messages** (nothing to persist) return plain values at once and raise on
  refusal: :meth:`message_location`, :meth:`message_character`,
  :meth:`channel_send`, :meth:`subscribe`, :meth:`add_observer`;
* **changes** return a Deferred that fires once the change is durable (and
  fails with ``PermissionDenied``, ``NotFound``, ``ValueError``...):
  :meth:`set_attribute`, :meth:`delete_attribute`, :meth:`add_tag`,
  :meth:`remove_tag`, :meth:`spawn_prototype`, :meth:`create_object`,
  :meth:`dig`, :meth:`set_description`, :meth:`move_character`,
  :meth:`create_character`, :meth:`execute_command`.

The change is applied in memory first, then written; if the write fails the
Deferred fails (and the failure is logged) while memory keeps the change, which
the next write of the same object persists.  With the memory store, or with no
store, every Deferred has already fired when the method returns.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs
from twisted.internet import defer, threads
from twisted.internet.interfaces import IReactorThreads
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ai_tools.default_reactor import or_global_reactor
from ai_tools.errors import AIToolsError, ConfigError, NotFound, PermissionDenied
from ai_tools.failure_lines import RepeatedFailure
from ai_tools.interfaces import IHeardLog, IWorld
from ai_tools.json_encoding import compact_ascii_json
from ai_tools.world.commands import run_command
from ai_tools.world.hearing import Hearing, Listener, Observer
from ai_tools.world.help_index import rank_help
from ai_tools.world.messages import DIRECT_KINDS, ROOM_KINDS, WorldMessage
from ai_tools.world.model import (
    Channel,
    HelpEntry,
    Prototype,
    WorldObject,
    normalise_tag,
)
from ai_tools.world.objects import WorldObjects
from ai_tools.world.permissions import (
    BUILDER,
    DEVELOPER,
    SYSTEM_TAG_CATEGORY,
    holds,
    may_edit,
)
from ai_tools.world.seeding import DIGEST_KEY, merged_world, reseeded_world, world_digest
from ai_tools.world.worldfile import load_world_file, slug, unique_id

MAX_VALUE_CHARS = 8192
"""Largest JSON encoding of an attribute value :meth:`SandboxWorld.set_attribute` accepts."""

FORBIDDEN_OVERRIDES = frozenset(
    {"id", "kind", "location", "destination", "owner", "permissions", "created_at"}
)
"""Spawn overrides that would change identity or rights, refused."""



class _Clock(Protocol):
    def seconds(self) -> float: ...


def _check_attribute_name(name: Any) -> str:
    text = str(name or "").strip() if isinstance(name, str) else ""
    if not text:
        raise ValueError("attribute name is empty")
    if text.startswith("_"):
        raise PermissionDenied(f"attribute {text!r} is internal (names starting with '_')")
    return text


def _json_copy(value: Any, what: str) -> Any:
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} is not JSON-serialisable: {exc}") from None
    if len(encoded) > MAX_VALUE_CHARS:
        raise ValueError(f"{what} too large ({len(encoded)} > {MAX_VALUE_CHARS} characters)")
    return json.loads(encoded)


def seed_data(seed: str | Path | Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The world data a store without a world starts from: a world file's, given data,
    or (None) an empty world called Sandbox.  ConfigError for a bad world file."""
    if seed is None:
        return {"meta": {"name": "Sandbox"}}
    if isinstance(seed, str | Path):
        return load_world_file(seed)
    return seed


@attrs.define
class _Spawned:
    """What a spawn makes of a prototype: its fields, then each override applied."""

    key: str
    description: str
    aliases: list[str]
    attributes: dict[str, Any]
    tags: list[tuple[str, str | None]]

    @classmethod
    def of(cls, proto: Prototype) -> _Spawned:
        return cls(
            key=proto.name or proto.key,
            description=proto.desc if proto.desc is not None else proto.description,
            aliases=list(proto.aliases),
            attributes=copy.deepcopy(proto.attributes),
            tags=list(proto.tags),
        )

    def override(self, name: str, value: Any, developer: bool) -> None:
        """Apply one override; ``developer``: may add tags of the system category."""
        if name in FORBIDDEN_OVERRIDES:
            raise PermissionDenied(f"a spawn may not override {name!r}")
        if name == "key":
            self.key = str(value).strip() or self.key
        elif name == "aliases":
            self.aliases = [str(a) for a in value]
        elif name in ("description", "desc"):
            self.description = str(value)
        elif name == "tags":
            self.add_tags(value, developer)
        elif name == "attributes":
            if not isinstance(value, Mapping):
                raise ValueError("attributes must be a mapping of name to value")
            for attr, attr_value in value.items():
                self.set_attribute(attr, attr_value)
        else:
            self.set_attribute(name, value)

    def add_tags(self, tags: Iterable[Any], developer: bool) -> None:
        for tag in tags:
            pair = (normalise_tag(tag) if isinstance(tag, str)
                    else normalise_tag(tag.get("tag"), tag.get("category")))
            if pair[1] == SYSTEM_TAG_CATEGORY and not developer:
                raise PermissionDenied("tags in category 'system' need Developer rights")
            if pair not in self.tags:
                self.tags.append(pair)

    def set_attribute(self, name: Any, value: Any) -> None:
        self.attributes[_check_attribute_name(name)] = _json_copy(value, f"attribute {name!r}")


SEQS_PER_MS = 1000
"""Message numbers a run may give per millisecond it lived (see first_message_seq)."""


HEARD_KEEP = 10_000
"""Messages the store's heard log keeps (IHeardLog): what characters heard survives a
restart, each character's newest ``log_size`` of them."""

_UNKEPT_KEEP = 1000
"""Failed heard-log writes remembered (for :meth:`SandboxWorld.heard_kept`)."""

MAX_APPLY_BYTES = 8 * 1024 * 1024
"""The largest world file :meth:`SandboxWorld.apply_seed` applies to a running world
(about 36,000 rooms with their exits).  The file is parsed, checked and made into
objects off the reactor; what is left on it — merging with the world as it is,
putting the new objects in place, encoding the rows for the store — held it about
1 s for 20,000 rooms on a loaded machine, where doing it all there held it 18 s
(``make bench BENCH=world_apply``).  A larger file seeds a world at the first
start (nothing is served yet)."""


def _read_seed_file(path: Path) -> tuple[dict[str, Any], str]:
    """The checked rows of the world file at ``path`` and its digest (run in a thread);
    ConfigError for a file too large or not valid."""
    try:
        size = Path(path).stat().st_size
    except OSError as exc:
        raise ConfigError(f"the world file cannot be applied: {exc}") from None
    if size > MAX_APPLY_BYTES:
        raise ConfigError(f"the world file cannot be applied to the running world: it is "
                          f"{size} bytes, more than {MAX_APPLY_BYTES} (a world this large "
                          "is seeded at the first start, from an empty store)")
    try:
        data = load_world_file(path)
    except Exception as exc:
        raise ConfigError(f"the world file cannot be applied: {exc}") from None
    return data, world_digest(data)


_APPLY_ATTEMPTS = 3
"""Tries to put an applied world file in place while the game keeps changing the world;
the last one runs on the reactor in one step (nothing can change meanwhile)."""


@attrs.frozen
class _PreparedWorld:
    """World data (rows) made into the world's objects: built anywhere (a thread: it
    touches nothing of a world), put in place by ``SandboxWorld._install``."""

    objects: list[WorldObject]
    lost: list[tuple[str, Any]]
    """``(id, location)`` of the objects whose location is missing (now nowhere)."""
    channels: dict[str, Channel]
    prototypes: dict[str, Prototype]
    help: dict[str, HelpEntry]
    meta: dict[str, Any]
    rows: dict[str, Any] | None
    """With ``with_rows``: the world as rows again, as ``SandboxWorld.snapshot`` gives it
    once in place (what :meth:`SandboxWorld.apply_seed` writes; made off the reactor)."""

    @classmethod
    def build(cls, data: Mapping[str, Any], with_rows: bool = False) -> _PreparedWorld:
        rows = data.get("objects") or ()
        locations = {row.get("id"): row.get("location") for row in rows}
        objects = [WorldObject.from_row(row) for row in rows]
        lost = WorldObjects().replace(objects)  # the one rule: a missing place is none
        channels = {c.key.casefold(): c for c in map(Channel.from_row,
                                                      data.get("channels") or ())}
        prototypes = {p.key.casefold(): p for p in map(Prototype.from_row,
                                                        data.get("prototypes") or ())}
        help_entries = {h.key.casefold(): h for h in map(HelpEntry.from_row,
                                                          data.get("help") or ())}
        meta = copy.deepcopy(dict(data.get("meta") or {}))
        rows = None if not with_rows else {
            "objects": [o.to_row() for o in objects],
            "channels": [c.to_row() for c in channels.values()],
            "prototypes": [p.to_row() for p in prototypes.values()],
            "help": [h.to_row() for h in help_entries.values()],
            "meta": {k: copy.deepcopy(v) for k, v in meta.items() if k != SEQ_FLOOR_KEY},
        }
        return cls(objects, [(obj.id, locations.get(obj.id)) for obj in lost], channels,
                   prototypes, help_entries, meta, rows)


SEQ_FLOOR_KEY = "message_seq_floor"
"""World meta: no run has given a message number above it (see SEQ_BLOCK)."""
SEQ_BLOCK = 1_000_000
"""Message numbers a run reserves at a time: one meta write per this many messages."""


def first_message_seq(now: float) -> int:
    """The number before a run's first message: its start time in ms times SEQS_PER_MS.

    A run that lived ``t`` ms gave fewer than ``SEQS_PER_MS * t`` numbers (a
    million messages a second), so a later run starts above all of them with
    nothing written per message, as long as the clock does not go back.  For a
    clock that went back, the store also keeps a floor (:data:`SEQ_FLOOR_KEY`):
    each run reserves :data:`SEQ_BLOCK` numbers ahead and a later run starts at
    the floor when its clock is behind it.
    """
    return int(now * 1000) * SEQS_PER_MS


@implementer(IWorld)
@attrs.define(eq=False)
class SandboxWorld:
    """An in-memory world written through to ``store`` (an ``IWorldStore``, or None).

    Build one with :meth:`load` (from a store, seeded from a world file the
    first time) or :meth:`from_file` (no persistence, for tests and tools).
    ``clock`` (a reactor or ``task.Clock``) stamps messages and new objects;
    ``log_size`` bounds what each character's heard log keeps.
    """

    store: Any = None
    clock: _Clock | None = None
    log_size: int = 200
    name: str = attrs.field(default="sandbox", init=False)
    meta: dict[str, Any] = attrs.field(factory=dict, init=False)
    objects: WorldObjects = attrs.field(factory=WorldObjects, init=False)
    """Every object and where it is (the internal API the commands share)."""
    _channels: dict[str, Channel] = attrs.field(factory=dict, init=False)
    _prototypes: dict[str, Prototype] = attrs.field(factory=dict, init=False)
    _help: dict[str, HelpEntry] = attrs.field(factory=dict, init=False)
    hearing: Hearing = attrs.field(init=False, default=attrs.Factory(
        lambda self: Hearing(self.log_size), takes_self=True))
    """The heard logs, listeners and observers (the part that delivers messages)."""
    _seq: int = attrs.field(default=0, init=False)
    _seq_limit: int | None = attrs.field(default=None, init=False)
    """Numbers up to here (included) are reserved in the store (None: no store)."""
    _seq_floor: int = attrs.field(default=0, init=False)
    """The store's floor as loaded (kept out of :attr:`meta`: not world content)."""
    _heard_log: Any = attrs.field(default=None, init=False)
    """The store, when it keeps a heard log (IHeardLog) and this world numbers messages."""
    _keeping: dict[int, defer.Deferred[None]] = attrs.field(factory=dict, init=False)
    """Heard-log writes in flight, by message number."""
    _unkept: dict[int, str] = attrs.field(factory=dict, init=False)
    """Messages whose heard-log write failed, and why (the newest ``_UNKEPT_KEEP``)."""
    _heard_failures: RepeatedFailure = attrs.field(init=False, default=attrs.Factory(
        lambda self: RepeatedFailure("Heard messages could not be kept in the store",
                                     self._log), takes_self=True))
    _write_failures: RepeatedFailure = attrs.field(init=False, default=attrs.Factory(
        lambda self: RepeatedFailure("Sandbox world: writing changes to the store failed",
                                     self._log), takes_self=True))
    """Failed store writes, one log line per class (a full disk fails them all)."""
    _changes: int = attrs.field(default=0, init=False)
    """Changes made to the world (each written): a world file applied off the reactor is
    put in place only if none came meanwhile."""
    seed_file: Path | None = attrs.field(default=None, init=False)
    """The world file :meth:`load` was given (None: none, or world data)."""
    file_changed: bool = attrs.field(default=False, init=False)
    """The world file changed since it was last applied (see :meth:`apply_seed`)."""

    _log = Logger()

    # ------------------------------------------------------------------
    # building the world
    # ------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        store: Any,
        seed: str | Path | Mapping[str, Any] | None = None,
        clock: _Clock | None = None,
        log_size: int = 200,
    ) -> defer.Deferred[SandboxWorld]:
        """Load the world saved in ``store`` (already open; None: keep it in memory only).

        When the store holds no world yet, the world comes from ``seed`` — a
        world file path or world data (``parse_world``'s result) — and is
        written to the store in one transaction before the Deferred fires.
        With a store, message numbers (``seq``) start above every number the
        runs before this one gave (:func:`first_message_seq`), so a reader
        that polls with ``after=SEQ`` is never shown an old number again.
        Without a seed the world starts empty.  A bad world file fails the
        Deferred with :class:`~ai_tools.errors.ConfigError`.
        """
        world = cls(store=store, clock=clock, log_size=log_size)
        if isinstance(seed, str | Path):
            world.seed_file = Path(seed)

        def loaded(data: Mapping[str, Any] | None) -> Any:
            if data is not None:
                world.populate(data)
                world._log.info(
                    "Sandbox world {name} loaded: {count} objects",
                    name=world.meta.get("name"),
                    count=len(world.objects),
                )
                started = world._start_numbering()
                started.addCallback(lambda _: world._restore_heard())
                return started.addCallback(lambda _: world._check_seed_file()) \
                    .addCallback(lambda _: world)
            data = seed_data(seed)
            world.populate(data)
            if world.seed_file is not None:
                world.meta[DIGEST_KEY] = world_digest(data)
            world._log.info(
                "Sandbox world {name} seeded: {count} objects",
                name=world.meta.get("name"),
                count=len(world.objects),
            )
            world._start_numbering()
            return world._persist_all().addCallback(lambda _: world)

        if store is None:
            return defer.maybeDeferred(loaded, None)
        return defer.maybeDeferred(store.load_world).addCallback(loaded)

    def _start_numbering(self) -> defer.Deferred[None]:
        """With a store: message numbers start above every number an earlier run gave
        (its start time, or the store's floor when the clock is behind it), and the
        first block of numbers is reserved (see :func:`first_message_seq`)."""
        if self.store is None:
            return defer.succeed(None)
        floor = self._seq_floor
        by_clock = first_message_seq(self._now())
        if floor > by_clock:
            self._log.warn("The clock is behind the messages of an earlier run; message "
                           "numbers go on from the store's floor ({floor})", floor=floor)
        self._seq = max(by_clock, floor)
        self._heard_log = self.store if IHeardLog.providedBy(self.store) else None
        return self._reserve_numbers()

    def _reserve_numbers(self) -> defer.Deferred[None]:
        """Record in the store that numbers up to the next block may be given."""
        self._seq_limit = self._seq + SEQ_BLOCK
        return self._write({"meta": {SEQ_FLOOR_KEY: self._seq_limit}})

    def _restore_heard(self) -> defer.Deferred[None]:
        """Refill each character's heard log from the store's (IHeardLog), if it keeps one."""
        if self._heard_log is None:
            return defer.succeed(None)
        return self._heard_log.load_heard(HEARD_KEEP).addCallback(self._remember_all)

    def _remember_all(self, rows: list[tuple[int, str, str]]) -> None:
        restored = 0
        for seq, data, receivers in rows:
            try:
                message = WorldMessage(**json.loads(data), seq=seq)
                heard_by = [str(r) for r in json.loads(receivers)]
            except (TypeError, ValueError) as exc:
                self._log.warn("Heard message {seq} in the store is not valid ({error}); "
                               "skipped", seq=seq, error=str(exc))
                continue
            self.hearing.remember(message, heard_by)
            restored += 1
        if restored:
            self._log.info("Sandbox world: {count} heard message(s) restored", count=restored)

    def _check_seed_file(self) -> defer.Deferred[None]:
        """Say at start-up when the world file changed since it was applied (not applied now)."""
        if self.seed_file is None:
            return defer.succeed(None)
        try:
            digest = world_digest(load_world_file(self.seed_file))
        except Exception as exc:
            self._log.warn("The world file {file} cannot be read now ({error}); the world "
                           "saved in the store is used", file=str(self.seed_file),
                           error=str(exc))
            return defer.succeed(None)
        saved = self.meta.get(DIGEST_KEY)
        if saved is None:  # a store seeded before digests were kept: take the file as applied
            self.meta[DIGEST_KEY] = digest
            return self._write({"meta": {DIGEST_KEY: digest}})
        if saved != digest:
            self.file_changed = True
            self._log.warn(
                "The world file {file} changed since the world was seeded from it; the world "
                "saved in the store is used, the file is not applied. To apply it (the "
                "assistants keep their memories): POST /world/apply with {{\"mode\": "
                "\"merge\"}} (add and update the file's rows, keep what was made in the game) "
                "or {{\"mode\": \"reseed\"}} (the world becomes the file's)",
                file=str(self.seed_file))
        return defer.succeed(None)

    def apply_seed(self, mode: str, keep: Iterable[str] = ()) -> defer.Deferred[dict[str, Any]]:
        """Apply the world file again: ``merge`` or ``reseed`` (see :mod:`ai_tools.world.seeding`).

        ``keep``: object ids that must still exist afterwards (the assistants'
        characters): else ConfigError and nothing changes.  Fires with
        ``{"mode", "objects", "deleted"}`` once written.  ConfigError when the
        world was not loaded from a world file, the file is larger than
        :data:`MAX_APPLY_BYTES` or not valid.  The file is read, parsed and
        checked in the reactor's thread pool (it may be megabytes: the reactor
        goes on serving meanwhile); the world is then changed in one step.
        """
        if self.seed_file is None:
            return defer.fail(ConfigError("this world was not loaded from a world file"))
        if mode not in ("merge", "reseed"):
            return defer.fail(ConfigError(f"mode must be merge or reseed, not {mode!r}"))
        read = self._off_reactor(_read_seed_file, self.seed_file)
        read.addCallback(self._apply_seed_data, mode, frozenset(keep))
        return read

    def _apply_seed_data(self, read: tuple[dict[str, Any], str], mode: str,
                         keep: frozenset[str], attempt: int = 1) -> defer.Deferred[Any]:
        """Merge the checked file's rows with the world as it is now (on the reactor),
        build the new objects off it, then put them in place in one step."""
        data, digest = read
        changes = self._changes
        current = self.snapshot()
        deletes: dict[str, list[str]]
        if mode == "merge":
            world, deletes = merged_world(current, data), {}
        else:
            world, deletes = reseeded_world(current, data)
        ids = {row.get("id") for row in world["objects"]}
        lost = sorted(keep - ids)
        if lost:
            return defer.fail(ConfigError(
                f"the world file has no {', '.join(lost)}, which an assistant plays"))
        world["meta"][DIGEST_KEY] = digest
        built = (self._off_reactor(_PreparedWorld.build, world, True)
                 if attempt < _APPLY_ATTEMPTS  # the last attempt: in one step, here
                 else defer.succeed(_PreparedWorld.build(world, True)))
        built.addCallback(self._put_in_place, read, mode, keep, attempt, changes, deletes)
        return built

    def _put_in_place(self, prepared: _PreparedWorld, read: tuple[dict[str, Any], str],
                      mode: str, keep: frozenset[str], attempt: int, changes: int,
                      deletes: dict[str, list[str]]) -> defer.Deferred[Any]:
        """The new world replaces the old one, unless the game changed it meanwhile
        (then merged again with the change: the last attempt all on the reactor)."""
        if self._changes != changes:
            return self._apply_seed_data(read, mode, keep, attempt + 1)
        self._install(prepared)
        self.file_changed = False
        self._log.info("World file {file} applied ({mode}): {count} objects",
                       file=str(self.seed_file), mode=mode, count=len(self.objects))
        done = self._write(prepared.rows or self.snapshot(), deletes)
        return done.addCallback(lambda _: {"mode": mode, "objects": len(self.objects),
                                           "deleted": sum(map(len, deletes.values()))})

    def _off_reactor(self, work: Callable[..., Any], *args: Any) -> defer.Deferred[Any]:
        """``work(*args)`` (blocking, touching nothing of the world) in the reactor's
        thread pool; at once when the clock has none (a ``task.Clock`` in tests)."""
        clock = or_global_reactor(self.clock)
        if IReactorThreads.providedBy(clock):
            threaded: Any = clock
            return threads.deferToThreadPool(threaded, threaded.getThreadPool(), work, *args)
        return defer.maybeDeferred(work, *args)

    @classmethod
    def from_file(cls, path: str | Path, clock: _Clock | None = None) -> SandboxWorld:
        """A world from a world file, kept in memory only (no store)."""
        world = cls(clock=clock)
        world.populate(load_world_file(path))
        return world

    def populate(self, data: Mapping[str, Any]) -> None:
        """Replace the in-memory world with world data (rows), without writing anything."""
        self._install(_PreparedWorld.build(data))

    def _install(self, prepared: _PreparedWorld) -> None:
        """Put a built world in place (quick: the objects are made already)."""
        self._changes += 1
        self.objects.replace(prepared.objects)  # (none lost: build placed them)
        for obj_id, location in prepared.lost:
            self._log.warn("Object {id} is in missing location {location}; it is now nowhere",
                           id=obj_id, location=location)
        self._channels = prepared.channels
        self._prototypes = prepared.prototypes
        self._help = prepared.help
        self.meta = prepared.meta
        floor = self.meta.pop(SEQ_FLOOR_KEY, None)
        if type(floor) is int:
            self._seq_floor = max(self._seq_floor, floor)

    def snapshot(self) -> dict[str, Any]:
        """The whole world as world data (rows), e.g. to export it."""
        return {
            "objects": [o.to_row() for o in self.objects.values()],
            "channels": [c.to_row() for c in self._channels.values()],
            "prototypes": [p.to_row() for p in self._prototypes.values()],
            "help": [h.to_row() for h in self._help.values()],
            "meta": copy.deepcopy(self.meta),
        }

    # ------------------------------------------------------------------
    # persistence
    # ------------------------------------------------------------------

    def _now(self) -> float:
        clock = or_global_reactor(self.clock)
        return float(clock.seconds())

    def _write(
        self, put: Mapping[str, Any], delete: Mapping[str, list[str]] | None = None
    ) -> defer.Deferred[None]:
        self._changes += 1  # (every change of the world is written: see apply_seed)
        if self.store is None:
            return defer.succeed(None)

        def failed(failure: Failure) -> Failure:
            self._write_failures.failed(failure)
            return failure

        def written(result: Any) -> Any:
            self._write_failures.worked()
            return result

        d = defer.maybeDeferred(self.store.write_world, put, delete)
        d.addCallbacks(written, failed)
        return d

    def _persist(self, *objects: WorldObject) -> defer.Deferred[None]:
        return self._write({"objects": [o.to_row() for o in objects]})

    def _persist_all(self) -> defer.Deferred[None]:
        return self._write(self.snapshot())

    # ------------------------------------------------------------------
    # lookups
    # ------------------------------------------------------------------

    def contents(self, location_id: str) -> list[dict[str, Any]]:
        """Object dicts of what is directly in ``location_id`` (NotFound if unknown)."""
        self.objects.require(location_id, "location")
        return [obj.as_dict() for obj in self.objects.inside(location_id)]

    def get_object(self, obj_id: Any) -> dict[str, Any] | None:
        """The object dict of ``obj_id``, or None."""
        obj = self.objects.get(obj_id)
        return obj.as_dict() if obj is not None else None

    def character_ids(self) -> list[str]:
        """The ids of every character in the world, sorted (start-up checks, messages)."""
        return sorted(obj.id for obj in self.objects.values() if obj.kind == "character")

    def room_ids(self) -> list[str]:
        """The ids of every room in the world, sorted (the operator's API lists them)."""
        return sorted(obj.id for obj in self.objects.values() if obj.kind == "room")

    def describe_location(self, char_id: str, detail: str = "normal") -> dict[str, Any]:
        """The room ``char_id`` stands in, its exits, things and other characters."""
        if detail not in ("brief", "normal", "detailed"):
            raise ValueError(f"detail must be brief, normal or detailed, not {detail!r}")
        char = self.objects.character(char_id)
        room = self.objects.room_of(char)
        exits, contents, characters = [], [], []
        for obj in self.objects.inside(room.id):
            if obj.id == char.id:
                continue
            if obj.kind == "exit":
                exits.append(
                    {
                        "id": obj.id,
                        "key": obj.key,
                        "aliases": list(obj.aliases),
                        "destination": obj.destination,
                    }
                )
            elif obj.kind == "character":
                characters.append(obj.as_dict(detail))
            else:
                contents.append(obj.as_dict(detail))
        return {
            "room": room.as_dict(detail),
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
    ) -> list[dict[str, Any]]:
        """Objects whose key or aliases match ``query``: exact, then prefix, then substring.

        An exact id finds that object.  Ties go to what is in ``char_id``'s
        room (or carried), then to the oldest object.
        """
        return [o.as_dict() for o in self.objects.search(query, char_id, location, kind, limit)]

    # ------------------------------------------------------------------
    # attributes and tags
    # ------------------------------------------------------------------

    def get_attributes(self, obj_id: str, names: Iterable[str] | None = None) -> dict[str, Any]:
        """``{name: value}`` of the object's attributes (all, or those in ``names``)."""
        obj = self.objects.require(obj_id)
        wanted = set(names) if names is not None else None
        return {
            k: copy.deepcopy(v) for k, v in obj.attributes.items() if wanted is None or k in wanted
        }

    def can_edit(self, char_id: str, obj_id: str) -> bool:
        """Whether ``char_id`` may change ``obj_id`` (see :mod:`ai_tools.world.permissions`)."""
        return may_edit(self.objects.character(char_id), self.objects.require(obj_id))

    def _check_edit(self, char: WorldObject, obj: WorldObject, action: str) -> None:
        if not may_edit(char, obj):
            needs = "Admin" if obj.kind == "character" else BUILDER
            raise PermissionDenied(
                f"{char.key} may not {action} on {obj.key} ({obj.id}): needs {needs} rights"
                " or ownership"
            )

    def set_attribute(
        self, char_id: str, obj_id: str, name: str, value: Any
    ) -> defer.Deferred[dict[str, Any]]:
        """Set attribute ``name`` of ``obj_id`` to a JSON value, as ``char_id``."""
        return defer.maybeDeferred(self._set_attribute, char_id, obj_id, name, value)

    def _set_attribute(
        self, char_id: str, obj_id: str, name: str, value: Any
    ) -> defer.Deferred[dict[str, Any]]:
        char = self.objects.character(char_id)
        obj = self.objects.require(obj_id)
        name = _check_attribute_name(name)
        self._check_edit(char, obj, f"set attribute {name!r}")
        obj.attributes[name] = _json_copy(value, f"attribute {name!r}")
        self._log.info("{char} set attribute {name} on {obj}", char=char.id, name=name, obj=obj.id)
        return self._persist(obj).addCallback(lambda _: obj.as_dict())

    def delete_attribute(self, char_id: str, obj_id: str, name: str) -> defer.Deferred[bool]:
        """Remove attribute ``name`` of ``obj_id`` as ``char_id``; fires True if it existed."""
        return defer.maybeDeferred(self._delete_attribute, char_id, obj_id, name)

    def _delete_attribute(self, char_id: str, obj_id: str, name: str) -> defer.Deferred[bool]:
        char = self.objects.character(char_id)
        obj = self.objects.require(obj_id)
        name = _check_attribute_name(name)
        self._check_edit(char, obj, f"delete attribute {name!r}")
        if name not in obj.attributes:
            return defer.succeed(False)
        del obj.attributes[name]
        return self._persist(obj).addCallback(lambda _: True)

    def get_tags(self, obj_id: str, category: str | None = None) -> list[dict[str, Any]]:
        """``[{"tag", "category"}]`` on ``obj_id`` (only ``category``'s when given)."""
        obj = self.objects.require(obj_id)
        cat = category.casefold() if category else None
        return [{"tag": t, "category": c} for t, c in obj.tags if cat is None or c == cat]

    def _check_tag(
        self, char: WorldObject, obj: WorldObject, tag: Any, category: Any
    ) -> tuple[str, str | None]:
        pair = normalise_tag(tag, category)
        self._check_edit(char, obj, f"change tag {pair[0]!r}")
        if pair[1] == SYSTEM_TAG_CATEGORY and not holds(char.permissions, DEVELOPER):
            raise PermissionDenied(
                f"tags in category {SYSTEM_TAG_CATEGORY!r} need Developer rights"
            )
        return pair

    def add_tag(
        self, char_id: str, obj_id: str, tag: str, category: str | None = None
    ) -> defer.Deferred[dict[str, Any]]:
        """Add a tag as ``char_id``; fires with the object dict."""
        return defer.maybeDeferred(self._add_tag, char_id, obj_id, tag, category)

    def _add_tag(
        self, char_id: str, obj_id: str, tag: str, category: str | None
    ) -> defer.Deferred[dict[str, Any]]:
        char = self.objects.character(char_id)
        obj = self.objects.require(obj_id)
        pair = self._check_tag(char, obj, tag, category)
        if pair in obj.tags:
            return defer.succeed(obj.as_dict())
        obj.tags.append(pair)
        return self._persist(obj).addCallback(lambda _: obj.as_dict())

    def remove_tag(
        self, char_id: str, obj_id: str, tag: str, category: str | None = None
    ) -> defer.Deferred[bool]:
        """Remove a tag as ``char_id``; fires True if it was there."""
        return defer.maybeDeferred(self._remove_tag, char_id, obj_id, tag, category)

    def _remove_tag(
        self, char_id: str, obj_id: str, tag: str, category: str | None
    ) -> defer.Deferred[bool]:
        char = self.objects.character(char_id)
        obj = self.objects.require(obj_id)
        pair = self._check_tag(char, obj, tag, category)
        if pair not in obj.tags:
            return defer.succeed(False)
        obj.tags.remove(pair)
        return self._persist(obj).addCallback(lambda _: True)

    def search_by_tag(
        self, tag: str, category: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Objects carrying ``tag`` (in ``category`` if given), oldest first."""
        name, cat = normalise_tag(tag, category)
        found = [
            o.as_dict()
            for o in self.objects.values()
            if any(t == name and (cat is None or c == cat) for t, c in o.tags)
        ]
        return found[: max(limit, 0)]

    # ------------------------------------------------------------------
    # permissions and prototypes
    # ------------------------------------------------------------------

    def has_permission(self, char_id: str, permission: str) -> bool:
        """Whether ``char_id`` holds ``permission`` or one above it in the hierarchy."""
        char = self.objects.get(char_id)
        if char is None or char.kind != "character":
            return False
        return holds(char.permissions, str(permission))

    def _check_builder(self, char: WorldObject, action: str, permission: str = BUILDER) -> None:
        if not holds(char.permissions, permission):
            raise PermissionDenied(f"{char.key} may not {action}: needs {permission} rights")

    def list_prototypes(self) -> list[dict[str, Any]]:
        """``[{"key", "description", "permission"}]`` sorted by key."""
        return sorted(
            (
                {"key": p.key, "description": p.description, "permission": p.permission}
                for p in self._prototypes.values()
            ),
            key=lambda p: p["key"].casefold(),
        )

    def spawn_prototype(
        self,
        char_id: str,
        prototype_key: str,
        location: str | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> defer.Deferred[dict[str, Any]]:
        """Create an object from a prototype as ``char_id`` (Builder, or the prototype's
        permission); it goes to ``location`` or the character's room and is owned by it.

        ``overrides``: ``key``, ``aliases``, ``description`` (or ``desc``),
        ``attributes`` (a mapping), ``tags``; any other key is an attribute.
        Keys that would change identity or rights are refused.
        """
        return defer.maybeDeferred(
            self._spawn_prototype, char_id, prototype_key, location, overrides
        )

    def _spawn_prototype(
        self,
        char_id: str,
        prototype_key: str,
        location: str | None,
        overrides: Mapping[str, Any] | None,
    ) -> defer.Deferred[dict[str, Any]]:
        char = self.objects.character(char_id)
        self._check_builder(char, "spawn prototypes")
        proto = self._prototypes.get(str(prototype_key or "").strip().casefold())
        if proto is None:
            raise NotFound(f"no prototype called {prototype_key!r}")
        self._check_builder(char, f"spawn {proto.key!r}", proto.permission)
        target = self._place_for(char, location)
        if target.kind == "exit":
            raise ValueError("an exit cannot hold objects")
        spawned = _Spawned.of(proto)
        developer = holds(char.permissions, DEVELOPER)
        for name, value in (overrides or {}).items():
            spawned.override(name, value, developer)
        prefix = "char" if proto.kind == "character" else "obj"
        obj = WorldObject(
            id=unique_id(f"{prefix}:{slug(spawned.key)}", self.objects),
            key=spawned.key,
            kind=proto.kind,
            description=spawned.description,
            aliases=spawned.aliases,
            attributes=spawned.attributes,
            tags=spawned.tags,
            owner=char.id,
            created_at=self._now(),
        )
        self.objects.add(obj, target.id)
        self._log.info(
            "{char} spawned {proto} as {obj} in {location}",
            char=char.id,
            proto=proto.key,
            obj=obj.id,
            location=target.id,
        )
        return self._persist(obj).addCallback(lambda _: obj.as_dict())

    def _place_for(self, char: WorldObject, location: str | None) -> WorldObject:
        """Where a new thing goes: ``location``, or else the character's room."""
        if location:
            return self.objects.require(location, "location")
        return self.objects.room_of(char)

    # ------------------------------------------------------------------
    # building (used by the commands; also callable directly)
    # ------------------------------------------------------------------

    def create_object(
        self,
        char_id: str,
        key: str,
        description: str = "",
        aliases: Iterable[str] = (),
        location: str | None = None,
    ) -> defer.Deferred[dict[str, Any]]:
        """Create a plain object as ``char_id`` (Builder) in ``location`` or its room."""
        return defer.maybeDeferred(
            self._create_object, char_id, key, description, aliases, location
        )

    def _create_object(
        self,
        char_id: str,
        key: str,
        description: str,
        aliases: Iterable[str],
        location: str | None,
    ) -> defer.Deferred[dict[str, Any]]:
        char = self.objects.character(char_id)
        self._check_builder(char, "create objects")
        name = str(key or "").strip()
        if not name:
            raise ValueError("an object needs a name")
        target = self._place_for(char, location)
        obj = WorldObject(
            id=unique_id(f"obj:{slug(name)}", self.objects),
            key=name,
            kind="object",
            description=str(description),
            aliases=[a.strip() for a in aliases if a.strip()],
            owner=char.id,
            created_at=self._now(),
        )
        self.objects.add(obj, target.id)
        return self._persist(obj).addCallback(lambda _: obj.as_dict())

    def dig(
        self,
        char_id: str,
        room_key: str,
        room_aliases: Iterable[str] = (),
        exit_key: str | None = None,
        exit_aliases: Iterable[str] = (),
        back_key: str | None = None,
        back_aliases: Iterable[str] = (),
    ) -> defer.Deferred[dict[str, Any]]:
        """Create a room as ``char_id`` (Builder), optionally with an exit to it from
        the character's room and one back; all written in one transaction.

        Fires with ``{"room": {...}, "exits": [{...}]}``.
        """
        return defer.maybeDeferred(
            self._dig,
            char_id,
            room_key,
            room_aliases,
            exit_key,
            exit_aliases,
            back_key,
            back_aliases,
        )

    def _dig(
        self,
        char_id: str,
        room_key: str,
        room_aliases: Iterable[str],
        exit_key: str | None,
        exit_aliases: Iterable[str],
        back_key: str | None,
        back_aliases: Iterable[str],
    ) -> defer.Deferred[dict[str, Any]]:
        char = self.objects.character(char_id)
        self._check_builder(char, "dig rooms")
        name = str(room_key or "").strip()
        if not name:
            raise ValueError("a room needs a name")
        here = self.objects.room_of(char) if (exit_key or back_key) else None
        now = self._now()
        room = WorldObject(
            id=unique_id(f"room:{slug(name)}", self.objects),
            key=name,
            kind="room",
            aliases=[a.strip() for a in room_aliases if a.strip()],
            owner=char.id,
            created_at=now,
        )
        self.objects.add(room, None)
        created = [room]
        if here is not None and exit_key:
            created.append(self._new_exit(char, here, room, exit_key, exit_aliases, now))
        if here is not None and back_key:
            created.append(self._new_exit(char, room, here, back_key, back_aliases, now))
        return self._persist(*created).addCallback(
            lambda _: {"room": room.as_dict(), "exits": [e.as_dict() for e in created[1:]]}
        )

    def _new_exit(
        self,
        char: WorldObject,
        source: WorldObject,
        destination: WorldObject,
        key: str,
        aliases: Iterable[str],
        now: float,
    ) -> WorldObject:
        exit_ = WorldObject(
            id=unique_id(f"exit:{slug(source.id.split(':')[-1])}-{slug(key)}", self.objects),
            key=key.strip(),
            kind="exit",
            destination=destination.id,
            aliases=[a.strip() for a in aliases if a.strip()],
            owner=char.id,
            created_at=now,
        )
        self.objects.add(exit_, source.id)
        return exit_

    def set_description(
        self, char_id: str, obj_id: str, text: str
    ) -> defer.Deferred[dict[str, Any]]:
        """Change ``obj_id``'s description as ``char_id`` (edit rights)."""
        return defer.maybeDeferred(self._set_description, char_id, obj_id, text)

    def _set_description(
        self, char_id: str, obj_id: str, text: str
    ) -> defer.Deferred[dict[str, Any]]:
        char = self.objects.character(char_id)
        obj = self.objects.require(obj_id)
        self._check_edit(char, obj, "describe")
        obj.description = str(text)
        return self._persist(obj).addCallback(lambda _: obj.as_dict())

    def create_character(
        self,
        key: str,
        location: str | None = None,
        permissions: Iterable[str] = ("Player",),
        char_id: str | None = None,
        description: str = "",
    ) -> defer.Deferred[dict[str, Any]]:
        """Add a character (an operator action: no acting character, no permission check).

        Goes to ``location`` or the world's start room and joins the channels
        every character joins (``auto_join``).
        """
        return defer.maybeDeferred(
            self._create_character, key, location, permissions, char_id, description
        )

    def _create_character(
        self,
        key: str,
        location: str | None,
        permissions: Iterable[str],
        char_id: str | None,
        description: str,
    ) -> defer.Deferred[dict[str, Any]]:
        name = str(key or "").strip()
        if not name:
            raise ValueError("a character needs a name")
        if char_id is not None and char_id in self.objects:
            raise ValueError(f"id {char_id!r} is taken")
        place = location or self.meta.get("start_room")
        if place is not None:
            target = self.objects.require(place, "location")
            if target.kind != "room":
                raise ValueError(f"{place!r} is not a room")
        char = WorldObject(
            id=char_id or unique_id(f"char:{slug(name)}", self.objects),
            key=name,
            kind="character",
            description=str(description),
            permissions=list(permissions),
            created_at=self._now(),
        )
        self.objects.add(char, place)
        joined = [c for c in self._channels.values() if c.auto_join]
        for channel in joined:
            channel.subscribers.append(char.id)
        put = {"objects": [char.to_row()], "channels": [c.to_row() for c in joined]}
        return self._write(put).addCallback(lambda _: char.as_dict())

    def move_character(self, char_id: str, destination: str) -> defer.Deferred[dict[str, Any]]:
        """Move ``char_id`` through an exit of its room (``destination``: the exit's
        id, key or alias).  The rooms hear it leave and arrive (``system``
        messages).  Fires with the new room's dict."""
        return defer.maybeDeferred(self._move_character, char_id, destination)

    def find_exit(self, char_id: str, name: str) -> dict[str, Any] | None:
        """The exit of ``char_id``'s room called ``name`` (id, key or alias), or None."""
        exit_ = self.objects.find_exit(self.objects.character(char_id), name)
        return exit_.as_dict() if exit_ is not None else None

    def _move_character(self, char_id: str, destination: str) -> defer.Deferred[dict[str, Any]]:
        char = self.objects.character(char_id)
        self.objects.room_of(char)
        exit_ = self.objects.find_exit(char, destination)
        if exit_ is None:
            raise NotFound(f"there is no exit {destination!r} here")
        target = self.objects.get(exit_.destination or "")
        if target is None:
            raise NotFound(f"the exit {exit_.key!r} leads nowhere")
        old_room = char.location
        self._announce(char, old_room, f"{char.key} leaves {exit_.key}.")
        self.objects.place(char, target.id)
        self._announce(char, target.id, f"{char.key} arrives.")
        return self._persist(char).addCallback(lambda _: target.as_dict())

    def _announce(self, char: WorldObject, room_id: str | None, text: str) -> None:
        hearers = [o.id for o in self.objects.inside(room_id)
                   if o.kind == "character" and o.id != char.id]
        message = self._message("system", text, char, location_id=room_id)
        self._deliver(message, hearers)

    # ------------------------------------------------------------------
    # commands
    # ------------------------------------------------------------------

    def execute_command(self, char_id: str, command: str) -> defer.Deferred[dict[str, Any]]:
        """Run one command line as ``char_id`` with its own rights.

        Fires with ``{"command", "output": [lines], "success": bool}`` and, when
        it did not succeed, ``"error"`` (``unknown_command``, ``usage``,
        ``permission_denied``, ``not_found``, ``ambiguous``, ``invalid``).
        Refusals are reported in the output like a game would; only an unknown
        acting character (``NotFound``) or a failed store write fails the Deferred.  See
        :mod:`ai_tools.world.commands` for the commands.
        """
        return defer.maybeDeferred(run_command, self, char_id, command)

    # ------------------------------------------------------------------
    # messages and hearing
    # ------------------------------------------------------------------

    def _message(
        self,
        kind: str,
        text: str,
        sender: WorldObject,
        location_id: str | None = None,
        target_id: str | None = None,
        channel: str | None = None,
    ) -> WorldMessage:
        self._seq += 1
        if self._seq_limit is not None and self._seq >= self._seq_limit:
            self._reserve_numbers().addErrback(lambda _: None)  # (logged by _write)
        return WorldMessage(
            kind=kind,
            text=text,
            sender_id=sender.id,
            sender_key=sender.key,
            location_id=location_id,
            target_id=target_id,
            channel=channel,
            timestamp=self._now(),
            seq=self._seq,
        )

    def _deliver(self, message: WorldMessage, receivers: list[str]) -> None:
        """A message said in this world: heard now, and kept in the store's heard log."""
        self.hearing.hear(message, receivers)
        if self._heard_log is not None:
            data = attrs.asdict(message)
            seq = data.pop("seq")
            row = (seq, compact_ascii_json(data), compact_ascii_json(list(receivers)))
            writing = self._keeping[seq] = self._heard_log.append_heard([row], HEARD_KEEP)
            writing.addErrback(self._heard_not_kept, seq)
            writing.addBoth(self._heard_written, seq)

    def _heard_written(self, result: Any, seq: int) -> Any:
        del self._keeping[seq]
        if seq not in self._unkept:
            self._heard_failures.worked()
        return result

    def _heard_not_kept(self, failure: Failure, seq: int) -> None:
        self._unkept[seq] = failure.getErrorMessage() or type(failure.value).__name__
        while len(self._unkept) > _UNKEPT_KEEP:
            del self._unkept[next(iter(self._unkept))]
        self._heard_failures.failed(failure, message=seq)

    def heard_kept(self) -> defer.Deferred[None]:
        """Fires once the newest message said is in the store's heard log (at once
        without one); fails with :class:`~ai_tools.errors.AIToolsError` if that write
        failed.  The HTTP API calls it right after a player's message, and answers
        once it fires."""
        seq = self._seq
        writing = self._keeping.get(seq)
        if writing is None:
            return self._kept_or_not(seq)
        done: defer.Deferred[None] = defer.Deferred()

        def settled(result: Any) -> Any:
            self._kept_or_not(seq).chainDeferred(done)
            return result

        writing.addBoth(settled)
        return done

    def _kept_or_not(self, seq: int) -> defer.Deferred[None]:
        error = self._unkept.get(seq)
        if error is None:
            return defer.succeed(None)
        return defer.fail(AIToolsError(f"the heard log was not written: {error}"))

    def message_location(
        self, char_id: str, text: str, kind: str = "say", exclude: Iterable[str] = (),
        dedupe_key: str | None = None,
    ) -> list[str]:
        """Say, pose or emit (Builder) ``text`` in the character's room; returns who heard it.

        The speaker does not hear itself.  ``dedupe_key`` is kept by the shared
        world only: in one process each call runs once.
        """
        if kind not in ROOM_KINDS:
            raise ValueError(f"unknown message kind {kind!r} (say, pose or emit)")
        char = self.objects.character(char_id)
        room = self.objects.room_of(char)
        if kind == "emit":
            self._check_builder(char, "emit")
        skip = set(exclude)
        hearers = [
            o.id
            for o in self.objects.inside(room.id)
            if o.kind == "character" and o.id != char.id and o.id not in skip
        ]
        self._deliver(self._message(kind, str(text), char, location_id=room.id), hearers)
        return hearers

    def message_character(
        self, char_id: str, target_id: str, text: str, kind: str = "whisper",
        dedupe_key: str | None = None,
    ) -> list[str]:
        """Whisper (same room) or page (anywhere) ``text`` to one character.

        Returns ``[target_id]``.  ``dedupe_key``: as for :meth:`message_location`.
        """
        if kind not in DIRECT_KINDS:
            raise ValueError(f"unknown message kind {kind!r} (whisper or page)")
        char = self.objects.character(char_id)
        target = self.objects.character(target_id)
        if target.id == char.id:
            raise ValueError(f"{char.key} cannot {kind} to itself")
        if kind == "whisper" and (target.location is None or target.location != char.location):
            raise NotFound(f"{target.key} is not here to whisper to")
        message = self._message(
            kind, str(text), char, location_id=char.location, target_id=target.id
        )
        self._deliver(message, [target.id])
        return [target.id]

    def _channel(self, key: Any) -> Channel:
        channel = self._channels.get(str(key or "").strip().casefold())
        if channel is None:
            raise NotFound(f"no channel called {key!r}")
        return channel

    def channel_key(self, channel: str) -> str:
        """The name of the channel ``channel`` names (any case); NotFound if there is none."""
        return self._channel(channel).key

    def channel_send(self, char_id: str, channel: str, text: str,
                     dedupe_key: str | None = None) -> list[str]:
        """Post ``text`` on a channel as ``char_id``; returns the subscribers who received it.

        ``dedupe_key``: as for :meth:`message_location`.
        """
        char = self.objects.character(char_id)
        chan = self._channel(channel)
        if chan.send_permission and not holds(char.permissions, chan.send_permission):
            raise PermissionDenied(
                f"{char.key} may not post on {chan.key}: needs {chan.send_permission} rights"
            )
        receivers = [s for s in chan.subscribers if s != char.id and s in self.objects]
        message = self._message("channel", str(text), char, channel=chan.key)
        self._deliver(message, receivers)
        return receivers

    def list_channels(self) -> list[dict[str, Any]]:
        """``[{"key", "description", "subscribers"}]`` sorted by key."""
        return sorted(
            (
                {"key": c.key, "description": c.description, "subscribers": len(c.subscribers)}
                for c in self._channels.values()
            ),
            key=lambda c: str(c["key"]).casefold(),
        )

    def channel_subscribe(
        self, char_id: str, channel: str, subscribe: bool = True
    ) -> defer.Deferred[bool]:
        """Join (or leave) a channel; fires True if that changed anything."""
        return defer.maybeDeferred(self._channel_subscribe, char_id, channel, subscribe)

    def _channel_subscribe(
        self, char_id: str, channel: str, subscribe: bool
    ) -> defer.Deferred[bool]:
        char = self.objects.character(char_id)
        chan = self._channel(channel)
        if (char.id in chan.subscribers) == subscribe:
            return defer.succeed(False)
        if subscribe:
            chan.subscribers.append(char.id)
        else:
            chan.subscribers.remove(char.id)
        return self._write({"channels": [chan.to_row()]}).addCallback(lambda _: True)

    def subscribe(self, char_id: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener(WorldMessage)`` for everything ``char_id`` hears.

        Returns the function that unsubscribes (calling it twice is harmless).
        A listener that raises is logged; delivery to the others goes on.
        """
        return self.hearing.subscribe(self.objects.character(char_id).id, listener)

    def add_observer(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer(message, receivers)`` for every message in the world
        (for the HTTP API's event stream).  Returns the function that removes it."""
        return self.hearing.add_observer(observer)

    def heard(
        self, char_id: str, limit: int | None = None, after: int | None = None
    ) -> list[dict[str, Any]]:
        """What ``char_id`` heard, oldest first, as message dicts.

        The log keeps the last ``log_size`` messages; ``after`` keeps only
        messages with a larger ``seq``; ``limit`` keeps the newest ``limit``.
        """
        self.objects.character(char_id)
        return self.hearing.heard(char_id, limit, after)

    # ------------------------------------------------------------------
    # help
    # ------------------------------------------------------------------

    def help_search(self, query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Help entries for ``query``: ``[{"key", "text", "score", "category"}]`` best first."""
        return rank_help(self._help.values(), str(query or ""), limit)

    def help_topics(self) -> list[str]:
        """Keys of every help entry, sorted."""
        return sorted((h.key for h in self._help.values()), key=str.casefold)
