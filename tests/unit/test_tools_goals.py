"""Goal tools and list_projects: a tree of goal records, decomposition by the model."""

from __future__ import annotations

import pytest
from twisted.internet import task

from ai_tools.store.memory import MemoryStore
from ai_tools.tools.base import Actor
from ai_tools.tools.context import ListProjectsTool
from ai_tools.tools.goals import AddGoalTool, DecomposeGoalTool, UpdateGoalTool, parse_subgoals
from tests.unit.tool_fakes import FakeAssistant, FakeLLM, fired, refusals, run_tool


@pytest.fixture
def clock() -> task.Clock:
    return task.Clock()


@pytest.fixture
def actor(clock: task.Clock) -> Actor:
    return Actor(character_id="char:ada", store=MemoryStore(clock=clock),
                 assistant=FakeAssistant(name="ada"))


def add_goal(actor: Actor, clock: task.Clock, text: str, **params: object) -> dict:
    clock.advance(1)
    result = run_tool(AddGoalTool(), actor, description=text, **params)
    assert result["success"] is True, result
    return result["goal"]


def test_add_goal_and_subgoal(actor: Actor, clock: task.Clock) -> None:
    root = add_goal(actor, clock, "Furnish the plaza", priority="high")
    assert root["status"] == "active" and root["priority"] == "high" and root["progress"] == 0
    child = add_goal(actor, clock, "Place a lantern", parent_id=root["id"])
    assert child["parent_id"] == root["id"]


def test_add_goal_with_unknown_parent(actor: Actor) -> None:
    result = run_tool(AddGoalTool(), actor, description="Orphan goal", parent_id=99)
    assert result["success"] is False and result["status"] == "not_found"


def test_add_goal_parent_must_be_a_goal_of_mine(actor: Actor, clock: task.Clock) -> None:
    memory = fired(actor.store.add_record("ada", "memories", "not a goal"))
    other = fired(actor.store.add_record("bo", "goals", "bo's goal"))
    for parent in (memory["id"], other["id"]):
        result = run_tool(AddGoalTool(), actor, description="Sub goal", parent_id=parent)
        assert result["status"] == "not_found"


def test_update_goal_status_progress_notes(actor: Actor, clock: task.Clock) -> None:
    goal = add_goal(actor, clock, "Place a lantern")
    update = UpdateGoalTool()
    half = run_tool(update, actor, goal_id=goal["id"], progress=50, note="Spawned it")
    assert half["goal"]["progress"] == 50 and half["goal"]["notes"] == ["Spawned it"]
    done = run_tool(update, actor, goal_id=goal["id"], status="completed", note="Tagged it")
    assert done["goal"]["status"] == "completed" and done["goal"]["progress"] == 100
    assert done["goal"]["notes"] == ["Spawned it", "Tagged it"]
    reworded = run_tool(update, actor, goal_id=goal["id"], description="Place two lanterns")
    assert reworded["goal"]["content"] == "Place two lanterns"


def test_update_unknown_goal(actor: Actor) -> None:
    result = run_tool(UpdateGoalTool(), actor, goal_id=5, status="completed")
    assert result == {**result, "success": False, "status": "not_found"}


@pytest.mark.parametrize(
    ("tool", "params", "bad"),
    [
        (AddGoalTool(), {}, "description"),
        (AddGoalTool(), {"description": "ab"}, "description"),
        (AddGoalTool(), {"description": "Do it", "priority": "extreme"}, "priority"),
        (AddGoalTool(), {"description": "Do it", "parent_id": 0}, "parent_id"),
        (UpdateGoalTool(), {"goal_id": 1}, "parameters"),
        (UpdateGoalTool(), {"goal_id": 1, "progress": 101}, "progress"),
        (UpdateGoalTool(), {"goal_id": 1, "status": "done"}, "status"),
        (UpdateGoalTool(), {"status": "completed"}, "goal_id"),
        (DecomposeGoalTool(), {"goal_id": 1, "max_subgoals": 1}, "max_subgoals"),
        (DecomposeGoalTool(), {"goal_id": 1, "max_subgoals": 11}, "max_subgoals"),
        (DecomposeGoalTool(), {}, "goal_id"),
    ],
)
def test_goal_schema_refusals(tool: object, params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(tool, **params))  # type: ignore[arg-type]


