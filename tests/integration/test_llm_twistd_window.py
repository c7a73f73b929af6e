"""Issue 14's "done when", with real processes: a twistd service configured by
``AI_TOOLS_…`` variables only reaches a model server that reports an 8,192-token window
and does not know ai_tools' name for its model (the scripted server emulating
llama.cpp's ``llama-server``), and a player's message makes an assistant that has the
default tools call the model and answer through its ``say`` tool (the loop offers as
many of them as fit the window).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from ai_tools.testing import ServerKind, start_test_server
from tests.integration.twistd_process import (
    SCENARIO_MODEL,
    SOUP_SCRIPT,
    TWISTD,
    assert_stopped_by,
    bob_heard,
    http,
    post_json,
    processes,
    reactor,
    sleep,
    start_and_wait,
    write_config,
    write_scenario,
)

__all__ = ["http", "processes"]  # fixtures

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")

@pytest_twisted.ensureDeferred
async def test_a_llama_cpp_server_with_an_8192_window_and_an_unknown_model(
        tmp_path: Path, processes: Any, http: Any) -> None:
    server = await start_test_server(SOUP_SCRIPT, reactor=reactor(),
                                     server_kind=ServerKind("llama.cpp", 8192))
    try:
        write_scenario(tmp_path)
        # Pip with no tool list of its own: the default tools
        config = write_config(tmp_path, models=SCENARIO_MODEL)
        env = {"AI_TOOLS_CONFIG": str(config), "AI_TOOLS_LLM_URL": server.url,
               "AI_TOOLS_LLM_MODEL": "local", "AI_TOOLS_HTTP": "127.0.0.1:0",
               "AI_TOOLS_DB": str(tmp_path / "state.sqlite")}
        proc, base = await start_and_wait(processes, tmp_path, None, env=env)
        await post_json(http, f"{base}/messages",
                        {"character": "char:bob", "text": "What soup tonight, Pip?"})
        for _ in range(400):
            if server.requests and await bob_heard(http, base, "Chowder, Bob."):
                break
            await sleep(0.05)
        assert ("context window 8192 tokens (llama.cpp GET /props n_ctx per slot)"
                in proc.stdout), proc.stdout[-4000:]
        assert server.requests, ("the model was never called:\n" + proc.stdout[-4000:])
        request = server.requests[0].body
        assert request["model"] == "local"
        offered = {tool["function"]["name"] for tool in request["tools"]}
        assert "say" in offered and request["tool_choice"] == "auto"  # (trimmed to fit)
        assert request["max_tokens"] == 2048
        assert await bob_heard(http, base, "Chowder, Bob."), proc.stdout[-4000:]
        proc.signal("TERM")
        await proc.wait_ended()
        assert_stopped_by(proc, signal.SIGTERM)
    finally:
        await server.stop()
