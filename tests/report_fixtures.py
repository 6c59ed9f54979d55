"""A small finished ablation in a real MLflow store, laid out as ``bvr ablate`` leaves it, and its (version 2) manifest.

Two arms, static and dynamic, and the no-pretraining control, each at pretraining seeds 0, 1 and 2 (labels
``static-p0`` ... ``no-pretraining-p2``). Every model is scored zero-shot on BLiMP, probed on SST-2 with three probe
seeds, and fine-tuned on SST-2 (logged as a fraction) and SQuAD 2.0 (logged in points) with fine-tuning seeds 0 and 1.

The numbers are picked so every statistic can be worked out by hand (see ``tests/test_report.py``): :data:`UNITS`
holds each model's value in points (the mean over its inner seeds), the inner seeds sit symmetrically about it
(:data:`PROBE_OFFSETS`, :data:`FINETUNE_OFFSETS`), and the paired differences between arms are small whole or
tenth-point numbers with round means and standard deviations.

Runs are written with MlflowClient the way the training and evaluation code writes them: tags ``bvr.*`` and
``mlflow.runName`` (``LABEL/pretrain``, ``LABEL/blimp``, ``LABEL/probe/sst2``, ``LABEL/finetune/TASK/seedN``), nested
under ``mlflow.parentRunId``, metric histories with steps (a probe's headline key holds one value per probe seed at
step = seed, then their mean at the last step, as ``bvr/evaluation/run.py`` logs it), the config as flattened params.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

from bvr import tracking
from bvr.ablation.manifest import Manifest
from bvr.ablation.records import Record

ABLATION = "masking"
ARMS = ("static", "dynamic")
CONTROL = "no-pretraining"
ALL_ARMS = (*ARMS, CONTROL)
PRETRAIN_SEEDS = (0, 1, 2)
TASKS = ("sst2", "squad_v2")
FINETUNE_SEEDS = (0, 1)
PROBE_SEEDS = (0, 1, 2)
MAIN_KEYS = {"sst2": "dev/accuracy", "squad_v2": "dev/f1"}
BLIMP_KEY = "blimp/macro_accuracy"
PROBE_KEY = "probe/sst2/accuracy"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
BLIMP_DATA = Path(__file__).parent / "fixtures"
"""The data folder the manifest names: it holds ``blimp/models_summary.jsonl`` with three paradigms."""

UNITS: dict[tuple[str, str], tuple[float, ...]] = {
    # (measure, arm) -> each pretraining seed's value in points (the mean over its probe or fine-tuning seeds).
    ("blimp", CONTROL): (50.0, 52.0, 48.0),
    ("blimp", "static"): (70.0, 74.0, 66.0),  # static - control: 20, 22, 18
    ("blimp", "dynamic"): (73.0, 76.0, 70.0),  # dynamic - static: 3, 2, 4; dynamic - control: 23, 24, 22
    ("probe/sst2", CONTROL): (52.0, 54.0, 50.0),
    ("probe/sst2", "static"): (67.0, 70.0, 64.0),  # static - control: 15, 16, 14
    ("probe/sst2", "dynamic"): (68.0, 69.0, 67.0),  # dynamic - static: 1, -1, 3; dynamic - control: 16, 15, 17
    ("sst2", CONTROL): (55.0, 57.0, 53.0),
    ("sst2", "static"): (80.0, 84.0, 76.0),  # static - control: 25, 27, 23
    ("sst2", "dynamic"): (82.0, 86.1, 77.9),  # dynamic - static: 2, 2.1, 1.9; dynamic - control: 27, 29.1, 24.9
    ("squad_v2", CONTROL): (50.0, 51.0, 49.0),
    ("squad_v2", "static"): (68.0, 70.0, 66.0),  # static - control: 18, 19, 17
    ("squad_v2", "dynamic"): (68.0, 69.5, 66.5),  # dynamic - static: 0, -0.5, 0.5; dynamic - control: 18, 18.5, 17.5
}
PROBE_OFFSETS = (-1.0, 0.0, 1.0)
"""Probe seeds 0, 1, 2 score the model's value plus these points: within-model SD 1."""
FINETUNE_OFFSETS = (-1.0, 1.0)
"""Fine-tuning seeds 0 and 1 score the model's value plus these points: within-model SD sqrt(2)."""
PARADIGMS = {"anaphor_gender_agreement": ("anaphor_agreement", 6.0), "principle_A_case_2": ("binding", 0.0),
             "only_npi_scope": ("npi_licensing", -6.0)}
