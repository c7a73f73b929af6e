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
def choose(page: Page, selector: str, value: str) -> None:
    """Pick ``value`` in the select ``selector`` as a user does (a change event follows)."""
    page.evaluate(f"""(() => {{ const s = document.querySelector({json.dumps(selector)});
        s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})()""")
    assert page.evaluate(f"document.querySelector({json.dumps(selector)}).value") == value


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
    choose(page, "#character", "char:bob")
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


def test_a_reload_mid_loop_loses_nothing(page: Page, service: Service) -> None:
    """Reloaded after Pip's first tool call, the page replays what it missed (Last-Event-ID):
    every step of her loop is there once, in order."""
    page.click("#assistants li[data-assistant='pip'] button")
    page.wait_for("document.querySelector('#detail-title').textContent === 'pip'", "Pip's panel")
    choose(page, "#character", "char:bob")
    page.fill("#text", SOUP)
    page.click("#speak-form button[type=submit]")
    page.wait_for("document.querySelector('#live li[data-event=tool_call]')", "a first tool call")
    page.goto(service.url + "/")
    page.wait_for("/loop ended/.test(document.querySelector('#live').textContent)",
                  "the end of Pip's loop after the reload")
    calls = page.evaluate("[...document.querySelectorAll('#live li[data-event=tool_call]')]"
                          ".map(li => li.lastChild.textContent.split('(')[0])")
    assert calls == ["inspect_location", "recall_memories", "search_object", "get_attributes",
                     "get_attributes", "say"], calls
    assert page.text("#detail-title") == "pip"


def test_history_pages_back_to_the_first_message(page: Page, service: Service) -> None:
    """"Show older" adds the page before the oldest shown until the first message."""
    page.click("#assistants li[data-assistant='pip'] button")
    page.wait_for("document.querySelector('#history li')", "Pip's history")
    for _ in range(20):
        if page.evaluate("document.querySelector('#history-older').hidden"):
            break
        shown = page.evaluate("document.querySelectorAll('#history li').length")
        page.click("#history-older")
        page.wait_for(f"document.querySelectorAll('#history li').length > {shown}", "an older page")
    indexes = page.evaluate("[...document.querySelectorAll('#history li')]"
                            ".map(li => Number(li.dataset.index))")
    total = service.call("GET", "/assistants/pip/history?limit=1")["total"]
    assert indexes == list(range(total)), indexes


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
    for summary in ("#create summary", "#configure summary"):  # opened from the keyboard too
        page.evaluate(f"document.querySelector('{summary}').focus()")
        page.press("Enter", "Enter", 13)
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


def test_create_configure_and_remove_an_assistant(page: Page, service: Service) -> None:
    """Wren is created on Alice's character, her tick rate changed, then removed."""
    page.evaluate("document.querySelector('#create').open = true")
    page.wait_for("document.querySelector('#create-character option[value=\"char:alice\"]')",
                  "Alice among the free characters")
    page.fill("#create-name", "wren")
    page.evaluate("document.querySelector('#create-character').value = 'char:alice'")
    page.fill("#create-persona", "You are Wren, a quiet traveller.")
    page.click("#create-button")
    page.wait_for("document.querySelector(\"#assistants li[data-assistant='wren']\")",
                  "Wren's card")
    page.wait_for("document.querySelector('#detail-title').textContent === 'wren'",
                  "Wren chosen")
    assert service.call("GET", "/assistants/wren")["character_id"] == "char:alice"

    page.evaluate("document.querySelector('#configure').open = true")
    page.wait_for("document.querySelector('#configure-persona').value.includes('Wren')",
                  "Wren's configuration in the form")
    page.fill("#configure-tick-rate", "7")
    page.click("#configure-button")
    page.wait_for("/Saved: tick_rate/.test(document.querySelector('#configure-status')"
                  ".textContent)", "the change saved")
    assert service.call("GET", "/assistants/wren/config")["config"]["tick_rate"] == 7

    # Wren's last events may make the page ask for her loops as she goes: a 404 is fine
    page.expected_failures.append(r"^404 .*/assistants/wren/")
    page.click("#remove")  # confirm() is accepted
    page.wait_for("!document.querySelector(\"#assistants li[data-assistant='wren']\")",
                  "Wren gone from the list")
    names = [a["name"] for a in service.call("GET", "/assistants")["assistants"]]
    assert "wren" not in names


def test_emergency_stop_all_and_clear(page: Page, service: Service) -> None:
    """The header's emergency stop stops every assistant until cleared."""
    page.wait_for("!document.querySelector('#emergency').hidden", "the emergency button")
    page.click("#emergency")  # confirm() is accepted
    page.wait_for("[...document.querySelectorAll('#assistants li')].every(li => "
                  "/emergency-stopped/.test(li.dataset.state))", "every card stopped")
    statuses = service.call("GET", "/assistants")["assistants"]
    assert all(s["emergency_stopped"] for s in statuses), statuses
    page.wait_for("!document.querySelector('#emergency-clear').hidden", "the clear button")
    page.click("#emergency-clear")
    page.wait_for("[...document.querySelectorAll('#assistants li')].every(li => "
                  "!/emergency-stopped/.test(li.dataset.state))", "every card cleared")
    assert not any(s["emergency_stopped"]
                   for s in service.call("GET", "/assistants")["assistants"])


