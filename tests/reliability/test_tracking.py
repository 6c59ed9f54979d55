"""The MLflow store: what a run logs reads back as its saved results say; a store that cannot be used (not SQLite,
read-only, a folder) is one line naming it and what to do, before any work (issue 28)."""

from __future__ import annotations

import http.server
import json
import os
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from bvr.tracking import tracking_uri
from tests.reliability.conftest import copy_task, error_line

FINETUNE = ["--set", "finetune.epochs=1", "--set", "finetune.batch_size=2"]


def test_fine_tuning_scores_read_back_from_the_store_as_result_json_has_them(bvr, checkpoint, tmp_path, monkeypatch):
    """SQuAD's F1 is a float64 (66.66666666666666 here); the store had its float32 (66.66666412353516)."""
    monkeypatch.chdir(tmp_path)
    data_dir = copy_task(tmp_path / "data", "squad")
    code, _, err = bvr("finetune", "--task", "squad", "--checkpoint", checkpoint, "--seeds", "2", "--data-dir",
                       data_dir, "--output-dir", tmp_path / "out", *FINETUNE)
    assert code == 0, err
    client = MlflowClient(tracking_uri(tmp_path))
    saved, logged = {}, {}
    for result in (tmp_path / "out" / "finetune").glob("squad-seed*/result.json"):
        seed = json.loads(result.read_text())["seed"]
        metrics = client.get_run(seed["run_id"]).data.metrics
        for prefix, scores in (("", seed["scores"]), ("best/", seed["best_scores"])):
            saved |= {(seed["seed"], prefix + key): value for key, value in scores.items()}
            logged |= {(seed["seed"], prefix + key): metrics.get(prefix + key) for key in scores}
    assert len(saved) == 8 and logged == saved
    assert any(float(np.float32(value)) != value for value in saved.values())  # a float32 would have shown


@pytest.fixture
def finetune_here(bvr, checkpoint, tmp_path, monkeypatch):
    """``bvr finetune --task sst2`` of the tiny checkpoint, run in ``tmp_path`` (its store: ``tmp_path/mlflow.db``);
    returns the error line (after checking exit status 2 and that no output folder was made)."""
    monkeypatch.chdir(tmp_path)
    data_dir = copy_task(tmp_path / "data", "glue/SST-2")

    def run() -> str:
        code, _, err = bvr("finetune", "--task", "sst2", "--checkpoint", checkpoint, "--seeds", "1", "--data-dir",
                           data_dir, "--output-dir", tmp_path / "out", *FINETUNE)
        assert code == 2 and not (tmp_path / "out").exists()
        return error_line(err)

    return run


def test_an_mlflow_db_that_is_not_sqlite_is_one_line(finetune_here, tmp_path):
    (tmp_path / "mlflow.db").write_text("results of another tool\n" * 50)
    assert finetune_here() == (
        f"{tmp_path / 'mlflow.db'}: the MLflow store is not an SQLite database (file is not a database). move it away "
        "(bvr then starts a new store there) or set MLFLOW_TRACKING_URI to the store you mean "
        "(sqlite:////ABSOLUTE/PATH/mlflow.db)")


def test_a_read_only_mlflow_db_is_one_line(finetune_here, tmp_path, monkeypatch):
    """As root a chmod does not stop writes, so SQLite is made to open this one file read-only, as it does a file
    the user may not write."""
    db = tmp_path / "mlflow.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE kept (x)")
    connect = sqlite3.connect

    def read_only(database, *args, **kwargs):
        if Path(database).resolve() != db:
            return connect(database, *args, **kwargs)
        return connect(f"{db.as_uri()}?mode=ro", *args, **{**kwargs, "uri": True})

    monkeypatch.setattr(sqlite3, "connect", read_only)
    monkeypatch.setattr(sqlite3.dbapi2, "connect", read_only)  # what SQLAlchemy, under MLflow, calls
    assert finetune_here() == (
        f"{db}: the MLflow store cannot be written (attempt to write a readonly database). make it writable by this "
        "user (chmod u+w), or run bvr from another folder or set MLFLOW_TRACKING_URI to a writable store")


def test_a_folder_as_mlflow_tracking_uri_is_one_line(finetune_here, tmp_path, monkeypatch):
    (tmp_path / "mlruns").mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(tmp_path / "mlruns"))
    assert finetune_here() == (
        f"MLFLOW_TRACKING_URI: {tmp_path / 'mlruns'} is a path, which MLflow reads as its file store (a folder of "
        "runs) and no longer writes to (it is in maintenance mode). set it to an SQLite store "
        "(sqlite:////ABSOLUTE/PATH/mlflow.db) or a tracking server (http://HOST:PORT), or unset it to log to "
        "./mlflow.db; `mlflow migrate-filestore` moves the folder's runs into an SQLite store")


class _HealthOnly(http.server.BaseHTTPRequestHandler):
    """A tracking server that answers its health check, then drops every request: one that stopped answering."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.startswith("/health"):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")
        else:
            self.close_connection = True  # no answer at all

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args) -> None:
        pass


def test_a_tracking_server_that_stops_answering_is_one_line_after_its_bounded_retries(bvr, checkpoint, tmp_path,
                                                                                      monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HealthOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")  # bvr's default is 4 (14 s of back-off): kept short
    monkeypatch.chdir(tmp_path)
    try:
        code, _, err = bvr("finetune", "--task", "sst2", "--checkpoint", checkpoint, "--seeds", "1", "--data-dir",
                           copy_task(tmp_path / "data", "glue/SST-2"), "--output-dir", tmp_path / "out", *FINETUNE)
    finally:
        server.shutdown()
    assert code == 2
    line = error_line(err)
    assert line == (f"MLFLOW_TRACKING_URI: the MLflow tracking server {uri} stopped answering (connection "
                    "closed without an answer; 1 retry). start it again, then run the same command: finished "
                    "stages and checkpoints are reused (bvr pretrain: with --resume)")
    assert os.environ.get("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR") == "1"  # the bound bvr sets when unset
