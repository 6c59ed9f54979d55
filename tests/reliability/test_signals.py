"""Where Ctrl-C and SIGTERM may stop a run: Lightning's loop after a batch, never inside a store write or a
checkpoint; a stop ends the run KILLED; a second SIGTERM ends the process at once; what the stopped command says."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from mlflow import MlflowClient
from sqlalchemy.engine import default
from torch import nn

from bvr import signals
from bvr.logger import BvrMLFlowLogger
from bvr.signals import Terminated, handle_sigterm, is_interrupt, signals_deferred
from bvr.tracking import RunContext, closed_on_error, end_status, store_client, tracking_uri
from bvr.tracking.store import SQLiteClient
from bvr.training import TrainerSettings, build_trainer, quiet_fit, training_logger

ROOT = Path(__file__).resolve().parents[2]


class _Regression(L.LightningModule):
    """A one-weight regression, eight batches an epoch, logging its loss every step."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        loss = self.w(batch[0]).pow(2).mean()
        self.log("train/loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(16, 1)), batch_size=2)


class _SignalAt(L.Callback):
    """Send this process ``signum`` at the end of optimiser step ``step``, and note that the hook ran on past it."""

    def __init__(self, step: int, signum: int = signal.SIGTERM) -> None:
        self.step, self.signum, self.ran_on = step, signum, False

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)
            self.ran_on = True


def _fit(tmp_path: Path, monkeypatch, max_steps: int, at: _SignalAt, *, closed: bool) -> tuple[L.Trainer, str]:
    """Fit under the CLI's handler (and, if ``closed``, :func:`closed_on_error`, as the commands do); return the
    trainer and the run's final status."""
    monkeypatch.chdir(tmp_path)
    logger = training_logger(RunContext(experiment="signals", label="a"), stage="pretrain")
    settings = TrainerSettings(precision="32-true", accelerator="cpu", log_every_steps=1, max_steps=max_steps)
    trainer = build_trainer(tmp_path, settings, logger, progress=False, callbacks=[at])
    before = signal.getsignal(signal.SIGTERM)
    closing = closed_on_error(logger.experiment, logger.run_id) if closed else contextlib.nullcontext()
    with pytest.raises(Terminated), handle_sigterm(), closing, quiet_fit():
        trainer.fit(_Regression())
    assert signal.getsignal(signal.SIGTERM) is before
    return trainer, MlflowClient(tracking_uri(tmp_path)).get_run(logger.run_id).info.status


def test_sigterm_in_a_fit_stops_it_after_the_batch_and_ends_the_run_killed(tmp_path, monkeypatch):
    """The handler raises nothing inside the loop (it could land in a store write or a C++ callback): the hook that
    sent the signal runs on, Lightning stops after that batch, and its stop comes out as Terminated."""
    at = _SignalAt(3)
    trainer, status = _fit(tmp_path, monkeypatch, 100, at, closed=False)
    assert at.ran_on
    assert trainer.global_step == 3
    assert status == "KILLED"  # by the logger, as Lightning's clean-up ends it


def test_sigterm_in_the_last_batch_is_raised_when_the_fit_returns(tmp_path, monkeypatch):
    """Lightning does not stop a loop that has just finished: the fit returns, then the SIGTERM is raised."""
    trainer, status = _fit(tmp_path, monkeypatch, 4, _SignalAt(4), closed=True)
    assert trainer.global_step == 4
    assert status == "KILLED"  # all its steps ran, but not what follows the fit (export, evaluation)


def test_a_lightning_stop_on_sigterm_is_an_interrupt_and_ends_a_run_killed():
    assert is_interrupt(SIGTERMException()) and end_status(SIGTERMException()) == "KILLED"
    assert not is_interrupt(SystemExit(0)) and end_status(SystemExit(0)) == "FAILED"


