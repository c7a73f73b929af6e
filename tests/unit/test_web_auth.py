"""The token rule: required beyond loopback, checked on every request; endpoint parsing."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.application.service import IService
from twisted.internet import task
from twisted.internet.testing import MemoryReactorClock
from zope.interface.verify import verifyObject

from ai_tools.errors import ConfigError
from ai_tools.web.api import WebService, make_web_service
from ai_tools.web.errors import ApiError
from ai_tools.web.listen import binds_locally, endpoint_interface, split_endpoint
from ai_tools.web.token_guard import WRONG_TOKEN_LIMIT, WRONG_TOKEN_WINDOW, TokenGuard
from tests.unit.web_fakes import ApiHarness, FakeRequest, result_of

TOKEN = "s3cret-token"


def built(service: Any) -> WebService:
    """The factory's IService as the WebService it is."""
    assert isinstance(service, WebService)
    return service


@pytest.fixture(name="api")
def api_fixture() -> ApiHarness:
    """The harness with a token."""
    return ApiHarness(token=TOKEN)


def test_no_token_is_401_with_a_challenge(api: ApiHarness) -> None:
    """A request without Authorization gets 401 and WWW-Authenticate: Bearer."""
    answer = api.call("GET", "/assistants")
    assert answer.code == 401
    assert answer.header("www-authenticate", ) == 'Bearer realm="ai_tools"'
    assert "Bearer" in answer.json["error"]


@pytest.mark.parametrize("header", [
    "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer", TOKEN, f"Bearer {TOKEN[:-1]}",
])
def test_wrong_tokens_are_401(api: ApiHarness, header: str) -> None:
    """Any other value is refused (the token is not echoed)."""
    answer = api.call("GET", "/assistants", headers={"Authorization": header})
    assert answer.code == 401
    assert TOKEN.encode() not in answer.body


def test_every_endpoint_needs_the_token(api: ApiHarness) -> None:
    """Messages, control, events: all refused without the token, before anything happens."""
    api.call("POST", "/assistants/pip/disable", headers={"Authorization": "Bearer x"})
    assert api.service.get("pip").enabled is True
    answer = api.call("POST", "/messages", body={"character": "char:bob", "text": "hi"})
    assert answer.code == 401
    assert api.world is not None and api.world.heard("char:pip") == []
    assert api.call("GET", "/events").code == 401
    assert api.resource.streams == set()
    assert api.call("GET", "/nowhere").code == 401  # no map of the API for strangers


def test_the_right_token_is_served(api: ApiHarness) -> None:
    """``Authorization: Bearer <token>`` (any case of 'bearer') works."""
    for scheme in ("Bearer", "bearer"):
        answer = api.call("GET", "/assistants", headers={"Authorization": f"{scheme} {TOKEN}"})
        assert answer.code == 200


def test_compare_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token is compared with hmac.compare_digest, in the one place that checks it."""
    import ai_tools.web.token_guard as guard_module

    calls: list[tuple[Any, Any]] = []
    real = guard_module.hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(guard_module.hmac, "compare_digest", spy)
    api = ApiHarness(token=TOKEN)
    api.call("GET", "/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert calls == [(TOKEN.encode(), TOKEN.encode())]


def test_wrong_tokens_from_one_address_are_bounded(api: ApiHarness) -> None:
    """After WRONG_TOKEN_LIMIT wrong tokens in a window, the address gets 429 with
    Retry-After for every further wrong token until its window has passed; the right
    token keeps working all along (every loopback client shares one address: a
    misconfigured local client must not lock the operator out)."""
    wrong = {"Authorization": "Bearer guess"}
    right = {"Authorization": f"Bearer {TOKEN}"}
    for _ in range(WRONG_TOKEN_LIMIT):
        assert api.call("GET", "/assistants", headers=wrong).code == 401
    refused = api.call("GET", "/assistants", headers=wrong)
    assert refused.code == 429
    assert refused.header("retry-after") == str(int(WRONG_TOKEN_WINDOW))
    assert "too many wrong tokens" in refused.json["error"]
    assert api.call("GET", "/assistants", headers=right).code == 200
    api.clock.advance(WRONG_TOKEN_WINDOW - 1)
    assert api.call("GET", "/assistants", headers=wrong).code == 429
    assert api.call("GET", "/assistants", headers=right).code == 200
    api.clock.advance(1)
    assert api.call("GET", "/assistants", headers=wrong).code == 401  # a new window


def test_the_console_sign_in_shares_the_allowance(api: ApiHarness) -> None:
    """Wrong tokens given to POST /session count with the API's: one rule, one place."""
    for _ in range(WRONG_TOKEN_LIMIT - 1):
        assert api.call("POST", "/session", body={"token": "guess"}).code == 401
    assert api.call("GET", "/", headers={"Authorization": "Bearer guess"}).code == 401
    assert api.call("POST", "/session", body={"token": "guess"}).code == 429
    assert api.call("POST", "/session", body={"token": TOKEN}).code == 200  # signs in


