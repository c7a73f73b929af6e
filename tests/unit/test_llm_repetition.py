"""The repeated-line detector."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.llm.repetition import RepeatedLineDetector, RepetitionConfig


def feed_lines(detector: RepeatedLineDetector, lines: list[str]) -> bool:
    return detector.feed("".join(line + "\n" for line in lines))


def test_same_line_n_times_triggers() -> None:
    """The same non-empty line max_repeats times in a row is a loop."""
    d = RepeatedLineDetector(RepetitionConfig(max_repeats=4))
    assert not feed_lines(d, ["I am here."] * 3)
    assert feed_lines(d, ["I am here."])
    assert d.repeated == ("I am here.",)


def test_blank_lines_neither_count_nor_break() -> None:
    """Blank lines between repeats do not hide the loop."""
    d = RepeatedLineDetector(RepetitionConfig(max_repeats=3))
    assert d.feed("again\n\n  again  \n\n\nagain\n")


def test_different_lines_do_not_trigger() -> None:
    """Ordinary text never triggers."""
    d = RepeatedLineDetector(RepetitionConfig(max_repeats=3))
    assert not feed_lines(d, [f"line {i}" for i in range(50)])


def test_short_cycle_triggers() -> None:
    """A, B, C repeated cycle_repeats times is a loop."""
    d = RepeatedLineDetector(RepetitionConfig(max_repeats=10, max_cycle=3, cycle_repeats=3))
    assert not feed_lines(d, ["A", "B", "C"] * 2 + ["A", "B"])
    assert feed_lines(d, ["C"])
    assert d.repeated == ("A", "B", "C")


def test_lines_split_across_fragments() -> None:
    """Only complete lines count, however the text is cut."""
    d = RepeatedLineDetector(RepetitionConfig(max_repeats=3))
    for piece in ["re", "peat\nrep", "eat\nrepe", "at"]:
        assert not d.feed(piece)
    assert d.feed("\n")


def test_unterminated_last_line_counts_at_finish() -> None:
    """finish() counts the last line without a newline."""
    d = RepeatedLineDetector(RepetitionConfig(max_repeats=3))
    assert not d.feed("x\nx\nx")
    assert d.finish()


def test_disabled_never_triggers() -> None:
    """enabled=False turns detection off."""
    d = RepeatedLineDetector(RepetitionConfig(max_repeats=2, enabled=False))
    assert not feed_lines(d, ["same"] * 10)
    assert not d.finish()


def test_bad_config_is_refused() -> None:
    """Thresholds below 2 would fire on every line."""
    with pytest.raises(ValueError):
        RepetitionConfig(max_repeats=1)


@given(st.lists(st.text(max_size=15), max_size=40), st.integers(min_value=1, max_value=7))
def test_chunking_does_not_change_the_verdict(lines: list[str], size: int) -> None:
    """Fed whole or in pieces of any size, the verdict is the same."""
    text = "\n".join(lines)
    whole = RepeatedLineDetector()
    whole.feed(text)
    whole.finish()
    pieces = RepeatedLineDetector()
    for i in range(0, len(text), size):
        pieces.feed(text[i : i + size])
    pieces.finish()
    assert whole.triggered == pieces.triggered
