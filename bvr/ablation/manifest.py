"""The manifest of an ablation (``output_dir/ablations/NAME-PRESET-HASH/manifest.json``): the plan and the index,
every unit's status and MLflow run ids, one :mod:`bvr.ablation.records` record per unit and seed. Its JSON layout is
version :data:`MANIFEST_VERSION`; :meth:`Manifest.load` refuses any other, naming the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bvr.ablation.checked import ablate_command, known_fields, mismatch, shown
from bvr.ablation.declare import ABLATION_KIND, CONTROL_ARM, Ablation
from bvr.ablation.folders import manifest_version, manifests_of, with_runs
from bvr.ablation.plan import MANIFEST_VERSION, ArmSeed, Plan, Unit, UnitKind
from bvr.ablation.records import EvaluationRecord, FinetuneRecord, PretrainRecord, Record, read_records
from bvr.cache import other_versions
from bvr.config import flatten
from bvr.errors import BvrError
from bvr.fs import write_text
from bvr.locks import file_lock


@dataclass
class RunContext:
    """Where and when the ablation ran: the commit, folders, times and machine."""

    git_commit: str | None = None
    data_dir: str | None = None
    output_dir: str | None = None
    started: str | None = None
    updated: str | None = None
    wall_seconds: float = 0.0
    """Summed over invocations."""
    hardware: dict[str, Any] = field(default_factory=dict)
    """:func:`bvr.runner.run.hardware`: what the numbers were measured on."""


RECORD_SECTIONS = ("pretrain", "evaluations", "finetune")
SECTION_OF = {PretrainRecord: "pretrain", EvaluationRecord: "evaluations", FinetuneRecord: "finetune"}
REWRITE = ("run the `bvr ablate` command that made it again: it sets a damaged manifest aside and starts a new one, "
           "reusing the finished units")


def now() -> str:
    """The current UTC time as the manifest writes it."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(kw_only=True)
