"""The Model Context Protocol, both ways, on the reactor.

:mod:`ai_tools.mcp.jsonrpc` holds what both directions share: the JSON-RPC 2.0
messages MCP is made of, their parsing with byte bounds, the error codes and the
protocol versions this project speaks.
"""
