"""The checks a tool class must pass before a registry accepts it.

A bad tool is refused when it is registered — at start-up, with a message
naming the class and every problem — rather than failing later in front of a
model.  :func:`check_tool_class` raises
:class:`~ai_tools.errors.ToolRegistrationError`.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Mapping

from ai_tools.errors import ToolRegistrationError
from ai_tools.tools.base import CACHE_SCOPES, Tool, ToolCategory
from ai_tools.tools.validation import schema_problems

NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""Function names the OpenAI-compatible APIs accept."""


def describe_class(tool_class: object) -> str:
    """``module.QualName`` of a class (or the repr of anything else)."""
    if inspect.isclass(tool_class):
        return f"{tool_class.__module__}.{tool_class.__qualname__}"
    return repr(tool_class)


def check_tool_class(tool_class: object, existing: Mapping[str, Tool]) -> None:
    """Raise ToolRegistrationError if ``tool_class`` cannot be registered.

    ``existing`` maps the names already registered to their tools.
    """
    if not inspect.isclass(tool_class):
        hint = ""
        if isinstance(tool_class, Tool):
            hint = f"; pass the class ({type(tool_class).__name__}), not an instance"
        raise ToolRegistrationError(
            f"Cannot register {describe_class(tool_class)}: expected a Tool subclass{hint}"
        )
    if not issubclass(tool_class, Tool) or tool_class is Tool:
        raise ToolRegistrationError(
            f"Cannot register {describe_class(tool_class)}: it is not a subclass of "
            "ai_tools.tools.Tool"
        )
    problems = tool_class_problems(tool_class, existing)
    if problems:
        name = getattr(tool_class, "name", "")
        label = f"tool {name!r} ({describe_class(tool_class)})" if isinstance(
            name, str) and name else describe_class(tool_class)
        raise ToolRegistrationError(f"Cannot register {label}: " + "; ".join(problems))


def tool_class_problems(tool_class: type[Tool], existing: Mapping[str, Tool]) -> list[str]:
    """Everything wrong with a Tool subclass, as short sentences (empty when fine)."""
    problems = _name_problems(tool_class.name, existing)
    description = tool_class.description
    if not isinstance(description, str) or not description.strip():
        problems.append("'description' must be a non-empty string (the model reads it)")
    problems.extend(parameters_problems(tool_class.parameters))
    if not isinstance(tool_class.category, ToolCategory):
        problems.append(
            f"'category' must be a ToolCategory, not {tool_class.category!r}"
        )
    if tool_class.cache_scope not in CACHE_SCOPES:
        problems.append(
            f"'cache_scope' must be one of {', '.join(sorted(CACHE_SCOPES))}, "
            f"not {tool_class.cache_scope!r}"
        )
    if not _positive_number(tool_class.timeout):
        problems.append(f"'timeout' must be a positive number of seconds, "
                        f"not {tool_class.timeout!r}")
    if tool_class.cache_ttl is not None and not _positive_number(tool_class.cache_ttl):
        problems.append(f"'cache_ttl' must be None or a positive number of seconds, "
                        f"not {tool_class.cache_ttl!r}")
    attempts = tool_class.max_attempts
    if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int)
                                 or attempts < 1):
        problems.append(f"'max_attempts' must be None or an integer >= 1, not {attempts!r}")
    for flag in ("cacheable", "requires_character"):
        if not isinstance(getattr(tool_class, flag), bool):
            problems.append(f"{flag!r} must be True or False")
    if tool_class.execute is Tool.execute:
        problems.append("it must override execute(actor, **params)")
    elif not callable(tool_class.execute):
        problems.append("'execute' must be a method")
    return problems


def _name_problems(name: object, existing: Mapping[str, Tool]) -> list[str]:
    if not isinstance(name, str) or not name:
        return ["'name' must be a non-empty string"]
    if not NAME_PATTERN.fullmatch(name):
        return [f"'name' {name!r} must be 1-64 letters, digits, '_' or '-' "
                "(the function-name rule of model APIs)"]
    if name in existing:
        return [f"a tool named {name!r} is already registered "
                f"({describe_class(type(existing[name]))})"]
    return []


def parameters_problems(parameters: object) -> list[str]:
    """What is wrong with a tool's ``parameters`` schema (empty when fine).

    It must be a JSON-serialisable JSON Schema (checked against the
    metaschema) of ``"type": "object"``, and every ``required`` name must be
    declared in ``properties``.
    """
    if not isinstance(parameters, dict):
        return [f"'parameters' must be a JSON Schema dict, not {type(parameters).__name__}"]
    try:
        json.dumps(parameters)
    except (TypeError, ValueError) as e:
        return [f"'parameters' must be JSON-serialisable (it is sent to the model): {e}"]
    problems = [f"'parameters' is not a valid JSON Schema: {p}"
                for p in schema_problems(parameters)]
    if parameters.get("type") != "object":
        problems.append("'parameters' must be an object schema ({\"type\": \"object\", ...})")
    properties = parameters.get("properties", {})
    required = parameters.get("required", [])
    additional = parameters.get("additionalProperties", False)
    if isinstance(properties, dict) and isinstance(required, list) and not (
        additional is True or isinstance(additional, dict)
    ):
        undeclared = [n for n in required if isinstance(n, str) and n not in properties]
        if undeclared:
            problems.append(
                f"required parameter(s) {', '.join(map(repr, undeclared))} "
                "not declared in 'properties'"
            )
    return problems


def _positive_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
