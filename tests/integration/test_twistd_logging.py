"""``--log-level`` under a real twistd, for each place twistd logs to: standard output,
a ``--logfile`` and ``--syslog`` (a stand-in ``syslog`` module records what twistd
sends, since these machines run no syslog daemon).

The service starts with a mistyped ``AI_TOOLS_`` variable, so it logs a warning. Each
run is stopped once its HTTP port accepts connections — by then the service has logged
``ai_tools service ready`` (info) if its level lets it through.  At ``--log-level
warn`` the warning is there and no info line is; at ``debug`` both are.
"""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from tests.integration.twistd_process import (
    SCENARIO_MODEL,
    TWISTD,
    Twistd,
    clean_environment,
    reactor,
    until,
    write_config,
    write_scenario,
)

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")

TYPO = {"AI_TOOLS_LOG_LEVLE": "debug"}
WARNING = "Configuration: AI_TOOLS_LOG_LEVLE is not an ai_tools setting"
READY = "ai_tools service ready"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest_twisted.async_yield_fixture
async def service(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Runs twistd (``python -c CODE`` or the twistd script) until ready, then SIGTERM."""
    started: list[Twistd] = []
    write_scenario(tmp_path)

    async def run(twistd_options: list[str], level: str, *, code: str | None = None,
                  env: dict[str, str] | None = None) -> Twistd:
        port = free_port()
        config = write_config(tmp_path, models=SCENARIO_MODEL, http_listen=f"127.0.0.1:{port}")
        executable, head = ((sys.executable, [sys.executable, "-c", code]) if code
                            else (str(TWISTD), [str(TWISTD)]))
        args = [*head, "-n", *twistd_options, "--pidfile", "", "ai-assistant",
                "--config", str(config), "--log-level", level]
        proc = Twistd(tmp_path, args)
        started.append(proc)
        reactor().spawnProcess(proc, executable, args, path=str(tmp_path),
                               env={**clean_environment(), **TYPO, **(env or {})})
        await until(lambda: accepts(port) or not proc.running, "the HTTP port")
        proc.signal("TERM")
        await proc.wait_ended()
        assert proc.exit_signal == signal.SIGTERM, proc.stdout + proc.stderr
        return proc

    yield run
    for proc in started:
        if proc.running:
            proc.signal("KILL")
            await proc.wait_ended()


def assert_filtered(text: str) -> None:
    assert WARNING in text, text
    assert READY not in text and "#info]" not in text, text


@pytest_twisted.ensureDeferred
async def test_standard_output(service: Any) -> None:
    assert_filtered((await service([], "warn")).stdout)
    shown = (await service([], "debug")).stdout
    assert WARNING in shown and READY in shown


@pytest_twisted.ensureDeferred
async def test_a_log_file(service: Any, tmp_path: Path) -> None:
    log = tmp_path / "service.log"
    proc = await service(["--logfile", str(log)], "error")
    assert WARNING not in log.read_text() and READY not in log.read_text()
    assert proc.stdout.strip() == "", proc.stdout  # everything went to the file
    log.unlink()
    await service(["--logfile", str(log)], "warn")
    assert_filtered(log.read_text())
    log.unlink()
    await service(["--logfile", str(log)], "info")
    assert READY in log.read_text()


FAKE_SYSLOG = '''
"""A stand-in for the syslog module: each message appended to $FAKE_SYSLOG_FILE.

Its functions are partials, like the C module's builtins: twisted.python.syslog keeps
them as class attributes, where a plain function would become a method.
"""
import functools
import os
from syslog import *  # noqa: F403 - the constants twisted.python.syslog reads


def _openlog(ident="", logoption=0, facility=0):
    _write(f"OPEN {ident}")


def _syslog(priority, message=None):
    _write(f"{priority} {message}")


openlog = functools.partial(_openlog)
syslog = functools.partial(_syslog)
closelog = functools.partial(lambda: None)


def _write(line):
    with open(os.environ["FAKE_SYSLOG_FILE"], "a") as f:
        f.write(line + "\\n")
'''

RUN_TWISTD = ("import sys, fake_syslog; sys.modules['syslog'] = fake_syslog; "
              "from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()")


@pytest_twisted.ensureDeferred
async def test_syslog(service: Any, tmp_path: Path) -> None:
    (tmp_path / "fake_syslog.py").write_text(FAKE_SYSLOG)
    sent = tmp_path / "syslog.txt"
    env = {"PYTHONPATH": str(tmp_path), "FAKE_SYSLOG_FILE": str(sent)}
    await service(["--syslog", "--prefix", "pipinn"], "warn", code=RUN_TWISTD, env=env)
    text = sent.read_text()
    assert text.startswith("OPEN pipinn\n"), text
    assert WARNING in text and READY not in text, text
    sent.unlink()
    await service(["--syslog", "--prefix", "pipinn"], "info", code=RUN_TWISTD, env=env)
    assert READY in sent.read_text()
