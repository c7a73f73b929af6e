"""The HTTP API of approvals: list what waits, approve or refuse it, the failure paths."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer

from ai_tools.llm.events import ToolCall
from tests.unit.web_fakes import ApiHarness


@pytest.fixture(name="api")
def api_fixture() -> ApiHarness:
    return ApiHarness()


def waiting(api: ApiHarness, name: str = "pip", tool: str = "dig"
            ) -> tuple[str, list[Any]]:
    """Put a call of ``name`` on the board; its id and where its decision lands."""
    decisions: list[Any] = []
    d: defer.Deferred[Any] = api.service.approvals.request(
        name, tool, ToolCall(id="c1", name=tool, arguments={"at": "north"}), 60)
    d.addCallback(decisions.append)
    return api.service.approvals.pending(name)[-1]["id"], decisions


def test_list_then_approve(api: ApiHarness) -> None:
    approval, decisions = waiting(api)
    listed = api.call("GET", "/approvals").json["approvals"]
    assert [(a["id"], a["assistant"], a["tool"], a["arguments"]) for a in listed] == \
        [(approval, "pip", "dig", {"at": "north"})]
    assert api.call("GET", "/assistants/pip/approvals").json["approvals"] == listed
    assert api.call("GET", "/assistants/mason/approvals").json["approvals"] == []
    answer = api.call("POST", f"/assistants/pip/approvals/{approval}", body={"approve": True})
    assert answer.code == 200, answer
    assert answer.json["approved"] is True and answer.json["by"] == "api"
    assert decisions[0].approved and api.call("GET", "/approvals").json["approvals"] == []


def test_refuse_with_a_reason(api: ApiHarness) -> None:
    approval, decisions = waiting(api)
    answer = api.call("POST", f"/assistants/pip/approvals/{approval}",
                      body={"approve": False, "reason": "not in the inn"})
    assert answer.code == 200 and answer.json["approved"] is False
    assert decisions[0].reason == "not in the inn" and not decisions[0].approved


@pytest.mark.parametrize(("body", "field"), [
    ({}, "approve"), ({"approve": "yes"}, "approve"), ({"approve": 1}, "approve"),
    ({"approve": True, "reason": 3}, "reason"), ({"approve": True, "why": "x"}, "why"),
    ({"approve": False, "reason": "x" * 501}, "reason"),
])
def test_a_bad_decision_is_refused_and_decides_nothing(api: ApiHarness, body: Any,
                                                       field: str) -> None:
    approval, decisions = waiting(api)
    answer = api.call("POST", f"/assistants/pip/approvals/{approval}", body=body)
    assert answer.code == 422 and answer.json["field"] == field, answer
    assert decisions == [] and len(api.service.approvals.pending()) == 1


def test_unknown_or_someone_elses_approval_is_404(api: ApiHarness) -> None:
    approval, decisions = waiting(api)
    assert api.call("POST", "/assistants/pip/approvals/nope",
                    body={"approve": True}).code == 404
    assert api.call("POST", f"/assistants/mason/approvals/{approval}",
                    body={"approve": True}).code == 404
    assert api.call("POST", f"/assistants/nobody/approvals/{approval}",
                    body={"approve": True}).code == 404
    assert decisions == []
    assert api.call("POST", f"/assistants/pip/approvals/{approval}",
                    body={"approve": True}).code == 200
    again = api.call("POST", f"/assistants/pip/approvals/{approval}", body={"approve": True})
    assert again.code == 404 and "answered" in again.json["error"]


def test_approvals_need_the_token() -> None:
    api = ApiHarness(token="s3cret")
    approval, decisions = waiting(api)
    assert api.call("GET", "/approvals").code == 401
    assert api.call("POST", f"/assistants/pip/approvals/{approval}",
                    body={"approve": True}).code == 401
    assert decisions == []
    ok = api.call("GET", "/approvals", headers={"Authorization": "Bearer s3cret"})
    assert ok.code == 200 and len(ok.json["approvals"]) == 1
