"""The manhole: a Python console inside the running service, over SSH only.

Whoever logs in runs arbitrary Python as the service's user — treat access as
root on the service.  So: SSH only (no telnet), bound to 127.0.0.1 by default,
logins by public key (an ``authorized_keys`` file) and/or by password (a file
of salted scrypt or PBKDF2 hashes, never plain text), and a host key we create
ourselves with mode 0600.  Those files are refused, at start and at every
login, when another local user could change them (or read the secret ones),
as OpenSSH's ``StrictModes`` does (:mod:`ai_tools.standalone.file_modes`).
Text from the world (what players said, what the model wrote) is printed
without its control characters, so nobody can send escape sequences to the
operator's terminal.

Two ways in::

    ssh -p 2222 admin@127.0.0.1            # an interactive Python prompt
    ssh -p 2222 admin@127.0.0.1 'status()' # run one statement, print, exit

The namespace (:func:`console_namespace`) holds ``service``, ``world``,
``registry`` and helpers that print readable tables: ``status()``,
``history(name, n=20)``, ``say(name, text)``, ``tick(name)``, ``stop(name)``,
``tools()``, ``cache_stats()``, ``heard(character_id, n=20)``.  Helpers that
wait (``say``, ``tick``) return a Deferred; the console prints its result
when it fires.

Password file lines are ``user:$scrypt$n=16384,r=8,p=1$<salt>$<hash>`` or
``user:$pbkdf2-sha256$i=600000$<salt>$<hash>`` (base64 salt and hash); make
one with ``python -m ai_tools.standalone.console hash-password --user admin``.  See
``docs/console.md``.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import hashlib
import hmac
import json
import os
import re
import secrets
import struct
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from twisted.application.service import MultiService
from twisted.conch import manhole, manhole_ssh
from twisted.conch.checkers import (
    IAuthorizedKeysDB,
    SSHPublicKeyChecker,
    readAuthorizedKeyFile,
)
from twisted.conch.insults import insults
from twisted.conch.ssh import connection, keys, transport, userauth
from twisted.cred import credentials, portal
from twisted.cred import error as cred_error
from twisted.cred.checkers import ICredentialsChecker
from twisted.internet import defer, threads
from twisted.internet import error as internet_error
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ai_tools.default_reactor import or_global_reactor
from ai_tools.errors import ConfigError, NotFound
from ai_tools.json_types import as_object
from ai_tools.standalone.file_modes import (
    check_directories,
    check_login_file,
    make_private_directories,
)
from ai_tools.web.listen import ListeningService, binds_locally

if TYPE_CHECKING:
    from twisted.conch.ssh.session import SSHSessionProcessProtocol
    from twisted.internet.interfaces import IListeningPort, IReactorTime

    from ai_tools.interfaces import IWorld
    from ai_tools.service.service import AssistantService
    from ai_tools.tools.registry import ToolRegistry

Namespace = dict[str, object]
"""The console's globals: the objects and helpers a statement sees."""

__all__ = [
    "AuthorizedKeysFile",
    "ConsoleService",
    "PasswordFileChecker",
    "Table",
    "console_namespace",
    "hash_password",
    "load_or_create_host_key",
    "make_manhole_service",
    "read_password_file",
    "verify_password",
    "with_helpers",
]

log = Logger()

# -- tables -----------------------------------------------------------------------


_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without C0 and C1 control characters (no terminal escapes get through)."""
    return _CONTROLS.sub("", text)


class Table(str):
    """Text that the console shows as is (its repr is the text, not a quoted string).

    Build it with :meth:`build` or :meth:`of_lines`, which drop the control
    characters of what they are given: a Table is printed raw.
    """

    def __repr__(self) -> str:
        return str(self)

    @classmethod
    def of_lines(cls, lines: Iterable[str]) -> Table:
        """Lines (each may hold several) joined, every one without control characters."""
        return cls("\n".join(printable(part) for line in lines for part in line.split("\n")))

    @classmethod
    def build(
        cls,
        headers: Sequence[str],
        rows: Iterable[Sequence[object]],
        *,
        title: str = "",
        footer: str = "",
        empty: str = "(none)",
        width: int = 60,
    ) -> Table:
        """Columns padded to their widest cell (cells cut at ``width`` characters)."""
        cells = [[_cell(value, width) for value in row] for row in rows]
        lines = [printable(title)] if title else []
        if not cells:
            lines.append(empty)
        else:
            widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
            lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
                         .rstrip())
            lines.append("  ".join("-" * w for w in widths))
            lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                         .rstrip() for row in cells)
        if footer:
            lines.extend(printable(line) for line in footer.split("\n"))
        return cls("\n".join(lines))

    def later(self) -> Table:
        """This text starting on its own line (for results printed after ``Deferred #n``)."""
        return type(self)("\n" + self)


class Refusal(Table):
    """A Table saying why a helper did nothing (an unknown name): ``ssh host CMD`` exits 1."""


def _cell(value: object, width: int) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, float):
        text = f"{value:.1f}"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    else:
        text = str(value)
    text = printable(" ".join(text.split()))
    return text if len(text) <= width else text[: width - 1] + "…"