class Manifest:
    """The plan identity, the machine, and every unit's record; fields in the order of the JSON file."""

    version: int = MANIFEST_VERSION
    ablation: str
    description: str | None = None
    source: str | None = None
    """The experiment file."""
    preset: str | None = None
    overrides: list[str] = field(default_factory=list)
    plan_hash: str | None = None
    experiment: str | None = None
    parent_run_id: str | None = None
    """The MLflow parent run of the latest invocation (DVC stages share it)."""
    store: str | None = None
    """The MLflow store (tracking URI) the runs were logged to, named when another store is asked for them."""
    published: str | None = None
    """The table of ``reports/published.yaml`` this ablation compares with."""
    kind: str = ABLATION_KIND
    """The experiment file's ``kind``: ``ablation``, or ``budget`` for a budget curve (its report draws the curve)."""
    arms: list[str]
    """Every arm, the control last."""
    labels: list[str] = field(default_factory=list)
    control_arm: str | None = None
    declared: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Arm -> the flattened config keys it declares, with their values."""
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Label -> the arm's full config."""
    pretrain_seeds: list[int] = field(default_factory=list)
    control_seeds: list[int] = field(default_factory=list)
    """The control's own initialisations, compared unpaired; empty: one per pretraining seed, compared paired."""
    tasks: list[str] = field(default_factory=list)
    finetune_seeds: list[int] = field(default_factory=list)
    finetune_hparams: dict[str, Any] = field(default_factory=dict)
    evaluations_settings: dict[str, Any] = field(default_factory=dict)
    """:meth:`bvr.ablation.declare.Evaluations.to_dict`."""
    pretrain: list[PretrainRecord] = field(default_factory=list)
    evaluations: list[EvaluationRecord] = field(default_factory=list)
    finetune: list[FinetuneRecord] = field(default_factory=list)
    context: RunContext = field(default_factory=RunContext)

    @classmethod
    def new(cls, plan: Plan, hardware: dict[str, Any]) -> Manifest:
        """A manifest with every unit of ``plan`` missing, measured on ``hardware``."""
        from bvr.tracking import git_commit

        ab = plan.ablation
        models = [(arm.arm, arm.label, arm.pretrain_seed) for arm in plan.arms]
        return cls(
            version=MANIFEST_VERSION, ablation=plan.name, description=ab.description, source=str(ab.source),
            preset=plan.preset, overrides=plan.overrides, plan_hash=plan.plan_hash, experiment=plan.experiment,
            published=(ab.published or {}).get("ablation"), kind=ab.kind,
            arms=list(dict.fromkeys(arm.arm for arm in plan.arms)),
            labels=[arm.label for arm in plan.arms], control_arm=CONTROL_ARM if ab.control else None,
            declared={arm.arm: _declared(ab, arm) for arm in plan.pretrained},
            configs={arm.label: arm.config.to_dict() for arm in plan.arms},
            pretrain_seeds=list(ab.pretrain_seeds),
            control_seeds=list(ab.control_seeds),
            tasks=plan.tasks, finetune_seeds=plan.seeds,
            finetune_hparams=ab.finetune_hparams, evaluations_settings=plan.evaluations.to_dict(),
            pretrain=[PretrainRecord(arm.arm, arm.label, arm.pretrain_seed) for arm in plan.pretrained],
            evaluations=[EvaluationRecord(*model, kind=kind.value, task=task)
                         for model in models for kind, task in plan.evaluation_keys()],
            finetune=[FinetuneRecord(*model, task=task, seed=seed)
                      for model in models for task in plan.tasks for seed in plan.seeds],
            context=RunContext(git_commit=git_commit(), data_dir=str(plan.data_dir) if plan.data_dir else None,
                               output_dir=str(plan.output_dir.resolve()), started=now(), updated=now(),
                               hardware=hardware))

    @classmethod
    def from_dict(cls, data: Any, *, damaged: list[str] | None = None, path: Path | None = None) -> Manifest:
        """The manifest ``data`` (a parsed manifest.json, read from ``path``) holds; errors name the `bvr ablate`
        command that rewrites the file. Given ``damaged``, a unit that lacks a field or holds one of the wrong type is
        left out and named there instead of refused (`bvr ablate` then resets it to missing: :meth:`load_for`)."""
        where = "ablation manifest"
        if not isinstance(data, dict):
            raise BvrError(f"expected a mapping, got {type(data).__name__}", where=where, hint=REWRITE)
        name = data.get("ablation")
        where = f"manifest of ablation '{name}'" if isinstance(name, str) else where
        hint = (f"run `{ablate_command(data, path)}`: it resets a damaged unit to missing (a damaged manifest: sets "
                "it aside and starts a new one) and runs what is missing, reusing the finished units")
        if data.get("version") != MANIFEST_VERSION:
            raise BvrError(f"manifest version {data.get('version')!r} is not {MANIFEST_VERSION}", where=where,
                           hint=hint)
        if not isinstance(name, str) or not name:
            raise BvrError("missing key 'ablation'", where=where, hint=hint)
        if not isinstance(data.get("arms"), list) or not data["arms"]:
            raise BvrError("'arms' must be a non-empty list", where=f"{where}: arms", hint=hint)
        wrong = mismatch(cls, data, skip=(*RECORD_SECTIONS, "context")) or _context_mismatch(data.get("context"))
        if wrong or (absent := [key for key in RECORD_SECTIONS if key not in data]):
            raise BvrError(wrong or f"missing key '{absent[0]}'", where=where, hint=hint)
        values = known_fields(cls, data)
        for record, key in SECTION_OF.items():
            values[key] = read_records(record, data[key], f"{where}: {key}", hint, damaged)
        values["context"] = RunContext(**known_fields(RunContext, data.get("context") or {}))
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON layout of manifest.json (version :data:`MANIFEST_VERSION`)."""
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))

    @classmethod
    def load(cls, path: Path, *, damaged: list[str] | None = None) -> Manifest:
        """Read a manifest, naming the file when it cannot be read or :meth:`from_dict` refuses it."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise BvrError(f"cannot read the ablation manifest: {err}", where=str(path), hint=REWRITE) from None
        try:
            return cls.from_dict(data, damaged=damaged, path=Path(path))
        except BvrError as err:
            raise BvrError(err.message, where=f"{path}: {err.where}" if err.where else str(path),
                           hint=err.hint) from None

    @classmethod
    def load_for(cls, plan: Plan, hardware: dict[str, Any], *, write: bool = True) -> tuple[Manifest, str | None]:
        """The manifest `bvr ablate` continues: ``plan``'s on disk, with every unit of the plan, repaired, and the
        one line saying what was repaired or that plan folders another version of bvr made are not continued (None).
        A damaged or unlisted unit entry is reset to missing; a manifest that cannot be used at all is set aside as
        ``manifest.json.damaged`` (only with ``write``: rank zero) and started again from the plan. Either way the
        advice of :meth:`load`'s errors, to run `bvr ablate` again, works."""
        path = plan.manifest_path
        if not path.is_file():
            return cls.new(plan, hardware), other_versions(plan.folder, MANIFEST_VERSION,
                                                           lambda folder: manifest_version(folder, plan.name), "plan")
        damaged: list[str] = []
        try:
            manifest = cls.load(path, damaged=damaged)
        except BvrError as err:
            aside = path.with_name(f"{path.name}.damaged")
            if write:
                path.replace(aside)
            return cls.new(plan, hardware), (f"{path}: the manifest could not be used ({err.message}); set aside as "
                                             f"{aside.name} and started again from the plan (finished units are "
                                             "reused)")
        manifest.context.hardware = hardware
        unlisted = manifest._take_planned(cls.new(plan, hardware), damaged)
        count = len(damaged) + sum(unlisted.values())
        if not count:
            return manifest, None
        parts = [*damaged, *(f"{key}: {n} planned unit{'s' * (n != 1)} not listed" for key, n in unlisted.items())]
        which = " or ".join(word for word, some in (("damaged", damaged), ("unlisted", unlisted)) if some)
        return manifest, (f"{path}: {count} {which} unit entr{'y' if count == 1 else 'ies'} ({'; '.join(parts)}) "
                          "reset to missing; their units run again (finished work is reused)")

    def _take_planned(self, fresh: Manifest, damaged: list[str]) -> dict[str, int]:
        """Add every record of ``fresh`` (the plan's, all missing) that this manifest lacks, in the plan's order;
        returns section -> how many it lacked beyond its ``damaged`` entries, where any."""
        unlisted = {}
        for key in RECORD_SECTIONS:
            kept = {record.key: record for record in getattr(self, key)}
            lacked = sum(record.key not in kept for record in getattr(fresh, key))
            planned = [kept.pop(record.key, record) for record in getattr(fresh, key)]
            setattr(self, key, [*planned, *kept.values()])  # records of units the plan no longer has stay
            if (extra := lacked - sum(entry.startswith(f"{key}[") for entry in damaged)) > 0:
                unlisted[key] = extra
        return unlisted

    def save(self, path: Path, *, mine: set[tuple[str, tuple[Any, ...]]] | None = None) -> None:
        """Write atomically (a run killed mid-write leaves the previous manifest), stamping ``context.updated``. Given
        ``mine``, the records this process wrote (:meth:`mark`), the save takes every other record from the file
        under its lock, so that processes running units of one plan side by side never undo each other's."""
        lock = file_lock(path.with_name(f".{path.name}.save.lock")) if mine is not None else contextlib.nullcontext()
        with lock:
            if mine is not None and path.is_file():
                with contextlib.suppress(BvrError):  # a damaged file: this process's view replaces it
                    self._take_others(Manifest.load(path), mine)
            self.context.updated = now()
            write_text(path, json.dumps(self.to_dict(), indent=2, default=str))

    def _take_others(self, disk: Manifest, mine: set[tuple[str, tuple[Any, ...]]]) -> None:
        """Take from ``disk`` the records another process wrote, its parent run and the longer wall time."""
        for section in RECORD_SECTIONS:
            theirs = {record.key: record for record in getattr(disk, section)}
            setattr(self, section, [record if (section, record.key) in mine else theirs.get(record.key, record)
                                    for record in getattr(self, section)])
        self.parent_run_id = self.parent_run_id or disk.parent_run_id
        self.context.wall_seconds = max(self.context.wall_seconds or 0.0, disk.context.wall_seconds or 0.0)

    @staticmethod
    def mark(record: Record) -> tuple[str, tuple[Any, ...]]:
        """Which record ``record`` is, as :meth:`save`'s ``mine`` holds it."""
        return SECTION_OF[type(record)], record.key

    @property
    def experiment_name(self) -> str:
        """The MLflow experiment of the ablation: ``experiment``, else the ablation's name."""
        return str(self.experiment or self.ablation)

    @property
    def pretrained_arms(self) -> list[str]:
        return [arm for arm in self.arms if arm != self.control_arm]

    def records(self) -> list[Record]:
        """Every unit's record: pretraining, evaluations, fine-tuning."""
        return [*self.pretrain, *self.evaluations, *self.finetune]

    def records_of(self, unit: Unit) -> list[Record]:
        """The records ``unit`` fills: none for the data units, the report and the control's initialisation."""
        if unit.kind is UnitKind.PRETRAIN:
            return [r for r in self.pretrain if r.label == unit.name]
        if unit.kind in (UnitKind.BLIMP, UnitKind.PROBE):
            return [r for r in self.evaluations
                    if r.label == unit.name and r.kind == unit.kind.value and r.task == unit.task]
        if unit.kind is UnitKind.FINETUNE:
            return self.finetune_records(unit.name, unit.task)
        return []

    def put(self, record: Record) -> None:
        """Put ``record`` in place of the manifest's record of the same unit and seed; a KeyError where none."""
        records: list[Any] = getattr(self, SECTION_OF[type(record)])
        for i, old in enumerate(records):
            if old.key == record.key:
                records[i] = record
                return
        raise KeyError(f"manifest of ablation '{self.ablation}' has no {type(record).__name__} {record.key}")

    def pretrain_record(self, label: str) -> PretrainRecord:
        return next(r for r in self.pretrain if r.label == label)

    def evaluation_record(self, label: str, kind: str, task: str | None) -> EvaluationRecord:
        return next(r for r in self.evaluations if r.label == label and r.kind == kind and r.task == task)

    def finetune_records(self, label: str, task: str) -> list[FinetuneRecord]:
        return [r for r in self.finetune if r.label == label and r.task == task]

    def gaps(self) -> list[str]:
        """What the manifest lacks of the plan its own fields name (labels, tasks, fine-tuning seeds), a sentence
        each (pretraining, fine-tuning); empty where it lacks nothing."""
        if not self.records():
            return ["the manifest lists no units"]
        control = re.compile(rf"{re.escape(self.control_arm)}(-p\d+)?") if self.control_arm else None
        planned = {"pretrain": {(label,) for label in self.labels if not (control and control.fullmatch(label))},
                   "finetune": {(label, task, seed) for label in self.labels for task in self.tasks
                                for seed in self.finetune_seeds}}
        lacked = {key: len(keys - {record.key for record in getattr(self, key)}) for key, keys in planned.items()}
        return [f"the manifest's '{key}' lacks {n} planned unit{'s' * (n != 1)}" for key, n in lacked.items() if n]

    @property
    def complete(self) -> bool:
        """Whether every pretraining and fine-tuning unit is done, and the manifest lists them all (:meth:`gaps`)."""
        return not self.gaps() and all(record.status == "done" for record in [*self.pretrain, *self.finetune])


