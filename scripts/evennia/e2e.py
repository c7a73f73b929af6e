"""End-to-end test: a real Evennia server, a scripted model, players over telnet.

    .venv-evennia/bin/python scripts/evennia/e2e.py [--workdir var/evennia-test/e2e]

(``make test-evennia`` runs it after the unit tests.)  It

1. starts the project's scripted OpenAI-compatible model server
   (:mod:`ai_tools.testing`) on 127.0.0.1 in this process;
2. makes a fresh game directory with ``evennia --init``, installs the contrib
   the way the README says (server-services plugin, ``AIAssistantCmdSet``,
   settings pointing at the scripted model; every listener on 127.0.0.1,
   free ports) plus one deliberately broken tool, and runs ``evennia start``;
3. logs in a builder and a player over telnet; the builder creates the
   assistants Ada (here) and Bob (in another room) with ``aiassistant/create``;
4. checks, each as a named check: the player says hello and reads Ada's
   in-world answer; ``aiassistant/status`` shows the loop's result; a player
   without builder rights asking for a DANGEROUS tool is gated (the model is
   shown ``blocked_by_tool_mode``, the world is unchanged); a tool that raises
   inside the server leaves the server and Bob working; ``evennia reload``
   keeps Ada's history and she still answers; ``evennia stop`` ends both
   processes cleanly.

Everything is bounded in time (each wait, and the whole run); whatever
happens, the server is stopped (killed if it must be) before the run ends.
The last line is ``e2e: N passed, M failed``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from twisted.conch.telnet import TelnetProtocol, TelnetTransport
from twisted.internet import defer, protocol, task
from twisted.internet.utils import getProcessOutputAndValue

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WORKDIR = ROOT / "var" / "evennia-test" / "e2e"
TEMPLATE_DB = ROOT / "var" / "evennia-test" / "game" / "server" / "evennia.db3"

SUPERUSER, SUPERPASS = "Architect", "builder-pass-1"
PLAYER, PLAYERPASS = "Wanderer", "player-pass-1"

WAIT = 40.0
"""Seconds any single wait may take (a telnet answer, a command)."""

TOTAL = 420.0
"""Seconds the whole run may take."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

SCRIPT: dict[str, Any] = {
    "rules": [
        {
            "match": r"hello",
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "say",
                            "arguments": {
                                "message": "Welcome, traveller! I am the keeper of this place."
                            },
                        }
                    ]
                },
            ],
        },
        {
            "match": r"lamp",
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "execute_command",
                            "arguments": {"command": "@create/drop forbidden lamp"},
                        }
                    ]
                },
                {
                    "tool_calls": [
                        {
                            "name": "say",
                            "arguments": {"message": "I am not allowed to build that for you."},
                        }
                    ]
                },
            ],
        },
        {
            "match": r"button",
            "turns": [
                {"tool_calls": [{"name": "boom", "arguments": {}}]},
                {
                    "tool_calls": [
                        {"name": "say", "arguments": {"message": "Ouch, that button is broken."}}
                    ]
                },
            ],
        },
        {
            "match": r"cellar",
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "say",
                            "arguments": {"message": "Bob of the cellar at your service."},
                        }
                    ]
                },
            ],
        },
    ],
    "default": {"tool_calls": [{"name": "noop", "arguments": {}}]},
}
"""What the scripted model answers (rules match the newest user message)."""

FAULTS_MODULE = '''"""A tool that always raises: the end-to-end test's fault."""

from ai_tools.tools.base import Tool, ToolCategory


class BoomTool(Tool):
    name = "boom"
    description = "Press the red button (always fails, for the fault test)."
    category = ToolCategory.SAFE_CHAIN

    def execute(self, actor, **params):
        raise RuntimeError("the red button exploded inside the game process")
'''

