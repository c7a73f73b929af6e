"""The web console's model-server panel, in a real browser: one slot, two assistants
spoken to at once, so one request computes while the other waits its turn in the
service's queue -- the panel shows both, who waits, and the waits afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.chromium import Browser, Page
from tests.browser.conftest import Service, sign_in

ROOT = Path(__file__).resolve().parents[2]
LATENCY = 12.0
"""Seconds each scripted answer takes: longer than the page's 5-second refresh, so the
waiting request is on the page for at least one refresh."""
CARD = "document.querySelector('#model-servers li[data-model-server]')"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    directory = tmp_path_factory.mktemp("console-models")
    scenario = directory / "slow.toml"
    scenario.write_text(f"""
description = "Every answer takes {LATENCY:g} s: one slot, so a second request waits."
model = "slow"

[default]
text = "One moment."
latency = {LATENCY}
""")
    config = directory / "assistant.toml"
    config.write_text(f"""
[world]
file = {str(ROOT / "examples" / "world.toml")!r}

[models.default]
scenario = {str(scenario)!r}
server_slots = 1

[[assistants]]
name = "pip"
character_id = "char:pip"

[[assistants]]
name = "mason"
character_id = "char:mason"
""")
    running = Service(directory, config)
    try:
        yield running
    finally:
        running.stop()


def speak_to_both(service: Service) -> None:
    service.call("POST", "/messages", {"character": "char:bob", "text": "Pip, a word?"})
    service.call("POST", "/messages", {"character": "char:alice", "kind": "page",
                                       "target": "char:mason", "text": "Mason, a word?"})


def test_the_panel_shows_the_slot_and_who_waits_for_it(page: Page, service: Service) -> None:
    page.wait_for(f"{CARD} && !document.querySelector('#models').hidden",
                  "the model server's card")
    text = page.evaluate(f"{CARD}.textContent")
    assert "1 slot(s) (the configured server_slots)" in text and "breaker closed" in text
    speak_to_both(service)
    page.wait_for(f"{CARD}.dataset.waiting === '1' && {CARD}.dataset.inFlight === '1'",
                  "one request in flight and one waiting", timeout=3 * LATENCY)
    # opened from the keyboard: Tab to the card's summary, Enter
    for _ in range(60):
        page.press("Tab", "Tab", 9)
        if page.evaluate("document.activeElement.closest('#model-servers') !== null"):
            break
    assert page.evaluate("document.activeElement.tagName") == "SUMMARY"
    page.press("Enter", "Enter", 13)
    assert page.evaluate(f"{CARD}.querySelector('details').open")
    waiting = page.evaluate(f"{CARD}.querySelector('details').textContent")
    assert "1 waiting" in waiting and ("pip" in waiting or "mason" in waiting), waiting
    # both answered: nobody waits, the wait is counted, the details stayed open
    page.wait_for(f"{CARD}.dataset.waiting === '0' && {CARD}.dataset.inFlight === '0'",
                  "both requests answered", timeout=4 * LATENCY)
    assert page.evaluate(f"{CARD}.querySelector('details').open")
    (status,) = service.call("GET", "/assistants")["service"]["model_servers"].values()
    assert status["granted"] >= 2 and status["mean_wait_s"] > 0, status
    assert "mean wait" in page.evaluate(f"{CARD}.textContent")


def test_at_a_phone_width_the_panel_fits(browser: Browser, service: Service) -> None:
    phone = browser.new_page(390, 844)
    try:
        sign_in(phone, service)
        phone.wait_for(f"{CARD} && !document.querySelector('#models').hidden",
                       "the model server's card")
        phone.evaluate(f"{CARD}.querySelector('details').open = true")
        width = phone.evaluate("document.documentElement.scrollWidth")
        wide = phone.evaluate("""[...document.querySelectorAll('#models, #models *')]
            .filter(e => e.getBoundingClientRect().right > 391)
            .map(e => e.id || e.className || e.tagName)""")
        assert width <= 390 and wide == [], (width, wide)
        assert phone.foreign_requests(service.url) == [] and phone.errors() == []
    finally:
        phone.close()