def test_signed_out_shows_only_the_sign_in(page: Page, service: Service) -> None:
    """Signed out, the page shows the sign-in form alone: no "Sign out" button, no panels;
    signing in again brings them back."""
    assert not page.evaluate("document.querySelector('#sign-out').hidden")
    page.click("#sign-out")
    page.wait_for("!document.querySelector('#sign-in').hidden", "the sign-in form")
    assert page.evaluate("document.querySelector('#sign-out').hidden")
    assert page.evaluate("document.querySelector('#console').hidden")
    assert page.evaluate("getComputedStyle(document.querySelector('#sign-out')).display") == "none"
    page.fill("#token", service.token)
    page.press("Enter", "Enter", 13)
    page.wait_for("!document.querySelector('#console').hidden", "the console again")
    assert not page.evaluate("document.querySelector('#sign-out').hidden")


def test_history_shows_arguments_and_older_is_above(page: Page, service: Service) -> None:
    """Tool calls in the history show their arguments; "Show older" comes before the list
    (older entries are added on top)."""
    service.call("POST", "/messages", {"character": "char:bob", "text": SOUP})
    page.click("#assistants li[data-assistant='pip'] button")
    page.wait_for("[...document.querySelectorAll('#history li')].some(li => "
                  "/→ \\w+\\(\\{.+\\}\\)/.test(li.textContent))", "a call with its arguments")
    assert page.evaluate("""document.querySelector('#history-older').compareDocumentPosition(
        document.querySelector('#history')) & Node.DOCUMENT_POSITION_FOLLOWING""")


def test_the_forms_offer_what_the_service_knows(page: Page, service: Service) -> None:
    """Model profiles and the speaking character are choices, not free text; the
    character choice of "New assistant" fits its panel."""
    models = service.call("GET", "/assistants")["service"]["models"]
    page.evaluate("document.querySelector('#create').open = true")
    page.wait_for("document.querySelectorAll('#create-model option').length > 0", "the models")
    assert page.evaluate("[...document.querySelectorAll('#create-model option')]"
                         ".map(o => o.value)") == models
    assert page.evaluate("document.querySelector('#character').tagName") == "SELECT"
    players = page.evaluate("[...document.querySelectorAll('#character option')].map(o => o.value)")
    assert "char:bob" in players and "char:pip" not in players, players
    fits = page.evaluate("""(() => {
        const select = document.querySelector('#create-character');
        const panel = select.closest('.panel').getBoundingClientRect();
        const box = select.getBoundingClientRect();
        const pen = document.createElement('canvas').getContext('2d');
        pen.font = getComputedStyle(select).font;
        const longest = Math.max(...[...select.options].map(o => pen.measureText(o.text).width));
        return {inside: box.right <= panel.right, room: select.clientWidth - 40,
                longest};})()""")
    assert fits["inside"] and fits["longest"] <= fits["room"], fits  # no name cut off


def test_an_operator_approves_a_call_from_the_console(page: Page, service: Service) -> None:
    """With Pip's say needing approval, her answer waits on the page until Approve; then
    Bob hears it.  The live loop shows the request and the decision."""
    service.call("PATCH", "/assistants/pip", {"tool_approval": {"say": "operator"}})
    try:
        page.click("#assistants li[data-assistant='pip'] button")
        page.wait_for("document.querySelector('#detail-title').textContent === 'pip'", "Pip")
        service.call("POST", "/messages", {"character": "char:bob", "text": SOUP})
        page.wait_for("document.querySelector('#approvals li[data-assistant-of=pip]')",
                      "Pip's say waiting for approval", timeout=30)
        assert not page.evaluate("document.querySelector('#approvals-box').hidden")
        assert "say" in page.text("#approvals")
        waiting = service.call("GET", "/approvals")["approvals"]
        assert [a["tool"] for a in waiting] == ["say"]
        page.click("#approvals li[data-assistant-of=pip] button.approve")
        page.wait_for("document.querySelector('#approvals-box').hidden", "the list emptied")
        page.wait_for("/say approved by console/.test(document.querySelector('#live')"
                      ".textContent)", "the decision in the live loop")
        assert "waits for an operator's approval" in page.text("#live")
        assert service.call("GET", "/approvals")["approvals"] == []
    finally:
        service.call("PATCH", "/assistants/pip", {"tool_approval": {}})


def test_the_page_says_when_the_service_is_gone_and_catches_up(page: Page,
                                                               service: Service) -> None:
    """Stopped, the service is shown unreachable; restarted, the page reconnects, is told
    the events it had seen are from the previous run, and reloads its state.
    (Last in the module: it restarts the service.)"""
    page.click("#assistants li[data-assistant='pip'] button")
    page.wait_for("document.querySelector('#connection').textContent === 'live'", "live")
    service.call("POST", "/messages", {"character": "char:bob",
                                       "text": "Perfect. Two bowls, please, Pip."})
    page.wait_for("document.querySelector('#live li[data-event=termination]')",
                  "the page seeing a loop of this run")
    service.stop()
    page.wait_for("/unreachable/.test(document.querySelector('#connection').textContent)",
                  "the service shown unreachable")
    service.restart()
    page.wait_for("document.querySelector('#connection').textContent === 'live'",
                  "the page connected again", timeout=30)
    page.wait_for("/missed.*service restarted/.test(document.querySelector('#notice')"
                  ".textContent)", "the page saying it reloaded its state")