# -- the namespace ------------------------------------------------------------------


def console_namespace(service: AssistantService, world: IWorld | None,
                      registry: ToolRegistry) -> Namespace:
    """The console's globals: ``service``, ``world``, ``registry`` and the helpers."""
    helpers = ConsoleHelpers(service, world, registry)
    return {
        "service": service,
        "world": world,
        "registry": registry,
        "status": helpers.status,
        "history": helpers.history,
        "say": helpers.say,
        "tick": helpers.tick,
        "stop": helpers.stop,
        "tools": helpers.tools,
        "cache_stats": helpers.cache_stats,
        "model_servers": helpers.model_servers,
        "heard": helpers.heard,
        "approvals": helpers.approvals,
        "approve": helpers.approve,
        "refuse": helpers.refuse,
        "helpers": helpers.helpers,
    }


def with_helpers(namespace: Mapping[str, object]) -> Namespace:
    """``namespace`` plus the helpers over its ``service`` (names it already has are kept).

    So a host that builds its own namespace (``service``, ``world``,
    ``registry``, more objects) still gets ``status()`` and the rest.
    """
    merged = dict(namespace)
    service = merged.get("service")
    if service is None:
        return merged
    registry = merged.get("registry", getattr(service, "registry", None))
    world = merged.get("world", getattr(service, "world", None))
    # whatever the host put under these names is what the helpers use
    helpers = console_namespace(cast("AssistantService", service), cast("IWorld | None", world),
                                cast("ToolRegistry", registry))
    for key, value in helpers.items():
        merged.setdefault(key, value)
    return merged


