"""Exhausted resources and interruption: a full disk or read-only folder is one line naming the path, the up-front
checks refuse before long work starts, an unreachable tracking server is refused in seconds, MLflow runs end FAILED
or KILLED, and the exit statuses are those of the README's table."""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from bvr import cli, signals, write_checks
from bvr.checkpoints import AtomicCheckpointIO
from bvr.config import load_config
from bvr.pretraining.prepare import prepare
from bvr.tracking import closed_on_error, ensure_experiment, tracking_uri
from bvr.write_checks import WriteError, check_free_space, check_writable, write_error
from tests.test_prepare import write_wiki_corpus

ROOT = Path(__file__).resolve().parents[2]
Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def free(monkeypatch):
    """Pretend every disk has 1.5 MB free."""
    monkeypatch.setattr(write_checks.shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 1_500_000, 1_500_000))


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["bvr", *args])
    with pytest.raises(SystemExit) as info:
        cli.main()
    return info.value.code, capsys.readouterr().err


def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_last_good_one(tmp_path, monkeypatch, free):
    io, path = AtomicCheckpointIO(), tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"global_step": 4, "state_dict": {}}, path)

    def disk_full(obj, file) -> None:
        file.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(WriteError) as info:
        io.save_checkpoint({"global_step": 8, "state_dict": {}}, path)
    assert info.value.one_line() == (
        f"{path}: cannot write the checkpoint: the disk is full (1.5 MB free). the last good checkpoint is kept: free "
        "space (or choose another --output-dir) and run the same command with --resume (bvr ablate: the same command)")
    monkeypatch.undo()
    assert io.load_checkpoint(path)["global_step"] == 4
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]


@pytest.mark.parametrize("raised", [
    lambda path: OSError(errno.ENOSPC, "No space left on device", str(path)),
    lambda path: OSError(errno.EDQUOT, "Disk quota exceeded", str(path)),
    # safetensors, tokenizers and SQLite say it only in words; the path comes from the OSError it was raised from
    lambda path: _raised_from(Exception("Error while serializing: I/O error: No space left on device (os error 28)"),
                              OSError(errno.ENOSPC, "No space left on device", str(path))),
])
def test_a_full_disk_anywhere_is_one_line_on_the_command_line_with_exit_2(tmp_path, monkeypatch, capsys, free,
                                                                         raised):
    import bvr.config

    target = tmp_path / "out" / "cache" / "corpus-1234" / "data.arrow"

    def fail(*args, **kwargs):
        raise raised(target)

    monkeypatch.setattr(bvr.config, "load_config", fail)
    code, err = run_main(monkeypatch, capsys, "config", "show")
    assert code == 2
    assert err == (f"error: {target}: cannot write it: the disk is full (1.5 MB free). free space (or choose another "
                   "--output-dir) and run the same command again: finished stages are reused\n")


def _raised_from(err: Exception, cause: BaseException) -> Exception:
    err.__cause__ = cause
    return err


def test_a_failure_said_only_in_words_names_the_path_given_and_other_errors_are_not_write_errors(tmp_path, free):
    full = write_error(RuntimeError("database or disk is full"), tmp_path / "mlflow.db")
    assert full.one_line().startswith(f"{tmp_path / 'mlflow.db'}: cannot write it: the disk is full (1.5 MB free)")
    read_only = write_error(Exception("Read-only file system (os error 30)"), tmp_path / "tok" / "tokenizer.json")
    assert read_only.one_line() == (
        f"{tmp_path / 'tok' / 'tokenizer.json'}: cannot write it: {tmp_path} is on a read-only file system. make it "
        "writable or choose another folder (--output-dir, or run bvr from a writable working folder)")
    assert write_error(ValueError("no space for this argument"), tmp_path) is None
    assert write_error(OSError(errno.ENOENT, "No such file or directory", "x")) is None


