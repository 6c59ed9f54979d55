"""Tracebacks where one line belongs (issue 53, item 7): what a hostile tester found ending in a traceback, or in the
right line after a thousand others, is now one line, said within seconds.

- Output targets: a file, a device, ``/proc`` or a file above the folder as ``bvr report --out``, ``bvr export
  OUT`` and ``bvr pretrain --output-dir``; a folder, a device, ``/proc`` or a file above it as ``bvr pipeline -o``.
- ``bvr ui --port`` outside 1 to 65535 (Python's OverflowError).
- The MLflow store: an unknown scheme in ``MLFLOW_TRACKING_URI``, PostgreSQL without its driver installed, a folder
  at ``mlflow.db`` (two minutes of SQLAlchemy's retries, then its traceback).
- A full disk during pretraining: MLflow logged each failed write to its store with a traceback before the last
  line, whose hint (run the same command again) bvr pretrain then refused for want of --resume.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import re
import socket
import sqlite3
import time
from pathlib import Path

import pytest
import sqlalchemy.exc
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

from bvr import tracking
from bvr.pretraining import run as pretraining_run  # imported here: the timed commands measure bvr, not imports
from bvr.write_checks import PRETRAIN_RESUME_HINT
from tests.reliability.conftest import error_line
from tests.reliability.test_markup import TINY
from tests.test_ablate import EXPERIMENT
from tests.test_prepare import write_wiki_corpus

needs_proc = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc here")
PROC_TARGET = Path("/proc/bvr-target")
"""A path no folder or file can be made at: ``/proc`` answers "No such file or directory" to a new name."""


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """The test's own working folder, with the default MLflow store (none yet) and no BVR_* folders."""
    for name in ("MLFLOW_TRACKING_URI", "BVR_OUTPUT_DIR", "BVR_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ---------------------------------------------------------------------------------------------------------------
# Output targets


def _a_file(workdir: Path) -> Path:
    (workdir / "a-file").write_text("the user's\n")
    return workdir / "a-file"


NOT_A_FILE = "choose a folder (a new or an existing one), not a file"
FOLDER_TARGETS = {
    "file": lambda workdir: (_a_file(workdir), "it exists and is not a folder", NOT_A_FILE),
    "dev-null": lambda workdir: (Path("/dev/null"), "it exists and is not a folder", NOT_A_FILE),
    "under-a-file": lambda workdir: (_a_file(workdir) / "sub", f"{workdir / 'a-file'} exists and is not a folder",
                                     NOT_A_FILE),
    "proc": lambda workdir: (PROC_TARGET, "/proc takes no new folders (No such file or directory)",
                             "choose a folder on a disk (a new or an existing one)"),
}
"""A folder target → (the path, why it cannot be the folder, the hint)."""
FOLDER_COMMANDS = {
    "report": ("reports folder (--out)", lambda workdir, target, checkpoint: (
        "report", "masking", "--out", target, "--output-dir", _manifest(workdir / "outputs"))),
    "export": ("model folder (OUT)", lambda workdir, target, checkpoint: ("export", checkpoint, target)),
    "pretrain": ("output folder (--output-dir)", lambda workdir, target, checkpoint: (
        "pretrain", "--data-dir", workdir / "nothing", "--output-dir", target)),
}
"""A command → (what its folder is, its arguments given the target)."""
FOLDER_CASES = [pytest.param(command, kind, marks=[needs_proc] if kind == "proc" else [], id=f"{command}-{kind}")
                for command in FOLDER_COMMANDS for kind in FOLDER_TARGETS
                if command != "pretrain" or kind == "proc"]  # pretrain's others were one line already


def _manifest(outputs: Path) -> Path:
    """``outputs`` with a manifest of ablation ``masking``, as far as ``bvr report`` reads before it writes."""
    folder = outputs / "ablations" / "masking-tiny-0123abcd"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"ablation": "masking", "preset": "tiny"}))
    return outputs


