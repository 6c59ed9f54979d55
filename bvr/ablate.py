"""``bvr ablate NAME``: run an ablation declared in ``experiments/NAME.yaml`` from data to report.

An ablation expands (:mod:`bvr.ablation`) into *units*, each cached by the stage that runs it, so a second
invocation with nothing changed runs nothing and an interrupted one continues where it stopped:

==========================  ============================================================================
unit                        what it does
==========================  ============================================================================
``corpus``                  read the corpus (:func:`bvr.pretraining.prepare.prepare_corpus`)
``tokenizer:FAMILY``        train each tokenizer the arms use
``data:ARM``                the arm's input format (and every stage before it)
``pretrain:ARM``            pretrain the arm (resumed from ``last.ckpt`` if a run was cut short); for the
                            control, write its randomly initialised encoder (:func:`initialise`)
``blimp:ARM``               score BLiMP's minimal pairs zero-shot (where the data folder has ``blimp/``)
``probe:ARM:TASK``          frozen-feature linear probes on the task, over every probe seed
``finetune:ARM:TASK``       fine-tune the arm on the task over every fine-tuning seed
``report``                  render ``reports/NAME/`` (:mod:`bvr.report.render`)
==========================  ============================================================================

Every arm is pretrained before any is evaluated or fine-tuned (under torchrun or SLURM only rank zero goes on).
With several pretraining seeds each (arm, seed) is its own unit, labelled ``ARM-pSEED``; the control gets one
random initialisation per pretraining seed, the very weights that arm seeds start from, so that "arm minus
control" pairs by seed and measures what pretraining from that starting point did.

MLflow: one experiment per ablation (its name), a parent run per invocation (``NAME (PRESET)``, tag
``bvr.stage=ablation``), and under it the runs ``ARM/pretrain``, ``ARM/finetune/TASK`` and
``ARM/finetune/TASK/seedN``. Units reused from the cache keep the runs that produced them.

The *manifest* (``output_dir/ablations/NAME-PRESET-HASH/manifest.json``, also logged to the parent run) is the
plan and the index: every unit's status and MLflow run ids. The report reads it, then the numbers from MLflow.
Its HASH covers everything that changes a result, so different presets or ``--set`` values keep separate
manifests.

``dvc.yaml`` runs the same units one per stage (``bvr ablate NAME --only UNIT --stage-dir pipeline/NAME``); each
stage then also writes its products under the stage folder for DVC to track (:func:`write_pipeline`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import os
import platform
import shutil
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from bvr.ablation import CONTROL_ARM, Ablation, equal_passes, load_ablation
from bvr.cache import BUILT, global_rank
from bvr.config import Config, config_hash
from bvr.display import duration
from bvr.errors import BvrError
from bvr.fs import replace_dir, temp_sibling, write_text

MANIFEST_VERSION = 2
UNIT_KINDS = ("corpus", "tokenizer", "data", "pretrain", "blimp", "probe", "finetune", "report")


# ---------------------------------------------------------------------------------------------------------------
# The plan


@dataclass(frozen=True)
class Arm:
    """One pretrained model to fine-tune: an arm at one pretraining seed, or the control."""

    label: str
    """Name in MLflow, folders and units: the arm, or ``ARM-pSEED`` when there are several pretraining seeds."""
    arm: str
    pretrain_seed: int
    config: Config
    control: bool = False


@dataclass
class Plan:
    """An ablation expanded for one preset, data folder and output folder: the arms, tasks and seeds to run."""

    ablation: Ablation
    arms: list[Arm]
    tasks: list[str]
    seeds: list[int]
    data_dir: Path | None
    output_dir: Path
    overrides: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.ablation.name

    @property
    def preset(self) -> str | None:
        return self.ablation.preset

    @property
    def experiment(self) -> str:
        return self.ablation.name

    @property
    def pretrained(self) -> list[Arm]:
        return [arm for arm in self.arms if not arm.control]

    def arm(self, label: str) -> Arm:
        for arm in self.arms:
            if arm.label == label:
                return arm
        raise BvrError(f"no arm '{label}' in ablation '{self.name}'", where="--only",
                       hint=f"arms: {', '.join(a.label for a in self.arms)}")

    @property
    def plan_hash(self) -> str:
        """A hash of everything that changes a result (the output folder aside)."""
        configs = {arm.label: {k: v for k, v in arm.config.to_dict().items() if k != "output_dir"}
                   for arm in self.arms}
        return config_hash({"version": MANIFEST_VERSION, "configs": configs, "tasks": self.tasks,
                            "seeds": self.seeds, "finetune": self.ablation.finetune_overrides(),
                            "preset": self.preset, "evaluations": self.evaluations.to_dict(),
                            "blimp": self.blimp_dir is not None})

    @property
    def folder(self) -> Path:
        return self.output_dir / "ablations" / f"{self.name}-{self.preset or 'default'}-{self.plan_hash}"

    @property
    def manifest_path(self) -> Path:
        return self.folder / "manifest.json"

    def families(self) -> list[str]:
        return list(dict.fromkeys(arm.config.tokenizer.family for arm in self.arms))

    @property
    def evaluations(self):
        """The zero-shot and probe evaluations (:class:`bvr.ablation.Evaluations`)."""
        return self.ablation.evaluations

    @property
    def blimp_dir(self) -> Path | None:
        """BLiMP's folder in the data folder, when it is there (BLiMP runs only then)."""
        folder = self.data_dir / "blimp" if self.data_dir else None
        return folder if self.evaluations.blimp and folder is not None and folder.is_dir() else None

    def units(self) -> list[str]:
        """Every unit, in the order they run."""
        out = ["corpus", *(f"tokenizer:{f}" for f in self.families())]
        out += [f"data:{arm.label}" for arm in self.pretrained]
        out += [f"pretrain:{arm.label}" for arm in self.arms]
        if self.blimp_dir is not None:
            out += [f"blimp:{arm.label}" for arm in self.arms]
        out += [f"probe:{arm.label}:{task}" for arm in self.arms for task in self.evaluations.probe_tasks]
        out += [f"finetune:{arm.label}:{task}" for arm in self.arms for task in self.tasks]
        return [*out, "report"]