class ConsoleHelpers:
    """The helper functions of the console namespace (each returns a Table or a Deferred)."""

    def __init__(self, service: AssistantService, world: IWorld | None,
                 registry: ToolRegistry) -> None:
        self.service = service
        self.world = world
        self.registry = registry

    def _unknown(self, name: str) -> Table | None:
        if name in self.service:
            return None
        known = ", ".join(self.service.names()) or "none"
        return Refusal.of_lines([f"no assistant named {name!r} (assistants: {known})"])

    def helpers(self) -> Table:
        """What the helpers do."""
        rows = [
            ("status()", "every assistant: mode, state, pending events, last tick"),
            ("history(name, n=20)", "the last n messages of an assistant's history"),
            ("say(name, text)", "a message for an assistant; prints the tick that answers it"),
            ("say(name, text, wait=False)", "only queue it (the assistant wakes up)"),
            ("tick(name)", "run a tick now (or wait for the one running); what it did"),
            ("stop(name)", "kill the model call or tool in flight"),
            ("tools()", "the registered tools"),
            ("cache_stats()", "tool cache hits, misses and entries per assistant"
                              " (since this start; hits in all beside them)"),
            ("model_servers()", "each model profile's server: slots, requests in flight "
                                "and waiting (by assistant), waits, breakers"),
            ("heard(character_id, n=20)", "what a character heard in the world"),
            ("approvals()", "the tool calls waiting for an operator's approval"),
            ("approve(id)", "let a waiting call run"),
            ("refuse(id, reason='')", "refuse a waiting call (the model is told why)"),
        ]
        return Table.build(("helper", "what it does"), rows, width=70)

    def status(self) -> Table:
        """Every assistant: mode, enabled, ticking, pending events, history, last tick.

        The footer adds the service's figures, and what is wrong with the
        store when something is (its file gone, its last write failed).
        """
        now = self.service.clock.seconds()
        rows = [_status_row(name, self.service.status(name), now)
                for name in self.service.names()]
        stats = self.service.stats()
        footer = [f"{stats['assistants']} assistant(s), {stats['ticks_in_flight']} tick(s) "
                  f"running, {stats['states_written']} state write(s), "
                  f"{stats['state_write_failures']} failed"]
        store = as_object(stats.get("store"))
        if store.get("problem"):
            footer.append(f"STORE PROBLEM: {store['problem']}")
        if store.get("last_write_error"):
            footer.append(f"last store write failed: {store['last_write_error']}")
        return Table.build(
            ("name", "character", "mode", "enabled", "state", "pending", "history", "ticks",
             "last tick", "next in"),
            rows, footer="\n".join(footer), empty="(no assistants)")

    def history(self, name: str, n: int = 20) -> Table:
        """The last ``n`` messages of ``name``'s history, oldest first."""
        unknown = self._unknown(name)
        if unknown is not None:
            return unknown
        messages = self.service.history(name)
        start = max(0, len(messages) - max(0, n))
        rows = [(i, m.get("role"), _message_text(m))
                for i, m in enumerate(messages[start:], start=start)]
        return Table.build(("#", "role", "content"), rows, width=100,
                           title=f"{name}: {len(messages)} message(s), last {len(rows)}",
                           empty="(empty history)")

    def say(self, name: str, text: str, wait: bool = True) -> Table | defer.Deferred[Table]:
        """Queue ``text`` for ``name`` as if someone spoke to it; fires with what the tick
        that takes it did (``wait=False``: once the event is saved)."""
        unknown = self._unknown(name)
        if unknown is not None:
            return unknown
        sent = self.service.send(name, {"type": "say", "from": "console", "text": str(text)})
        queued = f"queued for {name}: {text!r}"
        if not wait:
            return sent.addCallback(lambda _: Table.of_lines([queued]).later())
        # The event's tick may have started already (it wakes the assistant):
        # run_tick then waits for that one instead of answering "already ticking".
        ticked = sent.addCallback(lambda _: self.service.run_tick(name))
        return ticked.addCallback(
            lambda result: Table.of_lines([queued, _tick_table(result)]).later())

    def tick(self, name: str) -> Table | defer.Deferred[Table]:
        """Run one tick of ``name`` now (or wait for the one running); fires with what it did."""
        unknown = self._unknown(name)
        if unknown is not None:
            return unknown
        return self.service.run_tick(name).addCallback(lambda result: _tick_table(result).later())

    def stop(self, name: str) -> Table:
        """Kill what ``name`` is doing (its model call or tool in flight)."""
        unknown = self._unknown(name)
        if unknown is not None:
            return unknown
        if self.service.stop_assistant(name, "stopped from the console"):
            return Table.of_lines([f"{name}: stopped what was running"])
        return Table.of_lines([f"{name}: nothing was running"])

    def tools(self) -> Table:
        """The registered tools: name, category, cacheable, description."""
        rows = []
        for tool in sorted(self.registry.get_all_tools(), key=lambda t: t.name):
            category = getattr(tool.category, "value", tool.category)
            description = (tool.description or "").strip().splitlines()
            rows.append((tool.name, category, bool(getattr(tool, "cacheable", False)),
                         description[0] if description else ""))
        return Table.build(("tool", "category", "cacheable", "description"), rows,
                           width=70, footer=f"{len(rows)} tool(s)")

    def cache_stats(self) -> Table:
        """Tool cache hits, misses, hit rate and entries since this start, per assistant and
        in total, beside the hits kept with each assistant (its status counters, which a
        restart keeps: the cache's own figures start again with the process)."""
        cache = self.service.cache
        names = sorted(set(cache.namespaces()) | set(self.service.names()))
        kept = {name: self.service.counters(name).get("cache_hits", 0)
                for name in self.service.names()}
        rows = []
        for name in names:
            st = cache.stats(name)
            rows.append((name, st.hits, st.misses, f"{100 * st.hit_rate:.0f}%", st.size,
                         kept.get(name, "-")))
        total = cache.stats()
        rows.append(("(total)", total.hits, total.misses, f"{100 * total.hit_rate:.0f}%",
                     total.size, sum(kept.values())))
        return Table.build(("assistant", "hits", "misses", "hit rate", "entries",
                            "hits in all"), rows,
                           title="tool cache since this start (hits in all: every start, "
                                 "the assistant's cache_hits counter)")

    def model_servers(self) -> Table:
        """Each model profile's server: its slots, the requests in flight and waiting in the
        service's queue (by assistant), the oldest and mean waits, the breakers."""
        statuses = as_object(self.service.stats().get("model_servers"))
        rows = [_model_server_row(profile, as_object(status))
                for profile, status in sorted(statuses.items())]
        return Table.build(
            ("profile", "server", "kind", "slots", "in flight", "waiting", "oldest wait",
             "mean wait", "granted", "breaker"), rows, width=70,
            title="model servers (a server's queue is shared by the profiles pointed at it)",
            empty="(no model server: the models answer in process)")

    def heard(self, character_id: str, n: int = 20) -> Table:
        """The last ``n`` lines ``character_id`` heard in the world."""
        reader = getattr(self.world, "heard", None)
        if reader is None:
            return Refusal.of_lines(["this world keeps no hearing log"])
        try:
            messages = reader(character_id, limit=max(0, n))
        except NotFound as exc:
            return Refusal.of_lines([str(exc)])
        rows = [(m.get("seq"), m.get("kind"), m.get("line") or m.get("text")) for m in messages]
        return Table.build(("seq", "kind", "line"), rows, width=100,
                           title=f"{character_id} heard:", empty="(nothing)")


    def approvals(self) -> Table:
        """The tool calls waiting for an operator's approval, oldest first."""
        now = self.service.clock.seconds()
        rows = [(p["id"], p["assistant"], p["tool"],
                 json.dumps(p["arguments"], ensure_ascii=False),
                 f"{max(0.0, _seconds(p['expires_at'], now) - now):.0f}s") for p in
                self.service.approvals.pending()]
        return Table.build(("id", "assistant", "tool", "arguments", "expires in"), rows,
                           width=70, empty="(no call waits for approval)")

    def approve(self, approval_id: str) -> Table:
        """Let the waiting call ``approval_id`` run."""
        return self._decide(approval_id, True, "")

    def refuse(self, approval_id: str, reason: str = "") -> Table:
        """Refuse the waiting call ``approval_id``; the model reads ``reason``."""
        return self._decide(approval_id, False, str(reason))

    def _decide(self, approval_id: str, approve: bool, reason: str) -> Table:
        try:
            done = self.service.approvals.decide(str(approval_id), approve, by="manhole",
                                                 reason=reason)
        except NotFound as exc:
            return Refusal.of_lines([str(exc)])
        verdict = "approved" if approve else "refused"
        return Table.of_lines([f"{done['assistant']}: {done['tool']} {verdict}"])


