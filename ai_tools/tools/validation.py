"""Parameter and result validation with errors a model can act on.

(Provisional: the full stages — required, safe coercion, constraints,
dependencies, the basic fallback validator — are being filled in.)
"""

from __future__ import annotations

from typing import Any

import attrs
import jsonschema


@attrs.define
class ValidationResult:
    """Outcome of validating one call's parameters."""

    valid: bool = True
    errors: list[dict[str, Any]] = attrs.field(factory=list)
    warnings: list[dict[str, Any]] = attrs.field(factory=list)
    cleaned_params: dict[str, Any] = attrs.field(factory=dict)

    def add_error(
        self, param: str, message: str, constraint: str | None = None, got: Any = None
    ) -> None:
        """Record an error (marks the result invalid)."""
        self.valid = False
        self.errors.append({"param": param, "message": message, "constraint": constraint,
                            "got": got})

    def add_warning(self, param: str, message: str) -> None:
        """Record a warning (the call still runs)."""
        self.warnings.append({"param": param, "message": message})

    def format_for_llm(self, tool_name: str) -> str:
        """Errors as text the model can read and fix."""
        lines = [f"Parameter validation failed for '{tool_name}':"]
        for e in self.errors:
            line = f"  - {e['param']}: {e['message']}"
            if e.get("constraint"):
                line += f" (expected: {e['constraint']})"
            if e.get("got") is not None:
                line += f" (got: {e['got']!r})"
            lines.append(line)
        return "\n".join(lines)


def compile_validator(schema: dict[str, Any]) -> Any:
    """Build the jsonschema validator for ``schema`` once."""
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def validate_parameters(params: Any, schema: dict[str, Any], validator: Any = None
                        ) -> ValidationResult:
    """Validate ``params`` against ``schema``; never raises."""
    result = ValidationResult()
    if not isinstance(params, dict):
        result.add_error("parameters", "Expected an object", "type: object", params)
        return result
    validator = validator or compile_validator(schema)
    for error in validator.iter_errors(params):
        path = ".".join(str(p) for p in error.absolute_path) or "parameters"
        result.add_error(path, error.message, f"{error.validator}: {error.validator_value}")
    result.cleaned_params = dict(params)
    return result


def validate_tool_result(result: Any) -> dict[str, Any]:
    """Turn whatever a tool returned into a standard result dict."""
    if result is None:
        return {"success": False, "error": "Tool returned no result (None)"}
    if not isinstance(result, dict):
        return {"success": False,
                "error": f"Tool returned {type(result).__name__}, expected a dict"}
    return result
