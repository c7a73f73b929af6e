"""The real ``twistd -n ai-assistant`` process: HTTP API, SSE, SIGTERM, restart, bad configs.

The model is the scripted server of :mod:`ai_tools.testing`, run in the test
process on 127.0.0.1 and named with ``--llm-url``/``--llm-model`` (or the
config's ``scenario``), so nothing leaves the machine.  The process helpers
are in :mod:`tests.integration.twistd_process`.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import treq
from twisted.web import resource, server

from ai_tools.testing import Rule, Script, Turn, start_test_server
from tests.integration.twistd_process import (
    LOCAL_MODEL,
    ROOT,
    SCENARIO_MODEL,
    TWISTD,
    WAIT,
    Twistd,
    assert_one_line_failure,
    assert_stopped_by,
    clean_environment,
    get_json,
    http,
    port_is_closed,
    post_json,
    processes,
    reactor,
    read_db,
    sleep,
    sse_events,
    start_and_wait,
    until,
    write_config,
    write_scenario,
)

__all__ = ["http", "processes"]  # fixtures

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")


def call(tool: str, /, **arguments: Any) -> Turn:
    return Turn(tool_calls=[{"name": tool, "arguments": arguments}])


SCRIPT = Script(
    rules=(
        Rule(match="mussel", turns=(
            Turn(text="Bob wants the slate changed; let me look first.",
                 tool_calls=[{"name": "inspect_location", "arguments": {}}]),
            call("set_attribute", object="slate", name="soup", value="mussel stew"),
        )),
        Rule(match="what soup", turns=(
            call("get_attributes", object="slate", names=["soup"]),
            call("say", message="It is mussel stew tonight, Bob."),
        )),
    ),
    default=call("noop", reason="nothing to do"),
)


# -- the lifecycle ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_serve_stop_and_restart_with_state_intact(tmp_path: Path, processes: Any,
                                                        http: Any) -> None:
    server = await start_test_server(SCRIPT, reactor=reactor())
    try:
        config = write_config(tmp_path)
        overrides = ("--llm-url", server.url, "--llm-model", server.model_name)
        proc, base = await start_and_wait(processes, tmp_path, config, *overrides)
        port = int(base.rsplit(":", 1)[1])
        assert (tmp_path / "twistd.pid").exists()

        status = await get_json(http, f"{base}/assistants")
        assert "pip" in json.dumps(status)

        # the event stream, open before the player speaks
        stream = bytearray()
        response = await http.get(f"{base}/events?assistant=pip", unbuffered=True)
        assert response.code == 200
        collected = treq.collect(response, stream.extend)
        collected.addErrback(lambda _: None)  # the server closes it on SIGTERM

        said = await post_json(http, f"{base}/messages", {
            "character": "char:bob", "kind": "say",
            "text": "Pip, put mussel stew on the slate tonight, please."})
        assert "char:pip" in said["heard_by"]

        await until(lambda: any(k == "termination" for k, _ in sse_events(bytes(stream))),
                    "the loop's termination on the event stream")
        events = sse_events(bytes(stream))
        kinds = [k for k, _ in events]
        assert "world_message" in kinds and "iteration" in kinds
        calls = [d["tool"] for k, d in events if k == "tool_call"]
        assert calls == ["inspect_location", "set_attribute"]
        results = [d for k, d in events if k == "tool_result"]
        assert [r["success"] for r in results] == [True, True]
        assert all(isinstance(r["duration_ms"], int | float) and r["from_cache"] is False
                   for r in results)
        (termination,) = [d for k, d in events if k == "termination"]
        assert termination["reason"] == "dangerous_tool"

        history = await get_json(http, f"{base}/assistants/pip/history?limit=100")
        saved_total = history["total"]
        assert "mussel stew" in json.dumps(history["messages"])

        # SIGTERM: a clean shutdown
        proc.signal("TERM")
        await proc.wait_ended()
        assert_stopped_by(proc, signal.SIGTERM)
        assert port_is_closed(port)
        assert not (tmp_path / "twistd.pid").exists()
        await collected  # the event stream was closed, not left hanging
        integrity, state, slate = read_db(tmp_path / "state" / "assistants.sqlite")
        assert integrity == "ok"
        assert len(state["history"]) == saved_total
        assert slate["attributes"]["soup"] == "mussel stew"

        # the same file again: history and world as they were
        requests_before = len(server.requests)
        proc, base = await start_and_wait(processes, tmp_path, config, *overrides)
        assert "Assistant pip added (restored)" in proc.stdout
        history = await get_json(http, f"{base}/assistants/pip/history?limit=1000")
        assert history["total"] == saved_total
        await post_json(http, f"{base}/messages", {
            "character": "char:bob", "text": "Pip, what soup is on the slate?"})

        async def pip_answered() -> list[dict[str, Any]]:
            heard = await get_json(http, f"{base}/characters/char:bob/heard")
            return [m for m in heard["messages"] if m["sender_id"] == "char:pip"]

        answered: list[dict[str, Any]] = []
        for _ in range(int(WAIT / 0.1)):
            answered = await pip_answered()
            if answered:
                break
            await sleep(0.1)
        assert [m["text"] for m in answered] == ["It is mussel stew tonight, Bob."]
        # the restarted process read the changed world: the model saw the stew
        seen = json.dumps([r.messages for r in server.requests[requests_before:]])
        assert "mussel stew" in seen

        proc.signal("TERM")
        await proc.wait_ended()
        assert_stopped_by(proc, signal.SIGTERM)
        integrity, state, _ = read_db(tmp_path / "state" / "assistants.sqlite")
        assert integrity == "ok" and len(state["history"]) > saved_total
    finally:
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_scripted_scenario_model_from_the_config(tmp_path: Path, processes: Any,
                                                       http: Any) -> None:
    """No model server at all: the config's scenario starts the scripted model in-process."""
    write_scenario(tmp_path, '[[rules]]\nmatch = "hello"\n[[rules.turns]]\n'
                   'tool_calls = [{ name = "say", arguments = { message = "Hello Bob!" } }]\n'
                   '[default]\ntool_calls = [{ name = "noop", arguments = {} }]\n')
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    proc, base = await start_and_wait(processes, tmp_path, config)
    assert "the scripted stand-in model" in proc.stdout
    await post_json(http, f"{base}/messages", {"character": "char:bob", "text": "hello Pip"})

    async def answered() -> bool:
        heard = await get_json(http, f"{base}/characters/char:bob/heard")
        return any(m["text"] == "Hello Bob!" for m in heard["messages"])

    for _ in range(int(WAIT / 0.1)):
        if await answered():
            break
        await sleep(0.1)
    assert await answered()
    proc.signal("INT")  # Ctrl-C, as under `make run`
    await proc.wait_ended()
    assert_stopped_by(proc, signal.SIGINT)


