"""Saving a tokenizer folder that bvr and transformers both load, and loading one back with its family."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from tokenizers import Tokenizer

from bvr.errors import BvrError
from bvr.fs import atomic_path, write_text
from bvr.tokenization.families import FAMILIES, TokenizerFamily, family_spec, special_token_ids

TOKENIZER_FILE = "tokenizer.json"
"""The `tokenizers` serialisation; transformers reads it too."""

BVR_FILE = "bvr_tokenizer.json"
"""A small record of what bvr knows beyond tokenizer.json (the family)."""

_TRAIN_HINT = "train one with `bvr tokenizer train`"


def _write_json(path: Path, content: Mapping[str, object]) -> None:
    write_text(path, json.dumps(content, indent=2, ensure_ascii=False) + "\n")


def _hf_tokenizer_config(tokenizer: Tokenizer, family: TokenizerFamily, model_max_length: int) -> dict[str, object]:
    fields = ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
    return {
        **family.hf_config,
        **family.roles,
        "model_max_length": model_max_length,
        # Our decoders already produce the text; transformers' extra clean-up would break byte-level round trips.
        "clean_up_tokenization_spaces": False,
        # transformers 5 rebuilds the model from the vocabulary and takes added tokens' flags (lstrip of <mask>) here.
        "added_tokens_decoder": {str(i): {name: getattr(token, name) for name in fields}
                                 for i, token in sorted(tokenizer.get_added_tokens_decoder().items())},
    }


def save_tokenizer(tokenizer: Tokenizer, family: str, out_dir: Path, *, model_max_length: int = 512) -> Path:
    """Write a tokenizer folder that bvr and transformers both load.

    The folder holds ``tokenizer.json``; ``tokenizer_config.json`` and ``special_tokens_map.json`` so that
    ``transformers.AutoTokenizer.from_pretrained(out_dir)`` builds a ``BertTokenizerFast`` or ``RobertaTokenizerFast``
    with the right special tokens and flags; and ``bvr_tokenizer.json``, which records the family. Files already
    there are replaced; ``model_max_length`` is the longest input, in tokens, transformers expects (it warns beyond
    it). A tokenizer without one of its family's special tokens is refused.
    """
    spec = family_spec(family)
    special_token_ids(tokenizer, spec)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(out_dir / TOKENIZER_FILE) as tmp:
        tokenizer.save(str(tmp))
    _write_json(out_dir / "tokenizer_config.json", _hf_tokenizer_config(tokenizer, spec, model_max_length))
    _write_json(out_dir / "special_tokens_map.json", dict(spec.roles))
    _write_json(out_dir / BVR_FILE, {"family": spec.name, "vocab_size": tokenizer.get_vocab_size()})
    return out_dir


def _read_family(folder: Path, tokenizer: Tokenizer) -> str:
    """The family recorded beside a tokenizer.json, or the one whose model type it has."""
    record = folder / BVR_FILE
    if record.is_file():
        try:
            family = str(json.loads(record.read_text(encoding="utf-8"))["family"])
        except (ValueError, KeyError, TypeError) as err:
            raise BvrError(f"unreadable tokenizer record ({err})", where=record, hint=_TRAIN_HINT) from err
        return family_spec(family, where=record).name
    model_type = type(tokenizer.model).__name__
    matches = [spec.name for spec in FAMILIES.values() if spec.model_type == model_type]
    if len(matches) != 1:
        raise BvrError(f"cannot tell the family of a {model_type} tokenizer", where=folder, hint=_TRAIN_HINT)
    return matches[0]


def load_tokenizer(path: Path) -> tuple[Tokenizer, str]:
    """Load a tokenizer saved by :func:`save_tokenizer` (the folder or its ``tokenizer.json``, or a Hugging Face
    one) and its family. Without ``bvr_tokenizer.json`` the family follows the model type (WordPiece -> "bert", BPE
    -> "roberta"), so a bert-base-uncased or roberta-base folder loads too.
    """
    path = Path(path)
    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.is_file():
        raise BvrError("no tokenizer found", where=file, hint=_TRAIN_HINT)
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as err:  # the Rust side raises a bare Exception for any parse error
        raise BvrError(f"cannot read the tokenizer ({err})", where=file, hint=_TRAIN_HINT) from err
    if tokenizer.get_vocab_size(with_added_tokens=False) == 0:  # it could only fail on the first word
        raise BvrError(f"the tokenizer's vocabulary is empty (its {type(tokenizer.model).__name__} model has no "
                       f"tokens; {tokenizer.get_vocab_size()} added)", where=file, hint=_TRAIN_HINT)
    return tokenizer, _read_family(file.parent, tokenizer)


def plain_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of ``tokenizer`` that neither pads nor truncates.

    A tokenizer.json may carry padding and truncation (published sentence encoders pad and cut at 128). bvr pads in
    its collators, checks lengths itself and windows or truncates only where it says so, so it encodes with the whole
    unpadded text; a copy, because these settings are tokenizer state and the caller's tokenizer stays as it was.
    """
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_padding()
    copy.no_truncation()
    return copy
