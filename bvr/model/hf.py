"""Weights to and from Hugging Face folders (``config.json`` + ``model.safetensors``; the config in
:mod:`bvr.model.hf_config`), read and written without ``transformers``.

:class:`~bvr.model.pretraining_model.PretrainingModel` already uses Hugging Face's parameter names, so converting is
mostly the identity. What differs is what a checkpoint may carry besides the parameters:

- the tied decoder's aliases (older checkpoints write them; we do not), LayerNorm ``gamma``/``beta``, buffers;
- heads the model does not use: the NSP head without NSP, and a roberta folder's pooler, are dropped as HF does; a
  bert folder's pooler is kept, since ``BertForSequenceClassification`` classifies through it;
- no MLM head at all (``BertModel``, ``RobertaModel``): loaded only where the caller needs none, left at its
  initialisation.

Anything else missing or unexpected is an error that lists the keys.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bvr.errors import BvrError
from bvr.fs import atomic_path, readable_by_all, write_text
from bvr.model.encoder_config import EncoderConfig
from bvr.model.hf_config import CONFIG_FILE, hf_config_dict, read_hf_config
from bvr.model.pretraining_model import PretrainingModel

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_FILE = "pytorch_model.bin"

_LEGACY_SUFFIXES = {".gamma": ".weight", ".beta": ".bias"}
_BUFFER_SUFFIXES = ("embeddings.position_ids", "embeddings.token_type_ids")
SBO_PREFIX = "sbo."
"""State-dict keys of the span-boundary head, which exported folders leave out."""

_PRE_NORM_PREFIX = "roberta_prelayernorm."


# --- Names -----------------------------------------------------------------------------------------------------


def _head_prefix(family: str) -> str:
    """Where the MLM head lives: ``cls.predictions`` (bert) or ``lm_head`` (roberta)."""
    return "cls.predictions" if family == "bert" else "lm_head"


def _tied_aliases(family: str) -> tuple[str, str]:
    """Keys of the tied decoder weight and bias, aliases of the word embedding and the head's bias."""
    head = _head_prefix(family)
    return f"{head}.decoder.weight", f"{head}.decoder.bias"


def stored_pooler(state_dict: dict[str, torch.Tensor], family: str) -> bool:
    """Whether a checkpoint stores a pooler the model keeps: a bert one (``pooler.*`` or ``bert.pooler.*``). A
    roberta folder's pooler is never used by Hugging Face's roberta classes, and is dropped."""
    return family == "bert" and any(key in state_dict for key in ("pooler.dense.weight", "bert.pooler.dense.weight"))


def _meta_state(config: EncoderConfig, sentence_head: bool, pooler: bool) -> dict[str, torch.Tensor]:
    """The state dict of a :class:`PretrainingModel` on the meta device: names and shapes, no memory."""
    with torch.device("meta"):
        return PretrainingModel(config, sentence_head=sentence_head, pooler=pooler).state_dict()


def _our_name(key: str) -> str:
    """A Hugging Face key as ours: ``roberta_prelayernorm.*`` (Hugging Face's RobertaPreLayerNorm) -> ``roberta.*``,
    and ``...LayerNorm.gamma`` -> ``...LayerNorm.weight``, ``beta`` -> ``bias`` (TF-converted checkpoints)."""
    if key.startswith(_PRE_NORM_PREFIX):
        key = "roberta." + key.removeprefix(_PRE_NORM_PREFIX)
    if "LayerNorm" in key or "layer_norm" in key:
        for old, new in _LEGACY_SUFFIXES.items():
            if key.endswith(old):
                return key[: -len(old)] + new
    return key


# --- State dicts -----------------------------------------------------------------------------------------------


