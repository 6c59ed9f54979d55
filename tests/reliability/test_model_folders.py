"""Absurd model folders (issue 35, item 3): a config.json whose sizes are out of range or of the wrong type, one
describing a model larger than the machine's memory, a tokenizer with an empty vocabulary, a sharded index that is
not JSON. Each is refused in one line naming the file, the key where there is one, and the value, before any tensor
is allocated (a 100,000-layer config took 36 s to end in a traceback from ``torch.empty``)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest
import torch

from bvr.model import EncoderConfig, PretrainingModel
from bvr.model.hf_config import check_fits_memory, machine_memory, parameter_count
from tests.reliability.conftest import error_line

HINT = "config.json must describe the weights beside it"


def _with_config(checkpoint: Path, root: Path, **changes: object) -> Path:
    """A copy of ``checkpoint``'s model folder with ``changes`` written into its config.json."""
    folder = root / "model"
    shutil.copytree(checkpoint, folder)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return folder


def _refusal(bvr, folder: Path) -> str:
    """The one line ``bvr fill-mask FOLDER`` prints, which must come within seconds and print nothing else."""
    start = time.monotonic()
    code, out, err = bvr("fill-mask", folder, "the [MASK] sat")
    assert code == 2 and out == "", err
    assert time.monotonic() - start < 20
    return error_line(err)


CASES = {
    "layers-100000": ("num_hidden_layers", 100_000, "100000 is outside 1 to 512, the range bvr loads"),
    "vocab-1e9": ("vocab_size", 10**9, "1000000000 is outside 1 to 16,777,216, the range bvr loads"),
    "intermediate-1e9": ("intermediate_size", 10**9, "1000000000 is outside 1 to 262,144, the range bvr loads"),
    "positions-2e9": ("max_position_embeddings", 2 * 10**9,
                      "2000000000 is outside 1 to 1,048,576, the range bvr loads"),
    "layers-0": ("num_hidden_layers", 0, "0 is outside 1 to 512, the range bvr loads"),
    "hidden-string": ("hidden_size", "32", '"32" is not an integer (a string)'),
    "layers-float": ("num_hidden_layers", 2.0, "2.0 is not an integer (a float)"),
    "heads-true": ("num_attention_heads", True, "true is not an integer (true/false)"),
    "hidden-null": ("hidden_size", None, "null is not an integer (null)"),
    "dropout-nan": ("hidden_dropout_prob", float("nan"), "NaN is not a finite number (a float)"),
    "eps-string": ("layer_norm_eps", "1e-12", '"1e-12" is not a finite number (a string)'),
    "model-type-list": ("model_type", ["bert"], '["bert"] is not a string (a list)'),
}


@pytest.mark.parametrize("case", CASES)
def test_an_absurd_config_value_is_refused_in_one_line(bvr, checkpoint, tmp_path, case):
    key, value, what = CASES[case]
    folder = _with_config(checkpoint, tmp_path, **{key: value})
    assert _refusal(bvr, folder) == f"{folder / 'config.json'}: {key}: {what}. {HINT}"


def test_heads_that_do_not_divide_hidden_are_refused_at_their_key(bvr, checkpoint, tmp_path):
    folder = _with_config(checkpoint, tmp_path, num_attention_heads=5)
    assert _refusal(bvr, folder) == (f"{folder / 'config.json'}: num_attention_heads: 5 heads do not divide "
                                     "hidden_size 32")


def test_a_model_larger_than_the_machine_is_refused_before_it_is_built(bvr, checkpoint, tmp_path):
    """Every size within its range, the whole past any machine: 2^24 tokens by hidden 65,536 (4 TiB as float32)."""
    folder = _with_config(checkpoint, tmp_path, hidden_size=65_536, vocab_size=16_777_216)
    count = parameter_count(EncoderConfig(family="bert", vocab_size=16_777_216, hidden_size=65_536, num_layers=2,
                                          num_heads=4, intermediate_size=64, max_position_embeddings=512))
    memory = machine_memory()
    assert memory is not None and count * 4 > memory
    assert _refusal(bvr, folder) == (
        f"{folder / 'config.json'}: vocab_size: 16777216: the model would hold {count:,} parameters, "
        f"{count * 4 / 2**30:,.1f} GiB as float32, more than this machine's {memory / 2**30:,.1f} GiB of memory. "
        "bvr holds a model whole, in float32: use a machine with more memory, or check that config.json describes "
        "the weights beside it")


def test_the_memory_limit_names_the_largest_size_and_passes_what_fits():
    config = EncoderConfig(family="bert", vocab_size=1000, hidden_size=64, num_layers=500, num_heads=4,
                           intermediate_size=4096)
    needed = parameter_count(config) * 4
    check_fits_memory(config, {}, "config.json", memory=needed)
    with pytest.raises(Exception, match=r"^config\.json: num_hidden_layers: 500: the model would hold "):
        check_fits_memory(config, {"num_hidden_layers": 500}, "config.json", memory=needed - 1)


@pytest.mark.parametrize(("family", "nsp", "norm", "lean"), [("bert", True, "post", False),
                                                            ("bert", False, "pre", False),
                                                            ("roberta", False, "post", False),
                                                            ("roberta", True, "pre", True)])
def test_the_parameter_count_is_the_models(family, nsp, norm, lean):
    """Counted from the config alone, it is what the model holds (tied decoder once), for every layout."""
    config = EncoderConfig(family=family, vocab_size=123, hidden_size=24, num_layers=3, num_heads=4,
                           intermediate_size=40, pad_token_id=1, norm=norm)
    if lean:
        config = dataclasses.replace(config, embedding_norm=False, head_transform=False)
    with torch.device("meta"):
        model = PretrainingModel(config, sentence_head=nsp)
    count = sum(p.numel() for p in model.parameters())
    pooler_and_nsp = 24 * 24 + 24 + 2 * 24 + 2
    assert parameter_count(config, sentence_head=nsp) == count
    assert parameter_count(config, sentence_head=True) == count + (0 if nsp else pooler_and_nsp)


@pytest.mark.parametrize("added", [True, False], ids=["special-tokens-kept", "nothing"])
def test_a_tokenizer_with_an_empty_vocabulary_is_refused_at_its_file(bvr, checkpoint, tmp_path, added):
    folder = _with_config(checkpoint, tmp_path)
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    data["model"]["vocab"] = {}
    if not added:
        data["added_tokens"] = []
    path.write_text(json.dumps(data))
    count = 5 if added else 0
    assert _refusal(bvr, folder) == (f"{path}: the tokenizer's vocabulary is empty (its WordPiece model has no "
                                     f"tokens; {count} added). train one with `bvr tokenizer train`")


def test_a_sharded_index_that_is_not_json_is_refused_at_its_file(bvr, checkpoint, tmp_path):
    folder = _with_config(checkpoint, tmp_path)
    (folder / "model.safetensors").rename(folder / "first.safetensors")
    index = folder / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"bert.embeddings.word_embeddings.weight": "first.safetensors"')
    line = _refusal(bvr, folder)
    assert line.startswith(f"{index}: not a sharded checkpoint's index (JSONDecodeError: ")
    assert line.endswith("expected JSON with a weight_map of tensor names to shard files")
