"""The Python examples of README.md and docs/: found in the pages, and run.

Every fenced ``python`` block of a page is an example that runs.  Two HTML
comments (invisible on the rendered page) say how, placed just before a block:

* ``<!-- example: continued -->`` — the block goes on from the block before it
  (same names, same program), as a method body shown after its class would;
* ``<!-- example setup:`` ... ``-->`` — Python run before the block and kept from
  the reader: it makes the names the prose speaks of (a running ``service``, a
  ``world``) without repeating a page's worth of set-up in every snippet.

A program (a block, its hidden set-up, and the blocks continuing it) runs in its
own interpreter, in an empty directory where ``examples/`` is the repository's,
so the files it writes are thrown away.  Top-level ``await`` is allowed (the
program then runs inside ``task.react``, as ``python -m asyncio`` would run it),
so a snippet may read as the body of an async function.  Functions named
``test_*`` that a program defines are then called, as pytest would (a test
returning a Deferred or a coroutine is waited for on the reactor), so an example
of a test is run too.

Run a page by hand: ``python -m tests.integration.docs_examples docs/service.md``.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parents[2]

_BLOCK = re.compile(
    r"(?P<comment><!--\s*example(?P<kind>:\s*continued|\s+setup:)(?P<setup>.*?)-->\s*\n)?"
    r"^```python[ \t]*\n(?P<code>.*?)^```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


@attrs.frozen
class Program:
    """Blocks of one page that run together, in order; ``line`` is where the first starts."""

    page: str
    line: int
    segments: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """The pages whose examples must run: the README and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def programs(page: Path) -> list[Program]:
    """The programs of ``page``: each block, with its hidden set-up and its continuations."""
    text = page.read_text(encoding="utf-8")
    name = str(page.relative_to(ROOT))
    found: list[Program] = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code"))
        code = match.group("code")
        kind = (match.group("kind") or "").strip()
        if kind.startswith(":"):  # continued
            if not found:
                raise ValueError(f"{name}:{line}: a continued example with no example before it")
            last = found.pop()
            found.append(attrs.evolve(last, segments=(*last.segments, code)))
            continue
        setup = inspect.cleandoc(match.group("setup") or "")
        found.append(Program(name, line, (f"{setup}\n", code) if setup else (code,)))
    return found


def run_segments(segments: list[str], filename: str) -> None:
    """Run the segments in one namespace (inside ``task.react`` if any awaits at top
    level), then the ``test_*`` functions they define."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    codes = [compile(segment, f"{filename} (block {i + 1})", "exec", flags=flags)
             for i, segment in enumerate(segments)]
    namespace: dict[str, Any] = {"__name__": "__main__"}
    if not any(code.co_flags & inspect.CO_COROUTINE for code in codes):
        for i, code in enumerate(codes):
            try:
                exec(code, namespace)
            except SystemExit as e:  # task.react ends the program
                if e.code not in (0, None) or i < len(codes) - 1:
                    raise
                return
        _react(_run_tests(namespace), needed=False)
        return

    async def main() -> None:
        for code in codes:
            result = eval(code, namespace)
            if inspect.iscoroutine(result):
                await result
        await _run_tests(namespace)

    _react(main(), needed=True)


async def _run_tests(namespace: dict[str, Any]) -> None:
    """Call each ``test_*`` function of the namespace; wait for what it returns."""
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            print(f"running {name}", flush=True)
            result = value()
            if inspect.isawaitable(result):
                await result


def _react(coroutine: Any, needed: bool) -> None:
    """Run ``coroutine`` on the reactor; without ``needed``, only if it waits on something."""
    from twisted.internet import defer, task
    from twisted.python.failure import Failure

    d = defer.ensureDeferred(coroutine)
    if not needed and d.called:
        outcome: list[Any] = []
        d.addBoth(outcome.append)
        if isinstance(outcome[0], Failure):
            outcome[0].raiseException()
        return
    task.react(lambda reactor: d)


def main(argv: list[str]) -> int:
    """``docs_examples PROGRAM.json`` runs a program the test wrote; ``docs_examples PAGE``
    lists a page's programs."""
    target = Path(argv[0])
    if target.suffix == ".json":
        program = json.loads(target.read_text(encoding="utf-8"))
        run_segments(program["segments"], program["name"])
        return 0
    for program in programs(target.resolve()):
        print(program.name, f"({len(program.segments)} block(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
