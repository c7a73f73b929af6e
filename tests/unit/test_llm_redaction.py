"""The API key never leaves the model client in upstream text (a server that echoes it)."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.logger import formatEvent, globalLogPublisher

from ai_tools.errors import LLMRequestError, LLMServerError
from ai_tools.llm.events import ChatResponse, ServerError, TextDelta
from ai_tools.llm.redaction import REDACTED, Redactor
from ai_tools.testing import Fault, Turn
from tests.unit.test_llm_client import USER, Harness

KEY = "sk-secret-value"  # the harness's key, in $TEST_KEY


@pytest.fixture
def logged() -> Any:
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def _text_of(events: list[dict]) -> str:
    return "\n".join(formatEvent(e) + repr(e) for e in events)


def test_a_401_echoing_the_key_is_redacted(logged: list) -> None:
    """'Incorrect API key provided: Bearer sk-…' reaches neither the error nor the log."""
    h = Harness([Fault.http_error(401, f"Incorrect API key provided: Bearer {KEY}")],
                api_key_env="TEST_KEY")
    with pytest.raises(LLMRequestError) as info:
        h.run(h.client.complete(USER))
    message = str(info.value)
    assert "Incorrect API key provided: Bearer " + REDACTED in message
    assert KEY not in message and KEY not in repr(info.value.args)
    assert KEY not in _text_of(logged)


def test_a_retried_error_echoing_the_key_is_redacted_in_the_retry_log(logged: list) -> None:
    """The retry warning quotes the error: redacted too."""
    h = Harness([Fault.server_error(503, f"bad key {KEY}"), Turn(text="ok")],
                api_key_env="TEST_KEY")
    assert h.run(h.client.complete(USER)).content == "ok"
    retries = [e for e in logged if "retrying" in e.get("log_format", "")]
    assert retries and KEY not in _text_of(retries) and REDACTED in _text_of(retries)


def test_an_error_inside_the_stream_and_the_partial_text_are_redacted() -> None:
    """Mid-stream: the error, its ServerError event and the text so far hide the key."""
    h = Harness([Turn(text=f"Your key is {KEY}.", chunk_chars=100,
                      fault=Fault.stream_error(f"invalid {KEY}", after_chunks=2))],
                api_key_env="TEST_KEY")
    events: list[Any] = []
    with pytest.raises(LLMServerError) as info:
        h.run(h.client.complete(USER, on_event=events.append))
    assert KEY not in str(info.value) and KEY not in info.value.partial_text
    assert info.value.partial_text == f"Your key is {REDACTED}."
    errors = [e for e in events if isinstance(e, ServerError)]
    assert errors and KEY not in repr(errors)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert deltas and KEY not in repr(deltas)


@pytest.mark.parametrize("stream", [True, False])
def test_an_answer_echoing_the_key_is_redacted(stream: bool) -> None:
    """Text and tool-call arguments of an answer: the key is replaced, the rest kept."""
    h = Harness([Turn(text=f"key={KEY}", tool_calls=[("say", {"text": KEY})])],
                api_key_env="TEST_KEY", stream=stream)
    response = h.run(h.client.complete(USER))
    assert response.content == f"key={REDACTED}"
    assert dict(response.tool_calls[0].arguments) == {"text": REDACTED}
    assert KEY not in repr(response.message)


def test_without_a_key_nothing_is_touched() -> None:
    """No key configured: texts pass as they are (nothing to look for)."""
    h = Harness([Turn(text=f"key={KEY}")])
    assert h.run(h.client.complete(USER)).content == f"key={KEY}"


def test_redactor_values_errors_and_short_keys() -> None:
    """The redactor: strings, JSON values (the same object back when clean), errors in
    place; placeholder keys shorter than 8 characters are not secrets."""
    r = Redactor('sk-"quoted"-key')
    assert r.text('a sk-"quoted"-key b') == f"a {REDACTED} b"
    clean = {"message": "fine"}
    assert r.value(clean) is clean
    assert r.value({"m": ['x sk-"quoted"-key']}) == {"m": [f"x {REDACTED}"]}
    error = LLMServerError('boom sk-"quoted"-key', 'said sk-"quoted"-key', status=500)
    r.error(error)
    assert str(error) == f"boom {REDACTED}" and error.partial_text == f"said {REDACTED}"
    assert error.status == 500
    assert Redactor("none").text("none of it") == "none of it"
    response = ChatResponse.from_message({"role": "assistant", "content": "ok"})
    assert Redactor("sk-0123456789").response(response) is response
