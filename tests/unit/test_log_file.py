"""The service log's lines are exactly twistd's classic text lines, made cheaply."""

from __future__ import annotations

import io
from typing import Any

import pytest
from twisted.logger import LogLevel, formatEventAsClassicLogText, formatTime, timeFormatRFC3339
from twisted.python.failure import Failure

from ai_tools.standalone.log_file import ClassicLines, classic_text_observer


def stock(event: dict[str, Any]) -> str | None:
    """What ``textFileLogObserver`` writes for ``event``."""
    return formatEventAsClassicLogText(
        event, formatTime=lambda when: formatTime(when, timeFormatRFC3339))


def _failure() -> Failure:
    try:
        raise ValueError("boom")
    except ValueError:
        return Failure()


class Thing:
    name = "lamp"

    def __repr__(self) -> str:
        return "<Thing lamp>"

    def size(self) -> int:
        return 3


BASE = {"log_namespace": "ai_tools.loop.run", "log_level": LogLevel.info,
        "log_time": 1_764_300_000.25}
EVENTS: list[dict[str, Any]] = [
    {**BASE, "log_format": "ReAct loop of {assistant} ended: {reason}", "assistant": "pip",
     "reason": "completed"},
    {**BASE, "log_format": "two\nlines {n:>4} {f:.2f} {t!r} {t.name} {d[k]}", "n": 7,
     "f": 1.0 / 3, "t": Thing(), "d": {"k": "v"}},
    {**BASE, "log_format": "unicode {w} ✓", "w": "café"},
    {**BASE, "log_format": "a call {t.size()}", "t": Thing()},
    {**BASE, "log_format": "missing {nothing}"},
    {**BASE, "log_format": "bad {", "x": 1},
    {**BASE, "log_format": "{empty}", "empty": ""},
    {**BASE, "log_format": None},
    {**BASE, "log_format": b"bytes {x}", "x": 1},
    {**BASE, "log_format": "failed {x}", "x": 1, "log_failure": _failure()},
    {**BASE, "log_format": "system {x}", "x": 1, "log_system": "HTTPChannel,1,127.0.0.1"},
    {"log_format": "no time, no level, no namespace"},
    {**BASE, "log_format": "at a second's end", "log_time": 1_764_300_000.9999997},
    {**BASE, "log_format": "{log_namespace} {log_level.name}"},
]


@pytest.mark.parametrize("event", EVENTS, ids=range(len(EVENTS)))
def test_each_line_is_the_stock_line(event: dict[str, Any]) -> None:
    assert ClassicLines()(event) == stock(event)


def test_time_stamps_made_once_per_second_stay_right() -> None:
    lines = ClassicLines()
    for when in (10.0, 10.5, 10.9999, 11.0, 11.2, 9.5, 3600.0 * 24 * 180):
        event = {**BASE, "log_format": "tick", "log_time": when}
        assert lines(event) == stock(event)


def test_the_observer_writes_the_lines() -> None:
    out = io.StringIO()
    observer = classic_text_observer(out)
    observer(dict(EVENTS[0]))
    observer(dict(EVENTS[1]))
    assert out.getvalue() == f"{stock(EVENTS[0])}{stock(EVENTS[1])}"
