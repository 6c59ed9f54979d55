"""How runs are named and tagged (``ARM/STAGE[/TASK/seedN]``, ``bvr.*`` tags, the git commit), and the parent run of
an invocation under which every stage's run is nested."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import LoggedModelOutput, Metric, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.tracking.context.registry import resolve_tags
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_RUN_NOTE

from bvr.errors import BvrError
from bvr.locks import process_alive
from bvr.signals import is_interrupt
from bvr.tracking.params import log_batched
from bvr.tracking.store import client_for, ensure_experiment

TAG_ABLATION = "bvr.ablation"
TAG_ARM = "bvr.arm"
TAG_STAGE = "bvr.stage"
TAG_TASK = "bvr.task"
TAG_SEED = "bvr.seed"
TAG_COLLAPSED = "bvr.collapsed"
"""Set (``"true"``/``"false"``) on fine-tuning runs once it is known whether the run collapsed."""
TAG_GIT_COMMIT = "bvr.git_commit"
TAG_HOST = "bvr.host"
TAG_PID = "bvr.pid"
"""The machine and process that last opened the run: a run whose process died is closed (:func:`close_stale_runs`)."""
TAG_CLOSED = "bvr.closed"
TAG_LABEL = "bvr.label"
"""The model a run belongs to in an ablation, ``ARM-pSEED`` (``bvr.arm`` is then the arm alone)."""
TAG_PRETRAIN_SEED = "bvr.pretrain_seed"
TAG_DECLARED_PREFIX = "bvr.declared."
"""Prefix of the tags naming what an ablation arm changes: ``bvr.declared.masking.mode = static``."""
TAG_MEASURE = "bvr.measure"
"""Tag on every run that holds one model's headline on one measure: ``finetune/TASK``, ``probe/TASK``, ``blimp``."""

@dataclass(frozen=True)
class RunContext:
    """What a run belongs to, for its MLflow record: built by the ablation runner (per unit) or by a command.

    >>> context = RunContext(ablation="masking", label="static-p0", tags={"bvr.arm": "static"})
    >>> tags = run_tags(context, stage="pretrain")
    >>> tags["bvr.ablation"], tags["bvr.arm"], run_tags(RunContext(label="x"), stage="pretrain")["bvr.arm"]
    ('masking', 'static', 'x')
    >>> context.with_defaults("bvr-pretrain", "tiny").experiment, RunContext().with_defaults("bvr-pretrain", "tiny")
    ('masking', RunContext(experiment='bvr-pretrain', ablation=None, label='tiny', parent_run_id=None, tags={}))
    """

    experiment: str | None = None
    """The MLflow experiment; None: the ablation's name, else the command's default (:meth:`with_defaults`)."""
    ablation: str | None = None  # bvr.ablation; None: a lone command
    label: str | None = None
    """The model the run belongs to, the first part of its name (``static-p0/pretrain``); None: the command's
    default (the config's name, the checkpoint's run)."""
    parent_run_id: str | None = None  # the ablation's parent run, to nest under
    tags: Mapping[str, Any] = field(default_factory=dict)
    """The model's tags on every run of it (arm, label, pretraining seed, ``bvr.declared.KEY``); they win over the tags
    :func:`run_tags` derives from the fields."""

    def with_defaults(self, experiment: str, label: str) -> RunContext:
        """The context with its experiment (the ablation's, else ``experiment``) and label filled in."""
        return dataclasses.replace(self, experiment=self.experiment or self.ablation or experiment,
                                   label=self.label or label)


_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no git on PATH, or it hung
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit(repo: Path | None = None) -> str | None:
    """The commit checked out at ``repo`` (any folder of the work tree; None: the code that runs), with ``-dirty`` if
    tracked files changed (untracked ones do not count, as with ``git describe --dirty``); None outside git."""
    repo = Path(repo or _PACKAGE_DIR)
    commit = _git(repo, "rev-parse", "--verify", "HEAD")
    if not commit:
        return None
    changes = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return f"{commit}-dirty" if changes else commit


