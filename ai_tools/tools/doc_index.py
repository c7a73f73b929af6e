"""A small BM25 index over the project's markdown documentation, for ``doc_lookup``.

The pages are the ``docs/*.md`` files: shipped inside the package as
``ai_tools/docs/`` (a wheel install), or found next to the package in a source
checkout.  Each page is split into sections at its headings, and a query is
ranked against the sections with the same BM25 the memory store uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

import attrs

import ai_tools
from ai_tools.json_types import JSONObject
from ai_tools.store.text_search import BM25, query_terms

_HEADING = re.compile(r"^(#{1,4})\s+(.*?)\s*#*\s*$")
EXCERPT_CHARS = 1500


@attrs.frozen
class DocSection:
    """One section of a documentation page."""

    page: str
    heading: str
    text: str


def default_doc_directories() -> list[Path]:
    """Where the documentation lives: the packaged copy, then a source checkout's docs/."""
    found: list[Path] = []
    packaged = resources.files(ai_tools).joinpath("docs")
    if packaged.is_dir():
        found.append(Path(str(packaged)))
    checkout = Path(ai_tools.__file__).resolve().parent.parent / "docs"
    if checkout.is_dir() and checkout not in found:
        found.append(checkout)
    return found


def split_sections(page: str, text: str) -> list[DocSection]:
    """Split markdown ``text`` at headings (fenced code blocks are not split)."""
    sections: list[DocSection] = []
    heading = page
    lines: list[str] = []
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        match = None if in_fence else _HEADING.match(line)
        if match:
            if "".join(lines).strip():
                sections.append(DocSection(page, heading, "\n".join(lines).strip()))
            heading = match.group(2)
            lines = []
        else:
            lines.append(line)
    if "".join(lines).strip():
        sections.append(DocSection(page, heading, "\n".join(lines).strip()))
    return sections


class DocumentationIndex:
    """Sections of every page, searchable by keywords."""

    def __init__(self, sections: Sequence[DocSection]) -> None:
        self.sections = list(sections)
        self._bm25 = BM25([f"{s.heading}\n{s.heading}\n{s.text}" for s in self.sections])

    @classmethod
    def from_directories(cls, directories: Iterable[Path]) -> DocumentationIndex:
        """Index every ``*.md`` page of ``directories`` (the first copy of a page wins)."""
        sections: list[DocSection] = []
        seen: set[str] = set()
        for directory in directories:
            for path in sorted(Path(directory).glob("*.md")):
                if path.name in seen:
                    continue
                seen.add(path.name)
                text = path.read_text(encoding="utf-8", errors="replace")
                sections.extend(split_sections(f"docs/{path.name}", text))
        return cls(sections)

    @property
    def pages(self) -> list[str]:
        """The pages indexed, sorted."""
        return sorted({s.page for s in self.sections})

    def search(self, query: str, limit: int = 3) -> list[JSONObject]:
        """The best sections for ``query``: page, section, score, excerpt."""
        terms = query_terms(query)
        if not terms or not self.sections:
            return []
        scored = [
            (score, i) for i, score in enumerate(self._bm25.scores(terms)) if score > 0
        ]
        scored.sort(key=lambda hit: (-hit[0], hit[1]))
        hits: list[JSONObject] = []
        for score, i in scored[:limit]:
            section = self.sections[i]
            text = section.text
            if len(text) > EXCERPT_CHARS:
                text = text[:EXCERPT_CHARS].rsplit(" ", 1)[0] + " …"
            hits.append({
                "page": section.page,
                "section": section.heading,
                "score": score,
                "text": text,
            })
        return hits
