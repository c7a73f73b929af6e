"""Pages of an assistant's history for ``GET /assistants/{name}/history``.

A page is cut by position: every message carries its ``index`` in the
current history (oldest 0).  ``before=I`` pages back from a message the
client has, ``after=I`` forward; neither gives the newest messages.  The
history only grows between ticks, except when it is trimmed to its
``max_history`` or compacted: then positions change, which the client sees
as a smaller ``total`` (it reloads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ai_tools.web.errors import ApiError

__all__ = ["history_page"]


def history_page(messages: Sequence[Mapping[str, object]], limit: int, before: int | None,
                 after: int | None) -> dict[str, object]:
    """``{"total", "first_index", "has_more", "messages"}`` (each message with its ``index``).

    ``has_more`` says whether older messages exist before the page (with ``before``
    or neither) or newer ones after it (with ``after``).  ApiError 400 when both
    cursors are given.
    """
    total = len(messages)
    if before is not None and after is not None:
        raise ApiError(400, "give before or after, not both", field="before")
    if after is not None:
        start = min(after + 1, total)
        end = min(start + limit, total)
        has_more = end < total
    else:
        end = total if before is None else min(before, total)
        start = max(0, end - limit)
        has_more = start > 0
    page = [{**messages[i], "index": i} for i in range(start, end)]
    return {"total": total, "first_index": start, "has_more": has_more, "messages": page}
