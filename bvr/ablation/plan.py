"""An ablation laid out as work: an experiment file expanded for one preset, data folder and output folder into the
:class:`Plan` (arms, tasks, seeds) and its :class:`Unit` s, which run in order (:meth:`Plan.units`): ``corpus``,
``tokenizer:FAMILY``, ``data:ARM``, ``pretrain:ARM``, ``blimp:ARM``, ``probe:ARM:TASK``, ``finetune:ARM:TASK``,
``report``; the plan's manifest (:mod:`bvr.ablation.manifest`) records what each produced.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from pathlib import Path

from bvr.ablation.arms import equal_passes
from bvr.ablation.declare import CONTROL_ARM, Ablation, Evaluations
from bvr.ablation.loading import load_ablation
from bvr.config import Config, config_hash
from bvr.errors import BvrError

MANIFEST_VERSION = 2
"""The manifest's JSON layout (:meth:`~bvr.ablation.manifest.Manifest.from_dict` refuses another). Defined with the
plan, whose hash includes it: the plan's folder holds the manifest, so a new layout starts a new folder."""


def _identity(config: dict) -> dict:
    """An arm's configuration as it enters the plan's hash: without the output folder, the thread count, the
    launcher's resources (where and on what the runs are made, not what they are) and the data folder's path (the
    data enter by content, :meth:`Plan.data_content`).

    >>> _identity({"output_dir": "out", "data_dir": "/d", "name": "a", "training": {"threads": 2}, "launcher": {}})
    {'name': 'a', 'training': {}}
    """
    kept = {k: v for k, v in config.items() if k not in ("output_dir", "launcher", "data_dir")}
    if "training" in kept:
        kept["training"] = {k: v for k, v in kept["training"].items() if k != "threads"}
    return kept


class UnitKind(str, Enum):
    """What a unit does, in the order the kinds run."""

    CORPUS = "corpus"
    TOKENIZER = "tokenizer"
    DATA = "data"
    PRETRAIN = "pretrain"
    BLIMP = "blimp"
    PROBE = "probe"
    FINETUNE = "finetune"
    REPORT = "report"


@dataclass(frozen=True)
class Unit:
    """One unit of work: ``KIND[:NAME[:TASK]]``, where NAME is the tokenizer family or the arm's label.

    >>> Unit(UnitKind.FINETUNE, "static", "sst2").id, Unit(UnitKind.TOKENIZER, "bert").id
    ('finetune:static:sst2', 'tokenizer:bert')
    """

    kind: UnitKind
    name: str | None = None
    """The tokenizer family (``tokenizer``) or the arm's label (``data``, ``pretrain``, evaluations, fine-tuning)."""
    task: str | None = None

    @property
    def id(self) -> str:
        """The unit as ``--only`` and the log name it."""
        return ":".join(part for part in (self.kind.value, self.name, self.task) if part is not None)

    def __str__(self) -> str:
        return self.id


@dataclass(frozen=True)
class ArmSeed:
    """One pretrained model to fine-tune: an arm at one pretraining seed, or the control."""

    label: str
    """Name in MLflow, folders and units: the arm, or ``ARM-pSEED`` when there are several pretraining seeds."""
    arm: str
    pretrain_seed: int
    config: Config
    control: bool = False


