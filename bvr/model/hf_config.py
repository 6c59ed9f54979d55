"""Encoder configs to and from Hugging Face's ``config.json``: which keys map to which :class:`EncoderConfig` field,
the class name a folder is written as, and the settings this encoder refuses (another activation, relative
positions). ``transformers`` is never imported: the file is read and written with ``json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bvr.errors import BvrError
from bvr.model.encoder_config import EncoderConfig

CONFIG_FILE = "config.json"

_ROBERTA_SPECIAL_DEFAULTS = {"bos_token_id": 0, "eos_token_id": 2}

# config.json key -> EncoderConfig field; the first group is required, the second optional.
_REQUIRED_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
}
_OPTIONAL_KEYS = {
    "hidden_dropout_prob": "dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "pad_token_id": "pad_token_id",
    "type_vocab_size": "type_vocab_size",
    "layer_norm_eps": "layer_norm_eps",
    "initializer_range": "initializer_range",
}
_HF_KEY_OF_FIELD = {field: key for key, field in {**_REQUIRED_KEYS, **_OPTIONAL_KEYS}.items()}
_DEFAULT_PAD = {"bert": 0, "roberta": 1}

PRE_NORM_MODEL_TYPES = {"roberta": "roberta-prelayernorm", "bert": "bvr-bert-prelayernorm"}
"""``model_type`` of a pre-LayerNorm encoder's folder. Hugging Face has the roberta one (``RobertaPreLayerNorm``,
weights under ``roberta_prelayernorm.``); it has no pre-LayerNorm BERT, so that folder's type is bvr's own and
transformers refuses it by name instead of loading it as a post-LayerNorm BERT."""
PRE_NORM_BERT_NOTE = ("pre-LayerNorm BERT: Hugging Face has no class for it; bvr loads this folder (fine-tuning, "
                      "probes, BLiMP), transformers does not. A roberta-family encoder with model.norm=pre exports "
                      "as RobertaPreLayerNorm.")


def architecture(config: EncoderConfig, nsp: bool) -> str:
    """The HF class a folder is written as. HF has no RoBERTa class with NSP: such a head is written but unused.
    A pre-LayerNorm BERT is named as a class of bvr's own (Hugging Face has none)."""
    if config.family == "bert":
        name = "BertForPreTraining" if nsp else "BertForMaskedLM"
        return "BvrPreLayerNorm" + name if config.pre_norm else name
    return "RobertaPreLayerNormForMaskedLM" if config.pre_norm else "RobertaForMaskedLM"


def hf_config_dict(
    config: EncoderConfig, nsp: bool, bos_token_id: int | None = None, eos_token_id: int | None = None
) -> dict[str, Any]:
    """The ``config.json`` of an exported model.

    Args:
        config: encoder config.
        nsp: whether the model has the NSP head (BERT: ``BertForPreTraining`` rather than ``BertForMaskedLM``).
        bos_token_id: written when given; roberta defaults to 0 (``<s>``), as roberta-base.
        eos_token_id: written when given; roberta defaults to 2 (``</s>``).
    """
    data: dict[str, Any] = {
        "architectures": [architecture(config, nsp)],
        "model_type": PRE_NORM_MODEL_TYPES[config.family] if config.pre_norm else config.family,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": "gelu",
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "layer_norm_eps": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }
    if config.pre_norm and config.family == "bert":
        data["bvr_note"] = PRE_NORM_BERT_NOTE
    specials = {"bos_token_id": bos_token_id, "eos_token_id": eos_token_id}
    for key, value in specials.items():
        if value is None and config.family == "roberta":
            value = _ROBERTA_SPECIAL_DEFAULTS[key]
        if value is not None:
            data[key] = value
    return data


def config_from_hf(data: dict[str, Any], where: str | Path = CONFIG_FILE) -> EncoderConfig:
    """Build an :class:`EncoderConfig` from a parsed ``config.json``.

    Raises:
        BvrError: naming the file and key, for a model type other than bert/roberta, a missing key, or a setting
            this encoder does not implement (an activation other than exact GELU, relative positions).
    """
    model_type = data.get("model_type")
    pre_norm = {v: k for k, v in PRE_NORM_MODEL_TYPES.items()}
    family = pre_norm.get(model_type, model_type)
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
    fields.setdefault("pad_token_id", _DEFAULT_PAD[family])
    fields["norm"] = "pre" if model_type in pre_norm else "post"
    try:
        return EncoderConfig(family=family, **fields)
    except BvrError as err:
        # Name the config.json key, not our field: model.num_heads -> num_attention_heads.
        field = (err.where or "").removeprefix("model.")
        key = _HF_KEY_OF_FIELD.get(field, field)
        raise BvrError(err.message, where=f"{where}: {key}", hint=err.hint) from None


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
