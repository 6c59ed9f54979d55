"""Configuration: layering, strict keys and types, impossible values, and where each error points."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bvr.config import PRESETS_DIR, Config, config_hash, dump_config, load_config, parse_override
from bvr.errors import BvrError


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(*args, **kwargs) -> str:
    with pytest.raises(BvrError) as info:
        load_config(*args, **kwargs)
    return str(info.value)


def test_defaults_are_bert_recipe():
    cfg = load_config()
    assert cfg.masking.mask_prob == 0.15
    assert cfg.masking.split == [0.8, 0.1, 0.1]
    assert cfg.data.input_format == "segment-pair" and cfg.data.nsp
    assert cfg.tokenizer.resolved_vocab_size == 30_000
    assert load_config(overrides=["tokenizer.family=roberta"]).tokenizer.resolved_vocab_size == 50_000


def test_layers_apply_in_order(tmp_path):
    file = write(tmp_path, "masking:\n  mode: static\n  dupe_factor: 5\n")
    cfg = load_config(file, preset="tiny", overrides=["masking.dupe_factor=3", "data.max_length=64"])
    assert cfg.name == "tiny"  # from the preset
    assert cfg.masking.mode == "static"  # from the file
    assert cfg.masking.dupe_factor == 3  # --set wins over the file
    assert cfg.data.max_length == 64
    assert cfg.masking.mask_prob == 0.15  # untouched default


def test_set_parses_yaml_values():
    cfg = load_config(overrides=["masking.split=[1, 0, 0]", "masking.whole_word=true", "corpus.max_documents=null"])
    assert cfg.masking.split == [1.0, 0.0, 0.0]
    assert all(isinstance(x, float) for x in cfg.masking.split)
    assert cfg.masking.whole_word is True
    assert cfg.corpus.max_documents is None
    assert load_config(overrides=["training.lr=3e-4"]).training.lr == 3e-4  # YAML 1.1 reads this as a string


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("masking:\n  mask_pro: 0.2\n", "cfg.yaml:2: masking.mask_pro: unknown key. did you mean 'masking.mask_prob'?"),
        ("masking:\n  mask_prob: 1.5\n", "cfg.yaml:2: masking.mask_prob: 1.5 is outside (0, 1)"),
        ("data:\n  seed: 0\n  max_length: 600\n", "cfg.yaml:3: data.max_length: 600 exceeds the 512 positions"),
        ("masking:\n  split: [0.8, 0.1, 0.2]\n", "cfg.yaml:2: masking.split: [0.8, 0.1, 0.2] sums to 1.1, not 1"),
        ("masking:\n  split: [0.9, 0.2, -0.1]\n", "masking.split: [0.9, 0.2, -0.1] has a negative share"),
        ("training:\n  batch_size: many\n", "cfg.yaml:2: training.batch_size: expected int, got 'many' (str)"),
        ("data:\n  nsp: 1\n", "cfg.yaml:2: data.nsp: expected bool, got 1 (int)"),
        ("model: 4\n", "cfg.yaml:1: model: expected a mapping of ModelConfig keys"),
        ("colour: blue\n", "cfg.yaml:1: colour: unknown key. known keys: name, data_dir"),
        ("data:\n  input_format: full\n", "cfg.yaml:2: data.input_format: 'full' is not one of segment-pair"),
        ("model:\n  hidden_size: 100\n  num_heads: 3\n", "cfg.yaml:3: model.num_heads: 3 heads do not divide"),
        ("masking: [1, 2\n", "cfg.yaml:2: not valid YAML"),
    ],
)
def test_bad_values_name_key_file_and_line(tmp_path, text, expected):
    message = error_of(write(tmp_path, text))
    assert expected in message
    assert str(tmp_path) in message


def test_roberta_positions_leave_room_for_the_padding_offset():
    assert load_config(overrides=["model.family=roberta", "data.max_length=510"]).data.max_length == 510
    message = error_of(overrides=["model.family=roberta", "data.max_length=512"])
    assert "512 exceeds the 510 positions" in message


def test_nsp_needs_a_pair_format():
    message = error_of(overrides=["data.input_format=full-sentences"])
    assert "data.nsp" in message and "set data.nsp=false" in message
    assert load_config(overrides=["data.input_format=full-sentences", "data.nsp=false"]).data.nsp is False


def test_set_errors_name_the_override():
    assert error_of(overrides=["masking.mask_prob=0"]).startswith("--set masking.mask_prob=0: masking.mask_prob")
    with pytest.raises(BvrError, match="KEY=VALUE"):
        parse_override("masking.mask_prob")
    with pytest.raises(BvrError, match="KEY=VALUE"):
        parse_override("masking..mask_prob=1")


def test_missing_file_and_unknown_preset(tmp_path):
    assert "config file not found" in error_of(tmp_path / "nope.yaml")
    assert "known presets: base, large, small, tiny" in error_of(preset="huge")


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESETS_DIR.glob("*.yaml")))
def test_every_shipped_preset_loads(preset):
    cfg = load_config(preset=preset)
    assert cfg.name == preset
    assert cfg.data.max_length <= cfg.model.max_tokens


def test_dump_round_trip_and_hash(tmp_path):
    cfg = load_config(preset="tiny", overrides=["masking.mode=static"])
    path = dump_config(cfg, tmp_path / "config.yaml")
    again = load_config(path)
    assert again == cfg
    assert yaml.safe_load(path.read_text())["masking"]["mode"] == "static"
    assert config_hash(cfg) == config_hash(again)
    assert config_hash(cfg) != config_hash(load_config(preset="tiny"))


def test_config_is_plain_data():
    assert Config().to_dict()["masking"]["split"] == [0.8, 0.1, 0.1]
