"""Fail when a function in the given trees is longer than the limit (ruff has no such rule).

``python scripts/check_function_length.py [--max 60] ai_tools``: prints every function
(decorators excluded, docstring included) longer than ``--max`` lines as
``path:line name: N lines`` and exits 1 if there is one.  ``make lint`` runs it.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path


def long_functions(path: Path, limit: int) -> Iterator[str]:
    """``path:line name: N lines`` for each function of ``path`` over ``limit`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                yield f"{path}:{node.lineno} {node.name}: {length} lines (max {limit})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=60)
    parser.add_argument("trees", nargs="+", type=Path)
    args = parser.parse_args(argv)
    found = [line for tree in args.trees for path in sorted(tree.rglob("*.py"))
             for line in long_functions(path, args.max)]
    print("\n".join(found) if found else f"no function over {args.max} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