SETTINGS = """
# --- written by ai_tools.contrib.evennia.e2e ------------------------------
SERVERNAME = "ai_tools_e2e"
TELNET_INTERFACES = ["127.0.0.1"]
TELNET_PORTS = [{telnet}]
AMP_HOST = "127.0.0.1"
AMP_INTERFACE = "127.0.0.1"
AMP_PORT = {amp}
WEBSERVER_ENABLED = False
WEBCLIENT_ENABLED = False
WEBSERVER_INTERFACES = ["127.0.0.1"]
WEBSOCKET_CLIENT_INTERFACE = "127.0.0.1"
IDLE_TIMEOUT = -1
GUEST_ENABLED = False
AUTH_PASSWORD_VALIDATORS = []
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The contrib, as its README installs it.
SERVER_SERVICES_PLUGIN_MODULES = [
    "server.conf.server_services_plugins",
    "ai_tools.contrib.evennia.service",
]
AI_TOOLS_LLM = {{"base_url": "{llm_url}", "model": "scripted-model", "api_key_env": None}}
AI_TOOLS_ASSISTANT_DEFAULTS = {{
    "persona": "You are a character in a text game. Answer briefly with your tools.",
    "tick_rate": 2.0,
    "execution_config": {{
        "max_iterations": 4,
        "contexts": {{
            "player": {{"allowed_categories": ["safe_chain", "terminal", "async_required"]}}
        }},
    }},
}}
AI_TOOLS_SERVICE_TICK = 0.25
AI_TOOLS_EXTRA_TOOLS = ["world.ai_faults.BoomTool"]
"""

CMDSET_HOOK = "        # any commands you add below will overload the default ones.\n"
CMDSET_ADDITION = (
    "        from ai_tools.contrib.evennia import AIAssistantCmdSet\n\n"
    "        self.add(AIAssistantCmdSet)\n"
)


def say(message: str) -> None:
    """One progress line."""
    print(f"[e2e] {message}", flush=True)


