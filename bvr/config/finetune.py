"""The ``finetune`` section (:class:`FinetuneSection`: hyperparameters of every task, one task's under
``per_task.TASK``, and the tasks and seeds an ablation fine-tunes) and the ``evaluate`` section (the zero-shot and
probe evaluations of every model). One task's effective hyperparameters: :func:`bvr.config.resolve_finetune`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from bvr.config.layering import build_dataclass, check, check_finite, unknown_key
from bvr.config.pretraining import PRECISIONS
from bvr.errors import BvrError

SENTENCE_FEATURES: tuple[str, ...] = ("cls", "mean", "last4")
"""Probe feature kinds of sentence and pair tasks."""
TOKEN_FEATURES: tuple[str, ...] = ("last", "last4")
"""Probe feature kinds of tagging tasks (one row per word, at its first sub-token)."""
PROBE_KINDS: tuple[str, ...] = ("classification", "regression", "tagging")
"""Task kinds a probe can be trained on (span tasks predict positions, not labels)."""
NOT_HASHED = ("eval_batch_size", "num_workers", "log_every_steps")
"""Fine-tuning fields that change speed or logging, not a result: left out of :meth:`FinetuneConfig.hashed`."""


@dataclass
class DataSettings:
    """What shapes the data: lengths, caps, the fallback split and SQuAD v2.0's no-answer decision. Part of every
    result's cache key."""

    max_length: int = 128
    """Tokens per sequence (per window for span tasks), special tokens included."""
    stride: int = 128
    """Span tasks: tokens shared by consecutive windows over a long context."""
    max_train_examples: int | None = None
    """Train on a random subset of this many examples (questions for span tasks); None: all."""
    max_eval_examples: int | None = None
    """Evaluate on a random subset of this many examples per evaluation split; None: all."""
    subset_seed: int = 0
    """Seed of both subsets, the same for every fine-tuning seed so seeds differ only in training."""
    article_split_fraction: float = 0.2
    """Span tasks without a training file: share of the dev file's articles kept for evaluation."""
    article_split_seed: int = 0
    """Span tasks without a training file: seed of the article split."""
    null_threshold: float = 0.0
    """SQuAD v2.0: answer "" when the null score exceeds the best span's score by more than this (0: BERT's
    default, not tuned on any data)."""
    null_threshold_heldout: float = 0.0
    """SQuAD v2.0: share of the training side's articles held out of training to choose the null threshold on (the
    one with the best F1 there, after each epoch), in place of ``null_threshold``; 0: none."""
    selection_examples: int = 0
    """Training examples held out of training as the split :data:`bvr.tasks.kinds.SELECTION`, scored after each
    epoch (0: none). Fine-tuning sets it for each point of a grid (:meth:`FinetuneConfig.grid`)."""
    selection_share: float = 0.2
    """At most this share of a training split is held out for selection (a task too small to spare
    ``selection_examples``)."""


