"""The game's tools as MCP tools: the registry offered to MCP clients, run as a character.

:class:`GameTools` is the :class:`~ai_tools.mcp.server.ToolProvider` of the
game's MCP server.  ``tools/list`` shows the registry's tools the gate allows,
with their full JSON Schema and annotations derived from their category
(:func:`annotations_for`).  ``tools/call`` goes through the one execution path
(:func:`~ai_tools.execution.engine.execute_tool_call`): the same validation,
gate, timeout, retries, cache and kill as an assistant's own calls, acting as
the configured character (the world applies that character's permissions).
Each call is recorded like an assistant's: the history (kept, bounded, under
the server's name) and the ``tool_call`` / ``tool_result`` events every
observer of the service sees (the event stream, the console, the logs).
Cancelling the call (``notifications/cancelled``, a closed session) kills it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ai_tools.default_reactor import or_global_reactor
from ai_tools.execution.cache import ToolCache
from ai_tools.execution.engine import ExecutionContext, ExecutionState, execute_tool_call
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.outcome import ToolCallOutcome
from ai_tools.execution.results import CLIPPED_KEY, clip_arguments, clip_text
from ai_tools.json_encoding import model_json
from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.llm.events import ToolCall
from ai_tools.loop.config import GatePolicy
from ai_tools.loop.state import EVENT_TEXT_BYTES
from ai_tools.mcp.jsonrpc import INVALID_PARAMS, JSONRPCError
from ai_tools.mcp.serve_config import McpServeConfig
from ai_tools.mcp.server import McpServer, RequestContext, ServerFeatures, ServerInfo
from ai_tools.mcp.tracing import ServerTracing
from ai_tools.tools.base import Actor, Tool, ToolCategory
from ai_tools.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from ai_tools.interfaces import IStore, IWorld
    from ai_tools.service.service import AssistantService

__all__ = ["GameTools", "annotations_for", "game_server", "game_tools", "mcp_tool"]

Publish = Callable[[str, dict[str, object]], None]

log = Logger()


def annotations_for(tool: Tool) -> JSONObject:
    """MCP tool annotations from the tool's category.

    DANGEROUS tools change the world significantly: ``destructiveHint``.  A
    cacheable SAFE_CHAIN tool only reads (its results can be reused):
    ``readOnlyHint`` and ``idempotentHint``.  Other tools write without
    destroying (memories, speech).  Every tool acts on the game's own world
    (and its store), never on the open internet: ``openWorldHint`` is false.
    """
    category = tool.category
    read_only = category is ToolCategory.SAFE_CHAIN and tool.cacheable
    return {
        "title": tool.name.replace("_", " "),
        "readOnlyHint": read_only,
        "destructiveHint": category is ToolCategory.DANGEROUS,
        "idempotentHint": read_only,
        "openWorldHint": False,
    }


def _event_arguments(call: ToolCall) -> dict[str, object]:
    """The call's arguments for the ``tool_call`` event, clipped as the loop's events are."""
    try:
        clipped = clip_arguments(call.arguments_json, EVENT_TEXT_BYTES)
    except (TypeError, ValueError, RecursionError):  # not plain JSON: the engine refuses it
        return {CLIPPED_KEY: "[arguments that are not plain JSON]"}
    return dict(call.arguments) if clipped is None else clipped


def _output_schema(tool: Tool) -> JSONObject | None:
    schema = getattr(tool, "output_schema", None)
    return schema if isinstance(schema, dict) and schema.get("type") == "object" else None


def mcp_tool(tool: Tool) -> JSONObject:
    """The MCP ``Tool`` object of one registry tool (its full schema, not the model's view)."""
    entry: JSONObject = {"name": tool.name, "description": tool.description,
                             "inputSchema": tool.parameters,
                             "annotations": annotations_for(tool)}
    output = _output_schema(tool)
    if output is not None:
        entry["outputSchema"] = output
    return entry


@attrs.define(eq=False)
class GameTools:
    """The registry's tools for MCP sessions, acting as ``actor``'s character.

    ``name`` is what the audit trail calls this actor (events, the cache
    namespace); ``publish(name, event)`` hands events to the service's
    observers.
    """

    registry: ToolRegistry
    actor: Actor
    clock: IReactorTime
    gate: GatePolicy
    name: str = "mcp"
    cache: ToolCache | None = None
    publish: Publish | None = None
    history_limit: int = 200
    halted: Callable[[], bool] | None = None
    """Whether the operator stopped everything (an emergency stop of every assistant):
    then no MCP call runs either, as no assistant's would (None: never)."""
    history: ConversationHistory = attrs.field(factory=ConversationHistory)
    state: ExecutionState = attrs.field(factory=ExecutionState)
    _calls: int = attrs.field(default=0, init=False)

    def offered(self) -> list[Tool]:
        """The tools MCP sessions may use: those the gate allows, but not those that work
        on an assistant's own loop (sleep, delegation, its prompt): a session is none."""
        return [t for t in self.registry.get_all_tools()
                if self.gate.allows(t.name, t.category)
                and not getattr(t, "needs_assistant", False)]

    def list_tools(self) -> list[JSONObject]:
        """``tools/list``."""
        return [mcp_tool(tool) for tool in self.offered()]

    def call_tool(self, name: str, arguments: JSONObject, context: RequestContext
                  ) -> JSONObject | defer.Deferred[JSONObject]:
        """``tools/call``: the engine's one path; a Deferred of the ``CallToolResult``."""
        tool = self.registry.get_tool(name)
        if tool is None or getattr(tool, "needs_assistant", False):
            raise JSONRPCError(INVALID_PARAMS, f"Unknown tool: {name}")
        if self.halted is not None and self.halted():
            log.info("MCP call: {tool} by {server} refused: emergency stop", tool=name,
                     server=self.name)
            return {"content": [{"type": "text", "text": model_json({
                "success": False, "status": "emergency_stopped",
                "error": "the operator stopped everything (emergency stop); no tool runs "
                         "until it is cleared"})}], "isError": True}
        self._calls += 1
        call = ToolCall(id=f"mcp_{context.session.number}_{self._calls}", name=name,
                        arguments=arguments)
        client = context.session.client_info.get("name")
        self._emit("tool_call", tool=name, tool_call_id=call.id,
                   arguments=_event_arguments(call), category=tool.category.value,
                   source="mcp", client=client)
        context.progress(0, None, f"running {name}")
        actor = Actor(self.actor.character_id, world=self.actor.world, store=self.actor.store)
        execution = ExecutionContext(registry=self.registry, actor=actor, history=self.history,
                                     clock=self.clock, cache=self.cache, cache_namespace=self.name,
                                     state=self.state, gate=self.gate)
        traced = context.trace.execute_tool(name, call.id) if context.trace else None
        return execute_tool_call(execution, call).addCallback(self._answer, tool, traced)

    def _answer(self, outcome: ToolCallOutcome, tool: Tool,
                traced: Callable[[JSONMapping], None] | None = None) -> JSONObject:
        """The outcome as a ``CallToolResult``; the history trimmed; the event sent (and
        the call's ``execute_tool`` span closed with it, tracing on)."""
        result = outcome.result
        error = result.get("error")
        event: dict[str, object] = {
            "type": "tool_result", "tool": tool.name, "tool_call_id": outcome.tool_call_id,
            "status": str(outcome.status), "success": outcome.success,
            "duration_ms": outcome.duration_ms, "from_cache": outcome.from_cache,
            "error": clip_text(error, EVENT_TEXT_BYTES) if isinstance(error, str) else None,
            "source": "mcp"}
        if self.publish is not None:
            self.publish(self.name, event)
        if traced is not None:
            traced(event)
        # The audit line of an MCP call, at info: a call from outside has no loop whose one
        # line would tell it (the engine's per-call lines are at debug).
        log.info("MCP call: {tool} by {server} as {character}: {status} in {ms:.0f} ms",
                 tool=tool.name, server=self.name, character=self.actor.character_id,
                 status=str(outcome.status), ms=outcome.duration_ms)
        self._trim_history()
        text = None
        if outcome.history_entries:
            text = outcome.history_entries[1].get("content")
        if not isinstance(text, str):
            text = model_json(result)
        answer: JSONObject = {"content": [{"type": "text", "text": text}],
                                  "isError": not outcome.success}
        if outcome.success and _output_schema(tool) is not None:
            answer["structuredContent"] = cast(JSONValue, result)
        return answer

    def _trim_history(self) -> None:
        """Keep the newest ``history_limit`` messages (whole exchanges: an even count)."""
        limit = self.history_limit - self.history_limit % 2
        if len(self.history) > limit:
            self.history.replace(self.history.messages[-limit:] if limit else [])

    def _emit(self, kind: str, **fields: object) -> None:
        if self.publish is not None:
            self.publish(self.name, {"type": kind, **fields})


def game_tools(config: McpServeConfig, registry: ToolRegistry, *, world: IWorld | None,
               store: IStore | None, clock: IReactorTime, cache: ToolCache | None = None,
               publish: Publish | None = None,
               halted: Callable[[], bool] | None = None) -> GameTools:
    """The game's tools for ``[mcp.serve]``: its character, gate and audit name;
    ``halted`` says whether an emergency stop of everything holds."""
    gate = GatePolicy(allowed_categories=config.allowed_categories(),
                      allowed_names=config.tools)
    return GameTools(registry=registry, actor=Actor(config.character, world=world, store=store),
                     clock=clock, gate=gate, name=config.name, cache=cache, publish=publish,
                     history_limit=config.history_limit, halted=halted)


def game_server(config: McpServeConfig, service: AssistantService, world: IWorld | None,
                clock: IReactorTime | None) -> McpServer:
    """The game's MCP server for ``[mcp.serve]``: the service's registry, store and cache,
    its observers for the audit events, acting as the configured character."""
    from ai_tools import __version__

    clock = or_global_reactor(clock)
    tools = game_tools(config, service.registry, world=world, store=service.store,
                       clock=clock, cache=service.cache, publish=service.publish,
                       halted=lambda: service.everything_stopped)
    instructions = (f"You act in a game world as the character {config.character!r}, with its "
                    "permissions. Read the tools' descriptions; destructiveHint marks tools "
                    "that change the world for good.")
    info = ServerInfo(name="ai_tools", version=__version__, title="ai_tools game",
                      instructions=instructions)
    return McpServer(ServerFeatures(tools=tools), clock, info,
                     request_timeout=config.request_timeout, tracing=_tracing_of(service))


def _tracing_of(service: AssistantService) -> Callable[[], ServerTracing | None]:
    """SERVER spans when the service traces (its telemetry, found when it starts)."""
    def tracing() -> ServerTracing | None:
        telemetry = service.telemetry
        return None if telemetry is None else telemetry.mcp_server_tracing()

    return tracing
