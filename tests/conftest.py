"""Shared test set-up: offline, quiet, small."""

from __future__ import annotations

import os

import pytest

from bvr.threads import quiet_waits

# Tests never reach the network: no hub downloads, no telemetry.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# Under pytest-xdist (``-n``), the workers share the cores: one torch thread each, and the same for the processes a
# test starts, or two workers on two cores would each spin two threads against the other. Whatever the thread count,
# OpenMP's workers sleep while they wait, as under the CLI (bvr.threads), for this process and those it starts.
quiet_waits()
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
    _new_sqlite_stores_from_one_schema()


def _new_sqlite_stores_from_one_schema() -> None:
    """A new SQLite MLflow store in this process gets its tables as a copy of the database MLflow made once.

    MLflow makes a store's tables (``mlflow.store.db.utils._initialize_tables``) from its initial schema and then
    every Alembic migration since: 2 to 4 s here, for each new store, and most tests run in a folder of their own, so
    for many that was half their time. The first new store of this process is made by MLflow itself, in a scratch
    database kept in memory; every later new store is written from it (SQLite's backup: its tables, indexes and the
    ``alembic_version`` row, page for page), through the store's own engine; MLflow's ``_verify_schema`` still checks
    its revision. Stores that exist are opened as before; processes a test starts (``bvr`` as a second process,
    ``python -c``) make theirs with MLflow's own migrations, as a user's do.
    """
    import sqlite3
    import threading

    import mlflow.store.db.utils as db_utils
    import mlflow.store.model_registry.sqlalchemy_store as registry_store

    migrate = db_utils._initialize_tables
    made: list[sqlite3.Connection] = []  # the database MLflow made, in memory
    lock = threading.Lock()

    def initialize(engine) -> None:
        if engine.dialect.name != "sqlite":
            return migrate(engine)
        with lock:
            if not made:
                made.append(_made_by_mlflow(migrate))
            db_utils._logger.info("Creating initial MLflow database tables...")  # as MLflow logs it (--verbose)
            connection = engine.raw_connection()
            try:
                made[0].backup(connection.driver_connection)
            finally:
                connection.close()

    db_utils._initialize_tables = initialize
    registry_store._initialize_tables = initialize  # imported by name there


def _made_by_mlflow(migrate):
    """An in-memory copy of the database that MLflow's ``migrate`` (its ``_initialize_tables``) makes."""
    import sqlite3
    import tempfile

    import sqlalchemy

    with tempfile.TemporaryDirectory() as folder:
        engine = sqlalchemy.create_engine(f"sqlite:///{folder}/mlflow.db")
        try:
            migrate(engine)
        finally:
            engine.dispose()
        copy = sqlite3.connect(":memory:", check_same_thread=False)
        with sqlite3.connect(f"{folder}/mlflow.db") as scratch:
            scratch.backup(copy)
        scratch.close()
    return copy


def pytest_collection_modifyitems(config, items):
    import torch

    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of tiny models (``pytestmark = pytest.mark.usefixtures("one_thread")``): other
    jobs share the machine, and a tiny model gains nothing from a second thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
