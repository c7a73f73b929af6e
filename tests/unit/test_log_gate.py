"""The level gate: events the service's log filter would drop are never built."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from twisted.logger import LogLevel, globalLogPublisher

from ai_tools.log_gate import GatedLogger, LevelGate, arm, armed, disarm


@pytest.fixture
def kept() -> Iterator[list[dict[str, Any]]]:
    """Every event that reaches the global publisher while the test runs."""
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)
    disarm()


def test_unarmed_every_event_is_built_like_the_stock_logger(kept: list[dict[str, Any]]
                                                            ) -> None:
    log = GatedLogger(namespace="ai_tools.test")
    log.debug("a {thing}", thing="lamp")
    log.info("b")
    log.warn("c {n}", n=2)
    assert [(e["log_level"], e["log_format"]) for e in kept] == [
        (LogLevel.debug, "a {thing}"), (LogLevel.info, "b"), (LogLevel.warn, "c {n}")]
    first = kept[0]
    assert first["thing"] == "lamp" and first["log_namespace"] == "ai_tools.test"
    assert first["log_logger"] is log and first["log_source"] is None
    assert isinstance(first["log_time"], float)


def test_armed_below_the_level_nothing_reaches_any_observer(kept: list[dict[str, Any]]
                                                            ) -> None:
    arm(LevelGate(LogLevel.info))
    log = GatedLogger(namespace="ai_tools.test")
    built: list[str] = []

    class Costly:
        def __format__(self, spec: str) -> str:
            built.append("formatted")
            return "x"

    log.debug("never {x}", x=Costly())
    log.emit(LogLevel.debug, "never either")
    log.info("kept")
    log.error("kept too")
    assert [e["log_format"] for e in kept] == ["kept", "kept too"] and built == []


def test_the_gate_follows_levels_set_per_namespace_later(kept: list[dict[str, Any]]) -> None:
    gate = LevelGate(LogLevel.info)
    arm(gate)
    engine = GatedLogger(namespace="ai_tools.execution.engine")
    engine.debug("hidden")
    gate.setLogLevelForNamespace("ai_tools.execution", LogLevel.debug)  # an operator turns it on
    engine.debug("shown")
    assert gate({"log_level": LogLevel.debug, "log_namespace": engine.namespace}) \
        != gate({"log_level": LogLevel.debug, "log_namespace": "other"})
    gate.clearLogLevels()
    engine.debug("hidden again")
    assert [e["log_format"] for e in kept] == ["shown"]
    assert armed() is gate


def test_a_logger_with_its_own_observer_is_never_gated() -> None:
    arm(LevelGate(LogLevel.critical))
    try:
        seen: list[dict[str, Any]] = []
        GatedLogger(observer=seen.append).debug("mine")
        assert [e["log_format"] for e in seen] == ["mine"]
    finally:
        disarm()


def test_an_invalid_level_is_reported_as_by_the_stock_logger(kept: list[dict[str, Any]]
                                                              ) -> None:
    GatedLogger(namespace="ai_tools.test").emit("loud", "what")  # type: ignore[arg-type]
    assert len(kept) == 1 and kept[0]["log_level"] is LogLevel.critical
    assert "invalid log level" in kept[0]["log_format"]


def test_a_descriptor_logger_stays_gated() -> None:
    class Owner:
        log = GatedLogger()

    assert isinstance(Owner().log, GatedLogger)
    assert Owner().log.namespace.endswith("Owner")


def test_wants_answers_before_anything_is_built() -> None:
    log = GatedLogger(namespace="ai_tools.test")
    assert log.wants(LogLevel.debug)  # unarmed: everything is wanted
    arm(LevelGate(LogLevel.info))
    try:
        assert not log.wants(LogLevel.debug) and log.wants(LogLevel.info)
        assert GatedLogger(observer=lambda e: None).wants(LogLevel.debug)
    finally:
        disarm()
