"""Run one evaluation of one model for an ablation: cached by content, logged as a nested MLflow run.

Two kinds: ``blimp``, zero-shot BLiMP, whose headline is the macro-average over paradigms; ``probe``, a linear probe
on frozen features of one task, whose headline is the chosen feature kind's score averaged over the probe seeds (which
vary only the probe, so they are nested inside the model and its pretraining seed).

The result is cached as JSON by content (:func:`result_path`): a retrained model or an edited data file is evaluated
again, and a copy of the model (the DVC stage folder's) finds the result its original got. A cached result is reused
where its run is in the asking experiment; cached by another experiment (two ablations in one output folder share the
control), it is logged again in this one; missing or damaged, it is read back from this experiment's run of it
(tagged ``bvr.result`` with the file's name).

The MLflow run is ``LABEL/blimp`` or ``LABEL/probe/TASK``, tagged ``bvr.stage`` = the kind, with the headline and
every per-feature mean as metrics (a probe's baselines too), each probe seed's headline as the history of the
headline key (step = probe seed), and the JSON as an artifact.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bvr.cache import CACHE_VERSION, other_versions, target_lock
from bvr.config import config_hash
from bvr.errors import BvrError
from bvr.fs import write_text
from bvr.sealed import seal, unseal

if TYPE_CHECKING:
    from bvr.tracking import RunContext

EVALUATIONS_DIR = "evaluations"
"""The folder of cached results, under the output folder."""
DEFAULT_EXPERIMENT = "bvr-evaluate"
"""The MLflow experiment of an evaluation outside an ablation."""


@dataclass
class EvaluationResult:
    """One model's result on one evaluation.

    Attributes:
        main_key: the headline metric key (``blimp/macro_accuracy``, ``probe/sst2/accuracy``).
        score: the headline, a fraction; ``seeds``: probe seed -> that seed's headline (BLiMP: ``{0: score}``).
        metrics: every number logged (means over seeds for probes).
        baseline: the trivial baseline of the same metric (majority class; 0.5 for BLiMP), or None.
        seconds: wall time of the evaluation when it ran; ``detail``: what else it returned, for the artifact.
    """

    kind: str
    task: str | None
    main_key: str
    score: float
    seeds: dict[int, float]
    metrics: dict[str, float]
    baseline: float | None
    seconds: float
    run_id: str | None = None
    reused: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


def _settings(kind: str, task: str | None, evaluations: Any) -> dict[str, Any]:
    base = {"version": CACHE_VERSION, "kind": kind}
    if kind == "blimp":
        return {**base, "per_paradigm": evaluations.blimp_per_paradigm, "seed": evaluations.blimp_seed}
    return {**base, "task": task, "seeds": evaluations.probe_seeds, "features": evaluations.probe_features,
            "max_train_examples": evaluations.probe_max_train_examples,
            "max_eval_examples": evaluations.probe_max_eval_examples,
            "heldout_examples": evaluations.probe_heldout_examples}


def result_path(model_dir: Path, kind: str, task: str | None, evaluations: Any, data_dir: Path | None,
                output_dir: Path) -> Path:
    """Where the result of this evaluation of this model is cached: ``output_dir/evaluations/KIND[-TASK]-HASH.json``,
    the hash over the settings and the content (not the place) of the model folder and of the data files."""
    from bvr.cache import fingerprint
    from bvr.tasks.data import task_files
    from bvr.tasks.registry import get_task

    settings = _settings(kind, task, evaluations)
    name = f"{kind}-{task}" if task else kind
    if kind == "blimp":
        inputs = [Path(data_dir) / "blimp"] if data_dir else []
    else:
        inputs = task_files(get_task(task), data_dir)
    content = (fingerprint(model_dir), fingerprint(*inputs))  # the data's content, not where they lie
    return Path(output_dir) / EVALUATIONS_DIR / f"{name}-{config_hash(settings, *content)}.json"


def _compute(model_dir: Path, kind: str, task: str | None, evaluations: Any, data_dir: Path | None,
             progress: bool) -> EvaluationResult:
    from bvr.pretrained import load_pretrained

    pretrained = load_pretrained(model_dir, need_mlm_head=kind == "blimp")  # a probe reads the encoder only
    start = time.perf_counter()
    if kind == "blimp":
        from bvr.evaluation.blimp import evaluate_blimp

        if data_dir is None or not (Path(data_dir) / "blimp").is_dir():
            raise BvrError("no blimp/ folder in the data folder", where=str(data_dir), hint="pass --data-dir")
        found = evaluate_blimp(pretrained, Path(data_dir) / "blimp", per_paradigm=evaluations.blimp_per_paradigm,
                               seed=evaluations.blimp_seed, progress=progress)
        metrics = {k: float(v) for k, v in found.metrics().items()}
        key = "blimp/macro_accuracy"
        return EvaluationResult(kind, None, key, metrics[key], {0: metrics[key]}, metrics, 0.5,
                                time.perf_counter() - start, detail=found.to_dict())
    from bvr.evaluation.probe import ProbeSample, run_probe

    seeds = list(range(evaluations.probe_seeds))
    feature = probe_feature(task, evaluations.probe_features)
    sample = ProbeSample(seeds, max_train_examples=evaluations.probe_max_train_examples,
                         max_eval_examples=evaluations.probe_max_eval_examples,
                         heldout_examples=evaluations.probe_heldout_examples)
    found = run_probe(pretrained, task, data_dir=data_dir, sample=sample, features=[feature], progress=progress)
    per_seed = {seed: found.metrics(seed) for seed in seeds}
    metric = found.main_metric
    where = "heldout/" if found.heldout_size else ""  # the headline is on the held-out examples when there are any
    key = f"probe/{task}/{where}{metric}"
    feature_key = f"probe/{task}/{feature}/{where}{metric}"
    metrics = {name: float(sum(m[name] for m in per_seed.values()) / len(seeds)) for name in per_seed[seeds[0]]}
    metrics[key] = metrics[feature_key]
    baselines = found.heldout_baseline if found.heldout_size else found.baseline
    baseline = float(np.mean([baselines[seed][metric] for seed in seeds]))
    return EvaluationResult(kind="probe", task=task, main_key=key, score=metrics[key],
                            seeds={s: float(m[feature_key]) for s, m in per_seed.items()}, metrics=metrics,
                            baseline=baseline, seconds=time.perf_counter() - start,
                            detail={"per_seed": {str(s): m for s, m in per_seed.items()}, "features": feature})


def probe_feature(task: str, kind: str) -> str:
    """The feature kind a probe of ``task`` uses for the configured ``kind``: word-level tasks have no sentence
    pooling, so ``mean`` and ``cls`` mean the last layer's first sub-token there (``last``)."""
    from bvr.evaluation.probe import feature_kinds, probe_task

    return kind if kind in feature_kinds(probe_task(task)) else "last"


