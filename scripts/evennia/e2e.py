"""End-to-end test: a real Evennia server, a scripted model, players over telnet.

    .venv-evennia-5.0/bin/python scripts/evennia/e2e.py [--workdir DIR] [--template-db FILE]

(``make test-evennia`` runs it after the unit tests, once per Evennia version.)  It

1. starts the project's scripted OpenAI-compatible model server
   (:mod:`ai_tools.testing`) on 127.0.0.1 in this process;
2. makes a fresh game directory with ``evennia --init``, installs the contrib
   the way the README says (server-services plugin, ``AIAssistantCmdSet``,
   settings pointing at the scripted model; every listener on 127.0.0.1,
   free ports) plus one deliberately broken tool, and runs ``evennia start``;
3. logs in a builder and a player over telnet; the builder creates the
   assistants Ada (here) and Bob (in another room) with ``aiassistant/create``;
4. checks, each as a named check: an MCP client acts as the builder's character through
   the game's MCP server (``AI_TOOLS_MCP_SERVE``); the player says hello and reads Ada's
   in-world answer; ``aiassistant/status`` shows the loop's result; a player
   without builder rights asking for a DANGEROUS tool is gated; a command Ada's
   character may not run reaches the model as ``permission_denied``; a tool
   that raises inside the server leaves the server and Bob working;
5. restarts the game seven times and times each: ``evennia reload`` while idle
   (Ada's history kept), ``evennia reload`` while Ada's model call is in flight
   (the scripted model takes its time over a question the first time it is
   asked), ``reload`` typed in the game by the builder with a call in flight
   (the Portal then starts the new Server itself), ``evennia stop`` + ``start``
   while idle and again with a call in flight, then one more idle reload and
   idle stop + start.  With a call in flight the old Server must exit within
   2 s of losing its Portal link (its own log says when), the game must be
   back within the slower idle time of the same run (timed before and after)
   plus 10 s, the telnet sessions kept across a reload must get output again, new
   connections after a start must get the connection screen, the cut-off
   question must be answered after the restart, and the server log written
   meanwhile must hold no traceback;
6. ``evennia stop`` ends both processes cleanly.

Everything is bounded in time (each wait, and the whole run); whatever
happens, the server is stopped (killed if it must be) before the run ends.
The last line is ``e2e: N passed, M failed``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from e2e_support import (
    WAIT,
    Checks,
    Game,
    Player,
    alive,
    free_ports,
    login_when_up,
    pause,
    say,
)
from twisted.internet import defer, task

from ai_tools.llm.scripted import last_user_message

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WORKDIR = ROOT / "var" / "evennia-test" / "e2e"

SUPERUSER, SUPERPASS = "Architect", "builder-pass-1"
PLAYER, PLAYERPASS = "Wanderer", "player-pass-1"

TOTAL = 1500.0
"""Seconds the whole run may take."""

SLOW = 120.0
"""Seconds the scripted model takes to answer a question the first time it is asked.

Longer than the launcher takes to order the restart even on a heavily loaded machine, so the
restart always finds the call in flight; asked again, it is answered at once."""

MARGIN = 10.0
"""Seconds a restart with a model call in flight may take beyond the idle one."""

RELOAD_LIMIT = 180.0
"""Seconds any reload may take before it counts as leaving the game down."""

RESTART_LIMIT = 300.0
"""Seconds any ``evennia stop`` + ``start`` may take before it counts as failed."""

PROMPT_STOP = 2.0
"""Seconds a Server told to stop may take from losing its Portal link to exiting.

The part of a restart the contrib decides, read from the Server's own log
(second resolution): with a call in flight it must not wait for the call.
Unlike the whole restart it hardly depends on the machine's load."""

_STOP_LINES = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\S* .*?"
    r"(Server disconnected from the portal\.|Server Shut Down\.)\s*$",
    re.MULTILINE,
)


def _say(message: str, latency: float = 0.0) -> dict[str, Any]:
    turn: dict[str, Any] = {"tool_calls": [{"name": "say", "arguments": {"message": message}}]}
    if latency:
        turn["latency"] = latency
    return turn


