"""The OpenTelemetry names this package writes: GenAI semantic conventions, pinned.

We follow the **OpenTelemetry semantic conventions v1.38.0**, GenAI part (the
``gen_ai.*`` registry, spans and metrics; still "development" status there).
Names are written out here rather than imported from
``opentelemetry-semantic-conventions``, whose GenAI module moves between
releases: what a trace of ai_tools carries changes only when this file does
(``docs/observability.md`` lists it).  Names of our own start with ``ai_tools.``.
"""

from __future__ import annotations

from typing import Final

SEMCONV_VERSION: Final = "1.38.0"
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
INSTRUMENTATION_NAME: Final = "ai_tools"

# -- operations (span names are "{operation} {target}")
INVOKE_AGENT: Final = "invoke_agent"
CHAT: Final = "chat"
EXECUTE_TOOL: Final = "execute_tool"

# -- gen_ai.* attributes
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
AGENT_NAME: Final = "gen_ai.agent.name"
AGENT_ID: Final = "gen_ai.agent.id"
REQUEST_MODEL: Final = "gen_ai.request.model"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
TOKEN_TYPE: Final = "gen_ai.token.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"
RESEND_COUNT: Final = "http.request.resend_count"

PROVIDER_OPENAI: Final = "openai"
"""Every model server ai_tools talks to speaks the OpenAI chat-completions API."""

# -- metrics
TOKEN_USAGE: Final = "gen_ai.client.token.usage"
OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
TOKEN_BUCKETS: Final = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576,
                        4194304, 16777216, 67108864)
"""The bucket boundaries the conventions advise for ``gen_ai.client.token.usage``."""
DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12,
                           10.24, 20.48, 40.96, 81.92)
"""... and for ``gen_ai.client.operation.duration`` (seconds)."""

# -- ours
TERMINATION_REASON: Final = "ai_tools.loop.termination_reason"
ITERATIONS: Final = "ai_tools.loop.iterations"
EVENTS_RETURNED: Final = "ai_tools.loop.events_returned"
SUBAGENT_TASK: Final = "ai_tools.subagent.task_id"
TICK: Final = "ai_tools.tick"
"""The assistant's tick the loop ran in (its number)."""
CONTEXT_TYPE: Final = "ai_tools.loop.context"
REFLECTION: Final = "ai_tools.loop.reflection"
MODEL_PROFILE: Final = "ai_tools.model.profile"
MODEL_ATTEMPTS: Final = "ai_tools.model.attempts"
TOOL_CATEGORY: Final = "ai_tools.tool.category"
TOOL_STATUS: Final = "ai_tools.tool.status"
TOOL_FROM_CACHE: Final = "ai_tools.tool.from_cache"
TOOL_ATTEMPTS: Final = "ai_tools.tool.attempts"
TOOL_TIMED_OUT: Final = "ai_tools.tool.timed_out"
TOOL_REFUSED: Final = "ai_tools.tool.refused"
TOOL_SKIPPED: Final = "ai_tools.tool.skipped"
ATTEMPT_EVENT: Final = "ai_tools.model.attempt"
SIGNAL_EVENT: Final = "ai_tools.signal"

# -- MCP (the conventions' ``gen-ai/mcp`` page, which first appeared in v1.39.0)
MCP_SEMCONV_VERSION: Final = "1.39.0"
"""The version of the MCP page followed (its names are the same in the newer pages)."""
MCP_METHOD_NAME: Final = "mcp.method.name"
MCP_SESSION_ID: Final = "mcp.session.id"
MCP_PROTOCOL_VERSION: Final = "mcp.protocol.version"
JSONRPC_REQUEST_ID: Final = "jsonrpc.request.id"
RPC_RESPONSE_STATUS_CODE: Final = "rpc.response.status_code"
NETWORK_TRANSPORT: Final = "network.transport"
NETWORK_PROTOCOL_NAME: Final = "network.protocol.name"
CLIENT_ADDRESS: Final = "client.address"
CLIENT_PORT: Final = "client.port"
MCP_CLIENT_DURATION: Final = "mcp.client.operation.duration"
MCP_SERVER_DURATION: Final = "mcp.server.operation.duration"
MCP_DURATION_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
"""The bucket boundaries the MCP page advises for both operation durations (seconds)."""
TOOL_ERROR: Final = "tool_error"
"""``error.type`` of a ``CallToolResult`` with ``isError`` (the MCP page's value)."""

CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The standard opt-in for message contents on spans (off unless ``true``)."""
