"""The sandbox world's rows and messages in PostgreSQL: one change, one transaction step.

A world change (:class:`WorldChange`) runs as one write of the store's
grouped transactions (in its own savepoint).  It

1. locks the rows it writes (``FOR UPDATE``) and the rows it only read
   (``FOR SHARE``), in key order, and checks that each still has the version
   the change was computed from (:class:`~ai_tools.errors.WorldConflict`
   otherwise: nothing of it is applied);
2. writes its rows (and tombstones for deleted ones) with the version ``-1``,
   "changed in this transaction", so a later change of the same group that
   read the old row conflicts too.  A row the change expects *absent* is
   inserted, never upserted: ``FOR UPDATE`` locks no row that does not exist
   yet, so two overlapping transactions both find it absent; the second's
   insert then waits for the first and fails when it commits (a conflict).
   Two workers seeding an empty database at once seed it exactly once.

At the very end of the transaction, :func:`finish_world_changes` raises the
**world clock** once for the whole group: the rows written get the new clock
value as their version, the group's messages the values just below it as
their ``seq``, and ``NOTIFY ai_tools_world`` carries the new value.  The clock
row stays locked until the commit, so clock values follow commit order: a
reader that saw clock ``C`` has seen every change and message numbered up
to ``C`` (:func:`world_since`), which is what lets every worker follow the
world without missing anything.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence

import attrs

from ai_tools.errors import WorldConflict
from ai_tools.json_types import JSONValue
from ai_tools.store.dbapi import DBCursor
from ai_tools.store.postgres_schema import WORLD_TABLES
from ai_tools.store.serialization import ChangeOutcome

NOTIFY_CHANNEL = "ai_tools_world"
"""The LISTEN/NOTIFY channel of world changes; the payload is the new clock value."""

CHANGED = -1
"""The version of a row written by a transaction that has not finished yet."""

_RETRYABLE_STATES = frozenset({"40P01", "40001", "55P03", "23505"})
"""Deadlock, serialization failure, lock not available, and a unique violation (a row
the change expected absent was inserted by a transaction that overlapped it): the
change conflicts, and is computed again from the world as it is now."""

_TABLES: dict[str, tuple[str, str]] = {**WORLD_TABLES, "meta": ("world_meta", "key")}
_ANY = "= ANY(%s::text[])"
"""Matches a key against a list of keys (a typed array: an empty list is fine)."""
_SECTION_ORDER = ("objects", "channels", "prototypes", "help", "meta")

Key = tuple[str, str]
"""A world row: ``(section, key)``."""



@attrs.frozen
class WorldChange:
    """One world change as the store writes it (values already JSON text).

    ``rows`` maps a section to ``[(key, json_text)]``, ``meta`` a meta key to
    JSON text, ``deletes`` a section to keys.  ``expect`` holds the version
    each row the change depends on must still have (None: must not exist);
    ``touch`` rows get a new version without new data (a place whose contents
    changed).  ``messages`` are ``(json_text, receivers, dedupe_key)``.
    """

    rows: Mapping[str, Sequence[tuple[str, str]]] = attrs.field(factory=dict)
    meta: Mapping[str, str] = attrs.field(factory=dict)
    deletes: Mapping[str, Sequence[str]] = attrs.field(factory=dict)
    expect: Mapping[Key, int | None] = attrs.field(factory=dict)
    touch: Sequence[Key] = ()
    messages: Sequence[tuple[str, Sequence[str], str | None]] = ()

    def written(self) -> set[Key]:
        """Every row this change writes, deletes or touches."""
        keys = {(section, key) for section, items in self.rows.items() for key, _ in items}
        keys.update(("meta", key) for key in self.meta)
        keys.update((section, key) for section, items in self.deletes.items() for key in items)
        keys.update(self.touch)
        return keys


@attrs.define
class AppliedChange:
    """What a change did inside the transaction; ``clock``/``seqs`` set at the end."""

    change: WorldChange
    sections: set[str]
    clock: int = 0
    seqs: list[int] = attrs.field(factory=list)

    def outcome(self) -> ChangeOutcome:
        """``{"clock", "seqs"}``: the change's version and its messages' numbers."""
        return {"clock": self.clock, "seqs": list(self.seqs)}


def apply_world_change(cursor: DBCursor, change: WorldChange) -> AppliedChange:
    """Check the change's expectations under row locks, then write its rows (step 1, 2)."""
    try:
        _lock_and_check(cursor, change)
        sections = _write_rows(cursor, change)
    except WorldConflict:
        raise
    except Exception as exc:
        if _sqlstate(exc) in _RETRYABLE_STATES:
            raise WorldConflict(f"world rows were busy: {exc}") from exc
        raise
    return AppliedChange(change, sections)


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)


