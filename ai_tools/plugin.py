"""Options and service factory behind ``twistd ai-assistant`` (provisional)."""

from __future__ import annotations

from twisted.application.service import MultiService
from twisted.python import usage


class Options(usage.Options):
    """Command-line options of ``twistd ai-assistant``."""

    optParameters = [
        ["config", "c", None, "Path of the assistant.toml configuration file."],
    ]


def makeService(options: Options) -> MultiService:
    """Build the service tree from the options."""
    return MultiService()
