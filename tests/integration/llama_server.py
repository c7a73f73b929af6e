"""Real llama-cpp-python servers for the interoperability test, as child processes.

``make llama-server`` (``scripts/llama/prepare.py``, part of ``make test``)
prepares the server's virtualenv and the SmolLM2-135M model; this module starts
servers from them on 127.0.0.1 with a port the kernel picks (read back from
uvicorn's start-up line), keeps their output (bounded) so a test can read the
access log, and stops them.  When the prepared files are missing the tests are
skipped with the command that prepares them, unless ``AI_TOOLS_LLAMA_REQUIRED``
or ``CI`` is set (``make test`` sets the first): then they fail.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, protocol, task

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "scripts" / "llama" / "serve.py"
START_LIMIT = 120.0
"""Seconds a server may take to start (it imports FastAPI and loads the model)."""
STOP_LIMIT = 15.0
OUTPUT_LIMIT = 1 << 20
"""Bytes of a server's output kept (the newest); its access log lines are short."""
PING_INTERVAL = 0.05
"""Seconds between the keep-alives of a streamed answer (sse-starlette's default is 15)."""
MODEL_ALIAS = "local"
"""The model name the servers report: unknown to ai_tools, like the README's recipe."""

_ACCESS = re.compile(r'"(GET|POST) (\S+) HTTP/1\.1" (\d{3})')
_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def _prepared_paths() -> tuple[Path, Path]:
    """The server's Python and the model file, as ``scripts/llama/prepare.py`` puts them."""
    spec = importlib.util.spec_from_file_location(
        "llama_prepare", ROOT / "scripts" / "llama" / "prepare.py")
    assert spec is not None and spec.loader is not None
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    return prepare.VENV / "bin" / "python", prepare.MODEL


def require_prepared() -> tuple[Path, Path]:
    """The prepared server and model; skip (or fail, when required) if they are missing."""
    python, model = _prepared_paths()
    missing = [str(p) for p in (python, model) if not p.exists()]
    if missing:
        why = (f"the llama.cpp test server is not prepared ({', '.join(missing)} missing): "
               "run `make llama-server` (a few minutes, once)")
        if os.environ.get("AI_TOOLS_LLAMA_REQUIRED") or os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return python, model


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


class LlamaServer(protocol.ProcessProtocol):
    """One ``llama_cpp.server`` process: its URL once listening, its access log, its end."""

    def __init__(self, name: str, n_ctx: int) -> None:
        self.name = name
        self.n_ctx = n_ctx
        self.output = bytearray()
        self.port: int | None = None
        self.ended: defer.Deferred[None] = defer.Deferred()
        self.transport: Any = None

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (``…/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        """The server's root URL (where llama.cpp's own server has ``/props``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", "replace")

    def requests(self) -> list[tuple[str, str, int]]:
        """The access log so far: ``(method, path, status)`` per request answered."""
        return [(m, p, int(s)) for m, p, s in _ACCESS.findall(self.text)]

    def outReceived(self, data: bytes) -> None:
        self._keep(data)

    def errReceived(self, data: bytes) -> None:
        self._keep(data)

    def _keep(self, data: bytes) -> None:
        self.output += data
        if len(self.output) > OUTPUT_LIMIT:
            del self.output[: len(self.output) - OUTPUT_LIMIT]
        if self.port is None:
            match = _LISTENING.search(self.text)
            if match is not None:
                self.port = int(match.group(1))

    def processEnded(self, reason: Any) -> None:
        self.ended.callback(None)

    async def wait_listening(self) -> None:
        """Wait (at most START_LIMIT seconds) until the server listens."""
        for _ in range(int(START_LIMIT / 0.05)):
            if self.port is not None:
                return
            if self.ended.called:
                break
            await task.deferLater(reactor(), 0.05, lambda: None)
        raise AssertionError(f"llama.cpp server {self.name!r} did not start:\n{self.text[-4000:]}")

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not ended within STOP_LIMIT seconds."""
        if self.ended.called:
            return
        self.transport.signalProcess("TERM")
        timeout = reactor().callLater(STOP_LIMIT, self._kill)
        await self.ended
        if timeout.active():
            timeout.cancel()

    def _kill(self) -> None:
        if not self.ended.called:
            self.transport.signalProcess(signal.SIGKILL)


def start_server(prepared: tuple[Path, Path], name: str, n_ctx: int,
                 options: Sequence[str] = ()) -> LlamaServer:
    """Spawn a server (``prepared``: its Python and the model) on a free port of 127.0.0.1.

    One thread each and OpenMP's passive wait, so that idle servers leave the
    machine's cores to the rest of the test run.
    """
    python, model = prepared
    server = LlamaServer(name, n_ctx)
    args = [str(python), str(SERVE), "--ping", str(PING_INTERVAL),
            "--model", str(model), "--model_alias", MODEL_ALIAS,
            "--host", "127.0.0.1", "--port", "0", "--n_ctx", str(n_ctx),
            "--n_threads", "1", "--n_threads_batch", "1", "--verbose", "False", *options]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1",
           "OMP_WAIT_POLICY": "PASSIVE", "HOME": os.environ.get("HOME", "/tmp")}
    reactor().spawnProcess(server, args[0], args, env=env, path=str(ROOT))
    return server


