"""Encoder configs to and from Hugging Face's ``config.json``: which keys map to which :class:`EncoderConfig` field,
the class name a folder is written as, and the settings this encoder refuses (another activation, relative
positions). ``transformers`` is never imported: the file is read and written with ``json``.

The limits a folder's ``config.json`` is held to before any tensor is allocated: each key's type, each size's range
(:data:`SIZE_LIMITS`), and the whole model, counted from the config alone, within this machine's memory. A value
outside them is one :class:`~bvr.errors.BvrError` naming the file, the key and the value, where it would otherwise
be minutes of allocation and a traceback from ``torch.empty``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from bvr.errors import BvrError
from bvr.model.encoder_config import EncoderConfig, ModelConfig

CONFIG_FILE = "config.json"

_ROBERTA_SPECIALS = {"bos_token_id": 0, "eos_token_id": 2}
"""``<s>`` and ``</s>``, as roberta-base's ``config.json`` states them."""

# config.json key -> EncoderConfig field; the first group (the sizes, null refused) is required, the second optional.
_REQUIRED_KEYS = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
                  "num_attention_heads": "num_heads", "intermediate_size": "intermediate_size",
                  "max_position_embeddings": "max_position_embeddings"}
_OPTIONAL_KEYS = {"hidden_dropout_prob": "dropout", "attention_probs_dropout_prob": "attention_dropout",
                  "pad_token_id": "pad_token_id", "type_vocab_size": "type_vocab_size",
                  "layer_norm_eps": "layer_norm_eps", "initializer_range": "initializer_range"}
_BVR_KEYS = {"bvr_token_type_init": "token_type_init", "bvr_embedding_norm": "embedding_norm",
             "bvr_head_transform": "head_transform"}
"""bvr's own ``config.json`` keys, written only where the encoder departs from BERT's: how it was initialised (so
that a control, the same encoder never trained, starts where the pretrained one did) and the small-budget layout.
transformers ignores unknown keys; a layout it has no class for gets a model type of bvr's own."""
_HF_KEY_OF_FIELD = {field: key for key, field in {**_REQUIRED_KEYS, **_OPTIONAL_KEYS, **_BVR_KEYS}.items()}

PRE_NORM_MODEL_TYPES = {"roberta": "roberta-prelayernorm", "bert": "bvr-bert-prelayernorm"}
"""``model_type`` of a pre-LayerNorm encoder's folder. Hugging Face has the roberta one (``RobertaPreLayerNorm``,
weights under ``roberta_prelayernorm.``); it has no pre-LayerNorm BERT, so that folder's type is bvr's own and
transformers refuses it by name instead of loading it as a post-LayerNorm BERT."""
BVR_MODEL_TYPES = {"roberta": "bvr-roberta-prelayernorm", "bert": "bvr-bert-prelayernorm"}
"""``model_type`` of a pre-LayerNorm encoder without the embeddings' LayerNorm or the MLM head transform: no Hugging
Face class computes it, so transformers refuses the folder by name rather than load it with fresh LayerNorms."""
BVR_LAYOUT_NOTE = ("pre-LayerNorm encoder without the embeddings' LayerNorm and/or the MLM head transform (bvr's "
                   "small-budget recipe): Hugging Face has no class for it; bvr loads this folder, transformers "
                   "does not.")
PRE_NORM_BERT_NOTE = ("pre-LayerNorm BERT: Hugging Face has no class for it; bvr loads this folder (fine-tuning, "
                      "probes, BLiMP), transformers does not. A roberta-family encoder with model.norm=pre exports "
                      "as RobertaPreLayerNorm.")


def bvr_layout(config: EncoderConfig) -> bool:
    """Whether the encoder departs from every Hugging Face layout: no embeddings' LayerNorm or no head transform."""
    return not (config.embedding_norm and config.head_transform)


def model_type(config: EncoderConfig) -> str:
    """The ``model_type`` of a folder: the family's, its pre-LayerNorm variant's, or bvr's own layout's."""
    if not config.pre_norm:
        return config.family
    return (BVR_MODEL_TYPES if bvr_layout(config) else PRE_NORM_MODEL_TYPES)[config.family]


def architecture(config: EncoderConfig, sentence_head: bool) -> str:
    """The HF class a folder is written as. HF has no RoBERTa class with NSP: such a head is written but unused.
    A pre-LayerNorm BERT, and bvr's small-budget layout, are named as classes of bvr's own (Hugging Face has none)."""
    if config.family == "roberta" and bvr_layout(config):
        return "BvrRobertaPreLayerNormForMaskedLM"
    if config.family == "bert":
        name = "BertForPreTraining" if sentence_head else "BertForMaskedLM"
        return "BvrPreLayerNorm" + name if config.pre_norm else name
    return "RobertaPreLayerNormForMaskedLM" if config.pre_norm else "RobertaForMaskedLM"