@pytest.mark.parametrize(("command", "kind"), FOLDER_CASES)
def test_an_output_folder_that_cannot_be_one_is_one_line(bvr, workdir, checkpoint, command, kind):
    target, why, hint = FOLDER_TARGETS[kind](workdir)
    what, args = FOLDER_COMMANDS[command]
    code, out, err = bvr(*args(workdir, target, checkpoint))
    assert code == 2 and out == ""
    assert error_line(err) == f"{target}: cannot use it as the {what}: {why}. {hint}"


def _a_socket(workdir: Path) -> Path:
    """A Unix socket in ``workdir``: a path that is not a file, standing in for ``/dev/null``, over which a write
    without the check would rename its file (as root, replacing the device)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind("a-socket")  # relative: the socket path's limit is 108 bytes
    server.close()
    return Path("a-socket")


FILE_TARGETS = {
    "folder": lambda workdir: (Path("a-folder"), "cannot write the pipeline file (--output) there: it is a folder",
                               "choose a file's name (a new file, or one bvr wrote)"),
    "device": lambda workdir: (_a_socket(workdir), "cannot write the pipeline file (--output) there: it is a device, "
                               "pipe or socket, not a file", "choose a file's name (a new file, or one bvr wrote)"),
    "proc": lambda workdir: (PROC_TARGET, "cannot write the pipeline file (--output): /proc takes no new files (No "
                             "such file or directory)", "choose a file on a disk"),
}
"""A ``bvr pipeline -o`` target → (the path, what is wrong, the hint)."""


@pytest.mark.parametrize("kind", [pytest.param(kind, marks=[needs_proc] if kind == "proc" else []) for kind in
                                  FILE_TARGETS])
def test_a_pipeline_file_that_cannot_be_one_is_one_line_and_nothing_is_written(bvr, workdir, kind):
    (workdir / "tiny-masking.yaml").write_text(EXPERIMENT)
    (workdir / "a-folder").mkdir()
    target, what, hint = FILE_TARGETS[kind](workdir)
    code, out, err = bvr("pipeline", "tiny-masking.yaml", "-o", target, "--force")
    assert code == 2 and out == ""
    assert error_line(err) == f"{target}: {what}. {hint}"
    assert sorted(path.name for path in workdir.iterdir()) == sorted(["tiny-masking.yaml", "a-folder", "a-socket"]
                                                                     if kind == "device" else
                                                                     ["tiny-masking.yaml", "a-folder"])


def test_a_pipeline_file_under_a_file_says_it_is_not_a_folder(bvr, workdir):
    (workdir / "tiny-masking.yaml").write_text(EXPERIMENT)
    _a_file(workdir)
    code, out, err = bvr("pipeline", "tiny-masking.yaml", "-o", "a-file/dvc.yaml")
    assert code == 2 and out == ""
    assert error_line(err) == ("--output a-file/dvc.yaml: a-file is not a folder. give a file in the repository's "
                               "root folder (dvc.yaml and .dvc/ sit there)")


# ---------------------------------------------------------------------------------------------------------------
# bvr ui --port


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_bvr_ui_on_a_port_out_of_range_is_one_line(bvr, workdir, monkeypatch, port):
    (workdir / "mlflow.db").touch()
    monkeypatch.setattr(tracking, "store_client", lambda uri: None)  # the port is checked before the UI starts
    code, out, err = bvr("ui", "--port", port)
    assert code == 2 and out == ""
    assert error_line(err) == (f"--port: {port} is not a port the UI can be reached at. pass one from 1 to 65535 "
                               "(default 5000)")


# ---------------------------------------------------------------------------------------------------------------
# The MLflow store

UNSET = "or unset MLFLOW_TRACKING_URI to log to ./mlflow.db"
STORES = {
    "unknown-scheme": ("bogus://x", "MLFLOW_TRACKING_URI: 'bogus://x' is not a store MLflow can log to (scheme "
                       "'bogus'). set it to sqlite:////ABSOLUTE/PATH/mlflow.db, a tracking server (http://HOST:PORT) "
                       f"or a database (postgresql://, mysql://, mssql://), {UNSET}"),
    "postgresql-without-driver": (
        "postgresql://bvr:secret@127.0.0.1:1/runs", "MLFLOW_TRACKING_URI: the MLflow store "
        "postgresql://bvr:***@127.0.0.1:1/runs needs the Python package 'psycopg' (its database driver), which is not "
        f"installed. pip install 'psycopg[binary]' where bvr runs, name an installed driver (SCHEME+DRIVER://), "
        f"{UNSET}"),
    "folder-at-mlflow-db": (None, "{workdir}/mlflow.db: the MLflow store is a folder, not an SQLite database file. "
                            "move it away (bvr then starts a new store there) or set MLFLOW_TRACKING_URI to the store "
                            "you mean (sqlite:////ABSOLUTE/PATH/mlflow.db)"),
}
"""A store → (MLFLOW_TRACKING_URI, None: ./mlflow.db, a folder; the line). The password is never shown."""


@pytest.mark.parametrize("command", ["pretrain", "ui"])
@pytest.mark.parametrize("store", STORES)
def test_a_store_mlflow_cannot_open_is_one_line_within_seconds(bvr, workdir, monkeypatch, store, command):
    uri, line = STORES[store]
    if store == "postgresql-without-driver" and importlib.util.find_spec("psycopg") is not None:
        pytest.skip("psycopg is installed here")
    if uri is None:
        (workdir / "mlflow.db").mkdir()
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    args = ("pretrain", "--data-dir", workdir / "nothing", "--output-dir", "out") if command == "pretrain" else ("ui",)
    start = time.monotonic()
    code, out, err = bvr(*args)
    assert time.monotonic() - start < 10  # a folder at mlflow.db: 107 s of SQLAlchemy's retries before
    assert code == 2 and out == ""
    assert error_line(err) == line.format(workdir=workdir)
    assert "secret" not in err


# ---------------------------------------------------------------------------------------------------------------
# A full disk during pretraining


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_wiki_corpus(tmp_path_factory.mktemp("corpus"), documents=20)


def _store_full(*args, **kwargs) -> None:
    """SQLite's answer to a write into a store on a full disk, as SQLAlchemy raises it (MLflow logs it, with its
    traceback, and raises it again)."""
    raise sqlalchemy.exc.OperationalError("INSERT INTO metrics", {}, sqlite3.OperationalError(
        "database or disk is full"))


def _export_full(*args, **kwargs) -> None:
    """The exported model's weights, written into a full disk."""
    raise OSError(errno.ENOSPC, "No space left on device", "out/runs/model/model.safetensors")


DISK_FULL = {"store": (SqlAlchemyStore, "_update_latest_metrics_if_necessary", _store_full),
             "export": (pretraining_run, "_export", _export_full)}
"""Where the disk fills → (what writes there, its name, the write that fails)."""


@pytest.mark.parametrize("where", DISK_FULL)
def test_a_full_disk_during_pretraining_is_one_line_whose_hint_works(bvr, workdir, corpus, where):
    args = ("--data-dir", corpus, "--output-dir", "out", *TINY)
    assert bvr("data", "prepare", *args)[0] == 0  # its progress bars apart
    args = ("pretrain", *args)
    owner, name, write = DISK_FULL[where]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(owner, name, write)
        code, out, err = bvr(*args)
    assert code == 2
    line = error_line(err)  # one line: MLflow's logged tracebacks were ~1,300 lines before
    assert re.fullmatch(r".+: cannot write it: the disk is full \([0-9.]+ [kMGT]?B free\)\. " +
                        re.escape(PRETRAIN_RESUME_HINT), line), line
    code, out, err = bvr(*args, "--resume")  # the hint, followed (the same command alone refuses the unfinished run)
    assert code == 0, err
    assert out.splitlines()[-3].startswith("finished: out/runs/pretrain-")