@pytest.mark.parametrize(("code", "reason"), [(errno.EROFS, "is on a read-only file system"),
                                              (errno.EACCES, "is not writable by this user")])
def test_an_output_folder_that_cannot_be_written_is_refused_up_front(tmp_path, monkeypatch, capsys, code, reason):
    # As root a chmod does not stop writes, so the file system's answer is simulated where the check creates its file.
    def refuse(prefix, dir):
        raise OSError(code, os.strerror(code), str(Path(dir) / f"{prefix}x"))

    monkeypatch.setattr(write_checks.tempfile, "mkstemp", refuse)
    out = tmp_path / "out"
    code_, err = run_main(monkeypatch, capsys, "data", "prepare", "--data-dir", str(tmp_path), "--output-dir", str(out))
    assert code_ == 2
    assert err == (f"error: {out}/.bvr-write-check-x: cannot write the output folder (--output-dir): {out} {reason}. "
                   "make it writable or choose another folder (--output-dir, or run bvr from a writable working "
                   "folder)\n")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only (0o555) folder: chmod cannot simulate it")
def test_a_read_only_folder_is_refused(tmp_path):
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(WriteError, match="is not writable by this user"):
            check_writable(tmp_path, "output folder (--output-dir)")
    finally:
        tmp_path.chmod(0o755)


def test_a_writable_folder_passes_and_is_left_as_it_was(tmp_path):
    assert check_writable(tmp_path / "new" / "out", "output folder") == tmp_path / "new" / "out"
    assert list((tmp_path / "new" / "out").iterdir()) == []


def test_too_little_free_space_is_refused_with_needed_and_free(tmp_path, free):
    check_free_space(tmp_path, 1_500_000, "the corpus stage")  # exactly enough
    with pytest.raises(WriteError) as info:
        check_free_space(tmp_path, 1_500_001, "the corpus stage")
    assert info.value.one_line() == (f"{tmp_path}: the corpus stage needs about 1.5 MB of disk, but only 1.5 MB is "
                                     "free there. free space or choose another --output-dir, then run the same command")


def test_preparing_data_refuses_when_the_corpus_stage_cannot_fit(tmp_path, monkeypatch):
    data = write_wiki_corpus(tmp_path / "data", documents=10)
    corpus_bytes = sum(p.stat().st_size for p in (data / "corpus" / "wiki").rglob("*") if p.is_file())
    left = corpus_bytes - 1  # the corpus stage needs its input's size (STAGE_DISK)
    monkeypatch.setattr(write_checks.shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - left, left))
    cfg = load_config(overrides=["corpus.path=corpus/wiki"], extra={"data_dir": str(data),
                                                                    "output_dir": str(tmp_path / "out")})
    with pytest.raises(WriteError, match=re.escape(f"the corpus stage (from {data / 'corpus' / 'wiki'}) needs about")):
        prepare(cfg, progress=False)
    assert [p.name for p in (tmp_path / "out" / "cache").iterdir()] == [p.name for p in (tmp_path / "out" / "cache")
                                                                       .glob(".*.lock")]  # nothing half-built


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_an_unreachable_tracking_server_is_refused_in_seconds_before_any_data(tmp_path, monkeypatch, capsys):
    port = _closed_port()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    code, err = run_main(monkeypatch, capsys, "pretrain", "--data-dir", str(tmp_path / "nothing"),
                         "--output-dir", str(tmp_path / "out"))
    assert time.perf_counter() - start < 5
    assert code == 2
    assert err == (f"error: MLFLOW_TRACKING_URI: the MLflow tracking server http://127.0.0.1:{port} does not answer "
                   "([Errno 111] Connection refused). start the server (mlflow server --host HOST --port PORT), or "
                   "unset MLFLOW_TRACKING_URI to log to the local store (./mlflow.db)\n")
    assert not (tmp_path / "out").exists()


