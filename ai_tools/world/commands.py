"""The sandbox world's commands: what a character (or an assistant's
``execute_command``) can type.

Each command runs as the character, through the same world methods the tools
call, so it has exactly the character's rights.  Refusals are answered in the
output, the way a game answers a player, and the result says which kind of
refusal it was::

    {"command": "dig Cellar", "output": ["Permission denied: ..."],
     "success": False, "error": "permission_denied"}

=============  ===========================================================
look [thing]   the room, or one thing (``l``)
say <text>     speak to the room (also ``"text``)
pose <text>    act, shown after your name (``emote``, also ``:text``)
emit <text>    narration without your name (Builder)
whisper        ``whisper <who> = <text>`` to someone in the room
page           ``page <who> = <text>`` to someone anywhere
go <exit>      walk through an exit (``move``; or type the exit's name)
examine        ``examine [thing]``: every detail (Builder, or your own things)
create         ``create <name>[;alias...] [= description]`` (Builder)
dig            ``dig <room>[;alias...] [= <exit>[;alias...][, <back>[;alias...]]]`` (Builder)
set            ``set <thing>/<attr> = <value>`` (JSON or text); no value shows it;
               ``=`` with nothing after deletes it (edit rights)
tag            ``tag <thing> = <tag>[:category]``; ``tag/del``; ``tag <thing>`` lists
desc           ``desc <text>`` (yourself) or ``desc <thing> = <text>``
spawn          ``spawn <prototype> [= name]`` (Builder)
inventory      what you carry (``i``)
channel        ``channel <name> = <text>``; ``channel`` lists; ``channel/join``, ``/leave``
help [topic]   the commands, or a help entry
=============  ===========================================================

A leading ``@`` or ``+`` is ignored (``@dig`` works as in Evennia).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from twisted.internet import defer

from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.world.model import WorldObject
from ai_tools.world.objects import WorldObjects
from ai_tools.world.permissions import BUILDER, holds, may_edit

Sent = list[str] | defer.Deferred[list[str]]
"""Who received a message: at once, or (a shared world) once the message is durable."""


class CommandWorld(Protocol):
    """What the commands use of a world (the sandbox world is one).

    Its objects (:class:`~ai_tools.world.objects.WorldObjects`, to find what a
    command names) and the public methods a command calls — each as the acting
    character, so a command has exactly that character's rights.
    """

    objects: WorldObjects

    def message_location(self, char_id: str, text: str, kind: str = ...,
                         exclude: Iterable[str] = ...) -> Sent: ...
    def message_character(self, char_id: str, target_id: str, text: str,
                          kind: str = ...) -> Sent: ...
    def move_character(self, char_id: str, destination: str) -> defer.Deferred[JSONObject]: ...
    def create_object(self, char_id: str, key: str, description: str = ...,
                      aliases: Iterable[str] = ...,
                      location: str | None = ...) -> defer.Deferred[JSONObject]: ...
    def dig(self, char_id: str, room_key: str, room_aliases: Iterable[str] = ...,
            exit_key: str | None = ..., exit_aliases: Iterable[str] = ...,
            back_key: str | None = ...,
            back_aliases: Iterable[str] = ...) -> defer.Deferred[JSONObject]: ...
    def set_attribute(self, char_id: str, obj_id: str, name: str,
                      value: object) -> defer.Deferred[JSONObject]: ...
    def delete_attribute(self, char_id: str, obj_id: str, name: str) -> defer.Deferred[bool]: ...
    def add_tag(self, char_id: str, obj_id: str, tag: str,
                category: str | None = ...) -> defer.Deferred[JSONObject]: ...
    def remove_tag(self, char_id: str, obj_id: str, tag: str,
                   category: str | None = ...) -> defer.Deferred[bool]: ...
    def set_description(self, char_id: str, obj_id: str,
                        text: str) -> defer.Deferred[JSONObject]: ...
    def list_prototypes(self) -> list[JSONObject]: ...
    def spawn_prototype(self, char_id: str, prototype_key: str, location: str | None = ...,
                        overrides: JSONMapping | None = ...,
                        ) -> defer.Deferred[JSONObject]: ...
    def channel_subscribe(self, char_id: str, channel: str,
                          subscribe: bool = ...) -> defer.Deferred[bool]: ...
    def list_channels(self) -> list[JSONObject]: ...
    def channel_send(self, char_id: str, channel: str, text: str) -> Sent: ...
    def channel_key(self, channel: str) -> str: ...
    def help_topics(self) -> list[str]: ...
    def help_search(self, query: str, limit: int = ...) -> list[JSONObject]: ...


class CommandError(Exception):
    """A command cannot run as typed; ``error`` is the result's error code."""

    def __init__(self, message: str, error: str = "usage") -> None:
        super().__init__(message)
        self.error = error


