"""Read an ablation's runs back from MLflow, guided by the runner's manifest.

The manifest (:class:`bvr.ablation.manifest.Manifest`) says which arms, tasks and seeds there should be and the MLflow
run id of each unit; every number a report prints comes from that run, read with :func:`bvr.tracking.find_runs`
(``metrics.*``, ``params.*``, ``tags.*``) and, for curves, ``MlflowClient.get_metric_history``. Nothing here raises
for an unfinished ablation: a unit that is not ``done``, a run the store lacks, one not FINISHED or tagged for another
arm, task or seed is left out with a line in :attr:`Collected.missing` (a score the manifest copied differently is
only reported there: the run's own value is used).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from bvr.ablation.manifest import Manifest
from bvr.ablation.records import EvaluationRecord, FinetuneRecord, PretrainRecord, Record
from bvr.tasks.registry import TASKS
from bvr.tracking import (
    TAG_ARM,
    TAG_COLLAPSED,
    TAG_GIT_COMMIT,
    TAG_LABEL,
    TAG_SEED,
    TAG_TASK,
    find_runs,
    store_client,
    tracking_uri,
)

HISTORY_KEYS = ("train/mlm_loss", "val/mlm_loss", "val/perplexity", "train/tokens_per_s", "train/tokens_seen")
FINAL_KEYS = ("train/mlm_loss", "val/mlm_loss", "val/perplexity", "val/nsp_acc", "val/sop_acc")  # their last values

RUN_KEYS = ("wall_seconds", "tokens_seen", "steps", "params_total", "params_embedding", "params_non_embedding",
            "epochs", "mask_distinct_per_sequence", "mask_max_times_seen", "val_unigram_entropy", "words_seen",
            "ids_per_word", "id_occurrences_median", "id_rare_share")
"""The ``run/*`` metrics a pretraining run logs once it is done (``val_unigram_entropy``: the loss, in nats per
token, of predicting each validation token from its frequency alone; ``words_seen``: the tokens seen in
whitespace-separated words, at the corpus's ``ids_per_word``; ``id_occurrences_median``: how often the median
non-special id occurs in the training sequences, ``id_rare_share`` the share of those ids seen fewer than 10 times).
Each is NaN for runs logged before it existed."""

CONFIG_KEYS = ("training.batch_size", "training.max_steps", "training.learning_rate", "model.family",
               "model.num_layers", "model.hidden_size", "model.num_heads", "tokenizer.family", "tokenizer.vocab_size",
               "data.input_format", "data.sentence_objective", "data.max_length", "masking.mode", "corpus.source",
               "corpus.path", "corpus.max_documents")
"""Config params (flattened, as logged) a report shows as context."""

FINETUNE_COLUMNS = ("arm", "pretrain_seed", "task", "seed", "run_id", "metric", "value", "collapsed", "seconds",
                    "git_commit")
PRETRAIN_COLUMNS = ("arm", "pretrain_seed", "run_id", "steps", "git_commit", *FINAL_KEYS,
                    *(f"run/{key}" for key in RUN_KEYS), *CONFIG_KEYS)
HISTORY_COLUMNS = ("arm", "pretrain_seed", "run_id", "key", "step", "value")
EVALUATION_COLUMNS = ("arm", "label", "pretrain_seed", "kind", "task", "run_id", "metric", "value", "seeds",
                      "baseline", "seconds")
DETAIL_COLUMNS = ("arm", "pretrain_seed", "kind", "task", "key", "value")


@dataclass
class Collected:
    """What the store holds for one ablation, and what it lacks; each frame holds the columns of its ``*_COLUMNS``.
    ``value`` is the headline as logged (fractions; SQuAD in points; a probe's mean over its ``seeds``); ``details``
    holds every other metric of the evaluation runs (BLiMP per paradigm and term, probe feature kinds)."""

    manifest: Manifest
    experiment: str
    experiment_id: str | None  # None when the store has no such experiment
    uri: str
    finetune: pd.DataFrame  # a row per fine-tuning seed run found
    pretrain: pd.DataFrame  # a row per pretraining run found (NaN where a run did not log a value)
    history: pd.DataFrame  # the pretraining runs' metric histories, long
    missing: list[str]  # a line per planned unit the report cannot use, and per disagreement
    parent_run_id: str | None
    evaluations: pd.DataFrame = None  # type: ignore[assignment]  # a row per (model, evaluation) found
    details: pd.DataFrame = None  # type: ignore[assignment]  # long

    def __post_init__(self) -> None:
        if self.evaluations is None:
            self.evaluations = pd.DataFrame(columns=list(EVALUATION_COLUMNS))
        if self.details is None:
            self.details = pd.DataFrame(columns=list(DETAIL_COLUMNS))

    @property
    def ablation(self) -> str:
        return self.manifest.ablation

    @property
    def arms(self) -> list[str]:
        """Every arm, in the manifest's order (the control last)."""
        return [str(arm) for arm in self.manifest.arms]

    @property
    def control(self) -> str | None:
        return self.manifest.control_arm

    @property
    def pretrained_arms(self) -> list[str]:
        return [arm for arm in self.arms if arm != self.control]

    @property
    def tasks(self) -> list[str]:
        return [str(task) for task in self.manifest.tasks]


def main_key(task: str) -> str:
    """The headline score's key of a registered task (``dev/accuracy``); ``dev/score`` for an unknown one."""
    spec = TASKS.get(task)
    return f"{spec.headline_split}/{spec.main_metric}" if spec else "dev/score"


# --- Reading ---------------------------------------------------------------------------------------------------


def collect(manifest: Manifest, *, workdir: Path | None = None) -> Collected:
    """Read every run the manifest names from the store (in ``workdir``), listing what cannot be used."""
    uri = tracking_uri(workdir)
    client = store_client(uri)
    experiment = manifest.experiment_name
    found = client.get_experiment_by_name(experiment)
    frame = find_runs(experiment, workdir=workdir)
    runs = {row["run_id"]: row for row in frame.to_dict("records")}
    missing: list[str] = []
    if found is None:
        missing.append(f"MLflow experiment '{experiment}' is not in {uri}")
    finetune = [row for unit in manifest.finetune if (row := _finetune_row(unit, runs, missing)) is not None]
    pretrain = [row for unit in manifest.pretrain if (row := _pretrain_row(unit, runs, missing)) is not None]
    history = [h for row in pretrain for h in _history(client, row)]
    evaluated = [got for unit in manifest.evaluations if (got := _evaluation_row(unit, runs, missing)) is not None]
    parent = _parent(client, manifest, missing)
    return Collected(
        manifest=manifest, experiment=experiment, experiment_id=found.experiment_id if found else None, uri=uri,
        finetune=pd.DataFrame(finetune, columns=list(FINETUNE_COLUMNS)),
        pretrain=pd.DataFrame(pretrain, columns=list(PRETRAIN_COLUMNS)),
        history=pd.DataFrame(history, columns=list(HISTORY_COLUMNS)),
        missing=_group_not_run(missing), parent_run_id=parent,
        evaluations=pd.DataFrame([row for row, _ in evaluated], columns=list(EVALUATION_COLUMNS)),
        details=pd.DataFrame([d for _, details in evaluated for d in details], columns=list(DETAIL_COLUMNS)),
    )


_NOT_RUN = re.compile(r"(?P<task>.+/finetune/[^/]+)/seed(?P<seed>\d+)(?P<rest>(?: \(pretrain seed \d+\))?: status "
                      r"'[^']*' in the manifest)")


def _group_not_run(lines: list[str]) -> list[str]:
    """Fold the seeds of one arm and task that were not run into one line, where the first of them stood.

    >>> _group_not_run(["a/finetune/rte/seed0: status 'missing' in the manifest", "x",
    ...                 "a/finetune/rte/seed1: status 'missing' in the manifest"])
    ["a/finetune/rte seeds 0, 1: status 'missing' in the manifest", 'x']
    """
    groups: dict[tuple[str, str], list[str]] = {}
    slots: list[str | tuple[str, str]] = []
    for line in lines:
        found = _NOT_RUN.fullmatch(line)
        if found is None:
            slots.append(line)
            continue
        key = (found["task"], found["rest"])
        if key not in groups:
            groups[key] = []
            slots.append(key)
        groups[key].append(found["seed"])
    return [slot if isinstance(slot, str) else
            f"{slot[0]}/seed{groups[slot][0]}{slot[1]}" if len(groups[slot]) == 1 else
            f"{slot[0]} seeds {', '.join(groups[slot])}{slot[1]}" for slot in slots]


def _label(unit: Record) -> str:
    """The unit as its run is named in MLflow: ``static/finetune/sst2/seed3``, ``static-p1/pretrain``."""
    if isinstance(unit, EvaluationRecord):
        stage = f"{unit.kind}/{unit.task}" if unit.task else unit.kind
    elif isinstance(unit, FinetuneRecord):
        stage = f"finetune/{unit.task}/seed{unit.seed}"
    else:
        stage = "pretrain"
    return f"{unit.label or unit.arm}/{stage}"


def _number(value: Any) -> float | None:
    """A finite float, or None for an absent (NaN-filled) or non-numeric cell."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _usable_run(unit: Record, runs: dict[str, dict], missing: list[str], label: str) -> dict | None:
    """The unit's run, or None with a line in ``missing`` saying why it cannot be used."""
    if unit.status != "done":
        error = f": {unit.error}" if unit.error else ""
        missing.append(f"{label}: status '{unit.status}' in the manifest{error}")
        return None
    run_id = unit.run_id
    if not run_id:
        missing.append(f"{label}: done in the manifest but no MLflow run id recorded")
        return None
    run = runs.get(run_id)
    if run is None:
        missing.append(f"{label}: run {run_id} is not in the MLflow experiment")
        return None
    if run["status"] != "FINISHED":
        missing.append(f"{label}: run {run_id} is {run['status']} in MLflow, not FINISHED; left out")
        return None
    # The model's label is bvr.label; stores written before it existed hold the label in bvr.arm.
    label_tag = TAG_LABEL if _text(run.get(f"tags.{TAG_LABEL}")) is not None else TAG_ARM
    expected = {label_tag: unit.label or unit.arm, TAG_TASK: getattr(unit, "task", None),
                TAG_SEED: getattr(unit, "seed", None)}
    for tag, value in expected.items():
        logged = _text(run.get(f"tags.{tag}"))
        if value is not None and logged is not None and logged != str(value):
            missing.append(f"{label}: run {run_id} is tagged {tag}={logged}, not {value}; left out")
            return None
    return run


def _finetune_row(unit: FinetuneRecord, runs: dict[str, dict], missing: list[str]) -> dict | None:
    label = _label(unit)
    if (run := _usable_run(unit, runs, missing, label)) is None:
        return None
    key = unit.main_key or main_key(str(unit.task))
    value = _number(run.get(f"metrics.{key}"))
    if value is None:
        missing.append(f"{label}: run {run['run_id']} has no finite metric {key}; left out")
        return None
    copied = _number(unit.score)
    if copied is not None and not math.isclose(copied, value, rel_tol=1e-6, abs_tol=1e-9):
        missing.append(f"{label}: the manifest's score {copied:.6g} differs from run {run['run_id']}'s {key} "
                       f"{value:.6g}; the report uses the run's")
    collapsed = _text(run.get(f"tags.{TAG_COLLAPSED}")) == "true"
    if unit.collapsed is not None and bool(unit.collapsed) != collapsed:
        missing.append(f"{label}: the manifest says collapsed={unit.collapsed}, run {run['run_id']} is tagged "
                       f"{TAG_COLLAPSED}={run.get(f'tags.{TAG_COLLAPSED}')}; the report uses the tag")
    return {"arm": str(unit.arm), "pretrain_seed": int(unit.pretrain_seed), "task": str(unit.task),
            "seed": int(unit.seed), "run_id": run["run_id"], "metric": key, "value": value,
            "collapsed": collapsed, "seconds": _number(run.get("metrics.run/wall_seconds")),
            "git_commit": _text(run.get(f"tags.{TAG_GIT_COMMIT}"))}


def _pretrain_row(unit: PretrainRecord, runs: dict[str, dict], missing: list[str]) -> dict | None:
    label = _label(unit)
    if (run := _usable_run(unit, runs, missing, label)) is None:
        return None
    row: dict[str, Any] = {"arm": str(unit.arm), "pretrain_seed": int(unit.pretrain_seed),
                           "run_id": run["run_id"], "git_commit": _text(run.get(f"tags.{TAG_GIT_COMMIT}"))}
    row.update({key: _number(run.get(f"metrics.{key}")) for key in FINAL_KEYS})
    row.update({f"run/{key}": _number(run.get(f"metrics.run/{key}")) for key in RUN_KEYS})
    row.update({key: _text(run.get(f"params.{key}")) for key in CONFIG_KEYS})
    copied = unit.metrics or {}
    for key in ("wall_seconds", "tokens_seen", "params_total"):
        ours, theirs = row[f"run/{key}"], _number(copied.get(key))
        if ours is not None and theirs is not None and not math.isclose(ours, theirs, rel_tol=1e-6):
            missing.append(f"{label}: the manifest's {key} {theirs:.6g} differs from run {run['run_id']}'s "
                           f"run/{key} {ours:.6g}; the report uses the run's")
    return row


def _evaluation_row(unit: EvaluationRecord, runs: dict[str, dict],
                    missing: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """An evaluation's headline (from its run) and per-seed values (from the manifest), and its other metrics."""
    label = _label(unit)
    if (run := _usable_run(unit, runs, missing, label)) is None:
        return None
    key = unit.main_key
    value = _number(run.get(f"metrics.{key}")) if key else None
    if value is None:
        missing.append(f"{label}: run {run['run_id']} has no finite metric {key}; left out")
        return None
    seeds = {int(k): float(v) for k, v in (unit.seeds or {}).items()}
    if seeds and not math.isclose(sum(seeds.values()) / len(seeds), value, rel_tol=1e-6, abs_tol=1e-9):
        missing.append(f"{label}: the manifest's probe seeds average {sum(seeds.values()) / len(seeds):.6g}, run "
                       f"{run['run_id']} logged {key} {value:.6g}; the report uses the run's")
        seeds = {0: value}
    row = {"arm": str(unit.arm), "label": str(unit.label or unit.arm), "pretrain_seed": int(unit.pretrain_seed),
           "kind": str(unit.kind), "task": unit.task, "run_id": run["run_id"], "metric": key, "value": value,
           "seeds": seeds or {0: value}, "baseline": _number(unit.baseline),
           "seconds": _number(run.get("metrics.run/wall_seconds"))}
    prefix = f"metrics.{unit.kind}/"
    details = [{"arm": row["arm"], "pretrain_seed": row["pretrain_seed"], "kind": row["kind"], "task": row["task"],
                "key": name[len("metrics."):], "value": number}
               for name, raw in run.items() if name.startswith(prefix) and (number := _number(raw)) is not None]
    return row, details


def _history(client: MlflowClient, row: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """The curves of one pretraining run; also sets ``row['steps']``, the last step it logged a loss at."""
    points = []
    for key in HISTORY_KEYS:
        for metric in client.get_metric_history(row["run_id"], key):
            points.append({"arm": row["arm"], "pretrain_seed": row["pretrain_seed"], "run_id": row["run_id"],
                           "key": key, "step": int(metric.step), "value": float(metric.value)})
    steps = [p["step"] for p in points if p["key"] == "train/mlm_loss"]
    row["steps"] = max(steps) if steps else None
    return sorted(points, key=lambda p: (p["key"], p["step"]))


def _parent(client: MlflowClient, manifest: Manifest, missing: list[str]) -> str | None:
    """The parent run id when the store holds it; a recorded id it lacks is listed as missing."""
    run_id = manifest.parent_run_id
    if not run_id:
        return None
    try:
        client.get_run(run_id)
    except MlflowException:
        missing.append(f"parent run {run_id} of the ablation is not in the MLflow store")
        return None
    return str(run_id)
