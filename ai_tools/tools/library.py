"""The default tool library: every tool class ``register_default_tools()`` registers.

Each domain module lists its tools in a module-level ``TOOLS`` tuple; add the
module here when it lands.
"""

from __future__ import annotations

from ai_tools.tools.base import Tool

DEFAULT_TOOLS: tuple[type[Tool], ...] = ()