def test_the_guard_remembers_a_bounded_number_of_addresses() -> None:
    clock = task.Clock()
    guard = TokenGuard(TOKEN.encode(), clock.seconds, limit=1, max_addresses=3)
    for host in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"):
        with pytest.raises(ApiError) as raised:
            guard.check(FakeRequest(host), b"guess")
        assert raised.value.status == 401
    with pytest.raises(ApiError) as raised:  # the first address was forgotten
        guard.check(FakeRequest("10.0.0.1"), b"guess")
    assert raised.value.status == 401
    with pytest.raises(ApiError) as raised:  # the last one is still refused
        guard.check(FakeRequest("10.0.0.4"), b"guess")
    assert raised.value.status == 429
    guard.check(FakeRequest("10.0.0.4"), TOKEN.encode())  # but not its right token


# -- make_web_service -------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", [
    "tcp:8080:interface=0.0.0.0", "tcp:8080", "tcp:8080:interface=192.168.1.5",
    "tcp6:8080:interface=\\:\\:", "tcp:8080:interface=example.org", "8080",
    "systemd:domain=INET:index=0",
])
def test_a_token_is_required_beyond_loopback(endpoint: str) -> None:
    """Without a token, an endpoint reachable from elsewhere is refused."""
    api = ApiHarness()
    with pytest.raises(ConfigError, match="token"):
        make_web_service(api.service, api.world, endpoint=endpoint)


@pytest.mark.parametrize("endpoint", [
    "tcp:8080:interface=127.0.0.1", "tcp:0:interface=127.0.0.2", "tcp6:8080:interface=\\:\\:1",
    "tcp:8080:interface=localhost", "unix:/tmp/api.sock",
])
def test_loopback_needs_no_token(endpoint: str) -> None:
    """Local-only endpoints build without a token."""
    api = ApiHarness()
    web = make_web_service(api.service, api.world, endpoint=endpoint)
    assert verifyObject(IService, web)


def test_a_token_allows_any_interface() -> None:
    """With a token, every interface is allowed."""
    api = ApiHarness()
    web = built(make_web_service(api.service, api.world,
                                 endpoint="tcp:8080:interface=0.0.0.0", token=TOKEN))
    assert web.resource._token == TOKEN.encode()


@pytest.mark.parametrize(("kw", "fragment"), [
    ({"token": ""}, "token"), ({"token": "  "}, "token"), ({"token": 5}, "token"),
    ({"max_body": 0}, "max_body"), ({"max_body": True}, "max_body"),
    ({"max_body": "big"}, "max_body"), ({"endpoint": ""}, "endpoint"),
])
def test_bad_settings_are_config_errors(kw: dict[str, Any], fragment: str) -> None:
    """Bad values stop the build with a ConfigError naming the setting."""
    api = ApiHarness()
    with pytest.raises(ConfigError, match=fragment):
        make_web_service(api.service, api.world, **kw)


