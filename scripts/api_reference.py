"""Build the API reference of the public names with pydoctor (``make docs``).

The public surface is what a user imports: the names ``ai_tools`` re-exports,
``ai_tools.tools`` (tools, registries, ``ai_tools.tool``), the service, the loop
and the engine, the model client, ``ai_tools.testing``, the interfaces and errors,
and the Evennia contrib's public classes.  Every other module is internal: it is
left out of the reference (hidden), and so are names starting with ``_``.

pydoctor runs with ``--warnings-as-errors``: a docstring that does not parse or
a link to a name that does not exist fails the build (``make lint`` runs it too).
Docstrings are reStructuredText with Sphinx's cross-reference roles
(``:class:``, ``:func:``...).  Two forms of those pydoctor does not read — a
``~`` before the target (show only its last part) and a target relative to the
current package (``.engine``) — are written out in full on a copy of the
sources, which pydoctor reads; nothing else of the docstrings is changed.
The build is offline: names outside the project (Python's, Twisted's) are
written as literals, not links.

Run: ``python scripts/api_reference.py [--output build/apidocs]``.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from pydoctor.driver import main as pydoctor_main

ROOT = Path(__file__).resolve().parents[1]

PUBLIC_MODULES = (
    "ai_tools",
    "ai_tools.errors",
    "ai_tools.interfaces",
    "ai_tools.testing",
    "ai_tools.tools",
    "ai_tools.tools.base",
    "ai_tools.tools.registry",
    "ai_tools.tools.callable_tool",
    "ai_tools.tools.function_tool",
    "ai_tools.service",
    "ai_tools.service.service",
    "ai_tools.service.assistant",
    "ai_tools.service.tick",
    "ai_tools.loop",
    "ai_tools.loop.config",
    "ai_tools.loop.context",
    "ai_tools.loop.result",
    "ai_tools.loop.run",
    "ai_tools.execution",
    "ai_tools.execution.engine",
    "ai_tools.execution.outcome",
    "ai_tools.execution.reasons",
    "ai_tools.llm",
    "ai_tools.llm.client",
    "ai_tools.llm.profile",
    "ai_tools.llm.events",
    "ai_tools.contrib",
    "ai_tools.contrib.evennia",
)
"""The modules of the reference (each with its public names)."""


_ROLE_TARGET = re.compile(r"(:[a-z]+:`)(~?)(\.?)([A-Za-z_][\w.]*`)")
"""A role's target: the ``~`` and the leading ``.`` (relative to the package) are rewritten."""


def write_out_targets(text: str, package: str) -> str:
    """``text`` with role targets in full: ``~a.b.C`` -> ``a.b.C``, ``.x`` -> ``package.x``."""

    def full(match: re.Match[str]) -> str:
        role, _, dot, rest = match.groups()
        return f"{role}{package}.{rest}" if dot else f"{role}{rest}"

    return _ROLE_TARGET.sub(full, text)


def copy_sources(destination: Path) -> Path:
    """The package copied to ``destination`` with its role targets written out; its path."""
    source = ROOT / "ai_tools"
    copy = destination / "ai_tools"
    for path in source.rglob("*.py"):
        relative = path.relative_to(ROOT)
        package = ".".join(relative.parts[:-1])  # of a module and of an __init__ alike
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(write_out_targets(path.read_text(encoding="utf-8"), package),
                          encoding="utf-8")
    return copy


def _internal_children() -> list[str]:
    """Modules and packages right under a public package that are not public themselves
    (``package.*`` makes the package's names public, not everything below it)."""
    children = []
    for package in PUBLIC_MODULES:
        directory = ROOT.joinpath(*package.split("."))
        if not (directory / "__init__.py").exists():
            continue
        for child in sorted(directory.iterdir()):
            name = child.stem if child.suffix == ".py" else child.name
            is_module = child.suffix == ".py" and child.name != "__init__.py"
            if not (is_module or (child / "__init__.py").exists()):
                continue
            if f"{package}.{name}" not in PUBLIC_MODULES:
                children.append(f"{package}.{name}")
    return children


def pydoctor_arguments(output: Path, sources: Path) -> list[str]:
    """The pydoctor command line: every module parsed, only the public ones shown."""
    privacy = ["--privacy=HIDDEN:ai_tools.*"]
    for module in PUBLIC_MODULES:
        privacy.append(f"--privacy=PUBLIC:{module}")
        if module != "ai_tools":  # its names, not every module under it
            privacy.append(f"--privacy=PUBLIC:{module}.*")
    for module in _internal_children():
        privacy += [f"--privacy=HIDDEN:{module}", f"--privacy=HIDDEN:{module}.*"]
    privacy += ["--privacy=HIDDEN:ai_tools.*._*", "--privacy=HIDDEN:ai_tools.*.__*__"]
    return [
        "--project-name=ai_tools",
        f"--project-base-dir={sources.parent}",
        "--docformat=restructuredtext",
        f"--html-output={output}",
        "--warnings-as-errors",
        "--quiet",
        *privacy,
        str(sources),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "build" / "apidocs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        sources = copy_sources(Path(scratch))
        status = pydoctor_main(pydoctor_arguments(args.output, sources))
    if status == 0:
        print(f"API reference: {args.output / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