def make_plan(
    name_or_path: str | Path,
    *,
    preset: str | None = None,
    overrides: list[str] | None = None,
    data_dir: str | Path | None = None,
    output_dir: str | Path = "outputs",
) -> Plan:
    """Load and check an ablation, and lay out its arms, tasks and seeds.

    Raises:
        BvrError: whatever :func:`bvr.ablation.load_ablation` refuses; arms that do not see equal passes.
    """
    from bvr.tasks.registry import get_task

    ablation = load_ablation(name_or_path, preset=preset, overrides=overrides)
    equal_passes(ablation)
    data = Path(data_dir).expanduser().resolve() if data_dir else None
    extra = {"output_dir": str(output_dir), **({"data_dir": str(data)} if data else {})}
    several = len(ablation.pretrain_seeds) > 1
    arms = []
    for arm, cfg in ablation.arms.items():
        for seed in ablation.pretrain_seeds:
            training = dataclasses.replace(cfg.training, seed=seed)
            label = f"{arm}-p{seed}" if several else arm
            arms.append(Arm(label, arm, seed, dataclasses.replace(cfg, training=training, **extra)))
    control = ablation.control_config()
    if control is not None:  # one random initialisation per pretraining seed: the arms' starting points
        for seed in ablation.pretrain_seeds:
            training = dataclasses.replace(control.training, seed=seed)
            label = f"{CONTROL_ARM}-p{seed}" if several else CONTROL_ARM
            arms.append(Arm(label, CONTROL_ARM, seed, dataclasses.replace(control, training=training, **extra),
                            control=True))
    tasks = list(ablation.finetune_tasks)
    if data is not None:  # optional tasks join where their files are present
        tasks += [t for t in ablation.optional_tasks if (data / get_task(t).folder).exists()]
    return Plan(ablation, arms, tasks, list(range(ablation.finetune_seeds)), data, Path(output_dir),
                list(overrides or []))


# ---------------------------------------------------------------------------------------------------------------
# The manifest


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def hardware() -> dict[str, Any]:
    """What the numbers were measured on."""
    import torch

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "cpu": cpu, "cpu_count": os.cpu_count(), "gpu": torch.cuda.get_device_name(0) if gpus else None,
            "gpu_count": gpus}


