"""Reading a tool call defensively (the engine's first step): one ``ToolCall`` of anything.

:func:`parse_tool_call` accepts every shape a model or a caller produces — the
native ``tool_calls`` entry, the fallback JSON call (with the parameters under
``parameters``/``arguments`` or, auto-corrected with a warning, at top level),
the JSON text of either, or an :class:`~ai_tools.llm.events.ToolCall` the
model layer parsed already — and gives one checked
:class:`~ai_tools.llm.events.ToolCall` (the engine's one call type), or raises
:class:`ToolCallParseError` saying what is wrong.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping
from typing import Any, TypeGuard

import attrs
from twisted.logger import Logger

from ai_tools.errors import AIToolsError
from ai_tools.json_types import JSONMapping
from ai_tools.llm.events import ToolCall

__all__ = ["ToolCall", "ToolCallParseError", "check_tool_call", "new_tool_call_id",
           "parse_tool_call"]

log = Logger()

_MAX_NAME_LENGTH = 200
_MAX_ID_LENGTH = 256
_FALLBACK_KEYS = frozenset({"tool", "parameters", "arguments", "reasoning", "id"})
_ID_PREFIX = f"call_{os.urandom(4).hex()}"
_ID_COUNTER = itertools.count(1)


class ToolCallParseError(AIToolsError):
    """A tool call the engine cannot make sense of (the loop aborts with ``parse_error``)."""


def new_tool_call_id() -> str:
    """A fresh tool call id, unique in this process (for calls that came without one)."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):06d}"


def parse_tool_call(tool_call: object) -> ToolCall:
    """Make a checked :class:`~ai_tools.llm.events.ToolCall` of whatever the model sent.

    Accepted shapes: a ``ToolCall``; native ``{"id", "type": "function",
    "function": {"name", "arguments"}}`` (arguments a JSON string or an object);
    fallback ``{"tool" or "name", "parameters" or "arguments", "reasoning",
    "id"?}``; fallback with the parameters at top level (moved under
    ``parameters``, with a warning); the JSON text of any of these.  A missing
    id is generated.  Raises :class:`ToolCallParseError` saying what is wrong.
    """
    if isinstance(tool_call, ToolCall):
        return check_tool_call(tool_call)
    if isinstance(tool_call, str | bytes):
        try:
            tool_call = json.loads(tool_call)
        except ValueError:
            raise ToolCallParseError("the tool call is text that is not JSON") from None
    if not _is_mapping(tool_call):
        raise ToolCallParseError(f"a tool call must be an object, got {type(tool_call).__name__}")
    function = tool_call.get("function")
    if function is not None:
        name, arguments = _native_parts(function)
    else:
        name, arguments = _fallback_parts(tool_call)
    reasoning = tool_call.get("reasoning", "")
    if not isinstance(reasoning, str):
        reasoning = "" if reasoning is None else json.dumps(reasoning, default=repr)
    # the id as the model sent it: check_tool_call replaces one that is not a usable string
    return check_tool_call(ToolCall(id=tool_call.get("id"),  # type: ignore[arg-type]
                                    name=name, arguments=arguments, reasoning=reasoning))


def check_tool_call(call: ToolCall) -> ToolCall:
    """``call`` if it can be run as it is, else a corrected copy; raises if it cannot.

    Refused: no name, a name that is too long or not printable, arguments that
    are not a JSON object (``arguments_error``), non-string parameter names,
    values that are not plain JSON.  Corrected: surrounding blanks in the name;
    an id that is missing, blank or too long (a fresh one).
    """
    name = call.name.strip() if isinstance(call.name, str) else ""
    if not name:
        raise ToolCallParseError("the tool call names no tool (a non-empty string is needed)")
    if not name.isprintable():
        raise ToolCallParseError("the tool name contains control or unprintable characters")
    if len(name) > _MAX_NAME_LENGTH:
        raise ToolCallParseError(f"tool name is too long ({len(name)} characters)")
    if call.arguments_error is not None:
        raise ToolCallParseError(f"tool '{name}': {call.arguments_error}")
    for key in call.arguments:
        if type(key) is not str:
            raise ToolCallParseError("parameter names must be strings")
    try:
        call.arguments_json  # noqa: B018 - computed once here, kept for the history
    except (TypeError, ValueError, RecursionError) as e:
        raise ToolCallParseError(f"the parameters are not plain JSON ({type(e).__name__})") \
            from None
    call_id = _usable_id(call.id)
    if call_id == call.id and name == call.name:
        return call
    return attrs.evolve(call, id=call_id, name=name)


def _usable_id(raw: object) -> str:
    """The model's id (blanks stripped) if it is usable, else a fresh one."""
    if type(raw) is int:
        raw = str(raw)
    if isinstance(raw, str):
        text = raw.strip()
        if 0 < len(text) <= _MAX_ID_LENGTH:
            return text
    return new_tool_call_id()


def _is_mapping(value: object) -> TypeGuard[JSONMapping]:
    """A dict (checked first: the usual case, and cheaper than the ABC) or another mapping."""
    return isinstance(value, dict) or isinstance(value, Mapping)


def _native_parts(function: object) -> tuple[Any, dict[str, object]]:
    if not _is_mapping(function):
        raise ToolCallParseError("'function' must be an object with 'name' and 'arguments'")
    raw = function.get("arguments", function.get("parameters"))
    return function.get("name"), _decode_arguments(raw, "'function.arguments'")


def _fallback_parts(tool_call: JSONMapping) -> tuple[Any, dict[str, object]]:
    name_key = "tool" if "tool" in tool_call else "name"
    name = tool_call.get(name_key)
    args_key = "parameters" if "parameters" in tool_call else "arguments"
    arguments = _decode_arguments(tool_call.get(args_key), f"'{args_key}'")
    if not arguments:
        extra = {k: v for k, v in tool_call.items() if k not in _FALLBACK_KEYS | {name_key}}
        if extra:
            log.warn("Tool call {tool!r} put its parameters at top level; moved them under "
                     "'parameters': {keys}", tool=name, keys=sorted(map(str, extra)))
            arguments = extra
    return name, arguments


def _decode_arguments(value: object, where: str) -> dict[str, object]:
    """Arguments as a dict: None/"" → {}, JSON text decoded (twice if double-encoded)."""
    if value is None:
        return {}
    for _ in range(2):
        if not isinstance(value, str):
            break
        text = value.strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError as e:
            raise ToolCallParseError(f"{where} is not valid JSON ({e})") from None
    if _is_mapping(value):
        return dict(value)
    raise ToolCallParseError(
        f"{where} must be a JSON object of parameters, got {type(value).__name__}"
    )