def _seconds(value: object, default: float) -> float:
    """A time read from a JSON status (``default`` when it is not a number)."""
    return float(value) if isinstance(value, int | float) else default


def _model_server_row(profile: str, status: Mapping[str, object]) -> tuple[object, ...]:
    """One profile's row of :meth:`ConsoleHelpers.model_servers`."""
    by_assistant = status.get("waiting_by_assistant")
    waiting = str(status.get("waiting", 0))
    if isinstance(by_assistant, Mapping) and by_assistant:
        waiting += " (" + ", ".join(f"{name or '-'}: {count}"
                                    for name, count in sorted(by_assistant.items())) + ")"
    breakers = status.get("assistant_breakers")
    breaker = str(status.get("breaker"))
    if isinstance(breakers, Mapping) and breakers:
        breaker += "; " + ", ".join(f"{name}: {state}" for name, state in breakers.items())
    return (profile, status.get("server"), status.get("kind"), status.get("slots"),
            status.get("in_flight"), waiting, f"{status.get('oldest_wait_s', 0)}s",
            f"{status.get('mean_wait_s', 0)}s", status.get("granted"), breaker)


def _status_row(name: str, st: Mapping[str, Any], now: float) -> tuple[object, ...]:
    """One assistant's row of :meth:`ConsoleHelpers.status`."""
    last = st.get("last_tick") or {}
    last_text = (f"#{last.get('tick')} {last.get('status')}"
                 f"{'/' + last['reason'] if last.get('reason') else ''}"
                 if last else "-")
    due = st.get("next_tick_at")
    state = ("EMERGENCY STOP" if st["emergency_stopped"]
             else "ticking" if st["ticking"] else "idle")
    return (
        name, st.get("character_id"), st["mode"], st["enabled"], state,
        st["pending_events"], st["history_length"], st["tick_number"], last_text,
        f"{max(0.0, due - now):.0f}s" if isinstance(due, int | float) else "-",
    )


def _message_text(message: Mapping[str, Any]) -> str:
    parts = []
    content = message.get("content")
    if content:
        parts.append(str(content))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(f"→ {function.get('name')}({function.get('arguments', '')})")
    if message.get("role") == "tool":
        parts.insert(0, f"[{message.get('tool_call_id')}]")
    return " ".join(parts)


def _tick_table(result: Any) -> Table:
    data = result.as_dict() if hasattr(result, "as_dict") else dict(result)
    loop = data.get("loop") or {}
    lines = [f"{data.get('assistant')} tick #{data.get('tick')}: {data.get('status')}"
             f"{' (' + data['reason'] + ')' if data.get('reason') else ''}, "
             f"{data.get('duration_ms', 0):.0f} ms"]
    if loop:
        lines.append(f"loop: {loop.get('iterations')} iteration(s), ended "
                     f"{loop.get('termination_reason')}")
        rows = [(r.get("iteration"), r.get("tool"), r.get("status"),
                 f"{r.get('duration_ms') or 0:.0f} ms", bool(r.get("from_cache")))
                for r in loop.get("results") or ()]
        if rows:
            lines.append(Table.build(("iter", "tool", "status", "took", "cached"), rows))
        for signal in loop.get("signals") or ():
            lines.append(f"signal: {signal.get('tool_name')} {signal.get('arguments')}")
        lines.extend(_spoken(loop.get("results") or ()))
        if loop.get("text"):  # the model's own words: nobody in the world heard them
            lines.append(f"wrote: {_cell(loop['text'], 300)}")
    for err in data.get("errors") or ():
        lines.append(f"error: {err}")
    return Table.of_lines(lines)


_SPOKEN = {"say": "said", "pose": "posed", "emit": "emitted", "whisper": "whispered to",
           "page": "paged"}
"""The world's message kinds a tool's result reports, and how ``tick()`` prints them."""


def _spoken(results: Iterable[Mapping[str, object]]) -> list[str]:
    """What the players heard: the delivered text of each successful say, pose, whisper…"""
    lines = []
    for entry in results:
        result = entry.get("result")
        if not entry.get("success") or not isinstance(result, Mapping):
            continue
        verb, text = _SPOKEN.get(str(result.get("kind"))), result.get("text")
        if verb is None or not isinstance(text, str):
            continue
        target = result.get("target")
        if isinstance(target, Mapping):
            verb = f"{verb} {target.get('key') or target.get('id')}"
        lines.append(f"{verb}: {_cell(text, 300)}")
    return lines


# -- passwords ------------------------------------------------------------------------

SCRYPT_PARAMS = {"n": 2**14, "r": 8, "p": 1}
"""scrypt cost (16 MiB of memory, tens of milliseconds per check)."""

PBKDF2_ITERATIONS = 600_000
"""PBKDF2-HMAC-SHA256 iterations (OWASP's 2023 figure)."""

