"""``AI_TOOLS_MCP_SERVERS``: the game's settings give the host the MCP servers its
assistants may use, kept connected beside the AssistantService on the game's reactor."""

from __future__ import annotations

from django.test import override_settings
from evennia.utils.test_resources import EvenniaCommandTestMixin
from twisted.internet import task

from ai_tools.contrib.evennia.service import EvenniaAssistantHost, build_service
from ai_tools.contrib.evennia.store import ScriptStore
from ai_tools.contrib.evennia.tests.base import ContribTestBase, ScriptedLLM, settle
from ai_tools.errors import ConfigError
from ai_tools.store.memory import MemoryStore

MISSING = {"dice": {"command": "ai-tools-no-such-mcp-server", "timeout": 5, "prefix": "dice_"}}


class TestMcpSettings(ContribTestBase):
    """The setting is read when the host is built, checked, and wired into the service."""

    def host(self) -> EvenniaAssistantHost:
        clock = task.Clock()
        self.clock = clock
        service = build_service(clock, llm=ScriptedLLM(()),
                                store=ScriptStore(MemoryStore(clock=clock)))
        return EvenniaAssistantHost(service, clock=clock)

    def test_no_servers_by_default(self) -> None:
        host = self.host()
        self.assertIsNone(host.mcp_client)
        self.assertIsNone(host.service.tool_sources)

    @override_settings(AI_TOOLS_MCP_SERVERS=MISSING)
    def test_a_server_that_cannot_start_is_retried_and_its_tools_withheld(self) -> None:
        host = self.host()
        self.assertIs(host.service.tool_sources, host.mcp_client)
        host.startService()
        try:
            connection = host.mcp_client.connections["dice"]
            self.assertEqual(connection.state, "failed")
            self.assertIn("not found", connection.error)
            registry = host.mcp_client.registry_for(host.service.registry, ["dice"])
            self.assertIs(registry, host.service.registry)  # nothing offered while down
            self.clock.advance(1.0)  # the next attempt, after the backoff
            self.assertEqual(connection.state, "failed")
        finally:
            settle(self.clock, host.stopService())
        self.assertEqual(connection.state, "stopped")
        self.assertEqual(self.clock.getDelayedCalls(), [])

    @override_settings(AI_TOOLS_MCP_SERVERS={"dice": {"url": "ftp://nowhere"}})
    def test_a_mistake_names_the_setting(self) -> None:
        with self.assertRaises(ConfigError) as caught:
            self.host()
        self.assertIn("AI_TOOLS_MCP_SERVERS.dice.url", str(caught.exception))


class TestMcpConfigCommand(ContribTestBase, EvenniaCommandTestMixin):
    """``aiassistant/config NAME mcp_servers = [...]`` names declared servers only."""

    @override_settings(AI_TOOLS_MCP_SERVERS=MISSING)
    def test_a_declared_server_is_set_and_an_undeclared_one_refused(self) -> None:
        from ai_tools.contrib.evennia.commands import CmdAIAssistant

        script = self.attach_script("ada")
        self.call(CmdAIAssistant(), '/config ada mcp_servers = ["dice"]',
                  "ada: mcp_servers =")
        self.assertEqual(list(script.assistant_config()["mcp_servers"]), ["dice"])
        self.call(CmdAIAssistant(), '/config ada mcp_servers = ["memory"]',
                  "Not changed: no MCP server 'memory'")
        self.assertEqual(list(script.assistant_config()["mcp_servers"]), ["dice"])