class _Context:
    """One command run: the world, the acting character, and name resolution."""

    def __init__(self, world: CommandWorld, char: WorldObject) -> None:
        self.world = world
        self.objects = world.objects
        self.char = char

    @property
    def room(self) -> WorldObject:
        return self.objects.room_of(self.char)

    def obj(self, obj_id: str) -> WorldObject:
        return self.objects.require(obj_id)

    def resolve(
        self, reference: str, kind: str | None = None, anywhere: bool = False
    ) -> WorldObject:
        """The object ``reference`` names: me/here, an id, a name nearby (or anywhere)."""
        ref = reference.strip()
        if not ref:
            raise CommandError("name something")
        folded = ref.casefold()
        if folded in ("me", "self", "myself"):
            return self.char
        if folded == "here":
            return self.room
        objects = self.objects
        direct = objects.get(ref)
        if direct is not None and (kind is None or direct.kind == kind):
            return direct
        scopes: list[str | None] = [s for s in (self.char.location, self.char.id) if s]
        found: list[WorldObject] = []
        for scope in scopes:
            found.extend(objects.search(ref, self.char.id, scope, kind, 20))
        if not found and anywhere:
            found = objects.search(ref, self.char.id, None, kind, 20)
        if not found:
            raise NotFound(f"Could not find '{ref}'.")
        exact = [o for o in found if folded in o.names()]
        if len(exact) == 1:
            return exact[0]
        candidates = exact or found
        if len(candidates) == 1:
            return candidates[0]
        listed = ", ".join(f"{o.key} ({o.id})" for o in candidates[:10])
        raise CommandError(f"'{ref}' could mean: {listed}. Use the id.", "ambiguous")


def _split_equals(args: str) -> tuple[str, str | None]:
    left, sep, right = args.partition("=")
    return left.strip(), (right.strip() if sep else None)


def _names(spec: str) -> tuple[str, list[str]]:
    """``"name;alias;alias"`` → (name, aliases)."""
    parts = [p.strip() for p in spec.split(";")]
    return parts[0], [p for p in parts[1:] if p]


def _label(obj: WorldObject) -> str:
    return f"{obj.key} ({obj.id})"


# -- commands --------------------------------------------------------------------


