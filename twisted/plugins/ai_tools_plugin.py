"""twistd plugin: ``twistd -n ai-assistant --config assistant.toml``.

Only a ServiceMaker lives here, so plugin discovery does not import the app.
"""

from twisted.application.service import ServiceMaker

aiAssistant = ServiceMaker(
    "ai_tools assistant service",
    "ai_tools.plugin",
    "Host LLM-driven assistants that act in a world through tools.",
    "ai-assistant",
)