def new_manifest(plan: Plan) -> dict[str, Any]:
    """A manifest with every unit missing."""
    from bvr.tracking import git_commit

    ab = plan.ablation
    return {
        "version": MANIFEST_VERSION,
        "ablation": plan.name,
        "description": ab.description,
        "source": str(ab.source),
        "preset": plan.preset,
        "overrides": plan.overrides,
        "plan_hash": plan.plan_hash,
        "experiment": plan.experiment,
        "parent_run_id": None,
        "published": (ab.published or {}).get("ablation"),
        "arms": list(dict.fromkeys(arm.arm for arm in plan.arms)),
        "labels": [arm.label for arm in plan.arms],
        "control_arm": CONTROL_ARM if ab.control else None,
        "declared": {arm.arm: _declared(ab, arm) for arm in plan.pretrained},
        "configs": {arm.label: arm.config.to_dict() for arm in plan.arms},
        "pretrain_seeds": list(ab.pretrain_seeds),
        "tasks": plan.tasks,
        "finetune_seeds": plan.seeds,
        "finetune_hparams": ab.finetune_hparams,
        "evaluations_settings": plan.evaluations.to_dict(),
        "pretrain": [{"arm": arm.arm, "label": arm.label, "pretrain_seed": arm.pretrain_seed, "status": "missing",
                      "run_id": None, "run_dir": None, "error": None, "metrics": {}} for arm in plan.pretrained],
        "evaluations": [{"arm": arm.arm, "label": arm.label, "pretrain_seed": arm.pretrain_seed, "kind": kind,
                         "task": task, "status": "missing", "run_id": None, "main_key": None, "score": None,
                         "seeds": {}, "baseline": None, "seconds": None, "error": None}
                        for arm in plan.arms for kind, task in _evaluation_keys(plan)],
        "finetune": [{"arm": arm.arm, "label": arm.label, "pretrain_seed": arm.pretrain_seed, "task": task,
                      "seed": seed, "status": "missing", "run_id": None, "parent_run_id": None, "main_key": None,
                      "score": None, "collapsed": None, "seconds": None, "baseline": {}, "error": None}
                     for arm in plan.arms for task in plan.tasks for seed in plan.seeds],
        "context": {"git_commit": git_commit(), "data_dir": str(plan.data_dir) if plan.data_dir else None,
                    "output_dir": str(plan.output_dir.resolve()), "started": _now(), "updated": _now(),
                    "wall_seconds": 0.0, "hardware": hardware()},
    }


def _evaluation_keys(plan: Plan) -> list[tuple[str, str | None]]:
    """(kind, task) of every evaluation each model gets: BLiMP (task None), then one probe per task."""
    keys: list[tuple[str, str | None]] = [("blimp", None)] if plan.blimp_dir is not None else []
    return keys + [("probe", task) for task in plan.evaluations.probe_tasks]


def _declared(ablation: Ablation, arm: Arm) -> dict[str, Any]:
    from bvr.config import flatten

    flat = flatten(arm.config.to_dict())
    return {key: flat.get(key) for key in sorted(ablation.declared.get(arm.arm, set()))}


