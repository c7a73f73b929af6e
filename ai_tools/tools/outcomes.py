"""Result dicts the default tools return: one shape for success and for each refusal.

Every result is a JSON-serialisable dict with ``success``.  Refusals carry a
``status`` the loop and the model can act on, and ``retryable: False`` so the
retry policy never repeats a call that cannot succeed on a second try (a
permission refusal whose text happens to contain "connection" stays refused).
"""

from __future__ import annotations

from typing import Any

from ai_tools.json_types import JSONObject

PERMISSION_DENIED = "permission_denied"
NOT_FOUND = "not_found"
AMBIGUOUS = "ambiguous"
UNAVAILABLE = "unavailable"
INVALID = "invalid"
DISABLED = "disabled"


def succeed(**fields: Any) -> JSONObject:
    """A successful result carrying ``fields``."""
    return {"success": True, **fields}


def refuse(error: str, status: str, **fields: Any) -> JSONObject:
    """A failed result that must not be retried."""
    return {"success": False, "error": error, "status": status, "retryable": False, **fields}


def permission_denied(reason: object) -> JSONObject:
    """The world refused the acting character (the model sees why)."""
    text = str(reason) or "you lack the right to do this"
    return refuse(f"permission denied: {text}", PERMISSION_DENIED)


def not_found(what: object, **fields: Any) -> JSONObject:
    """Something the call named does not exist."""
    return refuse(f"not found: {what}", NOT_FOUND, **fields)


def unavailable(tool_name: str, needed: str) -> JSONObject:
    """The tool runs without a service it needs (world, store or assistant)."""
    return refuse(f"{tool_name} cannot run here: {needed}", UNAVAILABLE)


def invalid(error: str, **fields: Any) -> JSONObject:
    """The parameters passed the schema but make no sense in this world."""
    return refuse(error, INVALID, **fields)
