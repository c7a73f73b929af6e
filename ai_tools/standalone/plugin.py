"""Options and service factory behind ``twistd ai-assistant``.

``twistd -n ai-assistant --config assistant.toml [--db PATH] [--http LISTEN]
[--llm-url URL] [--llm-model NAME] ...``: one flag per setting of
:mod:`ai_tools.settings`, each also an ``AI_TOOLS_…`` variable; a flag wins over
the variable, the variable over the file.  The configuration is read and
checked while the command line is parsed, so a mistake stops twistd before
anything starts:
one line on standard error (``twistd ai-assistant: error: assistant.toml:
assistants.pip.model: unknown model profile 'gpt' (declared: local)``), no
traceback, exit status 1.  (twistd answers a ``UsageError`` with its whole
usage text on standard output, which buries the one line that matters.)

The listening ports are tried before twistd daemonizes, so a port in use
fails the start with that one line and status 1 in daemon mode too (twistd
reports a daemon started once ``makeService`` and ``startService`` return).
If start-up fails later (the store cannot be opened, a port taken meanwhile),
the service logs one line, stops the reactor, and the process exits with
status 1.

A SIGTERM (or Ctrl-C's SIGINT) stops the service cleanly — state saved, store
closed, pid file removed — and then twistd ends the process by that same
signal, as Twisted intends: a supervisor sees "killed by SIGTERM" (status
143 in a shell), which systemd, supervisord and Docker count as the stop
they asked for.  ``make run`` reads a Ctrl-C stop as clean.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import IO, Any, cast

from twisted.application.service import IService, IServiceCollection, MultiService
from twisted.logger import (
    FilteringLogObserver,
    ILogFilterPredicate,
    ILogObserver,
    LegacyLogObserverWrapper,
    LogLevel,
)
from twisted.python import usage
from twisted.python.logfile import LogFile

from ai_tools.default_reactor import global_reactor
from ai_tools.errors import ConfigError
from ai_tools.log_gate import LevelGate, arm
from ai_tools.settings import SETTINGS, near_name, setting
from ai_tools.standalone.config import Config, Overrides, load_config
from ai_tools.standalone.log_file import classic_text_observer

__all__ = ["Options", "makeService", "service_log_observer"]

EXIT_STARTUP_FAILED = 1
PROGRAM = "twistd ai-assistant"


_FLAGS = {entry.name: str(entry.option) for entry in SETTINGS if entry.flag}
"""Setting name → its twistd option (``llm_url`` → ``llm-url``)."""


def _option(name: str) -> list[str | None]:
    """twistd's option entry for a setting: its flag, and its variable in the help."""
    entry = setting(name)
    short = "c" if name == "config" else None
    return [_FLAGS[name], short, None, f"{entry.help[0].upper()}{entry.help[1:]} "
                                       f"(or ${entry.env})."]


class Options(usage.Options):
    """Command-line options of ``twistd ai-assistant``; the config is loaded in postOptions."""

    synopsis = "[options] --config assistant.toml"
    longdesc = (
        "Host LLM-driven assistants in a sandbox world, with an HTTP API and an SSH "
        "console on 127.0.0.1.  The TOML config file declares model profiles, "
        "assistants, the store, the world and the listeners; each option below (or "
        "its AI_TOOLS_ variable) overrides it.  See docs/standalone.md."
    )
    optParameters = [_option(name) for name in _FLAGS]

    def __init__(self) -> None:
        super().__init__()
        self.loaded: Config | None = None
        self.environ: dict[str, str] = dict(os.environ)

    def overrides(self) -> Overrides:
        """The command-line values and the environment, for the config."""
        flags = {name: self[option] for name, option in _FLAGS.items()
                 if name != "config" and self[option] is not None}
        return Overrides(flags=flags, environ=self.environ)

    def config_path(self) -> str:
        """``--config``, else ``$AI_TOOLS_CONFIG``; exits when neither is given."""
        path = self["config"] or self.environ.get(setting("config").env, "").strip()
        if not path:
            fail(f"--config is required (or {setting('config').env}), e.g. "
                 f"--config examples/assistant.toml")
        return str(path)

    def parseOptions(self, options: Sequence[str] | None = None) -> None:
        """Parse; a mistyped option exits with one line naming the near one."""
        try:
            super().parseOptions(options)
        except usage.UsageError as exc:
            fail(_usage_hint(str(exc)))

    def postOptions(self) -> None:
        """Load and check the config: a mistake exits with one line on stderr."""
        try:
            config = load_config(self.config_path(), self.overrides())
        except ConfigError as exc:
            fail(str(exc))
            return
        self.loaded = config
        for line in config.warnings:
            _stderr(f"{PROGRAM}: warning: {line}")


def _usage_hint(message: str) -> str:
    """twistd's usage error, with the option meant when one was mistyped."""
    unknown = re.match(r"option -*([\w-]+) not recognized", message)
    if unknown:
        close = near_name(unknown.group(1), _FLAGS.values())
        if close:
            return f"{message} (did you mean --{close}?)"
    return message


