"""Typed configuration: one dataclass per concern, strict YAML loading, presets and ``--set`` overrides.

A run's configuration is built in layers, each overriding the one before:

1. the dataclass defaults below (every field documented in place);
2. a preset, ``experiments/presets/NAME.yaml`` (``--preset tiny``);
3. a config file (``--config FILE``);
4. ``--set section.key=value`` overrides, values parsed as YAML (``--set masking.split=[0.8,0.2,0]``).

Every key is checked before any work starts: an unknown key, a value of the wrong type or an impossible value
raises :class:`~bvr.errors.BvrError` naming the key and the file and line it came from (or the ``--set`` that
gave it). The resolved configuration is written next to every output (:func:`dump_config`).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bvr.errors import BvrError

PRESETS_DIR = Path(__file__).resolve().parent.parent / "experiments" / "presets"
INPUT_FORMATS = ("segment-pair", "sentence-pair", "full-sentences", "doc-sentences")
PAIR_FORMATS = ("segment-pair", "sentence-pair")
FAMILIES = ("bert", "roberta")
CORPUS_SOURCES = ("wikiextractor", "text", "hf")
MASKING_MODES = ("static", "dynamic")


def _check(ok: bool, key: str, message: str) -> None:
    """Raise a BvrError located at ``key`` unless ``ok``."""
    if not ok:
        raise BvrError(message, where=key)


def _check_choice(value: str, choices: tuple[str, ...], key: str) -> None:
    _check(value in choices, key, f"'{value}' is not one of {', '.join(choices)}")


@dataclass
class CorpusConfig:
    """Where the pretraining text comes from and how it is split."""

    source: str = "wikiextractor"
    """Reader: 'wikiextractor' (<doc> files), 'text' (a paragraph per line, blank line between documents) or 'hf'."""
    path: str = "corpus/enwiki-2021-extract"
    """File or folder, relative to the data folder unless absolute; for source 'hf' a saved dataset or hub id."""
    hub_id: str = "wikimedia/wikipedia"
    """Hugging Face dataset used when no data folder is given and the hub can be reached."""
    hub_config: str | None = "20231101.en"
    """Configuration name of ``hub_id``."""
    text_column: str = "text"
    """Column holding the text, for 'hf' datasets."""
    validation_fraction: float = 0.01
    """Share of documents held out for validation and tokenizer statistics (chosen by a hash of the doc id)."""
    split_seed: int = 0
    """Seed of the train/validation split."""
    max_documents: int | None = None
    """Read at most this many documents (None: all)."""

    def __post_init__(self) -> None:
        _check_choice(self.source, CORPUS_SOURCES, "corpus.source")
        _check(0.0 < self.validation_fraction < 1.0, "corpus.validation_fraction", "must be in (0, 1)")
        _check(self.max_documents is None or self.max_documents > 0, "corpus.max_documents", "must be positive")


@dataclass
class TokenizerConfig:
    """Which tokenizer family to train on the corpus, and how large."""

    family: str = "bert"
    """'bert' (uncased WordPiece, [CLS]/[SEP]/[MASK]) or 'roberta' (byte-level BPE, <s>/</s>/<mask>)."""
    vocab_size: int | None = None
    """Vocabulary size, specials included (None: 30,000 for bert, 50,000 for roberta)."""
    min_frequency: int = 2
    """A merge or word piece must occur this often in the corpus to enter the vocabulary."""
    path: str | None = None
    """Use this trained tokenizer (folder or tokenizer.json) instead of training one."""

    def __post_init__(self) -> None:
        _check_choice(self.family, FAMILIES, "tokenizer.family")
        _check(self.vocab_size is None or self.vocab_size >= 300, "tokenizer.vocab_size",
               f"{self.vocab_size} is too small (at least 300: byte-level BPE alone needs 256 + specials)")
        _check(self.min_frequency >= 1, "tokenizer.min_frequency", "must be at least 1")

    @property
    def resolved_vocab_size(self) -> int:
        return self.vocab_size or {"bert": 30_000, "roberta": 50_000}[self.family]


@dataclass
class DataConfig:
    """How tokenized documents become pretraining sequences (RoBERTa section 4.2)."""

    input_format: str = "segment-pair"
    """'segment-pair', 'sentence-pair', 'full-sentences' or 'doc-sentences'."""
    nsp: bool = True
    """Next-sentence prediction: 50% of pairs take B from another document. Needs a pair format."""
    max_length: int = 128
    """Longest sequence, special tokens included."""
    short_seq_prob: float = 0.1
    """BERT's share of segment-pair sequences given a shorter random target length."""
    seed: int = 0
    """Seed of instance creation (targets, split points, NSP sampling)."""
    shard_documents: int = 2000
    """Documents per shard; NotNext segments are drawn from the same shard."""

    def __post_init__(self) -> None:
        _check_choice(self.input_format, INPUT_FORMATS, "data.input_format")
        _check(not self.nsp or self.input_format in PAIR_FORMATS, "data.nsp",
               f"next-sentence prediction needs a pair format ({', '.join(PAIR_FORMATS)}), "
               f"not '{self.input_format}'; set data.nsp=false")
        _check(self.max_length >= 8, "data.max_length", f"{self.max_length} is too short (at least 8)")
        _check(0.0 <= self.short_seq_prob < 1.0, "data.short_seq_prob", "must be in [0, 1)")
        _check(self.shard_documents >= 2, "data.shard_documents", "must be at least 2")


