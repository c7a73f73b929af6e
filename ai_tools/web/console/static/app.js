// The console page: sign-in, the assistants, one assistant's loop, speaking as a player.

import { call, get, post, seg, onSignedOut, pause, resume } from "./api.js";
import { $, el, appendBounded, truncate, milliseconds } from "./dom.js";
import { card, stateOf, lastReason } from "./assistants.js";
import { openStream } from "./events.js";
import { LiveLog } from "./live.js";
import { LatencyChart } from "./chart.js";
import { Speaker } from "./speak.js";
import { Manager } from "./manage.js";
import { TraceView } from "./traces.js";
import { Approvals } from "./approvals.js";
import { refreshMcp } from "./mcp.js";
import { renderModels } from "./models.js";

const page = {
  statuses: new Map(),
  selected: null,
  endpoints: new Set(),
  history: null,
  stream: null,
  refreshTimer: null,
  tokenRequired: false,
};
const live = new LiveLog($("#live"));
const chart = new LatencyChart($("#chart"), $("#chart-note"));
const speaker = new Speaker();
const traces = new TraceView();
const manager = new Manager({ changed: () => refresh(), selected: () => page.selected, select });
const approvals = new Approvals();
const HISTORY_PAGE = 20;
const LIVE_KEY = "ai_tools.console.live";

// -- sign-in --------------------------------------------------------------------------

async function boot() {
  const session = await call("GET", "/session").catch(() => null);
  if (session === null) {
    setConnection("unreachable");
    setTimeout(boot, 3000);
    return;
  }
  page.tokenRequired = Boolean(session.token_required);
  if (session.token_required && !session.signed_in) {
    showSignIn();
    return;
  }
  start();
}

function showSignIn(message = "") {
  if (page.stream) page.stream.close();
  page.stream = null;
  clearInterval(page.refreshTimer);
  $("#console").hidden = true;
  $("#sign-out").hidden = true; // signed out: nothing to sign out of
  $("#emergency").hidden = true;
  $("#emergency-clear").hidden = true;
  $("#sign-in").hidden = false;
  $("#sign-in-error").textContent = message;
  setConnection("signed out");
  $("#token").focus();
}

$("#sign-in-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await post("/session", { token: $("#token").value });
    resume();
    $("#token").value = "";
    $("#sign-in").hidden = true;
    start();
  } catch (error) {
    $("#sign-in-error").textContent = error.message;
  }
});

$("#sign-out").addEventListener("click", async () => {
  // Everything that asks the API first: the stream would reconnect, a refresh or a call in
  // flight would be answered after the session ended — each refused (401).
  if (page.stream) page.stream.close();
  page.stream = null;
  clearInterval(page.refreshTimer);
  pause();
  await call("DELETE", "/session").catch(() => null);
  showSignIn("Signed out.");
});

onSignedOut(() => showSignIn("The session ended: sign in again."));

// -- the page's state ---------------------------------------------------------------

async function start() {
  $("#console").hidden = false;
  $("#sign-out").hidden = !page.tokenRequired;
  setConnection("connecting…");
  const index = await get("/").catch(() => ({ endpoints: [] }));
  page.endpoints = new Set(index.endpoints.map((e) => `${e.method} ${e.path}`));
  const characters = page.endpoints.has("GET /world/characters")
    ? ((await get("/world/characters").catch(() => null)) || {}).characters || [] : [];
  manager.start(page.endpoints, characters);
  await Promise.all([refresh(), approvals.start(page.endpoints)]);
  await speaker.start(characters);
  const saved = savedLive();
  if (page.selected === null && page.statuses.size) {
    select(saved && page.statuses.has(saved.assistant) ? saved.assistant : [...page.statuses.keys()][0],
      saved ? saved.from : null);
  }
  if (!page.stream) {
    const from = saved && saved.assistant === page.selected ? saved.from : null;
    page.stream = openStream({ onEvent, onState: setConnection, onGap, from });
  }
  clearInterval(page.refreshTimer);
  page.refreshTimer = setInterval(() => { refresh(); approvals.load(); }, 5000);
}