def test_a_run_ends_failed_on_an_error_and_killed_on_an_interrupt(tmp_path):
    client = MlflowClient(tracking_uri(tmp_path))  # one store: creating one takes seconds
    experiment = ensure_experiment("closing", tmp_path)

    def lightnings_exit() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            sys.exit(1)  # what Lightning does once it has cleaned up after Ctrl-C

    def ended(raise_, expected: type[BaseException]) -> str:
        run_id = client.create_run(experiment).info.run_id
        with pytest.raises(expected), closed_on_error(client, run_id):
            raise_()
        return client.get_run(run_id).info.status

    def error() -> None:
        raise ValueError("bad")

    def interrupt() -> None:
        raise KeyboardInterrupt

    assert ended(error, ValueError) == "FAILED"
    assert ended(interrupt, KeyboardInterrupt) == "KILLED"
    assert ended(lightnings_exit, SystemExit) == "KILLED"


EXIT_ROW = re.compile(r"^\| (\d+) \|", re.MULTILINE)


def test_the_readme_lists_the_exit_statuses_the_code_uses():
    readme = (ROOT / "README.md").read_text()
    assert [int(code) for code in EXIT_ROW.findall(readme)] == [0, 1, 2, 130, 143]


def test_exit_statuses(monkeypatch, capsys):
    import bvr.config

    assert run_main(monkeypatch, capsys, "config", "show")[0] in (0, None)
    assert run_main(monkeypatch, capsys, "config", "show", "--set", "masking.mask_prob=2")[0] == 2
    assert run_main(monkeypatch, capsys, "config", "show", "--no-such-option")[0] == 2

    def raise_(err):
        def fail(*args, **kwargs):
            raise err
        return fail

    monkeypatch.setattr(bvr.config, "load_config", raise_(KeyboardInterrupt()))
    assert run_main(monkeypatch, capsys, "config", "show")[0] == 130
    monkeypatch.setattr(bvr.config, "load_config", raise_(signals.Terminated()))
    code, err = run_main(monkeypatch, capsys, "config", "show")
    assert (code, " ".join(err.split())) == (143, "terminated (SIGTERM); run the same command again")
    monkeypatch.setattr(bvr.config, "load_config", raise_(RuntimeError("a bug")))
    monkeypatch.setattr(sys, "argv", ["bvr", "config", "show"])
    with pytest.raises(RuntimeError, match="a bug"):  # Python prints its traceback and exits 1
        cli.main()
    assert signal.getsignal(signal.SIGTERM) is not signals._on_sigterm  # the handler lives only as long as main()


TINY = [
    "corpus.path=corpus/wiki", "tokenizer.vocab_size=400", "data.max_length=64", "model.num_layers=1",
    "model.hidden_size=32", "model.num_heads=4", "model.intermediate_size=64", "training.batch_size=8",
    "training.max_steps=100000", "training.checkpoint_every_steps=2", "training.val_every_steps=1000",
    "training.log_every_steps=2", "training.num_workers=0",
]


def test_sigterm_during_pretraining_ends_the_run_killed_with_exit_143(tmp_path):
    data = write_wiki_corpus(tmp_path / "data", documents=60)
    work = tmp_path / "work"
    work.mkdir()
    args = [sys.executable, "-m", "bvr.cli", "pretrain", "--data-dir", str(data), "--output-dir", str(work / "out")]
    for override in TINY:
        args += ["--set", override]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MLFLOW_TRACKING_URI": ""}
    proc = subprocess.Popen(args, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list((work / "out" / "runs").glob("pretrain-*/checkpoints/last.ckpt")):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert " ".join(err.split()).endswith("terminated (SIGTERM) before the run finished; run the same command again "
                                          "to continue from the finished stages (bvr pretrain: with --resume)")
    assert "Traceback" not in err
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("bvr-pretrain").experiment_id])
    assert [run.info.status for run in runs] == ["KILLED"]
    shutil.rmtree(work / "out", ignore_errors=True)
