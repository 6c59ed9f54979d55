"""What earlier versions of bvr wrote, read by today's code: the names of their cache folders, the keys of their
saved configs and logged params, the column of their prepared data.

Today every cache folder is keyed on :data:`bvr.cache.CACHE_VERSION` and its settings as they are. A store made
before that (each stage then had versions of its own and left out the settings added after it was first cached) is
reused, not built again: each stage asks for the folder under today's name and, where only the earlier one is
finished, takes that (:func:`bvr.cache.reuse_older`); the stages after it are keyed on the folder it took, so an
earlier store is followed stage by stage. An ablation plan's earlier hash (:func:`earlier_plan_hash`) is here too, so
that a plan folder begun before today's hash continues. Nothing here decides what a run computes; delete a function
when no store of its kind is worth reusing any more.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from bvr.cache import cache_dir
from bvr.config import Config, DataConfig, TokenizerConfig, build_config, config_hash
from bvr.config.layering import at, check
from bvr.config.yaml import read_yaml

# The cache keys of before CACHE_VERSION: per-stage versions, per-variant ones where one variant's output changed.
STAGE_VERSIONS = {"corpus": 3, "tokenizer": 1, "tokenized": 1, "data": 2}
VARIANT_VERSIONS = {
    "tokenizer": {"roberta": 2},
    "tokenized": {"roberta": 2},
    "data": {"segment-pair": 3},
    "corpus": {"wikitext": 4, "wikiextractor": 4},
}
PRETRAIN_VERSION = 3
INIT_VERSION = 1
FINETUNE_VERSION = 6
EVALUATION_VERSION = 2
# Keys a section gained after its first caches, at the value those caches had: left out of the earlier keys while
# they hold it.
NEW_TOKENIZER_DEFAULTS = {"min_count": None, "count_percentile": 0.95, "train_documents": 200_000}
NEW_MODEL_DEFAULTS = {"norm": "post", "token_type_init": "normal", "embedding_norm": True, "head_transform": True}
NEW_TRAINING_DEFAULTS = {"tokens_per_batch": None, "dropout": True}
NEW_FINETUNE_DEFAULTS = {"null_threshold": 0.0, "null_threshold_heldout": 0.0}
# Frozen copies, on purpose: the keys the earlier hashes left out as they were then, not as today's config has them.
EXECUTION_KEYS = ("num_workers", "threads", "log_every_steps", "val_every_steps", "checkpoint_every_steps")


def stage_version(stage: str, variant: str) -> int:
    """The earlier cache version of ``stage`` for ``variant`` (the tokenizer family, the input format or the corpus
    source).

    >>> stage_version("tokenized", "bert"), stage_version("tokenized", "roberta")
    (1, 2)
    """
    return VARIANT_VERSIONS.get(stage, {}).get(variant, STAGE_VERSIONS[stage])


def hashed_section(section: Any, new_defaults: dict[str, Any]) -> dict[str, Any]:
    """A config section as an earlier key held it: the keys of ``new_defaults`` left out while at that value.

    >>> from bvr.config import ModelConfig
    >>> "norm" in hashed_section(ModelConfig(), {"norm": "post"}), hashed_section(ModelConfig(norm="pre"), {})["norm"]
    (False, 'pre')
    """
    return {k: v for k, v in dataclasses.asdict(section).items() if k not in new_defaults or new_defaults[k] != v}


# ---------------------------------------------------------------------------------------------------------------
# Earlier cache folders, one function per stage: the folder(s) the same settings were cached under before


def earlier_corpus(root: Path, corpus: dict[str, Any], location: dict[str, Any], content: str | None) -> list[Path]:
    """The corpus folder's earlier names: keyed on the files' content without their path, and before that (local
    files only) on both. ``corpus`` and ``location`` are the sections as today's key holds them, path included."""
    stage = {"version": stage_version("corpus", location["source"]), "corpus": corpus, "location": location,
             "content": content}
    if content is None:  # a hub id
        return [cache_dir(root, "corpus", stage)]
    with_path = cache_dir(root, "corpus", stage)
    stage["corpus"] = {k: v for k, v in corpus.items() if k != "path"}
    stage["location"] = {k: v for k, v in location.items() if k != "path"}
    return [cache_dir(root, "corpus", stage), with_path]


