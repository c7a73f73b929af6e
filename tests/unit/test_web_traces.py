"""GET /traces and /traces/{id}: loop traces built from the service's events, stored, searched."""

from __future__ import annotations

from typing import Any

import pytest

from ai_tools.store.memory import MemoryStore
from ai_tools.web.limits import HttpLimits
from tests.unit.web_fakes import ApiHarness


@pytest.fixture(name="api")
def api_fixture() -> ApiHarness:
    return ApiHarness(limits=HttpLimits(traces_kept=3))


def loop(api: ApiHarness, name: str = "pip", *, tools: tuple[str, ...] = ("look",),
         reason: str = "terminal_tool", end: bool = True, status: str = "success") -> None:
    """One loop's events as the service publishes them, the clock moving between them."""
    publish, clock = api.service.publish, api.clock
    publish(name, {"type": "iteration", "iteration": 1})
    clock.advance(0.4)
    publish(name, {"type": "model_request", "model": "qwen", "latency_ms": 400.0,
                   "prompt_tokens": 120, "completion_tokens": 9, "status": "ok",
                   "attempts": 2, "finish_reason": "tool_calls"})
    for i, tool in enumerate(tools):
        publish(name, {"type": "tool_call", "tool": tool, "tool_call_id": f"c{i}",
                       "category": "safe_chain"})
        clock.advance(0.1)
        publish(name, {"type": "tool_result", "tool": tool, "tool_call_id": f"c{i}",
                       "status": status, "success": status == "success",
                       "duration_ms": 100.0, "from_cache": i > 0, "attempts": 1,
                       "error": None if status == "success" else "no way"})
    if end:
        publish(name, {"type": "termination", "reason": reason, "iterations": 1,
                       "error": "boom" if reason == "llm_error" else None,
                       "duration_ms": 600.0})
    api.pump()


def test_a_finished_loop_is_stored_and_fetched_whole(api: ApiHarness) -> None:
    loop(api, tools=("look", "look"))
    answer = api.call("GET", "/traces?assistant=pip")
    assert answer.code == 200 and answer.json["stored"] is True
    [summary] = answer.json["traces"]
    assert summary["reason"] == "terminal_tool" and summary["tools"] == ["look"]
    assert (summary["input_tokens"], summary["output_tokens"]) == (120, 9)
    whole = api.call("GET", f"/traces/{summary['id']}").json
    chat, first, second = whole["spans"]
    assert chat == {"kind": "chat", "name": "qwen", "start_ms": 0.0, "iteration": 1,
                    "duration_ms": 400.0, "status": "ok", "attempts": 2,
                    "input_tokens": 120, "output_tokens": 9, "finish_reason": "tool_calls",
                    "error": None}
    assert first["start_ms"] == pytest.approx(400.0) and first["duration_ms"] == 100.0
    assert (first["from_cache"], second["from_cache"]) == (False, True)
    assert second["start_ms"] == pytest.approx(500.0)
    assert whole["duration_ms"] == 600.0 and whole["ended_at"] - whole["started_at"] == \
        pytest.approx(0.6)


def test_search_by_reason_tool_failure_and_time(api: ApiHarness) -> None:
    loop(api, "pip", tools=("look",))
    started = api.clock.seconds()
    api.clock.advance(100)
    loop(api, "mason", tools=("dig",), reason="llm_error", status="tool_error")

    def found(query: str) -> list[tuple[str, str]]:
        answer = api.call("GET", f"/traces{query}")
        assert answer.code == 200, answer.json
        return [(t["assistant"], t["reason"]) for t in answer.json["traces"]]

    assert found("") == [("mason", "llm_error"), ("pip", "terminal_tool")]
    assert found("?tool=dig") == [("mason", "llm_error")]
    assert found("?failed=true") == [("mason", "llm_error")]
    assert found("?failed=false&reason=terminal_tool") == [("pip", "terminal_tool")]
    assert found(f"?until={int(started) + 1}") == [("pip", "terminal_tool")]
    assert found(f"?since={int(started) + 50}") == [("mason", "llm_error")]
    assert found("?limit=1") == [("mason", "llm_error")]
    refused = api.call("GET", "/traces/1").json["spans"][1]
    assert refused["status"] == "success"
    failed_call = [s for s in api.call("GET", "/traces/2").json["spans"] if s["kind"] == "tool"]
    assert failed_call[0]["error"] == "no way" and failed_call[0]["success"] is False


def test_only_the_newest_n_per_assistant_are_kept(api: ApiHarness) -> None:
    for _ in range(5):
        loop(api)
    ids = [t["id"] for t in api.call("GET", "/traces?assistant=pip").json["traces"]]
    assert ids == [5, 4, 3]
    assert api.call("GET", "/traces/1").code == 404