async def start_servers(prepared: tuple[Path, Path],
                        specs: dict[str, tuple[int, Sequence[str]]]
                        ) -> tuple[dict[str, LlamaServer], Callable[[], Any]]:
    """Start the servers ``{name: (n_ctx, options)}`` at once; returns them and a stopper."""
    servers = {name: start_server(prepared, name, n_ctx, options)
               for name, (n_ctx, options) in specs.items()}

    async def stop_all() -> None:
        for server in servers.values():
            await server.stop()

    try:
        for server in servers.values():
            await server.wait_listening()
    except BaseException:
        await stop_all()
        raise
    return servers, stop_all


# -- llama.cpp's own llama-server ----------------------------------------------------------------


def require_llama_cpp_server() -> tuple[Path, Path]:
    """llama.cpp's ``llama-server`` binary (``make llama-cpp-server``) and the model; skip
    (or fail, when required) if either is missing."""
    spec = importlib.util.spec_from_file_location(
        "llama_build_server", ROOT / "scripts" / "llama" / "build_server.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    _, model = _prepared_paths()
    missing = [str(p) for p in (build.BINARY, model) if not p.exists()]
    if missing:
        why = (f"llama.cpp's llama-server is not built ({', '.join(missing)} missing): run "
               "`make llama-server llama-cpp-server` (once; about 10 minutes of CPU)")
        if os.environ.get("AI_TOOLS_LLAMA_REQUIRED") or os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return build.BINARY, model


_NATIVE_LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


class LlamaCppServer(LlamaServer):
    """One llama.cpp ``llama-server`` process (its log says where it listens)."""

    def _keep(self, data: bytes) -> None:
        self.output += data
        if len(self.output) > OUTPUT_LIMIT:
            del self.output[: len(self.output) - OUTPUT_LIMIT]
        if self.port is None:
            match = _NATIVE_LISTENING.search(self.text)
            if match is not None:
                self.port = int(match.group(1))

    def chat_requests(self) -> int:
        """Chat completions the server computed (its log line per slot released)."""
        return len(re.findall(r"release: id +\d+ \| task", self.text))


async def start_llama_cpp_server(prepared: tuple[Path, Path], name: str, n_ctx: int,
                                 options: Sequence[str] = ()) -> LlamaCppServer:
    """Start ``llama-server`` on a port of 127.0.0.1 it picks itself, one thread."""
    binary, model = prepared
    server = LlamaCppServer(name, n_ctx)
    args = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", "0",
            "-c", str(n_ctx), "-t", "1", "-tb", "1", "--alias", MODEL_ALIAS, *options]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    reactor().spawnProcess(server, args[0], args, env=env, path=str(ROOT))
    try:
        await server.wait_listening()
    except BaseException:
        await server.stop()
        raise
    return server