def earlier_tokenizer(root: Path, tokenizer: TokenizerConfig, corpus: str, content: str | None) -> Path:
    """The tokenizer folder's earlier name (``content``: the given tokenizer file's fingerprint, where one is)."""
    stage = {"version": stage_version("tokenizer", tokenizer.family), "corpus": corpus,
             "tokenizer": hashed_section(tokenizer, NEW_TOKENIZER_DEFAULTS)}
    if content is not None:
        stage["tokenizer_content"] = content
    return cache_dir(root, f"tokenizer-{tokenizer.family}", stage)


def earlier_tokenized(root: Path, family: str, corpus: str, tokenizer: str) -> Path:
    """The tokenized documents' earlier folder name."""
    stage = {"version": stage_version("tokenized", family), "corpus": corpus, "tokenizer": tokenizer}
    return cache_dir(root, "tokenized", stage)


def earlier_data(root: Path, data: DataConfig, tokenized: str) -> Path:
    """The instances' earlier folder name. The sentence objective was keyed as the ``nsp: true|false`` it
    replaced for ``nsp`` and ``none``, by name for ``sop``."""
    key = dataclasses.asdict(data)
    objective = key.pop("sentence_objective")
    if objective in ("none", "nsp"):
        key["nsp"] = objective == "nsp"
    else:
        key["sentence_objective"] = objective
    stage = {"version": stage_version("data", data.input_format), "tokenized": tokenized, "data": key}
    return cache_dir(root, f"data-{data.input_format}", stage)


def earlier_pretrain(runs: Path, cfg: Config, instances: str, tokenizer: str, reference_validation: bool) -> Path:
    """A pretraining run's earlier folder name (``reference_validation``: validated on other masks than its own)."""
    parts = {
        "version": PRETRAIN_VERSION, "instances": instances, "tokenizer": tokenizer,
        "model": hashed_section(cfg.model, NEW_MODEL_DEFAULTS), "masking": dataclasses.asdict(cfg.masking),
        "training": {k: v for k, v in hashed_section(cfg.training, NEW_TRAINING_DEFAULTS).items()
                     if k not in EXECUTION_KEYS},
    }
    if reference_validation:
        parts["validation"] = "reference masks"
    return cache_dir(runs, f"pretrain-{cfg.name}", parts)


def earlier_init(runs: Path, cfg: Config, tokenizer: str) -> Path:
    """The no-pretraining control's earlier folder name: its sentence head keyed as ``nsp``."""
    parts = {"version": INIT_VERSION, "tokenizer": tokenizer, "model": hashed_section(cfg.model, NEW_MODEL_DEFAULTS),
             "nsp": cfg.data.sentence_objective != "none", "seed": cfg.training.seed}
    return cache_dir(runs, f"init-{cfg.name}", parts)


@dataclass(frozen=True)
class SeedKey:
    """What today's key of a fine-tuning seed's folder holds besides the seed and the settings."""

    checkpoint: str
    task: str
    from_scratch: bool
    data: str | None
    """The task files' fingerprint (None: read from the hub)."""


def earlier_seed_dirs(root: Path, key: SeedKey, finetune: dict[str, Any], seed: int,
                      data_dir: Path | None) -> list[Path]:
    """A fine-tuning seed's earlier folder names: keyed without the data folder's path, and before that with it.
    ``finetune``: the hashed settings as today's key holds them (every field that changes a result)."""
    settings = {k: v for k, v in finetune.items() if k not in NEW_FINETUNE_DEFAULTS or NEW_FINETUNE_DEFAULTS[k] != v}
    parts = {"version": FINETUNE_VERSION, "checkpoint": key.checkpoint, "task": key.task, "finetune": settings,
             "data_dir": None, "from_scratch": key.from_scratch, "data": key.data, "seed": seed}
    with_path = {**parts, "data_dir": str(Path(data_dir).resolve()) if data_dir else None}
    return [cache_dir(root, f"{key.task}-seed{seed}", parts), cache_dir(root, f"{key.task}-seed{seed}", with_path)]


