"""The manhole over real SSH on 127.0.0.1.

Driven with Twisted's own SSH client (always: no system package needed) —
one statement (``ssh host 'status()'``) and the interactive console with a
pty — and with OpenSSH's ``ssh -tt`` when it is installed.  Key and password
logins work, a wrong key or password is refused, the host key file is 0600
and is the key the server shows, and the port speaks SSH only.
"""

from __future__ import annotations

import os
import shutil
import stat
import struct
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_twisted
from cryptography.hazmat.primitives.asymmetric import ed25519
from twisted.conch.client.knownhosts import KnownHostsFile
from twisted.conch.endpoints import SSHCommandClientEndpoint
from twisted.conch.ssh import channel, common, connection, keys, transport, userauth
from twisted.internet import defer, protocol, task
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.logger import globalLogPublisher
from twisted.python.filepath import FilePath

from ai_tools.service.service import AssistantService
from ai_tools.standalone.console import (
    ConsoleService,
    console_namespace,
    hash_password,
    make_manhole_service,
)
from ai_tools.world.sandbox import SandboxWorld
from tests.unit.service_fakes import FakeLLM, FakeLoop, LogCapture

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "world.toml"
SSH = shutil.which("ssh")


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


async def until(condition: Any, what: str, limit: int = 1500) -> None:
    """Let the reactor run until ``condition()`` (bounded by ``limit`` x 20 ms, not a timing)."""
    for _ in range(limit):
        if condition():
            return
        await task.deferLater(reactor(), 0.02, lambda: None)
    raise AssertionError(f"not reached: {what}")


def new_key() -> keys.Key:
    return keys.Key(ed25519.Ed25519PrivateKey.generate())


class Manhole:
    """A service with Pip, the manhole on a free port, a client key; ``close`` stops all."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.key = new_key()
        self.key_file = tmp_path / "id_ed25519"
        self.key_file.write_bytes(self.key.toString("openssh"))
        self.key_file.chmod(0o600)
        (tmp_path / "authorized_keys").write_text(
            self.key.public().toString("openssh").decode() + " tester@test\n")
        (tmp_path / "passwords").write_text(
            f"admin:{hash_password('letmein', 'pbkdf2', cost=1000)}\n")
        (tmp_path / "passwords").chmod(0o600)
        self.host_key_file = tmp_path / "var" / "host_key"
        self.service: AssistantService | None = None
        self.manhole: ConsoleService | None = None
        self.port = 0

    async def start(self) -> None:
        r = reactor()
        world = SandboxWorld.from_file(EXAMPLE, clock=r)
        self.service = AssistantService(llm=FakeLLM(), world=world, clock=r,
                                        loop_runner=FakeLoop(), stop_grace=1)
        self.service.startService()
        await self.service.when_ready()
        await self.service.add_assistant({"name": "pip", "character_id": "char:pip"})
        namespace = console_namespace(self.service, world, self.service.registry)
        self.manhole = make_manhole_service(
            namespace, endpoint="tcp:0:interface=127.0.0.1",
            authorized_keys=self.dir / "authorized_keys", password_file=self.dir / "passwords",
            host_key=self.host_key_file, reactor=r)
        self.manhole.startService()
        self.port = (await self.manhole.when_listening()).getHost().port
        host_key = keys.Key.fromFile(str(self.host_key_file))
        public = host_key.public().toString("openssh").decode()
        # OpenSSH names a host on another port "[host]:port"; conch's known_hosts does not.
        self.known_hosts = self.dir / "known_hosts"
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {public}\n")
        self.conch_known_hosts = self.dir / "conch_known_hosts"
        self.conch_known_hosts.write_text(f"127.0.0.1 {public}\n")
        self.host_key = host_key

    async def close(self) -> None:
        if self.manhole is not None and self.manhole.running:
            await self.manhole.stopService()
        if self.service is not None and self.service.running:
            await self.service.stopService()


@pytest.fixture(name="manhole")
def manhole_fixture(tmp_path: Path) -> Any:
    """A started manhole, stopped after the test."""
    m = Manhole(tmp_path)
    pytest_twisted.blockon(defer.ensureDeferred(m.start()))
    yield m
    pytest_twisted.blockon(defer.ensureDeferred(m.close()))


# -- Twisted's client: one statement ---------------------------------------------------------


class Output(protocol.Protocol):
    """Collects a command's output until the channel closes."""

    def __init__(self) -> None:
        self.data = b""
        self.done: defer.Deferred[None] = defer.Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Any = None) -> None:
        self.done.callback(None)


