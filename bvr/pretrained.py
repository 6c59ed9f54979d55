"""Load a pretrained encoder from a ``bvr`` run or any Hugging Face BERT/RoBERTa folder, and ask it to fill masks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from bvr.errors import BvrError
from bvr.model import PretrainingModel
from bvr.model.hf import load_hf
from bvr.tokenization import load_tokenizer, vocab_info

MASK_SPELLINGS = ("[MASK]", "<mask>")


@dataclass
class Pretrained:
    """A model with its tokenizer."""

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


def load_pretrained(path: Path) -> Pretrained:
    """Load weights and tokenizer; a tokenizer whose vocabulary does not fit the embeddings is refused."""
    folder = model_folder(path)
    model, config = load_hf(folder)
    tokenizer, family = load_tokenizer(folder)
    if tokenizer.get_vocab_size() > config.vocab_size:
        raise BvrError(f"the tokenizer has {tokenizer.get_vocab_size()} ids but the model only "
                       f"{config.vocab_size} embeddings", where=folder, hint="use the tokenizer saved with the model")
    model.eval()
    return Pretrained(model, tokenizer, family, folder)


@dataclass(frozen=True)
class Prediction:
    token: str
    probability: float


def fill_mask(pretrained: Pretrained, text: str, top_k: int = 5) -> list[list[Prediction]]:
    """The ``top_k`` most likely tokens at each mask in ``text`` (written ``[MASK]`` or ``<mask>``)."""
    vocab = vocab_info(pretrained.tokenizer, pretrained.family)
    mask_token = pretrained.tokenizer.id_to_token(vocab.mask_id)
    for spelling in MASK_SPELLINGS:
        text = text.replace(spelling, mask_token)
    encoding = pretrained.tokenizer.encode(text)
    ids = torch.tensor([encoding.ids])  # (1, seq)
    positions = (ids[0] == vocab.mask_id).nonzero().flatten()
    if len(positions) == 0:
        raise BvrError(f"no mask token in the text; write {' or '.join(MASK_SPELLINGS)} where a word is missing",
                       where="text")
    with torch.no_grad():
        hidden = pretrained.model.encoder(ids, torch.ones_like(ids), torch.tensor([encoding.type_ids]))
        probs = pretrained.model.mlm_logits_all(hidden[0, positions]).softmax(-1)  # (n_masks, vocab)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    return [
        [Prediction(_shown(pretrained.tokenizer, int(i)), float(p)) for p, i in zip(ps, idx, strict=True)]
        for ps, idx in zip(top.values, top.indices, strict=True)
    ]


def _shown(tokenizer: Tokenizer, token_id: int) -> str:
    token = tokenizer.id_to_token(token_id)
    decoded = tokenizer.decode([token_id], skip_special_tokens=False)
    return decoded.strip() if token.startswith("Ġ") else token