@pytest_twisted.ensureDeferred
async def test_manhole_listens_on_loopback_with_a_private_host_key(tmp_path: Path,
                                                                   processes: Any) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    (tmp_path / "authorized_keys").write_bytes(key + b" test@example\n")
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL,
                          extra='[manhole]\nenabled = true\nlisten = "127.0.0.1:0"\n'
                                'authorized_keys = "authorized_keys"')
    proc, _ = await start_and_wait(processes, tmp_path, config)
    match = await proc.wait_for(r"manhole listening on (\S+):(\d+)")
    assert match.group(1) == "127.0.0.1"
    host_key = tmp_path / "state" / "manhole_host_key"
    assert stat.S_IMODE(host_key.stat().st_mode) == 0o600
    with socket.create_connection(("127.0.0.1", int(match.group(2))), timeout=10) as sock:
        assert sock.recv(64).startswith(b"SSH-2.0-")  # SSH, never a telnet prompt
    proc.signal("TERM")
    await proc.wait_ended()
    assert_stopped_by(proc, signal.SIGTERM)


class SilentModel(resource.Resource):
    """A model server that takes requests and never answers them."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def render(self, request: Any) -> Any:
        self.requests += 1
        return server.NOT_DONE_YET


@pytest_twisted.ensureDeferred
async def test_sigterm_with_ticks_in_flight_logs_no_critical_traceback(
        tmp_path: Path, processes: Any, http: Any) -> None:
    """A clean SIGTERM while a tick waits for the model: the stop cancels it after
    ``stop_grace`` and says so, with no CRITICAL line and no CancelledError traceback."""
    model = SilentModel()
    port = reactor().listenTCP(0, server.Site(model), interface="127.0.0.1")
    try:
        models = (f'[models.local]\nbase_url = "http://127.0.0.1:{port.getHost().port}/v1"\n'
                  'model = "m"\ncontext_window = 32768')
        config = write_config(tmp_path, models=models, service="stop_grace = 0.5")
        proc, base = await start_and_wait(processes, tmp_path, config)
        await post_json(http, f"{base}/messages", {"character": "char:bob", "text": "hello?"})
        await until(lambda: model.requests, "the model request in flight")
        proc.signal("TERM")
        await proc.wait_ended()
    finally:
        await port.stopListening()
    assert_stopped_by(proc, signal.SIGTERM)
    assert "#critical]" not in proc.stdout, proc.stdout
    assert "CancelledError" not in proc.stdout, proc.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed here")
@pytest_twisted.ensureDeferred
async def test_make_run_reads_the_variables_and_takes_ctrl_c_as_a_clean_stop(
        tmp_path: Path, http: Any) -> None:
    """``make run`` in a terminal with only ``AI_TOOLS_…`` variables (on make's command line
    and in its environment): twistd reaches the model server they name and Pip answers;
    Ctrl-C typed: twistd stops cleanly and ends by SIGINT, and make reports no error
    ("make: *** [...] Interrupt" or "Error 130")."""
    server = await start_test_server(SCRIPT, reactor=reactor())
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    venv = Path(sys.executable).parents[1]
    make = str(shutil.which("make"))
    # -o: the virtualenv counts as installed (the tests run in it), so make installs nothing.
    args = [make, "-s", "-C", str(ROOT), "-o", f"{venv}/.installed", "run", f"VENV={venv}",
            f"AI_TOOLS_CONFIG={config}"]
    env = {**clean_environment(), "AI_TOOLS_LLM_URL": server.url,
           "AI_TOOLS_LLM_MODEL": server.model_name, "AI_TOOLS_HTTP": "127.0.0.1:0"}
    proc = Twistd(tmp_path, args)
    reactor().spawnProcess(proc, make, args, env=env, path=str(tmp_path),
                           usePTY=True)  # a terminal of its own: Ctrl-C reaches its group
    try:
        match = await proc.wait_for(r"HTTP API listening on http://(127\.0\.0\.1:\d+)/")
        await proc.wait_for(r"ai_tools service ready")
        assert f"Model profile default: {server.model_name} at {server.url}" in proc.stdout
        await post_json(http, f"http://{match.group(1)}/messages", {
            "character": "char:bob", "text": "Pip, what soup is it tonight?"})
        await until(lambda: server.requests, "the model server to be asked")
        proc.transport.write(b"\x03")  # Ctrl-C: the terminal sends SIGINT to the group
        await proc.wait_ended()
    finally:
        proc.signal("KILL")
        await server.stop()
    assert "ai_tools service stopped" in proc.stdout, proc.stdout
    assert "make: ***" not in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stdout
    # make itself got the SIGINT too: it waits for its job, then ends by that signal quietly
    assert proc.exit_code in (0, None) and proc.exit_signal in (None, signal.SIGINT)


# -- mistakes: one line on stderr, a non-zero exit, nothing left behind --------------------------




@pytest.mark.parametrize(("change", "fragments"), [
    ({"assistant": "tick_rat = 2"}, ("assistants.pip: unknown key 'tick_rat'",
                                     "did you mean 'tick_rate'?")),
    ({"assistant": 'tick_rate = "fast"'},
     ("assistants.pip.tick_rate must be a positive number, not 'fast'",)),
    ({"assistant": 'model = "gpt"'}, ("assistants.pip.model: unknown model profile 'gpt' "
                                      "(declared: local)",)),
    ({"assistant": '[assistants.execution_config.contexts.conversation]\n'
                   'allowed_tools = ["say", "fly"]'},
     ("assistants.pip.execution_config.contexts.conversation.allowed_tools: unknown tool "
      "'fly'",)),
    ({"world": "no/such/world.toml"}, ("world.file: file not found",)),
    ({"http_listen": "0.0.0.0:0"}, ("http.listen: the HTTP API listens beyond this machine",)),
    ({"extra": "[colour]\nblue = 1"}, ("unknown key 'colour'",)),
])
@pytest_twisted.ensureDeferred
async def test_bad_config_stops_twistd_with_one_line(tmp_path: Path, processes: Any,
                                                     change: dict[str, str],
                                                     fragments: tuple[str, ...]) -> None:
    config = write_config(tmp_path, None, models=LOCAL_MODEL, **change)
    proc = processes(tmp_path, config)
    await proc.wait_ended()
    assert_one_line_failure(proc, str(config), *fragments)
    assert not (tmp_path / "state").exists()  # nothing was created


@pytest_twisted.ensureDeferred
async def test_missing_config_file(tmp_path: Path, processes: Any) -> None:
    proc = processes(tmp_path, tmp_path / "nope.toml")
    await proc.wait_ended()
    assert_one_line_failure(proc, "nope.toml: config file not found")


@pytest_twisted.ensureDeferred
async def test_bad_override_on_the_command_line(tmp_path: Path, processes: Any) -> None:
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    proc = processes(tmp_path, config, "--llm-url", "http://127.0.0.1:9/v1")
    await proc.wait_ended()
    assert_one_line_failure(proc, "models.default: 'model' is required (with --llm-url, set "
                                  "--llm-model or AI_TOOLS_LLM_MODEL too)")


@pytest_twisted.ensureDeferred
async def test_port_in_use_fails_start_up_cleanly(tmp_path: Path, processes: Any) -> None:
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = processes(tmp_path, config, "--http", str(port))
        await proc.wait_ended()
    assert_one_line_failure(proc, f"cannot listen on port {port} of 127.0.0.1")
    assert not (tmp_path / "state").exists()  # found before anything started


@pytest_twisted.ensureDeferred
async def test_a_file_that_is_not_a_database(tmp_path: Path, processes: Any) -> None:
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "assistants.sqlite").write_bytes(b"not a database " * 100)
    proc = processes(tmp_path, config)
    await proc.wait_ended()
    assert_one_line_failure(proc, "cannot open the store", "file is not a database")