def run_name(arm: str, stage: str, task: str | None = None, seed: int | None = None) -> str:
    """The name of a nested run: ``ARM/STAGE[/TASK][/seedN]``.

    >>> run_name("roberta", "pretrain"), run_name("bert", "finetune", "mnli", 3)
    ('roberta/pretrain', 'bert/finetune/mnli/seed3')
    """
    parts = [arm, stage, *([task] if task else []), *([f"seed{seed}"] if seed is not None else [])]
    return "/".join(parts)


def _tag_value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def run_tags(context: RunContext, *, stage: str, task: str | None = None, seed: int | None = None,
             extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The ``bvr.*`` tags of a run, the git commit where known, and the host and process id that opened it. Tags
    whose value is None are left out (``tags.bvr.task = 'mnli'`` then filters only runs that have one); booleans are
    ``true``/``false``. ``extra`` wins over the context's tags, which win over the rest."""
    values = {TAG_ABLATION: context.ablation, TAG_ARM: context.label, TAG_STAGE: stage, TAG_TASK: task,
              TAG_SEED: seed, **_owner()}
    tags = {key: _tag_value(value) for key, value in values.items() if value is not None}
    commit = git_commit()
    if commit:
        tags[TAG_GIT_COMMIT] = commit
        tags[MLFLOW_GIT_COMMIT] = commit.removesuffix("-dirty")  # MLflow's UI links this one; it must be a sha
    tags.update({key: _tag_value(value) for key, value in context.tags.items()})
    tags.update({key: _tag_value(value) for key, value in (extra or {}).items()})
    return tags


def _owner() -> dict[str, Any]:
    return {TAG_HOST: socket.gethostname(), TAG_PID: os.getpid()}


def close_stale_runs(experiment: str, workdir: Path | None = None) -> list[str]:
    """Mark KILLED, with :data:`TAG_CLOSED` saying why, the runs of ``experiment`` left RUNNING by a process of this
    machine that no longer exists (MLflow would show them running forever); return their ids. Runs of other hosts,
    without :data:`TAG_HOST` and :data:`TAG_PID`, or of live processes are left alone."""
    client = client_for(workdir)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    host = socket.gethostname()
    filter_string = f"attributes.status = 'RUNNING' and tags.`{TAG_HOST}` = '{host}'"
    closed = []
    for run in client.search_runs([found.experiment_id], filter_string, max_results=10_000):
        pid = run.data.tags.get(TAG_PID, "")
        if not pid.isdigit() or int(pid) == os.getpid() or process_alive(int(pid)):
            continue
        client.set_tag(run.info.run_id, TAG_CLOSED, f"process {pid} on {host} ended without closing the run; "
                                                    "marked KILLED by the next invocation")
        client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.KILLED))
        closed.append(run.info.run_id)
    return closed


def resume_run(client: MlflowClient, run_id: str, experiment: str) -> None:
    """Mark an existing run as running again (as ``mlflow.start_run(run_id=...)`` does), after checking it, and
    record this process as its owner."""
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise BvrError(f"no MLflow run '{run_id}' in {client.tracking_uri}", where="--resume") from None
    found = client.get_experiment(run.info.experiment_id).name
    if found != experiment:
        raise BvrError(f"MLflow run '{run_id}' belongs to experiment '{found}', not '{experiment}'", where="--resume")
    client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
    log_batched(client, run_id, "tags", [RunTag(key, str(value)) for key, value in _owner().items()])


@contextlib.contextmanager
def parent_run(experiment: str, name: str, *, workdir: Path | None = None, tags: Mapping[str, str] | None = None,
               description: str | None = None, resume_run_id: str | None = None) -> Iterator[mlflow.entities.Run]:
    """Start (or resume, updating its tags) the parent run of one invocation in ``experiment`` (created if missing);
    end it FINISHED, FAILED or KILLED. MLflow's own context tags (user, source) join ``tags``; ``description`` is the
    run's description in the UI (``mlflow.note.content``). Yields the run as it was when started."""
    experiment_id = ensure_experiment(experiment, workdir)
    client = client_for(workdir)
    tags = dict(tags or {})
    if description is not None:
        tags[MLFLOW_RUN_NOTE] = description
    if resume_run_id:
        resume_run(client, resume_run_id, experiment)
        log_batched(client, resume_run_id, "tags", [RunTag(key, str(value)) for key, value in tags.items()])
        run_id = resume_run_id
    else:
        run_id = client.create_run(experiment_id, run_name=name, tags=resolve_tags(tags)).info.run_id
    with closed_on_error(client, run_id):
        yield client.get_run(run_id)
    client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))


