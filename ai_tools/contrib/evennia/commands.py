"""The ``aiassistant`` builder command: create, attach, inspect and steer assistants.

Add :class:`AIAssistantCmdSet` (or just :class:`CmdAIAssistant`) to the game's
``CharacterCmdSet``.  The command is locked to Builders (and so to Developers,
above them in Evennia's permission hierarchy).

Scripts hold the truth; when the AssistantService runs in this process (see
:mod:`.service`) every change is applied to it at once, otherwise it is picked
up when the service starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from evennia import CmdSet
from evennia.commands.default.muxcommand import MuxCommand
from evennia.utils import create
from evennia.utils.evtable import EvTable
from evennia.utils.utils import inherits_from
from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.contrib.evennia.conf import ai_setting
from ai_tools.contrib.evennia.game_objects import GameObject
from ai_tools.contrib.evennia.lookup import (
    all_assistant_scripts,
    get_assistant_script,
    get_assistant_script_for_character,
)
from ai_tools.json_types import JSONMapping, JSONObject

if TYPE_CHECKING:
    from ai_tools.contrib.evennia.scripts import AssistantScript
    from ai_tools.contrib.evennia.service import EvenniaAssistantHost

NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
"""An assistant's name, whole (``fullmatch``: ``$`` would let a trailing newline through)."""
"""Assistant names: a letter, then letters, digits, ``_`` or ``-`` (at most 40)."""

MIXIN = "ai_tools.contrib.evennia.hearing.AssistantCharacterMixin"

CONFIG_KEYS = (
    "persona",
    "model",
    "tick_rate",
    "sleep_tick_rate",
    "sleep_duration",
    "reflection_interval",
    "autonomous",
    "execution_config",
    "tool_budget",
    "exit_tools",
    "native_tools",
    "stream",
    "max_history",
    "max_pending_events",
    "context_window",
    "hearing",
    "approval",
    "tool_approval",
    "approval_timeout",
    "mcp_servers",
)
"""The AssistantConfig fields a builder may set with ``aiassistant/config``."""


def _undeclared_mcp_servers(names: Iterable[str] | None) -> str | None:
    """Why ``mcp_servers = names`` names a server ``AI_TOOLS_MCP_SERVERS`` lacks (None: fine)."""
    from ai_tools.contrib.evennia.conf import ai_setting

    declared = ai_setting("AI_TOOLS_MCP_SERVERS") or {}
    missing = [n for n in names or () if n not in declared]
    if not missing:
        return None
    return (f"no MCP server {', '.join(map(repr, missing))} in AI_TOOLS_MCP_SERVERS "
            f"(declared: {', '.join(sorted(declared)) or 'none'})")


def _host() -> EvenniaAssistantHost | None:
    from ai_tools.contrib.evennia.service import get_host

    return get_host()


