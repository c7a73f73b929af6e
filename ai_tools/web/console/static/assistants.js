// The assistants list: state, last termination reason, counters, next tick, pending events.

import { el, dueIn } from "./dom.js";

/** The state words of one status: awake/asleep, disabled, emergency-stopped, ticking. */
export function stateOf(status) {
  const words = [status.mode === "sleep" ? "asleep" : status.mode || "unknown"];
  if (!status.enabled) words.push("disabled");
  if (status.emergency_stopped) words.push("emergency-stopped");
  if (status.ticking) words.push("ticking");
  return words;
}

export function lastReason(status) {
  const last = status.last_tick;
  if (!last) return "no tick yet";
  return last.reason ? `${last.status} · ${last.reason}` : String(last.status);
}

function counter(status, name) {
  const value = status.counters ? status.counters[name] : undefined;
  return value === undefined ? 0 : value;
}

/** One assistant's card: a button that selects it, and its figures. */
export function card(status, selected, onSelect) {
  const states = stateOf(status);
  const button = el("button", { type: "button", class: "select", "aria-pressed": selected ? "true" : "false" },
    el("span", { class: "name", text: status.name }),
    ...states.map((word) => el("span", { class: `badge ${word}`, text: word })));
  button.addEventListener("click", () => onSelect(status.name));
  const figures = el("dl", { class: "figures" },
    el("dt", { text: "last loop" }), el("dd", { class: "reason", text: lastReason(status) }),
    el("dt", { text: "next tick" }), el("dd", { text: dueIn(status.next_tick_at) }),
    el("dt", { text: "pending" }), el("dd", { class: "pending", text: status.pending_events }),
    el("dt", { text: "ticks" }), el("dd", { text: status.tick_number }),
    el("dt", { text: "model requests" }), el("dd", { text: counter(status, "model_requests") }),
    el("dt", { text: "tool calls" }), el("dd", { text: counter(status, "calls") }),
    el("dt", { text: "cache hits" }), el("dd", { text: counter(status, "cache_hits") }),
    el("dt", { text: "tick errors" }), el("dd", { text: counter(status, "tick_errors") }));
  return el("li", { class: selected ? "card selected" : "card", "data-assistant": status.name,
    "data-state": states.join(" ") }, button, figures);
}
