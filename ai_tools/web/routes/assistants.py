"""``/assistants`` and one assistant's endpoints: status, history, results, tick, stop,
enable, disable; creating, changing and removing one (:mod:`~ai_tools.web.operator`).

With workers, ``GET /assistants`` lists every worker's assistants; a request
about one another worker runs never reaches these handlers (the resource passes
it on, :mod:`~ai_tools.web.other_workers`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
from twisted.internet import defer
from twisted.web.server import Request

from ai_tools.json_types import JSONObject
from ai_tools.web.body import parse_json_body
from ai_tools.web.paging import history_page
from ai_tools.web.query import query_bool, query_int
from ai_tools.web.routes.parts import ApiParts, known_assistant
from ai_tools.web.routing import Route

if TYPE_CHECKING:
    from ai_tools.service.tick import TickResult

__all__ = ["AssistantRoutes"]


@attrs.define(eq=False)
class AssistantRoutes:
    """The assistants' endpoints over ``api``'s service and operator."""

    api: ApiParts

    def routes(self) -> list[Route]:
        """The endpoints, in the order ``GET /`` lists them."""
        return [
            Route("GET", ("assistants",), self.list_assistants, "every assistant's status"),
            Route("GET", ("assistants", "{name}"), self.assistant_status,
                  "one assistant's status"),
            Route("GET", ("assistants", "{name}", "history"), self.history,
                  "a page of ?limit= history messages (default 50; ?before=, ?after=)"),
            Route("GET", ("assistants", "{name}", "results"), self.results,
                  "the last ?limit= loop results (default 10)"),
            Route("POST", ("assistants", "{name}", "tick"), self.tick,
                  "run a tick now; answers with its result"),
            Route("POST", ("assistants", "{name}", "stop"), self.stop_assistant,
                  "kill the model call or tool in flight"),
            Route("POST", ("assistants", "{name}", "enable"), self.enable, "let it tick"),
            Route("POST", ("assistants", "{name}", "disable"), self.disable,
                  "make its ticks exit early"),
            Route("POST", ("assistants",), self.create_assistant,
                  "create an assistant (body: its configuration)"),
            Route("PATCH", ("assistants", "{name}"), self.reconfigure_assistant,
                  "change some of its configuration (body: the keys to change)"),
            Route("DELETE", ("assistants", "{name}"), self.remove_assistant,
                  "remove it (?forget=true: delete its saved state too)"),
            Route("GET", ("assistants", "{name}", "config"), self.assistant_config,
                  "its configuration"),
        ]

    def _known(self, name: str) -> str:
        return known_assistant(self.api.service, name)

    def list_assistants(
            self, request: Request) -> dict[str, object] | defer.Deferred[dict[str, object]]:
        """``GET /assistants``: with workers, every worker's (each with its ``worker``)."""
        status = self.api.service.status()
        assistants = status["assistants"]
        local = [entry for entry in assistants.values() if isinstance(entry, dict)] if (
            isinstance(assistants, dict)) else []
        others = self.api.others
        worker = others.worker()
        if worker is None:
            return {"service": status["service"], "assistants": local}
        for entry in local:
            entry["worker"] = worker
        answer: dict[str, object] = {"service": status["service"], "worker": worker,
                              "assistants": local}
        if not others.fans_out(request):
            return answer
        d = others.every_assistant(request, local)
        return d.addCallback(lambda found: {**answer, "assistants": found[0],
                                            "workers_unreachable": found[1]})

    def assistant_status(self, request: Request, name: str) -> JSONObject:
        """``GET /assistants/{name}`` (with workers, ``worker`` says which runs it)."""
        status = self.api.service.status(self._known(name))
        worker = self.api.others.worker()
        if worker is not None:
            status["worker"] = worker
        return status

    def history(self, request: Request, name: str) -> dict[str, object]:
        """``GET /assistants/{name}/history?limit=N&before=I&after=I`` (see
        :mod:`~ai_tools.web.paging`)."""
        self._known(name)
        limit = query_int(request, "limit", 50)
        before = query_int(request, "before", None, 0, 2**62)
        after = query_int(request, "after", None, 0, 2**62)
        assert limit is not None
        page = history_page(self.api.service.history(name), limit, before, after)
        return {"assistant": name, **page}

    def results(self, request: Request, name: str) -> dict[str, object]:
        """``GET /assistants/{name}/results?limit=N``."""
        self._known(name)
        limit = query_int(request, "limit", 10)
        return {
            "assistant": name,
            "last_tick": self.api.service.status(name).get("last_tick"),
            "loops": self.api.recorder.loops(name, limit),
        }

    def tick(self, request: Request, name: str) -> defer.Deferred[dict[str, object]]:
        """``POST /assistants/{name}/tick``: fires when the tick ends."""
        self._known(name)
        d: defer.Deferred[TickResult] = self.api.service.run_tick(name)
        return d.addCallback(lambda result: result.as_dict())

    def stop_assistant(self, request: Request, name: str) -> dict[str, object]:
        """``POST /assistants/{name}/stop``: kill the model call or tool in flight."""
        self._known(name)
        stopped = self.api.service.stop_assistant(name, "stopped through the HTTP API")
        return {"assistant": name, "stopped": stopped}

    def enable(self, request: Request, name: str) -> defer.Deferred[dict[str, object]]:
        """``POST /assistants/{name}/enable``."""
        self._known(name)
        d = self.api.service.enable(name)
        return d.addCallback(lambda _: {"assistant": name, "enabled": True})

    def disable(self, request: Request, name: str) -> defer.Deferred[dict[str, object]]:
        """``POST /assistants/{name}/disable``."""
        self._known(name)
        d = self.api.service.disable(name)
        return d.addCallback(lambda _: {"assistant": name, "enabled": False})

    def create_assistant(self, request: Request) -> defer.Deferred[object]:
        """``POST /assistants``: 201 once it is added and saved."""
        return self.api.operator.create(parse_json_body(request, self.api.max_body))

    def reconfigure_assistant(self, request: Request, name: str) -> defer.Deferred[object]:
        """``PATCH /assistants/{name}``: answers once the new configuration is saved."""
        self._known(name)
        return self.api.operator.reconfigure(name, parse_json_body(request, self.api.max_body))

    def remove_assistant(self, request: Request, name: str) -> defer.Deferred[object]:
        """``DELETE /assistants/{name}?forget=``."""
        self._known(name)
        return self.api.operator.remove(name, query_bool(request, "forget"))

    def assistant_config(self, request: Request, name: str) -> dict[str, object]:
        """``GET /assistants/{name}/config``."""
        return self.api.operator.config(self._known(name))
