"""The default tool library: every tool class ``register_default_tools()`` registers.

Each domain module lists its tools in a module-level ``TOOLS`` tuple; this
module concatenates them in domain order.
"""

from __future__ import annotations

from types import ModuleType

from ai_tools.tools import (
    attributes,
    building,
    channel,
    command,
    communication,
    context,
    control,
    delegation,
    documentation,
    entity,
    goals,
    journal,
    location,
    memory,
    search,
    sleep,
    tags,
)
from ai_tools.tools.base import Tool

DOMAINS: tuple[ModuleType, ...] = (
    attributes,
    building,
    channel,
    command,
    communication,
    context,
    delegation,
    documentation,
    entity,
    goals,
    journal,
    location,
    memory,
    search,
    sleep,
    tags,
    control,
)
"""The domain modules of the library (one per kind of world action), plus the control tools."""

DEFAULT_TOOLS: tuple[type[Tool], ...] = tuple(
    tool for domain in DOMAINS for tool in domain.TOOLS
)
