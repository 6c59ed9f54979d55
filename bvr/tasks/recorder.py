"""The MLflow record of one :func:`bvr.tasks.run.finetune` call, kept in one place (:class:`TaskRecorder`).

The call's run ``ARM/finetune/TASK`` (started with the first seed this process logs) holds one run
``ARM/finetune/TASK/seedN`` per seed, tagged ``bvr.task``, ``bvr.seed``, ``bvr.arm``, ``bvr.stage=finetune``,
``bvr.checkpoint``, ``bvr.from_scratch`` and ``bvr.result`` (:meth:`TaskRecorder.open_seed`), then given its
outcome (:meth:`TaskRecorder.record_seed`) and its ``result.json``; a seed cached by another experiment gets a copy
of its run here (:meth:`TaskRecorder.copy_seeds`). The call's run ends with the spread of the headline score over
the seeds (:meth:`TaskRecorder.record_spread`). A grid puts a run per point between them,
``ARM/finetune/TASK/lr 1e-03, 2 epochs`` tagged ``bvr.grid_point`` (:meth:`TaskRecorder.for_point`); once chosen
(:meth:`TaskRecorder.record_choice`) each is tagged ``bvr.chosen`` true or false and holds its seeds' median
selection score, and the call's run names the chosen point.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from bvr.config import FinetuneConfig, GridPoint
from bvr.tasks.evaluators import EvalRecord
from bvr.tasks.registry import TaskSpec
from bvr.tasks.results import SeedResult, TaskInfo, spread
from bvr.tasks.selection import Selection
from bvr.tracking import (
    TAG_COLLAPSED,
    TAG_MEASURE,
    DataInput,
    RunContext,
    client_for,
    ensure_experiment,
    log_config,
    log_inputs,
    log_params_batched,
    parent_run,
    run_name,
    run_tags,
)
from bvr.tracking.placed import TAG_RESULT, copy_run
from bvr.training import training_logger

TAG_CHECKPOINT = "bvr.checkpoint"
TAG_FROM_SCRATCH = "bvr.from_scratch"
TAG_DATA_SPLIT = "bvr.data_split"
TAG_GRID_POINT = "bvr.grid_point"
TAG_CHOSEN = "bvr.chosen"
SCORE_KEY = "score"
"""The headline score in points, under one name for every task (a seed's final score; the median over seeds on the
task's run), so that MLflow's runs table grouped by ``bvr.arm`` shows one comparable column."""
_MAX_TAG = 5000


class TaskRecorder(contextlib.ExitStack):
    """The MLflow runs of one fine-tuning call: a context manager that ends the call's run on leaving. Each seed's
    run nests under the call's run, which nests under the context's parent run."""

    def __init__(self, context: RunContext, spec: TaskSpec, checkpoint: str, from_scratch: bool, *,
                 point: GridPoint | None = None, outer: TaskRecorder | None = None) -> None:
        super().__init__()
        self.context, self.spec, self.checkpoint, self.from_scratch = context, spec, checkpoint, from_scratch
        self.point = point
        self.main_key = f"{spec.headline_split}/{spec.main_metric}"
        self.client = client_for(Path.cwd())
        self.experiment_id = ensure_experiment(context.experiment, Path.cwd())
        self._outer = outer
        parent_id = context.parent_run_id
        extra = {TAG_CHECKPOINT: checkpoint, TAG_FROM_SCRATCH: from_scratch, TAG_MEASURE: f"finetune/{spec.name}",
                 **({MLFLOW_PARENT_RUN_ID: parent_id} if parent_id and outer is None else {}),
                 **({TAG_GRID_POINT: point.name} if point else {})}
        self._name = run_name(context.label, "finetune", spec.name) + (f"/{point.name}" if point else "")
        self._tags = run_tags(context, stage="finetune", task=spec.name, extra=extra)
        self.parent_run_id: str | None = None  # None while this process has logged no seed (every one reused)

    def parent_id(self) -> str:
        """The call's run ``ARM/finetune/TASK`` (a grid point's run, under it), started with the first seed this
        process logs (trains or copies): where another process trained every seed meanwhile (twin invocations wait
        on each seed's lock), none is started, so each seed is logged once."""
        if self.parent_run_id is None:
            tags = {**self._tags, **({MLFLOW_PARENT_RUN_ID: self._outer.parent_id()} if self._outer else {})}
            run = self.enter_context(parent_run(self.context.experiment, self._name, workdir=Path.cwd(), tags=tags))
            self.parent_run_id = run.info.run_id
        return self.parent_run_id

    def for_point(self, point: GridPoint) -> TaskRecorder:
        """The recorder of one grid point: its run nests under this call's run, its seeds under it."""
        return TaskRecorder(self.context, self.spec, self.checkpoint, self.from_scratch, point=point, outer=self)

    def record_choice(self, points: list[TaskRecorder], selection: Selection) -> None:
        """The grid's choice: each point's run (where this process started it) tagged chosen or not, with its
        seeds' median selection score; the call's run names the chosen point and holds each point's median."""
        for i, (recorder, summary) in enumerate(zip(points, selection.points, strict=True)):
            if recorder.parent_run_id is not None:
                run_id = recorder.parent_run_id
                self.client.set_tag(run_id, TAG_CHOSEN, json.dumps(i == selection.chosen))
                self.client.log_metric(run_id, f"{selection.metric}_median", summary["median"])
        if self.parent_run_id is not None:
            run_id = self.parent_run_id
            self.client.set_tag(run_id, TAG_GRID_POINT, selection.chosen_point["name"])
            self.client.log_text(run_id, json.dumps(selection.to_dict(), indent=2) + "\n", "selection.json")

    def copy_seeds(self, elsewhere: dict[int, tuple[SeedResult, TaskInfo]],
                   dirs: dict[int, Path]) -> dict[int, SeedResult]:
        """Each seed whose run another experiment sharing this cache logged, its run copied under the call's run."""
        copied = {}
        for seed, (cached, _) in elsewhere.items():
            tags = run_tags(self.context, stage="finetune", task=self.spec.name, seed=seed,
                            extra={TAG_RESULT: dirs[seed].name})
            copied[seed] = dataclasses.replace(cached, run_id=copy_run(
                self.client, str(cached.run_id), self.experiment_id, parent_run_id=self.parent_id(), tags=tags))
        return copied

    def open_seed(self, seed: int, key: str, cfg: FinetuneConfig, info: TaskInfo, inputs: list[DataInput]) -> Any:
        """The Lightning logger of the seed's run under the call's run, tagged as made for the cache folder named
        ``key``, with its config and the task's files (``inputs``) logged."""
        extra = {TAG_CHECKPOINT: self.checkpoint, TAG_COLLAPSED: False, TAG_FROM_SCRATCH: self.from_scratch,
                 TAG_RESULT: key, **({TAG_GRID_POINT: self.point.name} if self.point else {}),
                 "bvr.threads": str(torch.get_num_threads())}  # the budget the command or ablation set (bvr.threads)
        if info.split_note:
            extra[TAG_DATA_SPLIT] = info.split_note[:_MAX_TAG]
        logger = training_logger(dataclasses.replace(self.context, parent_run_id=self.parent_id()), stage="finetune",
                                 task=self.spec.name, seed=seed, extra=extra)
        log_config(logger, None, {"task": self.spec.name, "seed": seed, "checkpoint": self.checkpoint,
                                  "from_scratch": self.from_scratch, "finetune": cfg.as_dict()})
        log_inputs(logger.experiment, logger.run_id, inputs)
        return logger

    def record_seed(self, result: SeedResult, info: TaskInfo, record: EvalRecord, files: list[Path]) -> None:
        """The seed's outcome into its run: best and baseline scores, ``score`` in points, ``bvr.collapsed``, the
        data report (``data.txt``), then the headline split's ``files`` as artifacts, its params and metrics."""
        run_id = str(result.run_id)
        metrics = {f"best/{key}": value for key, value in result.best_scores.items()}
        metrics.update({f"baseline/{key}": value for key, value in info.baseline.items()})
        metrics.update({"best/epoch": float(result.best_epoch), "run/wall_seconds": result.seconds,
                        SCORE_KEY: result.scores[self.main_key] * self.spec.points_scale})
        for key, value in metrics.items():
            self.client.log_metric(run_id, key, value)
        self.client.set_tag(run_id, TAG_COLLAPSED, json.dumps(result.collapsed))
        self.client.log_text(run_id, "\n".join([*info.reports, info.split_note or ""]).strip() + "\n", "data.txt")
        for path in files:
            self.client.log_artifact(run_id, str(path))
        log_params_batched(self.client, run_id, record.params)
        for key, value in record.metrics.items():
            self.client.log_metric(run_id, key, value)

    def record_result_file(self, result: SeedResult, path: Path) -> None:
        """The seed's cached ``result.json`` as an artifact of its run, from which a folder deleted later is read
        back."""
        self.client.log_artifact(str(result.run_id), str(path))

    def record_spread(self, info: TaskInfo | None, seeds: list[SeedResult]) -> None:
        """The spread of the headline score over ``seeds`` (``_median``, ``_min``, ..., ``score`` in points), the
        baseline and the collapsed seeds, on the call's run where this process started it."""
        if self.parent_run_id is None:
            return
        run_id, key = self.parent_run_id, self.main_key
        for name, value in spread([seed.scores[key] for seed in seeds]).items():
            self.client.log_metric(run_id, f"{key}_{name}", value)
            if name == "median":
                self.client.log_metric(run_id, SCORE_KEY, value * self.spec.points_scale)
        for name, value in (info.baseline if info else {}).items():
            self.client.log_metric(run_id, f"baseline/{name}", value)
        collapsed = sum(seed.collapsed for seed in seeds)
        self.client.log_metric(run_id, "collapsed_seeds", float(collapsed))
        self.client.set_tag(run_id, TAG_COLLAPSED, json.dumps(collapsed > 0))