async function refresh() {
  let answer;
  try {
    answer = await get("/assistants");
  } catch (error) {
    if (error.status === 0 && !error.signedOut) setConnection("unreachable");
    return;
  }
  page.statuses = new Map(answer.assistants.map((status) => [status.name, status]));
  if (page.selected !== null && !page.statuses.has(page.selected)) select(null);
  manager.statuses(answer.assistants, (answer.service || {}).models || []);
  renderAssistants();
  renderFacts();
  renderModels(answer.service);
  refreshMcp();
}

let refreshSoon = null;
function scheduleRefresh() {
  if (refreshSoon === null) {
    refreshSoon = setTimeout(() => { refreshSoon = null; refresh(); }, 150);
  }
}

function renderAssistants() {
  const list = $("#assistants");
  const focused = document.activeElement && document.activeElement.closest("#assistants li");
  const focusName = focused ? focused.dataset.assistant : null;
  list.replaceChildren(...[...page.statuses.values()].map(
    (status) => card(status, status.name === page.selected, select)));
  if (focusName) {
    const again = list.querySelector(`li[data-assistant="${CSS.escape(focusName)}"] button`);
    if (again) again.focus();
  }
}

function setConnection(state) {
  const node = $("#connection");
  node.dataset.state = state;
  node.textContent = {
    live: "live",
    reconnecting: "reconnecting…",
    unreachable: "the service is unreachable",
  }[state] || state;
}

function onGap(why) {
  if (why !== null) {
    $("#notice").textContent = `Some events were missed (${why}); the page reloaded its state.`;
  }
  refresh();
  if (page.selected) loadDetail();
}

// -- one assistant -------------------------------------------------------------------

// The live log survives a reload: the id before its first event is kept for this tab,
// and the reloaded page asks the stream to replay from there (Last-Event-ID).
function savedLive() {
  try {
    return JSON.parse(window.sessionStorage.getItem(LIVE_KEY));
  } catch (error) {
    return null;
  }
}

function select(name, from = null) {
  page.selected = name;
  page.history = null;
  page.liveFrom = from;
  live.clear();
  chart.clear();
  $("#history").replaceChildren();
  $("#loops").replaceChildren();
  $("#history-older").hidden = true;
  $("#configure").open = false;
  $("#detail").hidden = name === null;
  $("#detail-title").textContent = name || "";
  window.sessionStorage.setItem(LIVE_KEY, JSON.stringify({ assistant: name, from }));
  renderAssistants();
  traces.select(name);
  if (name !== null) loadDetail();
}

function renderFacts() {
  const status = page.statuses.get(page.selected);
  if (!status) return;
  $("#toggle").textContent = status.enabled ? "Disable" : "Enable";
  $("#detail").dataset.state = stateOf(status).join(" ");
  const facts = [
    ["state", stateOf(status).join(", ")],
    ["last loop", lastReason(status)],
    ["character", status.character_id],
    ["model", status.model],
    ["pending events", status.pending_events],
    ["history", `${status.history_length} messages`],
    ["context", status.context_percent === null ? "–" : `${status.context_percent}%`],
    ["tool in flight", status.ticking && status.current_tool_call
      ? truncate(status.current_tool_call.tool || status.current_tool_call, 80) +
        (status.current_tool_call.status === "awaiting_approval" ? " (waiting for approval)" : "")
      : "none"],
  ];
  $("#facts").replaceChildren(...facts.flatMap(([key, value]) =>
    [el("dt", { text: key }), el("dd", { text: value ?? "–" })]));
}

async function loadDetail() {
  const name = page.selected;
  renderFacts();
  const [history, results] = await Promise.all([
    get(`/assistants/${seg(name)}/history?limit=${HISTORY_PAGE}`).catch(() => null),
    get(`/assistants/${seg(name)}/results?limit=5`).catch(() => null),
  ]);
  if (name !== page.selected) return;
  if (history) {
    page.history = history;
    $("#history").replaceChildren(...history.messages.map(historyItem));
    showOlderButton(history);
  }
  if (results) renderLoops(results.loops);
}

