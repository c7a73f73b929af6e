"""The MCP conformance suite's "everything" fixture, served by ai_tools' own MCP server.

The server scenarios of ``@modelcontextprotocol/conformance`` call tools,
resources and prompts of agreed names (``test_simple_text``,
``test://static-text``, ``test_simple_prompt``...).  This script serves them
through :mod:`ai_tools.mcp.server` and :mod:`ai_tools.mcp.server_http` (the
protocol and the transport the game's ``/mcp`` uses), so the suite tests our
implementation::

    python scripts/mcp/everything_server.py --port 0 --port-file PATH

It listens on 127.0.0.1 only, at ``/mcp``; with ``--port 0`` it picks a free
port and writes it to ``--port-file``.  ``make mcp-conformance-server`` runs it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from twisted.internet import defer, task
from twisted.web.resource import Resource

from ai_tools.mcp.jsonrpc import INVALID_PARAMS, JSONRPCError
from ai_tools.mcp.server import McpServer, RequestContext, ServerFeatures, ServerInfo
from ai_tools.mcp.server_http import McpHttpEndpoint, McpResource
from ai_tools.web.api import ApiSite
from ai_tools.web.origin import OriginPolicy

IMAGE = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAAB"
         "JRU5ErkJggg==")
AUDIO = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _result(*content: dict[str, Any], error: bool = False) -> dict[str, Any]:
    return {"content": list(content), "isError": error}


def _string_args(*names: str) -> dict[str, Any]:
    return {"type": "object", "properties": {n: {"type": "string"} for n in names},
            "required": list(names)}


SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                          "properties": {"street": {"type": "string"},
                                         "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
                   "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                   "phone": {"type": "string"}, "email": {"type": "string"}},
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

DEFAULTS_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe", "description": "User name"},
        "age": {"type": "integer", "default": 30, "description": "User age"},
        "score": {"type": "number", "default": 95.5, "description": "User score"},
        "status": {"type": "string", "default": "active", "description": "User status",
                   "enum": ["active", "inactive", "pending"]},
        "verified": {"type": "boolean", "default": True, "description": "Verification status"},
    },
}

ENUMS_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "description": "Simple enum without titles",
                           "enum": ["active", "inactive", "pending"]},
        "titledSingle": {"type": "string", "description": "Enum with titled options (oneOf)",
                         "oneOf": [{"const": "low", "title": "Low Priority"},
                                   {"const": "medium", "title": "Medium Priority"},
                                   {"const": "high", "title": "High Priority"}]},
        "untitledMulti": {"type": "array", "description": "Multi-select without titles",
                          "items": {"type": "string", "enum": ["read", "write", "execute"]}},
        "titledMulti": {"type": "array", "description": "Multi-select with titled options",
                        "items": {"anyOf": [{"const": "feature", "title": "New Feature"},
                                            {"const": "bug", "title": "Bug Fix"},
                                            {"const": "docs", "title": "Documentation"}]}},
        "legacyEnum": {"type": "string", "description": "Legacy enum with enumNames",
                       "enum": ["small", "medium", "large"],
                       "enumNames": ["Small Size", "Medium Size", "Large Size"]},
    },
    "required": ["untitledSingle", "titledSingle", "untitledMulti", "titledMulti",
                 "legacyEnum"],
}


class EverythingTools:
    """The fixture's tools (what each scenario calls)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.tools: dict[str, tuple[str, dict[str, Any], Any]] = {
            "test_simple_text": ("Tests simple text content response", NO_ARGS,
                                 self._simple_text),
            "test_image_content": ("Tests image content response", NO_ARGS, self._image),
            "test_audio_content": ("Tests audio content response", NO_ARGS, self._audio),
            "test_embedded_resource": ("Tests embedded resource content response", NO_ARGS,
                                       self._embedded),
            "test_multiple_content_types": ("Tests response with multiple content types",
                                            NO_ARGS, self._mixed),
            "test_tool_with_logging": ("Tests tool that emits log messages", NO_ARGS,
                                       self._logging),
            "test_tool_with_progress": ("Tests tool that reports progress notifications",
                                        NO_ARGS, self._progress),
            "test_sampling": ("Tests server-initiated sampling", _string_args("prompt"),
                              self._sampling),
            "test_elicitation": ("Tests server-initiated elicitation",
                                 _string_args("message"), self._elicitation),
            "test_elicitation_sep1034_defaults": ("Tests elicitation with default values",
                                                  NO_ARGS, self._elicit_defaults),
            "test_elicitation_sep1330_enums": ("Tests elicitation with enum schemas",
                                               NO_ARGS, self._elicit_enums),
            "test_error_handling": ("Tests error response handling", NO_ARGS, self._error),
            "test_reconnection": ("Tests SSE polling by closing the stream mid-call",
                                  NO_ARGS, self._reconnection),
            "json_schema_2020_12_tool": ("Tool with JSON Schema 2020-12 features",
                                         SCHEMA_2020_12, self._schema_tool),
        }

    def list_tools(self) -> list[dict[str, Any]]:
        """Every fixture tool."""
        return [{"name": name, "description": description, "inputSchema": schema}
                for name, (description, schema, _) in self.tools.items()]

    def call_tool(self, name: str, arguments: dict[str, Any], context: RequestContext) -> Any:
        """Run one fixture tool."""
        entry = self.tools.get(name)
        if entry is None:
            raise JSONRPCError(INVALID_PARAMS, f"Unknown tool: {name}")
        return entry[2](arguments, context)

    def _sleep(self, seconds: float) -> defer.Deferred[None]:
        return task.deferLater(self.clock, seconds, lambda: None)

    def _simple_text(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        return _result(_text("This is a simple text response for testing."))

    def _image(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        return _result({"type": "image", "data": IMAGE, "mimeType": "image/png"})

    def _audio(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        return _result({"type": "audio", "data": AUDIO, "mimeType": "audio/wav"})

    def _embedded(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        return _result({"type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain",
            "text": "This is an embedded resource content."}})

    def _mixed(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        return _result(_text("Multiple content types test:"),
                       {"type": "image", "data": IMAGE, "mimeType": "image/png"},
                       {"type": "resource", "resource": {
                           "uri": "test://mixed-content-resource",
                           "mimeType": "application/json",
                           "text": '{"test": "data", "value": 123}'}})

    @defer.inlineCallbacks
    def _logging(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        context.log("info", "Tool execution started")
        yield self._sleep(0.05)
        context.log("info", "Tool processing data")
        yield self._sleep(0.05)
        context.log("info", "Tool execution completed")
        return _result(_text("Tool with logging executed successfully"))

    @defer.inlineCallbacks
    def _progress(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        for step in (0, 50, 100):
            context.progress(step, 100, f"Completed step {step} of 100")
            if step < 100:
                yield self._sleep(0.05)
        return _result(_text(str(context.progress_token or 0)))

    @defer.inlineCallbacks
    def _sampling(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        answer = yield context.request("sampling/createMessage", {
            "messages": [{"role": "user", "content": _text(str(arguments.get("prompt")))}],
            "maxTokens": 100})
        content = answer.get("content")
        text = content.get("text") if isinstance(content, Mapping) else None
        return _result(_text(f"LLM response: {text if text is not None else 'No response'}"))

    def _elicitation(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        schema = {"type": "object", "properties": {"response": {
            "type": "string", "description": "User's response"}}, "required": ["response"]}
        return _elicit(context, str(arguments.get("message")), schema, "User response")

    def _elicit_defaults(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        return _elicit(context, "Please provide user information", DEFAULTS_SCHEMA,
                       "Elicitation result")

    def _elicit_enums(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        return _elicit(context, "Please select values using different enum schema types",
                       ENUMS_SCHEMA, "Elicitation completed")

    def _error(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        return _result(_text("This tool intentionally returns an error for testing"),
                       error=True)

    @defer.inlineCallbacks
    def _reconnection(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        context.log("info", "Before disconnect")
        context.close_stream()
        yield self._sleep(0.2)
        context.log("info", "After reconnect")
        return _result(_text("Reconnection test completed"))

    def _schema_tool(self, arguments: dict[str, Any], context: RequestContext) -> Any:
        return _result(_text(json.dumps(arguments, sort_keys=True)))


@defer.inlineCallbacks
def _elicit(context: RequestContext, message: str, schema: dict[str, Any], prefix: str) -> Any:
    answer = yield context.request("elicitation/create",
                                   {"message": message, "requestedSchema": schema})
    action = answer.get("action")
    content = answer.get("content") if action == "accept" else {}
    return _result(_text(f"{prefix}: action={action}, content={json.dumps(content or {})}"))


class EverythingResources:
    """The fixture's resources."""

    watched = "Watched resource content"

    def list_resources(self) -> list[dict[str, Any]]:
        """The fixed resources."""
        return [
            {"uri": "test://static-text", "name": "static-text", "mimeType": "text/plain",
             "description": "A static text resource for testing"},
            {"uri": "test://static-binary", "name": "static-binary", "mimeType": "image/png",
             "description": "A static binary resource (image) for testing"},
            {"uri": "test://watched-resource", "name": "watched-resource",
             "mimeType": "text/plain", "description": "A resource one can subscribe to"},
        ]

    def list_templates(self) -> list[dict[str, Any]]:
        """The one template."""
        return [{"uriTemplate": "test://template/{id}/data", "name": "template",
                 "mimeType": "application/json",
                 "description": "A resource template with parameter substitution"}]

    def read(self, uri: str) -> list[dict[str, Any]]:
        """One resource's contents."""
        if uri == "test://static-text":
            return [{"uri": uri, "mimeType": "text/plain",
                     "text": "This is the content of the static text resource."}]
        if uri == "test://static-binary":
            return [{"uri": uri, "mimeType": "image/png", "blob": IMAGE}]
        if uri == "test://watched-resource":
            return [{"uri": uri, "mimeType": "text/plain", "text": self.watched}]
        prefix, suffix = "test://template/", "/data"
        if uri.startswith(prefix) and uri.endswith(suffix) and len(uri) > len(prefix + suffix):
            item = uri[len(prefix):-len(suffix)]
            return [{"uri": uri, "mimeType": "application/json", "text": json.dumps(
                {"id": item, "templateTest": True, "data": f"Data for ID: {item}"})}]
        raise JSONRPCError(-32002, f"Resource not found: {uri}", {"uri": uri})


class EverythingPrompts:
    """The fixture's prompts."""

    def list_prompts(self) -> list[dict[str, Any]]:
        """The four prompts."""
        def arg(name: str) -> dict[str, Any]:
            return {"name": name, "required": True}
        return [
            {"name": "test_simple_prompt", "description": "A simple prompt without arguments"},
            {"name": "test_prompt_with_arguments", "description": "A prompt with arguments",
             "arguments": [arg("arg1"), arg("arg2")]},
            {"name": "test_prompt_with_embedded_resource",
             "description": "A prompt that includes an embedded resource",
             "arguments": [arg("resourceUri")]},
            {"name": "test_prompt_with_image", "description": "A prompt with an image"},
        ]

    def get_prompt(self, name: str, arguments: Mapping[str, str]) -> dict[str, Any]:
        """One prompt's messages."""
        def user(content: dict[str, Any]) -> dict[str, Any]:
            return {"role": "user", "content": content}
        if name == "test_simple_prompt":
            messages = [user(_text("This is a simple prompt for testing."))]
        elif name == "test_prompt_with_arguments":
            messages = [user(_text(f"Prompt with arguments: arg1='{arguments.get('arg1')}', "
                                   f"arg2='{arguments.get('arg2')}'"))]
        elif name == "test_prompt_with_embedded_resource":
            messages = [user({"type": "resource", "resource": {
                "uri": arguments.get("resourceUri", ""), "mimeType": "text/plain",
                "text": "Embedded resource content for testing."}}),
                user(_text("Please process the embedded resource above."))]
        elif name == "test_prompt_with_image":
            messages = [user({"type": "image", "data": IMAGE, "mimeType": "image/png"}),
                        user(_text("Please analyze the image above."))]
        else:
            raise JSONRPCError(INVALID_PARAMS, f"Unknown prompt: {name}")
        return {"messages": messages}


def build_site(reactor: Any) -> tuple[Any, OriginPolicy]:
    """The fixture's site (``/mcp``) and its Host/Origin policy (bind it once listening)."""
    features = ServerFeatures(tools=EverythingTools(reactor), resources=EverythingResources(),
                              prompts=EverythingPrompts(), subscribe=True,
                              complete=lambda params: {"values": [], "total": 0,
                                                       "hasMore": False})
    server = McpServer(features, reactor, ServerInfo(name="ai_tools-conformance-fixture",
                                                     version="1"), request_timeout=60.0)
    policy = OriginPolicy()
    root = Resource()
    root.putChild(b"mcp", McpResource(McpHttpEndpoint(server, reactor), policy))
    return ApiSite(root, max_body=1 << 20, clock=reactor), policy  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    """Serve the fixture until interrupted."""
    from twisted.internet import reactor

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=3001)
    parser.add_argument("--port-file", default=None)
    args = parser.parse_args(argv)
    site, policy = build_site(reactor)
    port = reactor.listenTCP(args.port, site, interface="127.0.0.1")  # type: ignore[attr-defined]
    policy.bind(port.getHost())
    number = port.getHost().port
    if args.port_file:
        with open(args.port_file, "w") as f:
            f.write(f"{number}\n")
    print(f"MCP conformance fixture on http://127.0.0.1:{number}/mcp", file=sys.stderr)
    reactor.run()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
