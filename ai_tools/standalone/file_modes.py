"""Who else could change a login file: the checks OpenSSH's ``StrictModes`` makes.

The manhole lets in whoever holds a key listed in its ``authorized_keys`` file
or a password hashed in its password file, and gives them a Python shell as
the service's user.  A file that another local user can write (or a
directory above it that they can write, where they could swap the file) is
a way in for that user; a password file they can read gives them the
hashes to crack offline.  So, like ``sshd`` with ``StrictModes yes``:

* the file and every directory above it must belong to the user running the
  service or to root, and must not be writable by group or others;
* a secret (the password file, the host key) must not be readable by them
  either (``chmod 600``);
* the walk up stops at the home directory of the user running the service,
  or at the first directory owned by root with the sticky bit (``/tmp``:
  others may write there, but may not replace what is ours).

Checked when the manhole starts and again at every login (the files are
re-read then).  Nothing is checked where POSIX modes do not exist.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ai_tools.errors import ConfigError

__all__ = ["check_directories", "check_login_file", "make_private_directories"]


def check_login_file(path: str | os.PathLike[str], what: str, *, secret: bool = False) -> None:
    """Raise ConfigError when others could change ``path`` (or read it, if ``secret``).

    ``what`` names the file in the message (``"manhole password file"``).
    A missing file raises ConfigError too.
    """
    if os.name != "posix":  # pragma: no cover - no POSIX modes to check
        return
    real = Path(os.path.realpath(path))
    info = _stat(real, what)
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{what} {str(real)!r} is not a regular file")
    _check(real, info, what, 0o077 if secret else 0o022)
    check_directories(real.parent, what)


def check_directories(directory: str | os.PathLike[str], what: str) -> None:
    """Raise ConfigError when a directory holding the file could be written by others.

    Walks up from ``directory`` to the service user's home directory, or to
    the first root-owned sticky directory, or to ``/``.
    """
    if os.name != "posix":  # pragma: no cover
        return
    home = Path(os.path.realpath(os.path.expanduser("~")))
    current = Path(os.path.realpath(directory))
    for place in (current, *current.parents):
        info = _stat(place, what)
        if info.st_uid == 0 and info.st_mode & stat.S_ISVTX:
            return
        _check(place, info, what, 0o022)
        if place == home:
            return


def _stat(path: Path, what: str) -> os.stat_result:
    try:
        return path.stat()
    except OSError as exc:
        raise ConfigError(f"{what} {str(path)!r}: {exc.strerror}") from None


def _check(path: Path, info: os.stat_result, what: str, forbidden: int) -> None:
    """The owner must be this user or root; no bit of ``forbidden`` may be set."""
    user = os.geteuid()
    if info.st_uid not in (user, 0):
        raise ConfigError(
            f"{what}: {path} belongs to uid {info.st_uid}, not to the user running the "
            f"service (uid {user}) or root; OpenSSH refuses such files too")
    mode = stat.S_IMODE(info.st_mode)
    if mode & forbidden:
        kind = "directory" if stat.S_ISDIR(info.st_mode) else "file"
        access = "readable or writable" if forbidden & 0o044 else "writable"
        fix = "chmod 600" if forbidden & 0o044 else "chmod go-w"
        raise ConfigError(f"{what}: the {kind} {path} is {access} by other users "
                          f"(mode {mode:04o}), as OpenSSH refuses too; run: {fix} {path}")


def make_private_directories(directory: str | os.PathLike[str]) -> None:
    """Create ``directory`` and its missing parents with mode 0700 (whatever the umask).

    ``os.makedirs`` gives the parents it creates the umask's default mode,
    which a umask of 0 leaves writable by everyone.
    """
    missing: list[Path] = []
    place = Path(directory)
    while not place.exists():
        missing.append(place)
        place = place.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # made meanwhile by someone else: checked afterwards
            continue
