"""A message the HTTP API acknowledged survives SIGKILL: ``200`` only once it is durable.

A real ``twistd ai-assistant`` on SQLite hosts Pip, who hears everything said
in the inn but never ticks (disabled), so whatever Pip heard stays in its
pending events.  Sixteen clients flood ``POST /messages``; once this round's
count of ``200`` answers reaches a figure, the process gets SIGKILL in the
middle of the flood (the trigger is a count, not a timer).  Four rounds on
the same file, then a clean restart: every message that got a ``200`` must be
in Pip's saved state.  Before the fix, the answer went out before the state
write, and each kill lost the messages acknowledged since the last write.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_twisted
import treq
from twisted.internet import defer
from twisted.web.client import Agent, HTTPConnectionPool

from tests.integration.web_processes import (
    TWISTD,
    assert_stopped_by,
    disabled_pip,
    reactor,
    read_state,
    start_and_wait,
    twistd_processes,  # noqa: F401 (a fixture)
    until,
)

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")

ROUNDS = 4
ACKS_BEFORE_KILL = 300
CLIENTS = 16
PADDING = "and so on " * 100
"""Makes each state write take a while, as a long-lived assistant's state does."""
JSON: dict[bytes | str, bytes | str] = {"Content-Type": "application/json"}


class Flood:
    """``CLIENTS`` clients posting numbered messages until stopped; counts the 200s."""

    def __init__(self, base: str, round_: int) -> None:
        self.base = base
        self.round = round_
        self.acknowledged: list[str] = []
        self.refused: list[int] = []
        self.running = True
        self._next = 0
        self.pool = HTTPConnectionPool(reactor(), persistent=True)
        self.pool.maxPersistentPerHost = CLIENTS
        self.http = treq.client.HTTPClient(cast(Any, Agent(reactor(), pool=self.pool)))

    async def client(self) -> None:
        while self.running:
            self._next += 1
            text = f"round {self.round} message {self._next} " + PADDING
            body = json.dumps({"character": "char:bob", "text": text}).encode()
            try:
                response = await self.http.post(f"{self.base}/messages", data=body,
                                                headers=JSON)
            except Exception:
                return  # the process was killed under this request: not acknowledged
            if response.code == 200:
                self.acknowledged.append(text)  # the status line is the acknowledgement
            else:
                self.refused.append(response.code)
            try:
                await response.content()
            except Exception:
                return

    def start(self) -> defer.Deferred[Any]:
        clients = [defer.ensureDeferred(self.client()) for _ in range(CLIENTS)]
        self.done = defer.DeferredList(clients)
        return self.done

    def enough(self) -> bool:
        """This round's acknowledgements reached the kill figure (or every client ended)."""
        return len(self.acknowledged) >= ACKS_BEFORE_KILL or self.done.called

    async def close(self) -> None:
        self.running = False
        await self.pool.closeCachedConnections()


def saved_texts(db: Path) -> set[str]:
    """Every message text in Pip's saved pending events and history."""
    state = read_state(db)
    texts = {str(e.get("text")) for e in state.get("pending_events", ())}
    for message in state.get("history", ()):
        texts.add(str(message.get("content")))
    return texts


@pytest_twisted.ensureDeferred
async def test_no_acknowledged_message_is_lost_to_sigkill(
        tmp_path: Path, twistd_processes: Any) -> None:  # noqa: F811
    config = disabled_pip(tmp_path)
    db = tmp_path / "state" / "assistants.sqlite"
    acknowledged: list[str] = []
    for round_ in range(ROUNDS):
        proc, base = await start_and_wait(twistd_processes, tmp_path, config)
        flood = Flood(base, round_)
        done = flood.start()
        try:
            await until(flood.enough, f"{ACKS_BEFORE_KILL} acknowledged messages")
            assert not flood.refused, flood.refused
            proc.signal("KILL")
            await proc.wait_ended()
            await done
        finally:
            await flood.close()
        assert proc.exit_signal == 9
        acknowledged += flood.acknowledged

    # a clean restart on the same file, then a clean stop
    proc, base = await start_and_wait(twistd_processes, tmp_path, config)
    proc.signal("TERM")
    await proc.wait_ended()
    assert_stopped_by(proc, signal.SIGTERM)

    missing = [text for text in acknowledged if text not in saved_texts(db)]
    assert len(acknowledged) >= ROUNDS * ACKS_BEFORE_KILL
    assert missing == [], f"{len(missing)} of {len(acknowledged)} acknowledged messages lost"
