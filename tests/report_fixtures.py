"""A small finished ablation in a real MLflow store, laid out as ``bvr ablate`` leaves it, and its manifest.

Two arms and the no-pretraining control, fine-tuned on SST-2 (logged as a fraction) and SQuAD 2.0 (logged in
points) over three seeds. The scores are picked so the statistics can be worked out by hand (see
``tests/test_report.py``): medians are middle values, and the paired differences are small whole numbers of points.
Runs are written with MlflowClient the way the training code writes them: tags ``bvr.*`` and ``mlflow.runName``,
nested under ``mlflow.parentRunId``, metric histories with steps, the config as flattened params.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

from bvr import tracking

ABLATION = "masking"
ARMS = ("static", "dynamic")
CONTROL = "no-pretraining"
TASKS = ("sst2", "squad_v2")
SEEDS = (0, 1, 2)
MAIN_KEYS = {"sst2": "dev/accuracy", "squad_v2": "dev/f1"}
COMMIT = "0123456789abcdef0123456789abcdef01234567"

SCORES: dict[tuple[str, str], tuple[float, ...]] = {
    # (arm, task) -> the final score of seeds 0, 1, 2, as logged.
    ("static", "sst2"): (0.80, 0.82, 0.78),
    ("dynamic", "sst2"): (0.83, 0.84, 0.81),  # dynamic - static: +3, +2, +3 points
    (CONTROL, "sst2"): (0.50, 0.51, 0.49),
    ("static", "squad_v2"): (40.0, 42.0, 41.0),
    ("dynamic", "squad_v2"): (40.5, 41.5, 41.0),  # dynamic - static: +0.5, -0.5, 0 points
    (CONTROL, "squad_v2"): (5.0, 6.0, 4.0),
}
COLLAPSED = {(CONTROL, "sst2", 2)}
"""The control's third SST-2 seed predicts one class."""

PERPLEXITY = {"static": (60.0, 30.0, 20.0), "dynamic": (55.0, 28.0, 18.5)}
"""Validation perplexity at steps 100, 200, 300."""

PARAMS = {"static": (4_200_000, 1_000_000), "dynamic": (4_200_000, 1_000_000)}
"""(total, embedding) parameters."""


def _config(arm: str) -> dict[str, Any]:
    return {"name": arm, "tokenizer": {"family": "bert", "vocab_size": 1000},
            "data": {"input_format": "segment-pair", "nsp": True, "max_length": 64},
            "masking": {"mode": arm if arm in ARMS else "dynamic", "dupe_factor": 10},
            "model": {"family": "bert", "num_layers": 2, "hidden_size": 64, "num_heads": 2},
            "training": {"batch_size": 8, "max_steps": 300, "lr": 5e-4},
            "corpus": {"source": "plain", "max_documents": 50}}


@dataclass
class Store:
    """The filled store: its folder, a client, the manifest and the parent run."""

    workdir: Path
    client: MlflowClient
    manifest: dict[str, Any]
    parent_run_id: str
    experiment_id: str


def _run(client: MlflowClient, experiment_id: str, name: str, tags: dict[str, str], parent: str | None) -> str:
    tags = {MLFLOW_RUN_NAME: name, "bvr.ablation": ABLATION, "bvr.git_commit": COMMIT, **tags}
    if parent:
        tags[MLFLOW_PARENT_RUN_ID] = parent
    return client.create_run(experiment_id, run_name=name, tags=tags).info.run_id


def _log(client: MlflowClient, run_id: str, metrics: list[tuple[str, float, int]], params: dict[str, str] | None = None,
         tags: dict[str, str] | None = None) -> None:
    client.log_batch(run_id, metrics=[Metric(k, v, 1_700_000_000_000 + s, s) for k, v, s in metrics],
                     params=[Param(k, v) for k, v in (params or {}).items()],
                     tags=[RunTag(k, v) for k, v in (tags or {}).items()])
    client.set_terminated(run_id, "FINISHED")


def _pretrain(client: MlflowClient, experiment_id: str, arm: str, parent: str) -> tuple[str, dict[str, float]]:
    run_id = _run(client, experiment_id, f"{arm}/pretrain", {"bvr.arm": arm, "bvr.stage": "pretrain"}, parent)
    total, embedding = PARAMS[arm]
    final = {"wall_seconds": 120.0 if arm == "static" else 100.0, "tokens_seen": 153_600.0, "params_total": total,
             "params_embedding": embedding, "params_non_embedding": total - embedding, "epochs": 12.0,
             "mask_distinct_per_sequence": 10.0 if arm == "static" else 12.0, "mask_max_times_seen": 2.0}
    metrics = [(f"run/{k}", float(v), 0) for k, v in final.items()]
    for step in range(10, 301, 10):
        metrics += [("train/mlm_loss", 7.0 - step / 100 - (0.1 if arm == "dynamic" else 0.0), step),
                    ("train/tokens_seen", 512.0 * step, step),
                    ("train/tokens_per_s", 1280.0 if arm == "static" else 1536.0, step)]
    for step, ppl in zip((100, 200, 300), PERPLEXITY[arm], strict=True):
        metrics += [("val/perplexity", ppl, step), ("val/mlm_loss", 3.0 - step / 300, step)]
    _log(client, run_id, metrics, params=tracking.flatten_params(_config(arm)))
    return run_id, {**final, "val/perplexity": PERPLEXITY[arm][-1]}