def _lock_and_check(cursor: DBCursor, change: WorldChange) -> None:
    written = change.written()
    wanted = written | set(change.expect)
    conflicts: list[str] = []
    for section in _SECTION_ORDER:
        keys = sorted(key for sec, key in wanted if sec == section)
        if not keys:
            continue
        table, column = _TABLES[section]
        found: dict[str, int] = {}
        for mode, group in (("UPDATE", [k for k in keys if (section, k) in written]),
                            ("SHARE", [k for k in keys if (section, k) not in written])):
            if group:
                cursor.execute(f"SELECT {column}, version FROM {table} WHERE {column} {_ANY}"
                               f" ORDER BY {column} FOR {mode}", (group,))
                found.update((key, int(version)) for key, version in cursor.fetchall())
        for key in keys:
            if (section, key) in change.expect and found.get(key) != change.expect[section, key]:
                conflicts.append(f"{section} {key!r}")
    if conflicts:
        raise WorldConflict(f"changed meanwhile: {', '.join(conflicts[:10])}")


def _write_rows(cursor: DBCursor, change: WorldChange) -> set[str]:
    sections: set[str] = set()
    for section, keys in change.deletes.items():
        if keys:
            table, column = _TABLES[section]
            cursor.execute(f"DELETE FROM {table} WHERE {column} {_ANY}", (list(keys),))
            cursor.executemany(
                "INSERT INTO world_deleted (section, key, version) VALUES (%s, %s, %s)"
                " ON CONFLICT (section, key) DO UPDATE SET version = excluded.version",
                [(section, key, CHANGED) for key in keys])
            sections.add("deleted")
    items: dict[str, Sequence[tuple[str, str]]] = {**change.rows}
    if change.meta:
        items["meta"] = list(change.meta.items())
    for section, rows in items.items():
        if not rows:
            continue
        table, column = _TABLES[section]
        data = "value" if section == "meta" else "data"
        insert = f"INSERT INTO {table} ({column}, {data}, version) VALUES (%s, %s, {CHANGED})"
        upsert = (f"{insert} ON CONFLICT ({column}) DO UPDATE SET {data} = excluded.{data},"
                  f" version = {CHANGED}")
        # Rows expected absent are inserted once (see the module, step 2); the others
        # upserted, which keeps an existing row's place (ord): runs in the rows' order.
        absent = [change.expect.get((section, key), 0) is None for key, _ in rows]
        for is_absent, run in itertools.groupby(zip(absent, rows, strict=True),
                                                lambda pair: pair[0]):
            cursor.executemany(insert if is_absent else upsert, [row for _, row in run])
        cursor.execute(f"DELETE FROM world_deleted WHERE section = %s AND key {_ANY}",
                       (section, [key for key, _ in rows]))
        sections.add(section)
    for section in _SECTION_ORDER:
        keys = [key for sec, key in change.touch if sec == section]
        if keys:
            table, column = _TABLES[section]
            cursor.execute(f"UPDATE {table} SET version = {CHANGED} WHERE {column} {_ANY}",
                           (keys,))
            sections.add(section)
    return sections


def finish_world_changes(cursor: DBCursor, results: Sequence[object]) -> None:
    """Raise the world clock once for the group's changes; number rows and messages; NOTIFY.

    Runs last in the transaction (the clock row stays locked until the
    commit).  Does nothing when the group changed nothing in the world.
    """
    applied = [r for r in results if isinstance(r, AppliedChange)]
    if not applied:
        return
    count = sum(len(a.change.messages) for a in applied)
    cursor.execute("UPDATE world_clock SET value = value + %s RETURNING value", (count + 1,))
    clock = int(cursor.fetchone()[0])
    seq = clock - count
    rows = []
    for change in applied:
        change.clock = clock
        for text, receivers, dedupe_key in change.change.messages:
            change.seqs.append(seq)
            rows.append((seq, text, list(receivers), dedupe_key))
            seq += 1
    if rows:
        cursor.executemany(
            "INSERT INTO world_messages (seq, data, receivers, dedupe_key)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (dedupe_key) DO NOTHING", rows)
        cursor.execute(
            "INSERT INTO world_heard (character_id, seq) SELECT unnest(receivers), seq"
            " FROM world_messages WHERE seq >= %s AND seq < %s", (clock - count, clock))
    sections = set().union(*(a.sections for a in applied))
    for section in _SECTION_ORDER:
        if section in sections:
            cursor.execute(f"UPDATE {_TABLES[section][0]} SET version = %s WHERE version = %s",
                           (clock, CHANGED))
    if "deleted" in sections:
        cursor.execute("UPDATE world_deleted SET version = %s WHERE version = %s",
                       (clock, CHANGED))
    cursor.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, str(clock)))