def hf_config_dict(config: EncoderConfig, sentence_head: bool) -> dict[str, Any]:
    """The ``config.json`` of an exported model (a roberta one with :data:`_ROBERTA_SPECIALS`)."""
    data: dict[str, Any] = {
        "architectures": [architecture(config, sentence_head)], "model_type": model_type(config),
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "intermediate_size": config.intermediate_size, "hidden_act": "gelu",
        "hidden_dropout_prob": config.dropout, "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_position_embeddings, "type_vocab_size": config.type_vocab_size,
        "layer_norm_eps": config.layer_norm_eps, "initializer_range": config.initializer_range,
        "pad_token_id": config.pad_token_id, "position_embedding_type": "absolute", "tie_word_embeddings": True,
    }
    if bvr_layout(config):
        data["bvr_note"] = BVR_LAYOUT_NOTE
    elif config.pre_norm and config.family == "bert":
        data["bvr_note"] = PRE_NORM_BERT_NOTE
    default = ModelConfig()
    data.update({key: getattr(config, field) for key, field in _BVR_KEYS.items()
                 if getattr(config, field) != getattr(default, field)})
    if config.family == "roberta":
        data.update(_ROBERTA_SPECIALS)
    return data


def config_from_hf(data: dict[str, Any], where: str | Path = CONFIG_FILE) -> EncoderConfig:
    """Build an :class:`EncoderConfig` from a parsed ``config.json``, every key and the model's size checked before
    anything is allocated (:func:`check_values`, :func:`check_fits_memory`); errors name the file and the
    ``config.json`` key."""
    check_values(data, where)
    declared = data.get("model_type")
    pre_norm = {v: k for types in (PRE_NORM_MODEL_TYPES, BVR_MODEL_TYPES) for k, v in types.items()}
    family = pre_norm.get(declared, declared)
    if family not in ("bert", "roberta"):
        raise BvrError(f"model_type {family!r} is not 'bert' or 'roberta'", where=f"{where}: model_type",
                       hint="bvr loads BERT- and RoBERTa-style encoders (and Hugging Face's RobertaPreLayerNorm)")
    for key, allowed in (("hidden_act", "gelu"), ("position_embedding_type", "absolute")):
        if data.get(key, allowed) != allowed:
            raise BvrError(f"{data[key]!r} is not supported (only {allowed!r})", where=f"{where}: {key}")
    missing = [key for key in _REQUIRED_KEYS if key not in data]
    if missing:
        raise BvrError(f"missing key(s) {', '.join(missing)}", where=f"{where}: {missing[0]}")
    fields = {field: data[key] for key, field in _REQUIRED_KEYS.items()}
    fields.update({field: data[key] for key, field in _OPTIONAL_KEYS.items() if data.get(key) is not None})
    fields.update({field: data[key] for key, field in _BVR_KEYS.items() if data.get(key) is not None})
    fields["norm"] = "pre" if declared in pre_norm else "post"
    try:
        config = EncoderConfig(family=family, **fields)
    except BvrError as err:
        # Name the config.json key, not our field: model.num_heads -> num_attention_heads.
        field = (err.where or "").removeprefix("model.")
        key = _HF_KEY_OF_FIELD.get(field, field)
        raise BvrError(err.message, where=f"{where}: {key}", hint=err.hint) from None
    check_fits_memory(config, data, where)
    return config


