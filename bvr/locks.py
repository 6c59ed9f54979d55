"""Exclusive file locks between processes (``fcntl.flock``) that name their holder.

A lock is a small hidden file beside what it guards (``.mlflow.db.lock``, ``.TARGET.lock``) holding the PID of the
process that holds it, so that a process kept waiting can say by whom. The kernel drops the lock when its holder
exits or is killed, so a crash never leaves a stale lock behind. The file itself stays: removing it would let one
process lock the old file while another locks a new one of the same name.

A lock file is opened without following a link (``O_NOFOLLOW``) and must be a plain file of one name: bvr writes and
empties it, which through a symbolic or hard link planted there would empty the file it points to.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from bvr.errors import BvrError

LOCK_HINT = "remove it: bvr creates its lock file itself"


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (a process of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def env_seconds(name: str, default: float, what: str) -> float:
    """A wait in seconds (0 or more) from the environment variable ``name``, else ``default``; ``what`` says in the
    error's hint what the wait is for."""
    text = os.environ.get(name, "").strip()
    try:
        seconds = float(text) if text else default
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise BvrError(f"'{text}' is not a number of seconds (0 or more)", where=name,
                       hint=f"set it to how long {what}, or unset it ({default:.0f} s)")
    return seconds


def lock_path(target: Path) -> Path:
    """The lock file of ``target``: ``.NAME.lock`` beside it (hidden, so globs over the folder do not see it)."""
    target = Path(target)
    return target.with_name(f".{target.name}.lock")


def holder(path: Path) -> int | None:
    """The PID written in the lock file ``path`` (None when it is free, missing, or being taken)."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def open_lock_file(path: Path) -> int:
    """Open the lock file ``path`` for reading and writing, creating it, without following a link. A symbolic link,
    a hard link (a file of more than one name) or anything but a plain file is refused: bvr would write to and empty
    what it points to."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            raise BvrError("a symbolic link where bvr keeps a lock file; bvr does not write through links",
                           where=path, hint=LOCK_HINT) from None
        if err.errno == errno.EISDIR:
            raise _not_a_lock(path, "a folder") from None
        raise
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
        return fd
    os.close(fd)
    raise _not_a_lock(path, f"a file of {info.st_nlink} names (a hard link)" if stat.S_ISREG(info.st_mode) else
                      "not a plain file")


def _not_a_lock(path: Path, what: str) -> BvrError:
    return BvrError(f"{what} where bvr keeps a lock file; bvr writes to and empties it", where=path, hint=LOCK_HINT)


@contextlib.contextmanager
def file_lock(path: Path, *, on_wait: Callable[[int | None], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block, waiting as long as another process has it.
    ``on_wait`` is called once, with the holder's PID when known, if this process must wait."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(holder(path))
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            # Unlock explicitly: a DataLoader worker forked meanwhile shares the descriptor and would keep it locked.
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
