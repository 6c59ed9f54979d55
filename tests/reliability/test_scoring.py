"""Model folders whose tokenizer.json pads and truncates (as published sentence encoders ship theirs: fixed 128):
BLiMP and ``bvr fill-mask`` score the whole, unpadded text as with a plain tokenizer (issue 28)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tokenizers import Tokenizer

from tests.reliability.conftest import FIXTURES, error_line


def _padding_copy(folder: Path, dest: Path, length: int = 128) -> Path:
    """``folder`` copied to ``dest`` with a tokenizer.json that pads every text to ``length`` and cuts it there."""
    shutil.copytree(folder, dest)
    tokenizer = Tokenizer.from_file(str(dest / "tokenizer.json"))
    tokenizer.enable_padding(length=length, pad_id=tokenizer.token_to_id("[PAD]"), pad_token="[PAD]")
    tokenizer.enable_truncation(length)
    tokenizer.save(str(dest / "tokenizer.json"))
    return dest


def test_blimp_scores_are_the_same_with_a_padding_and_truncating_tokenizer(bvr, checkpoint, tmp_path):
    padded = _padding_copy(checkpoint, tmp_path / "padded")
    pairs = []
    for folder in (checkpoint, padded):
        code, _, err = bvr("blimp", folder, "--data-dir", FIXTURES / "blimp", "--json", tmp_path / "blimp.json")
        assert code == 0, err
        pairs.append(json.loads((tmp_path / "blimp.json").read_text())["pairs"])
    assert pairs[0] == pairs[1]


def test_fill_mask_measures_the_whole_text_when_the_tokenizer_truncates(bvr, checkpoint, tmp_path):
    """A tokenizer that cuts at 128 would hide a text longer than the model's 512 positions and predict on a part."""
    padded = _padding_copy(checkpoint, tmp_path / "padded")
    text = "the [MASK] of france . " * 150
    tokens = len(Tokenizer.from_file(str(checkpoint / "tokenizer.json")).encode(text).ids)
    assert tokens > 512
    code, _, err = bvr("fill-mask", padded, text)
    assert code == 2
    assert error_line(err) == (f"text: the text is {tokens} tokens long (special tokens included), more than the "
                               "model's limit of 512. shorten the text around the mask")