@dataclass
class MaskingConfig:
    """Masked-language-model corruption (BERT section 3.1 and Table 8; RoBERTa section 4.1)."""

    mode: str = "dynamic"
    """'static' (BERT: dupe_factor masks fixed before training) or 'dynamic' (RoBERTa: new mask every feed)."""
    dupe_factor: int = 10
    """Distinct masks per sequence in static mode; epoch e uses mask e mod dupe_factor."""
    mask_prob: float = 0.15
    """Share of the non-special tokens of each sequence chosen for prediction."""
    split: list[float] = field(default_factory=lambda: [0.8, 0.1, 0.1])
    """Of the chosen tokens: shares replaced by the mask token, by a random token, left unchanged."""
    whole_word: bool = False
    """Choose whole words rather than single sub-word tokens."""
    seed: int = 0
    """Seed of the masks; masks are a pure function of (seed, sequence index, copy or epoch)."""

    def __post_init__(self) -> None:
        _check_choice(self.mode, MASKING_MODES, "masking.mode")
        _check(self.dupe_factor >= 1, "masking.dupe_factor", "must be at least 1")
        _check(0.0 < self.mask_prob < 1.0, "masking.mask_prob", f"{self.mask_prob} is outside (0, 1)")
        _check(len(self.split) == 3, "masking.split", "needs three shares: [mask token, random token, unchanged]")
        _check(all(s >= 0 for s in self.split), "masking.split", f"{self.split} has a negative share")
        _check(abs(sum(self.split) - 1.0) < 1e-6, "masking.split", f"{self.split} sums to {sum(self.split):g}, not 1")


@dataclass
class ModelConfig:
    """Encoder shape. The family decides token types, LayerNorm eps and position offsets."""

    family: str = "bert"
    """'bert' (2 token types, eps 1e-12, positions from 0) or 'roberta' (1 type, eps 1e-5, positions from pad+1)."""
    num_layers: int = 4
    """Transformer layers."""
    hidden_size: int = 256
    """Width of the residual stream."""
    num_heads: int = 4
    """Attention heads; must divide hidden_size."""
    intermediate_size: int = 1024
    """Width of the feed-forward layer."""
    max_position_embeddings: int = 512
    """Position embeddings (RoBERTa uses 2 of them for the padding offset)."""
    dropout: float = 0.1
    """Dropout on embeddings and residual branches."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities."""

    def __post_init__(self) -> None:
        _check_choice(self.family, FAMILIES, "model.family")
        for key in ("num_layers", "hidden_size", "num_heads", "intermediate_size", "max_position_embeddings"):
            _check(getattr(self, key) > 0, f"model.{key}", "must be positive")
        _check(self.hidden_size % self.num_heads == 0, "model.num_heads",
               f"{self.num_heads} heads do not divide hidden_size {self.hidden_size}")
        for key in ("dropout", "attention_dropout"):
            _check(0.0 <= getattr(self, key) < 1.0, f"model.{key}", "must be in [0, 1)")

    @property
    def max_tokens(self) -> int:
        """Longest sequence the position embeddings hold."""
        return self.max_position_embeddings - (2 if self.family == "roberta" else 0)


