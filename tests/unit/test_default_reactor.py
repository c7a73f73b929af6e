"""Tests for ai_tools.default_reactor: the global reactor as the default, looked up late."""

from __future__ import annotations

import subprocess
import sys

from twisted.internet import task

from ai_tools.default_reactor import global_reactor, or_global_reactor
from ai_tools.store.clock import now_seconds

MODULES_WITH_THE_DEFAULT = [
    "ai_tools.contrib.evennia.service", "ai_tools.llm.client", "ai_tools.llm.scripted",
    "ai_tools.llm.server", "ai_tools.mcp.server_stdio",
    "ai_tools.service.service", "ai_tools.standalone.app",
    "ai_tools.standalone.plugin", "ai_tools.store.clock", "ai_tools.store.postgres_listener",
    "ai_tools.web.api", "ai_tools.web.body", "ai_tools.web.listen", "ai_tools.world.sandbox",
    "ai_tools.world.shared",
]
"""The modules that default to the global reactor (``ai_tools.standalone.console`` uses it too,
but imports ``twisted.conch.insults``, which imports the reactor itself)."""


def test_a_given_reactor_is_kept() -> None:
    clock = task.Clock()
    assert or_global_reactor(clock) is clock


def test_none_gives_the_global_reactor() -> None:
    from twisted.internet import reactor

    assert global_reactor() is reactor
    assert or_global_reactor(None) is reactor


def test_the_stores_clock_uses_the_given_clock_or_the_global_one() -> None:
    clock = task.Clock()
    clock.advance(12.5)
    assert now_seconds(clock) == 12.5
    assert now_seconds(None) > 1_000_000_000  # the reactor's wall-clock seconds


def test_importing_the_modules_installs_no_reactor() -> None:
    """The default is looked up when used: a program may install its own reactor first."""
    code = (
        "import importlib, sys\n"
        f"for name in {MODULES_WITH_THE_DEFAULT!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        pass  # an optional extra (Evennia) not installed\n"
        "assert 'twisted.internet.reactor' not in sys.modules, 'reactor imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
