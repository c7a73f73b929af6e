// The HTTP API from the page: same origin, the session cookie, JSON both ways.

export class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field;
  }
}

const listeners = { signedOut: [] };

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
  let response;
  try {
    response = await fetch(path, options);
  } catch (error) {
    throw new ApiError(0, "the service is unreachable");
  }
  let data = null;
  try {
    data = await response.json();
  } catch (error) {
    data = null;
  }
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