"""BLiMP paradigm -> (its linguistic term, its accuracy minus the model's macro accuracy, in points)."""
MLM_LOSS = {"static": (3.0, 3.1, 2.9), "dynamic": (2.9, 2.95, 2.85)}
"""Final validation MLM loss per pretraining seed (nats): dynamic - static = -0.10, -0.15, -0.05."""
COLLAPSED = {(CONTROL, "sst2", 2, 0)}
"""(arm, task, pretraining seed, fine-tuning seed) of the runs that predict one class: the control's p2 s0."""
BASELINES = {"blimp": 0.5, "probe/sst2": 0.509, "sst2": 0.509, "squad_v2": 50.0}
"""Trivial baselines as logged: chance on BLiMP, the majority class on SST-2, empty answers on SQuAD 2.0."""
BOW = 0.778
"""The SST-2 probe's bag-of-words baseline as logged (the same for every model)."""
CACHED_BEFORE_BOW = "static-p0"
"""The model whose probe result was cached before the bag-of-words baseline existed: its run does not log it."""
PARAMS = (4_200_000, 1_000_000)
"""(total, embedding) parameters of every pretrained model."""


def label(arm: str, seed: int) -> str:
    """The model's label: the MLflow run-name prefix and ``bvr.arm`` tag (``static-p1``)."""
    return f"{arm}-p{seed}"


def logged(measure: str, value: float) -> float:
    """A value in points as the run logs it: a fraction, except SQuAD's points."""
    return value if measure == "squad_v2" else value / 100


def _config(arm: str, seed: int) -> dict[str, Any]:
    # The static arm's seed 1 without a sentence objective, so that a run's own objective is seen to be reported.
    objective = {"sentence_objective": ("nsp" if seed != 1 else "none") if arm == "static" else "sop"}
    return {"name": arm, "tokenizer": {"family": "bert", "vocab_size": 1000},
            "data": {"input_format": "segment-pair", **objective, "max_length": 64},
            "masking": {"mode": arm if arm in ARMS else "dynamic", "dupe_factor": 10},
            "model": {"family": "bert", "num_layers": 2, "hidden_size": 64, "num_heads": 2},
            "training": {"batch_size": 8, "max_steps": 300, "learning_rate": 5e-4, "seed": seed},
            "corpus": {"source": "plain", "max_documents": 50}}


@dataclass
class Store:
    """The filled store: its folder, a client, the manifest and the parent run."""

    workdir: Path
    client: MlflowClient
    manifest: Manifest
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


def _pretrain(client: MlflowClient, experiment_id: str, arm: str, seed: int, parent: str) -> dict[str, Any]:
    """One pretraining run; returns its manifest entry."""
    name = label(arm, seed)
    run_id = _run(client, experiment_id, f"{name}/pretrain",
                  {"bvr.arm": name, "bvr.stage": "pretrain", "bvr.pretrain_seed": str(seed)}, parent)
    total, embedding = PARAMS
    final = {"wall_seconds": 120.0 if arm == "static" else 100.0, "tokens_seen": 153_600.0, "params_total": total,
             "params_embedding": embedding, "params_non_embedding": total - embedding, "epochs": 12.0,
             "mask_distinct_per_sequence": 10.0 if arm == "static" else 12.0, "mask_max_times_seen": 2.0}
    metrics = [(f"run/{k}", float(v), 0) for k, v in final.items()]
    for step in range(10, 301, 10):
        metrics += [("train/mlm_loss", 7.0 - step / 100 - (0.1 if arm == "dynamic" else 0.0) + 0.01 * seed, step),
                    ("train/tokens_seen", 512.0 * step, step),
                    ("train/tokens_per_s", 1280.0 if arm == "static" else 1536.0, step)]
    loss = MLM_LOSS[arm][seed]
    for step, extra in ((100, 1.0), (200, 0.4), (300, 0.0)):
        metrics += [("val/mlm_loss", loss + extra, step), ("val/perplexity", math.exp(loss + extra), step)]
    _log(client, run_id, metrics, params=tracking.flatten_params(_config(arm, seed)))
    return {"arm": arm, "label": name, "pretrain_seed": seed, "status": "done", "run_id": run_id,
            "run_dir": f"outputs/runs/pretrain-{name}", "error": None,
            "metrics": {**final, "val/mlm_loss": loss, "val/perplexity": math.exp(loss)}}


