"""A batch in flight survives a state write and a SIGKILL: it is answered after the restart.

A real ``twistd ai-assistant`` on SQLite with one assistant.  A player's
message is acknowledged; the assistant's loop delivers it to the model, which
holds the answer back.  While the call is in flight, ``POST
/assistants/a0/disable`` saves the assistant's state (any write would do: the
hearing of another message, an emergency stop); then the process gets
SIGKILL.  Started again on the same file, enabled, with the model answering:
the message must be answered.  A batch counts as taken only when a model
answer saw it, so a state written before that must hold it as pending — not
as an ``[EVENTS]`` message in the history with nothing pending, which no
later tick answers.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from ai_tools.testing import start_test_server
from tests.integration import soak_model
from tests.integration.soak_service import Players, write_config
from tests.integration.twistd_process import (  # noqa: F401 (fixtures)
    get_json,
    http,
    processes,
)
from tests.integration.web_processes import TWISTD, reactor, sleep, start_and_wait

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")

HELD = "connect = 5.0, headers = 120.0, idle = 120.0, total = 300.0"
"""Deadlines far past the test: the held call stays in flight until the kill."""


async def control(client: Any, base: str, action: str) -> None:
    response = await client.post(f"{base}/assistants/a0/{action}")
    assert response.code == 200, await response.text()
    await response.content()


@pytest_twisted.ensureDeferred
async def test_batch_in_flight_at_a_state_write_and_a_kill_is_answered(
        tmp_path: Path, processes: Any, http: Any) -> None:  # noqa: F811
    server = await start_test_server([], reactor(), log_requests=False)
    model = soak_model.install(server)
    model.mode = "held"
    config = write_config(tmp_path, 1, server.url, server.model_name, timeouts=HELD)
    players = Players(1, clients=1)
    try:
        proc, base = await start_and_wait(processes, tmp_path, config)
        await players.post_many(base, 1)
        assert list(players.acknowledged) == [soak_model.token(1)]
        await server.wait_for_requests(1)  # delivered; the answer is held back
        await control(http, base, "disable")  # answers once the state is saved
        proc.signal("KILL")
        await proc.wait_ended()
        assert proc.exit_signal == signal.SIGKILL

        model.mode = "healthy"
        proc, base = await start_and_wait(processes, tmp_path, config)
        await control(http, base, "enable")
        for _ in range(600):  # a bound; the wait ends when nothing is left to answer
            status = await get_json(http, f"{base}/assistants/a0")
            if not status["pending_events"] and not status["ticking"]:
                break
            await sleep(0.1)
        answered = soak_model.answered_tokens(server.requests)
        assert soak_model.token(1) in answered, (status, len(server.requests))
    finally:
        await players.close()
        await server.stop()