@dataclass
class FinetuneConfig(DataSettings):
    """Resolved fine-tuning hyperparameters of one task; the data settings (lengths, caps, the fallback article
    split) are inherited from :class:`DataSettings`. The values follow BERT's recipe (appendix A.3: learning rate in
    {5e-5, 3e-5, 2e-5}, batch 16 or 32, 2 to 4 epochs, 10% linear warm-up)."""

    learning_rate: float | list[float] = 2e-5
    """Peak AdamW learning rate; a list is a grid (:meth:`grid`): every model is fine-tuned at each value and keeps
    the one whose seeds score best (median) on the selection split (``selection_examples``)."""
    batch_size: int = 32
    """Training examples (windows, for span tasks) per optimiser step."""
    epochs: int | list[int] = 3
    """Passes over the training split; every evaluation split is scored after each. A list is a grid, as for
    ``learning_rate`` (the grid is every pair of the two lists)."""
    warmup_fraction: float = 0.1
    """Share of the optimiser steps spent warming the learning rate up from 0; then it decays linearly to 0."""
    weight_decay: float = 0.01
    """AdamW weight decay (not on biases and LayerNorm weights)."""
    max_steps: int | None = None
    """Stop after this many optimiser steps, if that comes before the last epoch ends (the schedule fits it)."""
    eval_batch_size: int = 64
    """Examples per evaluation batch."""
    grad_clip: float = 1.0
    """Gradient norm clipping (0: off)."""
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas (BERT's)."""
    adam_eps: float = 1e-6
    """AdamW epsilon (BERT's)."""
    precision: str = "auto"
    """'auto' (bf16-mixed on a GPU that has it, else 32-true), '32-true', 'bf16-mixed' or '16-mixed'."""
    accelerator: str = "auto"
    """Lightning accelerator: 'auto', 'cpu', 'gpu'/'cuda' or 'mps'. One device: fine-tuning runs are small."""
    num_workers: int = 0
    """DataLoader worker processes."""
    log_every_steps: int = 10
    """Log the training loss every this many optimiser steps."""
    selection_examples: int = 2000
    """A grid (``learning_rate`` or ``epochs`` a list): training examples (questions, for span tasks: whole
    articles) held out of training, on which each grid point is scored to choose one; drawn with ``subset_seed``
    before ``max_train_examples``, never trained on and never the reported split. On a training split too small to
    spare them, ``selection_share`` of it. A grid of one point holds nothing out and trains as before."""

    def __post_init__(self) -> None:
        for key in GRID_KEYS:
            values = getattr(self, key)
            if isinstance(values, list):
                check(bool(values), f"finetune.{key}", "an empty grid: give one value or a list of several")
                check(len(set(values)) == len(values), f"finetune.{key}", f"the grid repeats a value: {values}")
            for value in _values(values):
                check(math.isfinite(value), f"finetune.{key}", f"must be a finite number, got {value}")
                check(value > 0, f"finetune.{key}", f"must be positive, got {value}")
        check_finite({key: getattr(self, key) for key in ("weight_decay", "grad_clip", "adam_eps")}, "finetune.")
        for key in ("batch_size", "eval_batch_size", "log_every_steps"):
            check(getattr(self, key) > 0, f"finetune.{key}", f"must be positive, got {getattr(self, key)}")
        check(self.selection_examples >= 0, "finetune.selection_examples", "must be non-negative")
        check(0.0 < self.selection_share < 1.0, "finetune.selection_share", "must be in (0, 1)")
        for key in ("max_train_examples", "max_eval_examples", "max_steps"):
            value = getattr(self, key)
            check(value is None or value >= 1, f"finetune.{key}", "must be at least 1 (or null)")
        check(0.0 <= self.warmup_fraction < 1.0, "finetune.warmup_fraction", "must be in [0, 1)")
        check(self.max_length >= 8, "finetune.max_length", "must be at least 8")
        check(self.stride >= 0, "finetune.stride", "must be non-negative")
        check(0.0 < self.article_split_fraction < 1.0, "finetune.article_split_fraction", "must be in (0, 1)")
        check(math.isfinite(self.null_threshold), "finetune.null_threshold", "must be a finite number")
        check(0.0 <= self.null_threshold_heldout < 1.0, "finetune.null_threshold_heldout",
              "must be in [0, 1) (0: no held-out slice)")
        check(len(self.adam_betas) == 2 and all(0 <= b < 1 for b in self.adam_betas), "finetune.adam_betas",
              "needs two values in [0, 1)")
        check(self.precision in PRECISIONS, "finetune.precision",
              f"'{self.precision}' is not one of {', '.join(PRECISIONS[:-1])}")
        check(self.weight_decay >= 0 and self.grad_clip >= 0 and self.num_workers >= 0, "finetune.weight_decay",
              "weight_decay, grad_clip and num_workers must be non-negative")

    def data_settings(self) -> DataSettings:
        names = {f.name for f in dataclasses.fields(DataSettings)}
        return DataSettings(**{name: getattr(self, name) for name in names})  # just the data part

    @property
    def is_grid(self) -> bool:
        """Whether ``learning_rate`` or ``epochs`` lists more than one value."""
        return len(self.grid()) > 1

    def grid(self) -> list[GridPoint]:
        """Each point of the grid (one, where neither key is a list), learning rate first, in the lists' order.

        >>> [p.name for p in FinetuneConfig(learning_rate=[1e-4, 1e-3], epochs=[2, 3]).grid()]
        ['lr 1e-04, 2 epochs', 'lr 1e-04, 3 epochs', 'lr 1e-03, 2 epochs', 'lr 1e-03, 3 epochs']
        """
        pairs = [(float(lr), int(n)) for lr in _values(self.learning_rate) for n in _values(self.epochs)]
        held_out = len(pairs) > 1
        check(not held_out or self.selection_examples > 0, "finetune.selection_examples",
              "a grid of several points needs held-out examples to choose on: set it to at least 1")
        return [GridPoint(lr, n, dataclasses.replace(self, learning_rate=lr, epochs=n, selection_examples=(
            self.selection_examples if held_out else 0))) for lr, n in pairs]

    def as_dict(self) -> dict[str, Any]:
        """The fields as logged and recorded: a point trained without a selection split (one grid point) leaves the
        selection keys out, so that its record is the same as before grids existed."""
        data = dataclasses.asdict(self)
        if self.selection_examples == 0:
            for key in SELECTION_KEYS:
                data.pop(key)
        return data

    def hashed(self) -> dict[str, Any]:
        """The fields that change a result (not :data:`NOT_HASHED`, which change only speed or logging)."""
        return {k: v for k, v in self.as_dict().items() if k not in NOT_HASHED}


@dataclass(frozen=True)
class GridPoint:
    """One point of a fine-tuning grid and the config that trains it (scalar ``learning_rate`` and ``epochs``;
    ``selection_examples`` 0 where the grid has one point and nothing is held out)."""

    learning_rate: float
    epochs: int
    config: FinetuneConfig

    @property
    def name(self) -> str:
        """``lr 3e-04, 2 epochs``: how the terminal, MLflow and the report name the point; the rate with as many
        digits as it needs, so that two points never share a name.

        >>> [GridPoint(lr, 1, FinetuneConfig()).name for lr in (2e-5, 2.5e-5)]
        ['lr 2e-05, 1 epoch', 'lr 2.5e-05, 1 epoch']
        """
        rate = next(text for digits in range(16) if float(text := f"{self.learning_rate:.{digits}e}") ==
                    self.learning_rate)
        return f"lr {rate}, {self.epochs} epoch{'s' if self.epochs != 1 else ''}"

    def to_dict(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate, "epochs": self.epochs}


GRID_KEYS = ("learning_rate", "epochs")
"""The keys that may list several values: a grid, chosen on the selection split."""
SELECTION_KEYS = ("selection_examples", "selection_share")
"""The keys of the selection split, recorded only where one is held out."""


def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


HYPERPARAMETERS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(FinetuneConfig))
"""The keys of :class:`FinetuneConfig`: the ones ``finetune`` and ``finetune.per_task.TASK`` may set per task."""


