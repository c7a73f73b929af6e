"""One log line per class of failure, not one per failed write.

With the disk full every write fails the same way: a service that logs each
one with a traceback buries the one thing the operator needs to read (hundreds
of lines a second under load).  :class:`RepeatedFailure` says a class of
failure (its exception type) of one kind of work once, as one line without a
traceback, counts the repeats, and says once more when the work succeeds again
(with how many failed meanwhile).  The callers still answer each failure (a
``503``, a counter); only the log is folded.  It imports nothing of ai_tools,
so any layer may use it.
"""

from __future__ import annotations

import attrs
from twisted.logger import Logger
from twisted.python.failure import Failure

__all__ = ["RepeatedFailure"]


@attrs.define(eq=False)
class RepeatedFailure:
    """The failures of one kind of work (``what``: "the heard log was not written"),
    logged through ``log``: each exception type once until :meth:`worked`."""

    what: str
    log: Logger
    max_classes: int = 32
    """Classes remembered at once (the table is bounded; more are counted, not said)."""
    _since: dict[str, int] = attrs.field(factory=dict, init=False)
    """exception type -> failures of that type since it was said."""
    _unsaid: int = attrs.field(default=0, init=False)

    @property
    def failing(self) -> bool:
        """Whether the work has failed since it last worked."""
        return bool(self._since) or self._unsaid > 0

    def failed(self, error: BaseException | Failure, **fields: object) -> None:
        """One failure of the work: logged when its class is new, else counted.

        ``fields`` (``assistant=...``) go into the line of the first one."""
        value = error.value if isinstance(error, Failure) else error
        kind = type(value).__name__
        if kind in self._since:
            self._since[kind] += 1
            return
        if len(self._since) >= self.max_classes:
            self._unsaid += 1
            return
        self._since[kind] = 1
        detail = ", ".join(f"{k} {v}" for k, v in sorted(fields.items()))
        self.log.error("{what}: {kind}: {error}{detail} (said once; the same failure again "
                       "is counted until it works again)", what=self.what, kind=kind,
                       error=str(value) or kind, detail=f" ({detail})" if detail else "")

    def worked(self) -> None:
        """The work succeeded: say so once, with how many failures there were since."""
        if not self.failing:
            return
        count = sum(self._since.values()) + self._unsaid
        self._since.clear()
        self._unsaid = 0
        self.log.info("{what}: works again ({count} failure(s) before)", what=self.what,
                      count=count)
