"""An MCP ``CallToolResult`` as the result dict a model reads.

Text is kept (cut at a byte bound); images, audio and binary resources are
summarised (type, MIME type, size) and never inlined: a model cannot read
base64, and one screenshot would fill its window.  Embedded text resources
keep their text, resource links their name and URI.  ``structuredContent``
comes along as ``structured`` when it fits the bound.  ``isError: true``
becomes our usual ``{"success": false, "error": ...}``.
"""

from __future__ import annotations

import json

from ai_tools.json_types import JSONObject

__all__ = ["DEFAULT_MAX_TEXT_BYTES", "MAX_CONTENT_ITEMS", "tool_result"]

DEFAULT_MAX_TEXT_BYTES = 64 * 1024
MAX_CONTENT_ITEMS = 100


def _cut(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", "ignore")
    return f"{kept}\n[... {len(data) - limit} more bytes cut]"


def _base64_size(data: object) -> int:
    return len(data) * 3 // 4 if isinstance(data, str) else 0


def _binary(kind: str, item: JSONObject) -> str:
    mime = item.get("mimeType") or "unknown type"
    return f"[{kind}: {mime}, {_base64_size(item.get('data'))} bytes, not shown]"


def _resource(item: JSONObject) -> str:
    resource = item.get("resource")
    if not isinstance(resource, dict):
        return "[resource: malformed]"
    uri = resource.get("uri", "?")
    text = resource.get("text")
    if isinstance(text, str):
        return f"[resource {uri}]\n{text}"
    mime = resource.get("mimeType") or "unknown type"
    return f"[resource {uri}: {mime}, {_base64_size(resource.get('blob'))} bytes, not shown]"


def _link(item: JSONObject) -> str:
    parts = [f"[resource link: {item.get('name', '?')} {item.get('uri', '?')}"]
    if item.get("mimeType"):
        parts.append(f" ({item['mimeType']})")
    description = item.get("description")
    if isinstance(description, str):
        parts.append(f" - {description[:300]}")
    return "".join(parts) + "]"


def describe_item(item: object) -> str:
    """One content block as text for the model."""
    if not isinstance(item, dict):
        return "[content: malformed]"
    kind = item.get("type")
    if kind == "text":
        return str(item.get("text", ""))
    if kind in ("image", "audio"):
        return _binary(kind, item)
    if kind == "resource":
        return _resource(item)
    if kind == "resource_link":
        return _link(item)
    return f"[content of type {str(kind)[:40]!r}, not shown]"


def tool_result(result: JSONObject, max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES
                ) -> JSONObject:
    """The result dict of one ``tools/call`` answer (see the module docstring)."""
    content = result.get("content")
    items = content if isinstance(content, list) else []
    texts = [describe_item(item) for item in items[:MAX_CONTENT_ITEMS]]
    if len(items) > MAX_CONTENT_ITEMS:
        texts.append(f"[... {len(items) - MAX_CONTENT_ITEMS} more content blocks left out]")
    text = _cut("\n".join(texts), max_text_bytes)
    if result.get("isError") is True:
        return {"success": False, "error": text or "the tool reported an error"}
    out: JSONObject = {"success": True, "content": text}
    structured = result.get("structuredContent")
    if isinstance(structured, dict):
        size = len(json.dumps(structured, ensure_ascii=False, default=str).encode("utf-8"))
        if size <= max_text_bytes:
            out["structured"] = structured
        else:
            out["structured_note"] = f"structured content of {size} bytes left out"
    return out
