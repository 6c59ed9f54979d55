"""Ablations declared once: ``experiments/NAME.yaml`` parsed into one resolved :class:`~bvr.config.Config` per arm.

An experiment file states one decision under test (a RoBERTa or BERT ablation: masking, input format and NSP, batch
size, vocabulary) as small diffs over a shared base: an arm lists only what it changes::

    description: Static (BERT) vs dynamic (RoBERTa) masking.
    published: {ablation: masking}     # the table of reports/published.yaml it compares with (or null)
    base:                               # a config layer shared by every arm, over the chosen preset
      masking: {dupe_factor: 10}
      finetune: {tasks: [sst2, mrpc], seeds: 5, optional: [mnli, qnli]}
      evaluate: {blimp: {per_paradigm: 100}, probes: {tasks: [sst2]}}
    presets:                            # preset name -> a config layer over the base (shared by every arm)
      tiny:
        corpus: {max_documents: 800}
        finetune: {tasks: [sst2], seeds: 3, max_train_examples: 1000}
        pretrain_seeds: [0, 1, 2, 3]    # the one ablation key a preset block may set besides config sections
    arms:                               # arm name -> the config keys this arm is about, nothing else
      static: {masking: {mode: static}}
      dynamic: {masking: {mode: dynamic}}
    control: true                       # add a 'no-pretraining' arm: same encoder, random init, same fine-tuning
    pretrain_seeds: [0, 1, 2]
    control_seeds: [0, 1, 2, 3, 4, 5]   # the control's initialisations (default: the pretraining seeds; see below)
    kind: ablation                      # or budget: the arms are one recipe at increasing budgets (see below)

``finetune`` and ``evaluate`` are shared, so an arm may not set them; an arm's own ``presets: {NAME: {...}}`` block
scales its values to a preset (the batch-size ablation does) and may only touch keys the arm declares. Each arm's
config is built in layers (docs/configuration.md lists them) with :mod:`bvr.config`'s merging, so that a bad key,
type or value names the file, line and key. The control is initialised once per pretraining seed and compared
paired, seed with seed, unless ``control_seeds`` (top level or a preset block) lists other initialisations: then each
arm is compared with them unpaired (docs/ablations.md says why and with which test). A budget curve
(``kind: budget``) pretrains one recipe for increasing budgets: its arms may declare only :data:`BUDGET_KEYS`, list
the budgets from the smallest up, and need the control each budget is measured against; they see different numbers
of tokens on purpose (no equal-passes check).

:func:`bvr.ablation.loading.load_ablation` reads a file; :mod:`bvr.ablation.arms` checks the arms.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bvr.config import PRESETS_DIR, Config, EvaluateConfig
from bvr.errors import BvrError
from bvr.tasks.registry import get_task

EXPERIMENTS_DIR = PRESETS_DIR.parent

CONTROL_ARM = "no-pretraining"
"""Name of the control arm added by ``control: true``."""

PUBLISHED_TABLES = ("masking", "nsp", "batch-size", "bert-table5", "mask-split", "vocab", "span-masking",
                    "sentence-objective")
"""The tables of ``reports/published.yaml``, which an experiment's ``published: {ablation: NAME}`` may name (every
one is there: tests/test_report_stats.py)."""
TOP_KEYS = ("description", "published", "control", "arms", "base", "presets", "pretrain_seeds", "control_seeds",
            "kind")

ABLATION_KIND, BUDGET_KIND = "ablation", "budget"
"""An experiment's ``kind``: arms that answer one question at an equal budget (the default), or one recipe at
increasing budgets (a budget curve)."""
KINDS = (ABLATION_KIND, BUDGET_KIND)

BUDGET_KEYS = ("training.max_steps", "training.warmup_steps", "training.max_tokens")
"""The only keys the arms of a budget curve may declare."""

SHARED_SECTIONS = ("finetune", "evaluate")
"""Config sections every arm shares: set in ``base`` or ``presets``, never in an arm."""

MAX_ARMS = 64
"""Most arms an experiment file may declare (the shipped ones have 2 to 6). Resolving and comparing arms grows with
the square of their count: 10,000 arms took minutes and gigabytes before any message, so more are refused unread."""


@dataclass(frozen=True)
class Evaluations:
    """The ``evaluate`` section (:class:`~bvr.config.EvaluateConfig`, which documents each key) flattened: ``blimp`` is
    ``evaluate.blimp.enabled``, ``blimp_X`` is ``evaluate.blimp.X`` and ``probe_X`` is ``evaluate.probes.X``."""

    blimp: bool = True
    blimp_per_paradigm: int | None = 100
    blimp_seed: int = 0
    probe_tasks: tuple[str, ...] = ("sst2", "conll2003")
    probe_seeds: int = 3
    probe_features: str = "mean"
    probe_max_train_examples: int | None = 4000
    probe_max_eval_examples: int | None = None
    probe_heldout_examples: int | None = None

    @classmethod
    def from_config(cls, section: EvaluateConfig) -> Evaluations:
        """The settings of an ``evaluate`` section (probe task names resolved in the registry)."""
        blimp, probes = section.blimp, section.probes
        return cls(blimp=blimp.enabled, blimp_per_paradigm=blimp.per_paradigm, blimp_seed=blimp.seed,
                   probe_tasks=tuple(get_task(t).name for t in probes.tasks), probe_seeds=probes.seeds,
                   probe_features=probes.features, probe_max_train_examples=probes.max_train_examples,
                   probe_max_eval_examples=probes.max_eval_examples, probe_heldout_examples=probes.heldout_examples)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "probe_tasks": list(self.probe_tasks)}


ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


@dataclass
class Ablation:
    """One ablation, expanded for one preset: a resolved config per arm and what each arm declares."""

    name: str  # the experiment name (the file's stem), also the MLflow experiment
    description: str  # one paragraph from the file
    arms: dict[str, Config]  # arm name -> resolved config (``name`` is the arm name), in file order; not the control
    control: bool  # whether a ``no-pretraining`` control arm is fine-tuned too (see :meth:`control_config`)
    pretrain_seeds: list[int]  # each arm is pretrained once per seed
    finetune_tasks: list[str]  # tasks every arm is fine-tuned on (``finetune.tasks``)
    finetune_seeds: int  # fine-tuning seeds per (arm, task) (``finetune.seeds``)
    declared: dict[str, set[str]]  # arm name -> the dotted keys the arm's diff sets (what the arm is about)
    source: Path  # the experiment file
    preset: str | None = None  # the preset it was expanded for (None: dataclass defaults)
    published: dict[str, Any] | None = None  # the published table it compares with (``{'ablation': NAME}``), or None
    optional_tasks: list[str] = field(default_factory=list)  # fine-tuned where their files exist (finetune.optional)
    finetune_hparams: dict[str, Any] = field(default_factory=dict)
    """``KEY`` or ``per_task.TASK.KEY`` -> the value the file and ``--set`` give over the preset's, in the order they
    apply."""
    control_base: Config | None = None  # the control's config (:meth:`control_config`), None without a control
    evaluations: Evaluations = field(default_factory=Evaluations)  # what every model gets (``evaluate``)
    kind: str = ABLATION_KIND  # or :data:`BUDGET_KIND` for a budget curve
    control_seeds: list[int] = field(default_factory=list)
    """The control's initialisations when they are not the pretraining seeds (``control_seeds``; the same seeds in
    any order are left empty by :func:`~bvr.ablation.loading.load_ablation`); empty: one per pretraining seed,
    compared paired."""

    @property
    def is_budget(self) -> bool:
        return self.kind == BUDGET_KIND

    @property
    def control_initialisations(self) -> list[int]:
        """The seeds the control is initialised with: :attr:`control_seeds`, or else the pretraining seeds."""
        return list(self.control_seeds or self.pretrain_seeds)

    def control_config(self) -> Config | None:
        """The control's config: the shared layers (preset, base, the base's preset block, ``--set``) with no arm's
        diff, never pretrained, only initialised. It depends on nothing an arm declares, so changing one arm leaves
        the control's runs in place; where arms differ in encoder shape or tokenizer, the control has the base's."""
        return self.control_base if self.control else None

    def finetune_overrides(self) -> list[str]:
        """:attr:`finetune_hparams` as ``finetune.KEY=VALUE`` strings for :func:`bvr.tasks.run.finetune`, which
        applies them over the preset's ``finetune`` section: each task resolves as it does in the arms' config."""
        return [f"finetune.{key}={_yaml_scalar(value)}" for key, value in self.finetune_hparams.items()]


def _yaml_scalar(value: Any) -> str:
    """A value written so that ``parse_override`` reads it back as it was (``null``, ``1.0e-4``, ``true``)."""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def list_experiments() -> list[str]:
    """The names of the shipped experiments."""
    return sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml"))


def experiment_path(name_or_path: str | Path) -> Path:
    """The file of an experiment given by name ('masking') or path."""
    text = str(name_or_path)
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return path
    candidate = EXPERIMENTS_DIR / f"{text}.yaml"
    if candidate.is_file():
        return candidate
    raise BvrError(f"unknown experiment '{text}'", where="experiment",
                   hint=f"known experiments: {', '.join(list_experiments())}, or give a path to a YAML file")