/** A call of a history message as the model made it: name(arguments), arguments cut. */
function callText(call) {
  const fn = call.function || call;
  const args = typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments ?? {});
  return `→ ${fn.name}(${truncate(args, 200)})`;
}

function historyItem(message) {
  const calls = (message.tool_calls || []).map(callText);
  const text = [message.content ? truncate(message.content, 300) : "", calls.join(" ")].join(" ").trim();
  return el("li", { class: `message ${message.role}`, "data-index": message.index ?? null },
    el("span", { class: "kind", text: message.role }), text);
}

function showOlderButton(history) {
  const more = history.first_index !== undefined ? history.has_more && history.first_index > 0
    : history.messages.length < history.total;
  $("#history-older").hidden = !more;
}

/** One page further back (the before= cursor), added above what is shown. */
async function olderHistory() {
  const name = page.selected;
  const shown = page.history;
  if (!shown || shown.first_index === undefined) return;
  const older = await get(`/assistants/${seg(name)}/history?limit=${HISTORY_PAGE}&before=${shown.first_index}`)
    .catch(() => null);
  if (!older || name !== page.selected) return;
  if (older.total < shown.total) {
    loadDetail(); // trimmed or compacted meanwhile: positions changed, start again
    return;
  }
  $("#history").prepend(...older.messages.map(historyItem));
  page.history = { ...shown, first_index: older.first_index, has_more: older.has_more };
  showOlderButton(page.history);
}

function renderLoops(loops) {
  $("#loops").replaceChildren(...loops.slice().reverse().map((loop) => el("li", { class: "loop" },
    el("span", { class: "kind", text: `tick ${loop.tick ?? "–"}` }),
    `${loop.termination_reason} · ${loop.iterations} iteration(s) · ${milliseconds(loop.duration_ms)} · `,
    (loop.tool_calls || []).map((c) => `${c.tool}${c.from_cache ? " (cache)" : ""}`).join(", "))));
}

$("#history-older").addEventListener("click", olderHistory);

function onEvent(name, data, id) {
  if (name === "world_message") speaker.heardSomething(data);
  if (name.startsWith("approval_")) approvals.load();
  const owner = data.assistant || null;
  const mine = owner === page.selected ||
    (name === "world_message" && (data.assistants || []).concat(data.from_assistant || []).includes(page.selected));
  if (mine) {
    if (page.liveFrom === null && id !== null) {
      page.liveFrom = id - 1;
      window.sessionStorage.setItem(LIVE_KEY, JSON.stringify({ assistant: page.selected, from: page.liveFrom }));
    }
    live.add(name, data);
    chart.add(name, data);
  }
  traces.onEvent(name, data);
  if (name !== "text_delta" && name !== "world_message" && name !== "iteration") scheduleRefresh();
  if (mine && (name === "tick" || name === "termination")) loadDetail();
}

// -- controls --------------------------------------------------------------------------

async function control(label, action) {
  const status = $("#control-status");
  status.textContent = `${label}…`;
  try {
    const answer = await action();
    status.textContent = `${label}: ${summary(answer)}`;
  } catch (error) {
    status.textContent = `${label} failed: ${error.message}`;
  }
  refresh();
}

function summary(answer) {
  if (answer && answer.status && answer.reason !== undefined) return `${answer.status} · ${answer.reason ?? ""}`;
  if (answer && "stopped" in answer) return answer.stopped ? "stopped" : "nothing was running";
  if (answer && "enabled" in answer) return answer.enabled ? "enabled" : "disabled";
  return "done";
}

const path = (verb) => `/assistants/${seg(page.selected)}/${verb}`;
$("#tick").addEventListener("click", () => control("Tick", () => post(path("tick"))));
$("#stop").addEventListener("click", () => control("Stop", () => post(path("stop"))));
$("#toggle").addEventListener("click", () => {
  const status = page.statuses.get(page.selected);
  const verb = status && status.enabled ? "disable" : "enable";
  control(verb === "disable" ? "Disable" : "Enable", () => post(path(verb)));
});

boot();