async def run_command(m: Manhole, command: bytes, *, key: keys.Key | None = None,
                      password: bytes | None = None) -> bytes:
    endpoint = SSHCommandClientEndpoint.newConnection(
        reactor(), command, b"admin", cast(Any, "127.0.0.1"), port=m.port,
        keys=[key] if key is not None else None, password=password, agentEndpoint=None,
        knownHosts=cast(Any, KnownHostsFile.fromPath(FilePath(str(m.conch_known_hosts)))))
    output = Output()
    await connectProtocol(endpoint, output)
    await output.done
    return output.data


@pytest_twisted.ensureDeferred
async def test_status_over_ssh_with_a_key(manhole: Manhole) -> None:
    """Key login; 'status()' prints the assistants table; the logout is no error."""
    logouts: list[Any] = []

    def logout(event: Any) -> None:
        if "Manhole logout" in str(event.get("log_format")):
            logouts.append(event)

    globalLogPublisher.addObserver(logout)
    try:
        with LogCapture() as captured:
            out = (await run_command(manhole, b"status()", key=manhole.key)).decode()
            await until(lambda: logouts or captured.events, "the server to see the logout")
    finally:
        globalLogPublisher.removeObserver(logout)
    assert captured.events == [] and len(logouts) == 1, captured.events
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["name", "character", "mode"]
    assert lines[2].split()[:3] == ["pip", "char:pip", "awake"]


@pytest_twisted.ensureDeferred
async def test_say_over_ssh_prints_the_tick_that_answers(manhole: Manhole) -> None:
    """'say(...)' as the SSH command waits for the tick the message starts; 'tick(...)'
    right after runs one of its own (nothing is in flight any more)."""
    out = (await run_command(manhole, b'say("pip", "is the chowder ready?")',
                             key=manhole.key)).decode()
    lines = out.splitlines()
    assert lines[0] == "queued for pip: 'is the chowder ready?'", out
    assert lines[1].startswith("pip tick #") and ": ran (completed)" in lines[1], out
    out = (await run_command(manhole, b'tick("pip")', key=manhole.key)).decode()
    assert out.startswith("pip tick #") and "already_ticking" not in out, out


@pytest_twisted.ensureDeferred
async def test_password_login(manhole: Manhole) -> None:
    """A password from the hashed file logs in."""
    out = await run_command(manhole, b"service.names()", password=b"letmein")
    assert out == b"['pip']\n"


@pytest_twisted.ensureDeferred
async def test_a_wrong_key_is_refused(manhole: Manhole) -> None:
    """A key that is not in authorized_keys gets no session."""
    from twisted.conch.endpoints import AuthenticationFailed

    with pytest.raises(AuthenticationFailed):
        await run_command(manhole, b"status()", key=new_key())


@pytest_twisted.ensureDeferred
async def test_a_wrong_password_is_refused(manhole: Manhole) -> None:
    """A wrong password gets no session."""
    from twisted.conch.endpoints import AuthenticationFailed

    with pytest.raises(AuthenticationFailed):
        await run_command(manhole, b"status()", password=b"letmeout")


@pytest_twisted.ensureDeferred
async def test_login_files_others_could_change_let_nobody_in(manhole: Manhole) -> None:
    """StrictModes at login: a key file made group-writable, a password file made
    world-readable after the start refuse the logins they held; fixed again, they work."""
    from twisted.conch.endpoints import AuthenticationFailed

    keys_file, passwords = manhole.dir / "authorized_keys", manhole.dir / "passwords"
    keys_file.chmod(0o664)
    with pytest.raises(AuthenticationFailed):
        await run_command(manhole, b"status()", key=manhole.key)
    passwords.chmod(0o644)
    with pytest.raises(AuthenticationFailed):
        await run_command(manhole, b"service.names()", password=b"letmein")
    keys_file.chmod(0o644)
    passwords.chmod(0o600)
    assert await run_command(manhole, b"service.names()", key=manhole.key) == b"['pip']\n"
    assert await run_command(manhole, b"service.names()", password=b"letmein") == b"['pip']\n"


