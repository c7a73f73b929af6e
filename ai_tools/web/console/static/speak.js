// Speaking as a player character, and what that character hears.

import { get, post, seg } from "./api.js";
import { $, el, appendBounded, clockTime } from "./dom.js";

const MAX_HEARD = 100;
const STORAGE_KEY = "ai_tools.console.character";

export class Speaker {
  constructor() {
    this.character = null;
    this.lastSeq = null;
    this.loading = null;
    this.again = false;
    $("#speak-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    $("#character").addEventListener("change", () => this.choose($("#character").value));
    $("#kind").addEventListener("change", () => this.kindChanged());
    this.kindChanged();
  }

  /** Fill the character list with the world's players (characters no assistant plays). */
  async start(characters) {
    const players = characters.filter((c) => !c.assistant).map((c) => ({ id: c.id, key: c.key || c.id }));
    $("#character").replaceChildren(...players.map((p) => el("option", { value: p.id, text: `${p.key} (${p.id})` })));
    $("#targets").replaceChildren(...characters.map((c) => el("option", {
      value: c.assistant || c.id, text: c.assistant ? `${c.key} (assistant)` : c.key })));
    const saved = window.localStorage.getItem(STORAGE_KEY);
    const known = players.some((p) => p.id === saved);
    const chosen = known ? saved : (players.length ? players[0].id : "");
    $("#character").value = chosen;
    if (chosen) await this.choose(chosen);
  }

  kindChanged() {
    const direct = ["whisper", "page"].includes($("#kind").value);
    $("#target").disabled = !direct;
    $("#target").required = direct;
  }

  async choose(id) {
    id = id.trim();
    if (!id || id === this.character) return;
    this.character = id;
    this.lastSeq = null;
    window.localStorage.setItem(STORAGE_KEY, id);
    $("#hearer").textContent = id;
    $("#heard").replaceChildren();
    await this.loadHeard();
  }

  /** A world message was heard by someone: fetch what is new for our character. */
  heardSomething(message) {
    if ((message.receivers || []).includes(this.character) || message.sender_id === this.character) {
      this.loadHeard();
    }
  }

  async loadHeard() {
    if (!this.character) return null;
    if (this.loading) {
      this.again = true; // something new may have come after the request in flight
      return this.loading;
    }
    const character = this.character;
    const after = this.lastSeq === null ? "" : `&after=${this.lastSeq}`;
    this.loading = get(`/characters/${seg(character)}/heard?limit=50${after}`)
      .then((answer) => { if (character === this.character) this.showHeard(answer.messages); })
      .catch((error) => { $("#speak-status").textContent = `Hearing: ${error.message}`; })
      .finally(() => {
        this.loading = null;
        if (this.again) {
          this.again = false;
          this.loadHeard();
        }
      });
    return this.loading;
  }

  showHeard(messages) {
    for (const message of messages) {
      if (this.lastSeq !== null && message.seq <= this.lastSeq) continue;
      this.lastSeq = message.seq;
      const item = el("li", { class: `heard ${message.kind}`, "data-seq": message.seq },
        el("time", { text: clockTime(message.timestamp) }), " ", message.line || message.text);
      appendBounded($("#heard"), item, MAX_HEARD);
    }
  }

  async send() {
    await this.choose($("#character").value);
    const body = { character: this.character, kind: $("#kind").value, text: $("#text").value };
    if (!$("#target").disabled) body.target = $("#target").value.trim();
    const status = $("#speak-status");
    status.textContent = "Sending…";
    try {
      const answer = await post("/messages", body);
      const who = answer.assistants.length ? answer.assistants.join(", ") : "no assistant";
      status.textContent = `Heard by ${answer.heard_by.length} character(s); ${who} will answer.`;
      $("#text").value = "";
      this.loadHeard();
    } catch (error) {
      status.textContent = `Not sent: ${error.message}`;
    }
  }
}
