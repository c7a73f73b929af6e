"""``GET /metrics``: the service's figures in the Prometheus text format (version 0.0.4).

:class:`Metrics` observes the service's events from the moment the API
starts — ``tick`` (ticks by status and reason), ``tool_result`` (tool calls
by tool and status), ``model_request`` (requests, latency and tokens by
model profile; refusals by an open breaker apart; the wait in the model
client's queue apart) — and the state writer's batches (store write latency
and failures).  Gauges are read when scraped: pending events per assistant,
each profile's model server (its breaker, slots, requests out and waiting),
the assistants whose model a breaker refuses, assistants, ticks in flight,
event streams.
Counters start at zero when the process starts, as Prometheus expects.

Every label value comes from this service's own configuration or code (a
tool the model named that is not registered counts as ``tool="unknown"``),
so the number of series stays bounded whatever the model or clients send.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ai_tools.interfaces import IModelServerClient

if TYPE_CHECKING:
    from ai_tools.service.service import AssistantService

__all__ = ["CONTENT_TYPE", "Histogram", "Metrics"]

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

MODEL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
QUEUE_BUCKETS = (0.0, 0.1, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0)
"""Model request latency buckets, seconds (a local model's answer takes seconds)."""
STORE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
"""Store write (one grouped transaction) buckets, seconds."""
BREAKER_STATES = ("closed", "open", "half_open")

Labels = tuple[tuple[str, str], ...]
_LE_INF = 'le="+Inf"'


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels, extra: str = "") -> str:
    parts = [f'{k}="{_escape(v)}"' for k, v in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _seconds(milliseconds: object) -> float | None:
    """A ``…_ms`` event field in seconds (None when it is not a number)."""
    if isinstance(milliseconds, int | float) and not isinstance(milliseconds, bool):
        return max(0.0, milliseconds / 1000.0)
    return None


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class Histogram:
    """Cumulative bucket counts, sum and count of observations, per label set."""

    def __init__(self, buckets: Sequence[float], always: Sequence[Labels] = ()) -> None:
        self.buckets = tuple(buckets)
        self._series: dict[Labels, list[float]] = {}
        for labels in always:  # shown at zero before the first observation
            self._series[labels] = self._empty()

    def _empty(self) -> list[float]:
        return [0.0] * (len(self.buckets) + 2)  # one count per bucket, then +Inf, sum

    def observe(self, labels: Labels, value: float) -> None:
        """Count ``value`` (seconds) under ``labels``."""
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = self._empty()
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                series[i] += 1
        series[-2] += 1
        series[-1] += value

    def lines(self, name: str) -> Iterable[str]:
        """The ``_bucket``, ``_sum`` and ``_count`` samples."""
        for labels, series in sorted(self._series.items()):
            for bound, count in zip(self.buckets, series, strict=False):
                le = 'le="' + _number(bound) + '"'
                yield f"{name}_bucket{_labels(labels, le)} {_number(count)}"
            yield f"{name}_bucket{_labels(labels, _LE_INF)} {_number(series[-2])}"
            yield f"{name}_sum{_labels(labels)} {_number(series[-1])}"
            yield f"{name}_count{_labels(labels)} {_number(series[-2])}"


class Metrics:
    """The figures of one ``AssistantService`` (see the module); ``streams()`` counts the
    open event streams."""

    def __init__(self, service: AssistantService, streams: Callable[[], int] = lambda: 0) -> None:
        self.service = service
        self.streams = streams
        self.ticks: Counter[Labels] = Counter()
        self.tool_calls: Counter[Labels] = Counter()
        self.model_requests: Counter[Labels] = Counter()
        self.model_refusals: Counter[Labels] = Counter()
        self.queue_seconds = Histogram(QUEUE_BUCKETS)
        self.model_attempts: Counter[Labels] = Counter()
        self.model_tokens: Counter[Labels] = Counter()
        self.model_seconds = Histogram(MODEL_BUCKETS)
        self.store_seconds = Histogram(STORE_BUCKETS, always=((),))
        self._undo: list[Callable[[], object]] = []

    def start(self) -> None:
        """Observe the service's events and its state writes."""
        if self._undo:
            return
        self._undo.append(self.service.add_observer(self.observe))
        observers = self.service.writer.write_observers
        observers.append(self.store_write)
        self._undo.append(lambda: observers.remove(self.store_write))

    def stop(self) -> None:
        """Stop observing."""
        undo, self._undo = self._undo, []
        for fn in undo:
            fn()

    # -- what happens ------------------------------------------------------------------

    def observe(self, event: Mapping[str, Any]) -> None:
        """Count one service event (the other types are not counted)."""
        kind = event.get("type")
        if kind == "tick":
            self.ticks[(("status", str(event.get("status"))),
                        ("reason", str(event.get("reason"))))] += 1
        elif kind == "tool_result":
            tool = str(event.get("tool"))
            if tool not in self.service.registry:
                tool = "unknown"
            self.tool_calls[(("tool", tool), ("status", str(event.get("status"))))] += 1
        elif kind == "model_request":
            self._model_request(event)

    def _model_request(self, event: Mapping[str, Any]) -> None:
        """A request sent counts as a request, its time at the server in the latency
        histogram and its time in the client's queue in the queue's; one that sent
        nothing (a breaker refused it, or it was cancelled in the queue) is a refusal
        or a cancellation only."""
        profile = self._profile(event)
        labels: Labels = (("profile", profile),)
        attempts = event.get("attempts", 1)  # (events of older versions have none)
        if not isinstance(attempts, int) or isinstance(attempts, bool):
            attempts = 0
        sent = attempts > 0
        status = str(event.get("status"))
        if not sent and status == "llm_unavailable":
            self.model_refusals[labels] += 1
            return
        self.model_requests[(("profile", profile), ("status", status))] += 1
        queued = _seconds(event.get("queued_ms"))
        if queued is not None and (sent or queued > 0):
            self.queue_seconds.observe(labels, queued)
        if sent:
            self.model_attempts[labels] += attempts
            latency = _seconds(event.get("latency_ms"))
            if latency is not None:
                self.model_seconds.observe(labels, max(0.0, latency - (queued or 0.0)))
        for kind in ("prompt", "completion"):
            tokens = event.get(f"{kind}_tokens")
            if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
                self.model_tokens[(("profile", profile), ("kind", kind))] += tokens

    def _profile(self, event: Mapping[str, Any]) -> str:
        """The model profile's name: the assistant's ``model`` (the service's names only)."""
        name = event.get("assistant")
        if isinstance(name, str) and name in self.service:
            return str(self.service.get(name).config.model)
        profile = event.get("profile")
        return profile if isinstance(profile, str) and profile in self.service.llms else "unknown"

    def store_write(self, seconds: float, failed: bool) -> None:
        """One state write (a grouped transaction) took ``seconds``."""
        self.store_seconds.observe((), max(0.0, seconds))

    # -- the page ------------------------------------------------------------------------

    def render(self) -> bytes:
        """The whole text exposition."""
        lines: list[str] = []
        self._counter(lines, "ai_tools_ticks_total", "Ticks that ended, by status and reason.",
                      self.ticks)
        self._counter(lines, "ai_tools_tool_calls_total", "Tool calls that ended, by tool "
                      "and status.", self.tool_calls)
        self._counter(lines, "ai_tools_model_requests_total", "Model requests (a client's "
                      "retries inside one), by profile and status.", self.model_requests)
        self._counter(lines, "ai_tools_model_refusals_total", "Model requests an open "
                      "circuit breaker refused (nothing sent), by profile.",
                      self.model_refusals)
        self._counter(lines, "ai_tools_model_http_requests_total", "HTTP requests sent to "
                      "the model servers (every attempt, retries included), by profile.",
                      self.model_attempts)
        self._counter(lines, "ai_tools_model_tokens_total", "Tokens the model servers "
                      "counted, by profile and kind (prompt, completion).", self.model_tokens)
        self._histogram(lines, "ai_tools_model_request_seconds", "Model request latency "
                        "at the server (requests sent; the queue's wait left out).",
                        self.model_seconds)
        self._histogram(lines, "ai_tools_model_queue_seconds", "Time model requests "
                        "waited in the client's queue for a slot of the model server.",
                        self.queue_seconds)
        self._histogram(lines, "ai_tools_store_write_seconds", "Assistant state writes (one "
                        "grouped transaction each).", self.store_seconds)
        self._gauges(lines)
        return ("\n".join(lines) + "\n").encode("utf-8")

    @staticmethod
    def _head(lines: list[str], name: str, help_text: str, kind: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    def _counter(self, lines: list[str], name: str, help_text: str,
                 counts: Mapping[Labels, float]) -> None:
        self._head(lines, name, help_text, "counter")
        lines.extend(f"{name}{_labels(labels)} {_number(value)}"
                     for labels, value in sorted(counts.items()))

    def _histogram(self, lines: list[str], name: str, help_text: str,
                   histogram: Histogram) -> None:
        self._head(lines, name, help_text, "histogram")
        lines.extend(histogram.lines(name))

    def _gauges(self, lines: list[str]) -> None:
        service = self.service
        writer = service.writer
        self._counter(lines, "ai_tools_store_write_failures_total", "Assistant states that "
                      "could not be written.", {(): writer.failures})
        self._counter(lines, "ai_tools_store_transactions_total", "State write transactions.",
                      {(): writer.transactions})
        self._head(lines, "ai_tools_pending_events", "Events waiting for each assistant.",
                   "gauge")
        for name, assistant in sorted(service.assistants.items()):
            lines.append(f"ai_tools_pending_events{_labels((('assistant', name),))} "
                         f"{len(assistant.pending_events)}")
        self._head(lines, "ai_tools_model_breaker_state", "The circuit breaker of each model "
                   "profile: 1 for the state it is in.", "gauge")
        for profile, client in sorted(service.llms.items()):
            lines.extend(self._breaker(profile, client))
        self._model_servers(lines, service)
        stats = service.stats()
        for name, help_text, value in (
                ("ai_tools_assistants", "Assistants hosted.", stats["assistants"]),
                ("ai_tools_ticks_in_flight", "Ticks running now.", stats["ticks_in_flight"]),
                ("ai_tools_event_streams", "Open GET /events streams.", self.streams())):
            self._head(lines, name, help_text, "gauge")
            lines.append(f"{name} {_number(value if isinstance(value, int | float) else 0)}")

    @staticmethod
    def _model_servers(lines: list[str], service: AssistantService) -> None:
        """The slots and the queue of each profile's model server, and the assistants
        whose model a breaker refuses (their ticks wait)."""
        statuses = {profile: client.status() for profile, client in sorted(service.llms.items())
                    if IModelServerClient.providedBy(client)}
        for name, key, help_text in (
                ("ai_tools_model_slots", "slots", "Requests each profile's model server "
                 "serves at once (learned or configured)."),
                ("ai_tools_model_in_flight", "in_flight", "Requests out at each profile's "
                 "model server."),
                ("ai_tools_model_queue_waiting", "waiting", "Requests waiting in the "
                 "client's queue for a slot of each profile's model server.")):
            Metrics._head(lines, name, help_text, "gauge")
            lines.extend(f"{name}{_labels((('profile', profile),))} {_number(status[key])}"
                         for profile, status in statuses.items())
        Metrics._head(lines, "ai_tools_assistant_model_refused", "1 while a breaker refuses "
                      "the assistant's model (its ticks wait).", "gauge")
        lines.extend(f"ai_tools_assistant_model_refused{_labels((('assistant', name),))} "
                     f"{int(bool(getattr(assistant, 'model_refused', False)))}"
                     for name, assistant in sorted(service.assistants.items()))

    @staticmethod
    def _breaker(profile: str, client: object) -> Iterable[str]:
        server = getattr(client, "server", None)
        breaker = getattr(server, "breaker", None) or getattr(client, "breaker", None)
        state = getattr(getattr(breaker, "state", None), "value", None)
        if state is None:
            return
        for candidate in BREAKER_STATES:
            labels = (("profile", profile), ("state", candidate))
            yield f"ai_tools_model_breaker_state{_labels(labels)} {int(candidate == state)}"
