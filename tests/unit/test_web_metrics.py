"""``GET /metrics``: the Prometheus text format, what it counts, bounded labels, the token."""

from __future__ import annotations

import re
from typing import Any

from twisted.internet import defer

from ai_tools.llm.breaker import BreakerState
from ai_tools.store.memory import MemoryStore
from tests.unit.web_fakes import ApiHarness

SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})?'
                    r' (-?[0-9.e+-]+|\+Inf|-Inf|NaN)$')


def scrape(api: ApiHarness) -> dict[str, float]:
    """The samples of one scrape, checked line by line against the text format."""
    answer = api.call("GET", "/metrics")
    assert answer.code == 200, answer
    assert answer.header("content-type") == "text/plain; version=0.0.4; charset=utf-8"
    text = answer.body.decode()
    assert text.endswith("\n")
    samples: dict[str, float] = {}
    families: list[str] = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            families.append(line.split()[2])
            assert line.split()[3] in ("counter", "gauge", "histogram")
        elif line.startswith("# HELP "):
            continue
        else:
            assert SAMPLE.match(line), line
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    assert len(families) == len(set(families))  # each family once
    return samples


def test_ticks_tools_and_model_requests_are_counted() -> None:
    api = ApiHarness()
    publish = api.service.publish
    publish("pip", {"type": "tick", "status": "ran", "reason": "completed"})
    publish("pip", {"type": "tick", "status": "ran", "reason": "completed"})
    publish("pip", {"type": "tick", "status": "skipped", "reason": "disabled"})
    # the harness's registry is empty: every tool is "unknown"
    publish("pip", {"type": "tool_result", "tool": "say", "status": "success"})
    publish("pip", {"type": "tool_result", "tool": "x" * 500, "status": "error"})
    publish("pip", {"type": "model_request", "profile": "default", "latency_ms": 2420.0,
                    "prompt_tokens": 1200, "completion_tokens": 30, "status": "ok",
                    "attempts": 1, "queued_ms": 2000.0})  # 2 s of it in the queue
    publish("pip", {"type": "model_request", "profile": "default", "latency_ms": 3000,
                    "prompt_tokens": None, "completion_tokens": None, "status": "llm_error",
                    "attempts": 3})
    publish("pip", {"type": "model_request", "profile": "default", "status": "llm_unavailable",
                    "attempts": 0, "latency_ms": 0.5,
                    "queued_ms": 0.0})  # the open breaker sent nothing
    got = scrape(api)
    assert got['ai_tools_model_refusals_total{profile="default"}'] == 1
    assert 'ai_tools_model_requests_total{profile="default",status="llm_unavailable"}' \
        not in got
    assert got['ai_tools_model_queue_seconds_count{profile="default"}'] == 1
    assert got['ai_tools_model_queue_seconds_sum{profile="default"}'] == 2.0
    assert got['ai_tools_ticks_total{status="ran",reason="completed"}'] == 2
    assert got['ai_tools_ticks_total{status="skipped",reason="disabled"}'] == 1
    assert got['ai_tools_tool_calls_total{tool="unknown",status="success"}'] == 1
    assert got['ai_tools_tool_calls_total{tool="unknown",status="error"}'] == 1
    assert got['ai_tools_model_requests_total{profile="default",status="ok"}'] == 1
    assert got['ai_tools_model_requests_total{profile="default",status="llm_error"}'] == 1
    assert got['ai_tools_model_http_requests_total{profile="default"}'] == 4
    assert got['ai_tools_model_tokens_total{profile="default",kind="prompt"}'] == 1200
    assert got['ai_tools_model_tokens_total{profile="default",kind="completion"}'] == 30
    assert got['ai_tools_model_request_seconds_bucket{profile="default",le="0.5"}'] == 1
    assert got['ai_tools_model_request_seconds_bucket{profile="default",le="5"}'] == 2
    assert got['ai_tools_model_request_seconds_bucket{profile="default",le="+Inf"}'] == 2
    assert got['ai_tools_model_request_seconds_sum{profile="default"}'] == 3.42
    assert got['ai_tools_model_request_seconds_count{profile="default"}'] == 2


def test_gauges_pending_breaker_store_streams() -> None:
    api = ApiHarness()
    api.service.get("pip").pending_events.extend([{"type": "say", "text": "a"}] * 3)
    got = scrape(api)
    assert got['ai_tools_pending_events{assistant="pip"}'] == 3
    assert got['ai_tools_pending_events{assistant="mason"}'] == 0
    assert got["ai_tools_assistants"] == 2
    assert got["ai_tools_store_transactions_total"] >= 2  # the two assistants were saved
    assert got["ai_tools_store_write_failures_total"] == 0
    assert got["ai_tools_store_write_seconds_count"] == 0  # saved before the API started
    api.service.save_state("pip")
    api.pump()
    assert scrape(api)["ai_tools_store_write_seconds_count"] == 1
    assert got["ai_tools_event_streams"] == 0


def test_the_breaker_of_each_profile() -> None:
    api = ApiHarness()

    class Breaker:
        state = BreakerState.OPEN

    class Client:
        breaker = Breaker()

    api.service._llms["default"] = Client()
    got = scrape(api)
    assert got['ai_tools_model_breaker_state{profile="default",state="open"}'] == 1
    assert got['ai_tools_model_breaker_state{profile="default",state="closed"}'] == 0


class FailingStore(MemoryStore):
    """Writes fail once ``broken`` is set."""

    broken = False

    def save_many(self, states: Any) -> defer.Deferred[None]:
        if self.broken:
            return defer.fail(OSError("disk full"))
        return super().save_many(states)


def test_a_failed_store_write_is_counted() -> None:
    store = FailingStore()
    api = ApiHarness(store=store)
    store.broken = True
    api.service.save_state("pip").addErrback(lambda _: None)
    api.pump()
    assert scrape(api)["ai_tools_store_write_failures_total"] == 1


def test_label_values_are_escaped_and_bounded() -> None:
    """A status with a quote and a newline still makes a valid line; an unknown profile or
    tool never becomes a label of its own."""
    api = ApiHarness()
    api.service.publish("pip", {"type": "tick", "status": 'we"ird\nstatus', "reason": "a\\b"})
    api.service.publish("nobody", {"type": "model_request", "profile": "gpt-x",
                                   "latency_ms": 1, "status": "ok"})
    got = scrape(api)
    assert got['ai_tools_ticks_total{status="we\\"ird\\nstatus",reason="a\\\\b"}'] == 1
    assert got['ai_tools_model_requests_total{profile="unknown",status="ok"}'] == 1


def test_metrics_follow_the_token_rule() -> None:
    api = ApiHarness(token="s3cret")
    assert api.call("GET", "/metrics").code == 401
    ok = api.call("GET", "/metrics", headers={"Authorization": "Bearer s3cret"})
    assert ok.code == 200 and b"ai_tools_ticks_total" in ok.body
