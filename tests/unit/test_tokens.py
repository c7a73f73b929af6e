"""Token counting: tiktoken when it can load, the 4-characters estimate otherwise."""

from __future__ import annotations

import builtins
from typing import Any

import pytest
from twisted.logger import LogLevel, globalLogPublisher

from ai_tools.llm import tokens
from ai_tools.llm.tokens import TokenCounter, context_window_for


class FakeEncoding:
    """One token per word, to tell the exact path from the estimate."""

    def encode(self, text: str, *, disallowed_special: Any = ()) -> list[int]:
        assert disallowed_special == ()
        return list(range(len(text.split())))


@pytest.fixture
def log_events() -> Any:
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def test_estimate_when_tiktoken_is_not_installed(
    monkeypatch: pytest.MonkeyPatch, log_events: list
) -> None:
    """No tiktoken: ~4 characters per token, noted once in the log."""
    real_import = builtins.__import__

    def no_tiktoken(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "tiktoken":
            raise ImportError("No module named 'tiktoken'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tiktoken)
    counter = TokenCounter()
    assert counter.exact is None
    assert counter.count_text("a" * 10) == 3
    assert counter.count_text("abcd" * 25) == 25
    assert counter.count_text("") == 0
    assert counter.exact is False
    notes = [e for e in log_events if "tiktoken" in e.get("log_format", "")]
    assert len(notes) == 1


@pytest.mark.parametrize(("environ", "level"), [
    ({}, LogLevel.info),  # the default: no files, no downloads; the estimate is expected
    ({"TIKTOKEN_CACHE_DIR": "/srv/tiktoken"}, LogLevel.warn),  # asked for, not there
    ({"AI_TOOLS_TIKTOKEN_DOWNLOAD": "1"}, LogLevel.warn),
])
def test_estimate_when_the_encoding_cannot_be_loaded(
        log_events: list, monkeypatch: pytest.MonkeyPatch, environ: dict[str, str],
        level: LogLevel) -> None:
    """tiktoken installed, its files not here: one line, then the estimate, loader not
    retried; a warning only when tiktoken was asked for (a cache directory named,
    downloads allowed), not on every start of a service that never asked."""
    for name in ("TIKTOKEN_CACHE_DIR", "AI_TOOLS_TIKTOKEN_DOWNLOAD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    calls = []

    def offline(name: str) -> Any:
        calls.append(name)
        raise ConnectionError("Name or service not known")

    counter = TokenCounter(loader=offline)
    assert counter.count_text("x" * 8) == 2
    assert counter.count_text("x" * 9) == 3
    assert calls == ["cl100k_base"]
    (line,) = [e for e in log_events if "tiktoken" in e.get("log_format", "")]
    assert line["log_level"] == level and "TIKTOKEN_CACHE_DIR" in line["log_format"]


def test_exact_path_uses_the_encoding() -> None:
    """With an encoding available, counts come from it."""
    counter = TokenCounter(loader=lambda name: FakeEncoding())
    assert counter.count_text("one two three") == 3
    assert counter.exact is True


def test_real_tiktoken_if_its_encoding_is_available() -> None:
    """Against the real tiktoken when it can load here (skipped offline without a cache)."""
    try:
        encoding = tokens.load_tiktoken_encoding()
    except Exception as e:
        pytest.skip(f"tiktoken encoding not loadable here: {type(e).__name__}")
    counter = TokenCounter(loader=lambda name: encoding)
    assert counter.count_text("hello world") == 2
    assert counter.count_text("<|endoftext|>") > 0  # special tokens are plain text


def test_message_list_counts_framing_content_and_tool_calls() -> None:
    """Every message has framing; tool calls' names and arguments count; tools too."""
    counter = TokenCounter(loader=lambda name: FakeEncoding())
    plain = [{"role": "user", "content": "a b c"}]
    base = counter.count_messages(plain)
    assert base == tokens.TOKENS_PER_MESSAGE + 1 + 3 + tokens.REPLY_PRIMING_TOKENS
    with_call = [
        *plain,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "look", "arguments": '{"a": "b c d"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "result words here"},
    ]
    total = counter.count_messages(with_call)
    assert total > base + 3 + 3  # two more messages with content and a call
    tools_schema = [
        {"type": "function", "function": {"name": "look", "description": "look around the room"}}
    ]
    assert counter.count_messages(with_call, tools_schema) > total


def test_odd_message_shapes_are_counted_not_raised() -> None:
    """Content parts, dict content, non-dict calls: all counted."""
    counter = TokenCounter(loader=lambda name: FakeEncoding())
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "two words"}, "x"]},
        {"role": "user", "content": {"weird": True}},
        {
            "role": "assistant",
            "tool_calls": ["junk", {"function": {"name": "n", "arguments": {"k": 1}}}],
        },
        {"role": "user", "name": "bob", "content": ""},
    ]
    assert counter.count_messages(messages) > 0


def test_module_helpers_use_a_shared_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    """count_messages/count_text go through one process-wide counter."""
    monkeypatch.setattr(tokens, "_default_counter", TokenCounter(loader=lambda n: FakeEncoding()))
    assert tokens.count_text("a b") == 2
    assert tokens.count_messages([{"role": "user", "content": "a"}]) == 3 + 1 + 1 + 3
    assert tokens.default_counter() is tokens._default_counter


@pytest.mark.parametrize(
    ("model", "configured", "expected"),
    [
        ("gpt-4o-mini", None, 128_000),
        ("openai/gpt-4o", None, 128_000),
        ("gpt-4", None, 8_192),
        ("llama3.1:8b", None, 131_072),
        ("something-new", None, tokens.DEFAULT_CONTEXT_WINDOW),
        ("gpt-4o", 4096, 4096),
    ],
)
def test_context_window_from_configuration_first(
    model: str, configured: int | None, expected: int
) -> None:
    """The configured window wins; else a known model; else the default."""
    assert context_window_for(model, configured) == expected


def test_default_loader_never_downloads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """With an empty cache, loading refuses instead of fetching over HTTP."""
    tiktoken_load = pytest.importorskip("tiktoken.load")
    fetched: list[str] = []

    def recording_fetch(blobpath: str) -> bytes:
        fetched.append(blobpath)
        raise AssertionError("tiktoken tried to fetch " + blobpath)

    monkeypatch.setattr(tiktoken_load, "read_file", recording_fetch)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("AI_TOOLS_TIKTOKEN_DOWNLOAD", raising=False)
    with pytest.raises(OSError, match="downloads are off"):
        tokens.load_tiktoken_encoding("cl100k_base")
    assert fetched == []
    assert tiktoken_load.read_file is recording_fetch  # restored after the load


def test_downloads_allowed_when_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """AI_TOOLS_TIKTOKEN_DOWNLOAD=1 hands the fetch to tiktoken itself."""
    tiktoken_load = pytest.importorskip("tiktoken.load")
    fetched: list[str] = []

    def recording_fetch(blobpath: str) -> bytes:
        fetched.append(blobpath)
        raise OSError("no network in this test")

    monkeypatch.setattr(tiktoken_load, "read_file", recording_fetch)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AI_TOOLS_TIKTOKEN_DOWNLOAD", "1")
    with pytest.raises(OSError, match="no network in this test"):
        tokens.load_tiktoken_encoding("cl100k_base")
    assert fetched and fetched[0].startswith("https://")