def _read(path: Path, producer: str) -> tuple[EvaluationResult | None, str | None]:
    """The cached result at ``path`` if it is what the evaluation named ``producer`` wrote, else None and why not
    (damaged, edited, copied from another entry, or written before results were sealed)."""
    try:
        data, why = unseal(json.loads(path.read_text(encoding="utf-8")), producer)
    except (OSError, ValueError) as err:
        return None, f"cannot be read ({type(err).__name__}: {err})"
    if data is None:
        return None, why
    try:
        data.pop("settings", None)
        data["seeds"] = {int(k): float(v) for k, v in data["seeds"].items()}
        return EvaluationResult(**{**data, "reused": True}), None
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        return None, f"is not an evaluation result ({type(err).__name__}: {err})"


def evaluate_model(model_dir: Path, kind: str, task: str | None, evaluations: Any, *, data_dir: Path | None,
                   output_dir: Path, context: RunContext, progress: bool = False) -> EvaluationResult:
    """Evaluate ``model_dir`` once (``kind`` ``blimp`` or ``probe`` on ``task``), or read the cached result.

    ``evaluations`` are :class:`bvr.ablation.declare.Evaluations`. ``context`` says where the MLflow run goes (else
    ``bvr-evaluate``), its label (default: the model's run folder) and the model's tags.
    """
    path = result_path(model_dir, kind, task, evaluations, data_dir, output_dir)
    path.parent.mkdir(parents=True, exist_ok=True)  # the lock file lies beside the result
    with target_lock(path):  # a twin invocation waits here, then finds this one's result and its run
        asked = _Asked(Path(model_dir), kind, task, evaluations, data_dir, path)
        recorder = _Recorder(context.with_defaults(DEFAULT_EXPERIMENT, Path(model_dir).parent.name))
        cached, run_id, moved = _look_up(asked, recorder)
        if cached is not None and run_id:  # with its run in this experiment: written again where either differs
            if moved or cached.run_id != run_id:
                cached.run_id = run_id
                _write(asked, cached)
            return cached
        # Computed now, or cached but not logged in this experiment (another ablation in the same output folder
        # logged it, or its run was deleted): logged here.
        result = cached or _compute(asked.model_dir, kind, task, evaluations, data_dir, progress)
        _write(asked, dataclasses.replace(result, run_id=None))
        result.run_id = recorder.record(result, asked)
        _write(asked, result)
        return result


@dataclass(frozen=True)
class _Asked:
    """One evaluation of one model, and where its result is cached."""

    model_dir: Path
    kind: str
    task: str | None
    evaluations: Any
    data_dir: Path | None
    path: Path


