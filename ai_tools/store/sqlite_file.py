"""The SQLite database file itself: one process at a time, still there, and errors in words.

A SQLite store is single-process by design (DESIGN, field rules): two services
on one file would each keep their own state in memory and overwrite the
other's.  :class:`DatabaseFileGuard` makes that impossible and notices when
the file goes away under a running service:

* **the lock.**  ``open()`` takes an exclusive ``flock`` on a sidecar file,
  ``<database>.lock``, and holds it until ``close()`` (the kernel drops it
  when the process dies, even by SIGKILL, so a lock is never stale).  The
  lock lives outside SQLite's own locking on purpose: readers of the
  database (the ``sqlite3`` shell, a backup) still never block the writer,
  which ``PRAGMA locking_mode=EXCLUSIVE`` would break.  The lock file holds
  the pid of its holder, for the message the second process prints.  It is
  never deleted: deleting it would let a third process lock a new file while
  the second still waits on the old one.
* **the file's identity.**  The (device, inode) of the database is
  remembered once open.  Before every write transaction (on the store
  thread: one ``stat`` of the path, one ``fstat`` of the lock) it is compared
  with what the path names now, and the lock file must still be linked: a
  database deleted or moved away would otherwise take every later write into
  an unlinked file, all of it gone at the next start.  Cost, counted with
  callgrind: about 14,500 instructions per transaction, 5% of the cheapest
  one (``synchronous=OFF``, one small write; 311k against 297k instructions);
  a commit under the default ``FULL`` waits for the disk far longer.

:func:`explain` turns SQLite's errors about the file (read-only, damaged,
full, cannot open, I/O) into a :class:`DatabaseFileError` whose one-line
message names the file and says what to do.
"""

from __future__ import annotations

import os
import sqlite3

import attrs

from ai_tools.errors import AIToolsError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; the service is POSIX-hosted
    fcntl = None  # type: ignore[assignment]

__all__ = ["DatabaseFileError", "DatabaseFileGuard", "FileIdentity", "explain", "file_problem"]

LOCKED = "locked"
GONE = "gone"
READ_ONLY = "read_only"
DAMAGED = "damaged"
DISK_FULL = "disk_full"
CANNOT_OPEN = "cannot_open"
IO_ERROR = "io_error"

_PROBLEMS = {13: DISK_FULL, 8: READ_ONLY, 11: DAMAGED, 26: DAMAGED, 14: CANNOT_OPEN, 10: IO_ERROR}
"""SQLite's primary result codes about the file (FULL, READONLY, CORRUPT, NOTADB,
CANTOPEN, IOERR: the low byte of ``sqlite3.Error.sqlite_errorcode``) → the problem."""

_REMEDIES = {
    DISK_FULL: ("the disk holding {path} is full {said}: nothing of this write was saved; "
                "free some space (the service goes on, its next writes try again)"),
    READ_ONLY: ("{path} is read-only for this process {said}: the service writes it and the "
                "-wal, -shm and .lock files next to it; give the user running the service "
                "write access to them and to their directory"),
    CANNOT_OPEN: ("cannot open {path} {said}: check that its directory exists and that the "
                  "user running the service may write there"),
    IO_ERROR: "reading or writing {path} failed {said}: check the disk (and the system log)",
}


class DatabaseFileError(AIToolsError):
    """The database file cannot be used as it is; the message names it and the remedy.

    ``problem`` says which: ``locked`` (another process holds it), ``gone``
    (deleted, moved or replaced while open), ``read_only``, ``damaged``,
    ``disk_full``, ``cannot_open`` or ``io_error``.
    """

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem


@attrs.frozen
class FileIdentity:
    """Which file a path named: its device and inode numbers."""

    device: int
    inode: int

    @classmethod
    def of(cls, path: str) -> FileIdentity | None:
        """The file ``path`` names now, or None when there is none."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return cls(st.st_dev, st.st_ino)


def file_problem(exc: BaseException) -> str | None:
    """Which problem with the file an SQLite error reports (``disk_full``...), else None.

    Errors about one statement (a constraint, a syntax error) are not the
    file's: None.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(exc, sqlite3.Error) or not isinstance(code, int):
        return None
    return _PROBLEMS.get(code & 0xFF)


def explain(exc: BaseException, path: str) -> DatabaseFileError | None:
    """A :class:`DatabaseFileError` for an SQLite error about the file itself, else None."""
    problem = file_problem(exc)
    if problem is None:
        return None
    if problem == DAMAGED:
        return damaged(path, str(exc))
    return DatabaseFileError(problem, _REMEDIES[problem].format(path=path,
                                                                said=f"(SQLite: {exc})"))


def damaged(path: str, detail: str) -> DatabaseFileError:
    """The error for a damaged database file (or one that is not a database at all)."""
    return DatabaseFileError(DAMAGED, (
        f"{path} is damaged or not a database (SQLite: {detail}): restore it from a backup, "
        f"or keep what is readable with 'sqlite3 {path} .recover | sqlite3 NEW.sqlite' and "
        "point [store] path (or --db) at NEW.sqlite"))


@attrs.define(eq=False)
class DatabaseFileGuard:
    """This process's exclusive claim on one database file, and a check that it is still there.

    :meth:`claim` before SQLite opens the file, :meth:`remember` once it is
    open, :meth:`check` before each write, :meth:`release` when closing.
    """

    path: str
    lock_path: str = attrs.field(init=False)
    _lock_fd: int | None = attrs.field(default=None, init=False)
    _database: FileIdentity | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.lock_path = self.path + ".lock"

    def claim(self) -> None:
        """Take the exclusive lock; :class:`DatabaseFileError` (``locked``) if another holds it."""
        if self._lock_fd is not None or fcntl is None:
            return
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise DatabaseFileError(CANNOT_OPEN, (
                f"cannot create the lock file {self.lock_path} ({exc.strerror}): the user "
                "running the service needs write access to the database's directory")) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_holder(fd)
            os.close(fd)
            raise DatabaseFileError(LOCKED, (
                f"{self.path} is in use by another process{holder} (it holds "
                f"{self.lock_path}): one SQLite file serves one service; stop the other "
                "one, or give this one its own [store] path (or --db)")) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        self._lock_fd = fd

    def remember(self) -> None:
        """Note which file the database path names (call once SQLite has opened it)."""
        self._database = FileIdentity.of(self.path)

    def problem(self) -> str | None:
        """What is wrong with the file now (deleted, moved, replaced, lock lost), or None."""
        if self._database is None:
            return None
        now = FileIdentity.of(self.path)
        if now is None:
            return f"{self.path} was deleted or moved away while the service ran"
        if now != self._database:
            return f"{self.path} is no longer the file the service opened (it was replaced)"
        if self._lock_fd is not None and os.fstat(self._lock_fd).st_nlink == 0:
            return (f"the lock file {self.lock_path} was deleted or replaced while the service "
                    "ran, so another service could open the database too")
        return None

    def check(self) -> None:
        """Raise :class:`DatabaseFileError` (``gone``) when :meth:`problem` finds one."""
        problem = self.problem()
        if problem is not None:
            raise DatabaseFileError(GONE, (
                f"{problem}: writes are refused, since they would be lost at the next start; "
                "put the file back where it was, or stop the service and restore it from a "
                "backup"))

    def release(self) -> None:
        """Drop the lock (the lock file stays; see the module)."""
        fd, self._lock_fd = self._lock_fd, None
        self._database = None
        if fd is not None:
            os.close(fd)


def _read_holder(fd: int) -> str:
    """`` (pid N)`` from the lock file's content, or nothing when it holds no pid."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""
