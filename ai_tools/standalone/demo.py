"""``make demo`` (``python -m ai_tools.standalone.demo``): the standalone service at work.

Starts the service of ``examples/assistant.toml`` on the embedded default (a
fresh SQLite file in ``var/``, the sandbox world of ``examples/world.toml``),
gives Pip the innkeeper one memory, and has Bob, a player in the inn, speak to
her twice.  Each step of her ReAct loop is printed as it happens — the tool
chosen, her reasoning, how long the call took, whether it came from the cache,
what it returned, and why the loop ended — followed by what Bob hears.  Then
the service stops cleanly and the demo exits 0.

With no model server configured, the answers come from the scripted stand-in
model of :mod:`ai_tools.llm.scripted` playing ``examples/demo-scenario.toml`` (no
network, no API key).  The demo reads the same ``AI_TOOLS_…`` variables as
``twistd ai-assistant`` (:mod:`ai_tools.settings`): with ``AI_TOOLS_LLM_URL``
and ``AI_TOOLS_LLM_MODEL`` set (and ``AI_TOOLS_LLM_API_KEY`` if the server
needs a key), the same demo runs against that OpenAI-compatible server:
Ollama, llama.cpp's server, vLLM, OpenAI, OpenRouter...  Only the database
and the listeners are the demo's own (a fresh file, no HTTP API, no console).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from twisted.internet import defer, task
from twisted.logger import (
    FilteringLogObserver,
    Logger,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)
from twisted.python.failure import Failure

from ai_tools.json_types import JSONMapping

if TYPE_CHECKING:
    from twisted.internet.interfaces import IReactorTime
    from twisted.logger import ILogFilterPredicate, ILogObserver

    from ai_tools.llm.events import ToolCall
    from ai_tools.service.service import AssistantService
    from ai_tools.service.tick import TickResult
    from ai_tools.standalone.app import StandaloneService
    from ai_tools.standalone.config import Config
    from ai_tools.world.messages import WorldMessage

__all__ = ["PLAYER_LINES", "StepPrinter", "main", "run_demo", "summarise_result"]

log = Logger()

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ASSISTANT = "pip"
PLAYER = "char:bob"
PLAYER_LINES = (
    "Evening, Pip! What's the soup tonight, and do you remember how I take it?",
    "Perfect. Two bowls, please, I'm starving.",
)
SEED_MEMORY = ("Bob takes his fish chowder without onions.",
               {"importance": 6, "about": "Bob", "tags": ["preference"]})
MODEL_UNREACHABLE = frozenset({"llm_error", "llm_unavailable"})
"""Loop endings where the model server did not answer (the demo then names the settings)."""
DEFAULT_TIMEOUT = 180.0
"""Seconds one exchange may take (a real model on a CPU can be slow)."""

Write = Callable[[str], None]


# -- what the steps say ------------------------------------------------------------


def _short(value: object, limit: int = 90) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value: object) -> float:
    """A number of an event (0.0 when it has none)."""
    return float(value) if isinstance(value, int | float) else 0.0


def _keys(items: object) -> str:
    if not isinstance(items, list):
        return ""
    return ", ".join(str(i.get("key", i.get("id", "?"))) for i in items if isinstance(i, Mapping))


def summarise_result(result: object) -> str:
    """One line saying what a tool returned (the whole result is in the history)."""
    if not isinstance(result, Mapping):
        return _short(result)
    if not result.get("success", False):
        return "error: " + _short(result.get("error") or result.get("status") or result)
    parts: list[str] = []
    location = result.get("location")
    if isinstance(location, Mapping):
        parts.append(str(location.get("key", location.get("id"))))
        for label, key in (("exits", "exits"), ("here", "contents"), ("people", "characters")):
            names = _keys(result.get(key))
            if names:
                parts.append(f"{label}: {names}")
    elif isinstance(result.get("memories"), list):
        memories = result["memories"]
        if memories:
            first = memories[0].get("content", "") if isinstance(memories[0], Mapping) else ""
            parts.append(f"{len(memories)} memory(ies), best: {_short(first, 70)!r}")
        else:
            parts.append(str(result.get("message", "no memories")))
    elif isinstance(result.get("memory"), Mapping):
        memory = result["memory"]
        content = _short(memory.get("content", ""), 70)
        parts.append(f"stored memory {memory.get('id', '')}: {content!r}")
    elif isinstance(result.get("results"), list):
        parts.append(f"found {len(result['results'])}: {_keys(result['results']) or '-'}")
    elif isinstance(result.get("attributes"), Mapping):
        attributes = result["attributes"]
        parts.append(", ".join(f"{k} = {json.dumps(v, ensure_ascii=False)}"
                               for k, v in attributes.items()) or "no attributes")
    elif "delivered_to" in result:
        heard = result.get("delivered_to") or []
        parts.append(f"{result.get('kind', 'said')}, heard by {', '.join(heard) or 'nobody'}")
    else:
        rest = {k: v for k, v in result.items() if k != "success" and not k.startswith("_")}
        parts.append(_short(rest) if rest else "ok")
    return "; ".join(parts)


ResultOf = Callable[[str, str], object]
"""``result_of(tool_call_id, tool)``: the decoded result of a finished call, from the history."""


class StepPrinter:
    """Prints an assistant's loop events as they arrive (an AssistantService observer).

    ``result_of`` finds what a call returned, so each step can say it;
    ``tool_names`` are the tools a model may call, so the JSON of a call
    written in the text (fallback tool calling) is told from the reasoning.
    """

    def __init__(self, write: Write, result_of: ResultOf,
                 tool_names: Collection[str] = ()) -> None:
        self.write = write
        self.result_of = result_of
        self.tool_names = tool_names
        self.thinking: list[str] = []
        self.said = ""
        self.written_calls: list[ToolCall] = []

    def __call__(self, event: JSONMapping) -> None:
        handler = getattr(self, f"_on_{event.get('type')}", None)
        if handler is not None:
            handler(event)

    def _on_iteration(self, event: JSONMapping) -> None:
        self.thinking = []
        self.write(f"  step {event.get('iteration')}: asking the model "
                   f"({event.get('usage_percent', 0)}% of the context used)")

    def _on_text_delta(self, event: JSONMapping) -> None:
        self.thinking.append(str(event.get("text", "")))

    def _on_tool_call(self, event: JSONMapping) -> None:
        reasoning = self._reasoning_for(str(event.get("tool")))
        if reasoning:
            self.write(f"    reasoning: {_short(reasoning, 100)}")
        arguments = json.dumps(event.get("arguments") or {}, ensure_ascii=False)
        self.write(f"    tool:      {event.get('tool')}({_short(arguments, 80)})"
                   f"  [{event.get('category') or '?'}]")

    def _on_tool_result(self, event: JSONMapping) -> None:
        ms = _number(event.get("duration_ms"))
        cache = ", cache hit" if event.get("from_cache") else ""
        status = "ok" if event.get("success") else str(event.get("status", "failed"))
        result = self.result_of(str(event.get("tool_call_id", "")), str(event.get("tool", "")))
        self.write(f"    result:    {status} in {ms:.1f} ms{cache}: {summarise_result(result)}")

    def _on_signal(self, event: JSONMapping) -> None:
        self.write(f"    signal:    {event.get('tool_name')}"
                   f"({_short(event.get('arguments') or {}, 60)})")

    def _on_termination(self, event: JSONMapping) -> None:
        thought = "".join(self.thinking).strip()
        if thought:
            self.write(f"    answer:    {_short(thought, 100)}")
        error = f" ({_short(event.get('error'), 160)})" if event.get("error") else ""
        self.write(f"  loop ended: {event.get('reason')}{error} after "
                   f"{event.get('iterations')} step(s), "
                   f"{_number(event.get('duration_ms')) / 1000:.2f} s")

    def _reasoning_for(self, tool: str) -> str:
        """What the model wrote with this call: its text, without a call written as JSON
        (fallback tool calling), plus that call's own ``reasoning``."""
        if self.thinking:  # a new answer: read its text once
            from ai_tools.llm.parsing import parse_tool_calls

            text = "".join(self.thinking).strip()
            self.thinking = []
            parsed = parse_tool_calls(text, self.tool_names)
            fallback = parsed.mode == "fallback"
            self.written_calls = list(parsed.calls) if fallback else []
            self.said = parsed.visible_text.strip() if fallback else text
        said, self.said = self.said, ""
        call = next((c for c in self.written_calls if c.name == tool), None)
        if call is None:
            return said
        self.written_calls.remove(call)
        return " ".join(part for part in (said, call.reasoning or "") if part)


