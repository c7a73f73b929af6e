"""The API's route table and request checks, as composed from its areas (ai_tools/web/routes/)."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.web.test.requesthelper import DummyRequest

from ai_tools.web import other_workers
from ai_tools.web.errors import ApiError
from ai_tools.web.routing import Route, find_route, path_segments
from tests.unit.web_fakes import ApiHarness

TOKEN = "a-token-of-sixteen-chars"

ENDPOINTS = [
    ("GET", "/"), ("GET", "/assistants"), ("GET", "/assistants/{name}"),
    ("GET", "/assistants/{name}/history"), ("GET", "/assistants/{name}/results"),
    ("POST", "/assistants/{name}/tick"), ("POST", "/assistants/{name}/stop"),
    ("POST", "/assistants/{name}/enable"), ("POST", "/assistants/{name}/disable"),
    ("POST", "/assistants"), ("PATCH", "/assistants/{name}"),
    ("DELETE", "/assistants/{name}"), ("GET", "/assistants/{name}/config"),
    ("GET", "/approvals"), ("GET", "/assistants/{name}/approvals"),
    ("POST", "/assistants/{name}/approvals/{approval}"), ("POST", "/stop"),
    ("POST", "/emergency-stop"), ("POST", "/emergency-stop/clear"),
    ("GET", "/world/characters"), ("GET", "/world/rooms"), ("POST", "/world/apply"),
    ("POST", "/messages"), ("GET", "/characters/{character}/heard"), ("GET", "/traces"),
    ("GET", "/traces/{trace_id}"), ("GET", "/metrics"), ("GET", "/events"),
    ("GET", "/mcp/servers"),
]
"""Every endpoint, in the order GET / has always listed them."""


def _request(method: bytes, path: bytes) -> Any:
    request = DummyRequest(path.lstrip(b"/").split(b"/"))
    request.method = method
    request.path = path
    return request


def _handler(request: Any) -> None:
    """A handler that is never called."""


ROUTES = [Route("GET", ("things",), _handler, "the things"),
          Route("POST", ("things",), _handler, "add a thing"),
          Route("GET", ("things", "{name}"), _handler, "one thing"),
          Route("GET", ("stream",), _handler, "a stream", stream=True)]


def test_get_index_lists_every_area_s_endpoints_in_the_order_it_always_did() -> None:
    """The areas together give the same table as the one resource did (order included)."""
    api = ApiHarness()
    listed = [(e["method"], e["path"]) for e in api.call("GET", "/").json["endpoints"]]
    assert listed == ENDPOINTS


def test_each_handler_name_is_one_endpoint_and_those_of_other_workers_exist() -> None:
    """A request about an assistant another worker runs is answered by the handler's name:
    the names are unique, and every name OtherWorkers treats apart is a route's."""
    api = ApiHarness()
    names = [route.endpoint for route in api.resource.routes]
    assert len(names) == len(set(names))
    special = {*other_workers._FROM_STORE, *other_workers._WAIT_FOR_A_TICK}
    assert special <= set(names)
    by_query = {r.endpoint for r in api.resource.routes if r.assistant_query}
    assert by_query == {"events", "emergency_stop", "clear_emergency_stop"}
    assert [r.endpoint for r in api.resource.routes if r.stream] == ["events"]


def test_a_route_is_found_with_its_parameters() -> None:
    route, params = find_route(ROUTES, _request(b"GET", b"/things/char%3Abob"))
    assert route.summary == "one thing" and params == {"name": "char:bob"}
    route, params = find_route(ROUTES, _request(b"post", b"/things/"))
    assert route.summary == "add a thing" and params == {}


def test_head_is_get_without_a_body_except_for_a_stream() -> None:
    route, _ = find_route(ROUTES, _request(b"HEAD", b"/things"))
    assert route.summary == "the things"
    with pytest.raises(ApiError) as refused:
        find_route(ROUTES, _request(b"HEAD", b"/stream"))
    assert refused.value.status == 405 and refused.value.headers == {"Allow": "GET"}


def test_a_path_with_other_methods_is_405_naming_them_and_no_path_is_404() -> None:
    with pytest.raises(ApiError) as refused:
        find_route(ROUTES, _request(b"DELETE", b"/things"))
    assert refused.value.status == 405
    assert refused.value.headers == {"Allow": "GET, POST"}
    assert "DELETE is not allowed here; use GET, POST" in refused.value.message
    with pytest.raises(ApiError) as missing:
        find_route(ROUTES, _request(b"GET", b"/nothing/here"))
    assert missing.value.status == 404
    assert missing.value.message == "no endpoint at /nothing/here; GET / lists them"


@pytest.mark.parametrize(("path", "why"), [
    (b"/caf\xc3\xa9", "the path is not ASCII (percent-encode it)"),
    (b"/caf%C3", "the path is not valid UTF-8 once decoded"),
])
def test_a_path_that_cannot_be_read_is_400(path: bytes, why: str) -> None:
    with pytest.raises(ApiError) as refused:
        path_segments(_request(b"GET", path))
    assert refused.value.status == 400 and refused.value.message == why


def test_an_empty_path_parameter_matches_nothing() -> None:
    """``/things//`` is ``/things`` (trailing empty segments go), never an empty name."""
    assert ROUTES[2].match(["things", ""]) is None
    route, _ = find_route(ROUTES, _request(b"GET", b"/things//"))
    assert route.summary == "the things"


def test_the_checks_run_once_in_order_host_token_route_content_type() -> None:
    """A request failing several checks is answered by the first: Host (403) before the
    token (401) before the route (404) before the content type (415)."""
    api = ApiHarness(token=TOKEN)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    text = {"Content-Type": "text/plain"}
    wrong_host = api.call("POST", "/nothing", data=b"x",
                          headers={"Host": "evil.example", **text})
    assert wrong_host.code == 403
    no_token = api.call("POST", "/nothing", data=b"x", headers=text)
    assert no_token.code == 401
    no_route = api.call("POST", "/nothing", data=b"x", headers={**bearer, **text})
    assert no_route.code == 404
    plain = api.call("POST", "/messages", data=b"x", headers={**bearer, **text})
    assert plain.code == 415
    assert plain.header("content-type") == "application/json"
    assert plain.json["status"] == 415
