"""Test helper: what became cyclic garbage inside a block (for the no-reference-cycle tests)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def cyclic_garbage() -> Iterator[list[Any]]:
    """Collect what became cyclic garbage inside the block (the collector is off there)."""
    found: list[Any] = []
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield found
    finally:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
        finally:
            gc.set_debug(0)
            found.extend(gc.garbage)
            gc.garbage.clear()
            if enabled:
                gc.enable()
