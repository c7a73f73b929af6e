"""Headless Chromium driven over the DevTools protocol, through a pipe.

Chromium started with ``--remote-debugging-pipe`` reads protocol messages
from its file descriptor 3 and writes its own to 4, each a JSON object ended
by a NUL byte: no port, no WebSocket client, nothing but the Debian package.
:class:`Browser` owns the process; :class:`Page` is one tab (a flattened
session) that records every network request it makes.  Every wait has a
deadline and ends as soon as what it waits for arrives.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

WAIT = 20.0
"""Upper bound of a wait in the browser (seconds); each ends as soon as it can."""


class BrowserError(AssertionError):
    """The browser answered a command with an error, or a wait ran out."""


def chromium_binary() -> str:
    """The Chromium of Debian's package (``apt-get install chromium``)."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise BrowserError("Chromium is not installed: `make test` installs it "
                       "(Debian: apt-get install chromium)")


def _pipe() -> tuple[int, int]:
    """A pipe whose ends are above 4, so the child's ``dup2`` to 3 and 4 never meets them."""
    ends = []
    for end in os.pipe():
        ends.append(fcntl.fcntl(end, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(end)
    return ends[0], ends[1]


class Browser:
    """One headless Chromium process and the protocol pipe to it."""

    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="ai-tools-chromium-")
        to_browser_read, self._write_fd = _pipe()
        self._read_fd, from_browser_write = _pipe()

        def pipes_as_3_and_4() -> None:
            os.dup2(to_browser_read, 3)
            os.dup2(from_browser_write, 4)

        args = [chromium_binary(), "--headless", "--remote-debugging-pipe",
                f"--user-data-dir={self.profile}", "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--mute-audio",
                "--hide-scrollbars", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium's sandbox refuses to run as root
        self.process = subprocess.Popen(args, preexec_fn=pipes_as_3_and_4, close_fds=False,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    # -- the protocol ------------------------------------------------------------------

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = WAIT) -> dict[str, Any]:
        """Run one command and return its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method,
                                   "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._write_fd, json.dumps(message).encode("utf-8") + b"\0")
        want = self._next_id
        deadline = time.monotonic() + timeout
        while True:
            for reply in self._read(deadline, f"the answer to {method}"):
                if reply.get("id") == want:
                    if "error" in reply:
                        raise BrowserError(f"{method}: {reply['error']}")
                    result: dict[str, Any] = reply.get("result", {})
                    return result

    def pump(self, until: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        """Read events until ``until()`` holds."""
        deadline = time.monotonic() + timeout
        while not until():
            self._read(deadline, what)

    def _read(self, deadline: float, what: str) -> list[dict[str, Any]]:
        """The messages of one read: replies are returned, events kept in :attr:`events`."""
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read_fd], [], [], left)[0]:
                raise BrowserError(f"gave up waiting for {what}")
            chunk = os.read(self._read_fd, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium ended while waiting for {what}")
            self._buffer += chunk
        *complete, self._buffer = self._buffer.split(b"\0")
        messages = [json.loads(raw) for raw in complete]
        for message in messages:
            if message.get("method") == "Page.javascriptDialogOpening":
                self._accept_dialog(message.get("sessionId"))
        self.events.extend(m for m in messages if "method" in m)
        return [m for m in messages if "id" in m]

    def _accept_dialog(self, session: str | None) -> None:
        """Answer OK to a ``confirm()``, as the operator does (its reply is not awaited:
        the command that opened the dialog is still waiting for its own)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": "Page.handleJavaScriptDialog",
                   "params": {"accept": True}, "sessionId": session}
        os.write(self._write_fd, json.dumps(message).encode("utf-8") + b"\0")

    # -- tabs ----------------------------------------------------------------------------

    def new_page(self, width: int = 1280, height: int = 800) -> Page:
        """A fresh tab of ``width`` x ``height`` CSS pixels, recording its requests.

        Each tab has a context of its own: no cookie or storage of another tab.
        """
        context = self.send("Target.createBrowserContext")["browserContextId"]
        target = self.send("Target.createTarget", {"url": "about:blank",
                                                   "browserContextId": context})["targetId"]
        session = self.send("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session, context)
        for domain in ("Page", "Runtime", "Network", "Log"):
            page.send(f"{domain}.enable")
        page.resize(width, height)
        return page

    def close(self) -> None:
        """End Chromium and remove its profile."""
        try:
            self.send("Browser.close", timeout=5)
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._read_fd, self._write_fd):
            os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """One tab: navigate, evaluate, wait for the page, type, press keys, screenshot."""

    def __init__(self, browser: Browser, target: str, session: str, context: str) -> None:
        self.browser = browser
        self.context = context
        self.target = target
        self.session = session
        self.expected_failures: list[str] = []
        """Regular expressions of ``status URL`` answers a test expects to fail."""

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session)

    def events(self, method: str) -> list[dict[str, Any]]:
        """The params of this tab's events named ``method``, oldest first."""
        return [e.get("params", {}) for e in self.browser.events
                if e.get("sessionId") == self.session and e["method"] == method]

    def requested_urls(self) -> list[str]:
        """Every URL this tab asked the network for (data: URLs left out)."""
        return [e["request"]["url"] for e in self.events("Network.requestWillBeSent")
                if not e["request"]["url"].startswith("data:")]

    def foreign_requests(self, origin: str) -> list[str]:
        """The requests to any host but ``origin`` (``http://127.0.0.1:PORT``)."""
        own = urlsplit(origin).netloc
        return [url for url in self.requested_urls()
                if urlsplit(url).netloc != own and not url.startswith("about:")]

    def failed_responses(self) -> list[str]:
        """``status URL`` of every answer of 400 or more the page got."""
        failed = [f"{r['response']['status']} {r['response']['url']}"
                  for r in self.events("Network.responseReceived")
                  if r["response"]["status"] >= 400]
        return [f for f in failed if not any(re.search(p, f) for p in self.expected_failures)]

    def errors(self) -> list[str]:
        """Exceptions thrown in the page and console errors (CSP violations among them);
        failed requests are :meth:`failed_responses`."""
        thrown = [e["exceptionDetails"].get("exception", {}).get("description")
                  or e["exceptionDetails"].get("text", "")
                  for e in self.events("Runtime.exceptionThrown")]
        logged = [e["entry"]["text"] for e in self.events("Log.entryAdded")
                  if e["entry"]["level"] == "error" and e["entry"].get("source") != "network"]
        return thrown + logged

    def resize(self, width: int, height: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1,
                   "mobile": width < 600})

    def goto(self, url: str) -> None:
        """Load ``url`` and wait for its load event."""
        before = len(self.events("Page.loadEventFired"))
        self.send("Page.navigate", {"url": url})
        self.browser.pump(lambda: len(self.events("Page.loadEventFired")) > before,
                          f"{url} to load")

    def evaluate(self, expression: str, timeout: float = WAIT) -> Any:
        """The value of a JavaScript expression (a promise is awaited)."""
        result = self.browser.send("Runtime.evaluate", {
            "expression": expression, "awaitPromise": True, "returnByValue": True,
            "timeout": int(timeout * 1000)}, session=self.session, timeout=timeout + 5)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"{expression!r} threw: {text}")
        return result["result"].get("value")

    def wait_for(self, condition: str, what: str, timeout: float = WAIT) -> Any:
        """Wait until a JavaScript expression is truthy in the page; its value."""
        script = f"""new Promise((resolve, reject) => {{
            const until = Date.now() + {int(timeout * 1000)};
            const check = () => {{
                let value;
                try {{ value = ({condition}); }} catch (e) {{ value = undefined; }}
                if (value) resolve(value);
                else if (Date.now() > until) reject(new Error("timed out"));
                else setTimeout(check, 50);
            }};
            check();
        }})"""
        try:
            return self.evaluate(script, timeout=timeout + 2)
        except BrowserError as error:
            raise BrowserError(f"gave up waiting for {what} ({condition})") from error

    def text(self, selector: str) -> str:
        value = self.evaluate(f"document.querySelector({json.dumps(selector)})?.innerText ?? ''")
        return str(value)

    def click(self, selector: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    def fill(self, selector: str, value: str) -> None:
        """Type ``value`` into a field as a user would (focus, select all, insert text)."""
        self.evaluate(f"(() => {{ const f = document.querySelector({json.dumps(selector)}); "
                      "f.focus(); f.select(); })()")
        self.send("Input.insertText", {"text": value})

    def press(self, key: str, code: str, key_code: int, shift: bool = False) -> None:
        """Press and release one key (``Tab``, ``Enter``...)."""
        modifiers = 8 if shift else 0
        for kind in ("rawKeyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", {
                "type": kind, "key": key, "code": code, "windowsVirtualKeyCode": key_code,
                "nativeVirtualKeyCode": key_code, "modifiers": modifiers})
        if key == "Enter":
            self.send("Input.dispatchKeyEvent", {"type": "char", "text": "\r", "key": key,
                                                 "code": code, "modifiers": modifiers})

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        """A PNG of the page (all of it, when ``full_page``)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            metrics = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": metrics["width"],
                              "height": metrics["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", params)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})
        self.browser.send("Target.disposeBrowserContext", {"browserContextId": self.context})
