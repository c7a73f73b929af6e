"""Players talking to the example's assistants, all on one real single-slot model server.

The run of issue 27, repeatable: llama-cpp-python's server (``make llama-server``:
SmolLM2-135M, one thread, its defaults, ``interrupt_requests`` on) and the
standalone service with ``examples/assistant.toml`` (two assistants, Pip and
Mason) pointed at it.  Every ``COMPANY_RUN_EVERY`` seconds (40) Bob speaks
to Pip and Alice pages Mason, for ``COMPANY_RUN_SECONDS`` (600); then the
service gets up to ``COMPANY_RUN_GRACE`` seconds (180) to answer what is left.

A message counts as *answered* when a model answer that saw it is in the
assistant's history (its ``[EVENTS]`` message followed by the assistant's
answer), watched every ``COMPANY_RUN_POLL`` seconds (3) through the HTTP API;
its *time to answer* runs from the player's POST to the first sight of that.
Printed at the end: messages answered (and the time to answer: min, median,
max), each one not answered and where it is (pending, in the history
unanswered), the lines the players heard from the assistants (replies and
in-world outcomes), the model requests by outcome and their time queued and
at the server, and the chat requests in the server's own access log next to
the HTTP requests the client counted (each sent once?) with the seconds the
server computed each one (its ``llama_perf_context_print`` lines).

Usage: ``python3 scripts/llama/company_run.py`` (after ``make venv llama-server``);
``COMPANY_RUN_SERVER_CACHE=1`` starts the server with its RAM prompt cache
(``--cache true``), which keeps each assistant's evaluated prompt when they take turns.
Everything listens on 127.0.0.1; the state goes to a temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import prepare  # noqa: E402

EVERY = float(os.environ.get("COMPANY_RUN_EVERY", "40"))
SECONDS = float(os.environ.get("COMPANY_RUN_SECONDS", "600"))
GRACE = float(os.environ.get("COMPANY_RUN_GRACE", "180"))
POLL = float(os.environ.get("COMPANY_RUN_POLL", "3"))
SERVER_CACHE = os.environ.get("COMPANY_RUN_SERVER_CACHE", "") not in ("", "0")
"""Start the server with ``--cache true`` (its RAM cache of evaluated prompts)."""
EVENTS_PREFIX = "[EVENTS]"
PLAYERS: tuple[tuple[str, str, str, dict[str, str]], ...] = (
    # (assistant, speaker, what the message looks like, how it is sent)
    ("pip", "char:bob", "Pip, what soup is there tonight? ({n})", {}),
    ("mason", "char:alice", "Mason, can you build me a shed? ({n})",
     {"kind": "page", "target": "char:mason"}),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return bytes(answer.read())


def post(url: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return dict(json.loads(answer.read()))


def wait_for(url: str, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            get(url)
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"nothing answered at {url} within {limit:g}s")


def metrics(text: str, name: str) -> dict[str, float]:
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line.startswith(name)}


class Watch:
    """When each player message was sent, and when a model answer that saw it was first
    seen in its assistant's history (polled through the HTTP API in a thread)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.sent: dict[tuple[str, str], float] = {}
        self.answered: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def send(self, assistant: str, speaker: str, text: str, extra: dict[str, str]) -> None:
        with self.lock:
            self.sent[(assistant, text)] = time.monotonic()
        post(self.api + "/messages", {"character": speaker, "text": text, **extra})

    def open(self) -> list[tuple[str, str]]:
        with self.lock:
            return [key for key in self.sent if key not in self.answered]

    def poll(self) -> None:
        while not self.stopping.wait(POLL):
            for assistant in {key[0] for key in self.open()}:
                try:
                    page = json.loads(get(f"{self.api}/assistants/{assistant}/history"
                                          "?limit=200"))
                except (OSError, ValueError):
                    continue
                self.see(assistant, page["messages"], time.monotonic())

    def see(self, assistant: str, messages: list[dict[str, object]], now: float) -> None:
        """Mark the messages whose ``[EVENTS]`` entry an assistant answer follows."""
        answered_after = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
        for index, message in enumerate(messages):
            content = str(message.get("content") or "")
            if message.get("role") != "user" or not content.startswith(EVENTS_PREFIX):
                continue
            if not any(i > index for i in answered_after):
                continue
            with self.lock:
                for key in self.sent:
                    if key[0] == assistant and key[1] in content:
                        self.answered.setdefault(key, now)

    def where(self, key: tuple[str, str], api: str) -> str:
        """Where a message not answered is: pending, or in the history unanswered."""
        status = json.loads(get(f"{api}/assistants/{key[0]}/history?limit=200"))
        if any(key[1] in str(m.get("content")) for m in status["messages"]):
            return "in the history, no answer after it yet (a loop is answering it)"
        return "pending (no loop has delivered it yet)"


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="company-run-"))
    model_port, http_port = free_port(), free_port()
    model_log = (work / "model.log").open("wb")
    model = subprocess.Popen(
        [str(prepare.VENV / "bin" / "python"), "-m", "llama_cpp.server", "--model",
         str(prepare.MODEL), "--model_alias", "local", "--host", "127.0.0.1", "--port",
         str(model_port), "--n_ctx", "8192", "--chat_format", "chatml-function-calling",
         "--n_threads", "1", "--n_threads_batch", "1",
         *(["--cache", "true"] if SERVER_CACHE else [])], stdout=model_log, stderr=model_log)
    service = None
    try:
        wait_for(f"http://127.0.0.1:{model_port}/v1/models")
        env = {**os.environ, "AI_TOOLS_CONFIG": str(ROOT / "examples" / "assistant.toml"),
               "AI_TOOLS_LLM_URL": f"http://127.0.0.1:{model_port}/v1",
               "AI_TOOLS_LLM_MODEL": "local", "AI_TOOLS_DB": str(work / "state.sqlite"),
               "AI_TOOLS_HTTP": f"127.0.0.1:{http_port}"}
        service_log = (work / "service.log").open("wb")
        service = subprocess.Popen([str(ROOT / ".venv" / "bin" / "twistd"), "-n", "--pidfile=",
                                    "ai-assistant"], env=env, cwd=work, stdout=service_log,
                                   stderr=service_log)
        api = f"http://127.0.0.1:{http_port}"
        wait_for(api + "/metrics")
        watch = Watch(api)
        poller = threading.Thread(target=watch.poll, daemon=True)
        poller.start()
        started = speak(watch)
        deadline = time.monotonic() + GRACE
        while watch.open() and time.monotonic() < deadline:
            time.sleep(POLL)
        watch.stopping.set()
        poller.join(30)
        report(api, watch, time.monotonic() - started, work)
    finally:
        for process in (service, model):
            if process is not None:
                stop(process)
    return 0


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s (llama-cpp-python finishes a prompt it is computing
    before it exits, which can take longer than that on a slow machine)."""
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)


def speak(watch: Watch) -> float:
    """The players' messages, every ``EVERY`` seconds for ``SECONDS``; returns the start."""
    started, rounds = time.monotonic(), 0
    while time.monotonic() - started < SECONDS:
        rounds += 1
        for assistant, speaker, text, extra in PLAYERS:
            watch.send(assistant, speaker, text.format(n=rounds), extra)
        time.sleep(max(0.0, started + rounds * EVERY - time.monotonic()))
    return started