def test_a_second_sigterm_ends_the_process_without_waiting_for_clean_up(tmp_path):
    script = textwrap.dedent("""
        import os, signal, sys, time
        from bvr.signals import Terminated, handle_sigterm
        with handle_sigterm():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10)
            except Terminated:
                print("clean-up", flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10)
                print("not reached", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (proc.returncode, proc.stdout) == (-signal.SIGTERM, "clean-up\n"), proc.stderr


def _interrupt_after(statement_start: str):
    """``do_execute`` that sends this process Ctrl-C right after the first statement starting so has run (inside
    the write's transaction: more statements follow)."""
    real, armed = default.DefaultDialect.do_execute, [True]

    def do_execute(self, cursor, statement, parameters, context=None):
        result = real(self, cursor, statement, parameters, context)
        if armed[0] and statement.lstrip().upper().startswith(statement_start):
            armed[0] = False
            os.kill(os.getpid(), signal.SIGINT)
        return result

    return do_execute


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt while the test runs (Python's own handler), whatever handler an earlier test
    or library left installed; the previous handler is put back after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield previous
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_a_write_to_an_sqlite_store_is_raised_once_the_write_is_whole(tmp_path, monkeypatch,
                                                                                    ctrl_c_raises):
    client = store_client(tracking_uri(tmp_path))
    assert isinstance(client, SQLiteClient)
    run_id = client.create_run(client.create_experiment("writes")).info.run_id
    monkeypatch.setattr(default.DefaultDialect, "do_execute", _interrupt_after("INSERT INTO METRICS"))
    with pytest.raises(KeyboardInterrupt):
        client.log_metric(run_id, "loss", 0.5, step=1)
    monkeypatch.undo()
    client.set_terminated(run_id, "KILLED")
    run = client.get_run(run_id)
    assert run.data.metrics == {"loss": 0.5} and run.info.status == "KILLED"
    # The same signal through a plain client cuts the write: the metric is lost (what SQLiteClient prevents).
    plain = MlflowClient(tracking_uri(tmp_path))
    monkeypatch.setattr(default.DefaultDialect, "do_execute", _interrupt_after("INSERT INTO METRICS"))
    with pytest.raises(KeyboardInterrupt):
        plain.log_metric(run_id, "lost", 0.5, step=1)
    monkeypatch.undo()
    assert "lost" not in plain.get_run(run_id).data.metrics


def test_the_training_logger_and_server_stores_get_the_right_client(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    logger = training_logger(RunContext(experiment="clients", label="a"), stage="pretrain")
    assert isinstance(logger, BvrMLFlowLogger) and isinstance(logger.experiment, SQLiteClient)
    server = store_client("http://127.0.0.1:9")  # no request is made until a call
    assert type(server) is MlflowClient


def test_deferred_signals_are_delivered_once_at_the_end_of_the_outermost_block():
    received = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        with signals_deferred():
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)
            assert received == []
        assert received == [signal.SIGINT]
        assert not signals.sigterm_received()
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(("command", "interrupt", "code", "line"), [
    (["config", "show"], KeyboardInterrupt, 130, "interrupted; run the same command again"),
    (["config", "show"], Terminated, 143, "terminated (SIGTERM); run the same command again"),
    (["data", "prepare"], KeyboardInterrupt, 130, "interrupted; run the same command again to continue from the "
                                                  "finished stages"),
    (["pretrain"], Terminated, 143, "terminated (SIGTERM) before the run finished; run the same command again to "
                                    "continue from the finished stages (bvr pretrain: with --resume)"),
], ids=["config-ctrl-c", "config-sigterm", "data-prepare-ctrl-c", "pretrain-sigterm"])
def test_an_interrupt_advises_resuming_only_commands_that_keep_stages(bvr, monkeypatch, command, interrupt, code,
                                                                       line):
    import bvr.config as config

    def interrupted(*args, **kwargs):
        raise interrupt

    monkeypatch.setattr(config, "load_config", interrupted)
    status, _, err = bvr(*command)
    assert (status, " ".join(err.split())) == (code, line)
