"""The console's loop traces in a real browser: Pip's loop as a waterfall, live and stored,
searched, kept across a restart, used from the keyboard and at a phone's width."""

from __future__ import annotations

from pathlib import Path

from tests.browser.chromium import Browser, Page
from tests.browser.conftest import Service, sign_in
from tests.browser.test_console import SOUP, choose, screenshot


def pips_loop(page: Page) -> None:
    """Bob asks Pip about the soup; her loop ends and its trace is listed."""
    page.click("#assistants li[data-assistant='pip'] button")
    page.wait_for("document.querySelector('#detail-title').textContent === 'pip'", "Pip's panel")
    choose(page, "#character", "char:bob")
    page.fill("#text", SOUP)
    page.click("#speak-form button[type=submit]")
    page.wait_for("/loop ended/.test(document.querySelector('#live').textContent)",
                  "the end of Pip's loop")
    page.wait_for("[...document.querySelectorAll('#traces .trace-pick')].some(b => "
                  "/say/.test(b.textContent) && !/running/.test(b.textContent))",
                  "Pip's stored trace in the list")


def rows(page: Page) -> list[dict[str, str]]:
    return page.evaluate("""[...document.querySelectorAll('#waterfall .span')].map(li => ({
        kind: li.dataset.kind, label: li.querySelector('.label').textContent,
        facts: li.querySelector('.facts').textContent,
        width: li.querySelector('.span-bar').style.width}))""")


def test_a_loop_is_a_waterfall_of_model_requests_and_tool_calls(page: Page, service: Service,
                                                                 tmp_path: Path) -> None:
    """The newest trace opens by itself: each model request with its tokens, each tool call
    in order with its duration, every bar within the track; the API says the same."""
    pips_loop(page)
    page.click("#traces .trace-pick:not([data-trace=live])")
    page.wait_for("document.querySelector('#waterfall').dataset.trace "
                  "&& document.querySelector('#waterfall').dataset.trace !== 'live'",
                  "a stored trace drawn")
    shown = rows(page)
    trace_id = page.evaluate("document.querySelector('#waterfall').dataset.trace")
    stored = service.call("GET", f"/traces/{trace_id}")
    assert [r["kind"] for r in shown] == [s["kind"] for s in stored["spans"]]
    tools = [r["label"].removeprefix("tool ") for r in shown if r["kind"] == "tool"]
    assert tools == [s["name"] for s in stored["spans"] if s["kind"] == "tool"]
    assert "inspect_location" in tools and tools[-1] == "say"
    assert all("tokens" in r["facts"] for r in shown if r["kind"] == "chat")
    assert all(0 < float(r["width"].rstrip("%")) <= 100 for r in shown)
    head = page.text("#waterfall .trace-head")
    assert stored["reason"] in head and "tokens" in head
    screenshot(page, "trace-view.png", tmp_path)


def test_search_by_tool_and_failure(page: Page, service: Service) -> None:
    """A tool no loop called finds nothing; failed-only finds no failed loop of Pip's."""
    pips_loop(page)
    page.fill("#trace-tool", "no_such_tool")
    page.click("#trace-search")
    page.wait_for("document.querySelectorAll('#traces li').length === 0", "an empty search")
    page.fill("#trace-tool", "say")
    page.click("#trace-search")
    page.wait_for("document.querySelectorAll('#traces li').length > 0", "Pip's loops with say")
    assert all("say" in t for t in page.evaluate(
        "[...document.querySelectorAll('#traces .trace-pick')].map(b => b.textContent)"))
    page.fill("#trace-tool", "")
    page.evaluate("document.querySelector('#trace-failed').checked = true")
    page.click("#trace-search")
    page.wait_for("document.querySelectorAll('#traces li').length === 0", "no failed loop")


def test_traces_survive_a_restart_and_open_from_the_keyboard(page: Page, service: Service
                                                             ) -> None:
    """Restarted, the service still lists Pip's past loops; Tab to one, Enter draws it."""
    pips_loop(page)
    before = service.call("GET", "/traces?assistant=pip")["traces"]
    service.restart()
    after = service.call("GET", "/traces?assistant=pip")["traces"]
    assert [t["id"] for t in after] == [t["id"] for t in before] and after
    page.goto(service.url + "/")  # a fresh page: what it shows comes from the store
    page.wait_for("document.querySelectorAll('#assistants li').length >= 2", "the assistants")
    page.click("#assistants li[data-assistant='pip'] button")
    page.wait_for("document.querySelectorAll('#traces .trace-pick').length >= 2",
                  "the stored traces after the restart")
    oldest = str(after[-1]["id"])
    page.evaluate("document.querySelector('#trace-search').focus()")
    for _ in range(40):
        page.press("Tab", "Tab", 9)
        if page.evaluate("document.activeElement.dataset.trace") == oldest:
            break
    assert page.evaluate("document.activeElement.dataset.trace") == oldest
    page.press("Enter", "Enter", 13)
    page.wait_for(f"document.querySelector('#waterfall').dataset.trace === '{oldest}'",
                  "the oldest trace drawn")


def test_the_waterfall_fits_a_phone(browser: Browser, service: Service, tmp_path: Path
                                    ) -> None:
    """At 390 px the trace list and the waterfall need no horizontal scroll."""
    phone = browser.new_page(390, 844)
    try:
        sign_in(phone, service)
        pips_loop(phone)
        phone.wait_for("document.querySelectorAll('#waterfall .span').length > 0",
                       "a waterfall")
        width = phone.evaluate("document.documentElement.scrollWidth")
        wide = phone.evaluate("""[...document.querySelectorAll('#detail *')]
            .filter(e => e.getBoundingClientRect().right > 391).map(e => e.id || e.className)""")
        assert width <= 390 and wide == [], (width, wide)
        assert phone.foreign_requests(service.url) == []
    finally:
        phone.close()