def _blimp(client: MlflowClient, experiment_id: str, arm: str, seed: int, parent: str) -> dict[str, Any]:
    """One model's BLiMP run: macro accuracy, three paradigms and their terms; returns the manifest entry."""
    name = label(arm, seed)
    run_id = _run(client, experiment_id, f"{name}/blimp",
                  {"bvr.arm": name, "bvr.stage": "blimp", "bvr.pretrain_seed": str(seed),
                   "bvr.checkpoint": f"outputs/runs/{name}/model"}, parent)
    macro = UNITS[("blimp", arm)][seed] / 100
    metrics = [(BLIMP_KEY, macro, 0), ("blimp/micro_accuracy", macro, 0), ("blimp/pairs", 300.0, 0),
               ("run/wall_seconds", 30.0, 0)]
    for paradigm, (term, offset) in PARADIGMS.items():
        metrics += [(f"blimp/paradigm/{paradigm}", macro + offset / 100, 0),
                    (f"blimp/term/{term}", macro + offset / 100, 0)]
    _log(client, run_id, metrics, params={"evaluation": json.dumps({"kind": "blimp", "per_paradigm": 100})})
    return {"arm": arm, "label": name, "pretrain_seed": seed, "kind": "blimp", "task": None, "status": "done",
            "run_id": run_id, "main_key": BLIMP_KEY, "score": macro, "seeds": {"0": macro},
            "baseline": BASELINES["blimp"], "seconds": 30.0, "error": None}


def _probe(client: MlflowClient, experiment_id: str, arm: str, seed: int, parent: str) -> dict[str, Any]:
    """One model's SST-2 probe over three probe seeds; returns the manifest entry."""
    name = label(arm, seed)
    run_id = _run(client, experiment_id, f"{name}/probe/sst2",
                  {"bvr.arm": name, "bvr.stage": "probe", "bvr.task": "sst2", "bvr.pretrain_seed": str(seed),
                   "bvr.checkpoint": f"outputs/runs/{name}/model"}, parent)
    unit = UNITS[("probe/sst2", arm)][seed]
    seeds = {s: (unit + offset) / 100 for s, offset in zip(PROBE_SEEDS, PROBE_OFFSETS, strict=True)}
    mean = sum(seeds.values()) / len(seeds)
    metrics = [(PROBE_KEY, value, s) for s, value in seeds.items()]  # history: step = probe seed ...
    metrics += [(PROBE_KEY, mean, max(seeds) + 1),  # ... then the mean, the latest value
                ("probe/sst2/mean/accuracy", mean, 0), ("probe/sst2/cls/accuracy", mean - 0.02, 0),
                ("probe/sst2/baseline/accuracy", BASELINES["probe/sst2"], 0), ("run/wall_seconds", 12.0, 0)]
    if name != CACHED_BEFORE_BOW:
        metrics.append(("probe/sst2/bow/accuracy", BOW, 0))
    _log(client, run_id, metrics, params={"evaluation": json.dumps({"kind": "probe", "task": "sst2"})})
    return {"arm": arm, "label": name, "pretrain_seed": seed, "kind": "probe", "task": "sst2", "status": "done",
            "run_id": run_id, "main_key": PROBE_KEY, "score": mean, "seeds": {str(s): v for s, v in seeds.items()},
            "baseline": BASELINES["probe/sst2"], "seconds": 12.0, "error": None}


