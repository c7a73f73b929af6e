"""The JSON encodings the engine shares, each built once, through the public ``json`` API.

``json.dumps(value, sort_keys=True, ...)`` builds a new ``JSONEncoder`` on every
call that passes options; an encoder built once and its bound ``encode`` do
not.  Each encoding here is one such bound method: use it instead of calling
``json.dumps`` with the same options on a hot path.
"""

from __future__ import annotations

import json
from collections.abc import Callable

__all__ = ["canonical_json", "compact_ascii_json", "model_json", "model_json_ascii"]

canonical_json: Callable[[object], str] = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), allow_nan=False).encode
"""Compact JSON with sorted keys: one text per value (tool-call arguments, cache keys).

Raises TypeError for a value that is not JSON, ValueError for NaN/infinity or a
circular reference."""

compact_ascii_json: Callable[[object], str] = json.JSONEncoder(
    allow_nan=False, separators=(",", ":")).encode
"""Compact ASCII JSON (lone surrogates survive as ``\\u`` escapes): stored values."""

model_json: Callable[[object], str] = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
"""JSON as a model reads it (non-ASCII text kept as is): tool results in history."""

model_json_ascii: Callable[[object], str] = json.JSONEncoder(allow_nan=False).encode
""":data:`model_json` with non-ASCII escaped: for text a UTF-8 encoding refuses."""
