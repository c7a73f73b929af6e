"""ai_tools: a Twisted-native engine for LLM-driven assistants that act through tools.

Start with :class:`ai_tools.service.AssistantService` (host many assistants on
one reactor), :mod:`ai_tools.tools` (define and register tools) and
:mod:`ai_tools.testing` (a scripted OpenAI-compatible model server for tests).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