def test_a_running_loop_is_answered_live_in_the_same_shape(api: ApiHarness) -> None:
    loop(api, tools=("look",), end=False)
    api.service.publish("pip", {"type": "tool_call", "tool": "slow", "tool_call_id": "s"})
    answer = api.call("GET", "/traces?assistant=pip").json
    assert answer["traces"] == []
    [live] = answer["live"]
    assert live["live"] is True and [s["name"] for s in live["spans"]] == ["qwen", "look"]
    api.service.publish("pip", {"type": "termination", "reason": "stopped_by_user",
                                "iterations": 1})
    api.pump()
    [summary] = api.call("GET", "/traces").json["traces"]
    killed = api.call("GET", f"/traces/{summary['id']}").json["spans"][-1]
    assert killed["name"] == "slow" and killed["status"] == "cancelled"
    assert api.call("GET", "/traces").json["live"] == []


def test_a_subagent_loop_belongs_to_its_assistant(api: ApiHarness) -> None:
    loop(api, "pip/sub-1", tools=("look",), reason="completed")
    [summary] = api.call("GET", "/traces?assistant=pip").json["traces"]
    assert api.call("GET", f"/traces/{summary['id']}").json["loop"] == "pip/sub-1"


@pytest.mark.parametrize(("path", "code", "field"), [
    ("/traces?failed=maybe", 400, "failed"), ("/traces?limit=0", 400, "limit"),
    ("/traces?since=yesterday", 400, "since"), ("/traces/abc", 400, "trace_id"),
    ("/traces/99", 404, None)])
def test_bad_queries_are_clear_errors(api: ApiHarness, path: str, code: int,
                                      field: str | None) -> None:
    answer = api.call("GET", path)
    assert answer.code == code, answer.json
    if field is not None:
        assert answer.json["field"] == field


def test_a_store_without_traces_answers_the_live_ones_only() -> None:
    class NoTraces(MemoryStore):
        save_trace: Any = None

    api = ApiHarness(store=NoTraces())
    loop(api)
    answer = api.call("GET", "/traces").json
    assert answer == {"traces": [], "live": [], "stored": False}
    assert api.call("GET", "/traces/1").code == 404


def test_a_store_that_cannot_answer_is_a_503() -> None:
    """A store closing or gone: 503 saying so, never a 500."""
    from twisted.internet import defer

    class Closed(MemoryStore):
        def list_traces(self, search: Any) -> Any:
            return defer.fail(RuntimeError("SQLite store x is not open"))

        def get_trace(self, trace_id: int) -> Any:
            return defer.fail(RuntimeError("SQLite store x is not open"))

    api = ApiHarness(store=Closed())
    for path in ("/traces", "/traces/1"):
        answer = api.call("GET", path)
        assert answer.code == 503 and "not open" in answer.json["error"], answer.json


def test_a_priced_profile_gives_each_request_and_the_loop_a_cost(api: ApiHarness) -> None:
    """prices = {input = 0.15, output = 0.60} (per million tokens): 120 in and 9 out."""
    from ai_tools.llm.profile import Prices

    api.resource.trace_recorder.prices = (
        lambda label: Prices(0.15, 0.60) if label == "local" else None)
    api.service.publish("pip", {"type": "iteration", "iteration": 1})
    api.service.publish("pip", {"type": "model_request", "profile": "local", "model": "q",
                                "latency_ms": 5.0, "prompt_tokens": 120,
                                "completion_tokens": 9, "status": "ok"})
    api.service.publish("pip", {"type": "termination", "reason": "completed"})
    api.pump()
    [summary] = api.call("GET", "/traces").json["traces"]
    trace = api.call("GET", f"/traces/{summary['id']}").json
    assert trace["cost"] == pytest.approx((120 * 0.15 + 9 * 0.60) / 1e6)
    assert trace["currency"] == "USD" and trace["spans"][0]["cost"] == trace["cost"]


def test_prices_in_a_model_profile() -> None:
    from ai_tools.errors import ConfigError
    from ai_tools.llm.profile import ModelProfile

    profile = ModelProfile.from_mapping({"base_url": "http://127.0.0.1:1/v1", "model": "m",
                                         "prices": {"input": 0.15, "output": 0.6,
                                                    "currency": "EUR"}})
    assert profile.prices is not None and profile.prices.currency == "EUR"
    assert profile.prices.cost(1_000_000, 0) == pytest.approx(0.15)
    with pytest.raises(ConfigError, match=r"prices\.output"):
        ModelProfile.from_mapping({"base_url": "http://127.0.0.1:1/v1", "model": "m",
                                   "prices": {"input": 0.15, "output": -1}})
    with pytest.raises(ConfigError, match="prices"):
        ModelProfile.from_mapping({"base_url": "http://127.0.0.1:1/v1", "model": "m",
                                   "prices": {"input": 0.15}})


def test_the_api_finds_a_profile_s_prices_by_its_label(api: ApiHarness) -> None:
    from ai_tools.llm.profile import ModelProfile

    class Priced:
        profile = ModelProfile.from_mapping({"base_url": "http://127.0.0.1:1/v1",
                                             "model": "m", "name": "paid",
                                             "prices": {"input": 1, "output": 2}})

    api.service._llms["paid"] = Priced()
    assert api.resource._prices("paid").output == 2
    assert api.resource._prices("other") is None