def from_hf_state_dict(state_dict: dict[str, torch.Tensor], config: EncoderConfig, sentence_head: bool | None = None,
                       where: str | Path | None = None, pooler: bool | None = None) -> dict[str, torch.Tensor]:
    """Convert a Hugging Face state dict (of any transformers version) into one :class:`PretrainingModel` loads with
    ``strict=True``, tied aliases included; keys that do not fit ``config`` are one error listing them all.

    ``sentence_head`` None: whenever the checkpoint has one. ``pooler`` (a model with NSP always has one) None:
    whenever the checkpoint stores a bert one (:func:`stored_pooler`).
    """
    family = config.family
    weights = {_our_name(k): v for k, v in state_dict.items() if not k.endswith(_BUFFER_SUFFIXES)}
    if not any(key.startswith(f"{family}.") for key in weights):  # a base model's (BertModel: embeddings.*, ...)
        base = ("embeddings.", "encoder.", "pooler.")
        weights = {f"{family}.{key}" if key.startswith(base) else key: value for key, value in weights.items()}
    if sentence_head is None:
        sentence_head = "cls.seq_relationship.weight" in weights
    pooler = sentence_head or (stored_pooler(weights, family) if pooler is None else pooler)
    decoder_weight, decoder_bias = _tied_aliases(family)
    head_bias = f"{_head_prefix(family)}.bias"
    if head_bias not in weights and decoder_bias in weights:
        weights[head_bias] = weights[decoder_bias]  # some exports keep only the decoder's copy of the bias
    for alias in (decoder_weight, decoder_bias):
        weights.pop(alias, None)  # tied: the model's decoder *is* the embedding and the head's bias
    unused = (() if sentence_head else ("cls.seq_relationship.",)) + (() if pooler else (f"{family}.pooler.",))
    weights = {k: v for k, v in weights.items() if not k.startswith(unused)}
    expected = {key: value.shape for key, value in _meta_state(config, sentence_head, pooler).items()}
    _check_keys(weights, expected, {decoder_weight, decoder_bias}, where)
    weights[decoder_weight] = weights[f"{family}.embeddings.word_embeddings.weight"]
    weights[decoder_bias] = weights[head_bias]
    return weights


def _check_keys(weights: dict[str, torch.Tensor], expected: dict[str, torch.Size], aliases: set[str],
                where: str | Path | None) -> None:
    """Raise one BvrError listing every missing, unexpected and misshapen parameter."""
    wanted = {k: v for k, v in expected.items() if k not in aliases}
    missing = sorted(set(wanted) - set(weights))
    unexpected = sorted(set(weights) - set(wanted))
    misshapen = sorted(f"{k} {tuple(weights[k].shape)} (expected {tuple(wanted[k])})"
                       for k in set(wanted) & set(weights) if weights[k].shape != wanted[k])
    found = (("missing", missing), ("unexpected", unexpected), ("wrong shape", misshapen))
    problems = [f"{label} {len(keys)}: {', '.join(keys)}" for label, keys in found if keys]
    if problems:
        raise BvrError("weights do not fit the model (" + "; ".join(problems) + ")", where=where,
                       hint="check that config.json describes these weights and that the folder holds a BERT/RoBERTa "
                       "MLM model")


def to_hf_state_dict(state_dict: dict[str, torch.Tensor], config: EncoderConfig) -> dict[str, torch.Tensor]:
    """Convert our state dict into what HF's ``save_pretrained`` would write for the same model: without the tied
    decoder aliases (HF ties them again on load) and the span-boundary head (HF has no class for it), every tensor
    detached, contiguous and owning its storage, as ``safetensors`` requires."""
    aliases = set(_tied_aliases(config.family))
    pre_norm_roberta = config.pre_norm and config.family == "roberta"  # under roberta_prelayernorm.*, as HF's
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for key, value in state_dict.items():
        if key in aliases or key.endswith(_BUFFER_SUFFIXES) or key.startswith(SBO_PREFIX):
            continue
        tensor = value.detach().contiguous()
        storage = tensor.untyped_storage().data_ptr()
        if pre_norm_roberta and key.startswith("roberta."):
            key = _PRE_NORM_PREFIX + key.removeprefix("roberta.")
        out[key] = tensor.clone() if storage in seen else tensor
        seen.add(storage)
    return out


# --- Folders ---------------------------------------------------------------------------------------------------


def export_hf(model: PretrainingModel, config: EncoderConfig | None, out_dir: str | Path) -> Path:
    """Write ``config.json`` (:func:`hf_config_dict`) and ``model.safetensors`` that
    ``transformers.AutoModelForMaskedLM`` (or ``BertForPreTraining`` for an NSP model) loads, each renamed into place
    (:func:`bvr.fs.atomic_path`); returns the folder. Tokenizer files are copied elsewhere."""
    config = config or model.config
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = to_hf_state_dict(model.state_dict(), config)  # both made before either file is written
    data = hf_config_dict(config, model.sentence_head)
    write_text(out / CONFIG_FILE, json.dumps(data, indent=2) + "\n")
    with atomic_path(out / SAFETENSORS_FILE) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})  # HF checks the format tag
        readable_by_all(tmp)  # safetensors leaves 0600
    return out