def report(api: str, watch: Watch, elapsed: float, work: Path) -> None:
    """The figures docs/models.md quotes."""
    sent, answered = watch.sent, watch.answered
    waits = sorted(answered[key] - sent[key] for key in answered)
    print(f"player messages sent: {len(sent)} over {elapsed:.0f}s (every {EVERY:g}s per "
          f"player, for {SECONDS:g}s, then up to {GRACE:g}s to finish); server prompt cache "
          f"{'on (--cache true)' if SERVER_CACHE else 'off (its default)'}")
    print(f"answered by a model answer that saw them: {len(answered)} of {len(sent)}")
    if waits:
        print(f"  time to answer: min {waits[0]:.0f}s, median {statistics.median(waits):.0f}s,"
              f" max {waits[-1]:.0f}s")
    for key in sorted(set(sent) - set(answered), key=lambda k: sent[k]):
        print(f"  not answered: {key[0]} <- {key[1]!r}: {watch.where(key, api)}")
    for _, speaker, _, _ in PLAYERS:
        heard = json.loads(get(f"{api}/characters/{speaker}/heard?limit=500"))["messages"]
        print(f"  lines {speaker} heard from others: {len(heard)}")
    text = get(api + "/metrics").decode()
    for name in ("ai_tools_pending_events", "ai_tools_model_requests_total",
                 "ai_tools_model_refusals_total", "ai_tools_model_http_requests_total",
                 "ai_tools_model_request_seconds_sum", "ai_tools_model_request_seconds_count",
                 "ai_tools_model_queue_seconds_sum", "ai_tools_model_queue_seconds_count",
                 "ai_tools_ticks_total"):
        for series, value in sorted(metrics(text, name).items()):
            print(f"  {series} {value:g}")
    sent_requests = sum(metrics(text, "ai_tools_model_http_requests_total").values())
    computed = server_seconds((work / "model.log").read_text(errors="replace"))
    print(f"HTTP requests the client sent: {sent_requests:g}; chat requests in the server's "
          f"access log: {len(computed)}")
    if computed:
        ordered = sorted(computed)
        print(f"  seconds the server computed each: min {ordered[0]:.1f}, median "
              f"{statistics.median(ordered):.1f}, max {ordered[-1]:.1f}, total "
              f"{sum(ordered):.0f} of {elapsed:.0f}s")
    print(f"logs kept in {work}")


def server_seconds(log: str) -> list[float]:
    """Per chat request in llama-cpp-python's log, the seconds of its ``total time`` lines
    (one per generation it ran; the access log line follows them)."""
    seconds, current = [], 0.0
    for line in log.splitlines():
        found = re.search(r"total time =\s+([\d.]+) ms", line)
        if found:
            current += float(found.group(1)) / 1000.0
        elif '"POST /v1/chat/completions HTTP/1.1" 200' in line:
            seconds.append(current)
            current = 0.0
    return seconds


if __name__ == "__main__":
    sys.exit(main())