_SCHEMES = ("scrypt", "pbkdf2-sha256")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def hash_password(password: str, scheme: str = "scrypt", *, salt: bytes | None = None,
                  cost: int | None = None) -> str:
    """A salted hash of ``password`` for the password file (``$scheme$params$salt$hash``).

    ``cost`` replaces scrypt's ``n`` or PBKDF2's iteration count (tests use a
    low one; the defaults are the safe ones).
    """
    if not isinstance(password, str) or not password:
        raise ValueError("the password must be a non-empty string")
    salt = salt if salt is not None else secrets.token_bytes(16)
    secret = password.encode("utf-8")
    if scheme == "scrypt":
        p = dict(SCRYPT_PARAMS, n=cost or SCRYPT_PARAMS["n"])
        digest = hashlib.scrypt(secret, salt=salt, n=p["n"], r=p["r"], p=p["p"], dklen=32)
        return f"$scrypt$n={p['n']},r={p['r']},p={p['p']}${_b64(salt)}${_b64(digest)}"
    if scheme in ("pbkdf2", "pbkdf2-sha256"):
        iterations = cost or PBKDF2_ITERATIONS
        digest = hashlib.pbkdf2_hmac("sha256", secret, salt, iterations)
        return f"$pbkdf2-sha256$i={iterations}${_b64(salt)}${_b64(digest)}"
    raise ValueError(f"unknown password scheme {scheme!r}; use scrypt or pbkdf2")


def _parse_hash(encoded: str) -> tuple[str, dict[str, int], bytes, bytes]:
    """``(scheme, params, salt, digest)``; ValueError for anything malformed."""
    parts = encoded.split("$")
    if len(parts) != 5 or parts[0] != "" or parts[1] not in _SCHEMES:
        raise ValueError("not a '$scrypt$...' or '$pbkdf2-sha256$...' hash")
    params: dict[str, int] = {}
    for item in parts[2].split(","):
        key, sep, value = item.partition("=")
        if not sep or not value.isdigit():
            raise ValueError(f"bad hash parameter {item!r}")
        params[key] = int(value)
    wanted = {"n", "r", "p"} if parts[1] == "scrypt" else {"i"}
    if set(params) != wanted:
        raise ValueError(f"{parts[1]} hashes need parameters {', '.join(sorted(wanted))}")
    if parts[1] == "scrypt" and (params["n"] < 2 or params["n"] & (params["n"] - 1)):
        raise ValueError("scrypt n must be a power of two")
    if any(v < 1 for v in params.values()):
        raise ValueError("hash parameters must be positive")
    try:
        salt, digest = _unb64(parts[3]), _unb64(parts[4])
    except ValueError:
        raise ValueError("salt and hash must be base64") from None
    if not salt or len(digest) < 16:
        raise ValueError("salt or hash too short")
    return parts[1], params, salt, digest


def verify_password(password: str | bytes, encoded: str) -> bool:
    """Whether ``password`` matches ``encoded`` (compared in constant time)."""
    scheme, params, salt, digest = _parse_hash(encoded)
    secret = password if isinstance(password, bytes) else password.encode("utf-8")
    if scheme == "scrypt":
        maxmem = 256 * params["n"] * params["r"] + (1 << 20)
        got = hashlib.scrypt(secret, salt=salt, n=params["n"], r=params["r"], p=params["p"],
                             dklen=len(digest), maxmem=maxmem)
    else:
        got = hashlib.pbkdf2_hmac("sha256", secret, salt, params["i"], dklen=len(digest))
    return hmac.compare_digest(got, digest)


_dummy_hashes: dict[str, str] = {}


def _dummy_hash(like: Iterable[str]) -> str:
    """A hash as costly as the file's first one, checked for unknown users (same timing)."""
    first = next(iter(like), None)
    scheme, params = ("scrypt", {}) if first is None else _parse_hash(first)[:2]
    key = f"{scheme}:{params}"
    if key not in _dummy_hashes:
        cost = params.get("n") or params.get("i")
        _dummy_hashes[key] = hash_password(secrets.token_hex(8), scheme, cost=cost)
    return _dummy_hashes[key]


def read_password_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """``{user: hash}`` from a password file; ConfigError naming the line for a bad one.

    Blank lines and ``#`` comments are skipped.  A line holding a plain-text
    password (anything that is not a recognised hash) is refused, and so is a
    file other users could read or change (:func:`check_login_file`).
    """
    where = Path(path).expanduser()
    check_login_file(where, "manhole password file", secret=True)
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"manhole password file {str(where)!r}: {exc.strerror}") from None
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, encoded = line.partition(":")
        if not sep or not user:
            raise ConfigError(f"{where}:{number}: expected 'user:$scheme$...'")
        try:
            _parse_hash(encoded)
        except ValueError as exc:
            raise ConfigError(
                f"{where}:{number}: the password of {user!r} is not a hash ({exc}); make one "
                "with 'python -m ai_tools.standalone.console hash-password'") from None
        users[user] = encoded
    return users