def load_manifest(path: Path) -> dict[str, Any]:
    """Read a manifest, naming the file when it cannot be read."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise BvrError(f"cannot read the ablation manifest: {err}", where=str(path)) from None
    if data.get("version") != MANIFEST_VERSION:
        raise BvrError(f"manifest version {data.get('version')!r}, expected {MANIFEST_VERSION}", where=str(path),
                       hint="re-run `bvr ablate` with this version of bvr")
    return data


def save_manifest(manifest: dict[str, Any], path: Path) -> None:
    """Write atomically: a run killed mid-write leaves the previous manifest."""
    manifest["context"]["updated"] = _now()
    write_text(path, json.dumps(manifest, indent=2, default=str))


def find_manifest(name: str, output_dir: Path = Path("outputs"), *, preset: str | None = None) -> Path:
    """The most recently updated manifest of ablation ``name`` (for ``preset`` if given).

    Raises:
        BvrError: none exists (the hint says how to make one).
    """
    stem = Path(name).stem
    pattern = f"{stem}-{preset}-*" if preset else f"{stem}-*"
    found = [p / "manifest.json" for p in (Path(output_dir) / "ablations").glob(pattern)
             if (p / "manifest.json").is_file()]
    if not found:
        raise BvrError(f"no runs of ablation '{stem}'" + (f" with preset '{preset}'" if preset else "") +
                       f" under {Path(output_dir) / 'ablations'}", where="report",
                       hint=f"run `bvr ablate {stem}" + (f" --preset {preset}" if preset else "") + "` first")
    return max(found, key=lambda p: p.stat().st_mtime)


def latest_manifests(output_dir: Path = Path("outputs")) -> list[dict[str, Any]]:
    """The most recently updated manifest of each ablation that has one, for the summary across ablations."""
    manifests = [load_manifest(path) for path in sorted((Path(output_dir) / "ablations").glob("*/manifest.json"))]
    latest: dict[str, dict[str, Any]] = {}
    for manifest in sorted(manifests, key=lambda m: m["context"]["updated"]):
        latest[manifest["ablation"]] = manifest
    return list(latest.values())


# ---------------------------------------------------------------------------------------------------------------
# Running


@dataclass
class AblationResult:
    """What one invocation did."""

    plan: Plan
    manifest: dict[str, Any]
    ran: list[str]
    reused: list[str]
    failed: dict[str, str]
    seconds: float
    report: Any = None

    @property
    def complete(self) -> bool:
        units = self.manifest["pretrain"] + self.manifest["finetune"]
        return all(unit["status"] == "done" for unit in units)


class _Runner:
    """Runs units of one plan, keeping the manifest and the DVC stage folder up to date."""

    def __init__(self, plan: Plan, *, stage_dir: Path | None, progress: bool, console: Console) -> None:
        self.plan = plan
        self.stage_dir = stage_dir
        self.progress = progress
        self.console = console
        self.rank = global_rank()
        path = plan.manifest_path
        if path.is_file():
            self.manifest = load_manifest(path)
            self.manifest["context"]["hardware"] = hardware()  # this invocation's machine
        else:
            self.manifest = new_manifest(plan)
        self.parent_run_id: str | None = None
        self.built_before: set[Path] = set()
        self.report: Any = None
        self.models: dict[str, Path] = {}
        self.ran: list[str] = []
        self.reused: list[str] = []
        self.failed: dict[str, str] = {}

    # -- bookkeeping

    def save(self) -> None:
        if self.rank == 0:
            save_manifest(self.manifest, self.plan.manifest_path)

    def say(self, text: str) -> None:
        if self.rank == 0:
            self.console.print(text, highlight=False)

    def _pretrain_entry(self, label: str) -> dict[str, Any]:
        return next(e for e in self.manifest["pretrain"] if e["label"] == label)

    def _finetune_entries(self, label: str, task: str) -> list[dict[str, Any]]:
        return [e for e in self.manifest["finetune"] if e["label"] == label and e["task"] == task]

    def _evaluation_entry(self, label: str, kind: str, task: str | None) -> dict[str, Any]:
        return next(e for e in self.manifest["evaluations"]
                    if e["label"] == label and e["kind"] == kind and e["task"] == task)

    def _stage_out(self, *parts: str) -> Path | None:
        if self.stage_dir is None or self.rank != 0:
            return None
        path = self.stage_dir.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    # -- units

    def run_unit(self, unit: str) -> None:
        kind, _, rest = unit.partition(":")
        handler: Callable[..., bool] = getattr(self, f"_{kind}")
        start = time.perf_counter()
        self.built_before = set(BUILT)
        self.say(f"[bold]▶ {unit}[/bold]")
        try:
            built = handler(*rest.split(":")) if rest else handler()
        except KeyboardInterrupt:
            self.save()
            raise
        except BvrError as err:
            self._fail(unit, err.one_line())
            return
        except Exception as err:  # noqa: BLE001 - one failed unit must not lose the others' results
            self._fail(unit, f"{type(err).__name__}: {err}")
            if os.environ.get("BVR_DEBUG"):
                traceback.print_exc()
            return
        (self.ran if built else self.reused).append(unit)
        seconds = time.perf_counter() - start
        self.say(f"  {'done' if built else 'reused from the cache'} ({duration(seconds)})")
        self.save()

    def _fresh(self, folder: Path) -> bool:
        """Whether the unit running now built the cache folder (rather than finding it finished)."""
        path = Path(folder).resolve()
        return path in BUILT and path not in self.built_before

    def _fail(self, unit: str, message: str) -> None:
        self.failed[unit] = message
        self.say(f"  [red]failed:[/red] {message}")
        kind, _, rest = unit.partition(":")
        if kind == "pretrain" and not self.plan.arm(rest).control:
            entry = self._pretrain_entry(rest)
            entry.update(status="failed", error=message)
        elif kind == "finetune":
            label, task = rest.split(":")
            for entry in self._finetune_entries(label, task):
                if entry["status"] != "done":
                    entry.update(status="failed", error=message)
        elif kind in ("blimp", "probe"):
            label, _, task = rest.partition(":")
            self._evaluation_entry(label, kind, task or None).update(status="failed", error=message)
        self.save()

    def _corpus(self) -> bool:
        from bvr.pretraining.prepare import prepare_corpus

        built = False
        for cfg in _distinct((arm.config for arm in self.plan.arms), tokenizer=False):
            folder = prepare_corpus(cfg, progress=self.progress)
            built |= self._fresh(folder)
            stats = folder / "documents" / "corpus_stats.json"
            if (out := self._stage_out("corpus.json")) is not None:
                record = json.loads(stats.read_text()) if stats.is_file() else {}
                out.write_text(json.dumps({"folder": folder.name, **record}, indent=2))
        return built

    def _tokenizer(self, family: str) -> bool:
        from bvr.pretraining.prepare import prepare_corpus, prepare_tokenizer

        built = False
        for cfg in _distinct((a.config for a in self.plan.arms if a.config.tokenizer.family == family),
                             tokenizer=True):
            folder = prepare_tokenizer(cfg, prepare_corpus(cfg, progress=self.progress), progress=self.progress)
            built |= self._fresh(folder)
            if (out := self._stage_out(f"tokenizer-{family}")) is not None:
                _copy_tree(folder, out)
        return built

    def _data(self, label: str) -> bool:
        from bvr.pretraining.prepare import prepare

        prepared = prepare(self.plan.arm(label).config, progress=self.progress)
        if (out := self._stage_out(f"data-{label}.json")) is not None:
            stats = json.loads((prepared.instances / "data_stats.json").read_text())
            out.write_text(json.dumps({"folder": prepared.instances.name, **stats}, indent=2))
        return self._fresh(prepared.instances)

    def _pretrain(self, label: str) -> bool:
        from bvr.pretraining.run import initialise, pretrain

        arm = self.plan.arm(label)
        if arm.control:
            result = initialise(arm.config, progress=self.progress)
        else:
            result = pretrain(arm.config, resume=True, ablation=self.plan.name, arm=label,
                              parent_run_id=self.parent_run_id, experiment=self.plan.experiment,
                              progress=self.progress)
        if self.rank != 0:
            return not result.reused
        self.models[label] = result.model_dir
        if not arm.control:
            entry = self._pretrain_entry(label)
            run_id_file = result.run_dir / "mlflow_run_id"
            entry.update(status="done", error=None, run_dir=str(result.run_dir), metrics=result.metrics,
                         run_id=run_id_file.read_text().strip() if run_id_file.is_file() else None)
            self.say(f"  {_pretrain_line(result.metrics)}")
        if (out := self._stage_out(label, "model")) is not None:
            _copy_tree(result.model_dir, out)
            record = {"run_dir": str(result.run_dir), "metrics": result.metrics}
            if not arm.control:
                record["run_id"] = self._pretrain_entry(label)["run_id"]
            (out.parent / "pretrain.json").write_text(json.dumps(record, indent=2))
        return not result.reused

    def _model(self, label: str) -> Path:
        """The arm's model folder: the DVC stage's copy, this invocation's run, or the cached run."""
        if self.stage_dir is not None and (self.stage_dir / label / "model" / "config.json").is_file():
            return self.stage_dir / label / "model"
        if label not in self.models:
            self._pretrain(label)
        return self.models[label]

    def _evaluate(self, kind: str, label: str, task: str | None) -> bool:
        from bvr.evaluation.run import evaluate_model

        arm = self.plan.arm(label)
        pretrain_entry = None if arm.control else self._pretrain_entry(label)
        if pretrain_entry is not None and pretrain_entry["status"] == "failed":
            raise BvrError(f"pretraining of '{label}' failed; nothing to evaluate", where=f"{kind}:{label}")
        result = evaluate_model(self._model(label), kind, task, self.plan.evaluations, data_dir=self.plan.data_dir,
                                label=label, pretrain_seed=arm.pretrain_seed, ablation=self.plan.name,
                                experiment=self.plan.experiment, parent_run_id=self.parent_run_id,
                                progress=self.progress)
        self._evaluation_entry(label, kind, task).update(
            status="done", error=None, run_id=result.run_id, main_key=result.main_key, score=result.score,
            seeds={str(k): v for k, v in result.seeds.items()}, baseline=result.baseline, seconds=result.seconds)
        spread = "" if len(result.seeds) < 2 else (f" (probe seeds {min(result.seeds.values()):.4f}"
                                                   f"–{max(result.seeds.values()):.4f})")
        self.say(f"  {result.main_key} {result.score:.4f}{spread}" +
                 (f"; trivial baseline {result.baseline:.4f}" if result.baseline is not None else ""))
        if (out := self._stage_out(label, f"{kind}-{task}.json" if task else f"{kind}.json")) is not None:
            out.write_text(json.dumps(self._evaluation_entry(label, kind, task), indent=2))
        return not result.reused

    def _blimp(self, label: str) -> bool:
        return self._evaluate("blimp", label, None)

    def _probe(self, label: str, task: str) -> bool:
        return self._evaluate("probe", label, task)

    def _finetune(self, label: str, task: str) -> bool:
        from bvr.tasks.run import finetune

        arm = self.plan.arm(label)
        entries = self._finetune_entries(label, task)
        pretrain_entry = None if arm.control else self._pretrain_entry(label)
        if pretrain_entry is not None and pretrain_entry["status"] == "failed":
            raise BvrError(f"pretraining of '{label}' failed; nothing to fine-tune", where=f"finetune:{label}:{task}")
        # The control fine-tunes from its initialisation (the weights arm seed s started from), not from weights
        # drawn per fine-tuning seed: fine-tuning seeds then nest inside the control's pretraining seed as they do
        # inside every arm's.
        result = finetune(self._model(label), task, seeds=self.plan.seeds, data_dir=self.plan.data_dir,
                          output_dir=self.plan.output_dir, preset=self.plan.preset,
                          overrides=self.plan.ablation.finetune_overrides(), from_scratch=False, arm=label,
                          ablation=self.plan.name, experiment=self.plan.experiment,
                          parent_run_id=self.parent_run_id, progress=self.progress)
        by_seed = {seed.seed: seed for seed in result.seeds}
        for entry in entries:
            seed = by_seed[entry["seed"]]
            entry.update(status="done", error=None, run_id=seed.run_id, main_key=result.main_key,
                         parent_run_id=result.parent_run_id or entry["parent_run_id"],
                         score=seed.scores[result.main_key], collapsed=seed.collapsed, seconds=seed.seconds,
                         baseline=result.info.baseline)
        summary = result.summary()
        collapsed = sum(seed.collapsed for seed in result.seeds)
        self.say(f"  {result.main_key} median {summary['median']:.4f} (min {summary['min']:.4f}, max "
                 f"{summary['max']:.4f}) over {len(result.seeds)} seeds" +
                 (f", {collapsed} collapsed" if collapsed else ""))
        if (out := self._stage_out(label, f"finetune-{task}.json")) is not None:
            record = {"task": task, "arm": label, "main_key": result.main_key, **summary,
                      "collapsed": collapsed, "baseline": result.info.baseline,
                      "parent_run_id": entries[0]["parent_run_id"] if entries else None,
                      "seeds": [{"seed": s.seed, "score": s.scores[result.main_key], "collapsed": s.collapsed,
                                 "run_id": s.run_id, "seconds": s.seconds} for s in result.seeds]}
            out.write_text(json.dumps(record, indent=2))
        return any(not seed.reused for seed in result.seeds)

    def _adopt_stage_records(self) -> None:
        """Fill units the manifest lacks from the DVC stage folder.

        DVC skips a stage whose inputs did not change, so after ``dvc exp run -S`` (a new plan, a new manifest)
        the untouched stages never record themselves; their outputs, which DVC keeps current, say what they hold.
        """
        if self.stage_dir is None:
            return
        for entry in self.manifest["pretrain"]:
            path = self.stage_dir / entry["label"] / "pretrain.json"
            if entry["status"] != "done" and path.is_file():
                record = json.loads(path.read_text())
                entry.update(status="done", error=None, run_id=record.get("run_id"), run_dir=record.get("run_dir"),
                             metrics=record.get("metrics", {}))
        for entry in self.manifest.get("evaluations", []):
            name = f"{entry['kind']}-{entry['task']}.json" if entry["task"] else f"{entry['kind']}.json"
            path = self.stage_dir / entry["label"] / name
            if entry["status"] != "done" and path.is_file():
                record = json.loads(path.read_text())
                entry.update({k: record.get(k) for k in ("run_id", "main_key", "score", "seeds", "baseline",
                                                          "seconds")}, status="done", error=None)
        for entry in self.manifest["finetune"]:
            path = self.stage_dir / entry["label"] / f"finetune-{entry['task']}.json"
            if entry["status"] == "done" or not path.is_file():
                continue
            record = json.loads(path.read_text())
            seed = next((s for s in record.get("seeds", []) if s.get("seed") == entry["seed"]), None)
            if seed is not None:
                entry.update(status="done", error=None, run_id=seed.get("run_id"), main_key=record.get("main_key"),
                             parent_run_id=record.get("parent_run_id"), score=seed.get("score"),
                             collapsed=seed.get("collapsed"), seconds=seed.get("seconds"),
                             baseline=record.get("baseline", {}))

    def _report(self) -> bool:
        from bvr.report.render import render_report

        self._adopt_stage_records()
        self.save()
        result = render_report(self.manifest, workdir=Path.cwd())
        self.report = result
        self.say(f"  report: {result.html}" + ("" if result.complete else
                                                  f" (partial: {len(result.missing)} item(s) missing)"))
        return True


