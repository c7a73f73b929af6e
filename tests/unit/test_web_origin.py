"""Local attackers through a browser: Host, Origin, Sec-Fetch-Site and the content type.

The API here is bound (as far as the rule knows) to 127.0.0.1:8080; requests
go to ``http://127.0.0.1:8080`` unless a test sends another ``Host``.
"""

from __future__ import annotations

from typing import Any

import pytest

from ai_tools.errors import ConfigError
from ai_tools.web.origin import OriginPolicy, parse_allowed_hosts, split_authority
from tests.unit.service_fakes import LogCapture
from tests.unit.web_fakes import ApiHarness

HELLO = {"character": "char:bob", "text": "Evening, Pip!"}


def bound(allowed: tuple[str, ...] = (), interface: str = "127.0.0.1") -> ApiHarness:
    policy = OriginPolicy(allowed_hosts=allowed, port=8080, interface=interface)
    return ApiHarness(policy=policy, base="http://127.0.0.1:8080")


def heard_by_bob(api: ApiHarness) -> list[Any]:
    assert api.world is not None
    return list(api.world._logs.get("char:bob", ()))


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost:8080", "[::1]:8080",
                                  "LOCALHOST:8080"])
def test_this_service_by_its_local_names(host: str) -> None:
    assert bound().call("GET", "/", headers={"Host": host}).code == 200


@pytest.mark.parametrize("host", ["evil.example:8080", "evil.example", "127.0.0.1:9000",
                                  "localhost", "10.1.2.3:8080", "127.0.0.1:8080@evil",
                                  "[::1", "a b:8080"])
def test_other_hosts_are_refused(host: str) -> None:
    """DNS rebinding sends the attacker's name: 403 before anything runs."""
    api = bound()
    answer = api.call("POST", "/assistants/pip/disable", headers={"Host": host})
    assert answer.code == 403, answer
    assert "allowed_hosts" in answer.json["error"]
    assert api.service.get("pip").enabled


def test_allowed_hosts_add_names_and_ports() -> None:
    """A proxy's name (any port) and a tunnel's port are allowed when listed."""
    api = bound(allowed=("assistants.example.com", "localhost:9000"))
    for host in ("assistants.example.com", "assistants.example.com:443", "localhost:9000"):
        assert api.call("GET", "/", headers={"Host": host}).code == 200, host
    assert api.call("GET", "/", headers={"Host": "localhost:9001"}).code == 403
    answer = api.call("GET", "/", headers={"Host": "assistants.example.com",
                                           "Origin": "https://assistants.example.com"})
    assert answer.code == 200


def test_any_address_on_a_wildcard_listener_but_no_name() -> None:
    """Bound to every interface, an IP address is fine (it cannot be rebound), a name is not."""
    api = bound(interface="0.0.0.0")
    assert api.call("GET", "/", headers={"Host": "192.168.1.5:8080"}).code == 200
    assert api.call("GET", "/", headers={"Host": "myhost.lan:8080"}).code == 403


def test_a_page_of_another_origin_cannot_post() -> None:
    """The attack of the field trial: a cross-origin form post disabled an assistant."""
    api = bound()
    for origin in ("http://evil.example", "null", "http://localhost:3000",
                   "http://127.0.0.1:8080/path", "file://"):
        answer = api.call("POST", "/assistants/pip/disable",
                          headers={"Origin": origin, "Content-Type": "text/plain"})
        assert answer.code == 403, (origin, answer)
    assert api.service.get("pip").enabled
    answer = api.call("POST", "/messages", body=HELLO,
                      headers={"Origin": "http://evil.example"})
    assert answer.code == 403 and heard_by_bob(api) == [] and not api.service.get(
        "pip").pending_events


def test_cross_site_fetches_are_refused() -> None:
    api = bound()
    answer = api.call("GET", "/assistants", headers={"Sec-Fetch-Site": "cross-site"})
    assert answer.code == 403 and "cross-site" in answer.json["error"]
    assert api.call("GET", "/", headers={"Sec-Fetch-Site": "same-origin"}).code == 200


def test_same_origin_pages_may_post() -> None:
    """The service's own pages (a later web console) post same-origin."""
    api = bound()
    for origin in ("http://127.0.0.1:8080", "http://localhost:8080"):
        answer = api.call("POST", "/messages", body=HELLO,
                          headers={"Origin": origin, "Sec-Fetch-Site": "same-origin"})
        assert answer.code == 200, (origin, answer)


def test_a_body_must_be_json() -> None:
    """A POST with a body that is not declared JSON is 415; nothing is said."""
    api = bound()
    import json

    raw = json.dumps(HELLO).encode()
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        answer = api.call("POST", "/messages", data=raw, headers=headers)
        assert answer.code == 415, (content_type, answer)
        assert "application/json" in answer.json["error"]
    # (twisted.web itself answers 400 to a multipart body it cannot parse)
    answer = api.call("POST", "/messages", data=raw,
                      headers={"Content-Type": "multipart/form-data; boundary=x"})
    assert answer.code in (400, 415)
    assert heard_by_bob(api) == []
    answer = api.call("POST", "/messages", data=raw,
                      headers={"Content-Type": "application/json; charset=utf-8"})
    assert answer.code == 200


def test_posts_without_a_body_need_no_content_type() -> None:
    """The documented ``curl -X POST .../tick`` (no body, no content type) still works."""
    api = bound()
    assert api.call("POST", "/assistants/pip/disable").code == 200
    assert api.call("POST", "/assistants/pip/enable").code == 200
    assert api.call("POST", "/assistants/pip/tick").code == 200


def test_deeply_nested_json_is_a_400_without_a_traceback() -> None:
    """'[' x 30,000 is a bad body (400), not a 500 with CRITICAL tracebacks."""
    api = ApiHarness()
    with LogCapture() as logs:
        answer = api.call("POST", "/messages", data=b"[" * 30_000,
                          headers={"Content-Type": "application/json"})
    assert answer.code == 400 and "nests too deeply" in answer.json["error"]
    assert logs.events == []
    assert api.call("GET", "/").code == 200


def test_the_checks_come_before_the_token() -> None:
    """A foreign Host is refused even with the right token; the token still applies after."""
    policy = OriginPolicy(port=8080, interface="127.0.0.1")
    api = ApiHarness(token="s3cret-token-0123", policy=policy, base="http://127.0.0.1:8080")
    auth = {"Authorization": "Bearer s3cret-token-0123"}
    assert api.call("GET", "/", headers={**auth, "Host": "evil.example:8080"}).code == 403
    assert api.call("GET", "/").code == 401
    assert api.call("GET", "/", headers=auth).code == 200


def test_authorities_parse_strictly() -> None:
    assert split_authority("LocalHost:8080", 80) == ("localhost", 8080)
    assert split_authority("[::1]:9000", 80) == ("::1", 9000)
    assert split_authority("[::1]", 443) == ("::1", 443)
    assert split_authority("example.com", None) == ("example.com", None)
    for bad in ("", ":80", "host:0", "host:99999", "host:8o", "[::1", "[::1]x", "a/b",
                "user@host", "::1"):
        assert split_authority(bad, 80) is None, bad


def test_allowed_hosts_setting_is_checked() -> None:
    assert parse_allowed_hosts(["Proxy.Example", "localhost:9000", "[::1]:9000"]) == (
        "proxy.example", "localhost:9000", "[::1]:9000")
    for bad in ("proxy.example", ["http://proxy.example"], ["*.example.com"], [7],
                ["host:port"]):
        with pytest.raises(ConfigError):
            parse_allowed_hosts(bad)
