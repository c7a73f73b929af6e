"""The same client against a real OpenAI-compatible server, when one is configured.

Runs only with ``AI_TOOLS_LLM_URL`` and ``AI_TOOLS_LLM_MODEL`` set (and
``AI_TOOLS_LLM_API_KEY_ENV`` naming the key's variable, for hosted APIs);
see docs/models.md.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import pytest_twisted

from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.events import TextDelta
from ai_tools.llm.parsing import parse_tool_calls
from ai_tools.llm.profile import ModelProfile, Timeouts

pytestmark = pytest.mark.skipif(
    not os.environ.get("AI_TOOLS_LLM_URL"),
    reason="set AI_TOOLS_LLM_URL and AI_TOOLS_LLM_MODEL to test against a real model server",
)

LOOK = {
    "type": "function",
    "function": {
        "name": "look",
        "description": "Look around the current room.",
        "parameters": {
            "type": "object",
            "properties": {"detail": {"type": "string", "enum": ["brief", "full"]}},
            "required": ["detail"],
        },
    },
}


def client() -> OpenAIChatClient:
    from twisted.internet import reactor

    profile = ModelProfile.from_environ()
    profile = ModelProfile.from_mapping(
        {
            **{f: getattr(profile, f) for f in ("base_url", "model", "api_key_env", "stream")},
            "timeouts": Timeouts(headers=120, idle=60),
            "extra_body": {"temperature": 0, "max_tokens": 200},
        }
    )
    return OpenAIChatClient(profile, reactor=reactor)


@pytest_twisted.ensureDeferred
async def test_streamed_answer() -> None:
    """A short streamed answer arrives as text deltas."""
    c = client()
    try:
        deltas: list[Any] = []
        response = await c.complete(
            [{"role": "user", "content": "Say the word 'ready' and nothing else."}],
            stream=True,
            on_event=lambda e: deltas.append(e) if isinstance(e, TextDelta) else None,
        )
        assert "ready" in response.content.lower()
        assert deltas
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_tool_call_native_or_fallback() -> None:
    """Asked to look around, the model calls the tool (natively or as JSON text)."""
    c = client()
    try:
        response = await c.complete(
            [
                {"role": "system", "content": "You act only through tools."},
                {"role": "user", "content": "Look around the room in full detail."},
            ],
            tools=[LOOK],
            tool_choice="auto",
            stream=False,
        )
        parsed = parse_tool_calls(response, ["look"])
        assert parsed.ok, parsed.error
        assert [call.name for call in parsed.normal] == ["look"]
    finally:
        await c.close()
