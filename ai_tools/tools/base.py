"""Tools: what a model can ask an assistant to do.

A tool is a class with a ``name``, a ``description`` written for a model, a JSON
Schema of its ``parameters``, a :class:`ToolCategory` that tells the ReAct loop
what a call means for the loop, and an ``execute(actor, **params)`` method that
returns a result dict, a Deferred of one, or is ``async def``.

Registries hold one instance per tool class; see :class:`ToolRegistry`.
"""

from __future__ import annotations

import enum
import hashlib
import json
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
from twisted.logger import Logger

from ai_tools.json_types import JSONObject
from ai_tools.tools.model_view import model_view
from ai_tools.tools.validation import (
    ParameterValidator,
    ValidationResult,
    compile_validator,
)
from ai_tools.tools.validation_messages import STAGE_CUSTOM

if TYPE_CHECKING:
    from ai_tools.interfaces import IAssistantRuntime, IStore, IWorld


class ToolCategory(enum.StrEnum):
    """How a call of the tool affects the ReAct loop (each member is its string value)."""

    SAFE_CHAIN = "safe_chain"
    """Fast, read-only or low-risk. Can be chained freely within loops."""

    TERMINAL = "terminal"
    """Communication tools. Ends loop to await player response."""

    DANGEROUS = "dangerous"
    """Modifies game state significantly. Single execution, may require confirmation."""

    ASYNC_REQUIRED = "async_required"
    """External calls, I/O, deferred operations. Requires special async handling."""


CACHE_SCOPES = frozenset({"tick", "session", "persistent"})
"""Where a cacheable tool's results live: one tick, one session, or the store."""

log = Logger()



@attrs.define(eq=False)
class Actor:
    """Who a tool acts as, and the engine services it may use.

    Passed to :meth:`Tool.execute` as its first argument (the spec calls it
    ``character``).  ``character_id`` is the acting character in ``world``;
    ``assistant`` is the assistant runtime the call belongs to (None outside an
    assistant, e.g. in a console call).  ``call_id`` is the id of the tool call
    being run, as the history records it (the engine renumbers an id a model
    reused); the engine sets it before each attempt, and calls of one context
    run one after the other.  None outside a call.
    """

    character_id: str | None
    world: IWorld | None = None
    store: IStore | None = None
    assistant: IAssistantRuntime | None = None
    call_id: str | None = None

    @property
    def owner(self) -> str:
        """Namespace for records the tool keeps (memories, journal...)."""
        if self.assistant is not None:
            return str(self.assistant.name)
        return self.character_id or "anonymous"

    def effect_key(self, tool: str, *effect: object) -> str | None:
        """The key of this call's world effect, so a re-run delivers it once; None if no key.

        A worker killed after a tool's effect committed but before the
        iteration recording it was saved leaves the call to be made again by
        the assistant's next owner; with the same call id, the key is the same
        and the world keeps the first delivery only.  The key is the assistant,
        the call id as the history records it, and a digest of the tool and of
        what the call does (``effect``: its text, its target...): two calls
        are never one, even when a model reuses an id the history no longer
        holds (compacted away) for other words.  Only an assistant's calls have
        one (a console call or a player is never re-run by a failover).
        """
        if self.call_id is None or self.assistant is None:
            return None
        digest = hashlib.sha256(json.dumps([tool, *effect], ensure_ascii=False,
                                           default=str).encode()).hexdigest()[:16]
        return f"{self.owner}:{self.call_id}:{digest}"


class Tool:
    """Base class of every tool.

    Subclasses set the class attributes and override :meth:`execute`:

    - ``name``: unique, 1-64 letters, digits, ``_`` or ``-`` (model APIs' rule);
    - ``description``: what the tool does, written for the model;
    - ``parameters``: a JSON Schema of ``"type": "object"``;
    - ``timeout``: seconds one attempt may take (default 30);
    - ``category``: what a call means for the ReAct loop (:class:`ToolCategory`);
    - ``cacheable``, ``cache_scope`` (``tick``/``session``/``persistent``),
      ``cache_ttl`` (seconds, or None): result caching for read-only tools;
    - ``requires_character``: whether the call needs an acting character;
    - ``max_attempts``: attempts of a call that fails retryably (None: the
      execution context's retry policy decides).
    - ``approval``: ``"operator"`` when every call must wait for an operator's yes,
      ``"never"`` when none does; None (default): the assistant's setting decides
      (:mod:`ai_tools.execution.approval`).

    They may override :meth:`custom_validation` to add checks JSON Schema
    cannot express.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    parameters: ClassVar[JSONObject] = {"type": "object", "properties": {}}
    timeout: ClassVar[float] = 30
    category: ClassVar[ToolCategory] = ToolCategory.SAFE_CHAIN
    cacheable: ClassVar[bool] = False
    cache_scope: ClassVar[str] = "tick"
    cache_ttl: ClassVar[float | None] = None
    requires_character: ClassVar[bool] = True
    max_attempts: ClassVar[int | None] = None
    approval: ClassVar[str | None] = None

    _parameter_validator: ParameterValidator | None = None

    @property
    def parameter_validator(self) -> ParameterValidator:
        """The compiled validator of :attr:`parameters`, built once per tool instance."""
        validator = self._parameter_validator
        if validator is None:
            validator = self._parameter_validator = compile_validator(self.parameters)
        return validator

    def execute(self, actor: Actor, **params: Any) -> Any:
        """Run the tool; return a result dict, a Deferred of one, or a coroutine.

        ``params`` are the validated, cleaned parameters.  A result is a
        JSON-serialisable dict, by convention ``{"success": True, ...}`` or
        ``{"success": False, "error": "what went wrong"}``.
        """
        raise NotImplementedError(f"tool {self.name!r} does not implement execute()")

    def custom_validation(self, params: dict[str, object], result: ValidationResult) -> None:
        """Hook for tool-specific checks, run after the schema checks pass.

        ``params`` are the cleaned parameters (change them to normalise a
        value); call ``result.add_error(param, message, constraint, got)`` to
        refuse the call.
        """

    def validate_parameters(self, params: object) -> ValidationResult:
        """Validate (and safely coerce) ``params`` against :attr:`parameters`; never raises."""
        result = self.parameter_validator.validate(params)
        if result.valid:
            try:
                self.custom_validation(result.cleaned_params, result)
            except Exception as e:
                log.failure("custom_validation of tool {tool} raised", tool=self.name)
                result.add_error(
                    "parameters",
                    f"The tool's own parameter check failed ({type(e).__name__}: {e})",
                    stage=STAGE_CUSTOM,
                )
        return result

    def schema(self) -> JSONObject:
        """The OpenAI-compatible function schema of this tool (a fresh copy).

        Its ``parameters`` are :func:`~ai_tools.tools.model_view.model_view` of
        :attr:`parameters`: what the model needs to call the tool, without the
        bounds the validator enforces (they cost tokens on every model call).
        """
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": model_view(self.parameters),
            },
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.category.value}>"