@pytest_twisted.ensureDeferred
async def test_terminal_escapes_never_reach_the_operator(manhole: Manhole) -> None:
    """A player's escape sequences, shown by heard() over SSH, arrive without their controls."""
    assert manhole.service is not None
    manhole.service.world.message_location(
        "char:bob", "hi\x1b]0;owned\x07\x1b[2J\x9b1m there", kind="say")
    out = await run_command(manhole, b"heard('char:pip')", key=manhole.key)
    assert b'Bob says, "hi]0;owned[2J1m there"' in out
    assert not any(byte < 0x20 and byte != 0x0A for byte in out)
    assert "\x9b" not in out.decode("utf-8")


@pytest_twisted.ensureDeferred
async def test_a_deferred_result_is_printed_when_it_fires(manhole: Manhole) -> None:
    """tick(name) waits for the tick and prints it."""
    out = (await run_command(manhole, b"tick('pip')", key=manhole.key)).decode()
    assert out.startswith("pip tick #")


def test_the_host_key_file_is_private(manhole: Manhole) -> None:
    """Created by us with mode 0600, inside a directory we made."""
    assert stat.S_IMODE(manhole.host_key_file.stat().st_mode) == 0o600
    assert manhole.host_key.isPublic() is False


@pytest_twisted.ensureDeferred
async def test_the_port_speaks_ssh_only(manhole: Manhole) -> None:
    """One listener; it greets with an SSH banner (no telnet, no plain Python prompt)."""
    assert manhole.manhole is not None
    assert list(manhole.manhole) == [manhole.manhole.listener]
    raw = Output()
    await connectProtocol(TCP4ClientEndpoint(reactor(), "127.0.0.1", manhole.port), raw)
    await until(lambda: b"\r\n" in raw.data, "the server banner")
    assert raw.data.startswith(b"SSH-2.0-")
    assert b">>>" not in raw.data
    raw_transport: Any = raw.transport
    raw_transport.loseConnection()
    await raw.done


# -- Twisted's client: the interactive console with a pty -----------------------------------------


class ShellChannel(channel.SSHChannel):
    """A session channel asking for a pty and a shell."""

    name = b"session"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.received = b""
        self.opened: defer.Deferred[None] = defer.Deferred()
        self.gone: defer.Deferred[None] = defer.Deferred()

    def channelOpen(self, specificData: bytes) -> None:
        pty = common.NS(b"xterm") + struct.pack(">4L", 100, 30, 0, 0) + common.NS(b"")
        conn: Any = self.conn
        d = conn.sendRequest(self, b"pty-req", pty, wantReply=True)
        d.addCallback(lambda _: conn.sendRequest(self, b"shell", b"", wantReply=True))
        d.addCallbacks(lambda _: self.opened.callback(None), self.opened.errback)

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def closed(self) -> None:
        if not self.gone.called:
            self.gone.callback(None)
        self.loseConnection()


class KeyAuth(userauth.SSHUserAuthClient):
    """Offers one key, once."""

    def __init__(self, user: bytes, conn: Any, key: keys.Key) -> None:
        super().__init__(user, conn)
        self.key = key
        self.offered = False

    def getPublicKey(self) -> keys.Key | None:
        if self.offered:
            return None
        self.offered = True
        return self.key.public()

    def getPrivateKey(self) -> defer.Deferred[keys.Key]:
        return defer.succeed(self.key)

    def getPassword(self, prompt: Any = None) -> Any:
        return None


class ShellConnection(connection.SSHConnection):
    def __init__(self, shell: ShellChannel) -> None:
        super().__init__()
        self.shell = shell

    def serviceStarted(self) -> None:
        self.openChannel(self.shell)


class ShellTransport(transport.SSHClientTransport):
    """Checks the host key against the expected one, then logs in with the key."""

    def __init__(self, host_key: keys.Key, key: keys.Key, shell: ShellChannel) -> None:
        super().__init__()
        self.expected = host_key.public().blob()
        self.key = key
        self.shell = shell

    def verifyHostKey(self, hostKey: bytes, fingerprint: bytes) -> defer.Deferred[None]:
        if hostKey != self.expected:
            return defer.fail(Exception("unexpected host key"))
        return defer.succeed(None)

    def connectionSecure(self) -> None:
        self.requestService(KeyAuth(b"admin", ShellConnection(self.shell), self.key))


