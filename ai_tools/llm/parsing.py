"""Find the tool calls in a model's answer and sort them.

Structured ``tool_calls`` come first.  When there are none, the text is
searched for calls written as JSON (models without native tool calling): a
fenced code block, a bare object, or an object on its own line or inside
prose, with the name under ``tool`` or ``name`` and the arguments under
``parameters`` or ``arguments`` (``reasoning`` is kept; arguments placed at top
level are accepted with a warning).  Found directives are removed from the
user-visible text.

Calls are partitioned into normal, exit and unknown ones.  An unknown name,
arguments that are not a JSON object, or a call whose JSON is cut off or
malformed make a :class:`ParseFailure` (reason ``tool_parse_error``) that keeps
the model's output as it was.  Nothing here raises on any input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any

import attrs

from ai_tools.history_format import content_text
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.llm.events import ChatResponse, ToolCall, decode_arguments

TOOL_PARSE_ERROR = "tool_parse_error"

_NAME_KEYS = ("tool", "name")
_ARGUMENT_KEYS = ("parameters", "arguments", "args")
_META_KEYS = frozenset(
    {"tool", "name", "reasoning", "id", "type", "function", "thought", "thoughts"}
)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n`]*\n?(.*?)```", re.DOTALL)
_TOOLISH_START = re.compile(r'\{\s*"(?:tool|name|function)"\s*:')
_TOOLISH_ANYWHERE = re.compile(r'"(?:tool|parameters|arguments)"\s*:')
_BLANK_RUNS = re.compile(r"\n{3,}")
_MAX_SCAN_FAILURES = 2000
_decoder = json.JSONDecoder()


@attrs.frozen
class ParseFailure:
    """Why the calls of an answer cannot be used; ``raw_output`` is the answer as-is."""

    detail: str
    raw_output: str = ""
    tool_name: str | None = None
    reason: str = TOOL_PARSE_ERROR


@attrs.frozen
class ParsedCalls:
    """The tool calls of one answer, sorted.

    ``calls`` holds every call found, in the model's order; ``normal``,
    ``exit`` and ``unknown`` partition them by name; ``invalid`` lists calls
    whose arguments are unusable.  ``visible_text`` is the text for the user
    (fallback directives removed); ``mode`` is ``"native"``, ``"fallback"`` or
    ``"none"``.  ``error`` is set when the answer must be treated as a
    ``tool_parse_error``.
    """

    normal: tuple[ToolCall, ...] = ()
    exit: tuple[ToolCall, ...] = ()
    unknown: tuple[ToolCall, ...] = ()
    visible_text: str = ""
    error: ParseFailure | None = None
    calls: tuple[ToolCall, ...] = ()
    invalid: tuple[ToolCall, ...] = ()
    mode: str = "none"
    raw_text: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """No parse error."""
        return self.error is None

    @property
    def has_calls(self) -> bool:
        """Whether any call (of any kind) was found."""
        return bool(self.calls)


def parse_tool_calls(
    response_or_message: ChatResponse | JSONMapping | str | None,
    normal_tool_names: Collection[str],
    exit_tool_names: Collection[str] = (),
    *,
    fallback: bool = True,
) -> ParsedCalls:
    """Find and partition the tool calls of an answer.

    ``response_or_message`` is a :class:`ChatResponse`, an assistant message
    dict, or the answer text.  ``fallback=False`` disables the search for calls
    in the text.  Never raises.
    """
    try:
        text, native = _split_answer(response_or_message)
    except Exception as e:  # a malformed message dict: report, never raise
        return ParsedCalls(
            error=ParseFailure(f"unreadable assistant message ({type(e).__name__}: {e})"),
        )
    normal_names = frozenset(normal_tool_names)
    exit_names = frozenset(exit_tool_names)
    if native:
        return _partition(native, normal_names, exit_names, text, text, "native", ())
    if not fallback or not text:
        return ParsedCalls(visible_text=text, raw_text=text)
    try:
        return _parse_fallback(text, normal_names, exit_names)
    except Exception as e:  # defensive: the parser must never take the loop down
        return ParsedCalls(
            visible_text=text,
            raw_text=text,
            error=ParseFailure(f"could not parse tool call ({type(e).__name__}: {e})", text),
        )


def plain_native_calls(response: ChatResponse, plain_names: Collection[str]
                       ) -> tuple[ToolCall, ...] | None:
    """The native calls of ``response`` when they need no partitioning, else None.

    The usual answer: native calls, each naming a tool in ``plain_names`` (normal
    tools that are not exit tools) with readable arguments.  For it
    :func:`parse_tool_calls` would give exactly these calls as ``calls`` and
    ``normal``, ``response.content`` as ``visible_text``, no error, no warning;
    this says so without building the partition.
    """
    calls = response.tool_calls
    if not calls:
        return None
    for call in calls:
        if call.name not in plain_names or call.arguments_error is not None:
            return None
    return calls


def _split_answer(answer: object) -> tuple[str, tuple[ToolCall, ...]]:
    if answer is None:
        return "", ()
    if isinstance(answer, ChatResponse):
        return answer.content, answer.tool_calls
    if isinstance(answer, str):
        return answer, ()
    if isinstance(answer, Mapping):
        raw_calls = answer.get("tool_calls") or ()
        if not isinstance(raw_calls, list | tuple):
            raw_calls = ()
        calls = tuple(
            ToolCall.from_openai(c, i) if isinstance(c, Mapping) else _bad_native_call(c, i)
            for i, c in enumerate(raw_calls)
        )
        return content_text(answer.get("content")), calls
    return str(answer), ()


def _bad_native_call(entry: object, index: int) -> ToolCall:
    return ToolCall(
        id=f"call_{index}",
        name="",
        raw_arguments=repr(entry)[:500],
        arguments_error="tool call entry is not an object",
    )



def _partition(
    calls: tuple[ToolCall, ...],
    normal_names: frozenset[str],
    exit_names: frozenset[str],
    visible: str,
    raw: str,
    mode: str,
    warnings: tuple[str, ...],
    failure: str | None = None,
    failure_tool: str | None = None,
) -> ParsedCalls:
    normal: list[ToolCall] = []
    exit_calls: list[ToolCall] = []
    unknown: list[ToolCall] = []
    invalid: list[ToolCall] = []
    for call in calls:
        if call.name in exit_names:
            # Exit calls are signals: arguments are kept best effort, never an error.
            exit_calls.append(call)
        elif call.name in normal_names:
            if call.arguments_error is not None:
                invalid.append(call)
                if failure is None:
                    failure = f"tool '{call.name}': {call.arguments_error}"
                    failure_tool = call.name
            else:
                normal.append(call)
        else:
            unknown.append(call)
    if unknown and failure is None:
        names = ", ".join(repr(c.name) for c in unknown)
        offered = ", ".join(sorted(normal_names | exit_names)) or "none"
        failure = f"unknown tool {names}; available tools: {offered}"
        failure_tool = unknown[0].name
    error = ParseFailure(failure, raw, failure_tool) if failure is not None else None
    return ParsedCalls(
        normal=tuple(normal),
        exit=tuple(exit_calls),
        unknown=tuple(unknown),
        visible_text=raw if error is not None and mode == "fallback" else visible,
        error=error,
        calls=calls,
        invalid=tuple(invalid),
        mode=mode,
        raw_text=raw,
        warnings=warnings,
    )


@attrs.define
class _Found:
    """What the fallback search has found so far: call objects by position, their spans
    in the text, and the first problem seen (a call whose JSON is broken)."""

    objects: list[tuple[int, Any]] = attrs.field(factory=list)
    spans: list[tuple[int, int]] = attrs.field(factory=list)
    problem: str | None = None

    def add(self, position: int, value: object, span: tuple[int, int]) -> None:
        self.objects.append((position, value))
        self.spans.append(span)


def _parse_fallback(
    text: str, normal_names: frozenset[str], exit_names: frozenset[str]
) -> ParsedCalls:
    """Calls written as JSON in the text: fenced blocks, then a bare array, then objects."""
    known = normal_names | exit_names
    found = _Found()
    scan = _fenced_calls(text, known, found)
    scan = _bare_array(scan, known, found)
    _objects_anywhere(scan, known, found)
    if not found.objects:
        if found.problem is not None:
            return ParsedCalls(visible_text=text, raw_text=text, mode="fallback",
                               error=ParseFailure(found.problem, text))
        return ParsedCalls(visible_text=text, raw_text=text)
    found.objects.sort(key=lambda item: item[0])
    warnings: list[str] = []
    calls = tuple(
        _fallback_call(value, index, warnings) for index, (_, value) in enumerate(found.objects)
    )
    visible = _strip_spans(text, found.spans)
    return _partition(calls, normal_names, exit_names, visible, text, "fallback",
                      tuple(warnings), failure=found.problem)


def _fenced_calls(text: str, known: frozenset[str], found: _Found) -> str:
    """Calls in fenced code blocks; the text with those blocks blanked out."""
    masked: list[str] | None = None
    for match in _FENCE.finditer(text):
        body = match.group(2).strip()
        if not body or body[0] not in "{[":
            continue
        try:
            value = json.loads(body)
        except (ValueError, RecursionError) as e:
            if _TOOLISH_ANYWHERE.search(body) and found.problem is None:
                found.problem = f"tool call in code block is not valid JSON ({e})"
            continue
        calls = [v for v in _as_list(value) if _is_tool_object(v, known)]
        if calls:
            for call in calls:
                found.add(match.start(), call, (match.start(), match.end()))
            if masked is None:
                masked = list(text)
            masked[match.start():match.end()] = " " * (match.end() - match.start())
    return "".join(masked) if masked is not None else text


def _bare_array(scan: str, known: frozenset[str], found: _Found) -> str:
    """An array of calls making the whole answer, or its end from a line starting with
    ``[`` on (text, then the calls: how the history records several calls); that part
    blanked out if it is one."""
    stripped = scan.lstrip()
    start = len(scan) - len(stripped) if stripped.startswith("[") else scan.find("\n[") + 1
    if start <= 0 and not stripped.startswith("["):
        return scan
    try:
        value = json.loads(scan[start:])
    except (ValueError, RecursionError):
        return scan
    items = _as_list(value)
    calls = [v for v in items if _is_tool_object(v, known)]
    if not calls or len(calls) != len(items):
        return scan
    for call in calls:
        found.add(start, call, (start, len(scan)))
    return scan[:start] + " " * (len(scan) - start)


def _objects_anywhere(scan: str, known: frozenset[str], found: _Found) -> None:
    """Call objects anywhere in the text: a bare object, a JSON line, inside prose."""
    position = scan.find("{")
    failures = 0
    while position != -1:
        try:
            value, end = _decoder.raw_decode(scan, position)
        except (ValueError, RecursionError) as e:
            if found.problem is None and _TOOLISH_START.match(scan, position):
                found.problem = _describe_bad_json(scan, position, e)
            failures += 1
            if failures > _MAX_SCAN_FAILURES:
                return
            position = scan.find("{", position + 1)
            continue
        if isinstance(value, dict) and _is_tool_object(value, known):
            found.add(position, value, (position, end))
        position = scan.find("{", end)


def _as_list(value: object) -> list[Any]:
    if isinstance(value, list):
        return value
    if value is None:
        return []
    return [value]


def _is_tool_object(value: object, known: frozenset[str]) -> bool:
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("tool"), str):
        return True
    name = value.get("name")
    if isinstance(name, str):
        return name in known or any(k in value for k in _ARGUMENT_KEYS)
    function = value.get("function")
    return isinstance(function, dict) and isinstance(function.get("name"), str)


def _fallback_call(value: JSONObject, index: int, warnings: list[str]) -> ToolCall:
    function = value.get("function")
    if isinstance(function, dict) and not isinstance(value.get("tool"), str):
        # {"type": "function", "function": {"name": ..., "arguments": ...}}
        merged = dict(function)
        if "reasoning" in value:
            merged.setdefault("reasoning", value["reasoning"])
        value = merged
    name = value.get("tool")
    if not isinstance(name, str):
        name = value.get("name")
    name = name.strip() if isinstance(name, str) else ""
    reasoning = value.get("reasoning")
    for key in _ARGUMENT_KEYS:
        if key in value:
            arguments, raw, problem = decode_arguments(value[key])
            break
    else:
        extra = {k: v for k, v in value.items() if k not in _META_KEYS}
        arguments, raw, problem = decode_arguments(extra)
        if extra:
            warnings.append(
                f"tool '{name}': parameters were placed at the top level of the call; "
                f"auto-corrected to {sorted(extra)}"
            )
    return ToolCall(
        id=f"fallback_{index}",
        name=name,
        arguments=arguments,
        raw_arguments=raw,
        reasoning=reasoning if isinstance(reasoning, str) else None,
        native=False,
        arguments_error=problem,
    )


def _describe_bad_json(text: str, position: int, error: BaseException) -> str:
    tail = text[position:]
    message = str(error)
    pos = getattr(error, "pos", None)
    cut_off = (
        message.startswith("Unterminated string")
        or tail.count("{") > tail.count("}")
        or (isinstance(pos, int) and pos >= len(text.rstrip()))
    )
    if cut_off:
        return "tool call JSON is cut off (truncated output)"
    return f"tool call is not valid JSON ({message})"


def _strip_spans(text: str, spans: list[tuple[int, int]]) -> str:
    pieces = []
    cursor = 0
    for start, end in sorted(set(spans)):
        if start < cursor:
            continue
        pieces.append(text[cursor:start])
        cursor = end
    pieces.append(text[cursor:])
    visible = "".join(pieces)
    visible = "\n".join(line.rstrip() for line in visible.split("\n"))
    return _BLANK_RUNS.sub("\n\n", visible).strip()
