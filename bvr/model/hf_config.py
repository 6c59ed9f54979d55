"""Encoder configs to and from Hugging Face's ``config.json``: which keys map to which :class:`EncoderConfig` field,
the class name a folder is written as, and the settings this encoder refuses (another activation, relative
positions). ``transformers`` is never imported: the file is read and written with ``json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bvr.errors import BvrError
from bvr.model.encoder_config import EncoderConfig, ModelConfig
from bvr.model.hf_limits import check_fits_memory, check_values

CONFIG_FILE = "config.json"

_ROBERTA_SPECIAL_DEFAULTS = {"bos_token_id": 0, "eos_token_id": 2}

# config.json key -> EncoderConfig field; the first group is required, the second optional.
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


def hf_config_dict(config: EncoderConfig, sentence_head: bool, bos_token_id: int | None = None,
                   eos_token_id: int | None = None) -> dict[str, Any]:
    """The ``config.json`` of an exported model. ``bos_token_id`` and ``eos_token_id`` are written when given;
    roberta's default to 0 (``<s>``) and 2 (``</s>``), as roberta-base's."""
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
    specials = {"bos_token_id": bos_token_id, "eos_token_id": eos_token_id}
    for key, value in specials.items():
        if value is None and config.family == "roberta":
            value = _ROBERTA_SPECIAL_DEFAULTS[key]
        if value is not None:
            data[key] = value
    return data


def config_from_hf(data: dict[str, Any], where: str | Path = CONFIG_FILE) -> EncoderConfig:
    """Build an :class:`EncoderConfig` from a parsed ``config.json``, every key and the model's size checked before
    anything is allocated (:mod:`bvr.model.hf_limits`); errors name the file and the ``config.json`` key."""
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
