"""The tool schemas' JSON kept per tool gives the text dumping the request's tools gives."""

from __future__ import annotations

import json

from ai_tools.react import ExitTool, LoopConfig, _LoopRun
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
