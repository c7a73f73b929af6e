"""doc_lookup and its index; docs/tools.md stays in step with the registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from ai_tools.tools.base import Actor
from ai_tools.tools.doc_index import (
    DocumentationIndex,
    default_doc_directories,
    split_sections,
)
from ai_tools.tools.documentation import DocLookupTool
from ai_tools.tools.reference import render_reference
from tests.unit.tool_fakes import refusals, run_tool

REPO_DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_docs_tools_page_is_generated_from_the_registry() -> None:
    """Regenerate with: python -m ai_tools.tools.reference > docs/tools.md"""
    assert (REPO_DOCS / "tools.md").read_text(encoding="utf-8") == render_reference()


def test_split_sections_follows_headings_not_code() -> None:
    text = "intro\n# One\nalpha\n```\n# not a heading\n```\n## Two\nbeta\n"
    sections = split_sections("docs/x.md", text)
    assert [(s.heading, s.text.splitlines()[0]) for s in sections] == [
        ("docs/x.md", "intro"), ("One", "alpha"), ("Two", "beta")]
    assert "# not a heading" in sections[1].text


def make_docs(tmp_path: Path) -> Path:
    (tmp_path / "a.md").write_text(
        "# Lanterns\nA lantern burns fuel.\n# Benches\nSit down here.\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("# Fuel\nFuel, fuel and more fuel.\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("fuel fuel fuel", encoding="utf-8")
    return tmp_path


def test_index_ranks_sections(tmp_path: Path) -> None:
    index = DocumentationIndex.from_directories([make_docs(tmp_path)])
    assert index.pages == ["docs/a.md", "docs/b.md"]
    hits = index.search("fuel", limit=5)
    assert [h["section"] for h in hits] == ["Fuel", "Lanterns"]
    assert hits[0]["page"] == "docs/b.md" and hits[0]["score"] > hits[1]["score"]
    assert index.search("!!!") == [] and index.search("dragons") == []


def test_index_cuts_long_sections() -> None:
    index = DocumentationIndex(split_sections("docs/long.md", "# Long\n" + "word " * 1000))
    (hit,) = index.search("word")
    assert len(hit["text"]) <= 1502 and hit["text"].endswith("…")


def test_doc_lookup_over_given_pages(tmp_path: Path) -> None:
    class Lookup(DocLookupTool):
        doc_directories = (make_docs(tmp_path),)

    result = run_tool(Lookup(), Actor(character_id=None), query="sit", source="docs")
    assert result["success"] is True and result["help"] == []
    assert [d["section"] for d in result["docs"]] == ["Benches"]
    empty = run_tool(Lookup(), Actor(character_id=None), query="dragons")
    assert empty["count"] == 0 and "dragons" in empty["message"]


def test_doc_lookup_finds_the_shipped_pages() -> None:
    assert any((d / "tools.md").is_file() for d in default_doc_directories())
    result = run_tool(DocLookupTool(), Actor(character_id=None), query="spawn_prototype prototype")
    assert result["docs"] and result["docs"][0]["page"] == "docs/tools.md"


@pytest.mark.parametrize(
    ("params", "bad"),
    [({}, "query"), ({"query": ""}, "query"), ({"query": "x", "source": "web"}, "source"),
     ({"query": "x", "limit": 11}, "limit"), ({"query": "?!"}, "query")],
)
def test_doc_lookup_schema_refusals(params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(DocLookupTool(), **params))
