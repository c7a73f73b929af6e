"""What a function's docstring tells a model: the summary and each parameter's description.

Parsing is done by docstring_parser, which reads the Google, NumPy and reST
(Sphinx ``:param x:``) styles and picks the one a docstring is written in;
epytext (``@param x:``) is read too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import docstring_parser

__all__ = ["FunctionDocs", "read_docstring"]


@attrs.frozen
class FunctionDocs:
    """The parts of a docstring a tool is described by."""

    summary: str
    """The first paragraph, on one line ("" when there is no docstring)."""
    parameters: dict[str, str]
    """Each documented parameter's description, on one line."""


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def read_docstring(function: Callable[..., Any]) -> FunctionDocs:
    """The summary and parameter descriptions of ``function``'s docstring.

    A docstring no style can parse raises ``ValueError`` naming the problem.
    """
    text = function.__doc__ or ""
    if not text.strip():
        return FunctionDocs(summary="", parameters={})
    try:
        parsed = docstring_parser.parse(text)
    except docstring_parser.ParseError as e:
        raise ValueError(f"its docstring cannot be read: {e}") from e
    summary = parsed.short_description or ""
    if parsed.long_description and not parsed.blank_after_short_description:
        # a summary wrapped over several lines: its first paragraph goes on
        summary += " " + parsed.long_description.split("\n\n", 1)[0]
    return FunctionDocs(
        summary=_one_line(summary),
        parameters={p.arg_name.lstrip("*"): _one_line(p.description)
                    for p in parsed.params if p.description},
    )
