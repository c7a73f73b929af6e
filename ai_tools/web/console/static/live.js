// One assistant's live loop, line by line from the event stream.

import { el, appendBounded, truncate, milliseconds } from "./dom.js";

const MAX_LINES = 300;

function toolResult(data) {
  const parts = [`${data.tool} → ${data.status}`, milliseconds(data.duration_ms)];
  if (data.from_cache) parts.push("cache hit");
  if (data.skipped) parts.push("skipped");
  if (data.error) parts.push(truncate(data.error, 160));
  if (data.result !== undefined) parts.push(truncate(data.result, 160));
  return parts.join(" · ");
}

/** The line an event becomes, or null for events this log does not show. */
export function describe(name, data) {
  switch (name) {
    case "iteration":
      return `iteration ${data.iteration}/${data.max_iterations} · context ${data.usage_percent}%`;
    case "tool_call":
      return `${data.tool}(${truncate(data.arguments, 160)})`;
    case "tool_result":
      return toolResult(data);
    case "signal":
      return `signal ${data.tool_name}`;
    case "termination":
      return `loop ended: ${data.reason} after ${data.iterations} iteration(s), ` +
        `${milliseconds(data.duration_ms)}${data.error ? ` · ${truncate(data.error, 160)}` : ""}`;
    case "tick":
      return `tick ${data.tick}: ${data.status}${data.reason ? ` · ${data.reason}` : ""}`;
    case "world_message":
      return data.line || `${data.sender_key || data.sender_id}: ${data.text}`;
    case "model_request":
      return `${data.model || data.profile || "model"} · ${data.status} · ${milliseconds(data.latency_ms)}` +
        (data.prompt_tokens != null ? ` · ${data.prompt_tokens} + ${data.completion_tokens ?? "?"} tokens` : "") +
        (data.error ? ` · ${truncate(data.error, 160)}` : "");
    case "compaction":
      return `history compacted (${data.method}): ${data.removed} removed${data.error ? ` · ${truncate(data.error, 160)}` : ""}`;
    case "approval_requested":
      return `${data.tool}(${truncate(data.arguments, 160)}) waits for an operator's approval (${data.id})`;
    case "approval_decided":
      return `${data.tool} ${data.timed_out ? "not approved in time" : data.approved ? "approved" : "refused"}` +
        `${data.by ? ` by ${data.by}` : ""}${data.reason ? ` · ${truncate(data.reason, 160)}` : ""}`;
    case "approval_withdrawn":
      return `${data.tool}: approval withdrawn (the loop was stopped)`;
    case "text_delta":
      return null;
    default:
      return `${name}${data.reason ? `: ${data.reason}` : ""}`;
  }
}

/** The live log of one list element: add(name, data) for each event of its assistant. */
export class LiveLog {
  constructor(list) {
    this.list = list;
    this.streaming = null;
  }

  clear() {
    this.list.replaceChildren();
    this.streaming = null;
  }

  add(name, data) {
    if (name === "text_delta") {
      if (this.streaming === null) {
        this.streaming = el("li", { class: "event text_delta" }, el("span", { class: "kind", text: "model" }), "");
        appendBounded(this.list, this.streaming, MAX_LINES);
      }
      this.streaming.append(String(data.text || ""));
      return;
    }
    const text = describe(name, data);
    if (text === null) return;
    this.streaming = null;
    const item = el("li", { class: `event ${name}`, "data-event": name },
      el("span", { class: "kind", text: name.replace("_", " ") }), text);
    appendBounded(this.list, item, MAX_LINES);
    this.list.scrollTop = this.list.scrollHeight;
  }
}