def _look_up(asked: _Asked, recorder: _Recorder) -> tuple[EvaluationResult | None, str | None, bool]:
    """The cached result (None: none that is this evaluation's), else the one read back from its run; its finished
    run in this experiment, or the run there that logged the file's name; and whether it was not read from its own
    file. A result not reused as it is is named on stderr saying why, as are the results another version of bvr
    cached where none is found."""
    path = asked.path
    found = path if path.is_file() else None
    cached, why = _read(found, path.name) if found else (None, None)
    run_id = recorder.run_of(cached, path.name)
    if cached is None and run_id:
        cached = recorder.read_back(run_id, path)
        if cached is not None:
            print(f"{found or path}: {why or 'missing'}; read back from its MLflow run {run_id}, not evaluated "
                  "again", file=sys.stderr, flush=True)
            found = None
    if why and cached is None:
        print(f"{found}: {why}; evaluated again", file=sys.stderr, flush=True)
    if cached is None and (line := other_versions(path, CACHE_VERSION, _stamped_version)):
        print(line, file=sys.stderr, flush=True)
    return cached, run_id, found != path


def _stamped_version(path: Path) -> int | None:
    """The cache version a result file's settings hold (the key it was cached under), else None."""
    try:
        settings = json.loads(path.read_text(encoding="utf-8")).get("settings")
    except (OSError, ValueError, AttributeError):
        return None
    return settings.get("version") if isinstance(settings, dict) else None


def _write(asked: _Asked, result: EvaluationResult) -> None:
    """Cache ``result`` at its path, sealed (its settings with it; the run's artifact is this file)."""
    folder = str(Path(asked.data_dir).resolve()) if asked.data_dir else None
    data = {"settings": {**_settings(asked.kind, asked.task, asked.evaluations), "data_dir": folder},
            **{k: v for k, v in asdict(result).items() if k != "reused"}}
    write_text(asked.path, json.dumps(seal(data, asked.path.name), indent=2))


class _Recorder:
    """The MLflow record of evaluations in the context's experiment: finding, reading back and logging runs."""

    def __init__(self, context: RunContext) -> None:
        from bvr.tracking import client_for, ensure_experiment

        self.context = context
        self.client = client_for(Path.cwd())
        self.experiment_id = ensure_experiment(context.experiment, Path.cwd())

    def run_of(self, cached: EvaluationResult | None, name: str) -> str | None:
        """The finished run of ``cached`` in this experiment, else the run here that logged the result file
        ``name`` (logged here by a cache since rebuilt); None: neither."""
        from bvr.tracking.placed import finished, logged_run

        run_id = cached.run_id if cached is not None and finished(self.client, cached.run_id,
                                                                   self.experiment_id) else None
        return run_id or logged_run(self.client, self.experiment_id, name)

    def read_back(self, run_id: str, path: Path) -> EvaluationResult | None:
        """The result that run ``run_id`` logged as its artifact (what the cache file ``path`` held), or None."""
        import tempfile

        from bvr.tracking.placed import download

        with tempfile.TemporaryDirectory(prefix="bvr-result-") as folder:
            logged = download(self.client, run_id, path.name, Path(folder))
            return _read(logged, path.name)[0] if logged is not None else None

    def record(self, result: EvaluationResult, asked: _Asked) -> str:
        """Log ``result`` (cached at ``asked.path``) as a finished run; returns its id."""
        from mlflow.entities import Metric, RunStatus
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        from bvr.tracking import TAG_MEASURE, run_name, run_tags
        from bvr.tracking.placed import TAG_RESULT

        context, client, path = self.context, self.client, asked.path
        extra: dict[str, Any] = {"bvr.checkpoint": str(asked.model_dir),
                                 TAG_RESULT: path.name,
                                 TAG_MEASURE: result.kind if result.task is None else f"{result.kind}/{result.task}"}
        if context.parent_run_id:
            extra[MLFLOW_PARENT_RUN_ID] = context.parent_run_id
        tags = run_tags(context, stage=result.kind, task=result.task, extra=extra)
        run = client.create_run(self.experiment_id, run_name=run_name(context.label, result.kind, result.task),
                                tags=tags)
        run_id = run.info.run_id
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in result.metrics.items() if math.isfinite(v) and k != result.main_key]
        metrics += [Metric(result.main_key, v, now, seed) for seed, v in sorted(result.seeds.items())]
        metrics.append(Metric(result.main_key, result.score, now, max(result.seeds, default=0) + 1))
        metrics.append(Metric("run/wall_seconds", result.seconds, now, 0))
        metrics.append(Metric("score", 100.0 * result.score, now, 0))  # in points, one name across tasks and kinds
        for i in range(0, len(metrics), 500):
            client.log_batch(run_id, metrics=metrics[i:i + 500])
        client.log_param(run_id, "evaluation", json.dumps(json.loads(path.read_text())["settings"]))
        client.log_artifact(run_id, str(path))
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
        return run_id
