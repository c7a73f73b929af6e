// The HTTP API from the page: same origin, the session cookie, JSON both ways.

export class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field;
  }
}

const listeners = { signedOut: [] };

// Signing out: the calls in flight are aborted and new ones refused (all but /session)
// until the page signs in again; a call answered after the session ended would be
// refused (401) and report the page signed out a second time.
let paused = false;
const inFlight = new Set();

/** Abort the calls in flight and refuse new ones (but /session) until resume(). */
export function pause() {
  paused = true;
  inFlight.forEach((controller) => controller.abort());
  inFlight.clear();
}

/** The error of a call refused or aborted by pause(): status 0, `signedOut` set. */
function signedOut() {
  const error = new ApiError(0, "signed out");
  error.signedOut = true;
  return error;
}

/** Signed in again: calls go out. */
export function resume() {
  paused = false;
}

/** Call fn() whenever the API answers 401 (the session is missing or expired). */
export function onSignedOut(fn) {
  listeners.signedOut.push(fn);
}

/** One API call; resolves with the decoded JSON, rejects with an ApiError. */
export async function call(method, path, body) {
  const options = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const session = path === "/session";
  if (paused && !session) throw signedOut();
  const controller = new AbortController();
  options.signal = controller.signal;
  inFlight.add(controller);
  let response;
  let data = null;
  try {
    try {
      response = await fetch(path, options);
    } catch (error) {
      throw controller.signal.aborted ? signedOut() : new ApiError(0, "the service is unreachable");
    }
    try {
      data = await response.json();
    } catch (error) {
      data = null;
    }
  } finally {
    inFlight.delete(controller);
  }
  if (controller.signal.aborted) throw signedOut();
  if (!response.ok) {
    if (response.status === 401 && path !== "/session") {
      listeners.signedOut.forEach((fn) => fn());
    }
    const message = data && data.error ? data.error : `HTTP ${response.status}`;
    throw new ApiError(response.status, message, data && data.field);
  }
  return data;
}

export const get = (path) => call("GET", path);
export const post = (path, body) => call("POST", path, body);

/** A path segment, percent-encoded (character ids hold a colon). */
export const seg = (text) => encodeURIComponent(text);
