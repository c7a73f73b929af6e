// Small DOM helpers: elements built with textContent only (never innerHTML).

export const $ = (selector) => document.querySelector(selector);

/** An element with attributes (class, data-*, aria-*...) and children (nodes or text). */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/** Append to a list, keeping at most `limit` items (the oldest go). */
export function appendBounded(list, item, limit) {
  list.append(item);
  while (list.children.length > limit) list.firstElementChild.remove();
}

/** Text cut to `limit` characters with an ellipsis. */
export function truncate(text, limit = 200) {
  const value = typeof text === "string" ? text : JSON.stringify(text);
  if (value === undefined) return "";
  return value.length > limit ? `${value.slice(0, limit)}…` : value;
}

export function milliseconds(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`;
}

/** "in 3 s" / "now" for a due time in seconds since the epoch. */
export function dueIn(seconds) {
  if (seconds === null || seconds === undefined) return "not scheduled";
  const delta = seconds - Date.now() / 1000;
  if (delta <= 0.5) return "now";
  if (delta < 120) return `in ${Math.round(delta)} s`;
  return `in ${Math.round(delta / 60)} min`;
}

export function clockTime(seconds) {
  if (!seconds) return "";
  return new Date(seconds * 1000).toLocaleTimeString();
}
