"""Fail when a class has too many methods, or when ``Any`` annotations exceed a ceiling.

``python scripts/check_class_size.py [--max-methods 40] [--max-any N] ai_tools``:

- prints every class with more than ``--max-methods`` methods (functions defined in the
  class body, properties included) as ``path:line Name: N methods``;
- counts ``Any`` in parameter, return and variable annotations of the trees (``Any`` and
  ``typing.Any`` alike, string annotations parsed too), prints the total and the files with
  the most, and fails when the total is over ``--max-any``.

``make lint`` runs it; like ``scripts/check_function_length.py`` it exists because ruff has no
such rule.  The ceilings keep the hub classes split (issue "narrow rooms") and collaborators
typed by their interfaces rather than ``Any``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path


def wide_classes(tree: ast.AST, path: Path, limit: int) -> Iterator[str]:
    """``path:line Name: N methods`` for each class of ``tree`` over ``limit`` methods."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods = [item for item in node.body
                       if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)]
            if len(methods) > limit:
                yield f"{path}:{node.lineno} {node.name}: {len(methods)} methods (max {limit})"


def _annotations(tree: ast.AST) -> Iterator[ast.expr]:
    """Every parameter, return and variable annotation in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                     arguments.vararg, arguments.kwarg]
            yield from (arg.annotation for arg in every if arg and arg.annotation)
            if node.returns is not None:
                yield node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation


def _count_any(annotation: ast.expr) -> int:
    """How many times ``Any`` is named in one annotation (a quoted one is parsed first)."""
    count = 0
    for node in ast.walk(annotation):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                count += _count_any(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                continue
        elif isinstance(node, ast.Name) and node.id == "Any":
            count += 1
        elif isinstance(node, ast.Attribute) and node.attr == "Any":
            count += 1
    return count


def any_count(tree: ast.AST) -> int:
    """``Any`` occurrences in the annotations of one module."""
    return sum(_count_any(annotation) for annotation in _annotations(tree))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-methods", type=int, default=40)
    parser.add_argument("--max-any", type=int, default=None)
    parser.add_argument("--top", type=int, default=0, help="list the N files with most Any")
    parser.add_argument("trees", nargs="+", type=Path)
    args = parser.parse_args(argv)
    wide: list[str] = []
    anys: Counter[str] = Counter()
    for root in args.trees:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            wide.extend(wide_classes(tree, path, args.max_methods))
            anys[str(path)] = any_count(tree)
    total = sum(anys.values())
    print("\n".join(wide) if wide else f"no class over {args.max_methods} methods")
    ceiling = "" if args.max_any is None else f" (max {args.max_any})"
    print(f"Any in annotations: {total}{ceiling}")
    for path, count in anys.most_common(args.top):
        print(f"  {count:5d} {path}")
    too_many = args.max_any is not None and total > args.max_any
    return 1 if wide or too_many else 0


if __name__ == "__main__":
    sys.exit(main())
