"""Documentation domain: looking things up in the project's docs and the host's help."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.doc_index import DocumentationIndex, default_doc_directories
from ai_tools.tools.library_tool import LibraryTool, call


class DocLookupTool(LibraryTool):
    """Search the engine's documentation and the world's help entries."""

    name = "doc_lookup"
    description = "Search the engine manual and the game's help."
    category = ToolCategory.SAFE_CHAIN
    cacheable = True
    cache_scope = "session"
    needs_world = False
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 300,
                "pattern": "\\w",
            },
            "source": {
                "type": "string",
                "enum": ["all", "docs", "help"],
                "default": "all",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10,
                "default": 3,
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"query": "tag categories", "source": "all"}

    doc_directories: ClassVar[tuple[Path, ...] | None] = None
    """Override where pages are read from (None: the packaged docs or a checkout's docs/)."""
    _index: DocumentationIndex | None = None

    def index(self) -> DocumentationIndex:
        """The documentation index, built on first use (the pages are small)."""
        if self._index is None:
            directories = self.doc_directories or tuple(default_doc_directories())
            self._index = DocumentationIndex.from_directories(directories)
        return self._index

    async def run(
        self, actor: Actor, query: str, source: str = "all", limit: int = 3, **_: object
    ) -> JSONObject:
        docs: list[JSONObject] = []
        help_entries: list[JSONObject] = []
        if source in ("all", "docs"):
            docs = self.index().search(query, limit)
        world = self.world(actor)
        if source in ("all", "help") and world is not None:
            found = await call(world.help_search, query, limit)
            help_entries = [dict(h) for h in found or ()][:limit]
        result = outcomes.succeed(
            query=query, count=len(docs) + len(help_entries), docs=docs, help=help_entries
        )
        if not docs and not help_entries:
            result["message"] = f"no documentation matches {query!r}"
        return result


TOOLS = (DocLookupTool,)