def free_ports(count: int) -> list[int]:
    """Distinct TCP ports free on 127.0.0.1 right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


# -- telnet ------------------------------------------------------------------------


class _Screen(TelnetProtocol):
    """Collects what the server sends (telnet options refused, ANSI stripped)."""

    def __init__(self) -> None:
        self.text = ""
        self.waiters: list[tuple[re.Pattern[str], int, defer.Deferred[str]]] = []
        self.closed: defer.Deferred[None] = defer.Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.text += _ANSI.sub("", data.decode("utf-8", "replace")).replace("\r", "")
        for waiter in list(self.waiters):
            pattern, start, d = waiter
            match = pattern.search(self.text, start)
            if match:
                self.waiters.remove(waiter)
                d.callback(match.group(0))

    def connectionLost(self, reason: Any) -> None:
        if not self.closed.called:
            self.closed.callback(None)


class Player:
    """A telnet client logged in as one account."""

    def __init__(self, reactor: Any, name: str, screen: _Screen, transport: Any) -> None:
        self.reactor = reactor
        self.name = name
        self.screen = screen
        self.transport = transport
        self.mark = 0

    @classmethod
    async def connect(cls, reactor: Any, port: int, name: str) -> Player:
        """Open a telnet connection and wait for the connection screen."""
        screen = _Screen()
        creator = protocol.ClientCreator(reactor, TelnetTransport, lambda: screen)
        transport = await creator.connectTCP("127.0.0.1", port, timeout=WAIT)
        player = cls(reactor, name, screen, transport)
        await player.expect(r"connect|Connect|create", "the connection screen")
        return player

    def send(self, line: str) -> None:
        """Type one line; later ``expect`` calls only look at newer output."""
        self.mark = len(self.screen.text)
        self.transport.write(line.encode("utf-8") + b"\r\n")

    async def expect(self, pattern: str, what: str, timeout: float = WAIT) -> str:
        """Wait for ``pattern`` in the output since the last ``send``."""
        regex = re.compile(pattern, re.DOTALL)
        match = regex.search(self.screen.text, self.mark)
        if match:
            return match.group(0)
        d: defer.Deferred[str] = defer.Deferred()
        self.screen.waiters.append((regex, self.mark, d))
        d.addTimeout(timeout, self.reactor)
        try:
            return await d
        except defer.TimeoutError:
            tail = self.screen.text[self.mark :][-800:]
            raise AssertionError(
                f"{self.name}: no {what} within {timeout:.0f}s; got:\n{tail}"
            ) from None

    async def command(self, line: str, pattern: str, what: str, timeout: float = WAIT) -> str:
        """Send ``line`` and wait for ``pattern``; returns the output since the line."""
        self.send(line)
        await self.expect(pattern, what, timeout)
        return self.screen.text[self.mark :]

    async def login(self, password: str, create: bool = False) -> None:
        """Log in (creating the account first if asked); fires once in Limbo."""
        if create:
            await self.command(
                f"create {self.name} {password}", r"created|[Ww]elcome", "account creation"
            )
        await self.command(f"connect {self.name} {password}", r"Limbo", "login into Limbo")

    def close(self) -> None:
        """Hang up."""
        self.transport.loseConnection()


# -- the game directory and the server processes --------------------------------------


class Game:
    """A fresh game directory and the ``evennia`` commands run in it."""

    def __init__(self, reactor: Any, workdir: Path, llm_url: str) -> None:
        self.reactor = reactor
        self.dir = workdir / "game"
        self.workdir = workdir
        self.llm_url = llm_url
        self.telnet_port, self.amp_port = free_ports(2)
        self.evennia = str(Path(sys.executable).parent / "evennia")

    async def create(self) -> None:
        """Make, configure and migrate the game directory."""
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        await self.run("--init", self.dir.name, cwd=self.workdir)
        settings = self.dir / "server" / "conf" / "settings.py"
        text = settings.read_text()
        marker = "try:\n    from server.conf.secret_settings import *"
        extra = SETTINGS.format(telnet=self.telnet_port, amp=self.amp_port, llm_url=self.llm_url)
        settings.write_text(text.replace(marker, extra + "\n" + marker))
        cmdsets = self.dir / "commands" / "default_cmdsets.py"
        text = cmdsets.read_text()
        assert CMDSET_HOOK in text, "the game template's CharacterCmdSet changed"
        cmdsets.write_text(text.replace(CMDSET_HOOK, CMDSET_HOOK + CMDSET_ADDITION, 1))
        (self.dir / "world" / "ai_faults.py").write_text(FAULTS_MODULE)
        if TEMPLATE_DB.exists():
            # A freshly migrated, never started database: the same as migrating again.
            shutil.copy(TEMPLATE_DB, self.dir / "server" / "evennia.db3")
        else:
            await self.run("migrate")

    def env(self) -> dict[str, str]:
        """The environment of ``evennia`` commands (superuser for the first start)."""
        env = dict(os.environ)
        env.update(
            EVENNIA_SUPERUSER_USERNAME=SUPERUSER,
            EVENNIA_SUPERUSER_PASSWORD=SUPERPASS,
            EVENNIA_SUPERUSER_EMAIL="",
            PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
        )
        return env

    async def run(self, *args: str, cwd: Path | None = None, timeout: float = 120.0) -> str:
        """Run ``evennia args...``; fails with its output if it fails or hangs."""
        d = getProcessOutputAndValue(
            self.evennia, args, env=self.env(), path=str(cwd or self.dir), reactor=self.reactor
        )
        d.addTimeout(timeout, self.reactor)
        out, err, code = await d
        text = out.decode("utf-8", "replace") + err.decode("utf-8", "replace")
        if code != 0:
            raise AssertionError(f"evennia {' '.join(args)} exited {code}:\n{text[-2000:]}")
        return text

    async def control(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``evennia start|reload|stop``, again if the launcher timed out.

        The launcher gives the Portal ten seconds to answer; on a loaded machine
        it may take longer, and running the same command again is how Evennia
        itself says to recover ("Try again").
        """
        outputs = []
        for attempt in range(4):
            output = await self.run(*args, timeout=timeout)
            outputs.append(output)
            if "timed out" not in output:
                break
            say(f"evennia {' '.join(args)}: the launcher timed out (attempt {attempt + 1})")
            await task.deferLater(self.reactor, 2.0, lambda: None)
        return "\n".join(outputs)

    def pids(self) -> dict[str, int]:
        """The pids of the running Server and Portal (from their pid files)."""
        found = {}
        for name in ("server", "portal"):
            path = self.dir / "server" / f"{name}.pid"
            if path.exists():
                try:
                    found[name] = int(path.read_text().strip())
                except ValueError:
                    pass
        return found

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server log (for failure reports)."""
        path = self.dir / "server" / "logs" / "server.log"
        if not path.exists():
            return "(no server.log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """Last resort: SIGKILL whatever is still running from this game."""
        for name, pid in self.pids().items():
            try:
                os.kill(pid, signal.SIGKILL)
                say(f"killed leftover {name} process {pid}")
            except OSError:
                pass


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


# -- the checks ------------------------------------------------------------------------


class Checks:
    """Named checks, run in order; one failing is reported and the next still runs."""

    def __init__(self) -> None:
        self.passed: list[str] = []
        self.failed: list[tuple[str, str]] = []

    async def check(self, name: str, body: Callable[[], Awaitable[Any]]) -> bool:
        """Run one check; True if it passed."""
        started = time.monotonic()
        try:
            await body()
        except Exception as exc:  # report and go on
            self.failed.append((name, f"{type(exc).__name__}: {exc}"))
            say(f"FAIL {name} ({time.monotonic() - started:.1f}s): {exc}")
            return False
        self.passed.append(name)
        say(f"ok   {name} ({time.monotonic() - started:.1f}s)")
        return True


async def scenario(reactor: Any, workdir: Path, checks: Checks) -> None:
    """Run every check against one server; always stop it."""
    from ai_tools.testing import Script, start_test_server

    model = await start_test_server(Script.from_mapping(SCRIPT), reactor)
    game = Game(reactor, workdir, model.url)
    builder: Player | None = None
    player: Player | None = None
    started = False
    try:
        await game.create()
        say(f"game in {game.dir}; telnet 127.0.0.1:{game.telnet_port}; model {model.url}")

        async def start() -> None:
            nonlocal started
            output = await game.control("start", timeout=180.0)
            started = True
            # The very first start runs Evennia's initial setup, then restarts the
            # Server once; log in only after that.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                log = game.log_tail(400)
                up = "successfully started" in log or "successfully restarted" in log
                first = "Initial setup complete" in log
                if up and (not first or "successfully restarted" in log) and len(game.pids()) == 2:
                    break
                await task.deferLater(reactor, 0.5, lambda: None)
            else:
                raise AssertionError(
                    "the server did not come up (and restart after its setup); "
                    f"evennia start said:\n{output[-1500:]}"
                )
            pids = game.pids()
            assert set(pids) == {"server", "portal"}, f"pid files: {pids}"

        if not await checks.check("evennia start", start):
            return

        async def builder_creates_assistants() -> None:
            nonlocal builder
            builder = await Player.connect(reactor, game.telnet_port, SUPERUSER)
            await builder.login(SUPERPASS)
            await builder.command(
                "aiassistant/create Ada = A keeper in a grey coat.",
                r"Assistant Ada is running",
                "Ada running",
            )
            await builder.command("@dig Cellar", r"Created room Cellar\(#\d+\)", "the cellar")
            await builder.command("@tel Cellar", r"Cellar", "teleport to the cellar")
            await builder.command(
                "aiassistant/create Bob", r"Assistant Bob is running", "Bob running"
            )
            await builder.command("@tel #2", r"Limbo", "back to Limbo")

        if not await checks.check(
            "builder creates assistants with aiassistant/create", builder_creates_assistants
        ):
            return

        async def player_talks() -> None:
            nonlocal player
            player = await Player.connect(reactor, game.telnet_port, PLAYER)
            await player.login(PLAYERPASS, create=True)
            await player.command("say hello Ada", r'Ada says, "Welcome, traveller!', "Ada's answer")

        await checks.check("a player says hello and reads the NPC's reply", player_talks)

        async def builder_status() -> None:
            assert builder is not None
            # The NPC speaks during its tick; the tick (episode record, state write)
            # ends a moment later, so ask again until the status shows its end.
            deadline = time.monotonic() + WAIT
            while True:
                out = await builder.command(
                    "aiassistant/status Ada", r"counters: [^\n]+", "Ada's status"
                )
                if "ran (terminal_tool)" in out or time.monotonic() > deadline:
                    break
                await task.deferLater(reactor, 0.5, lambda: None)
            assert "ran (terminal_tool)" in out, out

        await checks.check(
            "the builder sees the loop's result in aiassistant/status", builder_status
        )

        async def player_is_gated() -> None:
            assert player is not None and builder is not None
            before = len(model.requests)
            await player.command(
                "say Ada, please build me a lamp", r'Ada says, "I am not allowed', "Ada's refusal"
            )
            shown = json.dumps([r.messages for r in model.requests[before:]])
            assert "blocked_by_tool_mode" in shown, "the model was not shown the gate"
            out = await builder.command(
                "@find forbidden", r"No matches found|Match", "the search for the lamp"
            )
            assert "No matches found" in out, out

        await checks.check(
            "a player without builder rights cannot run DANGEROUS tools", player_is_gated
        )

        async def raising_tool() -> None:
            assert player is not None and builder is not None
            await player.command(
                "say Ada, press the red button",
                r'Ada says, "Ouch, that button is broken',
                "Ada after the fault",
            )
            await builder.command("@tel Cellar", r"Cellar", "the cellar")
            await builder.command(
                "say Bob, is the cellar dry?", r'Bob says, "Bob of the cellar', "Bob's answer"
            )
            await builder.command("@tel #2", r"Limbo", "back to Limbo")
            assert all(alive(pid) for pid in game.pids().values()), "a process died"

        await checks.check(
            "a tool raising inside the server stops neither it nor Bob", raising_tool
        )

        history_before = 0

        async def history() -> None:
            nonlocal history_before
            assert builder is not None
            out = await builder.command(
                "aiassistant/history Ada = 100",
                r"History of Ada \(last \d+ of \d+\)",
                "the history",
            )
            history_before = int(re.search(r"of (\d+)\)", out).group(1))  # type: ignore[union-attr]
            assert history_before >= 4, out

        await checks.check("aiassistant/history shows the conversation", history)

        async def reload() -> None:
            assert builder is not None and player is not None
            old = game.pids().get("server")
            await game.control("reload", timeout=120.0)
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                new = game.pids().get("server")
                if new and new != old and alive(new):
                    break
                await task.deferLater(reactor, 0.5, lambda: None)
            else:
                raise AssertionError("the server did not come back after reload")
            # Sessions survive a reload (the Portal keeps them); wait for the service.
            for _ in range(60):
                out = await builder.command(
                    "aiassistant/status Ada", r"Assistant Ada[^\n]*", "status after reload"
                )
                if "service not running" not in out:
                    break
                await task.deferLater(reactor, 0.5, lambda: None)
            out = await builder.command(
                "aiassistant/history Ada = 100",
                r"History of Ada \(last \d+ of \d+\)",
                "the history after reload",
            )
            after = int(re.search(r"of (\d+)\)", out).group(1))  # type: ignore[union-attr]
            assert after >= history_before > 0, (history_before, after)
            await player.command(
                "say hello again, Ada",
                r'Ada says, "Welcome, traveller!',
                "Ada's answer after reload",
            )

        await checks.check("evennia reload keeps the history and the NPC still answers", reload)

        async def stop() -> None:
            nonlocal started
            pids = game.pids()
            assert player is not None
            await game.control("stop", timeout=120.0)
            deadline = time.monotonic() + 30
            while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
                await task.deferLater(reactor, 0.25, lambda: None)
            assert not any(alive(p) for p in pids.values()), f"still running: {pids}"
            started = False
            await player.screen.closed.addTimeout(WAIT, reactor)
            log = game.log_tail(400)
            assert "AssistantService did not start" not in log, log[-2000:]
            assert "Unhandled error" not in log, log[-2000:]

        await checks.check("evennia stop shuts down cleanly", stop)
    finally:
        for client in (builder, player):
            if client is not None:
                client.close()
        if started:
            try:
                await game.control("stop", timeout=60.0)
            except Exception as exc:
                say(f"evennia stop failed ({exc}); killing")
                game.kill()
        if checks.failed:
            say("server.log tail:\n" + game.log_tail())
        await model.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the scenario on the real reactor, print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    args = parser.parse_args(argv)
    checks = Checks()
    outcome: dict[str, int] = {}

    async def run(reactor: Any) -> None:
        body = defer.ensureDeferred(scenario(reactor, args.workdir, checks))
        body.addTimeout(TOTAL, reactor)
        try:
            await body
        except Exception as exc:
            checks.failed.append(("the whole run", f"{type(exc).__name__}: {exc}"))
            say(f"FAIL the whole run: {exc}")

    def react_main(reactor: Any) -> defer.Deferred[None]:
        return defer.ensureDeferred(run(reactor))

    started = time.monotonic()
    try:
        task.react(react_main)
    except SystemExit as stop:
        outcome["code"] = int(stop.code or 0)
    say(f"finished in {time.monotonic() - started:.0f}s")
    print(f"e2e: {len(checks.passed)} passed, {len(checks.failed)} failed", flush=True)
    return 1 if checks.failed or not checks.passed else 0


if __name__ == "__main__":
    sys.exit(main())
