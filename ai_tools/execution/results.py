"""Shaping a tool's result for a model: JSON text that is valid and bounded in size.

A tool may return anything; what enters the history must be JSON a model
server accepts, and small enough not to flood the context window.  A value that
cannot be serialised becomes a clear error result; a result larger than the
limit (16 KiB by default) is replaced by a truncated preview with a marker
saying how much was cut.
"""

from __future__ import annotations

from typing import Any

import attrs

from ai_tools.json_encoding import model_json, model_json_ascii

__all__ = ["DEFAULT_MAX_RESULT_BYTES", "MIN_MAX_RESULT_BYTES", "ShapedResult", "shape_result"]

DEFAULT_MAX_RESULT_BYTES = 16 * 1024
"""Default size limit of a result's JSON text in history."""

MIN_MAX_RESULT_BYTES = 512
"""Smallest limit accepted (room for the truncation marker)."""

_ERROR_TEXT_LIMIT = 500


@attrs.frozen
class ShapedResult:
    """A result ready for history.

    ``result`` is what the model sees (possibly truncated or replaced by an
    error), ``content`` its JSON text; ``not_serialisable`` and ``truncated``
    say what happened to the tool's original value.
    """

    result: dict[str, Any]
    content: str
    not_serialisable: bool = False
    truncated: bool = False


def _dumps(value: Any, ascii_only: bool = False) -> str:
    return (model_json_ascii if ascii_only else model_json)(value)


def _size(text: str) -> int:
    # Every character takes 1 to 4 bytes in UTF-8: skip the encoding when it cannot matter.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def shape_result(result: dict[str, Any], tool_name: str,
                 max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> ShapedResult:
    """Serialise ``result``; replace it by an error if it is not JSON, truncate it if too big."""
    try:
        content = _dumps(result)
    except (TypeError, ValueError, RecursionError) as e:
        detail = str(e)[:200]
        error = {
            "success": False,
            "error": (f"Tool '{tool_name}' returned a result that is not JSON-serialisable "
                      f"({type(e).__name__}: {detail})"),
        }
        return ShapedResult(error, _dumps(error), not_serialisable=True)
    if not content.isascii():
        try:
            content.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: keep them as \u escapes
            content = _dumps(result, ascii_only=True)
    if len(content) <= max_bytes // 4 or _size(content) <= max_bytes:
        return ShapedResult(result, content)
    return _truncate(result, content, max_bytes)


def _truncate(result: dict[str, Any], content: str, max_bytes: int) -> ShapedResult:
    original = _size(content)
    shaped: dict[str, Any] = {"success": result.get("success") is not False, "truncated": True}
    error = result.get("error")
    if isinstance(error, str):
        shaped["error"] = error[:_ERROR_TEXT_LIMIT].encode("utf-8", "replace").decode("utf-8")
    encoded = content.encode("utf-8")
    budget = max_bytes
    while True:
        preview = encoded[:max(budget, 0)].decode("utf-8", "ignore")
        shaped["note"] = (f"[TRUNCATED: the result was {original} bytes of JSON; "
                          f"the preview shows the first {len(preview.encode('utf-8'))}]")
        shaped["preview"] = preview
        text = _dumps(shaped)
        size = _size(text)
        if size <= max_bytes or budget <= 0:
            return ShapedResult(shaped, text, truncated=True)
        # Escaping makes the preview grow when it is embedded: shrink in proportion.
        budget = min(budget - 1, int(budget * max_bytes / size) - 16)
