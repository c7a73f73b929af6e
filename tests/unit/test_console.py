"""The manhole console: helpers, tables, password hashes, key files, the host key, the service."""

from __future__ import annotations

import io
import os
import stat
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from twisted.conch import manhole_ssh
from twisted.conch.ssh import keys
from twisted.cred import credentials
from twisted.cred import error as cred_error
from twisted.internet import defer
from twisted.internet import error as internet_error
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from ai_tools.errors import ConfigError
from ai_tools.standalone import console
from ai_tools.standalone.console import (
    AuthorizedKeysFile,
    ConsoleService,
    PasswordFileChecker,
    Table,
    console_namespace,
    hash_password,
    load_or_create_host_key,
    make_manhole_service,
    read_password_file,
    run_statement,
    verify_password,
)
from ai_tools.store.memory import MemoryStore
from ai_tools.tools.base import Actor, Tool, ToolCategory
from ai_tools.world.sandbox import SandboxWorld
from tests.unit.sandbox_world_fixtures import EXAMPLE
from tests.unit.service_fakes import add, loop_result, make_service, settle
from tests.unit.web_fakes import result_of

# -- helpers and tables -------------------------------------------------------------------


class Look(Tool):
    """A read-only tool for the tools() table."""

    name = "look"
    description = "Look around.\nSecond line not shown."
    category = ToolCategory.SAFE_CHAIN
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True}


@pytest.fixture(name="ns")
def namespace_fixture() -> dict[str, Any]:
    """The namespace over a service with Pip and Mason, the example world."""
    from twisted.internet import task

    clock = task.Clock()
    world = SandboxWorld.from_file(EXAMPLE, clock=clock)
    clock, service, loop = make_service(clock, world=world)
    add(service, clock, name="pip", character_id="char:pip")
    add(service, clock, name="mason", character_id="char:mason")
    namespace = console_namespace(service, world, service.registry)
    namespace["_clock"] = clock
    namespace["_loop"] = loop
    return namespace


def test_namespace_holds_the_objects_and_helpers(ns: dict[str, Any]) -> None:
    """service, world, registry and every helper the console promises."""
    for key in ("service", "world", "registry", "status", "history", "say", "tick", "stop",
                "tools", "cache_stats", "heard", "helpers", "approvals", "approve", "refuse",
                "model_servers"):
        assert key in ns
    assert ns["registry"] is ns["service"].registry


def test_table_repr_is_its_text() -> None:
    """The console shows a Table as text, not as a quoted string."""
    table = Table.build(("a", "bb"), [(1, "x"), (None, True)], title="T", footer="F")
    assert repr(table) == str(table)
    lines = str(table).splitlines()
    assert lines == ["T", "a  bb", "-  ---", "1  x", "-  yes", "F"]
    assert Table.build(("a",), [], empty="(nothing)") == "(nothing)"
    assert repr(Table("x").later()) == "\nx"
    long = Table.build(("c",), [("y" * 100,)], width=10)
    assert long.splitlines()[-1] == "y" * 9 + "…"


def test_status_lists_every_assistant(ns: dict[str, Any]) -> None:
    """status() is a table with one row per assistant and a service footer."""
    text = ns["status"]()
    assert isinstance(text, Table)
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["name", "character", "mode", "enabled", "state"]
    assert lines[2].startswith("mason") and lines[3].startswith("pip")
    assert "char:pip" in lines[3] and "awake" in lines[3]
    assert lines[-1].startswith("2 assistant(s)")


def test_status_shows_disabled_and_emergency_stop(ns: dict[str, Any]) -> None:
    """Flags show in the table."""
    ns["service"].disable("pip")
    ns["service"].emergency_stop("mason", "test")
    settle(ns["_clock"])
    rows = {line.split()[0]: line for line in ns["status"]().splitlines()[2:4]}
    assert "EMERGENCY STOP" in rows["mason"]
    assert rows["pip"].split()[3] == "no"


