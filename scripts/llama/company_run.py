"""Players talking to the example's assistants, all on one real single-slot model server.

The run of issue 27, repeatable: llama-cpp-python's server (``make llama-server``:
SmolLM2-135M, one thread, its defaults, ``interrupt_requests`` on) and the
standalone service with ``examples/assistant.toml`` (two assistants, Pip and
Mason) pointed at it.  Every ``COMPANY_RUN_EVERY`` seconds (40) Bob speaks
to Pip and Alice pages Mason, for ``COMPANY_RUN_SECONDS`` (600); then the
service gets ``COMPANY_RUN_GRACE`` seconds (180) to finish.  Printed at the
end: messages sent, events still pending, the model requests by outcome, the
time they waited in the client's queue and spent at the server, and the chat
requests the server's own access log counts (each sent once?).

Usage: ``python3 scripts/llama/company_run.py`` (after ``make venv llama-server``).
Everything listens on 127.0.0.1; the state goes to a temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import prepare  # noqa: E402

EVERY = float(os.environ.get("COMPANY_RUN_EVERY", "40"))
SECONDS = float(os.environ.get("COMPANY_RUN_SECONDS", "600"))
GRACE = float(os.environ.get("COMPANY_RUN_GRACE", "180"))


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


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="company-run-"))
    model_port, http_port = free_port(), free_port()
    model_log = (work / "model.log").open("wb")
    model = subprocess.Popen(
        [str(prepare.VENV / "bin" / "python"), "-m", "llama_cpp.server", "--model",
         str(prepare.MODEL), "--model_alias", "local", "--host", "127.0.0.1", "--port",
         str(model_port), "--n_ctx", "8192", "--chat_format", "chatml-function-calling",
         "--n_threads", "1", "--n_threads_batch", "1"], stdout=model_log, stderr=model_log)
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
        started, sent = time.monotonic(), 0
        while time.monotonic() - started < SECONDS:
            n = sent // 2 + 1
            post(api + "/messages", {"character": "char:bob",
                                     "text": f"Pip, what soup is there tonight? ({n})"})
            post(api + "/messages", {"character": "char:alice", "kind": "page",
                                     "target": "char:mason",
                                     "text": f"Mason, can you build me a shed? ({n})"})
            sent += 2
            time.sleep(max(0.0, started + n * EVERY - time.monotonic()))
        deadline = time.monotonic() + GRACE
        while time.monotonic() < deadline:
            pending = metrics(get(api + "/metrics").decode(), "ai_tools_pending_events")
            if not any(pending.values()):
                break
            time.sleep(5)
        report(api, sent, time.monotonic() - started, work)
    finally:
        for process in (service, model):
            if process is not None:
                process.terminate()
                process.wait(30)
    return 0


def report(api: str, sent: int, elapsed: float, work: Path) -> None:
    text = get(api + "/metrics").decode()
    print(f"player messages sent: {sent} over {elapsed:.0f}s (every {EVERY:g}s per player)")
    for name in ("ai_tools_pending_events", "ai_tools_model_requests_total",
                 "ai_tools_model_refusals_total", "ai_tools_model_http_requests_total",
                 "ai_tools_model_request_seconds_sum", "ai_tools_model_request_seconds_count",
                 "ai_tools_model_queue_seconds_sum", "ai_tools_model_queue_seconds_count",
                 "ai_tools_ticks_total"):
        for key, value in sorted(metrics(text, name).items()):
            print(f"  {key} {value:g}")
    log = (work / "model.log").read_text(errors="replace")
    posts = len(re.findall(r'"POST /v1/chat/completions HTTP/1\.1" 200', log))
    print(f"chat requests in the server's access log: {posts}")
    print(f"logs kept in {work}")


if __name__ == "__main__":
    sys.exit(main())
