"""Finding an assistant's script from its character or its name.

Tag first: the character's ``db.assistant_key`` names the assistant, and its
script carries the tag ``ai_assistant:<key>`` (category ``system``).  Fallback:
an assistant script attached to the character, or one whose recorded dbref
is the character's (a script created before the tag existed, or whose tag
was removed by hand).
"""

from __future__ import annotations

from evennia.scripts.models import ScriptDB
from evennia.utils import search
from evennia.utils.utils import inherits_from

from ai_tools.contrib.evennia.game_objects import GameObject
from ai_tools.contrib.evennia.scripts import TAG_CATEGORY, AssistantScript, assistant_tag

SCRIPT_CLASS = "ai_tools.contrib.evennia.scripts.AssistantScript"
"""Every assistant script inherits from this typeclass."""


def _is_assistant_script(script: object) -> bool:
    return inherits_from(script, SCRIPT_CLASS)


def get_assistant_script(assistant_key: str) -> AssistantScript | None:
    """The script of the assistant called ``assistant_key``, or None."""
    if not assistant_key:
        return None
    found = search.search_script_tag(key=assistant_tag(assistant_key), category=TAG_CATEGORY)
    scripts = [s for s in found if _is_assistant_script(s)]
    return scripts[0] if scripts else None


def get_assistant_script_for_character(character: GameObject | None
                                       ) -> AssistantScript | None:
    """The canonical way to find a character's assistant script (None if it has none).

    1. Tag lookup: ``ai_assistant:<character.db.assistant_key>`` in category ``system``,
       accepted only if that script belongs to this character.
    2. Fallback: an assistant script attached to the character, or one whose
       ``db.character_dbref`` / the character's ``db.assistant_script_dbref`` match.
    """
    if character is None or getattr(character, "id", None) is None:
        return None
    assistant_key = character.attributes.get("assistant_key")
    if assistant_key:
        script = get_assistant_script(assistant_key)
        if script is not None and (script.obj is None or script.obj == character):
            return script
    for script in ScriptDB.objects.filter(db_obj=character).order_by("id"):
        if _is_assistant_script(script):
            return script
    script_dbref = character.attributes.get("assistant_script_dbref")
    if script_dbref:
        found = ScriptDB.objects.filter(id=str(script_dbref).lstrip("#")).first()
        if found is not None and _is_assistant_script(found):
            return found
    for script in ScriptDB.objects.get_by_attribute(key="character_dbref", value=character.dbref):
        if _is_assistant_script(script):
            return script
    return None


def all_assistant_scripts() -> list[AssistantScript]:
    """Every assistant script in the game (found by their lookup tags), oldest first."""
    tagged = ScriptDB.objects.filter(
        db_tags__db_key__startswith="ai_assistant:", db_tags__db_category=TAG_CATEGORY
    )
    return [s for s in tagged.distinct().order_by("id") if _is_assistant_script(s)]
