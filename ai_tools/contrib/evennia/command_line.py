"""Running a command line as a character: refusals decided first, output captured.

Evennia's command handler runs only what the caller may call: it merges the
caller's command sets (its own, its room's, nearby objects' and exits'),
matches the line against them and drops every match whose ``cmd:`` lock the
caller fails.  With nothing left it *tells* the caller, in words that differ
between Evennia releases ("Command 'tel' is not available..."), and the
command "succeeds".  The assistant's model must read a refusal as a refusal,
so :func:`command_refusal` asks Evennia the same questions before anything
runs — with Evennia's own parts: the merged command set
(``get_and_merge_cmdsets``), the game's command parser
(``settings.COMMAND_PARSER``) and each command's lock (``Command.access``) —
and never reads the message text.  :func:`run_captured` then runs an allowed
line through ``execute_cmd`` and collects what the character is sent.
"""

from __future__ import annotations

from collections.abc import Generator

from django.conf import settings
from twisted.internet import defer

from ai_tools.contrib.evennia.game_objects import (
    CommandParser,
    GameCmdSet,
    GameCommand,
    GameObject,
)
from ai_tools.json_types import JSONObject

__all__ = ["command_refusal", "merged_cmdset", "run_captured"]

PERMISSION_DENIED = "permission_denied"
NOT_FOUND = "not_found"


def _refusal(command: str, error: str, reason: str) -> JSONObject:
    """A world answer that ``execute_command`` callers read as a refusal."""
    return {"command": command, "output": [reason], "success": False, "error": error}


@defer.inlineCallbacks
def merged_cmdset(char: GameObject, line: str
                  ) -> Generator[defer.Deferred[GameCmdSet], GameCmdSet, GameCmdSet | None]:
    """The command set ``char`` would type ``line`` into (None if it has none).

    The same merge Evennia's command handler does for an object caller: the
    character's own sets, then those of its location and the objects near it.
    """
    from evennia.commands.cmdhandler import generate_cmdset_providers, get_and_merge_cmdsets

    _, providers, _, caller, _ = generate_cmdset_providers(char)
    cmdset = yield get_and_merge_cmdsets(caller, providers, "object", line)
    return cmdset


def _parser() -> CommandParser:
    from evennia.utils.utils import variable_from_module

    return variable_from_module(*settings.COMMAND_PARSER.rsplit(".", 1))


def _named(line: str, cmdset: GameCmdSet) -> list[GameCommand]:
    """Commands of ``cmdset`` whose name or alias begins ``line``, whatever their locks.

    Matched as the default parser matches: with the prefixes first, then without
    the ignorable ones (``settings.CMD_IGNORE_PREFIXES``, e.g. ``@tel`` for ``tel``).
    """
    lowered = line.lower()
    stripped = lowered.lstrip(settings.CMD_IGNORE_PREFIXES) if len(lowered) > 1 else lowered
    named = []
    for cmd in cmdset:
        if cmd.match(lowered, include_prefixes=True)[0] or cmd.match(
            stripped, include_prefixes=False
        )[0]:
            named.append(cmd)
    return named


@defer.inlineCallbacks
def command_refusal(char: GameObject, line: str
                    ) -> Generator[defer.Deferred[object], object, JSONObject | None]:
    """Why ``char`` may not run ``line`` (a refusal dict), or None when it may.

    * a command ``char`` may call matches ``line``: None (Evennia runs it and
      settles ambiguities itself);
    * only commands whose ``cmd:`` lock refuses ``char`` match: ``permission_denied``;
    * nothing matches and the game has no catch-all (``CMD_NOMATCH``) command:
      ``not_found``.
    """
    from evennia.commands.cmdhandler import CMD_NOMATCH

    line = line.strip()
    cmdset = yield merged_cmdset(char, line)
    if cmdset is None or _parser()(line, cmdset, char):
        return None
    named = _named(line, cmdset)
    if named:
        locks = "; ".join(sorted({str(cmd.locks) for cmd in named}))
        names = ", ".join(sorted({cmd.key for cmd in named}))
        return _refusal(
            line, PERMISSION_DENIED, f"{char.key} may not use {names} (lock: {locks})"
        )
    if cmdset.get(CMD_NOMATCH) is not None:
        return None  # the game answers unknown input itself
    word = line.split()[0] if line.split() else line
    return _refusal(line, NOT_FOUND, f"{char.key} has no command called {word!r}")


def run_captured(char: GameObject, line: str) -> defer.Deferred[JSONObject]:
    """Run ``line`` as ``char`` (``execute_cmd``); fires with what it was sent.

    While the command runs, ``char.msg`` collects the lines sent to the
    character itself; what others say meanwhile still reaches it normally.
    """
    from evennia.utils.ansi import strip_ansi

    output: list[str] = []
    original = char.msg
    had_own = "msg" in vars(char)

    def capture(text: object = None, from_obj: object = None, **kwargs: object) -> None:
        if from_obj is not None and from_obj != char:
            return original(text=text, from_obj=from_obj, **kwargs)
        if text is not None:
            shown = text[0] if isinstance(text, tuple | list) else text
            output.extend(strip_ansi(str(shown)).splitlines())
        return None

    def restore(result: object) -> object:
        if had_own:
            char.msg = original
        else:
            vars(char).pop("msg", None)
        return result

    char.msg = capture
    try:
        d = defer.maybeDeferred(char.execute_cmd, line)
    except Exception:
        restore(None)
        raise
    d.addBoth(restore)
    d.addCallback(lambda _: {"command": line, "output": list(output), "success": True})
    return d
