"""Real ``twistd ai-assistant`` processes configured by ``AI_TOOLS_…`` variables and flags.

The model server is the scripted one of :mod:`ai_tools.testing`, run in the
test process on 127.0.0.1; twistd reaches it only through the variables (or
flags) under test.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from ai_tools.testing import start_test_server
from tests.integration.twistd_process import (
    SCENARIO_MODEL,
    SOUP_SCRIPT,
    TWISTD,
    assert_one_line_failure,
    assert_stopped_by,
    bob_heard,
    http,
    post_json,
    processes,
    reactor,
    sleep,
    start_and_wait,
    until,
    write_config,
    write_scenario,
)

__all__ = ["http", "processes"]  # fixtures

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")

@pytest_twisted.ensureDeferred
async def test_variables_alone_configure_twistd(tmp_path: Path, processes: Any,
                                                http: Any) -> None:
    """No option but the variables: the config file, the model server (over the config's
    scripted model), its key, the HTTP listener and the database all come from them; a
    mistyped variable and a retired one are named on stderr."""
    server = await start_test_server(SOUP_SCRIPT, reactor=reactor())
    try:
        write_scenario(tmp_path)
        config = write_config(tmp_path, models=SCENARIO_MODEL, http_listen="127.0.0.1:9")
        (tmp_path / "db").mkdir()
        env = {"AI_TOOLS_CONFIG": str(config), "AI_TOOLS_LLM_URL": server.url,
               "AI_TOOLS_LLM_MODEL": server.model_name, "AI_TOOLS_LLM_API_KEY": "sk-test-key",
               "AI_TOOLS_HTTP": "127.0.0.1:0", "AI_TOOLS_DB": str(tmp_path / "db" / "x.sqlite"),
               "AI_TOOLS_LLM_MODLE": "typo", "LLM_URL": "http://127.0.0.1:9/v1"}
        proc, base = await start_and_wait(processes, tmp_path, None, env=env)
        assert (f"Model profile default: {server.model_name} at {server.url}"
                in proc.stdout), proc.stdout
        assert ("twistd ai-assistant: warning: AI_TOOLS_LLM_MODLE is not an ai_tools setting "
                "(did you mean AI_TOOLS_LLM_MODEL?); it is ignored") in proc.stderr
        assert ("twistd ai-assistant: warning: LLM_URL is not read any more: set "
                "AI_TOOLS_LLM_URL instead") in proc.stderr
        await post_json(http, f"{base}/messages",
                        {"character": "char:bob", "text": "What soup tonight, Pip?"})
        for _ in range(400):
            if await bob_heard(http, base, "Chowder, Bob."):
                break
            await sleep(0.05)
        assert await bob_heard(http, base, "Chowder, Bob.")
        request = server.requests[0]
        assert request.headers["authorization"] == "Bearer sk-test-key"
        assert request.body["model"] == server.model_name
        assert "sk-test-key" not in proc.stdout + proc.stderr
        # tiktoken's files are not on these machines and nobody asked for them: no warning
        assert "[ai_tools.llm.tokens#warn]" not in proc.stdout
        assert "[ai_tools.llm.tokens#info] tiktoken could not load" in proc.stdout
        assert (tmp_path / "db" / "x.sqlite").exists()
        assert not (tmp_path / "state").exists()  # the file's path was overridden
        proc.signal("TERM")
        await proc.wait_ended()
        assert_stopped_by(proc, signal.SIGTERM)
    finally:
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_a_flag_wins_over_its_variable(tmp_path: Path, processes: Any) -> None:
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    env = {"AI_TOOLS_HTTP": "127.0.0.1:9", "AI_TOOLS_LOG_LEVEL": "debug"}
    proc, _ = await start_and_wait(processes, tmp_path, config, "--http", "127.0.0.1:0",
                                   env=env)
    assert "HTTP API listening on http://127.0.0.1:9/" not in proc.stdout
    proc.signal("TERM")
    await proc.wait_ended()
    assert_stopped_by(proc, signal.SIGTERM)


@pytest_twisted.ensureDeferred
async def test_a_database_in_a_missing_directory_is_refused(tmp_path: Path,
                                                            processes: Any) -> None:
    """``--db`` with a mistyped directory: one line, nothing created, no empty new world."""
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    proc = processes(tmp_path, config, "--db", str(tmp_path / "sate" / "assistants.sqlite"))
    await proc.wait_ended()
    assert_one_line_failure(proc, f"--db: the directory {tmp_path / 'sate'} does not exist")
    assert not (tmp_path / "sate").exists()


@pytest_twisted.ensureDeferred
async def test_a_bad_variable_stops_twistd_with_one_line(tmp_path: Path,
                                                         processes: Any) -> None:
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    proc = processes(tmp_path, config, env={"AI_TOOLS_TICK_INTERVAL": "soon"})
    await proc.wait_ended()
    assert_one_line_failure(proc, "AI_TOOLS_TICK_INTERVAL must be a number, not 'soon'")


@pytest_twisted.ensureDeferred
async def test_a_mistyped_option_names_the_near_one(tmp_path: Path, processes: Any) -> None:
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    proc = processes(tmp_path, config, "--model", "qwen")
    await proc.wait_ended()
    assert_one_line_failure(proc, "option --model not recognized (did you mean --llm-model?)")


# -- start-up mistakes found before twistd says it started ---------------------------------


@pytest_twisted.ensureDeferred
async def test_an_unknown_character_stops_the_start_with_one_line(tmp_path: Path,
                                                                  processes: Any) -> None:
    """Not a CRITICAL traceback and a service left running: one line, status 1."""
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL).read_text()
    path = tmp_path / "assistant.toml"
    path.write_text(config.replace('character_id = "char:pip"', 'character_id = "char:ppi"'))
    proc = processes(tmp_path, path)
    await proc.wait_ended()
    assert_one_line_failure(proc, "assistants.pip.character_id: no character 'char:ppi' in "
                                  "the world Saltmarsh (did you mean 'char:pip'?")
    assert "#critical] Could not subscribe" not in proc.stdout


@pytest.mark.parametrize("daemon", [False, True], ids=["foreground", "daemon"])
@pytest_twisted.ensureDeferred
async def test_a_port_in_use_exits_non_zero_in_both_modes(tmp_path: Path, processes: Any,
                                                          daemon: bool) -> None:
    """A daemonizing twistd reports its start before the listeners open; the port is
    tried first, so the command still fails with the one line and status 1."""
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = processes(tmp_path, config, "--http", f"127.0.0.1:{port}", daemon=daemon)
        await proc.wait_ended()
    assert_one_line_failure(proc, f"cannot listen on port {port} of 127.0.0.1: Address "
                                  "already in use")
    assert not (tmp_path / "state").exists()


@pytest_twisted.ensureDeferred
async def test_a_daemon_that_starts_reports_success(tmp_path: Path, processes: Any,
                                                    http: Any) -> None:
    """The other side: the daemon's parent exits 0 and the service runs (stopped here by
    its pid file)."""
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    proc = processes(tmp_path, config, daemon=True)
    await proc.wait_ended()
    assert proc.exit_code == 0, proc.stdout + proc.stderr
    pid = int((tmp_path / "twistd.pid").read_text())
    try:
        await until(lambda: "ai_tools service ready" in log_text(tmp_path), "the daemon")
    finally:
        os.kill(pid, signal.SIGTERM)
    await until(lambda: not (tmp_path / "twistd.pid").exists(), "the daemon to stop")
    assert "ai_tools service stopped" in log_text(tmp_path)


def log_text(directory: Path) -> str:
    path = directory / "twistd.log"
    return path.read_text() if path.exists() else ""
