"""The :class:`Config` of every command, built by :func:`load_config` in layers (defaults, preset, config file,
``--set``). Every key is checked before any work starts: an unknown key, a wrong type or an impossible value raises
:class:`~bvr.errors.BvrError` naming the key and the file and line (or the ``--set``) it came from, and a renamed or
moved key says what to write instead (:data:`OLD_KEYS`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bvr.config.finetune import HYPERPARAMETERS, EvaluateConfig, FinetuneConfig, FinetuneSection
from bvr.config.launcher import LauncherConfig
from bvr.config.layering import Layer, build_dataclass, check, locate_error, merge_layer, override_layer
from bvr.config.pretraining import CorpusConfig, DataConfig, MaskingConfig, TokenizerConfig, TrainingConfig
from bvr.config.yaml import read_yaml
from bvr.errors import BvrError
from bvr.fs import write_text
from bvr.model.encoder_config import ModelConfig

_PACKAGE = Path(__file__).resolve().parents[1]  # the folder of the bvr package


def shipped_experiments(package: Path = _PACKAGE) -> Path:
    """The folder of the shipped experiment files and their ``presets/``: a checkout's top-level ``experiments/``
    (the source of truth) when ``package``, the bvr package's folder, lies in one, else the copy an install of the
    package carries as ``bvr/_experiments`` (``setup.py`` puts it there when a wheel is built).

    >>> shipped_experiments(Path("/nowhere/site-packages/bvr")).as_posix()
    '/nowhere/site-packages/bvr/_experiments'
    """
    checkout = package.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "experiments" / "presets").is_dir():
        return checkout / "experiments"
    return package / "_experiments"


PRESETS_DIR = shipped_experiments() / "presets"
"""Folder of the shipped presets."""


@dataclass
class Config:
    """Everything a run depends on."""

    name: str = "default"
    """Readable name of the run (shown in outputs and in MLflow)."""
    data_dir: str | None = None
    """Folder holding the datasets (corpus/, glue/, ...); also --data-dir or BVR_DATA_DIR."""
    output_dir: str = "outputs"
    """Where prepared data, tokenizers and checkpoints are cached, each in a folder named by a config hash."""
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    finetune: FinetuneSection = field(default_factory=FinetuneSection)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    """What ``bvr ablate --launcher slurm`` asks SLURM for (not in any run's key)."""

    def __post_init__(self) -> None:
        # '~' in a config file or a --set means the home folder, as in --data-dir and --output-dir
        # (bvr.cli.options.folder_option): never a folder named '~' in the working folder.
        self.output_dir = os.path.expanduser(self.output_dir)
        self.data_dir = os.path.expanduser(self.data_dir) if self.data_dir is not None else None
        # The name becomes part of folder names (outputs/runs/pretrain-NAME-HASH): no path separators, no '..'.
        check(is_name(str(self.name)), "name", f"{self.name!r} cannot name a folder: {NAME_RULE}")
        # Checks across sections: each section validated itself already.
        check(self.data.max_length <= self.model.max_tokens, "data.max_length",
              f"{self.data.max_length} exceeds the {self.model.max_tokens} positions of the model "
              f"(model.max_position_embeddings={self.model.max_position_embeddings}, family {self.model.family})")
        budget, accum = self.training.tokens_per_batch, self.training.grad_accum
        check(budget is None or budget // accum >= self.data.max_length, "training.tokens_per_batch",
              f"{budget} tokens over grad_accum {accum} micro-batches cannot hold one sequence of data.max_length "
              f"{self.data.max_length}: use at least {accum * self.data.max_length}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
NAME_RULE = "use letters, digits, '.', '_' and '-' (not starting with '.')"


def is_name(text: str) -> bool:
    """Whether ``text`` can name a run or an experiment: it ends up in folder names and in the commands of
    ``dvc.yaml``, so it stays one plain path component that a shell reads as it is (:data:`NAME_RULE`)."""
    return _NAME.fullmatch(text) is not None


_OLD_FILE = "is the old experiments/finetune.yaml form"
OLD_KEYS: dict[str, str] = {
    "training.lr": "training.lr was renamed: use training.learning_rate",
    "masking.whole_word": "masking.whole_word was replaced by masking.scheme: write masking.scheme: whole-word "
                          "(or token)",
    "defaults": f"'defaults:' {_OLD_FILE}: put its keys under finetune:",
    "tasks": f"'tasks:' {_OLD_FILE}: put a task's keys under finetune.per_task.TASK",
    "presets": f"'presets:' {_OLD_FILE}: put a preset's keys under finetune: in experiments/presets/NAME.yaml",
    "finetune.hparams": "finetune.hparams was removed: put its keys directly under finetune",
    "finetune.presets": "finetune.presets was removed: put a preset's fine-tuning settings under presets.NAME.finetune",
    "evaluate.presets": "evaluate.presets was removed: put a preset's evaluation settings under presets.NAME.evaluate",
    "evaluate.blimp": "evaluate.blimp is a mapping: write evaluate.blimp.enabled: false to turn BLiMP off",
    "evaluate.probes": "evaluate.probes is a mapping: write evaluate.probes.tasks: [] to turn the probes off",
    "data.nsp": "data.nsp was replaced by data.sentence_objective: write data.sentence_objective: nsp (for true) or "
                "none (for false)",
    **{key: f"{key} is a fine-tuning setting: use finetune.{key}" for key in HYPERPARAMETERS},
}
"""Keys that were renamed or moved -> the one-line message saying what to write instead."""


def preset_path(name: str) -> Path:
    """``experiments/presets/NAME.yaml``; for no such preset, an error listing the shipped ones."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise BvrError(f"unknown preset '{name}'", where="--preset", hint=f"known presets: {', '.join(preset_names())}")
    return path


def preset_names() -> list[str]:
    """Names of the shipped presets."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def load_config(config_file: Path | None = None, *, preset: str | None = None, overrides: list[str] | None = None,
                extra: dict[str, Any] | None = None) -> Config:
    """The resolved :class:`Config` of defaults, a preset, a file, ``extra`` (values set by CLI options such as
    ``data_dir``) and ``section.key=value`` overrides, in that order."""
    layers: list[Layer] = []
    if preset:
        layers.append(read_yaml(preset_path(preset)))
    if config_file:
        layers.append(read_yaml(Path(config_file)))
    if extra:
        layers.append((extra, {k: f"--{k.replace('_', '-')}" for k in extra}))
    layers += [override_layer(text) for text in overrides or []]
    return build_config(layers)


def build_config(layers: list[Layer]) -> Config:
    """Merge ``layers`` in order into a :class:`Config` (as copies: the arms of an ablation share layers); an error
    names the layer that set the bad key. Each layer's ``finetune`` block is kept for :func:`resolve_finetune` (a
    later layer's ``finetune.KEY`` overrides an earlier ``finetune.per_task``)."""
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for data, where in layers:
        merge_layer(merged, copy.deepcopy(data), origins, where)
    try:
        cfg = build_dataclass(Config, merged, "", OLD_KEYS)
    except BvrError as err:
        raise locate_error(err, origins) from None
    cfg.finetune.layers = [data["finetune"] for data, _ in layers if isinstance(data.get("finetune"), dict)]
    return cfg


def resolve_finetune(cfg: Config, spec: Any) -> FinetuneConfig:
    """One task's effective fine-tuning hyperparameters.

    In order, each over the one before: the :class:`FinetuneConfig` defaults, the task's own (``spec.finetune``, a
    mapping of the keys where the task differs), then every layer of ``cfg`` (preset, file, ``--set``): within a
    layer ``finetune.KEY``, then ``finetune.per_task.TASK.KEY``. A config built without layers (``Config()`` or
    :func:`~bvr.config.layering.build_dataclass`) counts as one layer setting the keys that differ from the defaults.
    ``spec`` is a :class:`~bvr.tasks.registry.TaskSpec` (its ``name`` and ``finetune``).
    """
    section = cfg.finetune
    layers = getattr(section, "layers", None)
    if layers is None:
        defaults = dataclasses.asdict(FinetuneConfig())
        layers = [{**{k: v for k, v in section.hyperparameters().items() if v != defaults[k]},
                   "per_task": section.per_task}]
    values = dict(spec.finetune)
    for layer in layers:
        values.update({k: v for k, v in layer.items() if k in HYPERPARAMETERS})
        values.update((layer.get("per_task") or {}).get(spec.name) or {})
    return build_dataclass(FinetuneConfig, values, "finetune.")


def dump_config(cfg: Config | dict[str, Any], path: Path) -> Path:
    """Write a resolved config (or part of one) as YAML, atomically, refusing a symbolic link at ``path``."""
    data = cfg.to_dict() if isinstance(cfg, Config) else cfg
    return write_text(path, yaml.safe_dump(data, sort_keys=False))


def config_hash(*parts: Any, length: int = 12) -> str:
    """A short stable hash of JSON-able parts (dataclasses allowed): the name of a cache folder."""
    canonical = [dataclasses.asdict(p) if dataclasses.is_dataclass(p) else p for p in parts]
    blob = json.dumps(canonical, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]
