"""One service, many doors: a worker's API answers for the assistants other workers run.

With several workers on PostgreSQL, each worker's HTTP API shows the whole
service.  Asked about an assistant it does not run, a worker looks up its
owner (``assistant_leases`` and the owner's advertised API address in
``lease_workers``) and, per endpoint:

==============================================  ====================================
endpoint                                        answered by
==============================================  ====================================
``GET /assistants/{name}``, ``/history``,       the owner (forwarded); when no live
``/config``                                     worker runs it, or its owner does not
                                                answer: the database (the saved state,
                                                ``"worker": null``)
``POST …/tick``, ``/stop``, ``/enable``,        the owner; when no live worker runs it:
``/disable``, ``GET …/results``, ``PATCH``,     ``503`` with ``Retry-After`` (nothing
``/emergency-stop?assistant=``, ``/clear``      runs it; another worker takes it soon)
``DELETE /assistants/{name}``                   the owner; when nobody runs it: this
                                                worker (removed in the database)
``GET /events?assistant=``                      the owner's stream, relayed
``GET /events`` (no ``?assistant=``)            this worker, with every live worker's
                                                loop events (followed by
                                                :mod:`~ai_tools.web.service_events`)
``GET /assistants``, ``POST /stop``,            this worker and every live worker
``/emergency-stop``, ``/clear`` (all)           (each asked for its own share)
==============================================  ====================================

A forwarded request carries :data:`~ai_tools.web.forwarding.FORWARDED_HEADER`:
the worker receiving it answers for itself only — an assistant that moved
meanwhile gets ``503`` with ``Retry-After`` (asked again, the caller's worker
finds the new owner), never a second hop.  The caller's ``Authorization`` is
never passed on: the request is signed with a key derived from the API token
(:mod:`~ai_tools.web.worker_auth`), and sent only to an address of the form
``http(s)://host:port`` (and, with ``[workers] api_hosts``, of those hosts);
another address in the database is a worker that cannot be reached (logged).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.server import Request

from ai_tools.service.assistant import Assistant
from ai_tools.web.errors import ApiError
from ai_tools.web.forwarding import (
    FORWARDED_HEADER,
    PASSED_HEADERS,
    Forwarder,
    ForwardingError,
)
from ai_tools.web.paging import history_page
from ai_tools.web.query import query_bool, query_int
from ai_tools.web.worker_auth import worker_base

if TYPE_CHECKING:
    from ai_tools.service.leases import LeaseManager
    from ai_tools.service.service import AssistantService

__all__ = ["RETRY_AFTER", "OtherWorkers", "forwarded"]

log = Logger()

RETRY_AFTER = "2"
"""Seconds a caller is asked to wait when no worker can answer for an assistant now."""

_FROM_STORE = ("assistant_status", "history", "assistant_config")
"""The endpoints the database answers when no live worker runs the assistant."""

_WAIT_FOR_A_TICK = ("tick", "reconfigure_assistant", "remove_assistant")
"""The endpoints whose answer waits for a tick (``tick_timeout`` applies)."""


def forwarded(request: Request) -> bool:
    """Whether another worker passed ``request`` on (answer for this worker only)."""
    return request.getHeader(FORWARDED_HEADER) is not None


@attrs.define(eq=False)
class OtherWorkers:
    """What a worker's API does about the assistants it does not run (see the module).

    ``service`` is the worker's ``AssistantService`` (its ``ownership``, the
    :class:`~ai_tools.service.leases.LeaseManager`, is set when it is one
    worker of several); ``hosts`` the only hosts a worker's API address may
    name (empty: any).
    """

    service: AssistantService
    forwarder: Forwarder
    hosts: tuple[str, ...] = ()
    max_streams: int = 400
    tick_timeout: float = 300.0
    """The deadline of a forwarded request that waits for a tick."""
    relays: int = attrs.field(init=False, default=0)
    """Event streams relayed from other workers now."""

    @property
    def ownership(self) -> LeaseManager | None:
        """The lease manager, or None when this process is the only one."""
        ownership: LeaseManager | None = self.service.ownership
        return ownership

    @property
    def _leases(self) -> LeaseManager:
        """The lease manager, on the paths that run only with workers."""
        ownership = self.ownership
        assert ownership is not None
        return ownership

    def handles(self, name: str | None) -> bool:
        """Whether ``name`` is an assistant this worker does not run, with workers."""
        return name is not None and self.ownership is not None and name not in self.service

    def fans_out(self, request: Request) -> bool:
        """Whether a service-wide request should ask the other workers too."""
        return self.ownership is not None and not forwarded(request)

    def worker(self) -> str | None:
        """This worker's name (None without workers)."""
        ownership = self.ownership
        return None if ownership is None else str(ownership.worker)

    # -- one assistant ------------------------------------------------------------------

    @defer.inlineCallbacks
    def answer(self, request: Request, endpoint: str, name: str) -> Any:
        """Answer ``request`` (the handler named ``endpoint``) about ``name``, run elsewhere."""
        owner = yield self._owner(request, name)
        why = self._nobody(name)
        if owner is not None:
            try:
                slow = endpoint in _WAIT_FOR_A_TICK
                return (yield self._forward(request, owner, self.tick_timeout if slow
                                            else None))
            except ForwardingError as exc:
                if exc.status != 503:
                    raise ApiError(502, exc.message) from None
                why = f"its worker {owner[0]} does not answer: {exc.message}"
                log.warn("Assistant {assistant}: {why}", assistant=name, why=why)
        if endpoint in _FROM_STORE:
            return (yield self._from_store(request, endpoint, name, why))
        if endpoint == "remove_assistant" and owner is None:
            yield self._leases.remove(name, query_bool(request, "forget"))
            return {"assistant": name, "removed": True,
                    "forgotten": query_bool(request, "forget")}
        raise self._unavailable(name, why)

    @defer.inlineCallbacks
    def _owner(self, request: Request, name: str) -> Any:
        """``(worker, api_url)`` of the live worker running ``name``, or None; 404 for an
        assistant the service does not have."""
        if forwarded(request):  # passed on to us, but we do not run it (any more)
            yield self._known(name)
            raise self._unavailable(name, "it is moving to another worker")
        owners = yield self._leases.store.assistant_owners()
        owner = owners.get(name)
        if owner is None or owner[0] == self._leases.worker:
            yield self._known(name)  # ours by the database, not running yet: nobody runs it
            return None
        if owner[1] is None:
            raise self._unavailable(name, f"its worker {owner[0]} has no API address yet")
        return owner

    @defer.inlineCallbacks
    def _known(self, name: str) -> Any:
        """404 unless the service has ``name`` (read in the database now: it may have been
        created or removed through another worker since this one's last lease round)."""
        roster = yield self._leases.fresh_roster()
        if name not in roster:
            raise ApiError(404, f"no assistant named {name!r}", field="assistant")

    def _nobody(self, name: str) -> str:
        """Why no live worker answers for ``name``: this worker took its lease and is
        loading its state (it runs it in a moment), or nobody holds its lease now."""
        if name in self._leases.epochs:
            return "it is starting on this worker"
        return "no live worker runs it"

    @staticmethod
    def _unavailable(name: str, why: str) -> ApiError:
        return ApiError(503, f"assistant {name!r} cannot be reached now ({why}); try again "
                        "shortly", headers={"Retry-After": RETRY_AFTER})

    @staticmethod
    def _headers(request: Request) -> dict[bytes, bytes]:
        """The caller's headers passed on (no token: the forwarder signs the request)."""
        return {name: value for name in PASSED_HEADERS
                if (value := request.getHeader(name)) is not None}

    def url(self, worker: str, api_url: object, target: str) -> str:
        """``target`` at ``worker``'s API; ForwardingError (503: a worker that cannot be
        reached) when its address in the database is not one to send requests to (see
        the module)."""
        try:
            return worker_base(api_url, self.hosts) + target
        except ValueError as exc:
            raise ForwardingError(503, f"worker {worker} cannot be reached: {exc}") from None

    @defer.inlineCallbacks
    def _forward(self, request: Request, owner: tuple[str, str], timeout: float | None) -> Any:
        method = request.method.decode("ascii")
        body = None
        if request.content is not None and method in ("POST", "PATCH", "DELETE", "PUT"):
            request.content.seek(0)
            body = request.content.read()
        url = self.url(owner[0], owner[1], request.uri.decode("ascii"))
        status, answer, headers = yield self.forwarder.forward(
            method, url, self._headers(request), body, timeout)
        if status >= 400:
            detail = answer if isinstance(answer, Mapping) else {}
            raise ApiError(status, str(detail.get("error") or f"the worker {owner[0]} "
                                       f"answered {status}"), detail.get("field"), headers)
        return status, answer

    @defer.inlineCallbacks
    def _from_store(self, request: Request, endpoint: str, name: str, why: str) -> Any:
        """What the database holds of ``name``: its saved status, history or config."""
        if endpoint == "assistant_config":
            return {"assistant": name, "config": self._leases.roster[name].to_dict(),
                    "worker": None}
        state = yield self._leases.store.load_assistant(name)
        if state is None:
            raise self._unavailable(name, f"{why}, and it has no saved state yet")
        saved = Assistant.from_state(state, self._leases.roster.get(name))
        if endpoint == "history":
            limit = query_int(request, "limit", 50)
            assert limit is not None
            page = history_page(saved.history.to_list(), limit,
                                query_int(request, "before", None, 0, 2**62),
                                query_int(request, "after", None, 0, 2**62))
            return {"assistant": name, **page, "worker": None}
        return {**saved.status(), "worker": None, "saved": True, "why": why}

    # -- event streams -------------------------------------------------------------------

    @defer.inlineCallbacks
    def relay_events(self, request: Request, name: str) -> Any:
        """``GET /events?assistant=name``: the owner's stream, relayed (bounded in number)."""
        if self.relays >= self.max_streams:
            raise ApiError(503, f"too many event streams are relayed from other workers (the "
                           f"limit is {self.max_streams}); try again later",
                           headers={"Retry-After": "10"})
        owner = yield self._owner(request, name)
        if owner is None:
            raise self._unavailable(name, self._nobody(name))
        try:
            url = self.url(owner[0], owner[1], request.uri.decode("ascii"))
            ended = yield self.forwarder.relay(request, url, self._headers(request))
        except ForwardingError as exc:
            if exc.status == 503:
                raise self._unavailable(name, exc.message) from None
            raise ApiError(exc.status, exc.message) from None
        self.relays += 1
        ended.addBoth(self._relay_ended)

    def _relay_ended(self, _: object) -> None:
        self.relays -= 1

    # -- the whole service ---------------------------------------------------------------

    @defer.inlineCallbacks
    def fan_out(self, request: Request, path: str) -> Any:
        """Send ``request`` (its method and body) to ``path`` of every other live worker.

        Fires with ``{worker: answer}`` of those that answered, and the names of
        those that did not (logged).
        """
        workers = yield self._leases.store.live_workers()
        others = {w: url for w, url in workers.items() if w != self._leases.worker}
        method = request.method.decode("ascii")
        body = None
        if request.content is not None and method != "GET":
            request.content.seek(0)
            body = request.content.read()
        headers = self._headers(request)
        asked = [self._ask(method, worker, url, path, headers, body) if url else
                 defer.fail(ForwardingError(503, "no API address yet"))
                 for worker, url in others.items()]
        results = yield defer.DeferredList(asked, consumeErrors=True)
        answers, silent = {}, []
        for worker, (ok, result) in zip(others, results, strict=True):
            if ok and result[0] < 400:
                answers[worker] = result[1]
            else:
                silent.append(worker)
                why = result.getErrorMessage() if not ok else f"answered {result[0]}"
                log.warn("Worker {worker} did not answer {path}: {why}", worker=worker,
                         path=path, why=why)
        return answers, sorted(silent)

    def _ask(self, method: str, worker: str, api_url: str, path: str,
             headers: Mapping[bytes, bytes], body: bytes | None) -> defer.Deferred[Any]:
        try:
            url = self.url(worker, api_url, path)
        except ForwardingError as exc:
            return defer.fail(exc)
        d: defer.Deferred[Any] = self.forwarder.forward(method, url, headers, body)
        return d

    @defer.inlineCallbacks
    def every_assistant(self, request: Request, local: Sequence[Mapping[str, object]]) -> Any:
        """``GET /assistants`` for the whole service: this worker's, every other live
        worker's, and those nobody runs now (``"worker": null``, from the database)."""
        listed: list[Mapping[str, object]] = [*local]
        answers, silent = yield self.fan_out(request, "/assistants")
        for answer in answers.values():
            listed.extend(a for a in answer.get("assistants", ()) if isinstance(a, dict))
        seen = {a.get("name") for a in listed}
        for name in sorted(set(self._leases.roster) - seen):
            listed.append({"name": name, "worker": None, "running": False})
        return sorted(listed, key=lambda a: str(a.get("name"))), silent

    @defer.inlineCallbacks
    def merged(self, request: Request, path: str, local: Mapping[str, object],
               merge: Callable[[dict[str, object], Mapping[str, object]], None]) -> Any:
        """A service-wide action: ``local`` (this worker's answer) with every other live
        worker's merged in by ``merge``; the workers that did not answer are named."""
        answer = dict(local)
        answers, silent = yield self.fan_out(request, path)
        for other in answers.values():
            if isinstance(other, Mapping):
                merge(answer, other)
        answer["workers_unreachable"] = silent
        return answer
