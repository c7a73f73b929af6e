// A small chart of one assistant's last model requests: latency as bars, tokens as a line.
//
// Fed by the stream's model_request events (one per model call of a loop).

const KEEP = 30;

export class LatencyChart {
  constructor(canvas, note) {
    this.canvas = canvas;
    this.note = note;
    this.samples = [];
  }

  clear() {
    this.samples = [];
    this.draw();
  }

  /** Feed every event of the selected assistant (only model requests count). */
  add(name, data) {
    if (name !== "model_request" || typeof data.latency_ms !== "number") return;
    const counted = [data.prompt_tokens, data.completion_tokens].filter((n) => typeof n === "number");
    const tokens = counted.length ? counted.reduce((a, b) => a + b, 0) : null;
    this.samples.push({ ms: data.latency_ms, tokens, ok: data.status === "ok" });
    if (this.samples.length > KEEP) this.samples.shift();
    this.draw();
  }

  draw() {
    const { canvas, samples } = this;
    const context = canvas.getContext("2d");
    const { width, height } = canvas;
    context.clearRect(0, 0, width, height);
    if (!samples.length) {
      this.note.textContent = "No model requests seen yet on this page.";
      return;
    }
    const slot = width / KEEP;
    const plot = height - 16;
    const topMs = Math.max(...samples.map((s) => s.ms), 1);
    samples.forEach((sample, index) => {
      const bar = Math.max(2, (sample.ms / topMs) * plot);
      context.fillStyle = sample.ok ? "#2f6f4f" : "#a12a1f";
      context.fillRect(index * slot + 2, height - bar, slot - 4, bar);
    });
    const withTokens = samples.map((s, i) => [i, s.tokens]).filter(([, t]) => t !== null);
    const topTokens = Math.max(...withTokens.map(([, t]) => t), 1);
    if (withTokens.length) {
      context.strokeStyle = "#1a5fb4";
      context.lineWidth = 2;
      context.beginPath();
      withTokens.forEach(([i, t], n) => {
        const x = i * slot + slot / 2;
        const y = height - (t / topTokens) * plot;
        if (n === 0) context.moveTo(x, y);
        else context.lineTo(x, y);
      });
      context.stroke();
    }
    context.fillStyle = "#333";
    context.font = "12px sans-serif";
    const tokensLabel = withTokens.length ? ` · tokens (line) up to ${topTokens}` : "";
    context.fillText(`latency (bars) up to ${Math.round(topMs)} ms${tokensLabel}`, 4, 12);
    const last = samples[samples.length - 1];
    const lastTokens = last.tokens === null ? "" : `, ${last.tokens} tokens`;
    this.note.textContent = `${samples.length} request(s); the last took ${Math.round(last.ms)} ms${lastTokens}.`;
  }
}
