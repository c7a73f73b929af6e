"""Detect a model stuck repeating itself, so generation can be stopped early.

Small models sometimes fall into a loop: the same line over and over, or a
short cycle of lines (A, B, A, B, ...).  :class:`RepeatedLineDetector` is fed
streamed text fragments; it looks at complete non-empty lines only (blank
lines neither count nor break a run) and triggers when the last lines are one
line ``max_repeats`` times in a row, or a cycle of 2..``max_cycle`` lines
repeated ``cycle_repeats`` times.
"""

from __future__ import annotations

from collections import deque

import attrs


@attrs.frozen
class RepetitionConfig:
    """When to call output a loop.  ``enabled=False`` turns detection off."""

    max_repeats: int = 8
    max_cycle: int = 4
    cycle_repeats: int = 4
    enabled: bool = True

    def __attrs_post_init__(self) -> None:
        if self.max_repeats < 2 or self.cycle_repeats < 2 or self.max_cycle < 1:
            raise ValueError(
                "repetition: max_repeats and cycle_repeats must be >= 2, max_cycle >= 1"
            )


class RepeatedLineDetector:
    """Feed text with :meth:`feed`; :attr:`triggered` says whether a loop was seen."""

    __slots__ = ("_enabled", "_lines", "_pending", "config", "repeated", "triggered")

    def __init__(self, config: RepetitionConfig | None = None) -> None:
        self.config = config or RepetitionConfig()
        # Created on first use: most answers never need them, and streams in
        # flight by the hundred each keep their detector alive.
        self._lines: deque[str] | None = None
        self._pending: list[str] | None = None
        self.triggered = False
        self.repeated: tuple[str, ...] = ()
        self._enabled = self.config.enabled

    def feed(self, text: str) -> bool:
        """Add a text fragment; return True once a loop has been detected."""
        if self.triggered or not self._enabled or not text:
            return self.triggered
        if "\n" not in text:
            if self._pending is None:
                self._pending = [text]
            else:
                self._pending.append(text)
            return False
        head, *middle, tail = text.split("\n")
        if self._pending is not None:
            self._pending.append(head)
            head = "".join(self._pending)
        self._line(head)
        for line in middle:
            if self.triggered:
                break
            self._line(line)
        self._pending = [tail] if tail else None
        return self.triggered

    def finish(self) -> bool:
        """End of text: the unterminated last line counts too."""
        if not self.triggered and self.config.enabled and self._pending:
            self._line("".join(self._pending))
            self._pending = None
        return self.triggered

    def _line(self, line: str) -> None:
        line = line.strip()
        if not line or self.triggered:
            return
        lines = self._lines
        if lines is None:
            cfg = self.config
            window = max(cfg.max_repeats, cfg.max_cycle * cfg.cycle_repeats)
            lines = self._lines = deque(maxlen=window)
        lines.append(line)
        cfg = self.config
        n = len(lines)
        if n >= cfg.max_repeats:
            last = lines[-1]
            if all(lines[-i] == last for i in range(2, cfg.max_repeats + 1)):
                self.triggered = True
                self.repeated = (last,)
                return
        for period in range(2, cfg.max_cycle + 1):
            span = period * cfg.cycle_repeats
            if n < span:
                break
            recent = list(lines)[-span:]
            cycle = recent[:period]
            if len(set(cycle)) < 2:
                continue
            if all(recent[i] == cycle[i % period] for i in range(span)):
                self.triggered = True
                self.repeated = tuple(cycle)
                return
