"""The HTTP API's settings: ``HttpLimits`` and ``allowed_hosts``, from code and from ``[http]``."""

from __future__ import annotations

from typing import Any

import pytest

from ai_tools.errors import ConfigError
from ai_tools.standalone.config import parse_config
from ai_tools.web.api import make_web_service
from ai_tools.web.limits import HttpLimits
from tests.unit.test_config import ROOT, base_config, error_of
from tests.unit.web_fakes import ApiHarness


def with_http(**http: Any) -> dict[str, Any]:
    data = base_config()
    data.setdefault("http", {}).update(http)
    return data


def test_limits_and_allowed_hosts_from_the_http_table() -> None:
    config = parse_config(with_http(allowed_hosts=["Proxy.Example", "localhost:9000"],
                                    max_streams=5, header_timeout=2.5), base=ROOT)
    assert config.http.allowed_hosts == ("proxy.example", "localhost:9000")
    assert config.http.limits == HttpLimits(max_streams=5, header_timeout=2.5)
    assert parse_config(base_config(), base=ROOT).http.limits == HttpLimits()


@pytest.mark.parametrize(("http", "expected"), [
    ({"max_streams": 0}, "http.max_streams must be a positive integer, not 0"),
    ({"max_connections": True}, "http.max_connections must be a positive integer"),
    ({"body_timeout": "slow"}, "http.body_timeout must be a positive number"),
    ({"body_timeout": float("inf")}, "http.body_timeout must be a positive number, not inf"),
    ({"stream_buffer": 1.5}, "http.stream_buffer must be a positive integer"),
    ({"allowed_hosts": "proxy.example"}, "http.allowed_hosts must be a list"),
    ({"allowed_hosts": ["https://proxy.example"]}, "http.allowed_hosts: 'https://proxy"),
    ({"max_stream": 5}, "did you mean 'max_streams'?"),
])
def test_bad_http_settings_name_the_key(http: dict[str, Any], expected: str) -> None:
    assert expected in error_of(with_http(**http))


def test_make_web_service_takes_limits_as_a_mapping() -> None:
    api = ApiHarness()
    web = make_web_service(api.service, api.world, limits={"max_streams": 7},
                           allowed_hosts=["proxy.example"])
    assert web.resource.limits.max_streams == 7
    assert web.site.connections.limits.max_streams == 7
    assert web.resource.policy.allowed_hosts == ("proxy.example",)
    with pytest.raises(ConfigError, match=r"http\.max_streem: not an HTTP limit"):
        make_web_service(api.service, api.world, limits={"max_streem": 7})
    with pytest.raises(ConfigError, match="wildcards"):
        make_web_service(api.service, api.world, allowed_hosts=["*.example"])