def _stderr(line: str) -> None:
    stream = sys.__stderr__ or sys.stderr
    stream.write(line + "\n")
    stream.flush()


def fail(message: str) -> None:
    """Stop twistd now: ``twistd ai-assistant: error: <message>`` on stderr, status 1."""
    raise SystemExit(f"{PROGRAM}: error: {message}")


class _Root(MultiService):
    """The root handed to twistd: installs the log-level filter on the application."""

    def __init__(self, level: str, server_options: usage.Options | None) -> None:
        super().__init__()
        self.level = level
        self.server_options = server_options

    def setServiceParent(self, parent: IServiceCollection) -> None:
        """Give the twistd application our filtered log observer, then join it.

        Its filter is then the process's only log observer: armed as the level
        gate (:mod:`ai_tools.log_gate`), events it would drop are never built.
        """
        gate = LevelGate(LogLevel.levelWithName(self.level))
        observer = service_log_observer(self.level, self.server_options, gate)
        if observer is not None and hasattr(parent, "setComponent"):
            parent.setComponent(ILogObserver, observer)
            arm(gate)
        super().setServiceParent(parent)


def service_log_observer(level: str, server_options: usage.Options | None,
                         gate: LevelGate | None = None) -> FilteringLogObserver | None:
    """The log destination twistd's options name, behind a ``--log-level`` filter.

    The filter is ``gate`` (a :class:`~ai_tools.log_gate.LevelGate` for ``level``
    when None), which whoever installs the observer may arm.

    Built from public parts, as twistd documents its options: ``--syslog``
    (with ``--prefix``) logs to syslog; ``--logfile PATH`` to that file,
    rotated as twistd rotates it (by size, and on SIGUSR1); ``--logfile -``
    and, in the foreground, no ``--logfile`` to standard output; a daemon
    without ``--logfile`` to ``twistd.log``.  None — twistd then logs as it
    would, unfiltered — when ``--logger`` names the user's own observer, when
    there are no options (a programmatic caller), and for a daemon asked to
    log to standard output (twistd refuses that itself).
    """
    if server_options is None or server_options.get("logger"):
        return None
    if server_options.get("syslog"):
        from twisted.python.log import ILogObserver as LegacyILogObserver
        from twisted.python.syslog import SyslogObserver

        legacy = SyslogObserver(server_options.get("prefix") or "twisted").emit
        base: ILogObserver = cast(ILogObserver, LegacyLogObserverWrapper(
            cast("LegacyILogObserver", legacy)))
    else:
        stream = _log_stream(server_options)
        if stream is None:
            return None
        # textFileLogObserver's lines, cheaply
        base = cast(ILogObserver, classic_text_observer(stream))
    predicate = gate or LevelGate(LogLevel.levelWithName(level))
    return FilteringLogObserver(base, [cast(ILogFilterPredicate, predicate)])


def _log_stream(server_options: usage.Options) -> IO[str] | None:
    """Standard output or twistd's log file, as ``--logfile`` and ``-n`` choose."""
    path = server_options.get("logfile") or ""
    foreground = bool(server_options.get("nodaemon"))
    if path == "-" or (foreground and not path):
        return sys.stdout if foreground else None
    log_file = LogFile.fromFullPath(path or "twistd.log")
    if not signal.getsignal(signal.SIGUSR1):  # SIGUSR1 rotates the log, as under twistd

        def rotate(signum: int, frame: FrameType | None) -> None:
            global_reactor().callFromThread(log_file.rotate)

        signal.signal(signal.SIGUSR1, rotate)
    return cast("IO[str]", log_file)  # a text stream that rotates


def _exit_on_fatal(message: str) -> None:
    """Start-up failed under twistd: stop the reactor; the process exits with status 1."""
    reactor: Any = global_reactor()

    def exit_with_status() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_STARTUP_FAILED)

    # twistd has replaced sys.stderr with a log proxy: the line goes to the real one.
    stderr = sys.__stderr__
    if stderr is not None:
        stderr.write(f"{PROGRAM}: error: {message}\n")
        stderr.flush()
    # twistd's run() returns normally once the reactor stops (status 0); the exit
    # hook runs after it has removed its pid file and flushed its log.
    atexit.register(exit_with_status)
    if reactor.running:
        reactor.stop()
    else:
        reactor.callWhenRunning(reactor.stop)


def makeService(options: Options) -> IService:
    """Build the service tree from the checked options (see :mod:`ai_tools.standalone.app`)."""
    from ai_tools.standalone.app import build_service, busy_ports

    config = options.loaded
    if config is None:  # postOptions was not run (a programmatic caller)
        try:
            config = load_config(options.config_path(), options.overrides())
        except ConfigError as exc:
            fail(str(exc))
        assert config is not None
    for problem in busy_ports(config):  # before twistd daemonizes and reports success
        fail(problem)
    root = _Root(config.service.log_level, getattr(options, "parent", None))
    build_service(config, on_fatal=_exit_on_fatal).setServiceParent(root)
    return cast(IService, root)
