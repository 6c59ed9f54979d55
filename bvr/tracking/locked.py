"""A store another process holds locked: how long bvr waits (:data:`STORE_WAIT`), who holds it, and the one line
when it stays locked, before any work (:func:`check_sqlite`, which also refuses a file that is not SQLite or cannot
be written) or during a call (:func:`locked_as_error`). :mod:`bvr.tracking.store` opens every store through them.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bvr.errors import BvrError
from bvr.locks import env_seconds, holder, lock_path

STORE_WAIT_ENV = "BVR_STORE_WAIT"
STORE_WAIT = 30.0
"""Seconds bvr waits for an SQLite store another process holds locked (:data:`STORE_WAIT_ENV` sets another)."""
STORE_NOTICE = 3.0
"""Seconds after which a wait on a locked store is said on stderr."""


def store_holders(db: Path) -> str:
    """Who may hold ``db`` locked: the process in bvr's lock file beside it and this user's other processes that have
    it open (``/proc/PID/fd``); empty when none is found (another user's, or another machine's)."""
    pids = {pid for pid in [holder(lock_path(db))] if pid is not None and pid != os.getpid()}
    target = str(Path(db).resolve())
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid() or int(entry.name) in pids:
            continue
        try:
            if any(os.readlink(fd) == target for fd in (entry / "fd").iterdir()):
                pids.add(int(entry.name))
        except OSError:  # another user's process, or one that ended meanwhile
            continue
    return ", ".join(f"process {pid} ({_command_name(pid)})" for pid in sorted(pids))


def _command_name(pid: int) -> str:
    with contextlib.suppress(OSError):
        return (Path("/proc") / str(pid) / "comm").read_text().strip() or "?"
    return "?"


def locked_store_error(db: Path, waited: float, *, before_work: bool = True) -> BvrError:
    """The one line for a store that stayed locked: the store, who has it open if found, and what to do.
    ``before_work``: the check before any work, so nothing was written; False: a call of the running command."""
    holders = store_holders(db)
    who = f"it is open in {holders}" if holders else "no process of this user has it open: another user's or " \
        "another machine's may"
    if before_work:
        return BvrError(f"the MLflow store stayed locked by another process's write for {waited:.0f} s ({who}); "
                        "nothing was written", where=db,
                        hint=f"let that process finish (or stop it), then run the same command again; "
                             f"{STORE_WAIT_ENV}=SECONDS waits longer, MLFLOW_TRACKING_URI=sqlite:////OTHER/mlflow.db "
                             "logs to another store")
    return BvrError(f"a write to the MLflow store failed: it stayed locked by another process's write for "
                    f"{waited:.0f} s ({who})", where=db,
                    hint="let that process finish (or stop it), then run the same command again: finished stages "
                         "are reused")


def causes(err: BaseException | None) -> Iterator[BaseException]:
    """``err``, then its causes and contexts, each once."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


@contextlib.contextmanager
def locked_as_error(db: Path | None) -> Iterator[None]:
    """Turn "database is locked" from a call into the store ``db`` (sqlite3's, SQLAlchemy's or MLflow's wrapping of
    either) into :func:`locked_store_error` (MLflow has waited its own 20 s by then); also a decorator."""
    start = time.monotonic()
    try:
        yield
    except Exception as err:
        locked = any("database is locked" in str(cause) for cause in causes(err))
        if db is not None and not isinstance(err, BvrError) and locked:
            raise locked_store_error(db, time.monotonic() - start, before_work=False) from err
        raise


_SQLITE_FAULTS = {
    "not a database": ("is not an SQLite database", "move it away (bvr then starts a new store there) or set "
                       "MLFLOW_TRACKING_URI to the store you mean (sqlite:////ABSOLUTE/PATH/mlflow.db)"),
    "readonly": ("cannot be written", "make it writable by this user (chmod u+w), or run bvr from another folder or "
                 "set MLFLOW_TRACKING_URI to a writable store"),
}
"""What SQLite's message says → what it means for the store, and what to do."""


def check_sqlite(db: Path, *, write: bool) -> None:
    """Open an existing store file as SQLite and, with ``write``, make a write (undone) in it: a file that is not
    SQLite or cannot be written is one line before any work, not MLflow's traceback mid-run. A locked store is waited
    for (:data:`STORE_WAIT`), then refused in one line."""
    if not db.is_file() or db.stat().st_size == 0:  # SQLite starts an empty or missing file as a new database
        return
    wait = env_seconds(STORE_WAIT_ENV, STORE_WAIT, "bvr waits for a locked MLflow store")
    start = time.monotonic()
    if _sqlite_opens(db, write=write, timeout=min(STORE_NOTICE, wait)):
        return
    if wait > STORE_NOTICE:
        holders = store_holders(db)
        print(f"{db}: the MLflow store is locked by another process's write{f' (open in {holders})' if holders else ''}"
              f"; waiting up to {wait:.0f} s for it ({STORE_WAIT_ENV} sets how long)", file=sys.stderr, flush=True)
        if _sqlite_opens(db, write=write, timeout=max(wait - (time.monotonic() - start), 0.0)):
            return
    raise locked_store_error(db, time.monotonic() - start)


def _sqlite_opens(db: Path, *, write: bool, timeout: float) -> bool:
    """Whether ``db`` opened (and with ``write`` took a write) within ``timeout`` seconds; False: it is locked. A file
    that is not SQLite, or cannot be read or written, is a BvrError (:data:`_SQLITE_FAULTS`)."""
    connection = sqlite3.connect(db, timeout=timeout, isolation_level=None)
    try:
        connection.execute("PRAGMA schema_version")  # reads the header
        if write:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("CREATE TABLE bvr_write_check (x)")
            connection.execute("ROLLBACK")
    except sqlite3.DatabaseError as err:
        if "locked" in str(err):
            return False
        what, hint = next((fault for key, fault in _SQLITE_FAULTS.items() if key in str(err)),
                          ("cannot be opened", "move it away or set MLFLOW_TRACKING_URI to another store"))
        raise BvrError(f"the MLflow store {what} ({err})", where=db, hint=hint) from None
    finally:
        connection.close()
    return True