@dataclass
class TrainingConfig:
    """Optimisation and budget of pretraining."""

    batch_size: int = 32
    """Sequences per optimiser step (split into micro-batches by grad_accum)."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimiser step."""
    lr: float = 5e-4
    """Peak learning rate."""
    warmup_steps: int = 100
    """Linear warm-up steps."""
    max_steps: int = 1000
    """Optimiser steps (the learning-rate schedule decays to zero at this step)."""
    max_tokens: int | None = None
    """Stop once this many (non-padding) tokens have been seen, if that comes before max_steps."""
    weight_decay: float = 0.01
    """AdamW weight decay (not on biases and LayerNorm)."""
    grad_clip: float = 1.0
    """Gradient norm clipping (0: off)."""
    seed: int = 0
    """Seed of initialisation, dropout and data order."""
    num_workers: int = 0
    """DataLoader worker processes."""
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    """AdamW betas (RoBERTa's 0.98 is more stable with large batches than BERT's 0.999)."""
    adam_eps: float = 1e-6
    """AdamW epsilon."""
    val_every_steps: int = 200
    """Validate every this many optimiser steps (and at the end)."""
    checkpoint_every_steps: int = 100
    """Write the resumable checkpoint (last.ckpt) every this many optimiser steps."""
    log_every_steps: int = 10
    """Log training metrics every this many optimiser steps."""
    precision: str = "auto"
    """'auto' (bf16-mixed on a GPU, else 32-true), '32-true', 'bf16-mixed' or '16-mixed'."""
    accelerator: str = "auto"
    """'auto', 'cpu', 'gpu'/'cuda' or 'mps'."""
    devices: int = 1
    """Devices per node; more than one trains with DDP."""
    num_nodes: int = 1
    """Nodes (torchrun or SLURM set the rest)."""
    strategy: str = "auto"
    """Lightning strategy: 'auto' (DDP when devices x nodes > 1), 'ddp', 'ddp_spawn' or 'fsdp'."""
    compile: bool = False
    """Compile the encoder with torch.compile (GPU runs)."""

    def __post_init__(self) -> None:
        _check(self.precision in ("auto", "32-true", "bf16-mixed", "16-mixed", "32"), "training.precision",
               f"'{self.precision}' is not one of auto, 32-true, bf16-mixed, 16-mixed")
        _check(len(self.adam_betas) == 2 and all(0 <= b < 1 for b in self.adam_betas), "training.adam_betas",
               "needs two values in [0, 1)")
        _check(self.max_tokens is None or self.max_tokens > 0, "training.max_tokens", "must be positive")
        for key in ("val_every_steps", "checkpoint_every_steps", "log_every_steps", "devices", "num_nodes"):
            _check(getattr(self, key) >= 1, f"training.{key}", "must be at least 1")
        for key in ("batch_size", "grad_accum", "max_steps"):
            _check(getattr(self, key) >= 1, f"training.{key}", "must be at least 1")
        _check(self.batch_size % self.grad_accum == 0, "training.grad_accum",
               f"{self.grad_accum} does not divide batch_size {self.batch_size}")
        _check(self.lr > 0, "training.lr", "must be positive")
        _check(self.warmup_steps >= 0, "training.warmup_steps", "must be non-negative")
        _check(self.num_workers >= 0, "training.num_workers", "must be non-negative")


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

    def __post_init__(self) -> None:
        # Checks across sections: each section validated itself already.
        _check(self.data.max_length <= self.model.max_tokens, "data.max_length",
               f"{self.data.max_length} exceeds the {self.model.max_tokens} positions of the model "
               f"(model.max_position_embeddings={self.model.max_position_embeddings}, family {self.model.family})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------------------------
# Loading


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp)).replace("NoneType", "null")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints widen to float). Raise BvrError at ``key``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _coerce(value, inner[0], key)
    if origin is list:
        _check(isinstance(value, (list, tuple)), key, f"expected a list, got {value!r}")
        (item,) = typing.get_args(tp)
        return [_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        # PyYAML (YAML 1.1) reads "3e-4" (no dot) as a string; accept any text Python reads as a number.
        try:
            return float(value)
        except ValueError:
            pass
    if tp is int and isinstance(value, bool) or not isinstance(value, tp):
        raise BvrError(f"expected {_type_name(tp)}, got {value!r} ({type(value).__name__})", where=key)
    return value


def build_dataclass(cls: type, data: dict[str, Any], prefix: str) -> Any:
    """Construct dataclass ``cls`` from ``data``, refusing unknown keys and wrong types."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean '{prefix}{close[0]}'?" if close else f"known keys: {', '.join(names)}"
            raise BvrError("unknown key", where=path, hint=hint)
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            _check(isinstance(value, dict), path, f"expected a mapping of {tp.__name__} keys, got {value!r}")
            kwargs[key] = build_dataclass(tp, value, f"{path}.")
        else:
            kwargs[key] = _coerce(value, tp, path)
    return cls(**kwargs)


def merge_layer(
    base: dict, extra: dict, origins: dict[str, str], extra_origins: dict[str, str], prefix: str = ""
) -> None:
    """Deep-merge ``extra`` into ``base`` in place, keeping where each key came from."""
    for key, value in extra.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge_layer(base[key], value, origins, extra_origins, f"{path}.")
        else:
            base[key] = value
        origins.update({k: v for k, v in extra_origins.items() if k == path or k.startswith(f"{path}.")})


def _key_lines(node: yaml.Node, file: str, prefix: str = "") -> dict[str, str]:
    """Map each dotted key of a YAML mapping to ``file:line``."""
    out: dict[str, str] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = f"{prefix}{key_node.value}"
            out[path] = f"{file}:{key_node.start_mark.line + 1}"
            out.update(_key_lines(value_node, file, f"{path}."))
    return out


def parse_yaml(path: Path, what: str = "config file") -> tuple[Any, yaml.Node | None]:
    """Parse a YAML file into data and its node tree (which knows the line of every key).

    Raises:
        BvrError: the file is missing (named as ``what``) or not valid YAML (with the line).
    """
    if not path.is_file():
        raise BvrError(f"{what} not found", where=path)
    text = path.read_text(encoding="utf-8")
    try:
        return yaml.safe_load(text), yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise BvrError(f"not valid YAML ({getattr(err, 'problem', err)})", where=where) from None


def read_yaml(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Read a YAML mapping and the ``file:line`` of each of its keys."""
    data, node = parse_yaml(path)
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise BvrError("expected a mapping of config sections at the top level", where=path)
    return data, _key_lines(node, str(path))


def parse_override(text: str) -> tuple[dict[str, Any], str]:
    """Turn ``section.key=value`` into a nested dict; the value is parsed as YAML."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise BvrError(f"--set expects KEY=VALUE with a dotted key such as masking.mask_prob=0.2, got '{text}'")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    nested: dict[str, Any] = {}
    parts = key.split(".")
    cursor = nested
    for part in parts[:-1]:
        cursor = cursor.setdefault(part, {})
    cursor[parts[-1]] = value
    return nested, key


def preset_path(name: str) -> Path:
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
        raise BvrError(f"unknown preset '{name}'", where="--preset", hint=f"known presets: {', '.join(known)}")
    return path


def load_config(
    config_file: Path | None = None,
    *,
    preset: str | None = None,
    overrides: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Config:
    """Build the resolved :class:`Config` from defaults, a preset, a file and ``--set`` overrides.

    Args:
        config_file: a YAML file of config sections.
        preset: name of a file in ``experiments/presets``.
        overrides: ``section.key=value`` strings, applied last.
        extra: values set by CLI options (such as ``data_dir``), applied after the file and before overrides.

    Raises:
        BvrError: naming the key and the file and line (or the ``--set``) of any bad value.
    """
    layers: list[Layer] = []
    if preset:
        layers.append(read_yaml(preset_path(preset)))
    if config_file:
        layers.append(read_yaml(Path(config_file)))
    if extra:
        layers.append((extra, {k: f"--{k.replace('_', '-')}" for k in extra}))
    for text in overrides or []:
        nested, key = parse_override(text)
        layers.append((nested, {key: f"--set {text}"}))
    return build_layered(Config, layers)


Layer = tuple[dict[str, Any], dict[str, str]]
"""A config layer: nested values and the ``file:line`` (or ``--set``) of each dotted key."""


def build_layered(cls: type, layers: list[Layer], base: dict[str, Any] | None = None) -> Any:
    """Merge ``layers`` in order over ``base`` and build ``cls``; an error names the layer that set the bad key.

    Layers are merged as copies, so one layer may be shared by several builds (the arms of an ablation).
    """
    merged: dict[str, Any] = copy.deepcopy(base) if base else {}
    origins: dict[str, str] = {}
    for data, where in layers:
        merge_layer(merged, copy.deepcopy(data), origins, where)
    try:
        return build_dataclass(cls, merged, "")
    except BvrError as err:
        raise locate_error(err, origins) from None


def locate_error(err: BvrError, origins: dict[str, str]) -> BvrError:
    """Prefix the error's key with the file and line (or --set) that set it."""
    key = err.where or ""
    base = key.split("[")[0]
    origin = origins.get(base)
    while origin is None and "." in base:
        base = base.rsplit(".", 1)[0]
        origin = origins.get(base)
    where = f"{origin}: {key}" if origin and key else (key or origin)
    return BvrError(err.message, where=where, hint=err.hint)


# ---------------------------------------------------------------------------------------------------------------
# Writing and hashing


def dump_config(cfg: Config | dict[str, Any], path: Path) -> Path:
    """Write a resolved config (or part of one) as YAML."""
    data = cfg.to_dict() if isinstance(cfg, Config) else cfg
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def config_hash(*parts: Any, length: int = 12) -> str:
    """A short stable hash of JSON-able parts (dataclasses allowed): the name of a cache folder."""
    canonical = [dataclasses.asdict(p) if dataclasses.is_dataclass(p) else p for p in parts]
    blob = json.dumps(canonical, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]