def test_history_shows_the_last_messages(ns: dict[str, Any]) -> None:
    """history(name, n) shows the last n messages, tool calls and results readable."""
    history = ns["service"].get("pip").history
    history.replace([
        {"role": "user", "content": "hello\nPip"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "say", "arguments": '{"text": "hi"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"success": true}'},
    ])
    text = ns["history"]("pip", n=2)
    assert text.splitlines()[0] == "pip: 3 message(s), last 2"
    assert '→ say({"text": "hi"})' in text
    assert "[c1]" in text
    assert "hello" not in text
    assert "hello Pip" in ns["history"]("pip")
    assert ns["history"]("mason") .endswith("(empty history)")


def test_say_without_waiting_queues_and_prints_when_saved(ns: dict[str, Any]) -> None:
    """say(..., wait=False) returns a Deferred firing with a Table; the event is pending."""
    ns["service"].disable("pip")
    settle(ns["_clock"])
    d = ns["say"]("pip", "the soup is cold", wait=False)
    settle(ns["_clock"])
    text = result_of(d)
    assert isinstance(text, Table)
    assert repr(text) == "\nqueued for pip: 'the soup is cold'"
    event = ns["service"].get("pip").pending_events[-1]
    assert event["text"] == "the soup is cold" and event["from"] == "console"


def test_say_prints_the_tick_that_answers(ns: dict[str, Any]) -> None:
    """say() waits for the tick that takes the message: what it did, not "queued"."""
    d = ns["say"]("pip", "the soup is cold")
    settle(ns["_clock"])
    text = result_of(d)
    assert text.startswith("\nqueued for pip: 'the soup is cold'\npip tick #"), text
    assert ": ran (completed)" in text and "loop: 1 iteration(s), ended completed" in text
    assert ns["service"].get("pip").pending_events == []
    assert len(ns["_loop"].calls) == 1


def test_say_then_tick_while_the_tick_is_in_flight(ns: dict[str, Any]) -> None:
    """The documented session: say(), then tick() while the model still works. Both wait
    for the one tick the message started (never "skipped (already_ticking)")."""
    loop = ns["_loop"]
    loop.hang()
    printed: list[Any] = []
    ns["say"]("pip", "is the chowder ready?").addBoth(printed.append)
    settle(ns["_clock"])
    ns["tick"]("pip").addBoth(printed.append)
    assert printed == [] and len(loop.calls) == 1
    loop.pending[0].callback(loop_result("completed", 2))
    settle(ns["_clock"])
    assert len(printed) == 2
    for text in printed:
        assert "ran (completed)" in text and "already_ticking" not in text, text
    assert len(loop.calls) == 1


def test_tick_prints_what_the_tick_did(ns: dict[str, Any]) -> None:
    """tick() fires with a table of the tick result."""
    ns["service"].get("pip").pending_events.append({"type": "say", "text": "hi"})
    d = ns["tick"]("pip")
    settle(ns["_clock"])
    text = result_of(d)
    assert text.startswith("\npip tick #")
    assert "loop: 1 iteration(s), ended completed" in text


def test_stop_says_whether_something_ran(ns: dict[str, Any]) -> None:
    """stop() with nothing running says so."""
    assert ns["stop"]("pip") == "pip: nothing was running"


@pytest.mark.parametrize("helper", ["history", "say", "tick", "stop"])
def test_unknown_names_get_a_message_not_a_traceback(ns: dict[str, Any], helper: str) -> None:
    """A wrong name is answered with the known names."""
    args = ("nobody", "text") if helper == "say" else ("nobody",)
    text = ns[helper](*args)
    assert text == "no assistant named 'nobody' (assistants: mason, pip)"


