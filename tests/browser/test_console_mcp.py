"""The web console's MCP panel, in a real browser: a service with an MCP server (the
official SDK's, over stdio) shows the server, its state and its tools."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.chromium import Page
from tests.browser.conftest import Service

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "integration" / "mcp_fixture_server.py"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    directory = tmp_path_factory.mktemp("console-mcp")
    config = directory / "assistant.toml"
    config.write_text(f"""
[world]
file = {str(ROOT / "examples" / "world.toml")!r}

[models.default]
scenario = {str(ROOT / "examples" / "demo-scenario.toml")!r}

[[assistants]]
name = "pip"
character_id = "char:pip"
mcp_servers = ["fixture"]

[[assistants]]
name = "mason"
character_id = "char:mason"

[mcp.servers.fixture]
command = {sys.executable!r}
args = [{str(FIXTURE)!r}, "stdio"]
prefix = "fx_"
""")
    running = Service(directory, config)
    try:
        yield running
    finally:
        running.stop()


def test_the_panel_shows_the_server_its_state_and_tools(page: Page, service: Service) -> None:
    page.wait_for("document.querySelector('[data-mcp-server=\"fixture\"][data-state=\"ready\"]')",
                  "the MCP server shown ready")
    assert page.evaluate("!document.querySelector('#mcp').hidden")
    text = page.evaluate("document.querySelector('[data-mcp-server=\"fixture\"]').textContent")
    assert "stdio" in text and "fx_add" in text and "fx_wipe · dangerous" in text
    (server,) = service.call("GET", "/mcp/servers")["servers"]
    assert server["state"] == "ready" and len(server["tools"]) == 11  # the fixture's tools