def test_decompose_stores_a_tree_from_the_model(actor: Actor, clock: task.Clock) -> None:
    goal = add_goal(actor, clock, "Furnish the plaza", priority="high")
    llm: FakeLLM = actor.assistant.llm  # type: ignore[union-attr]
    llm.answers.append('Sure:\n["Spawn a lantern", "Set its fuel", "Tag it lighting"]')
    result = run_tool(DecomposeGoalTool(), actor, goal_id=goal["id"], max_subgoals=3,
                      guidance="use prototypes")
    assert result["success"] is True
    assert [s["content"] for s in result["subgoals"]] == [
        "Spawn a lantern", "Set its fuel", "Tag it lighting"]
    assert all(s["parent_id"] == goal["id"] and s["priority"] == "high"
               for s in result["subgoals"])
    children = fired(actor.store.list_records("ada", "goals", 20, False, goal["id"]))
    assert [c["content"] for c in children] == ["Spawn a lantern", "Set its fuel",
                                                "Tag it lighting"]
    prompt = llm.prompts[0][-1]["content"]
    assert "Furnish the plaza" in prompt and "use prototypes" in prompt and "3" in prompt


def test_decompose_unusable_answer_stores_nothing(actor: Actor, clock: task.Clock) -> None:
    goal = add_goal(actor, clock, "Furnish the plaza")
    actor.assistant.llm.answers.append("  ")  # type: ignore[union-attr]
    result = run_tool(DecomposeGoalTool(), actor, goal_id=goal["id"])
    assert result["success"] is False and result["status"] == "no_result"
    assert fired(actor.store.list_records("ada", "goals", 20)) == [fired(
        actor.store.get_record(goal["id"]))]


def test_decompose_unknown_goal_and_no_assistant(actor: Actor) -> None:
    assert run_tool(DecomposeGoalTool(), actor, goal_id=42)["status"] == "not_found"
    alone = Actor(character_id="c", store=actor.store)
    result = run_tool(DecomposeGoalTool(), alone, goal_id=1)
    assert result["status"] == "unavailable" and "assistant" in result["error"]


def test_parse_subgoals_accepts_lists_and_lines() -> None:
    assert parse_subgoals('[{"description": "A step"}, "B step"]', 5) == ["A step", "B step"]
    assert parse_subgoals("1. First step\n2) Second step\n- Third step", 2) == [
        "First step", "Second step"]
    assert parse_subgoals("[not json", 5) == ["[not json"]
    assert parse_subgoals("ok\n!!\n", 5) == []


def test_list_projects_shows_roots_with_progress(actor: Actor, clock: task.Clock) -> None:
    plaza = add_goal(actor, clock, "Furnish the plaza")
    add_goal(actor, clock, "Write a guide")
    done = add_goal(actor, clock, "Old project")
    run_tool(UpdateGoalTool(), actor, goal_id=done["id"], status="completed")
    a = add_goal(actor, clock, "Place a lantern", parent_id=plaza["id"])
    add_goal(actor, clock, "Place a bench", parent_id=plaza["id"])
    run_tool(UpdateGoalTool(), actor, goal_id=a["id"], status="completed")
    active = run_tool(ListProjectsTool(), actor)
    assert [p["content"] for p in active["projects"]] == ["Write a guide", "Furnish the plaza"]
    furnish = active["projects"][1]
    assert furnish["subgoals"] == 2 and furnish["subgoals_completed"] == 1
    every = run_tool(ListProjectsTool(), actor, status="all")
    assert every["count"] == 3
    completed = run_tool(ListProjectsTool(), actor, status="completed")
    assert [p["content"] for p in completed["projects"]] == ["Old project"]


def test_list_projects_empty(actor: Actor) -> None:
    result = run_tool(ListProjectsTool(), actor)
    assert result["success"] is True and result["projects"] == []
    assert result["message"] == "no project is active"
    assert "status" in refusals(ListProjectsTool(), status="finished")
