"""twistd plugin: ``twistd -n ai-assistant --config assistant.toml``.

Only a ServiceMaker lives here, so plugin discovery does not import the app:
the options and the service come from ``ai_tools.standalone.plugin`` when the command runs.
"""

from twisted.application.service import ServiceMaker

aiAssistant = ServiceMaker(
    "ai_tools assistant service",
    "ai_tools.standalone.plugin",
    "Host LLM-driven assistants that act in a sandbox world through tools "
    "(HTTP API and SSH console on 127.0.0.1).",
    "ai-assistant",
)