def _command(line: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "execute_command", "arguments": {"command": line}}]}


SCRIPT: dict[str, Any] = {
    "rules": [
        {"match": r"hello", "turns": [_say("Welcome, traveller! I am the keeper of this place.")]},
        {
            "match": r"lamp",
            "turns": [_command("@create/drop forbidden lamp"),
                      _say("I am not allowed to build that for you.")],
        },
        # A DANGEROUS tool ends the loop; the result is read on the next question.
        {"match": r"teleport", "turns": [_command("@tel Cellar")]},
        {"match": r"happened", "turns": [_say("I was not allowed to go.")]},
        {
            "match": r"button",
            "turns": [{"tool_calls": [{"name": "boom", "arguments": {}}]},
                      _say("Ouch, that button is broken.")],
        },
        {"match": r"cellar", "turns": [_say("Bob of the cellar at your service.")]},
        {"match": r"lantern", "once": True, "turns": [_say("Let me see...", SLOW)]},
        {"match": r"lantern", "turns": [_say("The lantern is lit; mind the step.")]},
        {"match": r"kettle", "once": True, "turns": [_say("Let me see...", SLOW)]},
        {"match": r"kettle", "turns": [_say("The kettle is on the fire.")]},
        {"match": r"candle", "once": True, "turns": [_say("Let me see...", SLOW)]},
        # Asked again after a stop + start: a moment later, once the players are back.
        {"match": r"candle", "turns": [_say("The candle burns for you now.", 10.0)]},
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
# --- written by the ai_tools end-to-end test ----------------------------------
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
# The game's tools as an MCP server, acting as the superuser's character (#1).
AI_TOOLS_MCP_SERVE = {{"character": "#1", "port": {mcp}}}
"""

CMDSET_HOOK = "        # any commands you add below will overload the default ones.\n"
CMDSET_ADDITION = (
    "        from ai_tools.contrib.evennia import AIAssistantCmdSet\n\n"
    "        self.add(AIAssistantCmdSet)\n"
)

TRACEBACK_SIGNS = ("Traceback (most recent call last)", "CancelledError", "Unhandled error")
"""What must not appear in the server log while the game restarts."""


def asks(request: Any, word: str) -> bool:
    """Whether a recorded model request's newest user message mentions ``word``."""
    return word in (last_user_message(request.messages) or "")


class Scenario:
    """One game, two players, and the checks in the order they run."""

    def __init__(self, reactor: Any, workdir: Path, template_db: Path | None) -> None:
        self.reactor = reactor
        self.workdir = workdir
        self.template_db = template_db
        self.checks = Checks()
        self.model: Any = None
        self.game: Game = None  # type: ignore[assignment]
        self.builder: Player | None = None
        self.player: Player | None = None
        self.started = False
        self.history_before = 0
        self.idle_reloads: list[float] = []
        self.idle_restarts: list[float] = []
        self.in_flight: list[tuple[str, float]] = []
        """How long each restart with a call in flight took (reloads, then restarts)."""
        self.mcp_port = 0
        self.pending: tuple[Any, int, int] = (None, 0, 0)
        """The cut-off model request, the server log's size then, the player's mark."""

    # -- set-up -------------------------------------------------------------------------

    async def create_game(self) -> None:
        """Make, configure and migrate the game directory."""
        game = self.game
        game.reset_dir()
        await game.run("--init", game.dir.name, cwd=game.workdir)
        settings = game.dir / "server" / "conf" / "settings.py"
        text = settings.read_text()
        marker = "try:\n    from server.conf.secret_settings import *"
        self.mcp_port = free_ports(1)[0]
        extra = SETTINGS.format(
            telnet=game.telnet_port, amp=game.amp_port, llm_url=self.model.url,
            mcp=self.mcp_port,
        )
        settings.write_text(text.replace(marker, extra + "\n" + marker))
        cmdsets = game.dir / "commands" / "default_cmdsets.py"
        text = cmdsets.read_text()
        assert CMDSET_HOOK in text, "the game template's CharacterCmdSet changed"
        cmdsets.write_text(text.replace(CMDSET_HOOK, CMDSET_HOOK + CMDSET_ADDITION, 1))
        (game.dir / "world" / "ai_faults.py").write_text(FAULTS_MODULE)
        if self.template_db is not None and self.template_db.exists():
            # A freshly migrated, never started database: the same as migrating again.
            shutil.copy(self.template_db, game.dir / "server" / "evennia.db3")
        else:
            await game.run("migrate")

    def clients(self) -> tuple[Player, Player]:
        """The builder and the player (both logged in by now)."""
        assert self.builder is not None and self.player is not None, "not logged in"
        return self.builder, self.player

    async def model_request(self, word: str, after: int) -> Any:
        """The first model request after index ``after`` asking about ``word``."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for request in self.model.requests[after:]:
                if asks(request, word):
                    return request
            await pause(self.reactor, 0.1)
        raise AssertionError(f"the model was never asked about the {word}")

    def clean_log(self, offset: int) -> None:
        """The server log written since ``offset`` holds no traceback."""
        written = self.game.log_since(offset)
        for sign in TRACEBACK_SIGNS:
            assert sign not in written, f"server.log has {sign!r}:\n{written[-3000:]}"

    def stopped_promptly(self, offset: int) -> None:
        """The first Server stop logged since ``offset`` took at most PROMPT_STOP seconds."""
        lost = None
        for stamp, line in _STOP_LINES.findall(self.game.log_since(offset)):
            at = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
            if line.startswith("Server disconnected"):
                lost = at if lost is None else lost
            elif lost is not None:
                took = at - lost
                assert took <= PROMPT_STOP, (
                    f"the old Server took {took:.0f}s from losing its Portal link to exiting"
                )
                return
        raise AssertionError("the server log shows no stop of the old Server")

    def in_time(self, idle: list[float]) -> None:
        """Every restart with a call in flight took at most the slowest idle one + MARGIN."""
        limit = max(idle) + MARGIN
        times = ", ".join(f"{what} {took:.1f}s" for what, took in self.in_flight)
        say(f"with a call in flight: {times}; idle: "
            f"{', '.join(f'{t:.1f}s' for t in idle)}; limit {limit:.1f}s")
        late = [(what, took) for what, took in self.in_flight if took > limit]
        self.in_flight = []
        assert not late, f"back only after {late} (limit {limit:.1f}s)"

    # -- the game's life ------------------------------------------------------------------

    async def start(self) -> None:
        """``evennia start``; the very first start restarts once after its setup."""
        output = await self.game.control("start", timeout=180.0)
        self.started = True
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            log = self.game.log_tail(400)
            up = "successfully started" in log or "successfully restarted" in log
            first = "Initial setup complete" in log
            if up and (not first or "successfully restarted" in log) and len(self.game.pids()) == 2:
                break
            await pause(self.reactor, 0.5)
        else:
            raise AssertionError(
                "the server did not come up (and restart after its setup); "
                f"evennia start said:\n{output[-1500:]}"
            )
        pids = self.game.pids()
        assert set(pids) == {"server", "portal"}, f"pid files: {pids}"

    async def reload(self, limit: float, in_game: bool = False) -> float:
        """``evennia reload``; seconds until the kept telnet sessions are answered again.

        The launcher is run once (a second ``reload`` would bring back a game
        the first one left down, hiding exactly what is tested here).  With
        ``in_game`` the builder types ``reload`` instead: then the Portal itself
        starts the new Server the moment the old one's link closes.
        """
        builder, player = self.clients()
        old = self.game.pids().get("server")
        started = time.monotonic()
        deadline = started + limit
        if in_game:
            builder.send("reload")
            launcher: defer.Deferred[str] = defer.succeed("")
        else:
            launcher = defer.ensureDeferred(self.game.run("reload", timeout=limit + 30))
        while old is not None and alive(old):
            if time.monotonic() > deadline:
                raise AssertionError(f"the old Server ({old}) still runs after {limit:.0f}s")
            await pause(self.reactor, 0.1)
        await builder.answered(deadline)
        await player.answered(deadline)
        elapsed = time.monotonic() - started
        output = await launcher
        if "timed out" in output:
            say("evennia reload: the launcher timed out, the game came back regardless")
        assert builder.connected and player.connected, "a telnet session was dropped"
        assert elapsed <= limit, f"the game was back only after {elapsed:.1f}s (limit {limit:.1f}s)"
        return elapsed

    async def restart(self, limit: float) -> float:
        """``evennia stop`` then ``start``; seconds until both players are logged in again.

        ``start`` follows ``stop`` at once, as an admin would type it.  It is run
        again only if the launcher says it timed out waiting for the Portal
        ("Try again", as Evennia tells the admin), which a loaded machine causes.
        """
        builder, player = self.clients()
        started = time.monotonic()
        deadline = started + limit
        await self.game.control("stop", timeout=limit + 30)
        await player.screen.closed.addTimeout(WAIT, self.reactor)
        await builder.screen.closed.addTimeout(WAIT, self.reactor)
        launcher = defer.ensureDeferred(self.game.control("start", timeout=limit + 30))
        port = self.game.telnet_port
        self.player = await login_when_up(self.reactor, port, PLAYER, PLAYERPASS, deadline)
        self.builder = await login_when_up(self.reactor, port, SUPERUSER, SUPERPASS, deadline)
        elapsed = time.monotonic() - started
        await launcher
        assert elapsed <= limit, f"the game was back only after {elapsed:.1f}s (limit {limit:.1f}s)"
        return elapsed

    # -- the checks ------------------------------------------------------------------------

    async def builder_creates_assistants(self) -> None:
        """The builder logs in and creates Ada here and Bob in the cellar."""
        self.builder = await Player.connect(self.reactor, self.game.telnet_port, SUPERUSER)
        builder = self.builder
        await builder.login(SUPERPASS)
        await builder.command(
            "aiassistant/create Ada = A keeper in a grey coat.",
            r"Assistant Ada is running",
            "Ada running",
        )
        await builder.command("@dig Cellar", r"Created room Cellar\(#\d+\)", "the cellar")
        await builder.command("@tel Cellar", r"Cellar", "teleport to the cellar")
        await builder.command("aiassistant/create Bob", r"Assistant Bob is running", "Bob running")
        await builder.command("@tel #2", r"Limbo", "back to Limbo")

    async def mcp_client_looks(self) -> None:
        """An MCP client (JSON-RPC over HTTP) acts as the builder's character: it sees Limbo."""
        import treq

        url = f"http://127.0.0.1:{self.mcp_port}/mcp"
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        opened = await treq.post(url, json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "e2e"}}}).encode(), headers=headers, timeout=WAIT)
        assert opened.code == 200, (opened.code, await opened.text())
        await opened.content()
        session = opened.headers.getRawHeaders("mcp-session-id")[0]
        looked = await treq.post(url, json.dumps({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "inspect_location", "arguments": {}}}).encode(),
            headers={**headers, "Mcp-Session-Id": session}, timeout=WAIT)
        answer = json.loads(await looked.content())
        text = answer["result"]["content"][0]["text"]
        assert not answer["result"]["isError"] and "Limbo" in text, answer

    async def player_talks(self) -> None:
        """A new player says hello and reads Ada's answer."""
        self.player = await Player.connect(self.reactor, self.game.telnet_port, PLAYER)
        await self.player.login(PLAYERPASS, create=True)
        await self.player.command(
            "say hello Ada", r'Ada says, "Welcome, traveller!', "Ada's answer"
        )

    async def status_shows(self, outcome: str) -> str:
        """Ask ``aiassistant/status Ada`` until its last tick shows ``outcome``."""
        builder, _ = self.clients()
        deadline = time.monotonic() + WAIT
        while True:
            out = await builder.command(
                "aiassistant/status Ada", r"counters: [^\n]+", "Ada's status"
            )
            if outcome in out or time.monotonic() > deadline:
                return out
            await pause(self.reactor, 0.5)

    async def builder_status(self) -> None:
        """``aiassistant/status`` shows the loop's result once the tick has ended."""
        # The NPC speaks during its tick; the tick (episode record, state write)
        # ends a moment later, so ask again until the status shows its end.
        out = await self.status_shows("ran (terminal_tool)")
        assert "ran (terminal_tool)" in out, out

    async def player_is_gated(self) -> None:
        """A player's request for a DANGEROUS tool is blocked before it runs."""
        builder, player = self.clients()
        before = len(self.model.requests)
        await player.command(
            "say Ada, please build me a lamp", r'Ada says, "I am not allowed', "Ada's refusal"
        )
        shown = json.dumps([r.messages for r in self.model.requests[before:]])
        assert "blocked_by_tool_mode" in shown, "the model was not shown the gate"
        out = await builder.command(
            "@find forbidden", r"No matches found|Match", "the search for the lamp"
        )
        assert "No matches found" in out, out

    async def command_refused(self) -> None:
        """A command Ada's character may not run reaches the model as a refusal."""
        builder, _ = self.clients()
        before = len(self.model.requests)
        builder.send("say Ada, teleport to the cellar")
        await self.model_request("teleport", before)
        out = await self.status_shows("ran (dangerous_tool)")
        assert "ran (dangerous_tool)" in out, out
        await builder.command(
            "say Ada, what happened?", r'Ada says, "I was not allowed', "Ada's answer"
        )
        shown = [
            m["content"]
            for r in self.model.requests[before:]
            for m in r.messages
            if m.get("role") == "tool" and "@tel" in str(m.get("content"))
        ]
        assert shown, "the model was not shown the command's result"
        result = json.loads(shown[-1])
        assert result["success"] is False, result
        assert result["status"] == "permission_denied", result
        out = await builder.command("examine Ada", r"Location: [^\n]+", "where Ada is")
        where = re.search(r"Location: ([^\n]+)", out).group(1)  # type: ignore[union-attr]
        assert "Limbo" in where, f"Ada moved: {where}"

    async def raising_tool(self) -> None:
        """A tool raising inside the server stops neither it nor Bob."""
        builder, player = self.clients()
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
        assert all(alive(pid) for pid in self.game.pids().values()), "a process died"

    async def history(self) -> None:
        """``aiassistant/history`` shows the conversation."""
        self.history_before = await self.history_length()
        assert self.history_before >= 4, self.history_before

    async def history_length(self) -> int:
        """How many messages ``aiassistant/history`` says Ada's history holds."""
        builder, _ = self.clients()
        out = await builder.command(
            "aiassistant/history Ada = 100", r"History of Ada \(last \d+ of \d+\)", "the history"
        )
        return int(re.search(r"History of Ada \(last \d+ of (\d+)\)", out).group(1))  # type: ignore[union-attr]

    async def reload_idle(self) -> None:
        """``evennia reload`` while idle: sessions kept, history kept, Ada still answers."""
        elapsed = await self.reload(limit=RELOAD_LIMIT)
        self.idle_reloads.append(elapsed)
        say(f"idle reload: the game answered again after {elapsed:.1f}s")
        builder, player = self.clients()
        for _ in range(60):
            out = await builder.command(
                "aiassistant/status Ada", r"Assistant Ada[^\n]*", "status after reload"
            )
            if "service not running" not in out:
                break
            await pause(self.reactor, 0.5)
        after = await self.history_length()
        assert after >= self.history_before > 0, (self.history_before, after)
        await player.command(
            "say hello again, Ada", r'Ada says, "Welcome, traveller!', "Ada's answer after reload"
        )

    async def cut_off(self, word: str, line: str) -> tuple[Any, int, int]:
        """Ask Ada something slow: her model request (in flight), the log size, the mark."""
        _, player = self.clients()
        before = len(self.model.requests)
        player.send(f"say Ada, {line}")
        mark = player.mark
        request = await self.model_request(word, before)
        assert not request.finished.called, "the model answered before the restart"
        return request, self.game.log_size(), mark

    async def answered_after(
        self, request: Any, word: str, answer: str, offset: int, since: int
    ) -> None:
        """The cut-off question is asked again and answered in-world; the log is clean."""
        _, player = self.clients()
        await player.expect(
            f'Ada says, "{answer}', f"Ada's answer about the {word}", WAIT, since=since
        )
        assert request.disconnected, "the cut-off model call was not dropped"
        later = [r for r in self.model.requests if r is not request and asks(r, word)]
        assert later, f"the {word} question was not asked again after the restart"
        self.clean_log(offset)

    @staticmethod
    def was_cut_off(request: Any) -> None:
        """The model call was still in flight when the Server stopped (it was dropped)."""
        assert not (request.finished.called and not request.disconnected), (
            f"the model answered before the restart reached the Server (after {SLOW:.0f}s): "
            "the machine is too slow for this check, nothing was cut off"
        )

    async def reload_in_flight(self) -> None:
        """``evennia reload`` with a model call in flight: back, sessions kept, prompt stop."""
        request, offset, mark = await self.cut_off("lantern", "please light the lantern.")
        self.pending = (request, offset, mark)
        elapsed = await self.reload(limit=RELOAD_LIMIT)
        self.was_cut_off(request)
        self.in_flight.append(("evennia reload", elapsed))
        say(f"reload with a call in flight: back after {elapsed:.1f}s")
        self.stopped_promptly(offset)

    async def answered_after_reload(self) -> None:
        """The question the reload cut off is answered after it; the log is clean."""
        request, offset, mark = self.pending
        await self.answered_after(request, "lantern", "The lantern is lit", offset, mark)

    async def reload_in_game(self) -> None:
        """``reload`` typed by the builder with a call in flight: back in time, answered."""
        request, offset, mark = await self.cut_off("kettle", "is the kettle on?")
        elapsed = await self.reload(limit=RELOAD_LIMIT, in_game=True)
        self.was_cut_off(request)
        self.in_flight.append(("in-game reload", elapsed))
        say(f"in-game reload with a call in flight: back after {elapsed:.1f}s")
        self.stopped_promptly(offset)
        await self.answered_after(request, "kettle", "The kettle is on", offset, mark)

    async def reloads_in_time(self) -> None:
        """Another idle reload; each one with a call in flight took at most idle + MARGIN.

        The idle reload is timed before and after those with a call in flight
        and the slower one counts, so a load peak on the machine during one of
        them does not decide the check; the contrib's own part of the time is
        checked by :meth:`stopped_promptly` regardless.
        """
        await self.reload_idle()
        self.in_time(self.idle_reloads)

    async def restart_idle(self) -> None:
        """``evennia stop`` + ``start`` while idle: new connections get the connection screen."""
        elapsed = await self.restart(limit=RESTART_LIMIT)
        self.idle_restarts.append(elapsed)
        say(f"idle stop + start: both players logged in again after {elapsed:.1f}s")

    async def restart_in_flight(self) -> None:
        """``evennia stop`` + ``start`` with a model call in flight: back, prompt stop."""
        old = self.game.pids()
        request, offset, _ = await self.cut_off("candle", "could you light a candle?")
        self.pending = (request, offset, 0)
        elapsed = await self.restart(limit=RESTART_LIMIT)
        self.was_cut_off(request)
        self.in_flight.append(("evennia stop + start", elapsed))
        say(f"stop + start with a call in flight: back after {elapsed:.1f}s")
        assert not any(alive(pid) for pid in old.values()), f"an old process still runs: {old}"
        self.stopped_promptly(offset)

    async def restarts_in_time(self) -> None:
        """Another idle stop + start; the one with a call in flight took at most idle + MARGIN."""
        await self.restart_idle()
        self.in_time(self.idle_restarts)

    async def answered_after_restart(self) -> None:
        """The question the stop cut off is answered after the start; the log is clean."""
        request, offset, _ = self.pending
        await self.answered_after(request, "candle", "The candle burns", offset, since=0)

    async def stop(self) -> None:
        """``evennia stop`` ends both processes and closes the sessions."""
        pids = self.game.pids()
        _, player = self.clients()
        await self.game.control("stop", timeout=120.0)
        deadline = time.monotonic() + 30
        while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
            await pause(self.reactor, 0.25)
        assert not any(alive(p) for p in pids.values()), f"still running: {pids}"
        self.started = False
        await player.screen.closed.addTimeout(WAIT, self.reactor)
        log = self.game.log_tail(400)
        assert "AssistantService did not start" not in log, log[-2000:]
        assert "Unhandled error" not in log, log[-2000:]

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Run every check against one server; always stop it."""
        from ai_tools.testing import Script, start_test_server

        self.model = await start_test_server(Script.from_mapping(SCRIPT), self.reactor)
        self.game = Game(self.reactor, self.workdir, {
            "EVENNIA_SUPERUSER_USERNAME": SUPERUSER,
            "EVENNIA_SUPERUSER_PASSWORD": SUPERPASS,
            "EVENNIA_SUPERUSER_EMAIL": "",
        })
        try:
            await self.create_game()
            say(f"game in {self.game.dir}; telnet 127.0.0.1:{self.game.telnet_port}; "
                f"model {self.model.url}")
            await self.run_checks()
        finally:
            await self.tear_down()

    async def run_checks(self) -> None:
        check = self.checks.check
        if not await check("evennia start", self.start):
            return
        if not await check("builder creates assistants with aiassistant/create",
                           self.builder_creates_assistants):
            return
        await check("an MCP client acts as the builder's character (AI_TOOLS_MCP_SERVE)",
                    self.mcp_client_looks)
        await check("a player says hello and reads the NPC's reply", self.player_talks)
        await check("the builder sees the loop's result in aiassistant/status",
                    self.builder_status)
        await check("a player without builder rights cannot run DANGEROUS tools",
                    self.player_is_gated)
        await check("a command the NPC may not run is refused as permission_denied",
                    self.command_refused)
        await check("a tool raising inside the server stops neither it nor Bob",
                    self.raising_tool)
        await check("aiassistant/history shows the conversation", self.history)
        if not await check("evennia reload keeps the history and the NPC still answers",
                           self.reload_idle):
            return
        if await check("evennia reload with a call in flight: sessions kept, old Server quits",
                       self.reload_in_flight):
            await check("the question the reload cut off is answered after it, no traceback",
                        self.answered_after_reload)
        await check("reload typed in the game with a model call in flight: back, answered",
                    self.reload_in_game)
        await check("reloads with a call in flight: back within an idle reload's time + 10 s",
                    self.reloads_in_time)
        if not await check("evennia stop + start: new connections get the connection screen",
                           self.restart_idle):
            return
        if await check("evennia stop + start with a call in flight: old Server quits",
                       self.restart_in_flight):
            await check("the question the stop cut off is answered after the start, no traceback",
                        self.answered_after_restart)
        await check("stop + start with a call in flight: back within an idle one's time + 10 s",
                    self.restarts_in_time)
        await check("evennia stop shuts down cleanly", self.stop)

    async def tear_down(self) -> None:
        for client in (self.builder, self.player):
            if client is not None:
                client.close()
        if self.started:
            try:
                await self.game.control("stop", timeout=60.0)
            except Exception as exc:
                say(f"evennia stop failed ({exc}); killing")
                self.game.kill()
        if self.checks.failed:
            say("server.log tail:\n" + self.game.log_tail(80))
        await self.model.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the scenario on the real reactor, print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--template-db", type=Path, default=None,
                        help="a freshly migrated evennia.db3 to copy instead of migrating")
    args = parser.parse_args(argv)
    checks = Checks()

    async def run(reactor: Any) -> None:
        scenario = Scenario(reactor, args.workdir, args.template_db)
        scenario.checks = checks
        body = defer.ensureDeferred(scenario.run())
        body.addTimeout(TOTAL, reactor)
        try:
            await body
        except Exception as exc:
            checks.failed.append(("the whole run", f"{type(exc).__name__}: {exc}"))
            say(f"FAIL the whole run: {exc}")

    started = time.monotonic()
    try:
        task.react(lambda reactor: defer.ensureDeferred(run(reactor)))
    except SystemExit:
        pass
    say(f"finished in {time.monotonic() - started:.0f}s")
    print(f"e2e: {len(checks.passed)} passed, {len(checks.failed)} failed", flush=True)
    return 1 if checks.failed or not checks.passed else 0


if __name__ == "__main__":
    sys.exit(main())
