"""A scripted OpenAI-compatible model server for tests (like ``treq.testing``).

The public, test-facing names of :mod:`ai_tools.llm.scripted` (which the standalone
service also uses as its stand-in model)::

    from ai_tools.testing import Fault, Turn, start_test_server

``python -m ai_tools.testing SCENARIO [--port N]`` serves a scenario file as a
stand-in model.  See ``docs/models.md``.
"""

import sys

from ai_tools.llm.scripted import (
    DEFAULT_MODEL_NAME,
    EXHAUSTED_TEXT,
    Fault,
    RecordedRequest,
    Rule,
    Script,
    ScriptedModel,
    ScriptedModelResource,
    TestServer,
    ToolCallSpec,
    Turn,
    main,
    start_test_server,
)
from ai_tools.llm.server_kinds import SERVER_KINDS, ServerKind

__all__ = [
    "DEFAULT_MODEL_NAME",
    "EXHAUSTED_TEXT",
    "SERVER_KINDS",
    "Fault",
    "RecordedRequest",
    "Rule",
    "Script",
    "ScriptedModel",
    "ScriptedModelResource",
    "ServerKind",
    "TestServer",
    "ToolCallSpec",
    "Turn",
    "main",
    "start_test_server",
]

if __name__ == "__main__":
    sys.exit(main())
