"""The world file after the first start: telling whether it changed, and applying it.

The world file seeds the store's world once; after that the store's world is
the world (what happens in the game changes it).  When the file changes later
it is not applied by itself — :class:`~ai_tools.world.sandbox.SandboxWorld`
says so at start-up (by comparing :func:`world_digest` with the one saved
when the file was last applied) — and an operator applies it on purpose, in
one of two ways:

* ``merge`` (:func:`merged_world`): what the file has is added, or replaces
  the world's row with the same id/key, except where an existing object is
  (nobody and nothing is moved); what was made in the game stays;
* ``reseed`` (:func:`reseeded_world`): the world becomes the file's; rows
  the file does not have are deleted.

Neither touches the assistants' state: their history and memories are in
the store's assistant records, not in the world.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["DIGEST_KEY", "SECTIONS", "merged_world", "reseeded_world", "world_digest"]

DIGEST_KEY = "seed_digest"
"""The world meta key holding the digest of the world file last applied."""
SECTIONS = {"objects": "id", "channels": "key", "prototypes": "key", "help": "key"}
"""The world's row sections and the field each is keyed by."""


def world_digest(data: Mapping[str, Any]) -> str:
    """A digest of world data (a parsed world file), insensitive to key order."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _rows(data: Mapping[str, Any], section: str) -> dict[str, dict[str, Any]]:
    key = SECTIONS[section]
    return {str(row[key]): dict(row) for row in data.get(section) or () if key in row}


def merged_world(current: Mapping[str, Any], file: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` world data with the file's rows added or replacing theirs (see the module)."""
    merged: dict[str, Any] = {}
    for section in SECTIONS:
        rows = _rows(current, section)
        for key, row in _rows(file, section).items():
            if section == "objects" and key in rows:
                row["location"] = rows[key].get("location")
            rows[key] = row
        merged[section] = list(rows.values())
    merged["meta"] = {**dict(current.get("meta") or {}), **dict(file.get("meta") or {})}
    return merged


def reseeded_world(current: Mapping[str, Any], file: Mapping[str, Any]
                   ) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The file's world, and the keys of ``current`` rows to delete (``{section: [keys]}``)."""
    deletes = {section: sorted(set(_rows(current, section)) - set(_rows(file, section)))
               for section in SECTIONS}
    world: dict[str, Any] = {section: list(file.get(section) or ()) for section in SECTIONS}
    world["meta"] = dict(file.get("meta") or {})
    return world, {s: keys for s, keys in deletes.items() if keys}