def _distinct(configs, *, tokenizer: bool) -> list[Config]:
    """One config per distinct corpus (and, with ``tokenizer``, tokenizer) settings: one build per stage folder."""
    seen: dict[str, Config] = {}
    for cfg in configs:
        seen.setdefault(config_hash(cfg.corpus, cfg.data_dir, cfg.tokenizer if tokenizer else None), cfg)
    return list(seen.values())


def _copy_tree(source: Path, target: Path) -> None:
    """Replace ``target`` with a copy of ``source`` (hard links where the file system allows)."""
    tmp = temp_sibling(target)
    if tmp.exists():
        shutil.rmtree(tmp)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, tmp, copy_function=link)
    replace_dir(tmp, target)


def _pretrain_line(metrics: dict[str, float]) -> str:
    parts = []
    if "val/mlm_loss" in metrics:
        parts.append(f"val MLM loss {metrics['val/mlm_loss']:.3f} (perplexity {metrics.get('val/perplexity', 0):.0f})")
    if "tokens_seen" in metrics:
        parts.append(f"{metrics['tokens_seen'] / 1e6:.2f}M tokens")
    if "epochs" in metrics:
        parts.append(f"{metrics['epochs']:.1f} epochs, each mask seen up to {metrics.get('mask_max_times_seen', 0):.0f}"
                     " times")
    return "; ".join(parts)