def _context_mismatch(context: Any) -> str | None:
    """What is of the wrong type in a manifest's ``context`` (absent or null: nothing), as :func:`mismatch` says."""
    if context is not None and not isinstance(context, dict):
        return f"'context' must be an object, got {shown(context)}"
    wrong = mismatch(RunContext, context or {})
    return f"context: {wrong}" if wrong else None


def _declared(ablation: Ablation, arm: ArmSeed) -> dict[str, Any]:
    flat = flatten(arm.config.to_dict())
    return {key: flat.get(key) for key in sorted(ablation.declared.get(arm.arm, set()))}


def find_manifest(name: str, output_dir: Path = Path("outputs"), *, preset: str | None = None,
                  command: str = "report") -> Path:
    """The most recently updated manifest of ablation ``name`` (for ``preset`` if given); the error names
    ``command`` (``report``, ``status``)."""
    stem = Path(name).stem
    found = manifests_of(stem, output_dir, preset)
    if not found:
        raise BvrError(f"no runs of ablation '{stem}'" + (f" with preset '{preset}'" if preset else "") +
                       f" under {Path(output_dir) / 'ablations'} ({with_runs(output_dir)})", where=command,
                       hint=f"run `bvr ablate {stem}" + (f" --preset {preset}" if preset else "") + "` first")
    return found[0]


def latest_manifests(output_dir: Path = Path("outputs")) -> list[Manifest]:
    """The most recently updated manifest of each ablation that has one, for the summary across ablations."""
    manifests = [Manifest.load(path) for path in sorted((Path(output_dir) / "ablations").glob("*/manifest.json"))]
    latest: dict[str, Manifest] = {}
    for manifest in sorted(manifests, key=lambda m: m.context.updated or ""):
        latest[manifest.ablation] = manifest
    return list(latest.values())
