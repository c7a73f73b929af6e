"""A registry entry made of a callable and a schema: the door every tool source comes in by.

Tools come from three sources — a :class:`~ai_tools.tools.base.Tool`
subclass written by hand, a typed function (:func:`ai_tools.tools.function_tool.tool`), a tool a
remote server lists — and all of them are ordinary registry entries: a Tool
class with a name, a description, a parameter schema, a category, a timeout,
retries, a cache policy and a permission.  :func:`callable_tool` makes that
class from ``call(actor, params)`` and the schema, checks it as the registry
would (so a bad definition fails where it is written), and every call of it
then goes through the one execution path: validation, gates, timeout, retry,
cache, kill, history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from twisted.internet import defer

from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, Tool, ToolCategory
from ai_tools.tools.registration import check_tool_class
from ai_tools.tools.validation import compile_validator

__all__ = ["CallableTool", "ToolCall", "callable_tool"]

ToolCall = Callable[[Actor, dict[str, object]], Any]
"""``call(actor, params)``: the validated parameters in, a result (a dict, a Deferred of one,
or a coroutine) out."""


class CallableTool(Tool):
    """A tool whose work is a callable; made by :func:`callable_tool`."""

    call: ClassVar[ToolCall]
    """``call(actor, params)``; set by :func:`callable_tool`."""
    permission: ClassVar[str | None] = None
    """A world permission the acting character must hold for the call to run, or None."""

    def execute(self, actor: Actor, **params: Any) -> Any:
        """Check the permission (if any), then ``call(actor, params)``."""
        if self.permission is None:
            return type(self).call(actor, params)
        return self._permitted_call(actor, params)

    def _permitted_call(self, actor: Actor, params: dict[str, object]) -> Any:
        world = actor.world
        if world is None:
            return outcomes.unavailable(self.name, f"it needs the {self.permission} "
                                                   "permission and no world is attached")
        d = defer.maybeDeferred(world.has_permission, actor.character_id, self.permission)
        d.addCallback(self._call_if_allowed, actor, params)
        return d

    def _call_if_allowed(self, allowed: bool, actor: Actor, params: dict[str, object]) -> Any:
        if not allowed:
            return outcomes.permission_denied(f"{self.name} needs the {self.permission} "
                                              "permission")
        return defer.maybeDeferred(type(self).call, actor, params)


def callable_tool(
    call: ToolCall,
    *,
    name: str,
    description: str,
    parameters: JSONObject,
    category: ToolCategory = ToolCategory.SAFE_CHAIN,
    timeout: float = 30,
    retries: int | None = None,
    cacheable: bool = False,
    cache_scope: str = "tick",
    cache_ttl: float | None = None,
    requires_character: bool = True,
    permission: str | None = None,
    module: str | None = None,
    qualname: str | None = None,
    attributes: dict[str, object] | None = None,
) -> type[CallableTool]:
    """A checked Tool class whose ``execute(actor, **params)`` is ``call(actor, params)``.

    The keyword arguments are the Tool attributes of the same names
    (``retries`` sets ``max_attempts`` to ``retries + 1``; None keeps the
    context's retry policy); ``module`` and ``qualname`` name the class in
    errors and logs (the source of the tool), and ``attributes`` adds class
    attributes of the source's own.  Raises
    :class:`~ai_tools.errors.ToolRegistrationError` naming every problem, as
    :meth:`ToolRegistry.register <ai_tools.tools.registry.ToolRegistry.register>` would.
    """
    namespace: dict[str, object] = {
        "name": name, "description": description, "parameters": parameters,
        "category": category, "timeout": timeout, "cacheable": cacheable,
        "cache_scope": cache_scope, "cache_ttl": cache_ttl,
        "requires_character": requires_character, "permission": permission,
        "max_attempts": None if retries is None else _attempts(retries),
        "call": staticmethod(call), "__module__": module or __name__,
        "__qualname__": qualname or f"callable_tool({name})",
        **(attributes or {}),
    }
    tool_class: type[CallableTool] = type(str(name), (CallableTool,), namespace)
    check_tool_class(tool_class, {})
    # compiled once, here: every instance (each registry's) shares the validator
    tool_class._parameter_validator = compile_validator(parameters)
    return tool_class


def _attempts(retries: object) -> object:
    """``retries + 1`` for a count; anything else as it is, for the check to name."""
    if isinstance(retries, int) and not isinstance(retries, bool):
        return retries + 1
    return retries
