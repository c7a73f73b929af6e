"""Validation cost: our staged validation next to a bare precompiled jsonschema validator.

``make bench BENCH=validation``.  One tool with a 6-property schema; each figure
is the median over several interleaved batches of the CPU time per call, in
microseconds; the ratio is the median of the per-batch ratios.
Target: validating a good call costs at most 2x calling the precompiled
jsonschema validator directly.

A last line measures what the compiled "valid as is" check of
``ai_tools/tools/fast_schema.py`` (the first step of ``ParameterValidator.validate``)
buys: the good call validated by the same tool with and without it (a schema that
names its ``$schema`` draft gets no compiled check).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, ClassVar

import jsonschema

from ai_tools.tools import Actor, Tool, ToolCategory, compile_validator

TARGET_RATIO = 2.0
BATCHES = 21
CALLS_PER_BATCH = 400


class CreateObject(Tool):
    """A realistic 6-parameter tool."""

    name = "create_object"
    description = "Create an object in a room."
    category = ToolCategory.DANGEROUS
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "key": {"type": "string", "minLength": 1, "maxLength": 80},
            "location": {"type": "string", "pattern": "^[a-z]+:[a-z0-9_]+$"},
            "count": {"type": "integer", "minimum": 1, "maximum": 100},
            "weight": {"type": "number", "exclusiveMinimum": 0},
            "portable": {"type": "boolean"},
            "kind": {"type": "string", "enum": ["item", "container", "scenery"]},
        },
        "required": ["key", "location"],
    }

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True}


GOOD = {"key": "lantern", "location": "room:hall", "count": 2, "weight": 1.5,
        "portable": True, "kind": "item"}
COERCED = {"key": "lantern", "location": "room:hall", "count": "2", "weight": "1.5",
           "portable": "true", "kind": "item"}
BAD = {"key": "", "location": "Hall", "count": "2.5", "weight": 0, "portable": "yes",
       "kind": "thing", "colour": "red"}


def per_call_us(call: Callable[[], Any]) -> float:
    """CPU time per call over one batch, in microseconds.

    CPU time of this process: other processes on a shared machine then disturb
    the figures less than they disturb wall-clock time.
    """
    started = time.process_time()
    for _ in range(CALLS_PER_BATCH):
        call()
    return (time.process_time() - started) / CALLS_PER_BATCH * 1e6


def side_by_side(ours: Callable[[], Any], bare: Callable[[], Any]) -> tuple[float, float, float]:
    """Medians of ours and bare, and the median ratio, from interleaved batches.

    Interleaving keeps the ratio honest on a busy machine: both sides see the
    same load.
    """
    for _ in range(100):
        ours()
        bare()
    ours_times, bare_times, ratios = [], [], []
    for _ in range(BATCHES):
        o, b = per_call_us(ours), per_call_us(bare)
        ours_times.append(o)
        bare_times.append(b)
        ratios.append(o / b)
    return (statistics.median(ours_times), statistics.median(bare_times),
            statistics.median(ratios))


def main() -> None:
    tool = CreateObject()
    bare = jsonschema.validators.validator_for(CreateObject.parameters)(CreateObject.parameters)
    assert tool.validate_parameters(GOOD).valid and bare.is_valid(GOOD)
    assert tool.validate_parameters(COERCED).valid and not bare.is_valid(COERCED)
    assert not tool.validate_parameters(BAD).valid

    good = side_by_side(lambda: tool.validate_parameters(GOOD), lambda: bare.validate(GOOD))
    drafted = compile_validator({"$schema": "https://json-schema.org/draft/2020-12/schema",
                                 **CreateObject.parameters})
    assert drafted.validate(GOOD).valid
    compiled = side_by_side(lambda: tool.validate_parameters(GOOD),
                            lambda: drafted.validate(GOOD))
    coerced = side_by_side(lambda: tool.validate_parameters(COERCED),
                           lambda: bare.validate(GOOD))
    bad = side_by_side(lambda: tool.validate_parameters(BAD),
                       lambda: list(bare.iter_errors(BAD)))
    print(f"{'case':<46}{'ours us':>10}{'bare us':>10}{'ratio':>8}")
    for label, (ours_us, bare_us, ratio) in (
        ("good call vs bare .validate()", good),
        ("coerced call vs bare .validate() of good", coerced),
        ("bad call (6 errors) vs bare list(iter_errors)", bad),
    ):
        print(f"{label:<46}{ours_us:10.1f}{bare_us:10.1f}{ratio:7.2f}x")
    print(f"{'good call, compiled check vs without it':<46}{compiled[0]:10.1f}"
          f"{compiled[1]:10.1f}{compiled[2]:7.2f}x")
    verdict = "within target" if good[2] <= TARGET_RATIO else "ABOVE TARGET"
    print(f"good call ratio {good[2]:.2f}x, target <= {TARGET_RATIO:.1f}x: {verdict}")


if __name__ == "__main__":
    main()
