"""``ai_tools.tool``: a typed, documented function becomes a tool.

::

    from typing import Annotated, Literal
    from ai_tools import tool

    @tool
    def roll_dice(count: Annotated[int, "How many dice."], sides: Literal[4, 6, 20] = 6):
        \"\"\"Roll dice and report the total.\"\"\"
        return {"success": True, "total": count * sides}

The schema comes from the type hints (see
:mod:`ai_tools.tools.signature_schema`), the descriptions from the docstring
(:mod:`ai_tools.tools.docstrings`); both are worked out once, here, and the
result is an ordinary Tool class made by
:func:`~ai_tools.tools.callable_tool.callable_tool`: a registry takes it like
any other (``registry.register(roll_dice)``) and every call goes through the one
execution path.  The function itself stays callable as ``roll_dice.function``.

What the function returns becomes the result the model reads: a dict as it is
(``{"success": False, "error": ...}`` included), ``None`` as
``{"success": True}``, anything else — text, a number, a list, a dataclass or
attrs instance — as ``{"success": True, "result": ...}`` in JSON form.  A
Deferred or a coroutine (``async def``) is waited for.  A refusal raised —
:class:`~ai_tools.errors.PermissionDenied`, :class:`~ai_tools.errors.NotFound`,
``ValueError`` — is the refusal result the default tools give (status
``permission_denied``, ``not_found``, ``invalid``; never retried); any other
exception is the engine's usual error for the model (retried when transient).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, cast, overload

import msgspec
from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.errors import ToolRegistrationError
from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.callable_tool import CallableTool, ToolCall, callable_tool
from ai_tools.tools.docstrings import read_docstring
from ai_tools.tools.library_tool import REFUSALS, refusal
from ai_tools.tools.signature_schema import SignatureSchema, describe_signature

__all__ = ["tool"]

Function = Callable[..., Any]


@overload
def tool(function: Function, /) -> type[CallableTool]: ...


@overload
def tool(
    function: None = None, /, *, name: str | None = None, description: str | None = None,
    category: ToolCategory = ToolCategory.SAFE_CHAIN, timeout: float = 30,
    retries: int | None = None, cache: str | None = None, cache_ttl: float | None = None,
    requires_character: bool | None = None, permission: str | None = None,
    example: Mapping[str, Any] | None = None,
) -> Callable[[Function], type[CallableTool]]: ...


@overload
def tool(
    function: Function, /, *, name: str | None = None, description: str | None = None,
    category: ToolCategory = ToolCategory.SAFE_CHAIN, timeout: float = 30,
    retries: int | None = None, cache: str | None = None, cache_ttl: float | None = None,
    requires_character: bool | None = None, permission: str | None = None,
    example: Mapping[str, Any] | None = None,
) -> type[CallableTool]: ...


def tool(
    function: Function | None = None, /, *, name: str | None = None,
    description: str | None = None, category: ToolCategory = ToolCategory.SAFE_CHAIN,
    timeout: float = 30, retries: int | None = None, cache: str | None = None,
    cache_ttl: float | None = None, requires_character: bool | None = None,
    permission: str | None = None, example: Mapping[str, Any] | None = None,
) -> type[CallableTool] | Callable[[Function], type[CallableTool]]:
    """Make a tool of ``function``: ``@tool``, ``@tool(...)`` or ``tool(existing_function, ...)``.

    :param function: the function (a plain one, one returning a Deferred, or
        ``async def``); omitted in the ``@tool(...)`` form.
    :param name: the tool's name (default: the function's).
    :param description: what the model reads (default: the docstring's summary).
    :param category: what a call means for the ReAct loop.
    :param timeout: seconds one attempt may take.
    :param retries: further attempts after a retryable failure (None: the
        execution context's retry policy).
    :param cache: the cache scope of the results (``"tick"``, ``"session"``
        or ``"persistent"``), or None not to cache them.
    :param cache_ttl: seconds a cached result stays valid, or None.
    :param requires_character: whether a call needs an acting character
        (default: whether the function takes the :class:`~ai_tools.tools.base.Actor`).
    :param permission: a world permission (e.g. ``"Builder"``) the acting
        character must hold, checked before each call.
    :param example: an example call's parameters (shown in the docs of the
        tool), checked valid here.
    :raises ~ai_tools.errors.ToolRegistrationError: the function cannot be a
        tool; the message names it and the parameter or setting at fault.
    """
    settings: dict[str, Any] = dict(
        name=name, description=description, category=category, timeout=timeout,
        retries=retries, cache=cache, cache_ttl=cache_ttl,
        requires_character=requires_character, permission=permission, example=example)
    if function is None:
        return lambda f: _function_tool(f, **settings)
    return _function_tool(function, **settings)


def _function_tool(function: Function, *, name: str | None, description: str | None,
                   category: ToolCategory, timeout: float, retries: int | None,
                   cache: str | None, cache_ttl: float | None,
                   requires_character: bool | None, permission: str | None,
                   example: Mapping[str, Any] | None) -> type[CallableTool]:
    where = _where(function)
    if not callable(function):
        raise ToolRegistrationError(f"Cannot make a tool of {where}: it is not callable")
    try:
        docs = read_docstring(function)
        signature = describe_signature(function, docs.parameters)
        _check_documented(docs.parameters, function)
    except ValueError as e:
        raise ToolRegistrationError(f"Cannot make a tool of {where}: {e}") from e
    text = docs.summary if description is None else description
    if not text:
        raise ToolRegistrationError(
            f"Cannot make a tool of {where}: it has no description; write a docstring "
            "(its summary is what the model reads) or pass description=")
    tool_name = str(name or getattr(function, "__name__", ""))
    if requires_character is None:
        requires_character = signature.actor_parameter is not None
    made = callable_tool(
        _call_of(function, signature, tool_name), name=tool_name, description=text,
        parameters=signature.parameters, category=category, timeout=timeout,
        retries=retries, cacheable=cache is not None,
        cache_scope="tick" if cache is None else cache,
        cache_ttl=cache_ttl, requires_character=requires_character, permission=permission,
        module=getattr(function, "__module__", None),
        qualname=getattr(function, "__qualname__", None),
        attributes={"function": staticmethod(function), "__doc__": function.__doc__,
                    "example": dict(example or {})},
    )
    if example:
        checked = made().validate_parameters(dict(example))
        if not checked.valid:
            raise ToolRegistrationError(
                f"Cannot make a tool of {where}: its example is not a valid call: "
                + checked.format_for_llm(tool_name).replace("\n", " "))
    return made


def _where(function: Any) -> str:
    qualname = getattr(function, "__qualname__", None)
    if qualname is None:
        return repr(function)
    return f"{getattr(function, '__module__', '?')}.{qualname}"


def _check_documented(documented: dict[str, str], function: Function) -> None:
    """A docstring describing a parameter the function does not have is a mistake."""
    names = set(inspect.signature(function).parameters)
    unknown = sorted(set(documented) - names)
    if unknown:
        raise ValueError(f"its docstring describes {', '.join(map(repr, unknown))}, which "
                         "is not a parameter")


def _call_of(function: Function, signature: SignatureSchema, tool_name: str) -> ToolCall:
    """``call(actor, params)`` for the function: the actor injected, values converted.

    ``params`` is the engine's fresh keyword dict of this call: adding to it is safe.
    """
    actor_parameter = signature.actor_parameter
    converted = signature.converted
    if not converted and actor_parameter is None:  # plain JSON in: nothing to do per call
        return lambda actor, params: _as_result(function, params, tool_name)

    def call(actor: Actor, params: dict[str, object]) -> Any:
        for param, annotation in converted.items():
            if param in params:
                try:
                    params[param] = msgspec.convert(params[param], annotation)
                except msgspec.ValidationError as e:
                    return outcomes.invalid(f"{param}: {e}")
        if actor_parameter is not None:
            params[actor_parameter] = actor
        return _as_result(function, params, tool_name)

    return call


def _as_result(function: Function, params: dict[str, object], tool_name: str) -> Any:
    """Call the function; what it returns as a result dict (or a Deferred of one)."""
    try:
        value = function(**params)
    except REFUSALS as e:
        return refusal(e)
    if type(value) is dict:
        return value
    if isinstance(value, Coroutine):
        value = defer.Deferred.fromCoroutine(value)
    if isinstance(value, defer.Deferred):
        return value.addCallbacks(_result_of, _refused, callbackArgs=(tool_name,))
    return _result_of(value, tool_name)


def _refused(failure: Failure) -> JSONObject:
    failure.trap(*REFUSALS)
    return refusal(cast(Exception, failure.value))


def _result_of(value: Any, tool_name: str) -> JSONObject:
    if isinstance(value, dict):
        return value
    if value is None:
        return {"success": True}
    try:
        return {"success": True, "result": msgspec.to_builtins(value)}
    except TypeError as e:
        return {"success": False, "error": f"Tool '{tool_name}' returned "
                                           f"{type(value).__name__}, which has no JSON form: {e}"}
