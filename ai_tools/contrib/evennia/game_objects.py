"""What the contrib uses of Evennia's objects, as Protocols (the annotations' types).

Evennia's typeclasses (``DefaultObject``, ``DefaultChannel``, ``DefaultScript``...)
are Django models with handlers hung on them; the contrib reads and calls only a
small part of them, named here so its functions say what they take instead of
``Any``.  Nothing here is imported by Evennia or checked at run time: an
Evennia object is one of these by its shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from ai_tools.json_types import JSONObject


class Handler(Protocol):
    """An Evennia handler (``aliases``, ``tags``, ``attributes``, ``sessions``...)."""

    def all(self, *args: object, **kwargs: object) -> list[object]: ...
    def add(self, *args: object, **kwargs: object) -> object: ...
    def remove(self, *args: object, **kwargs: object) -> object: ...
    def has(self, *args: object, **kwargs: object) -> bool: ...


class DbHandler(Protocol):
    """``obj.db``: the object's attributes by name (None when it has none)."""

    def __getattr__(self, name: str) -> object: ...
    def __setattr__(self, name: str, value: object) -> None: ...


class Locks(Protocol):
    """An object's lock handler."""

    def check_lockstring(self, accessing_obj: object, lockstring: str) -> bool: ...


class GameObject(Protocol):
    """An Evennia object (``ObjectDB``): a room, exit, character or thing."""

    id: int
    key: str
    dbref: str
    db: DbHandler
    location: GameObject | None
    destination: GameObject | None
    contents: list[GameObject]
    typeclass_path: str
    aliases: Handler
    tags: Handler
    attributes: Handler
    locks: Locks
    account: object
    sessions: Handler

    def access(self, accessing_obj: object, access_type: str = ...,
               default: bool = ...) -> bool: ...
    def msg(self, text: object = ..., from_obj: object = ..., **kwargs: object) -> None: ...
    def msg_contents(self, text: object = ..., exclude: object = ...,
                     from_obj: object = ..., mapping: object = ..., **kwargs: object) -> None: ...
    def at_say(self, message: str, **kwargs: object) -> None: ...
    def execute_cmd(self, raw_string: str, session: object = ...,
                    **kwargs: object) -> object: ...
    def search(self, searchdata: str, **kwargs: object) -> object: ...


class GameChannel(Protocol):
    """An Evennia channel (``ChannelDB``)."""

    key: str
    db: DbHandler
    subscriptions: Handler

    def access(self, accessing_obj: object, access_type: str = ...,
               default: bool = ...) -> bool: ...
    def msg(self, message: str, senders: object = ..., **kwargs: object) -> object: ...


class GameHelpEntry(Protocol):
    """A help entry: the database's or a command's (what ``search_index_entry`` gives)."""

    @property
    def search_index_entry(self) -> JSONObject: ...


GameObjects = Iterable[GameObject]
"""Objects of the game (a queryset, a list)."""


class GameCommand(Protocol):
    """A command of a command set."""

    key: str
    locks: object

    def match(self, cmdname: str, include_prefixes: bool = ...) -> tuple[bool, object]: ...


class GameCmdSet(Protocol):
    """A merged command set: its commands, and one by name."""

    def __iter__(self) -> Iterator[GameCommand]: ...
    def get(self, cmd: object) -> GameCommand | None: ...


CommandParser = Callable[[str, GameCmdSet, GameObject], list[object]]
"""``settings.COMMAND_PARSER``: the matches of a line in a command set, for a caller."""