def _short(value: object, limit: int = 70) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CmdAIAssistant(MuxCommand):
    """
    Create and manage AI assistants (NPCs driven by a language model).

    Usage:
      aiassistant                              - list the assistants
      aiassistant/create <name>[ = <description>]
      aiassistant/attach <character> = <name>
      aiassistant/enable <name>
      aiassistant/disable <name>
      aiassistant/status [<name>]
      aiassistant/history <name>[ = <count>]
      aiassistant/stop <name>
      aiassistant/config <name>[ <key> = <json value>]
      aiassistant/tools [<name>]
      aiassistant/approvals
      aiassistant/approve <id>
      aiassistant/refuse <id>[ = <reason>]

    Switches:
      create  - make a new assistant character here and start it.
      attach  - make an existing character (that you control) an assistant.
      enable  - let the assistant act again.
      disable - make it idle (it still hears; events wait).
      status  - its mode, counters and what its last tick did.
      history - the last messages of its conversation history.
      stop    - kill what it is doing right now (model call or tool).
      config  - show its config, or set one key (an empty value removes it).
      tools   - the tools it may use, by category.
      approvals - the tool calls waiting for an operator's approval.
      approve - let a waiting call run (needs the approval lock, Admin by default).
      refuse  - refuse a waiting call; the assistant is told the reason.

    Players talk to an assistant with say, whisper or page. It acts with
    its own character's permissions; what players without Builder rights ask
    of it never runs DANGEROUS tools.
    """

    key = "aiassistant"
    aliases = ["@aiassistant", "aia"]
    switch_options = (
        "create",
        "attach",
        "enable",
        "disable",
        "status",
        "history",
        "stop",
        "config",
        "tools",
        "approvals",
        "approve",
        "refuse",
    )
    locks = "cmd:perm(aiassistant) or perm(Builder)"
    help_category = "Building"

    def func(self) -> None:
        """Dispatch on the switch."""
        switch = self.switches[0] if self.switches else "status"
        handler = getattr(self, f"do_{switch}", None)
        if handler is None:
            self.msg(f"Unknown switch /{switch}. See |whelp aiassistant|n.")
            return
        handler()

    # -- helpers ---------------------------------------------------------------------

    def _script(self, name: str) -> AssistantScript | None:
        name = name.strip()
        if not name:
            self.msg("Which assistant? Give its name.")
            return None
        script = get_assistant_script(name)
        if script is None:
            target = self.caller.search(name, quiet=True)
            target = target[0] if target else None
            script = get_assistant_script_for_character(target) if target else None
        if script is None:
            self.msg(f"No assistant called '{name}'.")
        return script

    def _report(self, d: defer.Deferred[object], done: str) -> None:
        """Tell the caller when the service has applied a change (or why it failed)."""

        def ok(_: object) -> None:
            self.msg(done)

        def failed(failure: Failure) -> None:
            self.msg(f"|rThe assistant service refused: {failure.getErrorMessage()}|n")

        d.addCallbacks(ok, failed)

    # -- switches --------------------------------------------------------------------

    def do_create(self) -> None:
        """Create an assistant character in the caller's location."""
        name = self.lhs.strip()
        if not NAME_PATTERN.fullmatch(name):
            self.msg(
                "Usage: aiassistant/create <name>[ = <description>] (a letter, then "
                "letters, digits, _ or -)."
            )
            return
        if get_assistant_script(name) is not None:
            self.msg(f"An assistant called '{name}' already exists.")
            return
        location = self.caller.location
        if location is None:
            self.msg("You must stand in a room to create an assistant there.")
            return
        typeclass = ai_setting("AI_TOOLS_CHARACTER_TYPECLASS")
        character = create.create_object(typeclass, key=name, location=location, home=location)
        character.db.desc = self.rhs.strip() if self.rhs else f"{name} looks attentive."
        character.locks.add(f"control:id({self.caller.id}) or perm(Admin)")
        script = self._new_script(character, name)
        self.msg(f"Created assistant |w{name}|n ({character.dbref}) with script {script.dbref}.")
        location.msg_contents(f"{name} appears.", exclude=[self.caller])
        self._start(script)

    @staticmethod
    def _new_script(character: GameObject, name: str) -> AssistantScript:
        """Create, tag and enable the assistant script of ``character``."""
        typeclass = ai_setting("AI_TOOLS_SCRIPT_TYPECLASS")
        script = create.create_script(typeclass, obj=character, autostart=True)
        script.bind(name)
        script.db.enabled = True
        return script

    def _start(self, script: AssistantScript) -> None:
        """Run the new assistant now if the service runs here."""
        host = _host()
        name = script.assistant_key
        if host is not None:
            self._report(host.attach(script), f"Assistant |w{name}|n is running.")
        else:
            self.msg("The assistant service is not running here; it will start with it.")

    def do_attach(self) -> None:
        """Make an existing character an assistant."""
        if not self.rhs:
            self.msg("Usage: aiassistant/attach <character> = <name>")
            return
        name = self.rhs.strip()
        if not NAME_PATTERN.fullmatch(name):
            self.msg("Assistant names start with a letter, then letters, digits, _ or -.")
            return
        if get_assistant_script(name) is not None:
            self.msg(f"An assistant called '{name}' already exists.")
            return
        character = self.caller.search(self.lhs.strip(), global_search=True)
        if not character:
            return
        if not inherits_from(character, "evennia.objects.objects.DefaultCharacter"):
            self.msg(f"{character.key} is not a character.")
            return
        if not (
            character.access(self.caller, "control") or self.caller.check_permstring("Developer")
        ):
            self.msg(f"You do not control {character.key}.")
            return
        if get_assistant_script_for_character(character) is not None:
            self.msg(f"{character.key} already has an assistant.")
            return
        script = self._new_script(character, name)
        self.msg(f"{character.key} ({character.dbref}) is now assistant |w{name}|n.")
        self._start(script)
        if not inherits_from(character, MIXIN):
            self.msg(
                "|yIts typeclass does not include AssistantCharacterMixin, so it will not "
                "hear what is said to it.|n"
            )

    def _set_enabled(self, enabled: bool) -> None:
        script = self._script(self.lhs)
        if script is None:
            return
        script.db.enabled = enabled
        word = "enabled" if enabled else "disabled"
        host = _host()
        if host is not None:
            self._report(
                host.set_enabled(script.assistant_key, enabled),
                f"Assistant |w{script.assistant_key}|n {word}.",
            )
        else:
            self.msg(
                f"Assistant |w{script.assistant_key}|n {word} (applies when the service starts)."
            )

    def do_enable(self) -> None:
        """Let the assistant act."""
        self._set_enabled(True)

    def do_disable(self) -> None:
        """Make the assistant idle."""
        self._set_enabled(False)

    def _status_of(self, script: AssistantScript) -> JSONObject:
        host = _host()
        name = script.assistant_key
        if host is not None and name in host.service:
            status = host.service.status(name)
            status["running"] = True
            return status
        summary = script.summary()
        summary["running"] = False
        return summary

    def do_status(self) -> None:
        """One assistant in detail, or a table of all of them."""
        if self.lhs.strip():
            script = self._script(self.lhs)
            if script is not None:
                self.msg(self.format_status(script.assistant_key, self._status_of(script)))
            return
        scripts = all_assistant_scripts()
        if not scripts:
            self.msg("No assistants yet. Create one with |waiassistant/create <name>|n.")
            return
        table = EvTable(
            "|wname|n",
            "|wcharacter|n",
            "|wenabled|n",
            "|wmode|n",
            "|wpending|n",
            "|wlast tick|n",
            border="cells",
        )
        for script in scripts:
            status = self._status_of(script)
            character = script.obj
            table.add_row(
                script.assistant_key,
                f"{character.key} ({character.dbref})" if character else "-",
                "yes" if status.get("enabled") else "no",
                status.get("mode", "?"),
                status.get("pending_events", 0),
                self._last_tick_text(status.get("last_tick")),
            )
        host = _host()
        running = "running" if host is not None else "not running in this process"
        self.msg(f"|wAI assistants|n (service {running})\n{table}")

    @staticmethod
    def _last_tick_text(last: JSONMapping | None) -> str:
        if not last:
            return "none yet"
        text = f"#{last.get('tick')} {last.get('status')}"
        if last.get("reason"):
            text += f" ({last.get('reason')})"
        if last.get("iterations"):
            text += f", {last.get('iterations')} iteration(s)"
        if last.get("errors"):
            text += f", {len(last['errors'])} error(s)"
        return text

    def format_status(self, name: str, status: JSONMapping) -> str:
        """The text of ``aiassistant/status <name>``."""
        lines = [
            f"|wAssistant {name}|n"
            + ("" if status.get("running") else " |y(service not running)|n")
        ]
        fields = [
            ("character", status.get("character_id")),
            ("enabled", status.get("enabled")),
            ("mode", status.get("mode")),
            ("emergency stopped", status.get("emergency_stopped")),
            ("ticking now", status.get("ticking")),
            ("ticks", status.get("tick_number")),
            ("pending events", status.get("pending_events")),
            ("history messages", status.get("history_length")),
            ("last tick", self._last_tick_text(status.get("last_tick"))),
        ]
        for label, value in fields:
            if value is not None:
                lines.append(f"  {label}: {value}")
        last = status.get("last_tick") or {}
        for error in last.get("errors") or ():
            lines.append(f"  |rerror:|n {_short(error, 200)}")
        counters = status.get("counters") or {}
        if counters:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(counters.items()) if v)
            lines.append(f"  counters: {shown or 'all zero'}")
        return "\n".join(lines)

    def do_history(self) -> None:
        """The last messages of the conversation history."""
        script = self._script(self.lhs)
        if script is None:
            return
        count = int(ai_setting("AI_TOOLS_HISTORY_LINES"))
        if self.rhs:
            try:
                count = max(1, int(self.rhs.strip()))
            except ValueError:
                self.msg("The count must be a number.")
                return
        host = _host()
        name = script.assistant_key
        if host is not None and name in host.service:
            history = host.service.history(name)
        else:
            history = script.history()
        if not history:
            self.msg(f"Assistant {name} has no history yet.")
            return
        lines = [f"|wHistory of {name}|n (last {min(count, len(history))} of {len(history)})"]
        for message in history[-count:]:
            lines.append(f"  |c{message.get('role', '?')}|n: {self._message_text(message)}")
        self.msg("\n".join(lines))

    @staticmethod
    def _message_text(message: JSONMapping) -> str:
        calls = message.get("tool_calls") or ()
        if calls:
            described = []
            for call in calls:
                function = call.get("function") or {}
                arguments = _short(function.get("arguments", ""), 60)
                described.append(f"{function.get('name')}({arguments})")
            return f"[calls {', '.join(described)}]"
        return _short(message.get("content") or "", 160)

    def do_stop(self) -> None:
        """Kill the model call or tool in flight."""
        script = self._script(self.lhs)
        if script is None:
            return
        host = _host()
        name = script.assistant_key
        if host is None or name not in host.service:
            self.msg(f"Assistant {name} is not running.")
            return
        stopped = host.service.stop_assistant(name, f"stopped by {self.caller.key}")
        self.msg(
            f"Stopped what {name} was doing." if stopped else f"{name} was not doing anything."
        )

    def do_config(self) -> None:
        """Show the config, or set one key."""
        target, _, key = self.lhs.strip().partition(" ")
        script = self._script(target)
        if script is None:
            return
        key = key.strip()
        name = script.assistant_key
        if not key:
            config = script.assistant_config()
            own = set((script.db.config or {}).keys())
            lines = [f"|wConfig of {name}|n (* = set for this assistant)"]
            for k in sorted(config):
                lines.append(f"  {k}{'*' if k in own else ''}: {_short(config[k], 100)}")
            self.msg("\n".join(lines))
            return
        if "=" not in self.args:
            config = script.assistant_config()
            self.msg(f"{name}: {key} = {_short(config.get(key), 300)}")
            return
        if key not in CONFIG_KEYS:
            self.msg(f"Unknown key '{key}'. Keys: {', '.join(CONFIG_KEYS)}.")
            return
        raw = (self.rhs or "").strip()
        value: object = None
        if raw:
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw  # plain text (a persona)
        old = dict(script.db.config or {})
        script.set_config(key, value)
        from ai_tools.errors import ConfigError
        from ai_tools.service.assistant import AssistantConfig

        try:
            AssistantConfig.from_mapping(script.assistant_config(), f"assistant {name}")
        except ConfigError as exc:
            script.db.config = old
            self.msg(f"|rNot changed: {exc}|n")
            return
        unknown = _undeclared_mcp_servers(value) if key == "mcp_servers" else None
        if unknown:
            script.db.config = old
            self.msg(f"|rNot changed: {unknown}|n")
            return
        shown = "removed" if value is None else f"= {_short(value, 100)}"
        host = _host()
        if host is not None:
            self._report(host.reload_assistant(name), f"{name}: {key} {shown} (applied).")
        else:
            self.msg(f"{name}: {key} {shown} (applies when the service starts).")

    def do_tools(self) -> None:
        """The registered tools by category, and an assistant's gates."""
        host = _host()
        if host is not None:
            registry = host.service.registry
        else:
            from ai_tools.contrib.evennia.service import build_registry

            registry = build_registry()
        from ai_tools.tools.base import ToolCategory

        lines = ["|wTools|n"]
        for category in ToolCategory:
            names = registry.get_tool_names_by_category(category)
            if names:
                lines.append(f"  |c{category.value}|n: {', '.join(names)}")
        if self.lhs.strip():
            script = self._script(self.lhs)
            if script is None:
                return
            execution = script.assistant_config().get("execution_config") or {}
            gates = {"default": {k: v for k, v in execution.items() if k != "contexts"}}
            gates.update(execution.get("contexts") or {})
            lines.append(f"|wGates of {script.assistant_key}|n (by tick context)")
            for context, layer in gates.items():
                allowed = [
                    f"{k}={_short(layer[k], 80)}"
                    for k in ("allowed_categories", "allowed_tools")
                    if k in layer
                ]
                lines.append(f"  {context}: {', '.join(allowed) or 'every tool'}")
        self.msg("\n".join(lines))


    # -- approvals (see ai_tools.service.approvals) ------------------------------------

    def do_approvals(self) -> None:
        """The tool calls waiting for an operator's approval."""
        host = _host()
        pending = host.service.approvals.pending() if host is not None else []
        if not pending:
            self.msg("No tool call waits for approval.")
            return
        table = EvTable("|wid|n", "|wassistant|n", "|wtool|n", "|warguments|n", border="cells")
        for entry in pending:
            table.add_row(entry["id"], entry["assistant"], entry["tool"],
                          _short(entry["arguments"], 60))
        self.msg(f"|wWaiting for approval|n\n{table}")

    def do_approve(self) -> None:
        """Let a waiting call run."""
        self._decide(True)

    def do_refuse(self) -> None:
        """Refuse a waiting call (``= reason`` is what the assistant reads)."""
        self._decide(False)

    def _decide(self, approve: bool) -> None:
        from ai_tools.errors import NotFound

        lock = ai_setting("AI_TOOLS_APPROVAL_LOCK")
        if not self.caller.locks.check_lockstring(self.caller, f"approve:{lock}"):
            self.msg("You may not answer approvals.")
            return
        host = _host()
        approval_id = self.lhs.strip()
        if host is None or not approval_id:
            self.msg("Which call? See |waiassistant/approvals|n."
                     if host is not None else "The assistant service is not running.")
            return
        board = host.service.approvals
        try:
            waiting = board.get(approval_id)
            script = get_assistant_script(waiting["assistant"])
            if script is not None and script.obj == self.caller:
                self.msg("An assistant cannot answer its own call.")
                return
            done = board.decide(approval_id, approve, by=f"world:{self.caller.key}",
                                reason=(self.rhs or "").strip())
        except NotFound as exc:
            self.msg(str(exc))
            return
        verdict = "approved" if approve else "refused"
        self.msg(f"{done['assistant']}: {done['tool']} {verdict}.")


class AIAssistantCmdSet(CmdSet):
    """The contrib's commands; add it to the game's ``CharacterCmdSet``."""

    key = "ai_tools_assistant"

    def at_cmdset_creation(self) -> None:
        """Evennia hook."""
        self.add(CmdAIAssistant())
