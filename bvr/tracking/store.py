"""Where runs are stored (:func:`tracking_uri`, one client per store, experiments and their artifact folders), a
tracking server that does not answer (:func:`check_store`, :func:`server_failure`), and reading runs back into a
table (:func:`find_runs`)."""

from __future__ import annotations

import hashlib
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode
from mlflow.tracking import MlflowClient

from bvr.errors import BvrError
from bvr.locks import file_lock, lock_path
from bvr.signals import deferring
from bvr.tracking.locked import causes, check_sqlite, locked_as_error
from bvr.tracking.moved import ARTIFACTS, reroot_artifacts
from bvr.tracking.uri import check_uri, sqlite_file
from bvr.write_checks import check_writable

DEFAULT_DB = "mlflow.db"
_OPENED: set[str] = set()
"""The SQLite stores this process has opened (see :func:`store_client`)."""


def tracking_uri(workdir: Path | None = None) -> str:
    """The store runs go to: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<abs workdir>/mlflow.db`` (None: the
    current directory)."""
    env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if env:
        return env
    return f"sqlite:///{(Path(workdir or Path.cwd()) / DEFAULT_DB).resolve()}"


class SQLiteClient(MlflowClient):
    """A client of an SQLite store whose public methods run under :func:`bvr.signals.signals_deferred`: a signal
    handler raising mid-call would lose the write, or leave the store locked for the clean-up that ends the run
    KILLED. A server store keeps MLflow's client: a request cut short locks nothing."""

    def __init__(self, tracking_uri: str) -> None:
        self._db = sqlite_file(tracking_uri)
        with locked_as_error(self._db):  # opening creates or migrates the tables
            super().__init__(tracking_uri)

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name.startswith("_") or not callable(attr):
            return attr
        return locked_as_error(super().__getattribute__("_db"))(deferring(attr))


def store_client(uri: str) -> MlflowClient:
    """A client of the store ``uri``; every bvr use of a store starts here. MLflow creates and migrates an SQLite
    store's tables when a process first opens it, and several processes doing that at once crash and can break it,
    so the first opening in each process holds a file lock beside the database (``.mlflow.db.lock``)."""
    check_uri(uri)  # an unknown scheme, a driver not installed, a folder at mlflow.db: one line, not MLflow's
    db = sqlite_file(uri)
    if db is None:
        return MlflowClient(uri)
    if uri in _OPENED:
        return SQLiteClient(uri)
    db.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(lock_path(db)):
        check_sqlite(db, write=False)
        reroot_artifacts(db)  # a moved or copied store: its artifact folders beside it again (bvr.tracking.moved)
        client = SQLiteClient(uri)  # opens the store: creates or migrates its tables
    _OPENED.add(uri)
    return client


def client_for(workdir: Path | None) -> MlflowClient:
    """A client of the store :func:`tracking_uri` gives for ``workdir``."""
    return store_client(tracking_uri(workdir))


SERVER_TIMEOUT = 3.0
"""Seconds :func:`check_store` waits for a tracking server."""


def check_store(workdir: Path | None = None) -> str:
    """Before long work: the tracking server answers, or the local store's folder and database can be written
    (:func:`bvr.tracking.locked.check_sqlite`); return the URI. MLflow's client retries an unreachable server for
    about four minutes, silently, once the data is loaded; one short request up front says it in seconds."""
    uri = tracking_uri(workdir)
    check_uri(uri)
    db = sqlite_file(uri)
    if db is not None:
        check_writable(db.parent, "working folder, where the MLflow store (mlflow.db, mlartifacts/) is written")
        check_sqlite(db, write=True)
        return uri
    if uri.startswith(("http://", "https://")):
        try:
            urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=SERVER_TIMEOUT).close()
        except urllib.error.HTTPError:
            pass  # it answered
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", None) or err
            raise BvrError(f"the MLflow tracking server {uri} does not answer ({reason})", where="MLFLOW_TRACKING_URI",
                           hint="start the server (mlflow server --host HOST --port PORT), or unset "
                                "MLFLOW_TRACKING_URI to log to the local store (./mlflow.db)") from None
    return uri


