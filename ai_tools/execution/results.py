"""Bounding what enters a history: tool results, call arguments and texts, one limit.

A tool may return anything and a model may write anything; what enters the
history must be JSON a model server accepts, and small enough not to flood the
context window — one oversized entry would otherwise fill every later request.
The one limit (``max_result_bytes`` of the execution context, 16 KiB by
default) applies to each part of an entry:

* a tool's result (:func:`shape_result`): a value that cannot be serialised
  becomes a clear error result; a larger one is replaced by a truncated
  preview with a marker saying how much was cut;
* a call's arguments (:func:`clip_arguments`): larger ones are recorded as a
  JSON object holding a marker and the start of their text, so the history
  stays valid JSON for every server;
* the model's text (:func:`clip_text`): cut with a marker at the end.

Compaction clips with the same functions, to a smaller limit, inside the
messages it keeps.
"""

from __future__ import annotations

import attrs

from ai_tools.json_encoding import model_json, model_json_ascii

__all__ = ["CLIPPED_KEY", "DEFAULT_MAX_RESULT_BYTES", "MIN_MAX_RESULT_BYTES", "ShapedResult",
           "clip_arguments", "clip_text", "shape_result"]

DEFAULT_MAX_RESULT_BYTES = 16 * 1024
"""Default size limit of each part of a history entry (result, arguments, text), in bytes."""

CLIPPED_KEY = "_clipped"
"""The key of clipped arguments' marker (next to ``_preview``, their text's start)."""

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

    result: dict[str, object]
    content: str
    not_serialisable: bool = False
    truncated: bool = False


def _dumps(value: object, ascii_only: bool = False) -> str:
    return (model_json_ascii if ascii_only else model_json)(value)


def _size(text: str) -> int:
    # Every character takes 1 to 4 bytes in UTF-8: skip the encoding when it cannot matter.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _head(text: str, max_bytes: int) -> str:
    """The longest start of ``text`` that is at most ``max_bytes`` of UTF-8."""
    if text.isascii():
        return text[:max(max_bytes, 0)]
    encoded = text.encode("utf-8", "surrogatepass")[:max(max_bytes, 0)]
    return encoded.decode("utf-8", "ignore")


def clip_text(text: str, max_bytes: int) -> str:
    """``text`` if it is at most ``max_bytes`` of UTF-8, else its start and a marker.

    The marker says how big the text was, so the model (and whoever reads the
    history) knows that something was cut, and how much.
    """
    if len(text) <= max_bytes // 4:
        return text
    size = _size(text)
    if size <= max_bytes:
        return text
    marker = f" …[CLIPPED: the text was {size} bytes; only its start is kept]"
    return _head(text, max_bytes - len(marker.encode("utf-8"))) + marker


def clip_arguments(arguments_json: str, max_bytes: int) -> dict[str, object] | None:
    """What the history records instead of oversized arguments, or None when they fit.

    ``arguments_json`` is the call's JSON text.  Oversized arguments become
    ``{"_clipped": marker, "_preview": their text's start}``: still a JSON
    object, as every server expects a call's arguments to be.
    """
    if len(arguments_json) <= max_bytes // 4:
        return None
    size = _size(arguments_json)
    if size <= max_bytes:
        return None
    marker = (f"[CLIPPED: the arguments were {size} bytes of JSON, too large to keep; "
              "the preview shows their start]")
    room = max_bytes - len(marker.encode("utf-8")) - 40
    preview = _head(arguments_json, room)
    while _size(_dumps({CLIPPED_KEY: marker, "_preview": preview})) > max_bytes and preview:
        preview = preview[:len(preview) * 3 // 4]  # escaping made it grow: shrink
    return {CLIPPED_KEY: marker, "_preview": preview}


def shape_result(result: dict[str, object], tool_name: str,
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


def _truncate(result: dict[str, object], content: str, max_bytes: int) -> ShapedResult:
    original = _size(content)
    shaped: dict[str, object] = {"success": result.get("success") is not False, "truncated": True}
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