def read_hf_config(folder: Path) -> EncoderConfig:
    """Read and convert ``folder/config.json``; a missing or unreadable file is a BvrError naming it."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise BvrError(f"no {CONFIG_FILE}", where=folder, hint="expected a Hugging Face model folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise BvrError(f"not valid JSON ({err.msg})", where=f"{path}:{err.lineno}") from None
    if not isinstance(data, dict):
        raise BvrError("expected a JSON object", where=path)
    return config_from_hf(data, where=path)


# The limits config_from_hf holds a config.json to (the module docstring), before anything is allocated.
SIZE_LIMITS = {"num_hidden_layers": 512, "hidden_size": 65_536, "num_attention_heads": 65_536,
               "intermediate_size": 262_144, "vocab_size": 16_777_216, "max_position_embeddings": 1_048_576,
               "type_vocab_size": 1_024}
"""The largest value bvr loads for each size in ``config.json`` (each at least 1): 512 layers, hidden 65,536,
feed-forward 262,144, 2^24 tokens, 2^20 positions, 1,024 token types; BERT-large has 24 layers, hidden 1,024,
4,096, 30,522 tokens, 512 positions and 2 types."""
WHOLE_NUMBER_KEYS = (*SIZE_LIMITS, "pad_token_id")
REAL_NUMBER_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps", "initializer_range")
SWITCH_KEYS = ("bvr_embedding_norm", "bvr_head_transform")
TEXT_KEYS = ("model_type", "hidden_act", "position_embedding_type", "bvr_token_type_init")
BYTES_PER_PARAMETER = 4
"""float32: what a loaded model holds per parameter (the weights file's copy comes on top while loading)."""
_HINT = "config.json must describe the weights beside it"
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def _kind(value: object) -> str:
    """What a JSON value is, in words: 'a string', 'a float', 'true/false', 'a list', 'an object', 'null'."""
    kinds = {bool: "true/false", str: "a string", float: "a float", list: "a list", dict: "an object"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def check_values(data: dict[str, Any], where: str | Path) -> None:
    """Refuse a ``config.json`` key of the wrong type or a size outside :data:`SIZE_LIMITS`, as ``FILE: KEY: VALUE
    is ...``, the value as written in the file. Keys that are absent, or null where a default exists, are left to
    :func:`config_from_hf`."""
    for key, value in data.items():
        if value is None and key not in _REQUIRED_KEYS:
            continue
        shown = json.dumps(value)
        if key in WHOLE_NUMBER_KEYS and (type(value) is not int):
            raise BvrError(f"{shown} is not an integer ({_kind(value)})", where=f"{where}: {key}", hint=_HINT)
        if key in REAL_NUMBER_KEYS and (type(value) not in (int, float) or not math.isfinite(value)):
            raise BvrError(f"{shown} is not a finite number ({_kind(value)})", where=f"{where}: {key}", hint=_HINT)
        if key in SWITCH_KEYS and type(value) is not bool:
            raise BvrError(f"{shown} is not true or false ({_kind(value)})", where=f"{where}: {key}", hint=_HINT)
        if key in TEXT_KEYS and type(value) is not str:
            raise BvrError(f"{shown} is not a string ({_kind(value)})", where=f"{where}: {key}", hint=_HINT)
        limit = SIZE_LIMITS.get(key)
        if limit is not None and not 1 <= value <= limit:
            raise BvrError(f"{value} is outside 1 to {limit:,}, the range bvr loads", where=f"{where}: {key}",
                           hint=_HINT)


def parameter_count(config: EncoderConfig, sentence_head: bool = True) -> int:
    """Parameters of a :class:`~bvr.model.pretraining_model.PretrainingModel` of ``config`` (tied decoder once),
    with the pooler and sentence head where ``sentence_head``; counted, not built, so any size is answered at once."""
    h, ffn, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    norm = 2 * h
    embeddings = (vocab + config.max_position_embeddings + config.type_vocab_size) * h
    embeddings += norm if config.embedding_norm else 0
    layer = 4 * (h * h + h) + (h * ffn + ffn) + (ffn * h + h) + 2 * norm
    final = norm if config.pre_norm else 0
    head = vocab + (h * h + h + norm if config.head_transform else 0)
    pooler_and_head = (h * h + h) + (2 * h + 2) if sentence_head else 0
    return embeddings + config.num_layers * layer + final + head + pooler_and_head


def machine_memory() -> int | None:
    """Bytes of memory this process may use: the machine's physical memory, capped by a cgroup (v2 or v1) limit;
    None where the platform does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text(encoding="ascii").strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def _gib(count: int) -> str:
    return f"{count / 2**30:,.1f} GiB"


def check_fits_memory(config: EncoderConfig, data: dict[str, Any], where: str | Path,
                      memory: int | None = None) -> None:
    """Refuse a model whose parameters, as float32, would not fit in ``memory`` bytes (default:
    :func:`machine_memory`), naming the key of ``data`` (the parsed ``config.json``) that contributes most."""
    memory = machine_memory() if memory is None else memory
    count = parameter_count(config)
    needed = count * BYTES_PER_PARAMETER
    if memory is None or needed <= memory:
        return
    h = config.hidden_size
    shares = {"vocab_size": config.vocab_size * h, "max_position_embeddings": config.max_position_embeddings * h,
              "num_hidden_layers": config.num_layers * (4 * h * h + 2 * h * config.intermediate_size)}
    key = max(shares, key=lambda k: shares[k])
    raise BvrError(f"{data.get(key)}: the model would hold {count:,} parameters, {_gib(needed)} as float32, more "
                   f"than this machine's {_gib(memory)} of memory", where=f"{where}: {key}",
                   hint="bvr holds a model whole, in float32: use a machine with more memory, or check that "
                   "config.json describes the weights beside it")