_UNANSWERED = (("Connection refused", "connection refused"),
               ("RemoteDisconnected", "connection closed without an answer"),
               ("timed out", "no answer in time"), ("Connection aborted", "connection aborted"),
               ("Max retries exceeded", "no answer"))
"""What a failed request's message holds, most telling first, and how bvr says it."""


def server_failure(err: BaseException) -> BvrError | None:
    """The one line for a request to the tracking server that failed after its retries (bounded in
    :mod:`bvr.tracking`), or None for any other error (its causes and contexts are searched too)."""
    uri = tracking_uri()
    if not uri.startswith(("http://", "https://")):
        return None
    for cause in causes(err):
        text = str(cause)
        reason = next((said for mark, said in _UNANSWERED if mark in text), None)
        if isinstance(cause, MlflowException) and "API request to" in text and reason:
            retries = os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")
            return BvrError(f"the MLflow tracking server {uri} stopped answering ({reason}; "
                            f"{retries} {'retry' if retries == '1' else 'retries'})",
                            where="MLFLOW_TRACKING_URI", hint="start it again, then run the same command: finished "
                            "stages and checkpoints are reused (bvr pretrain: with --resume)")
    return None


def artifact_location(experiment: str, uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: ``mlartifacts/<name>`` beside an SQLite store (by name: it is given
    before MLflow assigns the id; a hash keeps names that differ only in odd characters apart); None lets any other
    store choose."""
    db = sqlite_file(uri)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", experiment).strip("-.") or "experiment"
    slug = slug if slug == experiment else f"{slug}-{hashlib.sha1(experiment.encode()).hexdigest()[:8]}"
    return (db.parent / ARTIFACTS / slug).as_uri() if db else None


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
"""What MLflow 3's UI opens an experiment as: the runs table, not the GenAI traces overview it guesses otherwise."""


def ensure_experiment(name: str, workdir: Path | None = None) -> str:
    """Get or create the experiment ``name``, tagged as model development (:data:`EXPERIMENT_KIND`); return its id.
    A deleted experiment of that name is refused: MLflow keeps the name until it is restored or garbage-collected."""
    client = client_for(workdir)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        uri = tracking_uri(workdir)
        try:
            return client.create_experiment(name, artifact_location=artifact_location(name, uri),
                                            tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except MlflowException as err:
            # Another process (a DDP rank, a parallel arm) created it between our look-up and create.
            if err.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise
            experiment = client.get_experiment_by_name(name)
    if experiment.lifecycle_stage == "deleted":
        raise BvrError(f"MLflow experiment '{name}' was deleted", where=tracking_uri(workdir),
                       hint=f"restore it (mlflow experiments restore --experiment-id {experiment.experiment_id}) "
                            "or choose another experiment name")
    return experiment.experiment_id


_INFO_COLUMNS = ["run_id", "experiment_id", "status", "artifact_uri", "start_time", "end_time"]


def _run_row(run: mlflow.entities.Run) -> dict[str, Any]:
    """One row in the layout of ``mlflow.search_runs``: info columns, then metrics.*, params.*, tags.*."""
    row: dict[str, Any] = {key: getattr(run.info, key) for key in _INFO_COLUMNS}
    row.update({key: pd.to_datetime(row[key], unit="ms", utc=True) for key in ("start_time", "end_time")})
    for kind in ("metrics", "params", "tags"):
        row.update({f"{kind}.{key}": value for key, value in getattr(run.data, kind).items()})
    return row


def find_runs(experiment: str, *, filter_string: str = "", workdir: Path | None = None) -> pd.DataFrame:
    """The runs of an experiment as a DataFrame, in the layout of ``mlflow.search_runs`` (newest first), read without
    changing MLflow's process-wide tracking URI; an unknown experiment gives an empty frame."""
    client = client_for(workdir)
    found = client.get_experiment_by_name(experiment)
    runs: list[mlflow.entities.Run] = []
    token = None
    while found is not None:
        page = client.search_runs([found.experiment_id], filter_string, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    frame = pd.DataFrame([_run_row(run) for run in runs], columns=None if runs else _INFO_COLUMNS)
    rest = sorted(c for c in frame.columns if c not in _INFO_COLUMNS)
    return frame[_INFO_COLUMNS + rest]
