"""The tool schemas' JSON kept per tool gives the text dumping the request's tools gives."""

from __future__ import annotations

import json

from ai_tools.loop.run import ExitTool, LoopConfig, _LoopRun
from tests.unit.react_fakes import ScriptedLLM, make_ctx


def _run(config: LoopConfig) -> _LoopRun:
    run = _LoopRun(make_ctx(ScriptedLLM([])), config)
    run.prepare()
    return run


def test_tools_text_is_the_dumped_request_tools() -> None:
    exits = (ExitTool("page", "Page a player.", {"type": "object", "properties": {
        "text": {"type": "string", "description": "é ☃"}}}),)
    for config in (LoopConfig(), LoopConfig(exit_tools=exits),
                   LoopConfig(noop_tool="pass", exit_tools=exits)):
        for _ in range(2):  # the second time from the texts kept per tool
            run = _run(config)
            tools = run.request_tools()
            assert tools
            assert run._tools_text(tools) == json.dumps(tools, ensure_ascii=False, default=str)


def test_a_list_not_built_from_the_schemas_is_dumped_whole() -> None:
    run = _run(LoopConfig())
    tools = [{"type": "function", "function": {"name": "x"}}]
    assert run._tools_text(tools) == json.dumps(tools, ensure_ascii=False, default=str)


def test_the_kept_prompt_head_is_the_rendered_one() -> None:
    """A head taken from the ones kept across loops is the head rendered for the inputs."""
    from ai_tools.loop.prompts import PromptInputs, system_prompt_head
    from ai_tools.loop.run import GatePolicy
    from ai_tools.tools.base import ToolCategory

    exits = (ExitTool("page", "Page a player."),)
    variants = [
        (LoopConfig(), {}),
        (LoopConfig(exit_tools=exits), {}),
        (LoopConfig(native_tools=False), {}),
        (LoopConfig(noop_tool="pass"), {"mode": "sleep"}),
        (LoopConfig(), {"reflection": True}),
        (LoopConfig(), {"gate": GatePolicy(allowed_categories=frozenset(
            {ToolCategory.SAFE_CHAIN}))}),
    ]
    heads = set()
    for config, options in variants:
        for persona in ("You are Ada.", "You are Bob."):
            for _ in range(2):  # the second time from the kept heads
                run = _LoopRun(make_ctx(ScriptedLLM([]), **options), config)
                run.prepare()
                head = run.prompt_head(persona)
                assert head == system_prompt_head(PromptInputs(
                    assistant_name="ada", persona=persona, mode=run.ctx.mode,
                    reflection=run.ctx.reflection, tool_schemas=run.tool_schemas,
                    tool_categories=run.categories,
                    exit_tool_schemas=[t.schema() for t in config.exit_tools],
                    native_tools=run.native, noop_tool=config.noop_tool))
                heads.add(head)
    assert len(heads) == 2 * len(variants)  # every input made a difference
