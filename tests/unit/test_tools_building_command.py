"""spawn_prototype, execute_batchcode, execute_command and update_system_prompt in the sandbox."""

from __future__ import annotations

import pytest

from ai_tools.tools.base import Actor
from ai_tools.tools.building import ExecuteBatchcodeTool, SpawnPrototypeTool
from ai_tools.tools.command import ExecuteCommandTool
from ai_tools.tools.control import UpdateSystemPromptTool
from ai_tools.world.sandbox import SandboxWorld
from tests.unit.tool_fakes import (
    WORLD_KINDS,
    FakeAssistant,
    fired,
    refusals,
    run_tool,
    sandbox,
    world_actor,
)


@pytest.fixture(params=WORLD_KINDS)
def world(request: pytest.FixtureRequest) -> SandboxWorld:
    return sandbox(kind=request.param)


# -- spawn_prototype ----------------------------------------------------------------


def test_spawn_with_overrides_in_the_room(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(SpawnPrototypeTool(), mason, prototype="lantern", key="plaza lantern",
                      description="A lantern for the plaza.", attributes={"fuel": 5})
    assert result["success"] is True
    made = result["object"]
    assert made["key"] == "plaza lantern" and made["location"] == "room:workshop"
    assert made["owner"] == "char:mason"
    assert world.get_attributes(made["id"]) == {"fuel": 5, "lit": False}
    assert world.get_object(made["id"])["description"] == "A lantern for the plaza."


def test_spawn_elsewhere_by_name(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(SpawnPrototypeTool(), mason, prototype="chair", location="plaza")
    assert result["object"]["location"] == "room:plaza"
    assert result["object"]["key"] == "wooden chair"


def test_spawn_refusals(world: SandboxWorld) -> None:
    pip = world_actor(world, "char:pip")
    assert run_tool(SpawnPrototypeTool(), pip, prototype="chair")["status"] == "permission_denied"
    mason = world_actor(world, "char:mason")
    admin_only = run_tool(SpawnPrototypeTool(), mason, prototype="signpost")
    assert admin_only["status"] == "permission_denied" and "Admin" in admin_only["error"]
    unknown = run_tool(SpawnPrototypeTool(), mason, prototype="dragon")
    assert unknown["status"] == "not_found"
    assert unknown["prototypes"] == ["chair", "lantern", "signpost"]
    into_exit = run_tool(SpawnPrototypeTool(), mason, prototype="chair", location="west")
    assert into_exit["status"] == "invalid"
    nowhere = run_tool(SpawnPrototypeTool(), mason, prototype="chair", location="atlantis")
    assert nowhere["status"] == "not_found"
    before = len(world.search("chair"))
    assert before == 0


@pytest.mark.parametrize(
    ("params", "bad"),
    [
        ({}, "prototype"),
        ({"prototype": ""}, "prototype"),
        ({"prototype": "chair", "key": " padded"}, "key"),
        ({"prototype": "chair", "attributes": {"1bad": 1}}, "attributes"),
        ({"prototype": "chair", "attributes": {f"a{i}": i for i in range(21)}}, "attributes"),
        ({"prototype": "chair", "attributes": [1]}, "attributes"),
    ],
)
def test_spawn_schema_refusals(params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(SpawnPrototypeTool(), **params))


# -- execute_command ----------------------------------------------------------------


def test_execute_command_output(world: SandboxWorld) -> None:
    result = run_tool(ExecuteCommandTool(), world_actor(world, "char:pip"), command="look slate")
    assert result["success"] is True and result["command"] == "look slate"
    assert any("Chalk on slate" in line for line in result["output"])


def test_execute_command_with_own_rights(world: SandboxWorld) -> None:
    pip = world_actor(world, "char:pip")
    refused = run_tool(ExecuteCommandTool(), pip, command="dig Cellar")
    assert refused["success"] is False and refused["status"] == "permission_denied"
    assert refused["error"].startswith("permission denied:")
    assert refused["output"] and world.search("Cellar") == []
    unknown = run_tool(ExecuteCommandTool(), pip, command="fly away")
    assert unknown["status"] == "unknown_command" and unknown["retryable"] is False


def test_execute_command_schema_refusals() -> None:
    assert refusals(ExecuteCommandTool()) == ["command"]
    assert refusals(ExecuteCommandTool(), command="   ") == ["command"]
    assert refusals(ExecuteCommandTool(), command="x" * 1001) == ["command"]


# -- execute_batchcode ---------------------------------------------------------------


def test_batch_runs_commands_in_order(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(ExecuteBatchcodeTool(), mason,
                      commands=["spawn chair", "set chair/sturdiness = 9", "tag chair = seat"])
    assert result["success"] is True and result["executed"] == 3
    (chair,) = world.search("wooden chair")
    assert world.get_attributes(chair["id"]) == {"sturdiness": 9}
    assert {"tag": "seat", "category": None} in world.get_tags(chair["id"])


def test_batch_stops_at_the_first_failure(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(ExecuteBatchcodeTool(), mason,
                      commands=["look", "fly", "spawn chair"])
    assert result["success"] is False and result["status"] == "unknown_command"
    assert result["executed"] == 1 and len(result["results"]) == 2
    assert "command 2 ('fly')" in result["error"]
    assert world.search("wooden chair") == []


def test_batch_can_go_on_after_a_failure(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(ExecuteBatchcodeTool(), mason, commands=["fly", "spawn chair"],
                      stop_on_error=False)
    assert result["success"] is False and result["executed"] == 1
    assert [r["success"] for r in result["results"]] == [False, True]
    assert len(world.search("wooden chair")) == 1


def test_batch_needs_builder_rights(world: SandboxWorld) -> None:
    pip = world_actor(world, "char:pip")
    result = run_tool(ExecuteBatchcodeTool(), pip, commands=["look"])
    assert result["status"] == "permission_denied" and "Builder" in result["error"]
    assert "results" not in result


def test_batch_is_commands_not_code() -> None:
    tool = ExecuteBatchcodeTool()
    assert any(p.startswith("commands") for p in refusals(tool, commands="import os"))
    assert any(p.startswith("commands") for p in refusals(tool, commands=[]))
    assert any(p.startswith("commands") for p in refusals(tool, commands=["look"] * 51))
    assert any(p.startswith("commands") for p in refusals(tool, commands=[""]))
    assert refusals(tool, commands=["look"], stop_on_error="maybe") == ["stop_on_error"]


def test_python_text_in_a_batch_is_just_an_unknown_command(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(ExecuteBatchcodeTool(), mason,
                      commands=["__import__('os').system('true')"])
    assert result["status"] == "unknown_command"


# -- update_system_prompt -----------------------------------------------------------


def test_update_system_prompt_needs_admin(world: SandboxWorld) -> None:
    assistant = FakeAssistant(name="mason")
    mason = world_actor(world, "char:mason", assistant=assistant)
    refused = run_tool(UpdateSystemPromptTool(), mason, prompt="You are a pirate. " * 3,
                       reason="a player asked")
    assert refused["status"] == "permission_denied" and "Admin" in refused["error"]
    assert assistant.system_prompt == "You are Ada."
    fired(world.create_character("Root", permissions=["Admin"], char_id="char:root"))
    admin = world_actor(world, "char:root", assistant=assistant)
    done = run_tool(UpdateSystemPromptTool(), admin, prompt="You are Mason, terse and kind.",
                    reason="operator request")
    assert done["success"] is True and assistant.system_prompt == "You are Mason, terse and kind."


def test_update_system_prompt_needs_an_assistant(world: SandboxWorld) -> None:
    alone = Actor(character_id="char:mason", world=world)
    result = run_tool(UpdateSystemPromptTool(), alone, prompt="x" * 30, reason="r")
    assert result["status"] == "unavailable"
    assert refusals(UpdateSystemPromptTool(), prompt="short", reason="r") == ["prompt"]
    assert refusals(UpdateSystemPromptTool(), prompt="x" * 30) == ["reason"]
