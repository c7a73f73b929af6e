"""The channels of a sandbox world: who is subscribed, who may post, who receives.

One part of :class:`~ai_tools.world.sandbox.SandboxWorld` (which composes it as
``world.channels``): it holds the :class:`~ai_tools.world.model.Channel` values by
their folded key and applies the channel rules.  It writes nothing and says
nothing: a change returns the channel whose row the world then writes, a post
returns who receives it and the world numbers and delivers the message.

``on_read(key)``, when set, hears which channel a lookup relied on: the shared
world (:mod:`ai_tools.world.shared`) records it as one of the rows an operation
read, as :class:`~ai_tools.world.objects.WorldObjects` does for objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import attrs

from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.json_types import JSONObject
from ai_tools.world.model import Channel, WorldObject
from ai_tools.world.permissions import holds


@attrs.define(eq=False)
class Channels:
    """The world's channels by folded key, and their rules."""

    on_read: Callable[[str], None] | None = attrs.field(default=None, kw_only=True)
    by_key: dict[str, Channel] = attrs.field(factory=dict)
    """Every channel by its folded key (the same dict for the world's lifetime)."""

    def replace(self, channels: Iterable[Channel]) -> None:
        """The channels become ``channels`` (the world was loaded or applied)."""
        self.by_key.clear()
        self.by_key.update((c.key.casefold(), c) for c in channels)

    def put(self, channel: Channel) -> None:
        """Add ``channel`` or replace the one with its key."""
        self.by_key[channel.key.casefold()] = channel

    def remove(self, key: str) -> None:
        """Forget the channel called ``key`` (harmless when there is none)."""
        self.by_key.pop(key.casefold(), None)

    def __iter__(self) -> Iterator[Channel]:
        return iter(list(self.by_key.values()))

    def named(self, key: object) -> Channel:
        """The channel ``key`` names (any case); NotFound if there is none."""
        channel = self.by_key.get(str(key or "").strip().casefold())
        if channel is None:
            raise NotFound(f"no channel called {key!r}")
        if self.on_read is not None:
            self.on_read(channel.key)
        return channel

    def listing(self) -> list[JSONObject]:
        """``[{"key", "description", "subscribers"}]`` sorted by key."""
        return sorted(
            (
                {"key": c.key, "description": c.description, "subscribers": len(c.subscribers)}
                for c in self.by_key.values()
            ),
            key=lambda c: str(c["key"]).casefold(),
        )

    def receivers(self, char: WorldObject, channel: Channel,
                  exists: Callable[[str], bool]) -> list[str]:
        """Who receives ``char``'s post on ``channel`` (the subscribers but ``char`` that
        ``exists``); PermissionDenied when ``char`` may not post there."""
        if channel.send_permission and not holds(char.permissions, channel.send_permission):
            raise PermissionDenied(
                f"{char.key} may not post on {channel.key}: needs "
                f"{channel.send_permission} rights"
            )
        return [s for s in channel.subscribers if s != char.id and exists(s)]

    def set_subscribed(self, char_id: str, channel: Channel, subscribe: bool) -> bool:
        """Join (or leave) ``channel``; True if that changed anything."""
        if (char_id in channel.subscribers) == subscribe:
            return False
        if subscribe:
            channel.subscribers.append(char_id)
        else:
            channel.subscribers.remove(char_id)
        return True

    def join_auto(self, char_id: str) -> list[Channel]:
        """A new character joins every channel each character joins (``auto_join``);
        returns those channels (their rows change)."""
        joined = [c for c in self.by_key.values() if c.auto_join]
        for channel in joined:
            channel.subscribers.append(char_id)
        return joined
