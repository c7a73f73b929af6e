"""The soak test's service: a world of rooms, one assistant and one player in each.

Room ``i`` holds assistant ``a{i}`` and player ``p{i}``: what the player says
there only its assistant hears, and what the assistant says only its player,
so no assistant hears another and nothing echoes.  :class:`Players` posts
numbered messages through ``POST /messages`` and keeps those that got their
``200`` (the acknowledgement that they are durable).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, cast

import treq
from twisted.internet import defer
from twisted.web.client import Agent, HTTPConnectionPool

from tests.integration.soak_model import token
from tests.integration.web_processes import reactor

JSON: dict[bytes | str, bytes | str] = {"Content-Type": "application/json"}


def write_world(directory: Path, count: int) -> Path:
    """``count`` rooms, each with assistant ``char:a{i}`` and player ``char:p{i}``."""
    parts = ['[world]\nname = "Soak"\ndescription = "Rooms side by side."\n'
             'start_room = "room:0"\n']
    for i in range(count):
        parts.append(f'[[rooms]]\nid = "room:{i}"\nkey = "Room {i}"\n'
                     f'description = "Room number {i}."\n')
        parts.append(f'[[characters]]\nid = "char:a{i}"\nkey = "Ann{i}"\n'
                     f'location = "room:{i}"\npermissions = ["Player"]\n')
        parts.append(f'[[characters]]\nid = "char:p{i}"\nkey = "Pat{i}"\n'
                     f'location = "room:{i}"\npermissions = ["Player"]\n')
    path = directory / "world.toml"
    path.write_text("\n".join(parts))
    return path


DEADLINES = "connect = 1.0, headers = 1.0, idle = 0.75, total = 3.0"
"""The model client's deadlines of the soak: short, so hanging answers end soon."""


def write_config(directory: Path, count: int, model_url: str, model_name: str,
                 timeouts: str = DEADLINES) -> Path:
    """The service: ``count`` assistants on SQLite, the model at ``model_url`` with
    ``timeouts`` and a quick breaker, the HTTP API on a free port of 127.0.0.1."""
    world = write_world(directory, count)
    assistants = "".join(f"""
[[assistants]]
name = "a{i}"
character_id = "char:a{i}"
persona = "You are Ann{i}."
tick_rate = 2.0
execution_config = {{ max_iterations = 3, allowed_tools = ["say", "noop"] }}
""" for i in range(count))
    text = f"""
[service]
tick_interval = 0.2
stop_grace = 5.0

[store]
path = "state/assistants.sqlite"
synchronous = "NORMAL"

[world]
file = {json.dumps(str(world))}

[models.default]
base_url = {json.dumps(model_url)}
model = {json.dumps(model_name)}
max_concurrency = 16
breaker_cooldown = 1.0
timeouts = {{ {timeouts} }}

[http]
listen = "127.0.0.1:0"
{assistants}
"""
    path = directory / "assistant.toml"
    path.write_text(text)
    return path


class Players:
    """Players posting numbered messages, each to the assistant in the player's room."""

    def __init__(self, count: int, clients: int = 16) -> None:
        self.count = count
        self.clients = clients
        self.numbers = itertools.count(1)
        self.posted = 0
        self.acknowledged: dict[str, int] = {}
        """token → the room (and so the assistant) of each message that got its 200."""
        self.refused: list[tuple[str, int | str]] = []
        self.flooding = False
        self.pool = HTTPConnectionPool(reactor(), persistent=True)
        self.pool.maxPersistentPerHost = clients
        self.http = treq.client.HTTPClient(cast(Any, Agent(reactor(), pool=self.pool)))

    async def post(self, base: str) -> None:
        number = next(self.numbers)
        self.posted += 1
        room = number % self.count
        text = f"Ann{room}, {token(number)} here, what news?"
        body = json.dumps({"character": f"char:p{room}", "text": text}).encode()
        try:
            response = await self.http.post(f"{base}/messages", data=body, headers=JSON)
        except Exception as exc:  # the service is down: not acknowledged
            self.refused.append((token(number), type(exc).__name__))
            return
        if response.code == 200:  # the status line is the acknowledgement
            self.acknowledged[token(number)] = room
        else:
            self.refused.append((token(number), response.code))
        try:
            await response.content()
        except Exception:
            pass  # the service died after its answer's status line

    def post_many(self, base: str, count: int) -> defer.Deferred[Any]:
        """``count`` messages over ``clients`` connections; fires when all are answered."""
        numbers = iter(range(count))

        async def client() -> None:
            for _ in numbers:
                await self.post(base)

        return defer.DeferredList([defer.ensureDeferred(client()) for _ in range(self.clients)])

    def flood(self, base: str) -> defer.Deferred[Any]:
        """Messages over ``clients`` connections until :meth:`stop_flood`; fires once the
        posts in flight then are answered (or failed)."""
        self.flooding = True

        async def client() -> None:
            while self.flooding:
                await self.post(base)

        return defer.DeferredList([defer.ensureDeferred(client()) for _ in range(self.clients)])

    def stop_flood(self) -> None:
        self.flooding = False

    async def close(self) -> None:
        await self.pool.closeCachedConnections()
