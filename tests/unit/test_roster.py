"""Which assistants come back on start: the config file seeds, the store keeps, the last
change wins (ai_tools.service.roster)."""

from __future__ import annotations

from typing import Any

from twisted.internet import task

from ai_tools.service.assistant import AssistantConfig
from ai_tools.service.roster import Roster, merge_file_config, shared_roster, start_assistants
from ai_tools.store.memory import MemoryStore
from tests.unit.service_fakes import make_service, settle
from tests.unit.web_fakes import result_of


def test_merge_keeps_the_store_except_what_the_file_changed() -> None:
    saved = {"name": "pip", "tick_rate": 9.0, "persona": "API persona", "model": "default"}
    file_before = {"name": "pip", "tick_rate": 5.0, "persona": "file persona", "model": "default"}
    unchanged, changed = merge_file_config(saved, file_before, file_before)
    assert unchanged == saved and changed == []
    edited = {**file_before, "persona": "edited persona"}
    merged, changed = merge_file_config(saved, edited, file_before)
    assert changed == ["persona"]
    assert merged == {**saved, "persona": "edited persona"}  # tick_rate from the API stays
    assert merge_file_config(saved, edited, None) == (saved, [])  # no record: the store's


def test_the_workers_roster_is_the_file_with_the_apis_word_on_it() -> None:
    """Workers share the file's assistants, minus those removed over the API, with the
    API's changes (except keys the file changed since), plus those created over it."""
    pip = AssistantConfig(name="pip", model="default", persona="file persona")
    mason = AssistantConfig(name="mason", model="default")
    assert shared_roster([pip, mason], {}) == [pip, mason]
    given = {
        "pip": ({**pip.to_dict(), "persona": "API persona", "tick_rate": 9.0},
                pip.to_dict(), False),
        "mason": (mason.to_dict(), mason.to_dict(), True),
        "tess": ({"name": "tess", "model": "default"}, None, False),
        "gone": ({"name": "gone", "model": "default"}, None, True),
        "broken": ({"name": "broken", "tick_rate": "fast"}, None, False),
    }
    roster = {c.name: c for c in shared_roster([pip, mason], given)}
    assert sorted(roster) == ["pip", "tess"]
    assert (roster["pip"].persona, roster["pip"].tick_rate) == ("API persona", 9.0)
    edited = AssistantConfig(name="pip", model="default", persona="edited in the file")
    roster = {c.name: c for c in shared_roster([edited, mason], given)}
    assert (roster["pip"].persona, roster["pip"].tick_rate) == ("edited in the file", 9.0)


def run(store: MemoryStore, configs: list[dict[str, Any]], clock: task.Clock) -> Any:
    _, service, _ = make_service(clock, store=store)
    d = start_assistants(service, [AssistantConfig.from_mapping(c) for c in configs])
    settle(clock)
    added = result_of(d)
    return service, added


def done(d: Any, clock: task.Clock) -> Any:
    settle(clock)
    return result_of(d)


def stop(service: Any, clock: task.Clock) -> None:
    done(service.stopService(), clock)


def test_restarts_follow_the_last_change() -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    file_v1 = [{"name": "pip", "tick_rate": 5.0, "persona": "v1"},
               {"name": "mason", "tick_rate": 5.0}]
    service, added = run(store, file_v1, clock)
    assert added == ["pip", "mason"]
    # over the API: Pip's tick rate changes, Mason is removed, Ada is created
    done(service.reconfigure("pip", {**file_v1[0], "tick_rate": 9.0}), clock)
    done(service.remove_assistant("mason"), clock)
    done(Roster(store).mark_removed("mason"), clock)
    done(service.add_assistant({"name": "ada"}), clock)
    stop(service, clock)

    service, added = run(store, file_v1, clock)  # the same file
    assert sorted(added) == ["ada", "pip"]
    assert service.get("pip").config.tick_rate == 9.0 and service.get("pip").config.persona == "v1"
    stop(service, clock)

    file_v2 = [{"name": "pip", "tick_rate": 5.0, "persona": "v2"},
               {"name": "mason", "tick_rate": 5.0}]
    service, added = run(store, file_v2, clock)  # the file's persona edited
    assert service.get("pip").config.persona == "v2"
    assert service.get("pip").config.tick_rate == 9.0
    assert "mason" not in service
    stop(service, clock)

    service, added = run(store, [{"name": "mason"}], clock)  # pip dropped from the file
    assert added == ["ada"]  # pip left on disk, mason still removed
    assert "pip" in result_of(store.list_assistants())
