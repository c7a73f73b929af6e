"""The manhole's login files checked as OpenSSH's StrictModes does, at start and at login."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from twisted.cred import credentials
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.python.failure import Failure

from ai_tools.errors import ConfigError
from ai_tools.standalone import console
from ai_tools.standalone.console import (
    AuthorizedKeysFile,
    PasswordFileChecker,
    hash_password,
    load_or_create_host_key,
    read_password_file,
)
from ai_tools.standalone.file_modes import check_login_file, make_private_directories

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
pytestmark = posix_only


def public_key_line() -> str:
    return console._new_host_key().public().toString("openssh").decode() + " me@host\n"


def keys_file(directory: Path, mode: int = 0o644) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "authorized_keys"
    path.write_text(public_key_line())
    path.chmod(mode)
    return path


def password_file(directory: Path, mode: int = 0o600, password: str = "pw") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "passwords"
    path.write_text(f"admin:{hash_password(password, 'pbkdf2', cost=1000)}\n")
    path.chmod(mode)
    return path


@pytest.fixture
def errors() -> Iterator[list[str]]:
    lines: list[str] = []

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_level", LogLevel.info) >= LogLevel.error:
            lines.append(formatEvent(event))

    globalLogPublisher.addObserver(cast(Any, observe))
    yield lines
    globalLogPublisher.removeObserver(cast(Any, observe))


# -- at start ----------------------------------------------------------------------------------


def test_a_readable_authorized_keys_file_is_fine(tmp_path: Path) -> None:
    """Public keys may be read by others (0644); only writing is refused."""
    assert AuthorizedKeysFile(keys_file(tmp_path / "ssh", 0o644)).getAuthorizedKeys(b"x")


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_group_or_world_writable_authorized_keys_are_refused(tmp_path: Path, mode: int) -> None:
    path = keys_file(tmp_path / "ssh", mode)
    with pytest.raises(ConfigError) as caught:
        AuthorizedKeysFile(path)
    message = str(caught.value)
    assert f"the file {path} is writable by other users (mode {mode:04o})" in message
    assert f"run: chmod go-w {path}" in message


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_writable_directory_above_is_refused(tmp_path: Path, mode: int) -> None:
    """Whoever may write a directory above the file may swap the file."""
    open_dir = tmp_path / "shared"
    path = keys_file(open_dir / "ssh", 0o600)
    open_dir.chmod(mode)
    try:
        with pytest.raises(ConfigError, match=f"the directory {open_dir} is writable by other"):
            AuthorizedKeysFile(path)
    finally:
        open_dir.chmod(0o700)


def test_a_root_owned_sticky_directory_ends_the_walk(tmp_path: Path) -> None:
    """Like /tmp: others may write there but not replace our entries, so it is accepted
    (and what is above it is not looked at)."""
    if os.geteuid() != 0:
        pytest.skip("a root-owned directory can only be made by root")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    path = keys_file(sticky / "ssh", 0o600)
    tmp_path.chmod(0o777)  # above the sticky directory: never looked at
    try:
        assert AuthorizedKeysFile(path).getAuthorizedKeys(b"x")
        sticky.chmod(0o0777)  # without the sticky bit it is just writable by everyone
        with pytest.raises(ConfigError, match=f"the directory {sticky} is writable"):
            AuthorizedKeysFile(path)
    finally:
        tmp_path.chmod(0o700)


def test_the_walk_stops_at_the_home_directory(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Directories above the service user's home are not looked at (as OpenSSH does)."""
    home = tmp_path / "home"
    path = keys_file(home / ".ssh", 0o600)
    home.chmod(0o700)
    tmp_path.chmod(0o777)  # above home: writable by everyone
    try:
        monkeypatch.setenv("HOME", str(home))
        assert AuthorizedKeysFile(path).getAuthorizedKeys(b"x")
        monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
        with pytest.raises(ConfigError, match=f"the directory {tmp_path} is writable"):
            AuthorizedKeysFile(path)
    finally:
        tmp_path.chmod(0o700)


def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    path = keys_file(tmp_path / "ssh", 0o644)
    os.chown(path, 65534, -1)
    with pytest.raises(ConfigError, match="belongs to uid 65534, not to the user running"):
        AuthorizedKeysFile(path)


def test_a_symlink_is_judged_by_its_target(tmp_path: Path) -> None:
    target = keys_file(tmp_path / "real", 0o666)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match=f"the file {target} is writable"):
        AuthorizedKeysFile(link)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_password_file_others_may_read_is_refused(tmp_path: Path, mode: int) -> None:
    """The hashes are secret: readable by the owner only (chmod 600), like a private key."""
    path = password_file(tmp_path / "etc", mode)
    with pytest.raises(ConfigError, match=f"run: chmod 600 {path}"):
        read_password_file(path)
    with pytest.raises(ConfigError, match="readable or writable by other users"):
        PasswordFileChecker(path)


def test_a_password_file_in_a_writable_directory_is_refused(tmp_path: Path) -> None:
    path = password_file(tmp_path / "etc", 0o600)
    (tmp_path / "etc").chmod(0o777)
    try:
        with pytest.raises(ConfigError, match="writable by other users"):
            read_password_file(path)
    finally:
        (tmp_path / "etc").chmod(0o700)


def test_the_host_key_directory_is_checked_and_made_private(tmp_path: Path) -> None:
    """A host key in a directory others may write is refused; one we create is 0700."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    try:
        with pytest.raises(ConfigError, match=f"the directory {open_dir} is writable"):
            load_or_create_host_key(open_dir / "host_key")
        assert not (open_dir / "host_key").exists()
    finally:
        open_dir.chmod(0o700)
    old = os.umask(0)
    try:
        load_or_create_host_key(tmp_path / "new" / "deeper" / "host_key")
    finally:
        os.umask(old)
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "new" / "deeper").stat().st_mode & 0o777 == 0o700


def test_make_private_directories_keeps_what_exists(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir(mode=0o755)
    make_private_directories(tmp_path / "a" / "b")
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o700


def test_missing_or_odd_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        check_login_file(tmp_path / "nothing", "manhole password file")
    with pytest.raises(ConfigError, match="is not a regular file"):
        check_login_file(tmp_path, "manhole password file")


# -- at login ----------------------------------------------------------------------------------


def test_keys_made_writable_after_start_let_nobody_in(tmp_path: Path,
                                                      errors: list[str]) -> None:
    path = keys_file(tmp_path / "ssh", 0o644)
    db = AuthorizedKeysFile(path)
    assert db.getAuthorizedKeys(b"admin")
    path.chmod(0o666)
    assert db.getAuthorizedKeys(b"admin") == []
    assert any("writable by other users" in line for line in errors)


def test_a_password_file_made_readable_after_start_refuses_logins(tmp_path: Path,
                                                                  errors: list[str]) -> None:
    from twisted.internet import defer

    path = password_file(tmp_path / "etc", 0o600, password="pw")
    checker = PasswordFileChecker(path, run=defer.maybeDeferred)
    creds = credentials.UsernamePassword(b"admin", b"pw")
    results: list[Any] = []
    checker.requestAvatarId(creds).addBoth(results.append)
    assert results == [b"admin"]
    path.chmod(0o644)
    checker.requestAvatarId(creds).addBoth(results.append)
    assert isinstance(results[1], Failure)
    assert any("chmod 600" in line for line in errors)