def _result_lookup(service: AssistantService, name: str) -> ResultOf:
    """Finds a call's result in the history: a ``tool`` message answering its id, or (fallback
    tool calling, where results are user messages) the latest result of that tool."""
    from ai_tools.history_format import fallback_result_parts

    def decoded(content: object) -> object:
        if not isinstance(content, str | bytes | bytearray) and content is not None:
            return content
        try:
            return json.loads(content or "null")
        except ValueError:
            return content

    def result_of(call_id: str, tool: str) -> object:
        for message in reversed(service.get(name).history.messages):
            if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
                return decoded(message.get("content"))
            fallback = fallback_result_parts(message)
            if fallback is not None and fallback[0] == tool:
                return decoded(fallback[1].strip())
        return None

    return result_of


# -- setting up --------------------------------------------------------------------


DEMO_FLAGS = ("db", "http", "manhole")
"""The settings the demo sets itself (a fresh database, no listeners)."""
IGNORED = ("config", "db", "db_dsn", "http", "manhole")
"""Settings a variable cannot change for the demo."""


def model_line(config: Config) -> str:
    """Which model plays Pip, as the demo announces it."""
    from ai_tools.settings import setting

    spec = next(iter(config.models.values()), None)
    url, model = setting("llm_url").env, setting("llm_model").env
    if spec is None or spec.profile is None:
        return ("the scripted stand-in model (ai_tools.llm.scripted) playing "
                "examples/demo-scenario.toml: no model server, no network.\n"
                f"       Set {url} and {model} to use a real OpenAI-compatible server.")
    return f"{spec.profile.model} at {spec.profile.base_url} (from {url} / {model})"