def read_hf_weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """The state dict of a folder (``model.safetensors``, its sharded index, or ``pytorch_model.bin``) and the file
    read; a file that cannot be read is a BvrError naming it."""
    single, index, legacy = folder / SAFETENSORS_FILE, folder / SAFETENSORS_INDEX, folder / TORCH_FILE
    if single.is_file():
        return _read_weights_file(single), single
    if index.is_file():
        return {k: v for shard in shard_files(index) for k, v in _read_weights_file(shard).items()}, index
    if legacy.is_file():
        return _read_weights_file(legacy), legacy
    raise BvrError(f"no weights file ({SAFETENSORS_FILE} or {TORCH_FILE})", where=folder,
                   hint="expected a Hugging Face model folder")


def shard_files(index: Path) -> list[Path]:
    """The shard files a sharded checkpoint's index (``model.safetensors.index.json``) names, in its folder. A shard
    outside it once ``..`` and links are resolved is an error naming the index: a model folder reads only its own."""
    folder = index.parent.resolve()
    try:
        names = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (ValueError, KeyError, TypeError, AttributeError) as err:  # UnicodeDecodeError is a ValueError
        raise BvrError(f"not a sharded checkpoint's index ({type(err).__name__}: {err})".splitlines()[0],
                       where=index, hint="expected JSON with a weight_map of tensor names to shard files") from None
    return [_shard_inside(folder, name, index) for name in sorted(names, key=str)]


def _shard_inside(folder: Path, name: object, index: Path) -> Path:
    """The resolved path of the shard ``name`` in the resolved ``folder``; a BvrError naming ``index`` where it is not
    a file inside it (see :func:`shard_files`)."""
    path = (folder / name).resolve() if isinstance(name, str) else folder
    if path != folder and path.is_relative_to(folder):
        return path
    if path == folder:
        what = "is not a file's name"
    elif os.path.normpath(folder / str(name)).startswith(f"{folder}{os.sep}"):
        what = f"is a link out of the model folder, to {str(path)!r}"
    else:
        what = "lies outside the model folder"
    raise BvrError(f"the shard {name!r} {what}", where=index,
                   hint="keep every shard in the model folder itself (a file, not a link out of it)")


def _read_weights_file(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of one safetensors or PyTorch file; one that cannot be read is a BvrError naming it."""
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(path, map_location="cpu", weights_only=True)
    except (SafetensorError, RuntimeError, EOFError, pickle.UnpicklingError, OSError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise BvrError(f"cannot read the weights ({reason}); the file is truncated or corrupt", where=path,
                       hint="download or copy the model folder again") from None


def load_hf(folder: str | Path, sentence_head: bool | None = None, *, need_mlm_head: bool = True,
            pooler: bool | None = None) -> tuple[PretrainingModel, EncoderConfig]:
    """Load a bert-base-uncased / roberta-base style folder (or one :func:`export_hf` wrote), in eval mode.

    ``sentence_head`` None: when the weights have one. ``pooler`` None: when the weights store a bert one
    (:func:`stored_pooler`), which fine-tuning's sequence head then starts from. ``need_mlm_head`` False loads an
    encoder-only folder with the head at its initialisation; a head with only some of its weights is refused.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise BvrError("not a folder", where=folder, hint="expected a Hugging Face model folder")
    config = read_hf_config(folder)
    state_dict, path = read_hf_weights(folder)
    if sentence_head is None:
        sentence_head = any(key.endswith("seq_relationship.weight") for key in state_dict)
    pooler = stored_pooler(state_dict, config.family) if pooler is None else pooler
    prefix = _head_prefix(config.family) + "."  # cls.predictions.* or lm_head.*
    head = any(key.startswith(prefix) for key in state_dict)
    if not head and need_mlm_head:
        raise BvrError(f"no MLM head: an encoder-only model (no {prefix}* weights)",
                       where=folder, hint="fill-mask, BLiMP and export need a masked-LM folder "
                       "(BertForMaskedLM, RobertaForMaskedLM); fine-tuning and probing accept this one")
    if not head:  # the head starts at its initialisation: its shapes (meta tensors) stand in until the model is built
        meta = _meta_state(config, sentence_head, pooler)
        state_dict = {**state_dict, **{key: value for key, value in meta.items() if key.startswith(prefix)}}
    # Every shape is checked before the model is built: a config.json whose sizes are not its weights'
    # (vocab_size 16,000,000 beside 300 rows) is refused before gigabytes are allocated for it.
    weights = from_hf_state_dict(state_dict, config, sentence_head=sentence_head, where=path, pooler=pooler)
    model = PretrainingModel(config, sentence_head=sentence_head, pooler=pooler)
    model.has_mlm_head = head
    built = model.state_dict()
    model.load_state_dict({key: built[key] if value.is_meta else value for key, value in weights.items()}, strict=True)
    return model.eval(), config