def test_tools_and_cache_stats(ns: dict[str, Any]) -> None:
    """tools() lists the registry; cache_stats() has a row per assistant and a total."""
    ns["registry"].register(Look)
    text = ns["tools"]()
    assert "look" in text and "safe_chain" in text.lower()
    assert text.splitlines()[-1] == "1 tool(s)"
    stats = ns["cache_stats"]().splitlines()
    assert stats[1].split() == ["assistant", "hits", "misses", "hit", "rate", "entries",
                                "hits", "in", "all"]
    assert [line.split()[0] for line in stats[3:]] == ["mason", "pip", "(total)"]


def test_cache_stats_after_a_restart_agree_with_the_status_counters(
        ns: dict[str, Any]) -> None:
    """The cache's figures count since this start; the hits kept with each assistant (its
    status counters, which survive a restart) are shown beside them, so the two agree."""
    ns["service"].get("pip").execution_state.cache_hits = 2  # as restored from the store
    assert ns["service"].status("pip")["counters"]["cache_hits"] == 2
    text = ns["cache_stats"]()
    assert "since this start" in text.splitlines()[0]
    rows = {line.split()[0]: line.split() for line in text.splitlines()[3:]}
    assert rows["pip"][1] == "0" and rows["pip"][-1] == "2"
    assert rows["(total)"][-1] == "2"


def test_model_servers_shows_the_slots_and_who_waits() -> None:
    """model_servers(): one row per profile with its server's slots, the requests in
    flight and waiting by assistant, the waits (a real client and its server's queue)."""
    from twisted.internet import task

    from ai_tools.llm.client import OpenAIChatClient
    from ai_tools.llm.profile import ModelProfile

    clock = task.Clock()
    client = OpenAIChatClient(ModelProfile.from_mapping(
        {"base_url": "http://127.0.0.1:9/v1", "model": "m", "server_slots": 1}), reactor=clock)
    clock, service, _ = make_service(clock, llm=client)
    slots = client.server.slots
    slots.acquire("mason")
    slots.acquire("pip")
    clock.advance(4)
    lines = console_namespace(service, None, service.registry)["model_servers"]().splitlines()
    assert lines[1].split()[:4] == ["profile", "server", "kind", "slots"]
    row = lines[3]
    assert "http://127.0.0.1:9" in row and "1 (pip: 1)" in row and "4.0s" in row, row
    assert "closed" in row
    slots.release()
    row = console_namespace(service, None, service.registry)["model_servers"]().splitlines()[3]
    assert "0  " in row and "2.0s" in row, row  # pip waited 4 s: 2 granted, mean 2 s


def test_heard_and_helpers(ns: dict[str, Any]) -> None:
    """heard() shows a character's log; helpers() explains every helper."""
    ns["world"].message_location("char:bob", "evening", kind="say")
    assert 'Bob says, "evening"' in ns["heard"]("char:pip")
    assert ns["heard"]("char:ghost") == "no character with id 'char:ghost'"
    text = ns["helpers"]()
    for name in ("status()", "history(", "say(", "tick(", "stop(", "tools()", "cache_stats()"):
        assert name in text


# -- terminal escapes ------------------------------------------------------------------------

ESCAPES = "\x1b[2J\x1b]0;owned\x07\x9b31m\x00\x7f\x85"
"""Clear the screen, set the window title, a C1 CSI, NUL, DEL, NEL: none may reach the terminal."""


def printed_controls(text: str) -> list[str]:
    """The control characters in ``text`` other than the newlines between its lines."""
    return [ch for ch in text if ch != "\n" and (ord(ch) < 0x20 or 0x7f <= ord(ch) <= 0x9f)]


