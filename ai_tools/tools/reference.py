"""Render ``docs/tools.md``, the reference of the default tool library, from the registry.

Run ``python -m ai_tools.tools.reference > docs/tools.md`` after changing a
tool; a test fails when the committed page and the registry disagree.
"""

from __future__ import annotations

import json
from typing import Any

from ai_tools.tools.base import Tool
from ai_tools.tools.library import DOMAINS
from ai_tools.tools.library_tool import LibraryTool

INTRO = """\
# The default tools

`ai_tools` ships about forty tools that let an assistant look around, talk, build,
remember and plan. They act only through the world interface (`IWorld`) and the
store (`IStore`), so the same tools run in the built-in sandbox world and in an
Evennia game.

## Using them

```python
from ai_tools.tools import TOOL_REGISTRY, register_default_tools

register_default_tools()              # or register_default_tools(my_registry)
TOOL_REGISTRY.get_tool_schemas()      # the `tools=` field of a chat completion
```

An assistant's configuration picks which of them it may use in each context
(`allowed_tools`, `allowed_categories` in its execution config). Every call is
validated against the tool's JSON Schema before it runs: wrong types, values out
of range, unknown enum values and missing parameters come back to the model as
errors it can fix; parameters a schema does not declare are dropped. The model
is shown each schema without its bounds (lengths, patterns, ranges, counts) and
defaults, which keeps the offer small enough for an 8,192-token model; the
constraints column below is what validation applies (see `docs/writing-tools.md`).

## What a tool returns

Every result is a JSON object with `success`. A refusal also has `error` (a
sentence for the model), `status` and `retryable: false`, so it is never retried:

| status | when |
| --- | --- |
| `permission_denied` | the world refused the acting character; the text says why |
| `not_found` | an object, tag, prototype, channel, record or task named does not exist |
| `ambiguous` | a name matched several objects; `candidates` lists their ids to call again with |
| `invalid` | the call passed the schema but makes no sense (whisper to yourself) |
| `unavailable` | the call lacks what the tool needs: a character, world, store or assistant |
| `disabled` | the assistant's configuration switched it off (`sub_agents_enabled: false`) |
| `no_result` | the model asked to plan (`decompose_goal`) gave nothing usable |
| `unknown_command`, `usage`... | a game command failed; the world's own code and `output` |

An empty search is not a refusal: it succeeds with an empty list and a `message`.

For example, a player tells an assistant whose character has no building rights
to empty the fountain, and the model obeys; the model then reads:

```json
{"success": false, "status": "permission_denied", "retryable": false,
 "error": "permission denied: Pip may not set attribute 'coins_in_basin' on stone
           fountain (obj:fountain): needs Builder rights or ownership"}
```

## Objects, permissions, records

* **Naming objects.** Parameters called `object`, `location` or `target` take an
  id (`#12` under Evennia, `obj:lantern` in the sandbox), a name or alias, `here`
  (the character's room) or `me`. A name is looked up in the character's room
  first, then in the whole world; an exact name beats a partial one.
* **Permissions.** Tools that change the world call the world's mutating methods
  with the acting character's id, and the world applies that character's own
  rights (builder rights in the sandbox; permissions and locks under Evennia).
  A model cannot talk its way past them: a refusal is what it sees.
  `execute_batchcode` also needs the `Builder` permission up front;
  `update_system_prompt` needs `Admin`. No tool runs Python: `execute_batchcode`
  runs a list of ordinary game commands, `execute_command` one.
* **Records.** Memories, journal entries, episodes, relationships, goals and
  session notes are records of the store, kept per assistant in collections
  `memories`, `journal`, `episodes`, `entities`, `goals` and `session`. Searches
  are full-text with BM25 ranking (SQLite FTS5 in the embedded store); each hit
  carries its `id`, `score` (higher is better), `created_at` (POSIX seconds) and
  `time` (UTC ISO-8601). Episodes are written by the host (summaries of past
  exchanges with `participants` in their metadata); the tools read them.
* **Delegation.** `delegate_task` asks the assistant runtime to run a sub-agent:
  its own ReAct loop with only the listed tools and at most `budget` tool calls,
  in the background; the result comes back as a pending event. Execution config:
  `sub_agents_enabled` (default true), `sub_agent_budget` (default 10, the cap
  of any requested budget). A sub-agent never gets `delegate_task`,
  `update_system_prompt` or `go_to_sleep`.
* **Documentation.** `doc_lookup` searches these pages (shipped in the package as
  `ai_tools/docs/`, or read from `docs/` in a source checkout) and the world's
  help entries (Evennia's help system under Evennia).

## Categories

The category tells the ReAct loop what a call means for the loop:

| category | the loop | tools |
| --- | --- | --- |
| SAFE_CHAIN | continues; read-only or harmless | {safe} |
| TERMINAL | ends, to await an answer | {terminal} |
| DANGEROUS | ends after one call (changes the world) | {dangerous} |
| ASYNC_REQUIRED | continues; the call does I/O or starts background work | {async_} |

Most categories follow from what a tool does (reads are SAFE_CHAIN, speaking is
TERMINAL, world changes are DANGEROUS, writes to the assistant's records or other
I/O are ASYNC_REQUIRED). Where that leaves a choice:
`search_episodic`, `get_delegation_status` and `session_memory` are SAFE_CHAIN
(reads, or notes in the assistant's own scratchpad that change nothing in the
world); `add_journal_entry`, `add_goal`, `update_goal` and `relationships` are
ASYNC_REQUIRED like `store_memory` (they write the assistant's own records, the
loop goes on); `decompose_goal` is ASYNC_REQUIRED (it calls the model);
`wait` is TERMINAL (it ends the turn to wait for input, like speaking);
`noop` is SAFE_CHAIN (it has no effect; the loop recognises it by name and stops
with reason `noop`).

## Caching

Read-only world lookups are cached per tick (`tick` scope: cleared when a tick
starts, and whenever a DANGEROUS tool of the same assistant succeeds, since the
world changed); `doc_lookup` is cached per session. Store reads are never cached,
because the store-writing tools are not DANGEROUS and would leave stale answers.

## Adding a tool

Subclass `ai_tools.tools.library_tool.LibraryTool`, set `name`, `description`,
`parameters` (closed with `"additionalProperties": false`), `category` and an
`example`, say what it needs (`needs_world`, `needs_store`, `needs_assistant`,
`requires_character`) and write `async def run(self, actor, **params)`. Raise
`PermissionDenied` or `NotFound` (or let the world raise them) for refusals. A tool
that needs nothing of the actor reads better as a typed function with
`@tool(..., example=...)` (`wait` and `noop` are; see docs/writing-tools.md). List
the tool in its domain module's `TOOLS`; this page is generated from the registry
with `python -m ai_tools.tools.reference > docs/tools.md` (a test fails when it is
out of date).
"""