@dataclass
class FinetuneSection(FinetuneConfig):
    """The ``finetune`` section: hyperparameters for every task (the fields above), per-task values, and the tasks
    and seeds an ablation fine-tunes."""

    tasks: list[str] = field(default_factory=lambda: ["sst2", "mrpc", "stsb", "rte", "cola", "conll2003", "squad"])
    """Tasks an ablation fine-tunes every arm on."""
    seeds: int = 5
    """Fine-tuning seeds per (arm, task) in an ablation."""
    optional: list[str] = field(default_factory=lambda: ["mnli", "qnli"])
    """Tasks an ablation fine-tunes too where their files exist in the data folder (large)."""
    per_task: dict[str, dict[str, Any]] = field(default_factory=dict)
    """TASK -> hyperparameters of that task alone, over the ones above in the same layer."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(bool(self.tasks), "finetune.tasks", "no fine-tuning tasks")
        check(self.seeds >= 1, "finetune.seeds", f"expected a positive integer, got {self.seeds}")
        self.per_task = {str(task): check_task_block(block, f"finetune.per_task.{task}")
                         for task, block in self.per_task.items()}

    def hyperparameters(self) -> dict[str, Any]:
        """The top-level hyperparameters (no tasks, seeds or per-task values)."""
        return {key: getattr(self, key) for key in HYPERPARAMETERS}


def check_task_block(block: Any, prefix: str) -> dict[str, Any]:
    """One ``per_task.TASK`` block, every key a :class:`FinetuneConfig` field of the right type; returns it coerced."""
    check(isinstance(block, dict), prefix, f"expected a mapping of fine-tuning settings, got {block!r}")
    for key in block:
        if key not in HYPERPARAMETERS:
            raise unknown_key(f"{prefix}.{key}", key, list(HYPERPARAMETERS), f"{prefix}.")
    try:
        built = build_dataclass(FinetuneConfig, block, f"{prefix}.")
    except BvrError as err:  # a value check names finetune.KEY: point at this block's key instead
        where = str(err.where or "")
        if not where.startswith(prefix):
            where = f"{prefix}.{where.removeprefix('finetune.')}"
        raise BvrError(err.message, where=where, hint=err.hint) from None
    return {key: getattr(built, key) for key in block}


def check_task_names(names: list[str], known: list[str], key: str, where: str | None = None) -> None:
    """Refuse a task name not in ``known`` (the registry's) at ``where`` (default: ``key``), suggesting the closest."""
    for name in names:
        if name not in known:
            err = unknown_key(f"{key}.{name}", name, known, "")
            raise BvrError(f"unknown task '{name}'", where=where or key, hint=err.hint)


@dataclass
class BlimpConfig:
    """Zero-shot BLiMP: minimal pairs scored by pseudo-log-likelihood (where the data folder has blimp/)."""

    enabled: bool = True
    """Score BLiMP on every model."""
    per_paradigm: int | None = 100
    """Pairs per paradigm, a fixed subsample the same for every model (None: all 1,000)."""
    seed: int = 0
    """Seed that picks the subsample."""

    def __post_init__(self) -> None:
        check(self.per_paradigm is None or self.per_paradigm >= 1, "evaluate.blimp.per_paradigm",
              f"expected an integer >= 1 or null, got {self.per_paradigm!r}")
        check(self.seed >= 0, "evaluate.blimp.seed", f"expected an integer >= 0, got {self.seed!r}")


@dataclass
class ProbesConfig:
    """Frozen-feature linear probes on every model."""

    tasks: list[str] = field(default_factory=lambda: ["sst2", "conll2003"])
    """Tasks probed ([]: no probes)."""
    seeds: int = 3
    """Probe seeds per model; a seed draws the probe's training subsample, nothing else."""
    features: str = "mean"
    """Feature kind whose score is the probe's headline: 'mean', 'cls' or 'last4'."""
    max_train_examples: int | None = 4000
    """Training examples per probe (None: the whole train split)."""
    max_eval_examples: int | None = None
    """Evaluation examples (None: the whole split), the same for every model."""
    heldout_examples: int | None = None
    """Training examples set aside and scored as the probe's test set, in place of the dev split as the headline
    (None: dev is the headline). A larger test set than a small dev split (SST-2's 872) cuts the sampling error."""

    def __post_init__(self) -> None:
        check(self.seeds >= 1, "evaluate.probes.seeds", f"expected an integer >= 1, got {self.seeds!r}")
        check(self.features in SENTENCE_FEATURES, "evaluate.probes.features",
              f"expected {', '.join(SENTENCE_FEATURES[:-1])} or {SENTENCE_FEATURES[-1]}, got {self.features!r}")
        for key in ("max_train_examples", "max_eval_examples", "heldout_examples"):
            value = getattr(self, key)
            check(value is None or value >= 1, f"evaluate.probes.{key}",
                  f"expected an integer >= 1 or null, got {value!r}")


@dataclass
class EvaluateConfig:
    """The ``evaluate`` section: evaluations an ablation runs on every pretrained model and every control."""

    blimp: BlimpConfig = field(default_factory=BlimpConfig)
    probes: ProbesConfig = field(default_factory=ProbesConfig)
