// The tool calls waiting for an operator's approval: approve or refuse each.
//
// The list is loaded from GET /approvals and again whenever an approval event
// arrives; an answer goes to POST /assistants/{name}/approvals/{id}.

import { get, post, seg } from "./api.js";
import { $, el, truncate, dueIn } from "./dom.js";

export class Approvals {
  constructor() {
    this.enabled = false;
    this.loading = null;
  }

  start(endpoints) {
    this.enabled = endpoints.has("GET /approvals");
    return this.load();
  }

  /** Load the waiting calls again (after an approval event, or the periodic refresh). */
  async load() {
    if (!this.enabled) return;
    if (this.loading) return this.loading;
    this.loading = get("/approvals")
      .then((answer) => this.render(answer.approvals || []))
      .catch(() => null)
      .finally(() => { this.loading = null; });
    return this.loading;
  }

  render(approvals) {
    $("#approvals-box").hidden = approvals.length === 0;
    const focused = document.activeElement && document.activeElement.closest("#approvals li");
    if (focused) return; // an operator is typing a reason: keep the list as it is
    $("#approvals").replaceChildren(...approvals.map((entry) => this.item(entry)));
  }

  item(entry) {
    const reason = el("input", { type: "text", maxlength: 500, placeholder: "reason (told to the assistant)",
      "aria-label": `Reason for ${entry.assistant}'s ${entry.tool}` });
    const approve = el("button", { type: "button", class: "approve", text: "Approve" });
    const refuse = el("button", { type: "button", class: "danger refuse", text: "Refuse" });
    approve.addEventListener("click", () => this.decide(entry, true, reason.value));
    refuse.addEventListener("click", () => this.decide(entry, false, reason.value));
    return el("li", { class: "card approval", "data-approval": entry.id, "data-assistant-of": entry.assistant },
      el("strong", { text: `${entry.assistant}: ${entry.tool}` }),
      el("p", { class: "what", text: truncate(entry.arguments, 300) }),
      entry.reasoning ? el("p", { class: "why", text: truncate(entry.reasoning, 300) }) : null,
      el("p", { class: "why", text: `expires ${dueIn(entry.expires_at)}` }),
      reason, el("div", { class: "controls" }, approve, refuse));
  }

  async decide(entry, approve, reason) {
    const status = $("#approvals-status");
    const body = reason.trim() ? { approve, reason: reason.trim() } : { approve };
    try {
      await post(`/assistants/${seg(entry.assistant)}/approvals/${seg(entry.id)}`, body);
      status.textContent = `${entry.assistant}: ${entry.tool} ${approve ? "approved" : "refused"}.`;
    } catch (error) {
      status.textContent = `Not answered: ${error.message}`;
    }
    if (document.activeElement) document.activeElement.blur();
    await this.load();
  }
}
