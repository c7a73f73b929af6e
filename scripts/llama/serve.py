"""Run llama-cpp-python's OpenAI-compatible server, with keep-alives every N seconds.

Usage (inside ``.venv-llama``): ``python serve.py --ping SECONDS <server options>``.
The options after ``--ping`` are the server's own (``python -m llama_cpp.server --help``).

The server streams answers through sse-starlette, which sends a keep-alive
comment (``: ping - <time>``) every 15 seconds and has no option to change
that.  The interoperability test needs keep-alives inside streams that last
a second, so this sets sse-starlette's interval before starting the server
unchanged; the keep-alives are still written by sse-starlette's own code.
On Linux the server ends with the process that started it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """On Linux, get SIGTERM when the process that started this one ends, so a test
    run that crashed leaves no server behind (elsewhere: nothing)."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before prctl
        raise SystemExit("the process that started this server has ended")


def main() -> None:
    """Set the keep-alive interval from ``--ping``, then run the server's own main."""
    args = sys.argv[1:]
    if len(args) < 2 or args[0] != "--ping":
        raise SystemExit("usage: serve.py --ping SECONDS <llama_cpp.server options>")
    interval = float(args[1])
    die_with_parent()
    from llama_cpp.server.__main__ import main as serve
    from sse_starlette.sse import EventSourceResponse

    EventSourceResponse.DEFAULT_PING_INTERVAL = interval
    sys.argv = [sys.argv[0], *args[2:]]
    serve()


if __name__ == "__main__":
    main()