def _check_only(plan: Plan, only: list[str]) -> list[str]:
    units = plan.units()
    for unit in only:
        if unit not in units:
            raise BvrError(f"no unit '{unit}' in ablation '{plan.name}'", where="--only",
                           hint=f"units: {', '.join(units)}")
    return [u for u in units if u in only]


@contextlib.contextmanager
def _parent(runner: _Runner, only: list[str] | None) -> Iterator[None]:
    """The invocation's MLflow parent run; DVC stages (``--only``) share the manifest's."""
    from bvr.tracking import parent_run, run_tags

    plan = runner.plan
    if runner.rank != 0:
        yield
        return
    existing = runner.manifest.get("parent_run_id")
    if only and existing and _run_exists(existing):
        runner.parent_run_id = existing
        yield
        return
    tags = run_tags(ablation=plan.name, arm=None, stage="ablation",
                    extra={"bvr.preset": plan.preset or "default", "bvr.plan": plan.plan_hash,
                           "bvr.manifest": str(plan.manifest_path)})
    name = f"{plan.name} ({plan.preset or 'default'}{', dvc' if only else ''})"
    with parent_run(plan.experiment, name, workdir=Path.cwd(), tags=tags, description=plan.ablation.description) \
            as run:
        runner.parent_run_id = run.info.run_id
        runner.manifest["parent_run_id"] = run.info.run_id
        runner.save()
        try:
            yield
        finally:
            _log_manifest(runner)