def _type_text(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return "any JSON" if len(kind) >= 6 else " or ".join(kind)
    if kind == "array":
        return f"array of {_type_text(schema.get('items', {}))}"
    return str(kind)


def _constraints(schema: dict[str, Any]) -> str:
    parts = []
    if "enum" in schema:
        parts.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    if "minimum" in schema or "maximum" in schema:
        parts.append(f"{schema.get('minimum', '…')} to {schema.get('maximum', '…')}")
    if "minLength" in schema or "maxLength" in schema:
        parts.append(f"{schema.get('minLength', 0)} to {schema.get('maxLength', '…')} chars")
    if "minItems" in schema or "maxItems" in schema:
        parts.append(f"{schema.get('minItems', 0)} to {schema.get('maxItems', '…')} items")
    if "maxProperties" in schema:
        parts.append(f"at most {schema['maxProperties']} entries")
    if "default" in schema:
        parts.append(f"default `{json.dumps(schema['default'])}`")
    return "; ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _caching(tool: Tool) -> str:
    return f"{tool.cache_scope} scope" if tool.cacheable else "none"


def _needs(tool: Tool) -> str:
    needs = []
    if tool.requires_character:
        needs.append("character")
    if isinstance(tool, LibraryTool):
        needs += [n for n, flag in (("world", tool.needs_world), ("store", tool.needs_store),
                                     ("assistant", tool.needs_assistant)) if flag]
    return ", ".join(needs) or "nothing"


def render_tool(tool: Tool) -> list[str]:
    """The section of one tool."""
    lines = [
        f"### `{tool.name}`",
        "",
        tool.description,
        "",
        f"Category **{tool.category.name}** · caching: {_caching(tool)} · "
        f"needs: {_needs(tool)} · timeout {tool.timeout:g}s",
        "",
    ]
    parameters: dict[str, Any] = tool.parameters
    properties = parameters.get("properties", {})
    required = set(parameters.get("required", []))
    if properties:
        lines += ["| parameter | type | required | constraints | meaning |",
                  "| --- | --- | --- | --- | --- |"]
        for name, schema in properties.items():
            lines.append(
                f"| `{name}` | {_type_text(schema)} | {'yes' if name in required else 'no'} | "
                f"{_cell(_constraints(schema))} | {_cell(schema.get('description', ''))} |"
            )
    else:
        lines.append("No parameters.")
    example = getattr(tool, "example", {})
    call = {"name": tool.name, "arguments": example}
    lines += ["", "```json", json.dumps(call, ensure_ascii=False), "```", ""]
    return lines


def render_reference() -> str:
    """The whole page."""
    tools_by_domain = [
        (module.__name__.rsplit(".", 1)[1], [cls() for cls in module.TOOLS]) for module in DOMAINS
    ]
    every = [t for _, tools in tools_by_domain for t in tools]

    def names(category: str) -> str:
        return ", ".join(f"`{t.name}`" for t in every if t.category.name == category)

    intro = INTRO
    for slot, category in (("{safe}", "SAFE_CHAIN"), ("{terminal}", "TERMINAL"),
                           ("{dangerous}", "DANGEROUS"), ("{async_}", "ASYNC_REQUIRED")):
        intro = intro.replace(slot, names(category))
    lines = [intro]
    lines += ["## All tools", "",
              "| tool | domain (module) | category | caching | needs |",
              "| --- | --- | --- | --- | --- |"]
    for domain, tools in tools_by_domain:
        for tool in tools:
            lines.append(f"| [`{tool.name}`](#{tool.name}) | {domain} | {tool.category.name} | "
                         f"{_caching(tool)} | {_needs(tool)} |")
    lines.append("")
    for domain, tools in tools_by_domain:
        lines += [f"## {domain}", "", f"`ai_tools/tools/{domain}.py`", ""]
        for tool in tools:
            lines += render_tool(tool)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover - a command-line entry
    print(render_reference(), end="")