@implementer(ICredentialsChecker)
class PasswordFileChecker:
    """Checks SSH passwords against a file of hashes (re-read at each attempt).

    ``run(f, *args)`` runs the hash check; by default in a thread (scrypt and
    PBKDF2 take tens of milliseconds), tests pass ``defer.maybeDeferred``.
    """

    credentialInterfaces = (credentials.IUsernamePassword,)

    def __init__(self, path: str | os.PathLike[str],
                 run: Callable[..., defer.Deferred[bool]] | None = None) -> None:
        self.path = Path(path).expanduser()
        read_password_file(self.path)  # refuse a bad file at start-up
        self._run = run or threads.deferToThread

    def requestAvatarId(
            self, creds: credentials.IUsernamePassword) -> defer.Deferred[bytes | tuple[()]]:
        """Fires with the user name, or fails with UnauthorizedLogin."""
        try:
            users = read_password_file(self.path)
        except ConfigError as exc:
            log.error("Manhole password file unusable: {error}", error=str(exc))
            return defer.fail(cred_error.UnauthorizedLogin("password logins unavailable"))
        username = creds.username.decode("utf-8", "replace")
        encoded = users.get(username)
        # An unknown user costs a hash check too, so timing does not tell names apart.
        d: defer.Deferred[bool] = self._run(verify_password, creds.password,
                      encoded or _dummy_hash(users.values()))

        def checked(ok: bool) -> bytes:
            if ok and encoded is not None:
                return cast(bytes, creds.username)
            log.info("Manhole: refused a password login as {user}", user=username)
            raise cred_error.UnauthorizedLogin("wrong user name or password")

        return d.addCallback(checked)


@implementer(IAuthorizedKeysDB)
class AuthorizedKeysFile:
    """The public keys of one ``authorized_keys`` file, for any user name (re-read each login).

    Lines with options (``from="..." ssh-ed25519 ...``) are not understood and
    are skipped (logged), so no option is silently ignored.  A file other
    users could change (or one in a directory they could write) is refused,
    at start and at each login (:func:`check_login_file`).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        if not self._keys():
            raise ConfigError(f"manhole authorized keys file {str(self.path)!r} holds no "
                              "usable public key")

    def _keys(self) -> list[keys.Key]:
        check_login_file(self.path, "manhole authorized keys file")
        try:
            with self.path.open("rb") as handle:
                return list(readAuthorizedKeyFile(handle))
        except OSError as exc:
            raise ConfigError(f"manhole authorized keys file {str(self.path)!r}: "
                              f"{exc.strerror}") from None

    def getAuthorizedKeys(self, avatarId: bytes) -> list[keys.Key]:
        """The keys allowed to log in (the same for every user name)."""
        try:
            return self._keys()
        except ConfigError as exc:
            log.error("Manhole key logins unavailable: {error}", error=str(exc))
            return []


# -- the host key -------------------------------------------------------------------


def load_or_create_host_key(path: str | os.PathLike[str] | None) -> keys.Key:
    """The server's host key: read from ``path``, or created there with mode 0600.

    A key file readable by group or others, or in a directory they may
    write, is refused (ConfigError), like OpenSSH does.  With no path, a key
    is made in memory for this run only (clients then see a new host key at
    every start).
    """
    if path is None:
        log.warn("Manhole host key kept in memory only: clients will see a new key each start")
        return _new_host_key()
    where = Path(path).expanduser()
    if where.exists():
        check_login_file(where, "manhole host key", secret=True)
        try:
            return keys.Key.fromFile(str(where))
        except (keys.BadKeyError, ValueError, OSError) as exc:
            raise ConfigError(f"manhole host key {str(where)!r} is not a private key: "
                              f"{exc}") from None
    key = _new_host_key()
    data = key.toString("openssh")
    try:
        make_private_directories(where.parent)
        check_directories(where.parent, "manhole host key")
        fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot create the manhole host key {str(where)!r}: "
                          f"{exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, data)
    finally:
        os.close(fd)
    fingerprint = key.fingerprint(keys.FingerprintFormats.SHA256_BASE64).rstrip("=")
    log.info("Manhole host key created: {path} (SHA256:{fingerprint})", path=str(where),
             fingerprint=fingerprint)
    return key


def _new_host_key() -> keys.Key:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return keys.Key(ed25519.Ed25519PrivateKey.generate())


# -- SSH plumbing ----------------------------------------------------------------------


BANNER = (
    "ai_tools console: Python with service, world, registry. Helpers: status(), "
    "history(name, n=20), say(name, text), tick(name), stop(name), tools(), "
    "cache_stats(), heard(character_id); helpers() explains them. Ctrl-D leaves."
)


class ConsoleManhole(manhole.ColoredManhole):
    """The colored manhole, with a banner naming the helpers."""

    _greeted = False

    def terminalSize(self, width: int, height: int) -> None:
        """Clear the screen and show the banner above the prompt (first call only)."""
        if self._greeted:
            super().terminalSize(width, height)
            return
        self._greeted = True
        self.width, self.height = width, height
        self.terminal.eraseDisplay()
        self.terminal.cursorHome()
        self.terminal.write(BANNER.encode("utf-8") + b"\n")
        self.drawInputLine()


class ConsoleSessionTransport:
    """Joins an SSH session channel to the console's terminal protocol.

    Twisted's ``TerminalSessionTransport`` closes the channel without an
    exit status, so ``ssh`` reports failure (255) after a clean Ctrl-D; this
    one sends ``exit-status 0`` first.
    """

    def __init__(self, proto: Any, chained: Any, avatar: Any, width: int, height: int) -> None:
        session = proto.session
        conn = avatar.conn

        def close_session() -> None:
            if session.closing or session.localClosed:
                return
            conn.sendRequest(session, b"exit-status", struct.pack(">L", 0))
            conn.sendClose(session)

        proto.makeConnection(_Pipe(write=chained.dataReceived, close=close_session))
        chained.makeConnection(_Pipe(write=proto.write, close=proto.loseConnection))
        chained.terminalProtocol.terminalSize(width, height)


class _Pipe:
    """The minimal transport each side of the session sees."""

    def __init__(self, write: Callable[[bytes], object], close: Callable[[], object]) -> None:
        self.write = write
        self.loseConnection = close

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.write(b"".join(data))


class ConsoleSession(manhole_ssh.TerminalSession):
    """A manhole session: the interactive console, or one statement run by ``ssh host CMD``."""

    namespace: Namespace = {}
    reactor: IReactorTime | None = None

    def windowChanged(self, newWindowSize: object) -> None:
        """The client's terminal was resized: nothing to redraw, ignore it."""

    def eofReceived(self) -> None:
        """The client sent EOF: the console ends on ^D or when the channel closes."""

    def execCommand(self, proto: Any, cmd: bytes) -> None:
        """Run one statement (``ssh host 'status()'``), print its value, exit.

        It runs at the next reactor turn: the client must get the reply to its
        ``exec`` request before any output (Twisted's own client drops it otherwise).
        """
        source = cmd.decode("utf-8", "replace")
        # What the client sends (stdin) is ignored; closing the session closes nothing else.
        # (Twisted 24.11 fails to close the channel of a protocol without a transport.)
        proto.makeConnection(_Pipe(write=lambda data: None, close=lambda: None))
        clock = or_global_reactor(self.reactor)
        clock.callLater(0, run_statement, dict(self.namespace), source, proto)


