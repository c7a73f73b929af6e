// The event stream: EventSource on /events, named events, the connection's state.
//
// EventSource reconnects by itself and sends Last-Event-ID, so the server can
// replay what was missed; the page watches the ids and, when they jump (or
// the server says it dropped events), reloads its state.

export const EVENT_NAMES = [
  "iteration", "tool_call", "tool_result", "signal", "termination", "tick", "text_delta",
  "mode", "enabled", "disabled", "stopped", "added", "removed", "emergency_stop",
  "emergency_stop_cleared", "unavailable", "world_message", "dropped", "model_request",
  "configured", "persona",
];

/**
 * Open the stream; onEvent(name, data, id) for each event, onState(state)
 * with "live", "reconnecting" or "unreachable", onGap() when events were missed.
 */
export function openStream({ onEvent, onState, onGap }) {
  let source = null;
  let lastId = null;
  let failures = 0;

  function connect() {
    source = new EventSource("/events", { withCredentials: true });
    source.addEventListener("open", () => {
      failures = 0;
      onState("live");
    });
    source.addEventListener("error", () => {
      failures += 1;
      if (source.readyState === EventSource.CLOSED) {
        onState("unreachable");
        setTimeout(connect, 3000);
      } else {
        onState(failures > 1 ? "unreachable" : "reconnecting");
      }
    });
    for (const name of EVENT_NAMES) {
      source.addEventListener(name, (message) => receive(name, message));
    }
  }

  function receive(name, message) {
    let data;
    try {
      data = JSON.parse(message.data);
    } catch (error) {
      return;
    }
    const id = message.lastEventId ? Number(message.lastEventId) : null;
    if (name === "dropped") {
      onGap(`the service dropped ${data.missed} events for this page`);
      return;
    }
    if (id !== null && lastId !== null && id <= lastId) {
      return; // already shown (a replay after a reconnection)
    }
    if (id !== null && lastId !== null && id > lastId + 1) {
      onGap(`${id - lastId - 1} events were missed`);
    }
    if (id !== null) {
      lastId = id;
    }
    onEvent(name, data, id);
  }

  connect();
  return { close: () => source && source.close() };
}
