"""A cached result's MLflow run, in the experiment that asks for it. Caches are keyed by content, so two ablations
sharing an output folder share results (one control model, scored once), but a report reads its own experiment
only. So each run made from a cache entry carries the entry's name (:data:`TAG_RESULT`): another experiment gets its
own copy of the run (:func:`copy_run`), and a rebuilt cache entry finds the run it had (:func:`logged_run`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, RunStatus
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from bvr.tracking.params import log_batched, log_params_batched

TAG_RESULT = "bvr.result"
"""The name of the cache entry a run was made from (an evaluation's result file, a fine-tuning seed's folder)."""

TAG_COPIED_FROM = "bvr.copied_from"
"""On a copy made by :func:`copy_run`: the run it copies (in another experiment)."""

_METRICS_PER_BATCH = 1000  # MLflow's limit on one log_batch request


def stored_run(client: MlflowClient, run_id: str | None) -> Any:
    """The run ``run_id`` of this store, or None where it has none."""
    try:
        return client.get_run(run_id) if run_id else None
    except MlflowException:
        return None


def finished(client: MlflowClient, run_id: str | None, experiment_id: str | None = None) -> bool:
    """Whether ``run_id`` is a FINISHED run, not deleted, of experiment ``experiment_id`` (None: of any)."""
    run = stored_run(client, run_id)
    return (run is not None and run.info.status == "FINISHED" and run.info.lifecycle_stage == "active"
            and experiment_id in (None, run.info.experiment_id))

def logged_run(client: MlflowClient, experiment_id: str, key: str) -> str | None:
    """The newest FINISHED run of the experiment made from cache entry ``key``, or None."""
    query = f"tags.`{TAG_RESULT}` = '{key}' and attributes.status = 'FINISHED'"
    runs = client.search_runs([experiment_id], query, max_results=1, order_by=["attributes.start_time DESC"])
    return runs[0].info.run_id if runs else None


def newest_run(client: MlflowClient, experiment: str, query: str, tags: dict[str, str]) -> str | None:
    """The newest run of ``experiment`` (by name) that matches the search ``query`` and holds ``tags`` (compared
    here, not in the query: a value may hold what a search filter cannot quote), or None."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], query, max_results=1000, order_by=["attributes.start_time DESC"])
    return next((run.info.run_id for run in runs
                 if all(run.data.tags.get(key) == value for key, value in tags.items())), None)


def download(client: MlflowClient, run_id: str, name: str, folder: Path) -> Path | None:
    """Download the run's artifact ``name`` (at the artifacts' top) into ``folder``; None when it has none."""
    try:
        return Path(client.download_artifacts(run_id, name, str(folder)))
    except (MlflowException, OSError):
        return None


def copy_run(client: MlflowClient, run_id: str, experiment_id: str, *, parent_run_id: str | None,
             tags: dict[str, Any], artifacts: bool = True) -> str:
    """Copy run ``run_id`` into experiment ``experiment_id``: its name, params, every metric's history, datasets,
    tags (``tags`` replace the source's; its parent becomes ``parent_run_id``) and, with ``artifacts``, its
    artifacts. The copy ends FINISHED and names its source (:data:`TAG_COPIED_FROM`). Returns the copy's id."""
    source = client.get_run(run_id)
    kept = {key: value for key, value in source.data.tags.items()
            if key != MLFLOW_PARENT_RUN_ID and not key.startswith("mlflow.log-model")}
    kept.update({key: str(value) for key, value in tags.items()})
    kept[TAG_COPIED_FROM] = run_id
    if parent_run_id:
        kept[MLFLOW_PARENT_RUN_ID] = parent_run_id
    copy = client.create_run(experiment_id, start_time=source.info.start_time, tags=kept,
                             run_name=source.info.run_name).info.run_id
    log_params_batched(client, copy, source.data.params)
    metrics = [Metric(key, m.value, m.timestamp, m.step) for key in sorted(source.data.metrics)
               for m in client.get_metric_history(run_id, key)]
    log_batched(client, copy, "metrics", metrics, _METRICS_PER_BATCH)
    if source.inputs and source.inputs.dataset_inputs:
        client.log_inputs(copy, datasets=list(source.inputs.dataset_inputs))
    with tempfile.TemporaryDirectory(prefix="bvr-copy-") as folder:
        if artifacts and client.list_artifacts(run_id):
            client.log_artifacts(copy, client.download_artifacts(run_id, "", folder))
    client.set_terminated(copy, RunStatus.to_string(RunStatus.FINISHED), end_time=source.info.end_time)
    return copy


def run_here(client: MlflowClient, experiment_id: str, run_id: str | None, key: str, *, parent_run_id: str | None,
             tags: dict[str, Any], artifacts: bool = True) -> str | None:
    """The run of cache entry ``key`` in experiment ``experiment_id``: ``run_id`` where it is there, else the run
    logged here from that entry before, else a copy of a finished ``run_id`` (:func:`copy_run`); else None."""
    if finished(client, run_id, experiment_id):
        return run_id
    found = logged_run(client, experiment_id, key)
    if found or not finished(client, run_id):
        return found
    return copy_run(client, str(run_id), experiment_id, parent_run_id=parent_run_id,
                    tags={**tags, TAG_RESULT: key}, artifacts=artifacts)
