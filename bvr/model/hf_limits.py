"""The limits a model folder's ``config.json`` is held to before any tensor is allocated: each key's type, each
size's range (:data:`SIZE_LIMITS`), and the whole model, counted from the config alone, within this machine's memory.
A value outside them is one :class:`~bvr.errors.BvrError` naming the file, the key and the value, where it would
otherwise be minutes of allocation and a traceback from ``torch.empty``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from bvr.errors import BvrError
from bvr.model.encoder_config import EncoderConfig

SIZE_LIMITS = {"num_hidden_layers": 512, "hidden_size": 65_536, "num_attention_heads": 65_536,
               "intermediate_size": 262_144, "vocab_size": 16_777_216, "max_position_embeddings": 1_048_576,
               "type_vocab_size": 1_024}
"""The largest value bvr loads for each size in ``config.json`` (each at least 1): 512 layers, hidden 65,536,
feed-forward 262,144, 2^24 tokens, 2^20 positions, 1,024 token types; BERT-large has 24 layers, hidden 1,024,
4,096, 30,522 tokens, 512 positions and 2 types."""
REQUIRED_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
                 "max_position_embeddings")
"""The sizes every config.json states (null is refused); the other keys may be null or absent (a default)."""
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
    :func:`~bvr.model.hf_config.config_from_hf`."""
    for key, value in data.items():
        if value is None and key not in REQUIRED_KEYS:
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