def test_terminal_escapes_from_players_are_not_printed(ns: dict[str, Any]) -> None:
    """What players said reaches heard(), history() and tick() without its control characters."""
    from tests.unit.service_fakes import loop_result

    ns["world"].message_location("char:bob", f"evening{ESCAPES}!", kind="say")
    heard = ns["heard"]("char:pip")
    assert 'Bob says, "evening[2J]0;owned31m !"' in heard  # NEL is a space in a cell
    ns["service"].get("pip").history.replace([
        {"role": "user", "content": f"hello{ESCAPES}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c1{ESCAPES}", "type": "function",
             "function": {"name": f"say{ESCAPES}", "arguments": f'{{"text": "{ESCAPES}"}}'}}]},
        {"role": "tool", "tool_call_id": f"c1{ESCAPES}", "content": ESCAPES},
    ])
    history = ns["history"]("pip")
    assert "hello[2J]0;owned31m" in history
    fake = ns["_loop"]
    fake.behaviour = lambda ctx, config: loop_result(
        "completed", 1, text=f"Pip says{ESCAPES}", error=f"bad{ESCAPES}")
    ns["service"].get("pip").pending_events.append({"type": "say", "text": "hi"})
    d = ns["tick"]("pip")
    settle(ns["_clock"])
    tick = result_of(d)
    assert "wrote: Pip says[2J]0;owned31m" in tick
    for text in (heard, history, tick, ns["status"]()):
        assert printed_controls(text) == [], text


class AilingStore(MemoryStore):
    """A store reporting on its file as the SQLite store does, with something wrong."""

    def health(self) -> dict[str, Any]:
        return {"backend": "sqlite", "path": "db.sqlite",
                "problem": f"db.sqlite was deleted{ESCAPES}",
                "last_write_error": "the disk holding db.sqlite is full"}


def test_status_shows_what_is_wrong_with_the_store() -> None:
    """A store that reports a problem (the SQLite file gone) says so under the table."""
    from twisted.internet import task

    clock = task.Clock()
    clock, service, _ = make_service(clock, store=AilingStore(clock=clock))
    status = console_namespace(service, None, service.registry)["status"]
    footer = status().splitlines()[-2:]
    assert footer == ["STORE PROBLEM: db.sqlite was deleted[2J]0;owned31m",
                      "last store write failed: the disk holding db.sqlite is full"]
    assert service.stats()["store"]["problem"].startswith("db.sqlite was deleted")
    _, healthy, _ = make_service(task.Clock())
    assert healthy.stats()["store"] is None  # the memory store keeps no file
    assert "STORE" not in console_namespace(healthy, None, healthy.registry)["status"]()


# -- passwords ---------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["scrypt", "pbkdf2"])
def test_hash_and_verify(scheme: str) -> None:
    """A hash verifies its password only; salts differ; the format names the scheme."""
    encoded = hash_password("correct horse ✓", scheme)
    assert encoded.startswith("$scrypt$n=16384,r=8,p=1$" if scheme == "scrypt"
                              else "$pbkdf2-sha256$i=600000$")
    assert verify_password("correct horse ✓", encoded)
    assert verify_password("correct horse ✓".encode(), encoded)
    assert not verify_password("correct horse", encoded)
    cheap = hash_password("x", scheme, cost=1024)
    assert cheap != hash_password("x", scheme, cost=1024)  # salted
    assert ("n=1024" if scheme == "scrypt" else "i=1024") in cheap
    assert verify_password("x", cheap) and not verify_password("y", cheap)


@pytest.mark.parametrize("bad", [
    "plaintext", "$md5$x$y$z", "$scrypt$n=3,r=8,p=1$c2FsdA$" + "A" * 43,
    "$scrypt$r=8,p=1$c2FsdA$" + "A" * 43, "$pbkdf2-sha256$i=0$c2FsdA$" + "A" * 43,
    "$pbkdf2-sha256$i=10$!!$" + "A" * 43, "$pbkdf2-sha256$i=10$c2FsdA$QQ",
    "$pbkdf2-sha256$i=x$c2FsdA$" + "A" * 43,
])
def test_malformed_hashes_are_refused(bad: str) -> None:
    """Anything but a well-formed hash is a ValueError (never compared as plain text)."""
    with pytest.raises(ValueError):
        verify_password(bad, bad)


def test_hash_password_refusals() -> None:
    """Empty passwords and unknown schemes are refused."""
    with pytest.raises(ValueError):
        hash_password("")
    with pytest.raises(ValueError):
        hash_password("x", "md5")


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    """A login file as an operator would keep it (private unless ``mode`` says otherwise)."""
    path.write_text(text)
    path.chmod(mode)
    return path