def ignored_variables(environ: Mapping[str, str]) -> list[str]:
    """Setting variables the demo does not follow (it keeps its own state and no listeners)."""
    from ai_tools.settings import setting

    return [setting(name).env for name in IGNORED if environ.get(setting(name).env)]


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it (shorter to read)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def fresh_state(state_dir: Path) -> Path:
    """The demo's database path, with any earlier demo run's files removed."""
    state_dir.mkdir(parents=True, exist_ok=True)
    db = state_dir / "demo.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return db


async def seed_memory(db: Path, reactor: IReactorTime) -> None:
    """Give Pip one memory about Bob before the service starts (so she can recall it)."""
    from ai_tools.store.sqlite import SQLiteStore
    from ai_tools.tools.records import MEMORIES

    store = SQLiteStore(str(db), clock=reactor, reactor=reactor)
    await store.open()
    try:
        content, metadata = SEED_MEMORY
        await store.add_record(ASSISTANT, MEMORIES, content, dict(metadata))
    finally:
        await store.close()


# -- the demo ----------------------------------------------------------------------


def run_demo(
    reactor: IReactorTime,
    write: Write,
    *,
    state_dir: Path,
    environ: Mapping[str, str],
    timeout: float = DEFAULT_TIMEOUT,
    config_path: Path = EXAMPLES / "assistant.toml",
) -> defer.Deferred[int]:
    """Run the demo, printing through ``write``; fires with the exit status."""
    return defer.Deferred.fromCoroutine(_run_demo(reactor, write, state_dir=state_dir,
                                                  environ=environ, timeout=timeout,
                                                  config_path=config_path))


