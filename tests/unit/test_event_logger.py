"""EventLogger emits exactly the events twisted.logger.Logger emits, for less."""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger, LogLevel, LogPublisher

from ai_tools.event_logger import EventLogger


def _emit_both(level: Any, **fields: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    to_ours: Any = ours.append
    to_theirs: Any = theirs.append
    EventLogger("ns", source="src", observer=to_ours).emit(level, "x {a}", **fields)
    Logger("ns", source="src", observer=to_theirs).emit(level, "x {a}", **fields)
    return ours, theirs


def _comparable(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in ("log_logger", "log_time")}


def test_the_event_is_the_one_logger_builds() -> None:
    """Same keys and values at every level (the logger object and the time aside)."""
    for level in LogLevel.iterconstants():
        ours, theirs = _emit_both(level, a=1, b=[2])
        assert len(ours) == len(theirs) == 1
        assert _comparable(ours[0]) == _comparable(theirs[0])
        assert set(ours[0]) == set(theirs[0])
        assert isinstance(ours[0]["log_logger"], EventLogger)
        assert isinstance(ours[0]["log_time"], float)


def test_the_namespace_is_the_calling_module() -> None:
    """Like Logger(), the default namespace is the module that creates it."""
    assert EventLogger().namespace == __name__


def test_an_invalid_level_is_refused_like_logger_does() -> None:
    """A level that is not a LogLevel goes through Logger.emit: a critical failure event."""
    ours, theirs = _emit_both("not a level", a=1)
    assert [e["log_level"] for e in ours] == [e["log_level"] for e in theirs] == [
        LogLevel.critical]
    assert "invalid log level" in ours[0]["log_format"]


def test_the_convenience_methods_and_tracing_work() -> None:
    """info/warn/error go through the fast emit; log_trace records the hop."""
    events: list[dict[str, Any]] = []
    collect: Any = events.append
    publisher: Any = LogPublisher(collect)
    log = EventLogger("ns", observer=publisher)
    log.info("i {n}", n=1)
    log.warn("w")
    log.info("traced", log_trace=[])
    assert [e["log_level"] for e in events] == [LogLevel.info, LogLevel.warn, LogLevel.info]
    assert events[0]["n"] == 1
    trace = events[2]["log_trace"]
    assert trace[0] == (log, publisher)
    assert trace[1] == (publisher, collect)


def test_info_builds_the_event_logger_info_builds() -> None:
    """The info shortcut gives the very event Logger.info gives."""
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    to_ours: Any = ours.append
    to_theirs: Any = theirs.append
    EventLogger("ns", source="src", observer=to_ours).info("x {a}", a=1, b=[2])
    Logger("ns", source="src", observer=to_theirs).info("x {a}", a=1, b=[2])
    assert len(ours) == len(theirs) == 1
    assert _comparable(ours[0]) == _comparable(theirs[0])
    assert set(ours[0]) == set(theirs[0])
    assert list(ours[0]) == list(theirs[0])  # the same order too
    assert ours[0]["log_level"] is LogLevel.info