def _finetune(client: MlflowClient, experiment_id: str, arm: str, seed: int, task: str,
              parent: str) -> list[dict[str, Any]]:
    """The task's parent run and one run per fine-tuning seed; returns the manifest's entries."""
    name, key = label(arm, seed), MAIN_KEYS[task]
    tags = {"bvr.arm": name, "bvr.stage": "finetune", "bvr.task": task}
    task_run = _run(client, experiment_id, f"{name}/finetune/{task}", tags, parent)
    unit = UNITS[(task, arm)][seed]
    entries, scores = [], []
    for ft_seed, offset in zip(FINETUNE_SEEDS, FINETUNE_OFFSETS, strict=True):
        score = logged(task, unit + offset)
        collapsed = (arm, task, seed, ft_seed) in COLLAPSED
        run_id = _run(client, experiment_id, f"{name}/finetune/{task}/seed{ft_seed}",
                      {**tags, "bvr.seed": str(ft_seed)}, task_run)
        _log(client, run_id, [(key, score * 0.9, 10), (key, score, 20), (f"best/{key}", score, 0),
                              ("run/wall_seconds", 3.0, 0)],
             tags={"bvr.collapsed": "true" if collapsed else "false"})
        scores.append(score)
        entries.append({"arm": arm, "label": name, "pretrain_seed": seed, "task": task, "seed": ft_seed,
                        "status": "done", "run_id": run_id, "parent_run_id": task_run, "main_key": key,
                        "score": score, "collapsed": collapsed, "seconds": 3.0,
                        "baseline": {key: BASELINES[task]}, "error": None})
    _log(client, task_run, [(f"{key}_median", sorted(scores)[len(scores) // 2], 0)])
    return entries


def fill_store(workdir: Path) -> Store:
    """Write the ablation's runs into the default store of ``workdir``; return the store and the manifest."""
    experiment_id = tracking.ensure_experiment(ABLATION, workdir)
    client = MlflowClient(tracking.tracking_uri(workdir))
    parent = _run(client, experiment_id, ABLATION, {"bvr.stage": "ablation"}, None)
    pretrain = [_pretrain(client, experiment_id, arm, seed, parent) for arm in ARMS for seed in PRETRAIN_SEEDS]
    evaluations, finetune = [], []
    for arm in ALL_ARMS:
        for seed in PRETRAIN_SEEDS:
            evaluations += [_blimp(client, experiment_id, arm, seed, parent),
                            _probe(client, experiment_id, arm, seed, parent)]
            for task in TASKS:
                finetune += _finetune(client, experiment_id, arm, seed, task, parent)
    client.set_terminated(parent, "FINISHED")
    return Store(workdir, client, Manifest.from_dict(manifest(parent, pretrain, evaluations, finetune)), parent,
                 experiment_id)


@contextlib.contextmanager
def filled(workdir: Path) -> Iterator[Store]:
    """:func:`fill_store` in ``workdir``, which stays the working directory (anything MLflow writes relative to it
    lands there) with ``MLFLOW_TRACKING_URI`` unset, for the block: a module-scoped fixture's store."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.chdir(workdir)
        yield fill_store(workdir)


def manifest(parent: str, pretrain: list[dict], evaluations: list[dict], finetune: list[dict]) -> dict[str, Any]:
    """The runner's manifest.json for the runs above (:meth:`bvr.ablation.manifest.Manifest.new`'s layout, every
    unit done)."""
    labels = [label(arm, seed) for arm in ALL_ARMS for seed in PRETRAIN_SEEDS]
    return {
        "version": 2, "ablation": ABLATION, "experiment": ABLATION,
        "description": "Static masking against dynamic masking, at test scale.",
        "source": "experiments/masking.yaml", "preset": "tiny", "overrides": ["training.max_steps=300"],
        "plan_hash": "0123abcd4567", "parent_run_id": parent, "published": "masking",
        "arms": list(ALL_ARMS), "labels": labels, "control_arm": CONTROL,
        "declared": {"static": {"masking.mode": "static"}, "dynamic": {"masking.mode": "dynamic"}},
        "configs": {label(arm, seed): _config(arm, seed) for arm in ALL_ARMS for seed in PRETRAIN_SEEDS},
        "pretrain_seeds": list(PRETRAIN_SEEDS), "tasks": list(TASKS), "finetune_seeds": list(FINETUNE_SEEDS),
        "finetune_hparams": {},
        "evaluations_settings": {"blimp": True, "blimp_per_paradigm": 100, "blimp_seed": 0, "probe_tasks": ["sst2"],
                                 "probe_seeds": len(PROBE_SEEDS), "probe_features": "mean",
                                 "probe_max_train_examples": 4000, "probe_max_eval_examples": None},
        "pretrain": pretrain, "evaluations": evaluations, "finetune": finetune,
        "context": {"git_commit": COMMIT, "data_dir": str(BLIMP_DATA), "output_dir": "/work/outputs",
                    "started": "2026-11-22T10:00:00+00:00", "updated": "2026-11-22T10:30:00+00:00",
                    "wall_seconds": 1800.0,
                    "hardware": {"platform": "Linux-6.1-x86_64", "python": "3.11.9", "torch": "2.13.0+cpu",
                                 "cpu": "Test CPU", "cpu_count": 2, "gpu": None, "gpu_count": 0}},
    }


def variant(base: Manifest, ablation: str | None = None) -> Manifest:
    """A deep copy of a manifest, optionally renamed (same experiment, so the same runs)."""
    out = copy.deepcopy(base)
    if ablation:
        out.ablation = ablation
    return out


def entry(manifest: Manifest, section: str, **match: Any) -> Record:
    """The one record of ``manifest.SECTION`` whose fields equal ``match`` (``label='static-p0', task='sst2'``)."""
    [found] = [e for e in getattr(manifest, section) if all(getattr(e, k) == v for k, v in match.items())]
    return found