async def _run_demo(reactor: IReactorTime, write: Write, *, state_dir: Path,
                    environ: Mapping[str, str], timeout: float, config_path: Path) -> int:
    from ai_tools.errors import ConfigError
    from ai_tools.standalone.app import build_service, describe_failure
    from ai_tools.standalone.config import Overrides, load_config

    db = fresh_state(state_dir)
    flags = dict(zip(DEMO_FLAGS, (str(db), "off", "off"), strict=True))
    try:
        config = load_config(config_path, Overrides(flags=flags, environ=environ))
    except ConfigError as exc:
        write(f"demo: {exc}")
        return 2
    for warning in config.warnings:
        write(f"demo: warning: {warning}")
    for variable in ignored_variables(environ):
        write(f"demo: {variable} is not used by the demo (it starts from a fresh "
              f"{shown(db)}, without listeners)")
    real_model = any(not spec.scripted for spec in config.models.values())
    _introduce(write, model_line(config), db, state_dir)
    await seed_memory(db, reactor)
    write(f"Pip remembers one thing already: {SEED_MEMORY[0]!r}")

    app = build_service(config, reactor=reactor)
    app.startService()
    try:
        try:
            await app.when_ready()
        except Exception as exc:
            write(f"demo: the service did not start: {describe_failure(exc)}")
            return 1
        status = await _converse(app, write, reactor, timeout, real_model=real_model)
        await _print_summary(app, write)
    finally:
        await app.stopService()
    write("")
    write("The service stopped cleanly (state saved, store closed)." if status == 0
          else "The service stopped.")
    return status


def _introduce(write: Write, model: str, db: Path, state_dir: Path) -> None:
    """What the demo is, which model plays Pip, where the state goes."""
    write("ai_tools demo: Pip, the innkeeper of the Drowned Lantern, is an LLM assistant")
    write("acting in a small sandbox world through tools.")
    write("")
    write(f"Model: {model}")
    write(f"State: {shown(db)} (a fresh SQLite file; the service's log is "
          f"{shown(state_dir / 'demo.log')})")


async def _converse(app: StandaloneService, write: Write, reactor: IReactorTime,
                    timeout: float, *, real_model: bool) -> int:
    """Bob says each of his lines and waits for Pip; fires with the exit status."""
    service, world = app.assistants, app.world
    write(f"Service: {len(service.names())} assistants hosted ({', '.join(service.names())}) "
          f"in the world {world.meta.get('name', 'sandbox')}.")
    printer = StepPrinter(write, _result_lookup(service, ASSISTANT),
                          [t.name for t in service.registry.get_all_tools()])
    stop_observing = service.add_observer(printer, ASSISTANT)
    heard: list[str] = []

    def bob_hears(message: WorldMessage) -> None:
        if message.sender_id == f"char:{ASSISTANT}":
            line = message.render()
            heard.append(line)
            write(f"  Bob hears: {line}")

    stop_hearing = world.subscribe(PLAYER, bob_hears)
    try:
        for line in PLAYER_LINES:
            write("")
            write(f'Bob, in {world.describe_location(PLAYER)["room"]["key"]}, says: "{line}"')
            said_before = len(heard)
            world.message_location(PLAYER, line)
            tick = await _answer(service, reactor, timeout)
            problem = _no_answer(tick, timeout, real_model)
            if problem:
                write(problem)
                return 1
            if len(heard) == said_before and tick is not None and tick.loop is not None:
                reply = tick.loop.text.strip()
                write(f"  Pip said nothing in the room{': ' + repr(reply) if reply else '.'}")
    finally:
        stop_hearing()
        stop_observing()
    return 0


async def _answer(service: AssistantService, reactor: IReactorTime, timeout: float
                  ) -> TickResult | None:
    """The tick that answers what Bob just said (None when none came within ``timeout``).

    Bob's line is already queued: ``run_tick`` starts the tick that takes it,
    or waits for it when the timer started it first.  A tick that ran no loop
    (one the timer had started before Bob spoke) is followed by the next.
    """
    for _ in range(3):
        ticking = service.run_tick(ASSISTANT)
        ticking.addTimeout(timeout, reactor)
        try:
            tick = await ticking
        except defer.TimeoutError:
            return None
        if tick.loop is not None or not service.get(ASSISTANT).pending_events:
            return tick
    return tick


