"""Encoding an assistant's state to JSON after every loop iteration, cheaply.

A checkpoint after every iteration used to re-encode the whole state: the
configuration (which never changes between checkpoints) and the whole history
(which only grows by the messages of one iteration).  :class:`StateEncoder`
keeps the JSON text of the configuration and of each history message it has
already encoded and re-uses them while the very same objects are still there,
so a checkpoint encodes only the new messages and the small fields.

The text is the JSON object :func:`~ai_tools.store.serialization.check_state`
would produce for the state dict (keys in another order), so the stored
format does not change.
It relies on the rule of ``ConversationHistory``: messages are never modified
in place (a change replaces the message object), and the configuration dict
handed over is replaced, never modified, when the configuration changes.

:class:`EncodedState` is that text, readable as a mapping: stores that keep
JSON text (``check_state``) take the text instead of encoding a dict again,
stores that keep dicts read it as a mapping.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence

from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.store.serialization import encode_json

__all__ = ["EncodedState", "StateEncoder"]

_WHAT = "assistant state"


class EncodedState(Mapping[str, JSONValue]):
    """A state as JSON text (``json_text``), readable as a mapping (decoded on first use).

    Stores that keep JSON text take ``json_text`` as it is; stores that keep
    dicts read it like any mapping and get their own decoded copy.  One small
    object per state: a thousand of them wait for a group write at once.
    """

    __slots__ = ("_decoded", "json_text")

    def __init__(self, json_text: str) -> None:
        self.json_text = json_text
        self._decoded: JSONObject | None = None

    def _state(self) -> JSONObject:
        if self._decoded is None:
            self._decoded = json.loads(self.json_text)
        return self._decoded

    def __getitem__(self, key: str) -> JSONValue:
        return self._state()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._state())

    def __len__(self) -> int:
        return len(self._state())

    def __repr__(self) -> str:
        return f"<EncodedState {len(self.json_text)} chars>"


class StateEncoder:
    """Encodes successive states of one assistant, re-using unchanged parts.

    ``config`` is re-used while it is the same object; ``history`` message by
    message while the messages are the same objects in the same places.
    """

    __slots__ = ("_config", "_config_json", "_messages", "_parts", "_replaced")

    def __init__(self) -> None:
        self._replaced: dict[str, tuple[object, str]] = {}
        self._config: object = None
        self._config_json = ""
        self._messages: list[object] = []
        self._parts: list[str] = []

    def encode(self, state: JSONMapping) -> EncodedState:
        """The state with its JSON text; TypeError/ValueError if it is not JSON-serialisable."""
        rest = dict(state)
        config = rest.pop("config") if rest.get("config") is not None else None
        history = rest.pop("history") if rest.get("history") is not None else None
        return EncodedState(self.encode_parts(config, history, rest))

    def encode_parts(
        self,
        config: object,
        history: object,
        rest: JSONMapping,
        replaced: JSONMapping | None = None,
    ) -> str:
        """JSON text of ``{"config": config, "history": history, **rest, **replaced}``.

        ``config`` and ``history`` None leave the key out.  ``replaced`` holds
        values that are replaced, never modified (a tick summary): each is
        encoded once per object, like ``config``.  The keys of ``rest`` and
        ``replaced`` must differ and not be ``config`` or ``history``.
        TypeError/ValueError if something is not JSON-serialisable.
        """
        pieces = []
        if config is not None:
            pieces.append('"config":' + self._encode_config(config))
        if history is not None:
            pieces.append('"history":' + self._encode_history(history))
        if replaced:
            known = self._replaced
            for key, value in replaced.items():
                entry = known.get(key)
                if entry is None or entry[0] is not value:
                    entry = known[key] = (value, encode_json(key, _WHAT) + ":"
                                          + encode_json(value, _WHAT))
                pieces.append(entry[1])
        tail = encode_json(rest if isinstance(rest, dict) else dict(rest), _WHAT)
        if len(tail) > 2:
            pieces.append(tail[1:-1])
        return "{" + ",".join(pieces) + "}"

    def _encode_config(self, config: object) -> str:
        if config is not self._config:
            self._config_json = encode_json(config, _WHAT)
            self._config = config
        return self._config_json

    def _encode_history(self, history: object) -> str:
        if type(history) is not list and (
                not isinstance(history, Sequence) or isinstance(history, str)):
            return encode_json(history, _WHAT)
        known, parts = self._messages, self._parts
        same = 0
        limit = min(len(known), len(history))
        while same < limit and history[same] is known[same]:
            same += 1
        if same < len(known):
            del known[same:], parts[same:]
        for message in history[same:]:
            parts.append(encode_json(message, _WHAT))
            known.append(message)
        return "[" + ",".join(parts) + "]"