@dataclass(frozen=True)
class Plan:
    """An ablation expanded for one preset, data folder and output folder: the arms, tasks and seeds to run."""

    ablation: Ablation
    arms: list[ArmSeed]
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
    def pretrained(self) -> list[ArmSeed]:
        return [arm for arm in self.arms if not arm.control]

    def arm(self, label: str) -> ArmSeed:
        for arm in self.arms:
            if arm.label == label:
                return arm
        raise BvrError(f"no arm '{label}' in ablation '{self.name}'", where="--only",
                       hint=f"arms: {', '.join(a.label for a in self.arms)}")

    @cached_property
    def plan_hash(self) -> str:
        """A hash of everything that changes a result: the settings, and the data by content, not by where they lie,
        so the same data under another path is the same plan."""
        return config_hash({"version": MANIFEST_VERSION, "tasks": self.tasks, "seeds": self.seeds,
                            "finetune": self.ablation.finetune_overrides(), "preset": self.preset,
                            "evaluations": self.evaluations.to_dict(), "blimp": self.blimp_dir is not None,
                            "configs": {arm.label: _identity(arm.config.to_dict()) for arm in self.arms},
                            "data": self.data_content()})

    def data_content(self) -> dict[str, str | None]:
        """What the plan reads, by content: each distinct corpus (its files' hash; by name where it is not a local
        path, as on the Hugging Face hub), each task's files and BLiMP's folder (None where read from the hub)."""
        from bvr.cache import fingerprint
        from bvr.tasks.data import task_files
        from bvr.tasks.registry import get_task

        content: dict[str, str | None] = {}
        for arm in self.arms:  # each corpus where its stage finds it; None where it is not here (the hub)
            corpus = arm.config.corpus
            place = Path(corpus.path).expanduser()  # absolute, else under the data folder, else the working directory
            place = self.data_dir / place if self.data_dir else place
            content[f"corpus {corpus.source} {corpus.path}"] = fingerprint(place) if place.exists() else None
        for task in dict.fromkeys([*self.tasks, *self.evaluations.probe_tasks]):
            content[f"task {task}"] = fingerprint(*task_files(get_task(task), self.data_dir)) if self.data_dir else None
        content["blimp"] = fingerprint(self.blimp_dir) if self.blimp_dir is not None else None
        return content

    @property
    def folder(self) -> Path:
        return self.output_dir / "ablations" / f"{self.name}-{self.preset or 'default'}-{self.plan_hash}"

    @property
    def manifest_path(self) -> Path:
        return self.folder / "manifest.json"

    @property
    def evaluations(self) -> Evaluations:
        return self.ablation.evaluations

    @property
    def blimp_dir(self) -> Path | None:
        """BLiMP's folder in the data folder, when it is there (BLiMP runs only then)."""
        folder = self.data_dir / "blimp" if self.data_dir else None
        return folder if self.evaluations.blimp and folder is not None and folder.is_dir() else None

    def evaluation_keys(self) -> list[tuple[UnitKind, str | None]]:
        """(kind, task) of every evaluation each model gets: BLiMP (task None), then one probe per task."""
        keys: list[tuple[UnitKind, str | None]] = [(UnitKind.BLIMP, None)] if self.blimp_dir is not None else []
        return keys + [(UnitKind.PROBE, task) for task in self.evaluations.probe_tasks]

    def units(self) -> list[Unit]:
        """Every unit, in the order they run."""
        families = dict.fromkeys(arm.config.tokenizer.family for arm in self.arms)  # each once, in arm order
        out = [Unit(UnitKind.CORPUS), *(Unit(UnitKind.TOKENIZER, family) for family in families)]
        out += [Unit(UnitKind.DATA, arm.label) for arm in self.pretrained]
        out += [Unit(UnitKind.PRETRAIN, arm.label) for arm in self.arms]
        if self.blimp_dir is not None:
            out += [Unit(UnitKind.BLIMP, arm.label) for arm in self.arms]
        out += [Unit(UnitKind.PROBE, arm.label, task) for arm in self.arms for task in self.evaluations.probe_tasks]
        out += [Unit(UnitKind.FINETUNE, arm.label, task) for arm in self.arms for task in self.tasks]
        return [*out, Unit(UnitKind.REPORT)]

    def needs(self, unit: Unit) -> list[Unit]:
        """The units ``unit`` reads the products of, which must finish first (the graph a launcher submits); the
        control's initialisation needs only its family's tokenizer."""
        if unit.kind is UnitKind.CORPUS:
            return []
        if unit.kind is UnitKind.TOKENIZER:
            return [Unit(UnitKind.CORPUS)]
        if unit.kind is UnitKind.REPORT:
            return [u for u in self.units() if u.kind is not UnitKind.REPORT]
        arm = self.arm(str(unit.name))
        if unit.kind is UnitKind.DATA or (unit.kind is UnitKind.PRETRAIN and arm.control):
            return [Unit(UnitKind.TOKENIZER, arm.config.tokenizer.family)]
        if unit.kind is UnitKind.PRETRAIN:
            return [Unit(UnitKind.DATA, arm.label)]
        return [Unit(UnitKind.PRETRAIN, arm.label)]

    def select(self, only: list[str]) -> list[Unit]:
        """The plan's units that ``only`` names, in the order they run: a unit's id, or a bare kind for every unit
        of that kind (``pretrain``: every arm's pretraining, the control's included)."""
        units = self.units()
        ids = [unit.id for unit in units]
        kinds = [kind.value for kind in UnitKind]
        for text in only:
            if text not in ids and text not in kinds:
                raise BvrError(f"no unit '{text}' in ablation '{self.name}'", where="--only",
                               hint=f"units: {', '.join(ids)}; or a kind for all its units: {', '.join(kinds)}")
        return [unit for unit in units if unit.id in only or unit.kind.value in only]


def make_plan(name_or_path: str | Path, *, preset: str | None = None, overrides: list[str] | None = None,
              data_dir: str | Path | None = None, output_dir: str | Path = "outputs") -> Plan:
    """Load and check an ablation (:func:`bvr.ablation.arms.equal_passes` too); lay out its arms, tasks and seeds."""
    from bvr.tasks.registry import get_task

    ablation = load_ablation(name_or_path, preset=preset, overrides=overrides)
    equal_passes(ablation)
    data = Path(data_dir).expanduser().resolve() if data_dir else None
    extra = {"output_dir": str(output_dir), **({"data_dir": str(data)} if data else {})}
    several = len(ablation.pretrain_seeds) > 1
    sources = [(arm, cfg, False, ablation.pretrain_seeds, several) for arm, cfg in ablation.arms.items()]
    control = ablation.control_config()
    if control is not None:  # one random initialisation per pretraining seed (the arms' starting points), or its own
        seeds = ablation.control_initialisations
        sources.append((CONTROL_ARM, control, True, seeds, several or len(seeds) > 1))
    arms = [ArmSeed(f"{arm}-p{seed}" if labelled else arm, arm, seed,
                    dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, seed=seed), **extra),
                    is_control) for arm, cfg, is_control, seeds, labelled in sources for seed in seeds]
    tasks = list(ablation.finetune_tasks)
    if data is not None:  # optional tasks join where their files are present
        tasks += [t for t in ablation.optional_tasks if (data / get_task(t).folder).exists()]
    return Plan(ablation, arms, tasks, list(range(ablation.finetune_seeds)), data, Path(output_dir),
                list(overrides or []))