SYSTEM_METRICS_SECONDS = 10.0
"""How often :func:`system_metrics` samples the machine."""


@contextlib.contextmanager
def system_metrics(run_id: str | None, uri: str, *, resume: bool = False) -> Iterator[None]:
    """Log the machine's load (MLflow's ``system/*`` metrics) to ``run_id`` every :data:`SYSTEM_METRICS_SECONDS`
    while the block runs; ``resume`` continues an earlier invocation's step count. None (a rank other than 0), or
    psutil missing: nothing is logged."""
    try:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
    except ImportError:  # psutil is an optional dependency of MLflow: nothing is logged
        run_id = None
    if run_id is None:
        yield
        return
    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
    monitor = SystemMetricsMonitor(run_id, sampling_interval=SYSTEM_METRICS_SECONDS, resume_logging=resume,
                                   tracking_uri=uri)
    monitor.start()
    try:
        yield
    finally:
        monitor.finish()
        # The loop publishes only after a full interval; a last sample makes every run, short ones too, say
        # what the machine did up to its end.
        monitor.collect_metrics()
        monitor.publish_metrics(monitor.aggregate_metrics())
        monitor.mlflow_logger.flush()


def end_status(err: BaseException | None) -> str:
    """The status a run ends with when ``err`` stops it: KILLED for an interrupt (Ctrl-C, SIGTERM, Lightning's exit
    after either: :func:`bvr.signals.is_interrupt`), FAILED for anything else.

    >>> end_status(KeyboardInterrupt()), end_status(ValueError("bad"))
    ('KILLED', 'FAILED')
    """
    return RunStatus.to_string(RunStatus.KILLED if is_interrupt(err) else RunStatus.FAILED)


def end_run(client: MlflowClient, run_id: str, status: str) -> None:
    """Mark a run ended while an error is on its way up; a store that cannot take it (its disk is full, its server
    gone) must not hide that error, and :func:`close_stale_runs` closes the run on the next invocation."""
    with contextlib.suppress(Exception):  # the error being raised is the one to report
        client.set_terminated(run_id, status)


@contextlib.contextmanager
def closed_on_error(client: MlflowClient, run_id: str | None) -> Iterator[None]:
    """End the run ``run_id`` KILLED or FAILED (:func:`end_status`) when the block raises; the error goes on. None (a
    DDP rank other than zero, which has no run) does nothing."""
    try:
        yield
    except BaseException as err:
        if run_id:
            end_run(client, run_id, end_status(err))
        raise


MODEL_METRIC_SECTION = "encoder"
"""The chart section of a logged model's metrics in its run (:func:`link_model`)."""


def link_model(client: MlflowClient, run_id: str, model_id: str, *, description: str,
               metrics: Mapping[str, float], step: int = 0, digits: int = 4) -> None:
    """Show a logged model as the run's output both ways in MLflow's UI: the run page lists it under "Logged
    models" (``source_run_id`` alone does not), and the model's page shows ``description`` (Markdown) and
    ``metrics`` (rounded to ``digits`` decimals, non-finite ones left out, logged at ``step``).

    MLflow keeps a model's metrics in its run's history, where under the run's own key a rounded copy would add a
    point to its curve; so ``val/mlm_loss`` goes in as ``encoder/val_mlm_loss``, one chart section (the UI makes a
    section of everything before a key's last ``/``).
    """
    client.log_outputs(run_id, [LoggedModelOutput(model_id, 0)])
    client.set_logged_model_tags(model_id, {MLFLOW_RUN_NOTE: description})
    now = int(time.time() * 1000)
    values = [Metric(f"{MODEL_METRIC_SECTION}/{key.replace('/', '_')}", round(float(v), digits), now, step,
                     model_id=model_id, run_id=run_id) for key, v in metrics.items() if math.isfinite(float(v))]
    if values:
        client.log_batch(run_id, metrics=values)