def _no_answer(tick: TickResult | None, timeout: float, real_model: bool) -> str:
    """Why Bob got no answer (empty when he got one)."""
    if tick is None:
        return f"  (no answer within {timeout:.0f} s)"
    loop = tick.loop
    if loop is None:
        return f"  Pip did not answer: her tick was {tick.status} ({tick.reason})."
    if not loop.failed:
        return ""
    reason = str(loop.termination_reason)
    if reason in MODEL_UNREACHABLE and real_model:
        from ai_tools.settings import setting

        names = ", ".join(setting(n).env for n in ("llm_url", "llm_model", "llm_api_key"))
        return f"  The model did not answer ({reason}); check {names}."
    if reason in MODEL_UNREACHABLE:
        return f"  The scripted model did not answer ({reason})."
    return f"  Pip's loop failed: {reason}" + (f" ({_short(loop.error, 160)})."
                                              if loop.error else ".")


async def _print_summary(app: StandaloneService, write: Write) -> None:
    from ai_tools.tools.records import MEMORIES

    service = app.assistants
    counters = service.counters(ASSISTANT)
    memories = await app.store.list_records(ASSISTANT, MEMORIES, 10, False)
    write("")
    write(f"Pip's memories now: {len(memories)}")
    for memory in memories:
        write(f"  - {memory['content']}")
    write(f"Counters: {counters.get('loops', 0)} loops, {counters.get('iterations', 0)} steps, "
          f"{counters.get('model_requests', 0)} model requests, {counters.get('calls', 0)} "
          f"tool calls ({counters.get('cache_hits', 0)} from the cache, "
          f"{counters.get('retries', 0)} retries, {counters.get('errors', 0)} errors).")
    path = app.config.store.path
    if path is not None:
        write(f"Everything is in {shown(path)}: try  sqlite3 {shown(path)} "
              "\"SELECT name, json_array_length(state, '$.history') FROM assistants\"")


def _start_logging(state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    log_file = open(state_dir / "demo.log", "a", encoding="utf-8")  # open until the process exits
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)
    observer = FilteringLogObserver(cast("ILogObserver", textFileLogObserver(log_file)),
                                    [cast("ILogFilterPredicate", predicate)])
    globalLogBeginner.beginLoggingTo([cast("ILogObserver", observer)],
                                     redirectStandardIO=False)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ai_tools.standalone.demo [--state-dir DIR] [--timeout SECONDS]``."""
    parser = argparse.ArgumentParser(prog="python -m ai_tools.standalone.demo",
                                     description="Run the ai_tools demo (see README.md).")
    parser.add_argument("--state-dir", default=str(ROOT / "var"),
                        help="where the demo's SQLite file and log go (default: var/)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds one exchange may take")
    args = parser.parse_args(argv)
    if not (EXAMPLES / "assistant.toml").is_file():
        print("demo: examples/assistant.toml not found; run the demo from a source checkout",
              file=sys.stderr)
        return 2
    state_dir = Path(args.state_dir)
    _start_logging(state_dir)
    status: list[int] = []

    def write(line: str) -> None:
        print(line, flush=True)

    def failed(failure: Failure) -> None:
        write(f"demo: failed: {failure.getErrorMessage() or repr(failure.value)} "
              f"(details in {state_dir / 'demo.log'})")
        log.failure("The demo failed", failure)
        status.append(1)

    def run(reactor: IReactorTime) -> defer.Deferred[None]:
        d = run_demo(reactor, write, state_dir=state_dir, environ=os.environ,
                     timeout=args.timeout)
        return d.addCallbacks(status.append, failed)

    try:
        task.react(run)
    except SystemExit as exc:
        if exc.code not in (0, None):
            return int(exc.code) if isinstance(exc.code, int) else 1
    return status[0] if status else 1


if __name__ == "__main__":
    sys.exit(main())