def test_read_password_file(tmp_path: Path) -> None:
    """Comments and blank lines are skipped; users map to hashes."""
    encoded = hash_password("pw", "pbkdf2", cost=1000)
    path = write(tmp_path / "pw", f"# admins\n\nadmin:{encoded}\n")
    assert read_password_file(path) == {"admin": encoded}


@pytest.mark.parametrize(("text", "fragment"), [
    ("admin:hunter2\n", ":1: the password of 'admin' is not a hash"),
    ("# c\nnocolon\n", ":2: expected"),
    (":$scrypt$...\n", ":1: expected"),
])
def test_bad_password_files(tmp_path: Path, text: str, fragment: str) -> None:
    """A plain-text password or a malformed line stops start-up, naming the line."""
    path = write(tmp_path / "pw", text)
    with pytest.raises(ConfigError, match=fragment):
        read_password_file(path)
    with pytest.raises(ConfigError):
        PasswordFileChecker(path)


def test_missing_password_file(tmp_path: Path) -> None:
    """A missing file is a ConfigError naming it."""
    with pytest.raises(ConfigError, match="nothing"):
        read_password_file(tmp_path / "nothing")


def login(checker: PasswordFileChecker, user: str, password: str) -> Any:
    d = checker.requestAvatarId(credentials.UsernamePassword(user.encode(), password.encode()))
    box: list[Any] = []
    d.addBoth(box.append)
    return box[0]


def test_password_checker(tmp_path: Path) -> None:
    """Right password: the user; wrong password or unknown user: UnauthorizedLogin."""
    path = write(tmp_path / "pw", f"admin:{hash_password('pw', 'pbkdf2', cost=1000)}\n")
    checked: list[str] = []

    def run(f: Any, password: bytes, encoded: str) -> defer.Deferred[Any]:
        checked.append(encoded)
        return defer.maybeDeferred(f, password, encoded)

    checker = PasswordFileChecker(path, run=run)
    assert login(checker, "admin", "pw") == b"admin"
    for user, password in (("admin", "wrong"), ("ghost", "pw")):
        result = login(checker, user, password)
        assert isinstance(result, Failure)
        assert result.check(cred_error.UnauthorizedLogin)
    assert len(checked) == 3  # the unknown user cost a hash check too
    assert checked[2].startswith("$pbkdf2-sha256$i=1000$")  # as costly as a real one


def test_password_checker_rereads_the_file(tmp_path: Path) -> None:
    """A changed file applies at the next login; a broken one refuses everyone."""
    path = write(tmp_path / "pw", f"admin:{hash_password('old', 'pbkdf2', cost=1000)}\n")
    checker = PasswordFileChecker(path, run=defer.maybeDeferred)
    write(path, f"admin:{hash_password('new', 'pbkdf2', cost=1000)}\n")
    assert login(checker, "admin", "new") == b"admin"
    assert isinstance(login(checker, "admin", "old"), Failure)
    write(path, "admin:plaintext\n")
    assert isinstance(login(checker, "admin", "new"), Failure)


# -- authorized keys and host key -----------------------------------------------------------


def test_authorized_keys_file(tmp_path: Path) -> None:
    """Keys of the file, for any user; option-prefixed lines are skipped."""
    key = keys.Key(console._new_host_key()._keyObject)
    public = key.public().toString("openssh").decode()
    path = write(tmp_path / "keys", f"# me\n{public} me@host\nfrom=\"10.0.0.1\" {public}\n")
    db = AuthorizedKeysFile(path)
    assert db.getAuthorizedKeys(b"anyone") == [key.public()]
    path.unlink()
    assert db.getAuthorizedKeys(b"anyone") == []  # gone later: logged, nobody gets in


