"""The API reference's build script (scripts/api_reference.py): its module list and rewrite."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import pytest

from tests.integration.docs_examples import ROOT


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_reference",
                                                  ROOT / "scripts" / "api_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


api_reference = _script()


@pytest.mark.parametrize("name", api_reference.PUBLIC_MODULES)
def test_public_modules_exist(name: str) -> None:
    """Every module the reference shows can be imported (a rename fails here, not in lint)."""
    if name.startswith("ai_tools.contrib.evennia"):  # needs Evennia: only check the file
        assert (ROOT / "ai_tools" / "contrib" / "evennia" / "__init__.py").is_file()
        return
    importlib.import_module(name)


def test_role_targets_are_written_out() -> None:
    """``~`` and package-relative targets become full names; nothing else changes."""
    text = ("See :class:`~ai_tools.tools.base.Tool`, :mod:`.engine`, :func:`run_tool_call`, "
            "``~literal``, `~plain` and :meth:`.cache.ToolCache.get`.")
    assert api_reference.write_out_targets(text, "ai_tools.execution") == (
        "See :class:`ai_tools.tools.base.Tool`, :mod:`ai_tools.execution.engine`, "
        ":func:`run_tool_call`, ``~literal``, `~plain` and "
        ":meth:`ai_tools.execution.cache.ToolCache.get`.")


def test_internal_modules_are_hidden() -> None:
    """A public package's other modules are hidden; its public ones are not."""
    hidden = api_reference._internal_children()
    assert "ai_tools.tools.validation" in hidden and "ai_tools.web" in hidden
    assert "ai_tools.tools.base" not in hidden and "ai_tools.contrib.evennia.tests" in hidden