def earlier_result_names(name: str, settings: dict[str, Any], data_dir: Path | None, content: tuple) -> list[str]:
    """An evaluation result's earlier file names: keyed without the data folder's path (unless read from the hub),
    and before that with it. ``settings``: today's, whose ``version`` the earlier key replaces."""
    folder = str(Path(data_dir).resolve()) if data_dir else None
    earlier = {**settings, "version": EVALUATION_VERSION, "data_dir": folder}
    without = {k: v for k, v in earlier.items() if k != "data_dir" or v is None}
    return [f"{name}-{config_hash(without, *content)}.json", f"{name}-{config_hash(earlier, *content)}.json"]


def result_beside_model(model_dir: Path, name: str) -> Path:
    """Where an evaluation result named ``name`` lay before results were cached under the output folder: in
    ``evaluations/`` beside the model folder."""
    return Path(model_dir).parent / "evaluations" / name


def earlier_plan_hash(configs: dict[str, dict[str, Any]], settings: dict[str, Any]) -> str:
    """An ablation plan's earlier hash, which held each arm's data folder path where today's holds the data's
    content. ``configs``: each arm's resolved config; ``settings``: the rest of today's hash but the data."""
    def identity(config: dict[str, Any]) -> dict[str, Any]:
        kept = {k: v for k, v in config.items() if k not in ("output_dir", "launcher")}
        if "training" in kept:
            kept["training"] = {k: v for k, v in kept["training"].items() if k != "threads"}
        return kept

    return config_hash({**settings, "configs": {label: identity(c) for label, c in configs.items()}})


# ---------------------------------------------------------------------------------------------------------------
# Earlier keys and columns


def load_saved_config(path: Path) -> Config:
    """The configuration a run saved (``config.yaml`` of a run folder, ``bvr.yaml`` of its model folder), in
    today's keys.

    Unlike :func:`bvr.config.load_config`, which refuses keys bvr no longer reads, this reads what an earlier bvr
    wrote: ``data.nsp: true|false`` (before ``data.sentence_objective``) is read as ``nsp|none``.

    Raises:
        BvrError: the file is missing or unreadable, or holds a key or value no bvr wrote (with its file and line).
    """
    data, origins = read_yaml(Path(path), "saved config")
    section = data.get("data")
    if isinstance(section, dict) and "nsp" in section and "sentence_objective" not in section:
        nsp = section.pop("nsp")
        check(isinstance(nsp, bool), at(origins, "data.nsp"), f"expected bool, got {nsp!r} ({type(nsp).__name__})")
        section["sentence_objective"] = "nsp" if nsp else "none"
        origins["data.sentence_objective"] = origins.pop("data.nsp", str(path))
    return build_config([(data, origins)])


def sentence_objective_of(data: dict[str, Any]) -> str | None:
    """``data.sentence_objective`` of a resolved config's ``data`` section, or of a run that logged ``nsp``
    (``true``/``false``, as a bool or as MLflow's text) in its place; None where neither is there.

    >>> sentence_objective_of({"sentence_objective": "sop"}), sentence_objective_of({"nsp": "True"})
    ('sop', 'nsp')
    """
    if data.get("sentence_objective") is not None:
        return str(data["sentence_objective"])
    if (nsp := data.get("nsp")) is None:
        return None
    return "nsp" if str(nsp).lower() == "true" else "none"


def instances_today(instances: datasets.DatasetDict) -> datasets.DatasetDict:
    """Prepared instances with today's columns: the sentence objective's labels, ``sentence_label``, were
    ``nsp_label``."""
    if "nsp_label" in next(iter(instances.values())).column_names:
        return instances.rename_column("nsp_label", "sentence_label")
    return instances
