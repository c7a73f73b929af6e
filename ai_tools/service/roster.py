"""Which assistants a service hosts, across restarts: the config file seeds, the store keeps.

Assistants come from two places: the config file, and the operator's API
(created, reconfigured, removed while the service runs, saved in the store).
On start, :func:`start_assistants` settles them with one rule — **the last
change wins**:

* an assistant the store has never held is created from the config file
  (its first start);
* one the store holds comes back with the configuration saved in the store
  (so changes made over the API survive a restart), except for the keys
  whose value *in the file* changed since the file was last applied: those
  take the file's new value (an edit of the file is applied at the next
  start, and says so in the log);
* one removed over the API stays removed, even when the file still names it
  (its saved state stays in the store until it is created again);
* one the file named before and names no more is not started (its state
  stays in the store: it is "left asleep on disk");
* one created over the API (never in the file) comes back from the store.

What the file said last, and which assistants were removed, are kept as
records of the owner ``@service`` (a name no assistant can have), so no
store needs a table of its own for it.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from twisted.internet import defer
from twisted.logger import Logger

from ai_tools.interfaces import IStore
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.service.assistant import AssistantConfig

if TYPE_CHECKING:
    from ai_tools.interfaces import IStore
    from ai_tools.service.service import AssistantService

__all__ = ["OWNER", "Roster", "merge_file_config", "shared_roster", "start_assistants"]

log = Logger()

OWNER = "@service"
"""The records' owner: ``@`` is not allowed in an assistant's name."""
_REMOVED = "removed_assistants"
_FILE = "file_assistants"
_MAX = 100_000


def merge_file_config(saved: JSONMapping, file_now: JSONMapping,
                      file_before: JSONMapping | None) -> tuple[dict[str, object], list[str]]:
    """The configuration to start with, and the keys the file changed since it was applied.

    ``saved`` is the store's configuration, ``file_now`` the file's, and
    ``file_before`` what the file said when it was last applied (None: not
    known, as for a store written before this rule: then the store's is kept).
    """
    if file_before is None:
        return dict(saved), []
    changed = [key for key, value in file_now.items() if file_before.get(key) != value]
    merged = dict(saved)
    for key in changed:
        merged[key] = file_now[key]
    return merged, changed


def shared_roster(
    configured: Sequence[AssistantConfig],
    given: Mapping[str, tuple[JSONMapping, JSONMapping | None, bool]],
) -> list[AssistantConfig]:
    """The assistants several workers share: the config file's, with the API's word on them.

    ``given`` is ``{name: (config, file_config, removed)}``: what was created,
    changed or removed over the API (the PostgreSQL store's
    ``assistant_configs``, read by every worker).  The same rule as a single
    process's restart: one removed stays removed; one changed over the API
    keeps its configuration except for the keys the file changed since
    (:func:`merge_file_config`); one created over the API is there too.
    """
    shared = []
    for config in configured:
        row = given.get(config.name)
        if row is None:
            shared.append(config)
        elif not row[2]:
            merged, _ = merge_file_config(row[0], config.to_dict(), row[1])
            shared.append(_checked(config.name, merged) or config)
    for name in sorted(set(given) - {c.name for c in configured}):
        config_given, _, removed = given[name]
        created = None if removed else _checked(name, config_given)
        if created is not None:
            shared.append(created)
    return shared


def _checked(name: str, data: JSONMapping) -> AssistantConfig | None:
    """``data`` as a configuration, or None (logged) when it is not a valid one."""
    try:
        return AssistantConfig.from_mapping(data, f"assistant {name!r}")
    except Exception as exc:
        log.error("Assistant {assistant}: the configuration given over the API is not valid "
                  "({error})", assistant=name, error=str(exc))
        return None


class Roster:
    """What the store remembers of the roster: removed names, the file's last configs."""

    def __init__(self, store: IStore) -> None:
        self.store: IStore = store

    @defer.inlineCallbacks
    def _records(self, collection: str
                 ) -> Generator[defer.Deferred[Any], object, dict[str, JSONObject]]:
        records = yield self.store.list_records(OWNER, collection, limit=_MAX,
                                                newest_first=False)
        return {str(r["content"]): r for r in cast("list[JSONObject]", records)}

    @defer.inlineCallbacks
    def removed(self) -> Generator[defer.Deferred[Any], object, set[str]]:
        """The names of the assistants removed over the API (a set)."""
        records = cast("dict[str, JSONObject]", (yield self._records(_REMOVED)))
        return set(records)

    @defer.inlineCallbacks
    def mark_removed(self, name: str) -> Generator[defer.Deferred[Any], object, None]:
        """Remember that ``name`` was removed: it is not brought back on restart."""
        records = cast("dict[str, JSONObject]", (yield self._records(_REMOVED)))
        if name not in records:
            yield self.store.add_record(OWNER, _REMOVED, name)

    @defer.inlineCallbacks
    def unmark_removed(self, name: str) -> Generator[defer.Deferred[Any], object, None]:
        """``name`` is hosted again (created anew)."""
        records = cast("dict[str, JSONObject]", (yield self._records(_REMOVED)))
        if name in records:
            yield self.store.delete_record(cast(int, records[name]["id"]))

    @defer.inlineCallbacks
    def file_configs(self) -> Generator[defer.Deferred[Any], object, dict[str, JSONMapping]]:
        """``{name: the config file's configuration when last applied}``."""
        records = cast("dict[str, JSONObject]", (yield self._records(_FILE)))
        return {name: cast(JSONMapping, record.get("metadata") or {})
                for name, record in records.items()}

    @defer.inlineCallbacks
    def remember_file_config(self, name: str, config: JSONMapping
                             ) -> Generator[defer.Deferred[Any], object, None]:
        """Keep what the file says of ``name`` now, to see what an edit changed next time."""
        records = cast("dict[str, JSONObject]", (yield self._records(_FILE)))
        if name in records:
            if records[name].get("metadata") != dict(config):
                yield self.store.update_record(cast(int, records[name]["id"]),
                                               metadata=dict(config))
        else:
            yield self.store.add_record(OWNER, _FILE, name, metadata=dict(config))


@defer.inlineCallbacks
def start_assistants(service: AssistantService, configured: Sequence[AssistantConfig]
                     ) -> Generator[defer.Deferred[Any], object, list[str]]:
    """Add the assistants of the config file and of the store to ``service`` (see the module).

    Fires with the names added, in order.
    """
    roster = Roster(service.store)
    states: IStore = service.store
    saved = set(cast("list[str]", (yield states.list_assistants())))
    removed = cast("set[str]", (yield roster.removed()))
    before = cast("dict[str, JSONMapping]", (yield roster.file_configs()))
    added = []
    for config in configured:
        name = config.name
        file_now = config.to_dict()
        if name in removed:
            log.info("Assistant {assistant} of the config file was removed over the API; "
                     "not brought back (create it again with POST /assistants)", assistant=name)
            continue
        if name in saved:
            config = cast(AssistantConfig,
                          (yield _from_store(service, config, file_now, before.get(name))))
        yield service.add_assistant(config)
        yield roster.remember_file_config(name, file_now)
        added.append(name)
    configured_names = {c.name for c in configured}
    dropped = sorted(saved & set(before) - configured_names - removed)
    if dropped:
        log.info("The config file no longer names {names}: left asleep on disk (their "
                 "saved state stays in the store)", names=", ".join(dropped))
    for name in sorted(saved - removed - set(before) - configured_names):
        if (yield service.roster.restore(name)):
            added.append(name)
    return added


@defer.inlineCallbacks
def _from_store(service: AssistantService, config: AssistantConfig, file_now: JSONMapping,
                file_before: JSONMapping | None
                ) -> Generator[defer.Deferred[Any], object, AssistantConfig]:
    """The configuration of a file assistant the store holds: the store's, plus the file's edits."""
    name = config.name
    states: IStore = service.store
    state = cast("JSONObject | None", (yield states.load_assistant(name)))
    saved = (state or {}).get("config")
    if not isinstance(saved, Mapping):
        return config
    merged, changed = merge_file_config(saved, file_now, file_before)
    if changed:
        log.info("Assistant {assistant}: the config file changed {keys} since the last start; "
                 "applied (the store's configuration keeps the rest)",
                 assistant=name, keys=", ".join(changed))
    differs = sorted(k for k, v in file_now.items() if merged.get(k) != v)
    if differs:
        log.info("Assistant {assistant}: the configuration saved in the store (changed over "
                 "the API) is used for {keys}, not the config file's", assistant=name,
                 keys=", ".join(differs))
    try:
        return AssistantConfig.from_mapping(merged, f"assistant {name!r}")
    except Exception as exc:
        log.error("Assistant {assistant}: the saved configuration is not valid ({error}); "
                  "the config file's is used", assistant=name, error=str(exc))
        return config
