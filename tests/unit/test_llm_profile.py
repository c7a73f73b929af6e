"""Model profiles from config tables and from the environment."""

from __future__ import annotations

import pytest

from ai_tools.errors import ConfigError
from ai_tools.llm.profile import ModelProfile, Timeouts, normalise_base_url


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://localhost:11434", "http://localhost:11434/v1"),
        ("http://localhost:11434/v1/", "http://localhost:11434/v1"),
        ("https://api.openai.com/v1/chat/completions", "https://api.openai.com/v1"),
        ("https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1"),
    ],
)
def test_base_url_normalised(given: str, expected: str) -> None:
    """A bare host gets /v1; a full endpoint URL loses /chat/completions."""
    assert normalise_base_url(given) == expected
    assert ModelProfile(base_url=given, model="m").chat_url == expected + "/chat/completions"


@pytest.mark.parametrize("url", ["localhost:8080", "ftp://x/v1", "", "http://"])
def test_bad_url_is_config_error(url: str) -> None:
    """Not an http(s) URL: a ConfigError naming it."""
    with pytest.raises(ConfigError, match="base_url"):
        ModelProfile(base_url=url, model="m")


def test_from_mapping_with_nested_tables() -> None:
    """TOML-style tables for timeouts and repetition become values."""
    profile = ModelProfile.from_mapping(
        {
            "base_url": "http://127.0.0.1:8080",
            "model": "qwen2.5",
            "timeouts": {"idle": 5, "headers": 30},
            "repetition": {"max_repeats": 5},
            "extra_body": {"temperature": 0.2},
            "tool_calling": "fallback",
        }
    )
    assert profile.timeouts == Timeouts(idle=5, headers=30)
    assert profile.repetition.max_repeats == 5
    assert profile.tool_calling == "fallback"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"base_url": "http://x", "model": "m", "colour": 1}, "unknown key"),
        ({"model": "m"}, "'base_url' is required"),
        ({"base_url": "http://x", "model": "m", "tool_calling": "magic"}, "tool_calling"),
        ({"base_url": "http://x", "model": "m", "max_concurrency": 0}, "max_concurrency"),
        ({"base_url": "http://x", "model": "m", "timeouts": {"nope": 1}}, "nope"),
        ({"base_url": "http://x", "model": "m", "context_window": 0}, "context_window"),
    ],
)
def test_from_mapping_errors_name_the_problem(data: dict, message: str) -> None:
    """Bad config: ConfigError with the key in the message."""
    with pytest.raises(ConfigError, match=message):
        ModelProfile.from_mapping(data, where="[llm] in assistant.toml")


def test_from_environ() -> None:
    """AI_TOOLS_LLM_* variables build a profile; the key stays in its own variable."""
    profile = ModelProfile.from_environ(
        {
            "AI_TOOLS_LLM_URL": "https://openrouter.ai/api/v1",
            "AI_TOOLS_LLM_MODEL": "meta-llama/llama-3.1-8b-instruct",
            "AI_TOOLS_LLM_API_KEY_ENV": "OPENROUTER_API_KEY",
            "AI_TOOLS_LLM_CONTEXT_WINDOW": "16000",
            "AI_TOOLS_LLM_STREAM": "0",
            "AI_TOOLS_LLM_TOOL_CHOICE": "required",
            "AI_TOOLS_LLM_MAX_TOKENS": "700",
            "OPENROUTER_API_KEY": "sk-secret",
        }
    )
    assert profile.api_key_env == "OPENROUTER_API_KEY"
    assert profile.context_window == 16000
    assert profile.stream is False
    assert (profile.tool_choice, profile.max_tokens) == ("required", 700)
    assert "sk-secret" not in repr(profile)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "AI_TOOLS_LLM_URL"),
        ({"AI_TOOLS_LLM_URL": "http://x"}, "AI_TOOLS_LLM_MODEL"),
        (
            {
                "AI_TOOLS_LLM_URL": "http://x",
                "AI_TOOLS_LLM_MODEL": "m",
                "AI_TOOLS_LLM_CONTEXT_WINDOW": "big",
            },
            "integer",
        ),
        ({"AI_TOOLS_LLM_URL": "http://x", "AI_TOOLS_LLM_MODEL": "m",
          "AI_TOOLS_LLM_MAX_TOKENS": "many"}, "AI_TOOLS_LLM_MAX_TOKENS must be an integer"),
    ],
)
def test_from_environ_errors(env: dict, message: str) -> None:
    """Missing or bad variables: a ConfigError naming the variable."""
    with pytest.raises(ConfigError, match=message):
        ModelProfile.from_environ(env)
