"""Exclusive file locks between processes (``fcntl.flock``) that name their holder.

A lock is a small hidden file beside what it guards (``.mlflow.db.lock``, ``.TARGET.lock``) holding the PID of the
process that holds it, so that a process kept waiting can say by whom. The kernel drops the lock when its holder
exits or is killed, so a crash never leaves a stale lock behind. The file itself stays: removing it would let one
process lock the old file while another locks a new one of the same name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (a process of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


@contextlib.contextmanager
def file_lock(path: Path, *, on_wait: Callable[[int | None], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block, waiting as long as another process has it.

    Args:
        path: the lock file (see :func:`lock_path`).
        on_wait: called once, with the holder's PID when known, if the lock is taken and this process must wait.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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
