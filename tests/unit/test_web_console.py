"""The web console's server side: the page for browsers, its files, the sign-in cookie."""

from __future__ import annotations

import pytest

from ai_tools.web.console.pages import CONTENT_SECURITY_POLICY, prefers_html
from ai_tools.web.console.session import SESSION_SECONDS
from tests.unit.web_fakes import Answer, ApiHarness

TOKEN = "s3cret-token"
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.mark.parametrize(("accept", "html"), [
    (BROWSER, True),
    ("text/html", True),
    ("*/*", False),
    ("application/json", False),
    ("", False),
    ("application/json, text/html;q=0.5", False),
    ("text/html;q=0.9, application/json;q=0.8", True),
    ("text/html;q=0", False),
    ("text/html;q=x", False),
])
def test_html_only_when_the_client_prefers_it(accept: str, html: bool) -> None:
    assert prefers_html(accept.encode()) is html


def test_a_browser_gets_the_page_and_curl_the_json() -> None:
    """``GET /`` is the page for ``Accept: text/html``, the endpoint list for ``*/*``."""
    api = ApiHarness()
    page = api.call("GET", "/", headers={"Accept": BROWSER})
    assert page.code == 200
    assert page.header("content-type") == "text/html; charset=utf-8"
    assert page.header("content-security-policy") == CONTENT_SECURITY_POLICY.decode()
    assert page.header("vary") == "Accept"
    assert b'<script type="module" src="/console/app.js">' in page.body
    plain = api.call("GET", "/", headers={"Accept": "*/*"})
    assert plain.json["service"] == "ai_tools"


def test_the_page_s_files_come_from_the_package() -> None:
    """Scripts and styles with their types and the policy; an unknown name is a 404."""
    api = ApiHarness()
    script = api.call("GET", "/console/app.js")
    assert script.code == 200 and script.header("content-type").startswith("text/javascript")
    assert script.header("content-security-policy").startswith("default-src 'self'")
    assert api.call("GET", "/console/console.css").header("content-type").startswith("text/css")
    for missing in ("/console/nope.js", "/console/../api.py", "/console/", "/console/index.html"):
        answer = api.call("GET", missing)
        assert answer.code == 404, (missing, answer)
        assert answer.json["status"] == 404
    assert api.call("POST", "/console/app.js").code in (404, 405)


def test_no_inline_script_or_foreign_host_in_the_files() -> None:
    """What the policy would block is not there: inline scripts, other hosts."""
    api = ApiHarness()
    for name in sorted(api.resource.console.files):
        body = api.resource.console.files[name].body.decode()
        assert "http://" not in body.replace("http://www.w3.org/2000/svg", ""), name
        assert "https://" not in body, name
        if name == "index.html":
            assert "<script>" not in body and "style=" not in body and "onclick" not in body


def test_the_page_needs_no_token_but_the_api_does() -> None:
    """With a token, the page and its files load (they are public) and the API stays 401."""
    api = ApiHarness(token=TOKEN)
    assert api.call("GET", "/", headers={"Accept": BROWSER}).code == 200
    assert api.call("GET", "/console/app.js").code == 200
    assert api.call("GET", "/", headers={"Accept": "*/*"}).code == 401
    assert api.call("GET", "/session").json == {"token_required": True, "signed_in": False}


def sign_in(api: ApiHarness, token: str = TOKEN) -> Answer:
    return api.call("POST", "/session", body={"token": token})


def cookie_of(answer: Answer) -> str:
    header = answer.header("set-cookie")
    assert header is not None
    return header.split(";", 1)[0]


def test_signing_in_gives_a_strict_http_only_cookie() -> None:
    """The right token once: a cookie that scripts cannot read and other sites never send."""
    api = ApiHarness(token=TOKEN)
    answer = sign_in(api)
    assert answer.code == 200 and answer.json == {"token_required": True, "signed_in": True}
    header = answer.header("set-cookie")
    assert header is not None
    attributes = {part.strip().split("=")[0] for part in header.split(";")[1:]}
    assert attributes >= {"HttpOnly", "SameSite", "Path", "Max-Age"}
    assert "SameSite=Strict" in header and f"Max-Age={SESSION_SECONDS}" in header
    assert TOKEN not in header
    cookie = {"Cookie": cookie_of(answer)}
    assert api.call("GET", "/assistants", headers=cookie).code == 200
    assert api.call("POST", "/assistants/pip/disable", headers=cookie).json["enabled"] is False
    assert api.call("GET", "/session", headers=cookie).json["signed_in"] is True


def test_a_wrong_token_or_a_forged_cookie_is_refused() -> None:
    api = ApiHarness(token=TOKEN)
    wrong = sign_in(api, "guess")
    assert wrong.code == 401 and wrong.header("set-cookie") is None
    assert sign_in(api, "").code == 422
    assert api.call("POST", "/session", body={"token": TOKEN, "extra": 1}).code == 422
    good = cookie_of(sign_in(api))
    expiry, mac = good.split("=", 1)[1].split(".")
    for forged in (f"{int(expiry) + 999}.{mac}", f"{expiry}.{'0' * 64}", "x.y", "", "1." + mac):
        answer = api.call("GET", "/assistants", headers={"Cookie": f"ai_tools_session={forged}"})
        assert answer.code == 401, forged


@pytest.mark.parametrize("expiry", [b"\xb2\xb3", b"\xb9", b"+12", b" 12", b"1_000"])
def test_a_cookie_whose_expiry_is_not_ascii_digits_is_refused_not_a_500(expiry: bytes) -> None:
    """``str.isdigit`` is true for the superscript digits a Latin-1 cookie can hold,
    which ``int`` refuses: only ASCII digits are an expiry."""
    api = ApiHarness(token=TOKEN)
    cookie = b"ai_tools_session=" + expiry + b"." + b"0" * 64
    answer = api.call("GET", "/assistants", headers={"Cookie": cookie})  # type: ignore[dict-item]
    assert answer.code == 401


def test_the_session_ends_at_its_expiry_and_on_sign_out() -> None:
    api = ApiHarness(token=TOKEN)
    cookie = {"Cookie": cookie_of(sign_in(api))}
    api.clock.advance(SESSION_SECONDS - 1)
    assert api.call("GET", "/assistants", headers=cookie).code == 200
    api.clock.advance(1)
    assert api.call("GET", "/assistants", headers=cookie).code == 401
    out = api.call("DELETE", "/session", headers=cookie)
    assert out.json["signed_in"] is False
    assert "Max-Age=0" in (out.header("set-cookie") or "")


def test_another_token_ends_every_session() -> None:
    """The cookie is bound to the token: a service restarted with a new one refuses it."""
    cookie = {"Cookie": cookie_of(sign_in(ApiHarness(token=TOKEN)))}
    assert ApiHarness(token="another").call("GET", "/assistants", headers=cookie).code == 401


def test_sign_in_passes_the_origin_rule_and_wants_json() -> None:
    """Another site's page cannot sign a browser in, nor post a form to /session."""
    api = ApiHarness(token=TOKEN)
    answer = api.call("POST", "/session", body={"token": TOKEN},
                      headers={"Origin": "http://evil.example"})
    assert answer.code == 403 and answer.header("set-cookie") is None
    form = api.call("POST", "/session", data=b"token=" + TOKEN.encode(),
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.code == 415
    assert api.call("PUT", "/session").code == 405


def test_without_a_token_there_is_nothing_to_sign_in_to() -> None:
    api = ApiHarness()
    assert api.call("GET", "/session").json == {"token_required": False, "signed_in": True}
    answer = sign_in(api, "anything")
    assert answer.code == 200 and answer.header("set-cookie") is None
