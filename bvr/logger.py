"""The Lightning logger of bvr runs: Lightning's MLFlowLogger writing to the bvr store, without side effects.

Kept apart from :mod:`bvr.tracking` so that what only reads or organises runs (reports, the ablation runner's
bookkeeping) does not import Lightning.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import mlflow
from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities import rank_zero_only
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from bvr.tracking import (
    artifact_location,
    client_for,
    end_run,
    end_status,
    ensure_experiment,
    flatten_params,
    log_params_batched,
    resume_run,
    store_client,
    tracking_uri,
)


@contextlib.contextmanager
def _mlflow_globals_kept() -> Iterator[None]:
    """Undo what ``mlflow.set_tracking_uri`` (called by Lightning's logger as it starts its run) does to the process:
    left in place, ``MLFLOW_TRACKING_URI`` would make every later :func:`tracking_uri` return this store."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    # Private, but the only way to tell "never set" from "set"; if it moves, "never set" is the usual case.
    service = getattr(getattr(mlflow.tracking, "_tracking_service", None), "utils", None)
    previous = getattr(service, "_tracking_uri", None)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)
        if env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env


class BvrMLFlowLogger(MLFlowLogger):
    """Lightning's MLFlowLogger, without its side effects on MLflow's globals, logging params like bvr.

    The stock logger cuts param values at 250 characters and joins nested keys with ``/``; hyperparameters
    saved by a LightningModule would then disagree with the config logged by :func:`log_config`. It also sets
    MLflow's process-wide tracking URI (and ``MLFLOW_TRACKING_URI``) when it starts its run; this one restores
    them. It ends a run that Ctrl-C or SIGTERM stopped KILLED, not FAILED. And its client is the store's
    (:func:`bvr.tracking.store_client`), whose calls on an SQLite store Ctrl-C and SIGTERM do not cut.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._mlflow_client = store_client(self._tracking_uri)
        self._logged_through = _logged_steps(self._mlflow_client, kwargs["run_id"]) if kwargs.get("run_id") else {}
        """Metric key -> the last step the resumed run logged: a resumed run computes again the steps after its
        last checkpoint, which the run already has; they are not logged twice."""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if self._logged_through and step is not None:
            metrics = {key: value for key, value in metrics.items() if step > self._logged_through.get(key, -1)}
            if not metrics:
                return
        super().log_metrics(metrics, step)

    @property
    def experiment(self) -> MlflowClient:
        with _mlflow_globals_kept():
            return super().experiment

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        """End the run; Lightning says ``failed`` for an interrupt too, which ends it KILLED here (and a store that
        cannot take the status must not hide the error Lightning is handling)."""
        if status != "failed":
            super().finalize(status)
        elif self._initialized:
            end_run(self.experiment, self.run_id, end_status(sys.exc_info()[1]))

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        params = vars(params) if not isinstance(params, Mapping) else params
        log_params_batched(self.experiment, self.run_id, flatten_params(params))


def _logged_steps(client: MlflowClient, run_id: str) -> dict[str, int]:
    """Each metric's last logged step in run ``run_id`` (empty when the run cannot be read: nothing is dropped)."""
    try:
        keys = list(client.get_run(run_id).data.metrics)
        return {key: max(m.step for m in client.get_metric_history(run_id, key)) for key in keys}
    except Exception:  # noqa: BLE001 - a store that cannot answer now fails the run's first log, with its message
        return {}


@rank_zero_only
def _prepare_rank_zero(experiment: str, workdir: Path | None, run_id: str | None) -> None:
    """Create the experiment (with the bvr artifact location) and reopen a resumed run, once per job."""
    ensure_experiment(experiment, workdir)
    if run_id:
        resume_run(client_for(workdir), run_id, experiment)


def make_logger(experiment: str, *, run_name: str, tags: Mapping[str, str], parent_run_id: str | None = None,
                workdir: Path | None = None, run_id: str | None = None) -> MLFlowLogger:
    """A Lightning logger writing one (nested) run to the bvr store.

    Only global rank zero touches the store; the run itself is created when Lightning first logs. Metric keys
    are kept as given (``train/mlm_loss``); checkpoints are not uploaded (``log_model=False``): they live in the
    cache. ``run_id`` logs into that existing run instead (``--resume``), marked running again.
    """
    uri = tracking_uri(workdir)
    tags = dict(tags)
    if parent_run_id:
        tags[MLFLOW_PARENT_RUN_ID] = parent_run_id
    _prepare_rank_zero(experiment, workdir, run_id)
    return BvrMLFlowLogger(experiment_name=experiment, run_name=run_name, tracking_uri=uri, tags=tags, log_model=False,
                           artifact_location=artifact_location(experiment, uri), run_id=run_id)