class ConsoleRealm(manhole_ssh.TerminalRealm):
    """Avatars get a colored manhole over ``namespace`` (each session its own copy)."""

    sessionFactory = ConsoleSession

    def __init__(self, namespace: Namespace, reactor: IReactorTime | None = None) -> None:
        super().__init__(ConsoleSessionTransport)
        self.namespace = namespace
        self.reactor = reactor

        def terminal() -> insults.ServerProtocol:
            return insults.ServerProtocol(ConsoleManhole, self.namespace)

        self.chainedProtocolFactory = terminal  # type: ignore[assignment]

    def _getAvatar(self, avatarId: bytes) -> Any:
        user = super()._getAvatar(avatarId)
        from twisted.conch import interfaces as conch_interfaces

        session = conch_interfaces.ISession(user.original)
        session.namespace = self.namespace  # type: ignore[attr-defined]
        session.reactor = self.reactor  # type: ignore[attr-defined]
        log.info("Manhole login: {user}", user=avatarId.decode("utf-8", "replace"))
        return user


def run_statement(namespace: Namespace, source: str, proto: SSHSessionProcessProtocol) -> None:
    """Run ``source`` in ``namespace``, write its output (and value) to ``proto``, end it.

    A Deferred value is waited for.  Exit status 0, or 1 after an exception.
    """
    output = _StatementOutput(proto)
    try:
        value = _evaluate(namespace, source, output)
    except BaseException:
        output.write(traceback.format_exc())
        output.finish(1)
        return
    if isinstance(value, defer.Deferred):
        value.addCallbacks(output.show, output.failed)
    else:
        output.show(value)


def _evaluate(namespace: Namespace, source: str, output: _StatementOutput) -> object:
    """The value of ``source`` (None for statements), with ``print`` going to ``output``."""
    stdout = sys.stdout
    sys.stdout = output
    try:
        try:
            code = compile(source, "<ssh command>", "eval")
        except SyntaxError:
            exec(compile(source, "<ssh command>", "exec"), namespace)
            return None
        return eval(code, namespace)
    finally:
        sys.stdout = stdout