@pytest.mark.parametrize("text", ["", "# nothing\n", "not a key\n"])
def test_authorized_keys_without_a_key(tmp_path: Path, text: str) -> None:
    """A file with no usable key stops start-up."""
    with pytest.raises(ConfigError, match="no usable public key"):
        AuthorizedKeysFile(write(tmp_path / "keys", text))
    with pytest.raises(ConfigError, match="keys"):
        AuthorizedKeysFile(tmp_path / "missing")


def test_host_key_is_created_with_mode_0600(tmp_path: Path) -> None:
    """A missing key is created 0600 (whatever the umask) and read back the same."""
    path = tmp_path / "var" / "host_key"
    old = os.umask(0)
    try:
        key = load_or_create_host_key(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert key.isPublic() is False
    again = load_or_create_host_key(path)
    assert again.fingerprint() == key.fingerprint()


def test_host_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    """Like OpenSSH, a key file readable by group or others is refused."""
    path = tmp_path / "host_key"
    load_or_create_host_key(path)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_or_create_host_key(path)


def test_host_key_garbage_is_refused(tmp_path: Path) -> None:
    """A file that is not a private key is a ConfigError."""
    path = tmp_path / "host_key"
    path.write_text("garbage")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="not a private key"):
        load_or_create_host_key(path)


def test_host_key_in_memory_without_a_path() -> None:
    """No path: a fresh key for this run, written nowhere."""
    assert load_or_create_host_key(None).isPublic() is False


# -- the service -------------------------------------------------------------------------------


def test_the_manhole_needs_a_login_method(tmp_path: Path) -> None:
    """No authorized keys and no password file: refused."""
    with pytest.raises(ConfigError, match="authorized_keys or password_file"):
        make_manhole_service({}, host_key=tmp_path / "hk")


def test_the_manhole_is_one_ssh_listener(tmp_path: Path) -> None:
    """One listener (SSH), bound to 127.0.0.1 by default; the host keys are its own."""
    pw = write(tmp_path / "pw", f"admin:{hash_password('pw', 'pbkdf2', cost=1000)}\n")
    reactor = MemoryReactorClock()
    built = make_manhole_service({"x": 1}, endpoint="tcp:2222:interface=127.0.0.1",
                                 password_file=pw, host_key=tmp_path / "hk", reactor=reactor)
    assert isinstance(built, ConsoleService)
    service: ConsoleService = built
    assert list(service) == [service.listener]
    service.startService()
    [(port, factory, _backlog, interface)] = reactor.tcpServers
    assert (port, interface) == (2222, "127.0.0.1")
    assert isinstance(factory, manhole_ssh.ConchFactory)
    assert manhole_ssh.ConchFactory.publicKeys == {}  # the class-wide dict untouched
    assert list(factory.publicKeys) == [b"ssh-ed25519"]
    auth = factory.services[b"ssh-userauth"]
    assert auth.attemptsBeforeDisconnect == 5 and auth.passwordDelay >= 1
    assert stat.S_IMODE((tmp_path / "hk").stat().st_mode) == 0o600
    result_of(service.stopService())


# -- one statement over ssh ----------------------------------------------------------------------


class FakeProcessProtocol:
    """What run_statement writes to and ends."""

    def __init__(self) -> None:
        self.output = b""
        self.ended: Any = None

    def write(self, data: bytes) -> None:
        self.output += data

    def processEnded(self, reason: Failure) -> None:
        self.ended = reason.value


def test_run_statement_prints_an_expression() -> None:
    """An expression's repr is printed, exit 0."""
    proto = FakeProcessProtocol()
    run_statement({"status": lambda: Table("a table")}, "status()", proto)
    assert proto.output == b"a table\n"
    assert isinstance(proto.ended, internet_error.ProcessDone)


def test_run_statement_runs_statements_with_print() -> None:
    """Statements run; print goes to the client; stdout is restored."""
    proto = FakeProcessProtocol()
    real = sys.stdout
    run_statement({}, "x = 2\nprint(x * 21)", proto)
    assert proto.output == b"42\n"
    assert sys.stdout is real


