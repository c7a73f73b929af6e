// The model servers panel: per server, its slots, the requests out and waiting in the
// client's queue (by assistant), the waits, the breakers (GET /assistants:
// service.model_servers, one entry per model profile; profiles of one server share it).

import { $, el } from "./dom.js";

/** The profiles' statuses grouped by server (its slots and queue are the server's). */
function byServer(modelServers) {
  const servers = new Map();
  for (const status of Object.values(modelServers || {})) {
    if (!status || !status.server) continue;
    const known = servers.get(status.server);
    if (known) {
      known.profiles.push(status.profile);
      Object.assign(known.assistantBreakers, status.assistant_breakers || {});
    } else {
      servers.set(status.server, { ...status, profiles: [status.profile],
        assistantBreakers: { ...(status.assistant_breakers || {}) } });
    }
  }
  return [...servers.values()];
}

function seconds(value) {
  return `${Number(value || 0).toFixed(1)} s`;
}

function waitingList(server) {
  const entries = Object.entries(server.waiting_by_assistant || {});
  if (entries.length === 0) return [el("li", { text: "nobody is waiting" })];
  return entries.map(([name, count]) => el("li", { "data-waiting-assistant": name || "-" },
    el("span", { class: "name", text: name || "(no assistant)" }), ` ${count} waiting`));
}

function serverItem(server) {
  const breakers = Object.entries(server.assistantBreakers)
    .map(([name, state]) => `${name}: ${state}`);
  const facts = [server.kind || "kind unknown",
    `${server.slots} slot(s) (${server.slots_source})`,
    `profile(s) ${server.profiles.join(", ")}`];
  const queue = [`${server.in_flight} of ${server.slots} in flight`,
    `${server.waiting} waiting`, `oldest wait ${seconds(server.oldest_wait_s)}`,
    `mean wait ${seconds(server.mean_wait_s)} over ${server.granted || 0} request(s)`];
  return el("li", { class: "card", "data-model-server": server.server,
    "data-waiting": server.waiting, "data-in-flight": server.in_flight },
  el("span", { class: "name", text: server.server }),
  el("span", { class: `badge breaker-${server.breaker}`, text: `breaker ${server.breaker}` }),
  el("p", { class: "note", text: facts.join(" · ") }),
  el("p", { class: "queue", text: queue.join(" · ") }),
  breakers.length ? el("p", { class: "error", text: `assistant breakers: ${breakers.join(", ")}` })
    : null,
  el("details", { class: "waiting" },
    el("summary", { text: `Waiting by assistant (${server.waiting})` }),
    el("ul", { class: "tools" }, ...waitingList(server))));
}

/** Show the model servers of `service` (the `service` part of GET /assistants); hidden
 * when there is none.  An open "waiting by assistant" stays open across refreshes. */
export function renderModels(service) {
  const panel = $("#models");
  if (!panel) return;
  const servers = byServer((service || {}).model_servers);
  panel.hidden = servers.length === 0;
  const list = $("#model-servers");
  const open = new Set([...list.querySelectorAll("li[data-model-server]")]
    .filter((item) => item.querySelector("details[open]")).map((item) => item.dataset.modelServer));
  const focused = document.activeElement && document.activeElement.closest("#model-servers li");
  const focusKey = focused ? focused.dataset.modelServer : null;
  list.replaceChildren(...servers.map((server) => {
    const item = serverItem(server);
    if (open.has(server.server)) item.querySelector("details").open = true;
    return item;
  }));
  if (focusKey) {
    const again = [...list.querySelectorAll("li[data-model-server]")]
      .find((item) => item.dataset.modelServer === focusKey);
    if (again) again.querySelector("summary").focus();
  }
}
