// Creating, configuring and removing assistants; the emergency stop.
//
// Each part shows only when the service lists its endpoint (GET / names them).

import { call, get, post, seg } from "./api.js";
import { $, el } from "./dom.js";

const NUMBERS = new Set(["tick_rate", "tool_budget"]);

/** The filled fields of a form as a configuration (numbers as numbers). */
function fields(form, only = null) {
  const config = {};
  for (const [key, raw] of new FormData(form).entries()) {
    const value = String(raw).trim();
    if (value === "" || (only && !only.has(key))) continue;
    config[key] = NUMBERS.has(key) ? Number(value) : value;
  }
  return config;
}

export class Manager {
  /** `changed()` after anything that changes the list; `selected()` the chosen name. */
  constructor({ changed, selected, select }) {
    this.changed = changed;
    this.selected = selected;
    this.select = select;
    this.loaded = null;
    $("#create-form").addEventListener("submit", (event) => { event.preventDefault(); this.create(); });
    $("#configure-form").addEventListener("submit", (event) => { event.preventDefault(); this.save(); });
    $("#configure").addEventListener("toggle", () => { if ($("#configure").open) this.load(); });
    $("#remove").addEventListener("click", () => this.remove());
    $("#emergency").addEventListener("click", () => this.emergency("/emergency-stop", "Emergency stop"));
    $("#emergency-clear").addEventListener("click", () => this.emergency("/emergency-stop/clear", "Clear"));
  }

  start(endpoints, characters) {
    this.endpoints = endpoints;
    $("#create").hidden = !endpoints.has("POST /assistants");
    $("#configure").hidden = !endpoints.has("PATCH /assistants/{name}");
    $("#remove").hidden = !endpoints.has("DELETE /assistants/{name}");
    $("#emergency").hidden = !endpoints.has("POST /emergency-stop");
    const free = characters.filter((c) => !c.assistant);
    $("#create-character").replaceChildren(...free.map((c) => el("option", { value: c.id, text: `${c.key} (${c.id})` })));
  }

  /** Show "clear" while any assistant is emergency-stopped; offer the service's model profiles. */
  statuses(statuses, models) {
    const stopped = statuses.some((s) => s.emergency_stopped);
    $("#emergency-clear").hidden = !stopped || !this.endpoints || !this.endpoints.has("POST /emergency-stop/clear");
    this.models(models);
  }

  /** The model profiles the service knows, as the choices of both forms (kept if unchanged). */
  models(names) {
    const key = names.join("\n");
    if (key === this.modelKey || !names.length) return;
    this.modelKey = key;
    for (const id of ["#create-model", "#configure-model"]) {
      const select = $(id);
      const chosen = select.value;
      select.replaceChildren(...names.map((name) => el("option", { value: name, text: name })));
      select.value = names.includes(chosen) ? chosen : (names.includes("default") ? "default" : names[0]);
    }
  }

  async create() {
    const config = fields($("#create-form"));
    const status = $("#create-status");
    try {
      const answer = await post("/assistants", config);
      status.textContent = `Created ${answer.assistant}.`;
      $("#create-form").reset();
      await this.changed();
      this.select(answer.assistant);
    } catch (error) {
      status.textContent = `Not created: ${error.message}${error.field ? ` (${error.field})` : ""}`;
    }
  }

  async load() {
    const name = this.selected();
    const answer = await get(`/assistants/${seg(name)}/config`).catch(() => null);
    if (!answer || name !== this.selected()) return;
    this.loaded = answer.config;
    for (const key of ["persona", "model", "tick_rate", "tool_budget"]) {
      const field = $("#configure-form").elements[key];
      field.value = answer.config[key] ?? "";
    }
    $("#configure-status").textContent = "";
  }

  async save() {
    const name = this.selected();
    const config = fields($("#configure-form"));
    const changes = Object.fromEntries(Object.entries(config).filter(
      ([key, value]) => !this.loaded || this.loaded[key] !== value));
    const status = $("#configure-status");
    if (!Object.keys(changes).length) {
      status.textContent = "Nothing changed.";
      return;
    }
    try {
      const answer = await call("PATCH", `/assistants/${seg(name)}`, changes);
      this.loaded = answer.config;
      status.textContent = `Saved: ${answer.changed.join(", ") || "nothing changed"}.`;
      await this.changed();
    } catch (error) {
      status.textContent = `Not saved: ${error.message}${error.field ? ` (${error.field})` : ""}`;
    }
  }

  async remove() {
    const name = this.selected();
    if (!window.confirm(`Remove ${name}? Its saved state stays in the store.`)) return;
    try {
      await call("DELETE", `/assistants/${seg(name)}`);
      $("#configure-status").textContent = `Removed ${name}.`;
      this.select(null);
      await this.changed();
    } catch (error) {
      $("#configure-status").textContent = `Not removed: ${error.message}`;
    }
  }

  async emergency(path, label) {
    if (path === "/emergency-stop" && !window.confirm("Stop every assistant now, until cleared?")) return;
    try {
      await post(path);
      $("#notice").textContent = `${label}: done.`;
    } catch (error) {
      $("#notice").textContent = `${label} failed: ${error.message}`;
    }
    await this.changed();
  }
}