def test_run_statement_waits_for_deferreds() -> None:
    """A Deferred value is printed when it fires (a leading newline dropped)."""
    proto = FakeProcessProtocol()
    d: defer.Deferred[Table] = defer.Deferred()
    run_statement({"d": d}, "d", proto)
    assert proto.ended is None
    d.callback(Table("done").later())
    assert proto.output == b"done\n"


@pytest.mark.parametrize("source", ["1/0", "def (", "undefined_name"])
def test_run_statement_errors_exit_1(source: str) -> None:
    """Exceptions (and syntax errors) print a traceback and exit 1."""
    proto = FakeProcessProtocol()
    run_statement({}, source, proto)
    assert b"Error" in proto.output
    assert isinstance(proto.ended, internet_error.ProcessTerminated)
    assert proto.ended.exitCode == 1


def test_run_statement_failed_deferred_exits_1() -> None:
    """A failing Deferred prints its traceback, exit 1."""
    proto = FakeProcessProtocol()
    run_statement({"d": defer.fail(RuntimeError("boom"))}, "d", proto)
    assert b"boom" in proto.output
    assert proto.ended.exitCode == 1


# -- python -m ai_tools.standalone.console hash-password ---------------------------


def test_hash_password_command_from_stdin(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Piped password: one line out, 'user:$scrypt$...', which verifies."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("s3cret\n"))
    assert console.main(["hash-password", "--user", "admin"]) == 0
    line = capsys.readouterr().out.strip()
    user, _, encoded = line.partition(":")
    assert user == "admin" and encoded.startswith("$scrypt$")
    assert verify_password("s3cret", encoded)


def test_hash_password_command_prompts_twice(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """On a terminal the password is asked twice; a mismatch or empty one fails."""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Tty())
    answers = iter(["a", "b"])
    monkeypatch.setattr(console.getpass, "getpass", lambda prompt: next(answers))
    assert console.main(["hash-password"]) == 1
    assert "differ" in capsys.readouterr().err
    answers = iter(["pw", "pw"])
    assert console.main(["hash-password", "--scheme", "pbkdf2"]) == 0
    assert capsys.readouterr().out.startswith("$pbkdf2-sha256$")
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n"))
    assert console.main(["hash-password"]) == 1


def test_a_host_namespace_gets_the_helpers(ns: dict[str, Any]) -> None:
    """with_helpers adds what is missing over the namespace's service, keeps the rest."""
    from ai_tools.standalone.console import with_helpers

    mine = {"service": ns["service"], "config": "cfg", "status": "my own"}
    merged = with_helpers(mine)
    assert merged["status"] == "my own" and merged["config"] == "cfg"
    assert merged["registry"] is ns["service"].registry
    assert merged["world"] is ns["service"].world
    assert merged["history"]("mason").startswith("mason: 0 message(s)")
    assert callable(merged["tick"]) and "service" in merged
    assert with_helpers({"x": 1}) == {"x": 1}
    assert mine == {"service": ns["service"], "config": "cfg", "status": "my own"}


def test_paths_may_start_with_a_tilde(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """'~/...' paths (as in authorized_keys = "~/.ssh/authorized_keys") are expanded."""
    monkeypatch.setenv("HOME", str(tmp_path))
    key = console._new_host_key()
    write(tmp_path / "keys", key.public().toString("openssh").decode() + "\n")
    write(tmp_path / "pw", f"admin:{hash_password('pw', 'pbkdf2', cost=1000)}\n")
    assert AuthorizedKeysFile("~/keys").path == tmp_path / "keys"
    assert read_password_file("~/pw").keys() == {"admin"}
    load_or_create_host_key("~/hk")
    assert (tmp_path / "hk").exists()


def test_a_client_logging_out_is_no_error() -> None:
    """The disconnect reasons of a logout (OpenSSH's, Twisted's) are logged at info; other
    disconnect reasons stay errors, as Twisted logs them."""
    from twisted.conch.ssh import transport

    from ai_tools.standalone.console import ConsoleFactory, ConsoleServerTransport
    from tests.unit.service_fakes import LogCapture

    assert ConsoleFactory.protocol is ConsoleServerTransport
    server = ConsoleServerTransport()
    with LogCapture() as captured:
        server.receiveError(transport.DISCONNECT_BY_APPLICATION, b"disconnected by user")
        server.receiveError(transport.DISCONNECT_CONNECTION_LOST, b"user closed connection")
        assert captured.events == []
        server.receiveError(transport.DISCONNECT_PROTOCOL_ERROR, b"bad packet")
    (event,) = captured.events
    assert event["code"] == transport.DISCONNECT_PROTOCOL_ERROR


def test_tick_prints_the_spoken_line_as_said_and_the_model_text_as_wrote(
        ns: dict[str, Any]) -> None:
    """``said:`` is what the players heard (the say tool's text), not the model's own text."""
    fake = ns["_loop"]
    fake.behaviour = lambda ctx, config: loop_result(
        "terminal_tool", 2, text="I should answer about the soup.", results=[
            {"iteration": 1, "tool": "say", "status": "success", "success": True,
             "duration_ms": 1.0, "result": {"success": True, "kind": "say",
                                            "text": "Fish chowder, and it is ready."}},
            {"iteration": 1, "tool": "whisper", "status": "success", "success": True,
             "duration_ms": 1.0, "result": {"success": True, "kind": "whisper", "text": "psst",
                                            "target": {"id": "char:bob", "key": "Bob"}}},
            {"iteration": 1, "tool": "say", "status": "tool_error", "success": False,
             "duration_ms": 1.0, "result": {"success": False, "kind": "say", "text": "no"}}])
    ns["service"].get("pip").pending_events.append({"type": "say", "text": "soup?"})
    d = ns["tick"]("pip")
    settle(ns["_clock"])
    tick = result_of(d)
    assert "said: Fish chowder, and it is ready." in tick
    assert "whispered to Bob: psst" in tick
    assert "said: no" not in tick
    assert "wrote: I should answer about the soup." in tick
    assert "said: I should" not in tick


@pytest.mark.parametrize("source", ['tick("nobody")', 'history("nobody")', 'stop("nobody")',
                                    'say("nobody", "hi")', 'heard("char:nobody")'])
def test_a_helper_refusal_exits_1(ns: dict[str, Any], source: str) -> None:
    """``ssh host 'tick("nobody")'`` prints why and exits 1 (a script can tell)."""
    proto = FakeProcessProtocol()
    run_statement(ns, source, proto)
    assert b"nobody" in proto.output
    assert isinstance(proto.ended, internet_error.ProcessTerminated)
    assert proto.ended.exitCode == 1


def test_approvals_approve_and_refuse(ns: dict[str, Any]) -> None:
    """The manhole lists the calls waiting for approval and answers them."""
    from ai_tools.llm.events import ToolCall

    board = ns["service"].approvals
    decisions: list[Any] = []
    for i in range(2):
        board.request("pip", "dig", ToolCall(id=f"c{i}", name="dig", arguments={"at": i}),
                      60).addCallback(decisions.append)
    first, second = (p["id"] for p in board.pending())
    listed = ns["approvals"]()
    assert first in listed and second in listed and '{"at": 0}' in listed
    assert "pip: dig approved" in ns["approve"](first)
    assert "pip: dig refused" in ns["refuse"](second, "not now")
    assert [(d.approved, d.by, d.reason) for d in decisions] == \
        [(True, "manhole", ""), (False, "manhole", "not now")]
    assert "no call waits" in ns["approvals"]()
    proto = FakeProcessProtocol()
    run_statement(ns, f'approve("{first}")', proto)
    assert b"answered, timed out or withdrawn" in proto.output and proto.ended.exitCode == 1
