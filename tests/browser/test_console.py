"""The web console in a real browser, used as an operator uses it.

Headless Chromium (Debian's package) against a real ``twistd ai-assistant``
running the example configuration with the scripted model: sign in with the
token, see the example assistants, speak to Pip as Bob and watch her loop and
her answer arrive live, disable and enable her.  Every test also fails if the
page asked any host but the service (see ``conftest.page``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.browser.chromium import Browser, Page
from tests.browser.conftest import Service, sign_in

DOCS = Path(__file__).resolve().parents[2] / "docs"


def screenshot(page: Page, name: str, tmp_path: Path) -> None:
    """A screenshot for docs/: written there when missing or when AI_TOOLS_UPDATE_SCREENSHOTS
    is set (committed once), else into the test's directory (the checkout stays clean)."""
    target = DOCS / name
    if target.exists() and not os.environ.get("AI_TOOLS_UPDATE_SCREENSHOTS"):
        target = tmp_path / name
    page.screenshot(target)
    assert target.stat().st_size > 10_000, target
CONTROL_NAME = """e => e.id || e.closest('[data-assistant]')?.dataset.assistant
    || `${e.tagName}:${e.textContent.trim()}`"""
SOUP = "Evening, Pip! What's the soup tonight, and do you remember how I take it?"


def test_the_page_shows_the_example_assistants(page: Page, service: Service) -> None:
    """Pip and Mason are listed with their state, last loop and next tick."""
    cards = page.evaluate("""[...document.querySelectorAll('#assistants li')].map(li => ({
        name: li.dataset.assistant, state: li.dataset.state, text: li.innerText}))""")
    assert [c["name"] for c in cards] == ["mason", "pip"]
    for card in cards:
        assert card["state"].split()[0] in ("awake", "asleep"), card
        assert "next tick" in card["text"] and "pending" in card["text"], card
    page.wait_for("document.querySelector('#connection').textContent === 'live'",
                  "the event stream's connection")


def test_speaking_as_bob_shows_pips_loop_and_answer_live(page: Page, service: Service,
                                                          tmp_path: Path) -> None:
    """Bob asks about the soup; Pip's tool calls, her loop's end and her answer appear."""
    page.click("#assistants li[data-assistant='pip'] button")
    page.wait_for("document.querySelector('#detail-title').textContent === 'pip'", "Pip's panel")
    page.fill("#character", "char:bob")
    page.fill("#text", SOUP)
    page.click("#speak-form button[type=submit]")
    page.wait_for("/Heard by/.test(document.querySelector('#speak-status').textContent)",
                  "the message's acknowledgement")
    page.wait_for("[...document.querySelectorAll('#live li')].some(li => "
                  "li.dataset.event === 'tool_call' && /inspect_location/.test(li.textContent))",
                  "Pip's first tool call in the live loop")
    page.wait_for("[...document.querySelectorAll('#heard li')].some(li => "
                  "/Fish chowder tonight/.test(li.textContent))", "Pip's answer in Bob's hearing")
    live = page.text("#live")
    for step in ("recall_memories", "get_attributes", "say", "loop ended"):
        assert step in live, live
    heard = page.text("#heard")
    assert "Pip says" in heard, heard
    page.wait_for("/the last took \\d+ ms, \\d+ tokens/.test("
                  "document.querySelector('#chart-note').textContent)", "the model chart")
    assert "model_request" in page.evaluate(
        "[...document.querySelectorAll('#live li')].map(li => li.dataset.event).join(' ')")
    screenshot(page, "web-console.png", tmp_path)


def test_disable_and_enable_pip(page: Page, service: Service) -> None:
    """The toggle disables Pip (her card says so, the API agrees) and enables her again."""
    page.click("#assistants li[data-assistant='pip'] button")
    page.wait_for("document.querySelector('#toggle').textContent === 'Disable'", "the toggle")
    page.click("#toggle")
    page.wait_for("/disabled/.test(document.querySelector("
                  "\"#assistants li[data-assistant='pip']\").dataset.state)", "Pip disabled")
    assert service.call("GET", "/assistants/pip")["enabled"] is False
    page.wait_for("document.querySelector('#toggle').textContent === 'Enable'", "Enable")
    page.click("#toggle")
    page.wait_for("!/disabled/.test(document.querySelector("
                  "\"#assistants li[data-assistant='pip']\").dataset.state)", "Pip enabled")
    assert service.call("GET", "/assistants/pip")["enabled"] is True


def test_the_page_is_served_with_its_security_policy(page: Page, service: Service) -> None:
    """The HTML and every file come with ``default-src 'self'``; JSON clients get JSON."""
    responses = page.events("Network.responseReceived")
    own = [r["response"] for r in responses if r["response"]["url"].startswith(service.url)
           and r["type"] in ("Document", "Script", "Stylesheet")]
    assert {r["mimeType"] for r in own} >= {"text/html", "text/javascript", "text/css"}
    for response in own:
        headers = {k.lower(): v for k, v in response["headers"].items()}
        assert headers["content-security-policy"].startswith("default-src 'self'"), response
    assert json.dumps(service.call("GET", "/")).startswith('{"service": "ai_tools"')


def test_every_control_is_reachable_by_tab(page: Page, service: Service) -> None:
    """Tab from the top of the page visits every button, field and list entry, in order."""
    page.click("#assistants li[data-assistant='pip'] button")
    page.wait_for("!document.querySelector('#detail').hidden", "Pip's panel")
    page.evaluate(f"window.controlName = {CONTROL_NAME}")
    controls = page.evaluate("""[...document.querySelectorAll(
        'button, input, select, textarea, a[href], [tabindex]')]
        .filter(e => !e.disabled && e.offsetParent !== null && e.tabIndex >= 0)
        .map(controlName)""")
    assert {"tick", "stop", "toggle", "character", "kind", "text", "send", "mason",
            "pip"} <= set(controls)
    reached = []
    for _ in range(2 * len(controls) + 4):  # from wherever focus is, round the page
        page.press("Tab", "Tab", 9)
        reached.append(page.evaluate("controlName(document.activeElement)"))
    missing = set(controls) - set(reached)
    assert not missing, f"not reached by Tab: {missing}; controls {controls}; reached {reached}"
    # and a control works from the keyboard: Enter on Pip's toggle disables her
    page.evaluate("document.querySelector('#toggle').focus()")
    page.press("Enter", "Enter", 13)
    page.wait_for("document.querySelector('#toggle').textContent === 'Enable'", "Pip disabled")
    page.press("Enter", "Enter", 13)
    page.wait_for("document.querySelector('#toggle').textContent === 'Disable'", "Pip enabled")


def test_a_phone_width_needs_no_horizontal_scroll(browser: Browser, service: Service,
                                                  tmp_path: Path) -> None:
    """At 390 px every panel fits: nothing is wider than the screen, after a loop too."""
    phone = browser.new_page(390, 844)
    try:
        sign_in(phone, service)
        phone.click("#assistants li[data-assistant='pip'] button")
        phone.wait_for("document.querySelector('#history li')", "Pip's history")
        width = phone.evaluate("document.documentElement.scrollWidth")
        wide = phone.evaluate("""[...document.querySelectorAll('body *')]
            .filter(e => e.getBoundingClientRect().right > 391)
            .map(e => e.id || e.className || e.tagName)""")
        screenshot(phone, "web-console-390.png", tmp_path)
        assert width <= 390 and wide == [], (width, wide)
        assert phone.foreign_requests(service.url) == [] and phone.errors() == []
    finally:
        phone.close()