async def cmd_look(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    if args:
        return _describe(ctx, ctx.resolve(args))
    return _describe_room(ctx, ctx.room)


def _describe_room(ctx: _Context, room: WorldObject) -> list[str]:
    lines = [f"== {_label(room)} =="]
    if room.description:
        lines.append(room.description)
    exits, things, people = [], [], []
    for obj in ctx.objects.inside(room.id):
        if obj.id == ctx.char.id:
            continue
        if obj.kind == "exit":
            target = ctx.objects.get(obj.destination)
            exits.append(f"{obj.key} (to {target.key})" if target else obj.key)
        elif obj.kind == "character":
            people.append(obj.key)
        else:
            things.append(obj.key)
    lines.append("Exits: " + (", ".join(exits) if exits else "none"))
    if things:
        lines.append("You see: " + ", ".join(things))
    if people:
        lines.append("Here: " + ", ".join(people))
    return lines


def _describe(ctx: _Context, obj: WorldObject) -> list[str]:
    if obj.kind == "room":
        return _describe_room(ctx, obj)
    lines = [_label(obj), obj.description or "You see nothing special."]
    if obj.kind == "exit":
        target = ctx.objects.get(obj.destination)
        lines.append(f"It leads to {target.key}." if target else "It leads nowhere.")
    return lines


async def _sent(result: Sent) -> list[str]:
    """A message method's answer: the receivers at once, or (a shared world) a Deferred
    firing once the message is durable, which the command waits for."""
    if isinstance(result, defer.Deferred):
        return await result
    return result


async def cmd_say(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    if not args:
        raise CommandError("Say what?")
    await _sent(ctx.world.message_location(ctx.char.id, args, "say"))
    return [f'You say, "{args}"']


async def cmd_pose(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    if not args:
        raise CommandError("Pose what?")
    await _sent(ctx.world.message_location(ctx.char.id, args, "pose"))
    return [f"{ctx.char.key} {args}"]


async def cmd_emit(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    if not args:
        raise CommandError("Emit what?")
    await _sent(ctx.world.message_location(ctx.char.id, args, "emit"))
    return [args]


async def cmd_whisper(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    who, text = _split_equals(args)
    if not who or not text:
        raise CommandError("Usage: whisper <who> = <text>")
    target = ctx.resolve(who, kind="character")
    await _sent(ctx.world.message_character(ctx.char.id, target.id, text, "whisper"))
    return [f'You whisper to {target.key}, "{text}"']


async def cmd_page(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    who, text = _split_equals(args)
    if not who or not text:
        raise CommandError("Usage: page <who> = <text>")
    target = ctx.resolve(who, kind="character", anywhere=True)
    await _sent(ctx.world.message_character(ctx.char.id, target.id, text, "page"))
    return [f"You page {target.key}: {text}"]


async def cmd_go(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    if not args:
        raise CommandError("Go where?")
    room = await ctx.world.move_character(ctx.char.id, args)
    return _describe_room(ctx, ctx.obj(str(room["id"])))


async def cmd_examine(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    obj = ctx.resolve(args, anywhere=True) if args else ctx.room
    if not (holds(ctx.char.permissions, BUILDER) or may_edit(ctx.char, obj)):
        raise PermissionDenied(f"examining {obj.key} needs Builder rights or ownership")
    lines = [
        f"Name: {obj.key}",
        f"Id: {obj.id}",
        f"Kind: {obj.kind}",
        f"Location: {obj.location or '-'}",
    ]
    if obj.kind == "exit":
        lines.append(f"Destination: {obj.destination or '-'}")
    if obj.aliases:
        lines.append("Aliases: " + ", ".join(obj.aliases))
    if obj.owner:
        lines.append(f"Owner: {obj.owner}")
    if obj.kind == "character":
        lines.append("Permissions: " + (", ".join(obj.permissions) or "-"))
    lines.append(f"Description: {obj.description or '-'}")
    tags = [f"{t}:{c}" if c else t for t, c in obj.tags]
    lines.append("Tags: " + (", ".join(tags) if tags else "-"))
    lines.append("Attributes:" + ("" if obj.attributes else " -"))
    lines.extend(f"  {k} = {json.dumps(v)}" for k, v in obj.attributes.items())
    return lines


async def cmd_create(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    spec, description = _split_equals(args)
    name, aliases = _names(spec)
    if not name:
        raise CommandError("Usage: create <name>[;alias...] [= description]")
    created = await ctx.world.create_object(ctx.char.id, name, description or "", aliases)
    return [f"Created {created['key']} ({created['id']}) in {ctx.room.key}."]


async def cmd_dig(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    spec, exits = _split_equals(args)
    name, aliases = _names(spec)
    if not name:
        raise CommandError(
            "Usage: dig <room>[;alias...] [= <exit>[;alias...][, <back exit>[;alias...]]]"
        )
    exit_spec, _, back_spec = (exits or "").partition(",")
    exit_key, exit_aliases = _names(exit_spec) if exit_spec.strip() else (None, [])
    back_key, back_aliases = _names(back_spec) if back_spec.strip() else (None, [])
    dug = await ctx.world.dig(
        ctx.char.id, name, aliases, exit_key, exit_aliases, back_key, back_aliases
    )
    made, new_exits = dug["room"], dug["exits"]
    assert isinstance(made, dict) and isinstance(new_exits, list)  # (dig's answer)
    lines = [f"Created room {made['key']} ({made['id']})."]
    lines.extend(
        f"Created exit {e['key']} ({e['id']}) from {e['location']} to {e['destination']}."
        for e in new_exits if isinstance(e, dict)
    )
    return lines


async def cmd_set(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    left, raw = _split_equals(args)
    target_ref, slash, attr = left.rpartition("/")
    if not slash or not target_ref.strip() or not attr.strip():
        raise CommandError("Usage: set <thing>/<attribute> = <value>")
    obj = ctx.resolve(target_ref, anywhere=True)
    attr = attr.strip()
    if raw is None:
        if attr not in obj.attributes:
            raise NotFound(f"{obj.key} has no attribute '{attr}'.")
        return [f"{_label(obj)}/{attr} = {json.dumps(obj.attributes[attr])}"]
    if raw == "":
        existed = await ctx.world.delete_attribute(ctx.char.id, obj.id, attr)
        if not existed:
            raise NotFound(f"{obj.key} has no attribute '{attr}'.")
        return [f"Deleted {_label(obj)}/{attr}."]
    try:
        value: object = json.loads(raw)
    except ValueError:
        value = raw
    await ctx.world.set_attribute(ctx.char.id, obj.id, attr, value)
    return [f"Set {_label(obj)}/{attr} = {json.dumps(value)}"]


async def cmd_tag(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    target_ref, spec = _split_equals(args)
    if not target_ref:
        raise CommandError("Usage: tag <thing> = <tag>[:category]  (tag/del to remove)")
    obj = ctx.resolve(target_ref, anywhere=True)
    if not spec:
        tags = [f"{t}:{c}" if c else t for t, c in obj.tags]
        return [f"Tags on {_label(obj)}: " + (", ".join(tags) if tags else "none")]
    tag, _, category = spec.partition(":")
    if {"del", "delete", "remove"} & set(switches):
        removed = await ctx.world.remove_tag(ctx.char.id, obj.id, tag, category or None)
        if not removed:
            raise NotFound(f"{obj.key} has no tag '{spec}'.")
        return [f"Removed tag {spec} from {_label(obj)}."]
    await ctx.world.add_tag(ctx.char.id, obj.id, tag, category or None)
    return [f"Tagged {_label(obj)} with {spec}."]


async def cmd_desc(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    target_ref, text = _split_equals(args)
    if text is None:
        obj, text = ctx.char, target_ref
    else:
        obj = ctx.resolve(target_ref, anywhere=True)
    if not text:
        raise CommandError("Usage: desc [<thing> =] <description>")
    await ctx.world.set_description(ctx.char.id, obj.id, text)
    return [f"Description of {_label(obj)} set."]


async def cmd_spawn(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    key, name = _split_equals(args)
    if not key:
        keys = ", ".join(str(p["key"]) for p in ctx.world.list_prototypes()) or "none"
        raise CommandError(f"Usage: spawn <prototype> [= name]. Prototypes: {keys}")
    overrides = {"key": name} if name else None
    created = await ctx.world.spawn_prototype(ctx.char.id, key, None, overrides)
    return [f"Spawned {created['key']} ({created['id']}) from {key}."]


async def cmd_inventory(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    carried = ctx.objects.inside(ctx.char.id)
    if not carried:
        return ["You are not carrying anything."]
    return ["You are carrying: " + ", ".join(o.key for o in carried)]


async def cmd_channel(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    if "join" in switches or "leave" in switches:
        if not args:
            raise CommandError("Usage: channel/join <name>")
        joining = "join" in switches
        changed = await ctx.world.channel_subscribe(ctx.char.id, args, joining)
        verb = "joined" if joining else "left"
        return [f"You {verb} {args}." if changed else f"Nothing to do: already {verb}."]
    if not args:
        listed = ctx.world.list_channels()
        if not listed:
            return ["There are no channels."]
        return [f"{c['key']}: {c['description']}" for c in listed]
    key, text = _split_equals(args)
    if not text:
        raise CommandError("Usage: channel <name> = <text>")
    await _sent(ctx.world.channel_send(ctx.char.id, key, text))
    return [f"[{ctx.world.channel_key(key)}] {ctx.char.key}: {text}"]


async def cmd_help(ctx: _Context, args: str, switches: list[str]) -> list[str]:
    if not args:
        topics = ctx.world.help_topics()
        lines = ["Commands: " + ", ".join(sorted(COMMAND_NAMES))]
        if topics:
            lines.append("Help topics: " + ", ".join(topics))
        return lines
    found = ctx.world.help_search(args, limit=1)
    if not found:
        raise NotFound(f"No help found for '{args}'.")
    return [f"== {found[0]['key']} ==", *str(found[0]["text"]).splitlines()]


Handler = Callable[[_Context, str, list[str]], Awaitable[list[str]]]

COMMANDS: dict[str, Handler] = {
    "look": cmd_look,
    "l": cmd_look,
    "say": cmd_say,
    "pose": cmd_pose,
    "emote": cmd_pose,
    "emit": cmd_emit,
    "whisper": cmd_whisper,
    "page": cmd_page,
    "go": cmd_go,
    "move": cmd_go,
    "examine": cmd_examine,
    "ex": cmd_examine,
    "create": cmd_create,
    "dig": cmd_dig,
    "set": cmd_set,
    "tag": cmd_tag,
    "desc": cmd_desc,
    "describe": cmd_desc,
    "spawn": cmd_spawn,
    "inventory": cmd_inventory,
    "i": cmd_inventory,
    "channel": cmd_channel,
    "help": cmd_help,
}

COMMAND_NAMES = (
    "look",
    "say",
    "pose",
    "emit",
    "whisper",
    "page",
    "go",
    "examine",
    "create",
    "dig",
    "set",
    "tag",
    "desc",
    "spawn",
    "inventory",
    "channel",
    "help",
)


def _parse(line: str) -> tuple[str, list[str], str]:
    """(verb, switches, arguments) of a command line."""
    if line[0] in "\"'":
        return "say", [], line[1:].strip()
    if line[0] == ":":
        return "pose", [], line[1:].strip()
    head, _, rest = line.partition(" ")
    verb, *switches = head.lstrip("@+").casefold().split("/")
    return verb, [s for s in switches if s], rest.strip()


async def _run(world: CommandWorld, char: WorldObject, line: str) -> JSONObject:
    text = line.strip()
    if not text:
        return _result(line, ["What do you want to do? Type 'help' for the commands."], "usage")
    verb, switches, args = _parse(text)
    handler = COMMANDS.get(verb)
    if handler is None and world.objects.find_exit(char, text) is not None:
        handler, args, switches = cmd_go, text, []
    if handler is None:
        return _result(
            line,
            [f"Command '{verb}' is not available. Type 'help' for the commands."],
            "unknown_command",
        )
    try:
        output = await handler(_Context(world, char), args, switches)
    except PermissionDenied as exc:
        return _result(line, [f"Permission denied: {exc}"], "permission_denied")
    except NotFound as exc:
        return _result(line, [str(exc)], "not_found")
    except CommandError as exc:
        return _result(line, [str(exc)], exc.error)
    except (ValueError, TypeError) as exc:
        return _result(line, [str(exc)], "invalid")
    lines: list[JSONValue] = list(output)
    return {"command": line, "output": lines, "success": True}


def _result(line: str, output: list[str], error: str) -> JSONObject:
    lines: list[JSONValue] = list(output)
    return {"command": line, "output": lines, "success": False, "error": error}


def run_command(world: CommandWorld, char_id: str, line: str) -> defer.Deferred[JSONObject]:
    """Run ``line`` as ``char_id``; NotFound if the character does not exist."""
    char = world.objects.character(char_id)
    return defer.ensureDeferred(_run(world, char, str(line)))
