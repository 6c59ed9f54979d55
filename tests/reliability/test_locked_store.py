"""A store another process holds locked (issue 35, item 4): bvr waited about 140 s, then ended in SQLAlchemy's
``OperationalError: database is locked`` traceback. It now waits a stated time (``BVR_STORE_WAIT``), says so after
a few seconds, and stops in one line naming the store, the process that has it open and what to do, before
anything is written."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy.exc
from mlflow.tracking import MlflowClient

from bvr.errors import BvrError
from bvr.tracking import store_client, tracking_uri
from tests.reliability.conftest import error_line
from tests.test_ablate import EXPERIMENT

HOLD = """\
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(120)
"""
"""A process that holds a write lock on the database it is given, as `sqlite3 mlflow.db` with BEGIN EXCLUSIVE."""


@pytest.fixture
def locked_store(tmp_path, monkeypatch):
    """``tmp_path/mlflow.db`` (an SQLite database) held locked by a second process; yields (db, that process)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    db = tmp_path / "mlflow.db"
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute("CREATE TABLE runs (x)")
        connection.commit()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield db, holder
    finally:
        holder.kill()
        holder.wait()


def test_a_locked_store_is_waited_for_a_stated_time_then_named_in_one_line(bvr, locked_store, tmp_path,
                                                                            monkeypatch):
    db, holder = locked_store
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("BVR_STORE_WAIT", "4")
    start = time.monotonic()
    code, out, err = bvr("ablate", "exp.yaml", "--data-dir", tmp_path / "data", "--no-progress")
    seconds = time.monotonic() - start
    assert code == 2, err
    notice, error = err.strip("\n").splitlines()
    name = Path(f"/proc/{holder.pid}/comm").read_text().strip()
    assert notice == (f"{db}: the MLflow store is locked by another process's write (open in process {holder.pid} "
                      f"({name})); waiting up to 4 s for it (BVR_STORE_WAIT sets how long)")
    assert error_line(error) == (
        f"{db}: the MLflow store stayed locked by another process's write for 4 s (it is open in process "
        f"{holder.pid} ({name})); nothing was written. let that process finish (or stop it), then run the same "
        "command again; BVR_STORE_WAIT=SECONDS waits longer, MLFLOW_TRACKING_URI=sqlite:////OTHER/mlflow.db logs to "
        "another store")
    assert 3.5 < seconds < 15
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # nothing half-written: no tables, no runs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "exp.yaml", "mlflow.db"]


def test_a_wait_of_no_time_is_refused_at_once_and_a_wait_that_is_not_seconds_is_one_line(bvr, locked_store,
                                                                                          tmp_path, monkeypatch):
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("BVR_STORE_WAIT", "0")
    start = time.monotonic()
    code, _, err = bvr("ablate", "exp.yaml", "--data-dir", tmp_path / "data", "--no-progress")
    assert code == 2 and "stayed locked by another process's write for 0 s" in error_line(err)
    assert time.monotonic() - start < 5
    monkeypatch.setenv("BVR_STORE_WAIT", "soon")
    code, _, err = bvr("ablate", "exp.yaml", "--data-dir", tmp_path / "data", "--no-progress")
    assert code == 2
    assert error_line(err) == ("BVR_STORE_WAIT: 'soon' is not a number of seconds (0 or more). set it to how long "
                               "bvr waits for a locked MLflow store, or unset it (30 s)")


def test_a_store_locked_in_the_middle_of_a_command_is_one_line_naming_it(tmp_path, monkeypatch):
    """Past the check before work, MLflow's own wait (20 s) ends in its error; bvr names the store instead."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = store_client(tracking_uri(tmp_path))

    def locked(*_, **__):
        raise sqlalchemy.exc.OperationalError("INSERT INTO experiments", {}, Exception("database is locked"))

    monkeypatch.setattr(MlflowClient, "create_experiment", locked)
    with pytest.raises(BvrError) as raised:
        client.create_experiment("x")
    assert raised.value.one_line() == (
        f"{tmp_path / 'mlflow.db'}: a write to the MLflow store failed: it stayed locked by another process's write "
        "for 0 s (no process of this user has it open: another user's or another machine's may). let that process "
        "finish (or stop it), then run the same command again: finished stages are reused")