class _StatementOutput:
    """What one ``ssh host CMD`` prints, and its exit status (a file-like for ``print``)."""

    def __init__(self, proto: SSHSessionProcessProtocol) -> None:
        self.proto = proto

    def write(self, text: str) -> int:
        if text:
            self.proto.write(text.encode("utf-8"))
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered."""

    def finish(self, code: int) -> None:
        reason = (internet_error.ProcessDone(0) if code == 0
                  else internet_error.ProcessTerminated(exitCode=code))
        self.proto.processEnded(Failure(reason))

    def show(self, result: object) -> None:
        if result is not None:
            self.write(repr(result).lstrip("\n") + "\n")
        self.finish(1 if isinstance(result, Refusal) else 0)

    def failed(self, failure: Failure) -> None:
        self.write("".join(failure.getTraceback()))
        self.finish(1)


class ConsoleUserAuth(userauth.SSHUserAuthServer):
    """Logins: at most 6 failures per connection (OpenSSH's MaxAuthTries), 1 s per bad password."""

    attemptsBeforeDisconnect = 5


_LOGOUTS = frozenset({transport.DISCONNECT_BY_APPLICATION, transport.DISCONNECT_CONNECTION_LOST})
"""Disconnect reasons a client sends when it simply logs out."""


class ConsoleServerTransport(transport.SSHServerTransport):
    """The server side of an SSH connection, for which a client logging out is no error.

    A client ends a session with a disconnect message ("disconnected by user"
    from OpenSSH, "user closed connection" from Twisted's client); Twisted
    logs every disconnect message at error level.
    """

    def receiveError(self, reasonCode: int, description: bytes) -> None:
        """The client disconnected: a logout at info level, anything else as Twisted does."""
        if reasonCode in _LOGOUTS:
            log.info("Manhole logout ({why})",
                     why=printable(description.decode("utf-8", "replace")))
            return
        super().receiveError(reasonCode, description)


class ConsoleFactory(manhole_ssh.ConchFactory):
    """An SSH server factory with its own host key (never the class-wide dicts)."""

    protocol = ConsoleServerTransport

    services = {
        b"ssh-userauth": ConsoleUserAuth,
        b"ssh-connection": connection.SSHConnection,
    }

    def __init__(self, portal: portal.Portal, host_key: keys.Key) -> None:
        super().__init__(portal)
        name = host_key.sshType()
        # Instance dicts: ConchFactory's class-level ones are shared by every factory.
        self.publicKeys = cast(Any, {name: host_key.public()})
        self.privateKeys = cast(Any, {name: host_key})


class ConsoleService(MultiService):
    """The manhole: one SSH listener (and nothing else)."""

    def __init__(self, factory: ConsoleFactory, endpoint: str,
                 reactor: IReactorTime | None = None) -> None:
        super().__init__()
        self.factory = factory
        self.endpoint = endpoint
        self.listener = ListeningService(endpoint, factory, reactor=reactor)
        self.listener.setServiceParent(self)

    def when_listening(self) -> defer.Deferred[IListeningPort]:
        """Fires with the ``IListeningPort`` once listening."""
        return self.listener.when_listening()


def make_manhole_service(
    namespace: Mapping[str, object],
    *,
    endpoint: str = "tcp:2222:interface=127.0.0.1",
    authorized_keys: str | os.PathLike[str] | None = None,
    password_file: str | os.PathLike[str] | None = None,
    host_key: str | os.PathLike[str] | None = None,
    reactor: IReactorTime | None = None,
) -> ConsoleService:
    """The manhole over SSH on ``endpoint`` (strports), with ``namespace`` as its globals.

    A namespace holding a ``service`` gets the helpers of :func:`console_namespace`
    for the names it does not define itself.

    Logins: public keys listed in ``authorized_keys`` and/or passwords hashed
    in ``password_file`` (at least one is required).  ``host_key`` is the
    server key file, created with mode 0600 when missing.  Raises ConfigError
    for a missing or bad file.  Returns an ``IService`` (a :class:`ConsoleService`,
    i.e. a ``MultiService``); ``reactor`` defaults to the global one.
    """
    if authorized_keys is None and password_file is None:
        raise ConfigError("the manhole needs authorized_keys or password_file: "
                          "it runs arbitrary code and is never open without a login")
    checkers: list[SSHPublicKeyChecker | PasswordFileChecker] = []
    if authorized_keys is not None:
        checkers.append(SSHPublicKeyChecker(cast(Any, AuthorizedKeysFile(authorized_keys))))
    if password_file is not None:
        checkers.append(PasswordFileChecker(password_file))
    key = load_or_create_host_key(host_key)
    if not binds_locally(endpoint):
        log.warn("The manhole listens on {endpoint}, reachable from other machines: "
                 "it runs arbitrary code as this process", endpoint=endpoint)
    realm = ConsoleRealm(with_helpers(namespace), reactor)
    factory = ConsoleFactory(portal.Portal(cast(Any, realm),
                                           cast("list[ICredentialsChecker]", checkers)), key)
    return ConsoleService(factory, endpoint, reactor=reactor)


# -- python -m ai_tools.standalone.console hash-password ---------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ai_tools.standalone.console hash-password [--user N] [--scheme S]``.

    Reads the password twice from the terminal (or once from standard input
    when it is not a terminal) and prints the password-file line.
    """
    parser = argparse.ArgumentParser(prog="python -m ai_tools.standalone.console")
    commands = parser.add_subparsers(dest="command", required=True)
    hashing = commands.add_parser("hash-password", help="print a password-file line")
    hashing.add_argument("--user", help="prefix the hash with 'USER:'")
    hashing.add_argument("--scheme", choices=("scrypt", "pbkdf2"), default="scrypt")
    args = parser.parse_args(argv)
    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            print("The passwords differ.", file=sys.stderr)
            return 1
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("The password is empty.", file=sys.stderr)
        return 1
    encoded = hash_password(password, args.scheme)
    print(f"{args.user}:{encoded}" if args.user else encoded)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
