"""What kind of thing an Evennia object is, and how the contract names it.

Shared by the world adapter (:mod:`.world`) and hearing (:mod:`.hearing`),
which both describe Evennia objects to the engine: ids are dbref strings
(``"#12"``) and kinds are ``room``, ``exit``, ``character`` or ``object``.
"""

from __future__ import annotations

from ai_tools.contrib.evennia.game_objects import GameObject

ROOM = "evennia.objects.objects.DefaultRoom"
EXIT = "evennia.objects.objects.DefaultExit"
CHARACTER = "evennia.objects.objects.DefaultCharacter"
OBJECT = "evennia.objects.objects.DefaultObject"


def dbref_of(obj: GameObject) -> str:
    """The id of an Evennia object as the contract spells it (``"#12"``)."""
    return f"#{obj.id}"


def kind_of(obj: GameObject) -> str:
    """``"room"``, ``"exit"``, ``"character"`` or ``"object"``."""
    from evennia.utils.utils import inherits_from

    if inherits_from(obj, EXIT) or getattr(obj, "destination", None) is not None:
        return "exit"
    if inherits_from(obj, ROOM):
        return "room"
    if inherits_from(obj, CHARACTER):
        return "character"
    return "object"


def is_object(obj: object) -> bool:
    """Whether ``obj`` is an in-game object (not an account or a script)."""
    from evennia.utils.utils import inherits_from

    return bool(inherits_from(obj, OBJECT))
