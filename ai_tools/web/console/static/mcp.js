// The MCP servers panel: each configured server, its state and its tools (GET /mcp/servers).

import { get } from "./api.js";
import { $, el, truncate } from "./dom.js";

function serverItem(server) {
  const tools = server.tools.map((tool) => el("li", {},
    el("code", { text: tool.name }), ` · ${tool.category} · `, truncate(tool.description, 120)));
  const facts = [server.transport, server.target];
  if (server.restarts) facts.push(`${server.restarts} restart(s)`);
  return el("li", { class: "card", "data-mcp-server": server.name, "data-state": server.state },
    el("span", { class: "name", text: server.name }),
    el("span", { class: `badge ${server.state}`, text: server.state }),
    el("p", { class: "note", text: facts.join(" · ") }),
    server.error ? el("p", { class: "error", text: server.error }) : null,
    el("ul", { class: "tools" }, ...tools));
}

/** Refresh the panel; it stays hidden when the service has no MCP server. */
export async function refreshMcp() {
  let answer;
  try {
    answer = await get("/mcp/servers");
  } catch (error) {
    return;
  }
  const panel = $("#mcp");
  if (!panel) return;
  panel.hidden = answer.servers.length === 0;
  $("#mcp-servers").replaceChildren(...answer.servers.map(serverItem));
}
