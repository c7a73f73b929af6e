"""The game's MCP server inside Evennia: sessions act as a named character on real objects."""

from __future__ import annotations

import json
from typing import Any

from django.test import override_settings
from twisted.internet import task

from ai_tools.contrib.evennia.mcp_server import McpListener, parse_mcp_setting
from ai_tools.contrib.evennia.service import EvenniaAssistantHost, build_service, serve_mcp
from ai_tools.contrib.evennia.store import ScriptStore
from ai_tools.contrib.evennia.tests.base import ContribTestBase, ScriptedLLM, settle
from ai_tools.errors import ConfigError
from ai_tools.mcp.game_tools import game_server
from ai_tools.mcp.jsonrpc import Request
from ai_tools.mcp.serve_config import McpServeConfig
from ai_tools.store.memory import MemoryStore


class TestMcpServerInEvennia(ContribTestBase):
    """The same MCP server as the standalone service's, on Evennia's world."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = task.Clock()
        self.service = build_service(self.clock, llm=ScriptedLLM(),
                                     store=ScriptStore(MemoryStore(clock=self.clock)))

    def mcp_session(self, character: Any, **options: Any) -> Any:
        config = McpServeConfig(character=character.dbref, **options)
        server = game_server(config, self.service, self.service.world, self.clock)
        session = server.open_session(lambda message, related: None)
        session.receive(Request(0, "initialize", {"protocolVersion": "2025-11-25"}))
        return session

    def call(self, session: Any, tool: str, /, **arguments: Any) -> dict[str, Any]:
        answer = session.receive(Request(1, "tools/call", {"name": tool,
                                                           "arguments": arguments}))
        result: dict[str, Any] = settle(self.clock, answer).result
        return result

    def test_a_session_looks_around_as_its_character(self) -> None:
        """inspect_location runs as char1, in room1, through the execution engine."""
        result = self.call(self.mcp_session(self.char1), "inspect_location")
        self.assertFalse(result["isError"], result)
        self.assertIn(self.room1.key, json.loads(result["content"][0]["text"])
                      ["location"]["key"])

    def test_the_characters_permissions_apply(self) -> None:
        """With dangerous tools allowed, char2 (no rights) is refused what char1 may do."""
        refused = self.call(self.mcp_session(self.char2, allow_dangerous=True), "set_attribute",
                            object=self.obj1.dbref, name="fuel", value=3)
        self.assertTrue(refused["isError"], refused)
        self.assertIn("permission", refused["content"][0]["text"].lower())
        allowed = self.call(self.mcp_session(self.char1, allow_dangerous=True), "set_attribute",
                            object=self.obj1.dbref, name="fuel", value=3)
        self.assertFalse(allowed["isError"], allowed)
        self.assertEqual(self.obj1.db.fuel, 3)

    def test_dangerous_tools_are_not_offered_by_default(self) -> None:
        session = self.mcp_session(self.char1)
        listed = session.receive(Request(2, "tools/list")).result["tools"]
        names = {tool["name"] for tool in listed}
        self.assertIn("inspect_location", names)
        self.assertNotIn("set_attribute", names)

    def test_the_setting_is_checked(self) -> None:
        self.assertIsNone(parse_mcp_setting(None))
        checked = parse_mcp_setting({"character": "#5", "port": 0})
        assert checked is not None
        self.assertEqual(checked.endpoint, "tcp:0:interface=127.0.0.1")
        with self.assertRaisesRegex(ConfigError, "needs a token"):
            parse_mcp_setting({"character": "#5", "interface": "0.0.0.0"})
        with self.assertRaisesRegex(ConfigError, "at least 16"):
            parse_mcp_setting({"character": "#5", "token_env": "T"}, environ={"T": "short"})
        with self.assertRaisesRegex(ConfigError, "character"):
            parse_mcp_setting({"port": 4010})

    def test_the_host_serves_mcp_when_the_setting_names_a_character(self) -> None:
        host = EvenniaAssistantHost(self.service, clock=self.clock)
        self.assertIsNone(serve_mcp(host))
        with override_settings(AI_TOOLS_MCP_SERVE={"character": self.char1.dbref, "port": 0}):
            listener = serve_mcp(host)
        self.assertIsInstance(listener, McpListener)
        self.assertIn(listener, list(host))

    def test_a_port_in_use_leaves_the_game_running(self) -> None:
        """The MCP door cannot open: logged; the host (and the Server) start regardless."""
        import socket

        from ai_tools.contrib.evennia.mcp_server import mcp_listener

        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            port = taken.getsockname()[1]
            settings_mcp = parse_mcp_setting({"character": self.char1.dbref, "port": port})
            assert settings_mcp is not None
            from twisted.internet import reactor

            listener = mcp_listener(self.service, settings_mcp, reactor)
            listener.startService()
            self.assertFalse(listener.running)