def test_the_service_listens_on_start_and_stops_cleanly() -> None:
    """Start listens on the endpoint (with the given reactor); stop closes the port."""
    api = ApiHarness()
    reactor = MemoryReactorClock()
    web = built(make_web_service(api.service, api.world,
                                 endpoint="tcp:8123:interface=127.0.0.1", clock=reactor))
    before = len(api.service._observers)
    web.startService()
    [(port, factory, _backlog, interface)] = reactor.tcpServers
    assert (port, interface) == (8123, "127.0.0.1")
    assert factory is web.site
    listening = result_of(web.when_listening())
    assert listening.getHost().port == 8123
    # its loop recorder, its trace recorder, its metrics and its event streams' one observer
    assert len(api.service._observers) == before + 4
    assert web.resource.policy.port == 8123  # the Host rule learnt the port
    result_of(web.stopService())
    assert len(api.service._observers) == before


def test_a_bad_endpoint_string_is_a_config_error() -> None:
    """An endpoint strports cannot parse stops start-up with a ConfigError."""
    api = ApiHarness()
    web = built(make_web_service(api.service, api.world, endpoint="unix:/tmp/x.sock:mode=zz",
                                 clock=MemoryReactorClock()))
    before = len(api.service._observers)
    with pytest.raises(ConfigError, match="endpoint"):
        web.startService()
    assert len(api.service._observers) == before


def test_clock_only_for_timers() -> None:
    """A plain Clock (no listenTCP) is used for timers; listening takes the reactor."""
    api = ApiHarness()
    clock = task.Clock()
    web = built(make_web_service(api.service, api.world, clock=clock))
    assert web.resource.clock is clock
    assert web.listener._reactor is None


# -- endpoint parsing ---------------------------------------------------------------------


def test_split_endpoint_handles_escapes() -> None:
    """Backslash escapes a colon; keywords are split off."""
    assert split_endpoint("tcp6:8080:interface=\\:\\:1") == ("tcp6", ["8080"],
                                                               {"interface": "::1"})
    assert split_endpoint("8080") == ("tcp", ["8080"], {})
    assert endpoint_interface("tcp:1:interface=10.0.0.1") == "10.0.0.1"
    assert endpoint_interface("tcp:1") is None
    assert endpoint_interface("unix:/x") is None
    with pytest.raises(ConfigError):
        split_endpoint("   ")


@pytest.mark.parametrize(("endpoint", "local"), [
    ("tcp:1:interface=127.0.0.1", True), ("tcp:1:interface=127.8.9.1", True),
    ("tcp6:1:interface=\\:\\:1", True),
    ("ssl:1:interface=127.0.0.1:privateKey=k.pem", True), ("unix:/run/x", True),
    ("tcp:1:interface=LOCALHOST", True), ("tcp:1:interface=0.0.0.0", False),
    ("tcp:1", False), ("tcp:1:interface=", False), ("tcp:1:interface=10.1.1.1", False),
    ("tcp:1:interface=fe80\\:\\:1%eth0", False), ("onion:1", False),
])
def test_binds_locally(endpoint: str, local: bool) -> None:
    """Only loopback addresses and UNIX sockets count as local."""
    assert binds_locally(endpoint) is local


@pytest.mark.parametrize("header", [TOKEN, f"Basic {TOKEN}", "Token abc"])
def test_a_header_without_bearer_says_so_and_is_no_wrong_guess(api: ApiHarness,
                                                                header: str) -> None:
    """``Authorization: <token>`` (no scheme) or another scheme is told what is missing,
    not "wrong token", and does not count towards the wrong-token lockout."""
    for _ in range(12):
        answer = api.call("GET", "/assistants", headers={"Authorization": header})
        assert answer.code == 401, answer
        assert "Bearer <token>" in answer.json["error"] and "wrong token" not in \
            answer.json["error"], answer.json
        assert TOKEN.encode() not in answer.body
    right = api.call("GET", "/assistants", headers={"Authorization": f"Bearer {TOKEN}"})
    assert right.code == 200, right
