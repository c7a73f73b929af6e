"""What both stores share: JSON encoding, argument checks, the record and world shapes.

Values are encoded to JSON text in the caller's thread, before any write is
queued, so that a value that cannot be stored fails at once with a clear
message and a state dict the caller mutates afterwards cannot change what is
written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TypedDict

from ai_tools.interfaces import WORLD_SECTIONS  # (the IWorldStore contract's sections)
from ai_tools.json_encoding import compact_ascii_json
from ai_tools.json_types import JSONMapping, JSONObject, JSONValue

RECORD_FIELDS = (
    "id",
    "owner",
    "collection",
    "content",
    "metadata",
    "parent_id",
    "created_at",
    "updated_at",
)


# ASCII output: lone surrogates in model text survive as \u escapes instead of
# failing the UTF-8 encoding SQLite needs.  Prebuilt: a state is encoded after
# every loop iteration, and json.dumps would set up a new encoder every time.
_encode = compact_ascii_json


def encode_json(value: object, what: str) -> str:
    """JSON text of ``value``; TypeError/ValueError naming ``what`` if impossible."""
    try:
        return _encode(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{what} is not JSON-serialisable: {exc}") from None


def check_name(value: object, what: str) -> str:
    """A non-empty string, or TypeError/ValueError naming ``what``."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    return value


def check_state(state: object) -> str:
    """Encode an assistant state dict (the text an ``EncodedState`` carries, if it is one)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"assistant state must be a dict, not {type(state).__name__}")
    encoded = getattr(state, "json_text", None)  # an EncodedState (ai_tools.store.state_json)
    if isinstance(encoded, str):
        return encoded
    return encode_json(dict(state), "assistant state")


def check_metadata(metadata: object) -> str:
    """Encode record metadata (None means ``{}``)."""
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"record metadata must be a dict, not {type(metadata).__name__}")
    return encode_json(dict(metadata), "record metadata")


def check_content(content: object) -> str:
    """Record content: a string (lone surrogates and NUL characters become U+FFFD).

    Neither can be stored as text (UTF-8 has no surrogates; PostgreSQL text
    holds no NUL), and every store keeps the same content, so the rest of the
    content is kept and only those characters are replaced.
    """
    if not isinstance(content, str):
        raise TypeError(f"record content must be a string, not {type(content).__name__}")
    if "\x00" in content:
        content = content.replace("\x00", "\ufffd")
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        content = "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in content)
    return content


def check_expiry(expires_at: object) -> float | None:
    """A cache expiry time: None (never) or a finite number."""
    if expires_at is None:
        return None
    if isinstance(expires_at, bool) or not isinstance(expires_at, int | float):
        raise TypeError("expires_at must be a number or None")
    if not math.isfinite(expires_at):
        raise ValueError("expires_at must be finite")
    return float(expires_at)


def check_limit(limit: object) -> int:
    """A positive row limit."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, not {limit!r}")
    return limit


def record_dict(row: Sequence[JSONValue]) -> JSONObject:
    """A record dict from a row in :data:`RECORD_FIELDS` order (metadata as JSON text)."""
    record = dict(zip(RECORD_FIELDS, row, strict=True))
    metadata = record["metadata"]
    record["metadata"] = json.loads(metadata) if isinstance(metadata, str) and metadata else {}
    return record


def encode_world_changes(
    put: JSONMapping | None, delete: Mapping[str, Sequence[str]] | None
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, str], dict[str, list[str]]]:
    """Check and encode a world write: rows per section, meta, deleted keys per section.

    Returns ``(rows, meta, deletes)`` where ``rows[section]`` is a list of
    ``(key, json_text)``.  Unknown sections and rows without their key field
    raise ValueError.
    """
    rows: dict[str, list[tuple[str, str]]] = {}
    meta: dict[str, str] = {}
    deletes: dict[str, list[str]] = {}
    for section, items in (put or {}).items():
        if section == "meta":
            if not isinstance(items, Mapping):
                raise TypeError("world meta must be a dict")
            for key, value in items.items():
                meta[check_name(key, "world meta key")] = encode_json(value, f"world meta {key!r}")
            continue
        key_field = WORLD_SECTIONS.get(section)
        if key_field is None:
            raise ValueError(f"unknown world section {section!r}")
        if not isinstance(items, Iterable):
            raise TypeError(f"world {section} must be a list of rows")
        encoded = rows.setdefault(section, [])
        for item in items:
            if not isinstance(item, Mapping):
                raise TypeError(f"world {section} rows must be dicts")
            if key_field not in item:
                raise ValueError(f"world {section} row has no {key_field!r}: {dict(item)!r}")
            key = check_name(item[key_field], f"world {section} {key_field}")
            encoded.append((key, encode_json(dict(item), f"world {section} {key!r}")))
    for section, keys in (delete or {}).items():
        if section != "meta" and section not in WORLD_SECTIONS:
            raise ValueError(f"unknown world section {section!r}")
        deletes[section] = [check_name(key, f"world {section} key") for key in keys]
    return rows, meta, deletes


class ChangeOutcome(TypedDict):
    """What a shared-world change fires with (``ISharedWorldStore.change_world``)."""

    clock: int
    """The world clock value of its transaction: the version of the rows it wrote."""
    seqs: list[int]
    """The numbers its messages got, in order."""


def encode_world_message(message: JSONMapping) -> tuple[str, list[str], str | None]:
    """``(json_text, receivers, dedupe_key)`` of one shared-world message.

    ``message`` is ``{"data": {...}, "receivers": [ids], "dedupe_key": str | None}``;
    TypeError/ValueError when a field is not what it must be.
    """
    data, receivers = message["data"], message.get("receivers", ())
    dedupe_key = message.get("dedupe_key")
    if not isinstance(data, Mapping):
        raise TypeError(f"a world message's data must be a dict, not {type(data).__name__}")
    if not isinstance(receivers, Sequence) or isinstance(receivers, str):
        raise TypeError("a world message's receivers must be a list of ids")
    if dedupe_key is not None and not isinstance(dedupe_key, str):
        raise TypeError("a world message's dedupe_key must be a string or None")
    return (encode_json(dict(data), "world message"),
            [check_name(receiver, "receiver") for receiver in receivers], dedupe_key)
