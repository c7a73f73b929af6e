"""Fixtures of the browser tests: a real ``twistd ai-assistant`` and headless Chromium.

The service runs the example configuration (Pip and Mason in the example
world, the scripted stand-in model of ``examples/demo-scenario.toml``) with
its HTTP API on a free port of 127.0.0.1, its state in a temporary SQLite
file and an API token, so the page's sign-in is part of every test.  One
service and one browser serve a module's tests; each test opens its own tab
and fails if the page asked any host but the service for anything, or threw.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.chromium import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
TWISTD = Path(sys.executable).with_name("twistd")
START_WAIT = 60.0


class Service:
    """The twistd process: its base URL, its token, and JSON calls to its API."""

    def __init__(self, directory: Path, config: Path | None = None) -> None:
        self.directory = directory
        self.config = config or ROOT / "examples" / "assistant.toml"
        self.token = secrets.token_urlsafe(24)
        self.token_file = directory / "api-token"
        self.token_file.write_text(self.token)
        self.token_file.chmod(0o600)
        self.runs = 0
        self.start("127.0.0.1:0")

    def start(self, listen: str) -> None:
        """Start twistd (its API on ``listen``) and wait until it is ready."""
        self.runs += 1
        self.log = self.directory / f"twistd-{self.runs}.out"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LLM_", "AI_TOOLS_", "COVERAGE_PROCESS"))}
        env["PYTHONUNBUFFERED"] = "1"
        args = [str(TWISTD), "-n", "--pidfile=", "ai-assistant",
                "--config", str(self.config),
                "--http", listen, "--http-token-file", str(self.token_file),
                "--db", str(self.directory / "assistants.sqlite"), "--tick-interval", "0.2"]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(args, cwd=self.directory, env=env, stdout=out,
                                            stderr=subprocess.STDOUT)
        self.url = "http://" + self._wait_for(r"HTTP API listening on http://(127\.0\.0\.1:\d+)/")
        self._wait_for(r"ai_tools service ready()")

    def restart(self) -> None:
        """Stop it, then start it again on the same port with the same state."""
        self.stop()
        self.start(self.url.removeprefix("http://"))

    def output(self) -> str:
        return self.log.read_text("utf-8", "replace")

    def _wait_for(self, pattern: str) -> str:
        deadline = time.monotonic() + START_WAIT
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output())
            if match:
                return match.group(1)
            if self.process.poll() is not None:
                raise AssertionError(f"twistd ended ({self.process.returncode}):\n"
                                     f"{self.output()}")
            time.sleep(0.05)
        raise AssertionError(f"gave up waiting for {pattern!r}:\n{self.output()}")

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One API call with the token (JSON in, JSON out)."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = Service(tmp_path_factory.mktemp("console"))
    try:
        yield running
    finally:
        running.stop()
    for log in sorted(running.directory.glob("twistd-*.out")):
        assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = Browser()
    try:
        yield chromium
    finally:
        chromium.close()


def sign_in(page: Page, service: Service) -> None:
    """Open the console and sign in with the token, as an operator does once."""
    page.goto(service.url + "/")
    page.wait_for("!document.querySelector('#sign-in').hidden", "the sign-in form")
    page.fill("#token", service.token)
    page.press("Enter", "Enter", 13)
    page.wait_for("document.querySelectorAll('#assistants li').length >= 2",
                  "the assistants after signing in")


@pytest.fixture
def page(browser: Browser, service: Service) -> Iterator[Page]:
    """A signed-in tab of 1280x800; at the end, no request left the service, nothing threw
    (a failed request's console message included)."""
    tab = browser.new_page()
    sign_in(tab, service)
    yield tab
    foreign = tab.foreign_requests(service.url)
    errors = tab.errors()
    failed = tab.failed_responses()
    tab.close()
    assert foreign == [], f"the page asked other hosts: {foreign}"
    assert errors == [], f"the page reported errors: {errors}"
    assert failed == [], f"requests of the page failed: {failed}"
