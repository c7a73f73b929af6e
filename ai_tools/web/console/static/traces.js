// Loop traces of one assistant as a waterfall: the stored ones (searched by how they ended,
// a tool, failure, time) and the running one, drawn by one view (GET /traces, /traces/{id}).

import { get, seg } from "./api.js";
import { $, el, milliseconds, clockTime } from "./dom.js";

const RELOAD_EVENTS = new Set(["iteration", "model_request", "tool_result", "termination"]);

export class TraceView {
  constructor() {
    this.assistant = null;
    this.shown = null; // the id drawn, or "live"
    this.live = null;
    this.timer = null;
    $("#trace-filter").addEventListener("submit", (event) => {
      event.preventDefault();
      this.load();
    });
  }

  /** Show `name`'s traces (null: none). */
  select(name) {
    this.assistant = name;
    this.shown = null;
    this.live = null;
    $("#traces").replaceChildren();
    $("#waterfall").replaceChildren();
    if (name !== null) this.load();
  }

  /** A loop event of the page's stream: the list (and a live waterfall) follow it. */
  onEvent(kind, data) {
    const owner = String(data.assistant || "").split("/")[0];
    if (owner !== this.assistant || !RELOAD_EVENTS.has(kind) || this.timer !== null) return;
    this.timer = setTimeout(() => { this.timer = null; this.load(); }, 250);
  }

  query() {
    const params = new URLSearchParams({ assistant: this.assistant, limit: "20" });
    const reason = $("#trace-reason").value;
    const tool = $("#trace-tool").value.trim();
    const since = Number($("#trace-since").value);
    if (reason) params.set("reason", reason);
    if (tool) params.set("tool", tool);
    if ($("#trace-failed").checked) params.set("failed", "true");
    if (since) params.set("since", String(Math.floor(Date.now() / 1000 - since)));
    return params.toString();
  }

  async load() {
    const name = this.assistant;
    let answer;
    try {
      answer = await get(`/traces?${this.query()}`);
    } catch (error) {
      $("#trace-status").textContent = `Traces: ${error.message}`;
      return;
    }
    if (name !== this.assistant) return;
    this.live = answer.live.length ? answer.live[answer.live.length - 1] : null;
    $("#trace-status").textContent = answer.stored ? "" : "This service keeps no traces; the running loop only.";
    const items = [];
    if (this.live) items.push(this.item("live", this.live, "running"));
    for (const trace of answer.traces) items.push(this.item(trace.id, trace, trace.reason));
    $("#traces").replaceChildren(...items);
    if (this.shown === "live" && !this.live && answer.traces.length) {
      this.open(answer.traces[0].id); // the loop watched ended: its stored trace
    } else if (this.shown === "live" && this.live) {
      this.draw(this.live);
    } else if (this.shown === null && items.length) {
      this.open(this.live ? "live" : answer.traces[0].id);
    }
  }

  item(id, trace, reason) {
    const tokens = `${trace.input_tokens ?? 0}→${trace.output_tokens ?? 0} tokens`;
    const button = el("button", { type: "button", class: "trace-pick", "data-trace": id,
      "aria-pressed": String(this.shown === id) },
      el("time", { text: clockTime(trace.started_at) }), ` ${reason}`,
      trace.failed ? el("span", { class: "badge failed", text: "failed" }) : null,
      ` · ${(trace.tools || []).join(", ") || "no tools"} · ${tokens}`);
    button.addEventListener("click", () => this.open(id));
    return el("li", { class: `trace${trace.failed ? " failed" : ""}` }, button);
  }

  async open(id) {
    this.shown = id;
    for (const button of document.querySelectorAll("#traces .trace-pick")) {
      button.setAttribute("aria-pressed", String(button.dataset.trace === String(id)));
    }
    if (id === "live") {
      if (this.live) this.draw(this.live);
      return;
    }
    const trace = await get(`/traces/${seg(String(id))}`).catch(() => null);
    if (trace && this.shown === id) this.draw(trace);
  }

  draw(trace) {
    const total = Math.max(trace.live ? (trace.ended_at - trace.started_at) * 1000 : trace.duration_ms || 0,
      ...trace.spans.map((s) => (s.start_ms || 0) + (s.duration_ms || 0)), 1);
    const head = el("p", { class: "trace-head" },
      `${trace.live ? "running" : trace.reason} · ${milliseconds(trace.live ? null : total)} · `,
      `${trace.iterations} iteration(s) · ${trace.input_tokens}→${trace.output_tokens} tokens`,
      trace.cost !== undefined ? ` · ${money(trace.cost, trace.currency)}` : "",
      trace.error ? ` · ${trace.error}` : "",
      trace.truncated ? " · (long: the first spans only)" : "");
    const rows = trace.spans.map((span) => spanRow(span, total));
    $("#waterfall").replaceChildren(head, el("ol", { class: "spans", "aria-label": "the loop's steps" }, ...rows));
    $("#waterfall").dataset.trace = String(trace.live ? "live" : trace.id);
  }
}

function spanRow(span, total) {
  const bar = el("span", { class: "span-bar" });
  const left = Math.min(99.5, (100 * (span.start_ms || 0)) / total);
  bar.style.marginLeft = `${left}%`;
  bar.style.width = `${Math.max(0.5, Math.min(100 - left, (100 * (span.duration_ms || 0)) / total))}%`;
  const failed = span.kind === "chat" ? span.status !== "ok" : span.kind === "tool" && span.success === false;
  return el("li", { class: `span ${span.kind}${failed ? " failed" : ""}${span.from_cache ? " cached" : ""}`,
    "data-kind": span.kind, "data-status": span.status || null },
  el("span", { class: "label", text: `${span.kind === "chat" ? "model" : span.kind} ${span.name}` }),
  el("span", { class: "track" }, bar),
  el("span", { class: "facts", text: facts(span) }));
}

function facts(span) {
  const parts = [milliseconds(span.duration_ms)];
  if (span.kind === "chat") {
    if (span.input_tokens !== null && span.input_tokens !== undefined) {
      parts.push(`${span.input_tokens}→${span.output_tokens} tokens`);
    }
    if (span.cost !== undefined) parts.push(money(span.cost, null));
    if (span.attempts > 1) parts.push(`${span.attempts} attempts (${span.attempts - 1} retried)`);
    if (span.status && span.status !== "ok") parts.push(span.status);
  } else if (span.kind === "tool") {
    if (span.from_cache) parts.push("cache hit");
    if (span.refused) parts.push(`refused: ${span.refused}`);
    else if (span.status && span.status !== "success") parts.push(span.status);
    if (span.attempts > 1) parts.push(`${span.attempts} attempts`);
    if (span.skipped) parts.push("skipped");
  }
  if (span.error) parts.push(span.error);
  return parts.join(" · ");
}

function money(amount, currency) {
  const digits = amount >= 1 ? 2 : 5;
  return `${currency ? `${currency} ` : ""}${Number(amount).toFixed(digits)}`;
}