def _finetune(client: MlflowClient, experiment_id: str, arm: str, task: str, parent: str) -> list[dict[str, Any]]:
    """The task's parent run and one run per seed; returns the manifest's units."""
    key = MAIN_KEYS[task]
    tags = {"bvr.arm": arm, "bvr.stage": "finetune", "bvr.task": task}
    task_run = _run(client, experiment_id, f"{arm}/finetune/{task}", tags, parent)
    units = []
    for seed, score in zip(SEEDS, SCORES[(arm, task)], strict=True):
        collapsed = (arm, task, seed) in COLLAPSED
        run_id = _run(client, experiment_id, f"{arm}/finetune/{task}/seed{seed}", {**tags, "bvr.seed": str(seed)},
                      task_run)
        _log(client, run_id, [(key, score * 0.9, 10), (key, score, 20), (f"best/{key}", score, 0),
                              ("run/wall_seconds", 3.0, 0)],
             tags={"bvr.collapsed": "true" if collapsed else "false"})
        units.append({"arm": arm, "pretrain_seed": 0, "task": task, "seed": seed, "status": "done", "run_id": run_id,
                      "parent_run_id": task_run, "main_key": key, "score": score, "collapsed": collapsed,
                      "seconds": 3.0, "baseline": {key: 0.5}, "error": None})
    _log(client, task_run, [(f"{key}_median", sorted(SCORES[(arm, task)])[1], 0)])
    return units


def fill_store(workdir: Path) -> Store:
    """Write the ablation's runs into the default store of ``workdir``; return the store and the manifest."""
    experiment_id = tracking.ensure_experiment(ABLATION, workdir)
    client = MlflowClient(tracking.tracking_uri(workdir))
    parent = _run(client, experiment_id, ABLATION, {"bvr.stage": "ablation"}, None)
    pretrain, finetune = [], []
    for arm in ARMS:
        run_id, metrics = _pretrain(client, experiment_id, arm, parent)
        pretrain.append({"arm": arm, "pretrain_seed": 0, "status": "done", "run_id": run_id,
                         "run_dir": f"outputs/runs/pretrain-{arm}", "error": None, "metrics": metrics})
    for arm in (*ARMS, CONTROL):
        for task in TASKS:
            finetune += _finetune(client, experiment_id, arm, task, parent)
    client.set_terminated(parent, "FINISHED")
    return Store(workdir, client, manifest(parent, pretrain, finetune), parent, experiment_id)


def manifest(parent: str, pretrain: list[dict], finetune: list[dict]) -> dict[str, Any]:
    """The runner's manifest for the runs above."""
    return {
        "version": 1, "ablation": ABLATION, "experiment": ABLATION,
        "description": "Static masking against dynamic masking, at test scale.",
        "source": "experiments/masking.yaml", "preset": "tiny", "overrides": ["training.max_steps=300"],
        "plan_hash": "0123abcd4567", "parent_run_id": parent, "published": "masking",
        "arms": [*ARMS, CONTROL], "control_arm": CONTROL,
        "declared": {"static": {"masking.mode": "static"}, "dynamic": {"masking.mode": "dynamic"}},
        "configs": {arm: _config(arm) for arm in (*ARMS, CONTROL)},
        "pretrain_seeds": [0], "tasks": list(TASKS), "finetune_seeds": list(SEEDS),
        "pretrain": pretrain, "finetune": finetune,
        "context": {"git_commit": COMMIT, "data_dir": "/data/bvr", "started": "2026-11-22T10:00:00+00:00",
                    "updated": "2026-11-22T10:30:00+00:00", "wall_seconds": 1800.0,
                    "hardware": {"platform": "Linux-6.1-x86_64", "python": "3.11.9", "torch": "2.13.0+cpu",
                                 "cpu": "Test CPU", "cpu_count": 2, "gpu": None, "gpu_count": 0}},
    }


def variant(base: dict[str, Any], ablation: str | None = None) -> dict[str, Any]:
    """A deep copy of a manifest, optionally renamed (same experiment, so the same runs)."""
    out = copy.deepcopy(base)
    if ablation:
        out["ablation"] = ablation
    return out
