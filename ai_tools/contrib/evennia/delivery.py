"""Whether what the Server sends now can reach the players.

Players' connections live in Evennia's Portal; the Server reaches them over
its AMP link.  While that link is down (the Portal restarting, the Server
being stopped) a ``msg()`` to a puppeted character is lost on the way, yet
it returns as if delivered — so a ``say`` would be recorded as heard by
players who never saw it.  The world adapter calls :func:`check_reachable`
before it speaks: with the link down and a player among the receivers, the
message is not sent at all and :class:`PortalUnreachable` (a
``ConnectionError``, which the engine retries as transient) reports it as
not delivered.  Characters nobody plays (other assistants) hear in-process
and are reached regardless.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ai_tools.contrib.evennia.game_objects import GameObject

__all__ = ["PortalUnreachable", "check_reachable", "portal_link_lost"]


class PortalUnreachable(ConnectionError):
    """The Server has no link to the Portal: players would not see this message."""


def portal_link_lost() -> bool:
    """Whether this Server process had a link to the Portal and it is down now.

    A process that never had one (the test runner, ``evennia shell``) has no
    players to lose, so it counts as not lost.
    """
    import evennia

    protocol = getattr(evennia.EVENNIA_SERVER_SERVICE, "amp_protocol", None)
    if protocol is None:
        return False
    transport = getattr(protocol, "transport", None)
    return not (
        transport is not None
        and getattr(transport, "connected", False)
        and not getattr(transport, "disconnecting", False)
    )


def check_reachable(receivers: Iterable[GameObject], what: str) -> None:
    """Raise :class:`PortalUnreachable` if a player among ``receivers`` would miss ``what``."""
    if not portal_link_lost():
        return
    players = [r for r in receivers if r.sessions.count()]
    if players:
        names = ", ".join(sorted(str(p.key) for p in players))
        raise PortalUnreachable(
            f"{what} not delivered: the game server has lost its link to the players' "
            f"connections (Evennia's Portal), so {names} would not see it; try again later"
        )