def _run_exists(run_id: str) -> bool:
    from mlflow.exceptions import MlflowException

    from bvr.tracking import store_client, tracking_uri

    try:
        store_client(tracking_uri(Path.cwd())).get_run(run_id)
    except MlflowException:
        return False
    return True


def _log_manifest(runner: _Runner) -> None:
    from bvr.tracking import store_client, tracking_uri

    if runner.parent_run_id:
        runner.save()
        store_client(tracking_uri(Path.cwd())).log_artifact(runner.parent_run_id, str(runner.plan.manifest_path))


def run_ablation(
    plan: Plan,
    *,
    only: list[str] | None = None,
    stage_dir: Path | None = None,
    report: bool = True,
    progress: bool = True,
    console: Console | None = None,
) -> AblationResult:
    """Run every unit of ``plan`` (or the ``only`` ones), reusing finished units; render the report last.

    A unit that fails is recorded in the manifest and the run goes on with the units that do not need it; the
    failures are raised together at the end, after the (partial) report.

    Args:
        plan: from :func:`make_plan`.
        only: run just these units (``pretrain:static``; :meth:`Plan.units` lists them), as DVC stages do.
        stage_dir: also write each unit's products here for DVC (``pipeline/NAME``).
        report: render the report at the end of a full run.
        progress: progress bars.
        console: where to print (default: stdout).

    Raises:
        BvrError: an unknown unit; any unit failed (each named with its error, and what to do).
        KeyboardInterrupt: passed on after the manifest is saved; re-running continues.
    """
    start = time.perf_counter()
    console = console or Console()
    runner = _Runner(plan, stage_dir=stage_dir, progress=progress, console=console)
    units = _check_only(plan, only) if only else [u for u in plan.units() if report or u != "report"]
    if runner.rank != 0:  # other DDP ranks take part in pretraining only
        units = [u for u in units if u.split(":")[0] in ("corpus", "tokenizer", "data", "pretrain")]
    runner.say(_describe_plan(plan, units))
    earlier = runner.manifest["context"].get("wall_seconds") or 0.0  # summed over invocations
    with _parent(runner, only):
        for unit in units:
            runner.manifest["context"]["wall_seconds"] = earlier + time.perf_counter() - start
            if unit == "report":
                _log_manifest(runner)
            runner.run_unit(unit)
    runner.manifest["context"]["wall_seconds"] = earlier + time.perf_counter() - start
    runner.save()
    result = AblationResult(plan, runner.manifest, runner.ran, runner.reused, runner.failed,
                            time.perf_counter() - start, runner.report)
    if runner.failed:
        lines = "; ".join(f"{unit}: {message}" for unit, message in runner.failed.items())
        raise BvrError(f"{len(runner.failed)} unit(s) failed: {lines}", where=f"ablate {plan.name}",
                       hint="fix the cause and run the same command again: finished units are reused")
    return result


def _describe_plan(plan: Plan, units: list[str]) -> str:
    ab = plan.ablation
    arms = ", ".join(a.label for a in plan.arms)
    ev = plan.evaluations
    blimp = ("BLiMP " + (f"{ev.blimp_per_paradigm} pairs per paradigm" if ev.blimp_per_paradigm else "all pairs")
             if plan.blimp_dir is not None else "no BLiMP (no blimp/ in the data folder)")
    probes = (f"probes {', '.join(ev.probe_tasks)} x {ev.probe_seeds} seeds" if ev.probe_tasks else "no probes")
    lines = [f"[bold]ablation {plan.name}[/bold] (preset {plan.preset or 'default'}): {ab.description}",
             f"  arms: {arms} ({len(ab.pretrain_seeds)} pretraining seed(s) each)",
             f"  evaluations: {blimp}; {probes}",
             f"  fine-tuning: {', '.join(plan.tasks)} x {len(plan.seeds)} seeds",
             f"  manifest: {plan.manifest_path}",
             f"  units to run or reuse: {len(units)}"]
    return "\n".join(lines)