# -- reading ----------------------------------------------------------------------------


def _clock(cursor: DBCursor) -> int:
    cursor.execute("SELECT value FROM world_clock")
    return int(cursor.fetchone()[0])


def _versioned_rows(cursor: DBCursor, section: str, where: str, params: Sequence[object]
                    ) -> list[tuple[JSONValue, int]]:
    table, _column = _TABLES[section]
    cursor.execute(f"SELECT data, version FROM {table} WHERE {where} ORDER BY ord", params)
    return [(json.loads(data), int(version)) for data, version in cursor.fetchall()]


def _messages(cursor: DBCursor, where: str, params: Sequence[object],
              limit: int | None = None) -> list[tuple[int, JSONValue, list[str]]]:
    cursor.execute(f"SELECT seq, data, receivers FROM world_messages WHERE {where}"
                   " ORDER BY seq LIMIT %s", (*params, limit))
    return [(int(seq), json.loads(data), list(receivers))
            for seq, data, receivers in cursor.fetchall()]


def load_shared_world(cursor: DBCursor, log_size: int) -> dict[str, object] | None:
    """Everything a worker's replica starts from, in one snapshot, or None (no world yet).

    ``{"clock", "objects"/"channels"/"prototypes"/"help": [(row, version)],
    "meta": {key: (value, version)}, "messages": [(seq, data, receivers)]}``,
    the messages being what each character heard last (``log_size`` each).
    """
    world: dict[str, object] = {"clock": _clock(cursor)}
    for section in WORLD_TABLES:
        world[section] = _versioned_rows(cursor, section, "true", ())
    cursor.execute("SELECT key, value, version FROM world_meta")
    world["meta"] = {key: (json.loads(value), int(version))
                     for key, value, version in cursor.fetchall()}
    if not world["meta"] and not any(world[section] for section in WORLD_TABLES):
        return None
    world["messages"] = _messages(
        cursor,
        "seq IN (SELECT seq FROM (SELECT seq, row_number() OVER"
        " (PARTITION BY character_id ORDER BY seq DESC) AS n FROM world_heard) AS h"
        " WHERE n <= %s)", (log_size,))
    return world


def world_since(
    cursor: DBCursor, clock: int, dirty: Iterable[Key], limit: int
) -> dict[str, object]:
    """What changed after clock value ``clock``, in one snapshot (a REPEATABLE READ read).

    At most ``limit`` messages: the answer's ``clock`` is then the last one's
    number, and only rows changed up to it are included, so the next call
    goes on from there.  ``dirty`` rows are read whatever their version
    (rows a failed change may have left different in a replica);
    ``dirty_rows`` maps each to ``(row, version)`` or None when it is gone.
    """
    upto = _clock(cursor)
    messages = _messages(cursor, "seq > %s AND seq <= %s", (clock, upto), limit + 1)
    if len(messages) > limit:
        messages = messages[:limit]
        upto = messages[-1][0]
    rows = {section: _versioned_rows(cursor, section, "version > %s AND version <= %s",
                                     (clock, upto)) for section in WORLD_TABLES}
    cursor.execute("SELECT key, value, version FROM world_meta WHERE version > %s"
                   " AND version <= %s", (clock, upto))
    meta = {key: (json.loads(value), int(version)) for key, value, version in cursor.fetchall()}
    cursor.execute("SELECT section, key FROM world_deleted WHERE version > %s AND version <= %s",
                   (clock, upto))
    deleted = [(section, key) for section, key in cursor.fetchall()]
    return {"clock": upto, "rows": rows, "meta": meta, "deleted": deleted,
            "messages": messages, "dirty_rows": _dirty_rows(cursor, dirty)}


def _dirty_rows(cursor: DBCursor, dirty: Iterable[Key]
                ) -> dict[Key, tuple[JSONValue, int] | None]:
    found: dict[Key, tuple[JSONValue, int] | None] = {key: None for key in dirty}
    for section in _SECTION_ORDER:
        keys = [key for sec, key in found if sec == section]
        if not keys:
            continue
        table, column = _TABLES[section]
        data = "value" if section == "meta" else "data"
        cursor.execute(f"SELECT {column}, {data}, version FROM {table} WHERE {column} {_ANY}",
                       (keys,))
        for key, text, version in cursor.fetchall():
            found[section, key] = (json.loads(text), int(version))
    return found


def prune_messages(cursor: DBCursor, keep: int) -> int:
    """Delete all but the newest ``keep`` messages (and who heard them); how many went."""
    cursor.execute(
        "DELETE FROM world_messages WHERE seq <= (SELECT seq FROM world_messages"
        " ORDER BY seq DESC OFFSET %s LIMIT 1)", (keep,))
    return int(cursor.rowcount)
