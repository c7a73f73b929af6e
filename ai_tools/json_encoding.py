"""JSON encoding for hot paths: ``JSONEncoder.encode`` without its per-call set-up.

``JSONEncoder.encode`` (and so ``json.dumps``) builds a new C encoder object on
every call, which costs more than encoding a small dict.  Every tool call
encodes its arguments (canonical form) and its result, so
:func:`prebuilt_encode` builds that C encoder once.

The one difference of a prebuilt encoder is that it cannot share the
circular-reference check (its bookkeeping lives per call), so it runs without
it; a circular value then ends in ``RecursionError``, and the value is encoded
again by the original encoder, which raises the usual ``ValueError("Circular
reference detected")``.  Output and errors are those of ``encoder.encode``.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any

__all__ = ["prebuilt_encode"]

_SAMPLE: Any = {"b": [1, 2.5, -0.0, 1e300, True, None], "a": {"é": "\u2603\n\"x\""}, "": []}


def prebuilt_encode(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """A function doing what ``encoder.encode`` does, faster on containers.

    Falls back to ``encoder.encode`` itself where the C accelerator is missing
    or the encoder uses options it cannot take (indentation).
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None or encoder.indent is not None or not encoder.check_circular:
        return encoder.encode
    try:
        c_encoder = make(
            None,
            encoder.default,
            json.encoder.encode_basestring_ascii if encoder.ensure_ascii
            else json.encoder.encode_basestring,
            None,
            encoder.key_separator,
            encoder.item_separator,
            encoder.sort_keys,
            encoder.skipkeys,
            encoder.allow_nan,
        )
    except TypeError:  # a Python whose C encoder takes other arguments
        return encoder.encode
    slow = encoder.encode

    def encode(value: Any) -> str:
        if type(value) is str:
            return slow(value)
        try:
            return "".join(c_encoder(value, 0))
        except RecursionError:
            return slow(value)  # circular (the standard error) or truly too deep

    try:
        if encode(_SAMPLE) != slow(_SAMPLE):
            return slow
    except (TypeError, ValueError):  # allow_nan=False refuses nothing here; be safe anyway
        return slow
    return encode
