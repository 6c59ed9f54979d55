"""Load a pretrained encoder from a ``bvr`` run or any Hugging Face BERT/RoBERTa folder, and ask it to fill masks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from bvr.errors import BvrError
from bvr.model import EncoderConfig, PretrainingModel
from bvr.model.hf import load_hf
from bvr.tokenization import FAMILIES, load_tokenizer, plain_tokenizer, vocab_info

MASK_SPELLINGS = ("[MASK]", "<mask>")


@dataclass
class Pretrained:
    """A model with its tokenizer (``model.has_mlm_head`` is False for an encoder-only folder)."""

    model: PretrainingModel
    tokenizer: Tokenizer
    family: str
    folder: Path


def model_folder(path: Path) -> Path:
    """The Hugging Face-style folder inside a bvr run folder, or ``path`` itself."""
    path = Path(path)
    if (path / "model" / "config.json").is_file():
        return path / "model"
    if (path / "config.json").is_file():
        return path
    raise BvrError("not a model folder (no config.json) nor a bvr run folder (no model/config.json)", where=path,
                   hint="pass a folder written by `bvr pretrain` (outputs/runs/pretrain-*) or a Hugging Face folder")


def load_pretrained(path: Path, *, need_mlm_head: bool = True) -> Pretrained:
    """Load weights and tokenizer from a bvr run folder, its ``model/`` folder, or a Hugging Face BERT/RoBERTa
    folder, refusing a tokenizer that does not fit the model (more ids than embedding rows, the other family,
    another padding id). ``need_mlm_head`` refuses an encoder-only folder (``BertModel``), as fill-mask, BLiMP and
    export must; fine-tuning and probing pass False.
    """
    folder = model_folder(path)
    model, config = load_hf(folder, need_mlm_head=need_mlm_head)
    tokenizer, family = load_tokenizer(folder)
    _check_tokenizer_fits(tokenizer, family, config, folder)
    model.eval()
    return Pretrained(model, tokenizer, family, folder)


def _check_tokenizer_fits(tokenizer: Tokenizer, family: str, config: EncoderConfig, folder: Path) -> None:
    """Refuse a tokenizer whose ids would index the wrong (or no) embedding rows (see :func:`load_pretrained`)."""
    hint = "use the tokenizer saved with the model"
    size = tokenizer.get_vocab_size()
    if size > config.vocab_size:
        raise BvrError(f"the tokenizer has {size} ids but the model only {config.vocab_size} embedding rows",
                       where=folder, hint=hint)
    # A tokenizer of the other family is what the vocabulary ablation writes (a byte-level BPE beside BERT's encoder:
    # the model's padding id was taken from that tokenizer), so only the ids decide: the padding id is the model's.
    pad = vocab_info(tokenizer, family).pad_id
    if pad != config.pad_token_id and family != config.family:
        specials = ", ".join(f"{token}={tokenizer.token_to_id(str(token))}"
                             for token in FAMILIES[family].special_tokens)
        ids = {str(token): tokenizer.token_to_id(str(token)) for token in FAMILIES[config.family].special_tokens}
        expected = ", ".join(f"{token}={'missing' if i is None else i}" for token, i in ids.items())
        raise BvrError(f"a {family} tokenizer ({specials}) in a {config.family} model folder whose padding id is "
                       f"{config.pad_token_id}: the model's special tokens map to other ids ({expected})",
                       where=folder, hint=hint)
    if pad != config.pad_token_id:
        raise BvrError(f"the tokenizer's padding token is id {pad} but config.json says pad_token_id "
                       f"{config.pad_token_id}", where=folder, hint=hint)


@dataclass(frozen=True)
class Prediction:
    token: str
    probability: float


def fill_mask(pretrained: Pretrained, text: str, top_k: int = 5) -> list[list[Prediction]]:
    """The ``top_k`` most likely tokens at each mask in ``text`` (written ``[MASK]`` or ``<mask>``)."""
    if not pretrained.model.has_mlm_head:
        raise BvrError("no MLM head: an encoder-only model cannot fill masks", where=pretrained.folder,
                       hint="use a masked-LM folder (BertForMaskedLM, RobertaForMaskedLM)")
    vocab = vocab_info(pretrained.tokenizer, pretrained.family)
    mask_token = pretrained.tokenizer.id_to_token(vocab.mask_id)
    for spelling in MASK_SPELLINGS:
        text = text.replace(spelling, mask_token)
    encoding = plain_tokenizer(pretrained.tokenizer).encode(text)  # unpadded, uncut: the length check sees it all
    limit = pretrained.model.config.max_tokens
    if len(encoding.ids) > limit:
        raise BvrError(f"the text is {len(encoding.ids)} tokens long (special tokens included), more than the "
                       f"model's limit of {limit}", where="text", hint="shorten the text around the mask")
    ids = torch.tensor([encoding.ids])  # (1, seq)
    positions = (ids[0] == vocab.mask_id).nonzero().flatten()
    if len(positions) == 0:
        raise BvrError(f"no mask token in the text; write {' or '.join(MASK_SPELLINGS)} where a word is missing",
                       where="text")
    with torch.no_grad():
        hidden = pretrained.model.encoder(ids, torch.ones_like(ids), torch.tensor([encoding.type_ids]))
        probs = pretrained.model.mlm_head(hidden[0, positions]).softmax(-1)  # (n_masks, model vocab)
    # Embedding rows past the tokenizer's ids (a vocabulary padded to a round size) name no token.
    probs = probs[:, : pretrained.tokenizer.get_vocab_size()]  # (n_masks, tokenizer vocab)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    return [
        [Prediction(_shown(pretrained.tokenizer, int(i)), float(p)) for p, i in zip(ps, idx, strict=True)]
        for ps, idx in zip(top.values, top.indices, strict=True)
    ]


def _shown(tokenizer: Tokenizer, token_id: int) -> str:
    token = tokenizer.id_to_token(token_id)
    decoded = tokenizer.decode([token_id], skip_special_tokens=False)
    return decoded.strip() if token.startswith("Ġ") else token
