// The event stream: EventSource on /events, named events, the connection's state.
//
// EventSource reconnects by itself and sends Last-Event-ID, so the server can
// replay what was missed; the page watches the ids and, when they jump (or
// the server says it dropped events), reloads its state.

export const EVENT_NAMES = [
  "iteration", "tool_call", "tool_result", "signal", "termination", "tick", "text_delta",
  "mode", "enabled", "disabled", "stopped", "added", "removed", "emergency_stop",
  "emergency_stop_cleared", "unavailable", "gave_up", "world_message", "dropped", "model_request",
  "configured", "persona", "gap", "compaction", "approval_requested", "approval_decided",
  "approval_withdrawn",
];

/**
 * Open the stream; onEvent(name, data, id) for each event, onState(state)
 * with "live", "reconnecting" or "unreachable", onGap(why) when events were missed
 * (why: null when the stream is back after a break and nothing is known missed).
 */
export function openStream({ onEvent, onState, onGap, from = null }) {
  let source = null;
  let lastId = null;
  let failures = 0;
  let closed = false;

  function connect() {
    if (closed) return; // a reconnection planned before close()
    // After a reload, ask for what came since `from`; EventSource itself sends
    // Last-Event-ID when it reconnects, and the header wins over the query.
    const since = lastId ?? from;
    const url = since === null ? "/events" : `/events?last_event_id=${since}`;
    source = new EventSource(url, { withCredentials: true });
    source.addEventListener("open", () => {
      if (failures > 0) onGap(null); // back after a break: what is shown may be stale
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
    if (name === "gap") {
      onGap(data.reason === "restarted" ? "the service restarted"
        : "more happened than the service keeps for a reconnection");
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
  return {
    close: () => {
      closed = true;
      if (source) source.close();
    },
  };
}
