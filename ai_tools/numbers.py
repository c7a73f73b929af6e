"""What a number setting is: an int or a float, never a bool, and finite.

Python's JSON parser and TOML both have ``NaN`` and ``inf``, and ``float()``
reads ``"nan"`` and ``"inf"``; each passes a ``value > 0`` check (or fails it
quietly) and then breaks timers, schedules and JSON answers far from where it
came in.  Every number setting — of the API, the config file, the variables —
is checked with :func:`is_number` (one rule, one place).  It imports nothing
of ai_tools, so any layer may use it.
"""

from __future__ import annotations

import math
from typing import TypeGuard

__all__ = ["is_number", "is_positive_number"]


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is an int or a float (not a bool) and finite."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def is_positive_number(value: object) -> bool:
    """Whether ``value`` is a finite number above zero (:func:`is_number`)."""
    return is_number(value) and value > 0
