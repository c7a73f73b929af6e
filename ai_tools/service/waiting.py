
"""Waiting on Deferreds the service does not own: without touching them, and with a deadline.

Removing or reconfiguring an assistant waits for its tick in flight, and stopping the
service waits for every tick and sub-agent; each wait is bounded (``stop_grace``), and
none may change the result the tick's own callers get.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar, cast

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

__all__ = ["first_failure", "observe", "pass_on", "within"]

_T = TypeVar("_T")


def observe(d: defer.Deferred[_T]) -> defer.Deferred[None]:
    """A new Deferred firing (with None) when ``d`` fires; ``d``'s result is untouched."""
    waiter: defer.Deferred[None] = defer.Deferred()

    def passthrough(result: _T) -> _T:
        waiter.callback(None)
        return result

    d.addBoth(passthrough)
    return waiter


@defer.inlineCallbacks
def within(d: defer.Deferred[_T], seconds: float,
           clock: IReactorTime) -> Generator[defer.Deferred[bool], object, bool]:
    """Wait for ``d`` at most ``seconds``; fires True if it fired in time, else False.

    ``d``'s result is consumed: pass an :func:`observe` of a Deferred others use.
    """
    waiter: defer.Deferred[bool] = defer.Deferred()

    def fired(_: _T | Failure) -> None:
        if not waiter.called:
            waiter.callback(True)

    def timeout() -> None:
        if not waiter.called:
            waiter.callback(False)

    timer = clock.callLater(seconds, timeout)
    d.addBoth(fired)
    in_time = yield waiter
    if timer.active():
        timer.cancel()
    return bool(in_time)


def first_failure(failure: Failure) -> Failure:
    """The failure inside ``gatherResults``' ``FirstError``."""
    failure.trap(defer.FirstError)
    first = cast(defer.FirstError, failure.value)
    sub: Failure = first.subFailure
    return sub


def pass_on(outcome: object, target: defer.Deferred[None]) -> object:
    """A callback giving a shared Deferred's outcome (success as None) to ``target``, and
    leaving the shared one as it was: ``shared.addBoth(pass_on, mine)``."""
    if isinstance(outcome, Failure):
        target.errback(outcome)
    else:
        target.callback(None)
    return outcome