@pytest_twisted.ensureDeferred
async def test_interactive_console_with_a_pty(manhole: Manhole) -> None:
    """The banner, a prompt, status() printed as a table; Ctrl-D closes the session."""
    shell = ShellChannel()
    client = ShellTransport(manhole.host_key, manhole.key, shell)
    await connectProtocol(TCP4ClientEndpoint(reactor(), "127.0.0.1", manhole.port), client)
    await shell.opened
    await until(lambda: b">>> " in shell.received, "the prompt")
    assert b"ai_tools console" in shell.received
    shell.write(b"status()\r")
    await until(lambda: b"1 assistant(s)" in shell.received, "the status table")
    text = shell.received.decode("utf-8", "replace")
    assert "char:pip" in text
    shell.write(b"\x04")
    await shell.gone
    client_transport: Any = client.transport
    client_transport.loseConnection()


# -- OpenSSH's client, when installed -------------------------------------------------------------


def ssh_args(m: Manhole, key_file: Path) -> list[str]:
    return [SSH or "ssh", "-F", "/dev/null", "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={m.known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
            "-o", "IdentityAgent=none", "-o", "ConnectTimeout=30",
            "-i", str(key_file), "-p", str(m.port), "admin@127.0.0.1"]


class SshProcess(protocol.ProcessProtocol):
    """An ssh -tt session: types a line once the prompt shows, Ctrl-D once the table shows."""

    def __init__(self) -> None:
        self.out = b""
        self.ended: defer.Deferred[Any] = defer.Deferred()
        self.step = 0

    def outReceived(self, data: bytes) -> None:
        self.out += data
        process: Any = self.transport
        if self.step == 0 and b">>> " in self.out:
            self.step = 1
            process.write(b"status()\r")
        elif self.step == 1 and b"1 assistant(s)" in self.out:
            self.step = 2
            process.write(b"\x04")

    def errReceived(self, data: bytes) -> None:
        self.out += data

    def processEnded(self, reason: Any) -> None:
        self.ended.callback(reason.value.exitCode)


@pytest.mark.skipif(SSH is None, reason="OpenSSH client not installed")
@pytest_twisted.ensureDeferred
async def test_openssh_interactive_tt(manhole: Manhole) -> None:
    """``ssh -tt`` drives the console: status() is printed, Ctrl-D ends it."""
    proc = SshProcess()
    reactor().spawnProcess(proc, SSH, [*ssh_args(manhole, manhole.key_file)[:1], "-tt",
                                       *ssh_args(manhole, manhole.key_file)[1:]],
                           env={"PATH": os.environ.get("PATH", ""), "HOME": str(manhole.dir)})
    code = await proc.ended
    text = proc.out.decode("utf-8", "replace")
    assert "char:pip" in text and "1 assistant(s)" in text
    assert code == 0


@pytest.mark.skipif(SSH is None, reason="OpenSSH client not installed")
@pytest_twisted.ensureDeferred
async def test_openssh_command_and_wrong_key(manhole: Manhole) -> None:
    """``ssh host 'status()'`` prints the table; another key is refused (exit 255)."""
    from twisted.internet.utils import getProcessOutputAndValue

    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(manhole.dir)}
    out, err, code = await getProcessOutputAndValue(
        SSH, [*ssh_args(manhole, manhole.key_file)[1:], "status()"], env=env)
    assert code == 0, err
    assert out.splitlines()[2].split()[:2] == [b"pip", b"char:pip"]
    other = manhole.dir / "other_key"
    other.write_bytes(new_key().toString("openssh"))
    other.chmod(0o600)
    out, err, code = await getProcessOutputAndValue(
        SSH, [*ssh_args(manhole, other)[1:], "status()"], env=env)
    assert code == 255
    assert b"Permission denied" in err
    assert out == b""


@pytest.mark.skipif(SSH is None, reason="OpenSSH client not installed")
@pytest_twisted.ensureDeferred
async def test_openssh_a_refused_helper_exits_1(manhole: Manhole) -> None:
    """``ssh host 'tick("nobody")'`` prints the names it knows and exits 1; a script can
    tell it did nothing.  ``approvals()`` with nothing waiting says so and exits 0."""
    from twisted.internet.utils import getProcessOutputAndValue

    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(manhole.dir)}
    out, err, code = await getProcessOutputAndValue(
        SSH, [*ssh_args(manhole, manhole.key_file)[1:], 'tick("nobody")'], env=env)
    assert code == 1, (out, err)
    assert b"no assistant named 'nobody' (assistants: pip)" in out
    out, err, code = await getProcessOutputAndValue(
        SSH, [*ssh_args(manhole, manhole.key_file)[1:], "approvals()"], env=env)
    assert code == 0 and b"no call waits for approval" in out, (out, err)
