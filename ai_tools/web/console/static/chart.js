// A small bar chart of model latency (and tokens, when the events carry them).
//
// With per-request model events the bars are those requests; without them a
// request's latency is read from the stream itself: the time from an
// iteration's start to the model's answer (its first tool call, or the end).

const KEEP = 30;

export class LatencyChart {
  constructor(canvas, note) {
    this.canvas = canvas;
    this.note = note;
    this.samples = [];
    this.started = null;
  }

  clear() {
    this.samples = [];
    this.started = null;
    this.draw();
  }

  /** Feed every event of the selected assistant. */
  add(name, data) {
    if (name === "model_request") {
      const ms = data.duration_ms ?? data.latency_ms;
      const usage = data.usage || data;
      this.push(ms, usage.total_tokens ?? null);
      this.started = null;
    } else if (name === "iteration") {
      this.started = data.time ?? null;
    } else if ((name === "tool_call" || name === "termination") && this.started !== null && data.time) {
      this.push((data.time - this.started) * 1000, null);
      this.started = null;
    }
  }

  push(ms, tokens) {
    if (typeof ms !== "number" || !Number.isFinite(ms)) return;
    this.samples.push({ ms, tokens });
    if (this.samples.length > KEEP) this.samples.shift();
    this.draw();
  }

  draw() {
    const { canvas } = this;
    const context = canvas.getContext("2d");
    const width = canvas.width;
    const height = canvas.height;
    context.clearRect(0, 0, width, height);
    const samples = this.samples;
    if (!samples.length) {
      this.note.textContent = "No model requests seen yet on this page.";
      return;
    }
    const top = Math.max(...samples.map((s) => s.ms), 1);
    const barWidth = width / KEEP;
    samples.forEach((sample, index) => {
      const barHeight = Math.max(2, (sample.ms / top) * (height - 14));
      context.fillStyle = "#2f6f4f";
      context.fillRect(index * barWidth + 2, height - barHeight, barWidth - 4, barHeight);
    });
    context.fillStyle = "#333";
    context.font = "12px sans-serif";
    context.fillText(`max ${Math.round(top)} ms`, 4, 12);
    const last = samples[samples.length - 1];
    const tokens = samples.filter((s) => s.tokens !== null);
    const tokenText = tokens.length ? `, ${tokens[tokens.length - 1].tokens} tokens` : "";
    this.note.textContent = `${samples.length} request(s); the last took ${Math.round(last.ms)} ms${tokenText}.`;
  }
}
