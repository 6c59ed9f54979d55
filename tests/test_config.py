"""Configuration: layering, strict keys and types, impossible values, and where each error points."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from bvr.config import (
    NOT_HASHED,
    PRESETS_DIR,
    Config,
    config_hash,
    dump_config,
    load_config,
    parse_override,
    resolve_finetune,
)
from bvr.errors import BvrError
from bvr.model.encoder_config import PAD_TOKEN_IDS, EncoderConfig
from bvr.model.hf_config import hf_config_dict


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
    assert cfg.data.input_format == "segment-pair" and cfg.data.sentence_objective == "nsp"
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
    cfg = load_config(overrides=["masking.split=[1, 0, 0]", "masking.scheme=whole-word", "corpus.max_documents=null"])
    assert cfg.masking.split == [1.0, 0.0, 0.0]
    assert all(isinstance(x, float) for x in cfg.masking.split)
    assert cfg.masking.scheme == "whole-word"
    assert cfg.corpus.max_documents is None
    # YAML 1.1 reads this as a string
    assert load_config(overrides=["training.learning_rate=3e-4"]).training.learning_rate == 3e-4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("masking:\n  mask_pro: 0.2\n", "cfg.yaml:2: masking.mask_pro: unknown key. did you mean 'masking.mask_prob'?"),
        ("masking:\n  mask_prob: 1.5\n", "cfg.yaml:2: masking.mask_prob: 1.5 is outside (0, 1)"),
        ("data:\n  seed: 0\n  max_length: 600\n", "cfg.yaml:3: data.max_length: 600 exceeds the 512 positions"),
        ("masking:\n  split: [0.8, 0.1, 0.2]\n", "cfg.yaml:2: masking.split: [0.8, 0.1, 0.2] sums to 1.1, not 1"),
        ("masking:\n  split: [0.9, 0.2, -0.1]\n", "masking.split: [0.9, 0.2, -0.1] has a negative share"),
        ("training:\n  batch_size: many\n", "cfg.yaml:2: training.batch_size: expected int, got 'many' (str)"),
        ("training:\n  compile: 1\n", "cfg.yaml:2: training.compile: expected bool, got 1 (int)"),
        # The name is part of folder names: it cannot climb out of outputs/.
        ("name: ../../elsewhere\n", "cfg.yaml:1: name: '../../elsewhere' cannot name a folder"),
        ("name: a/b\n", "cfg.yaml:1: name: 'a/b' cannot name a folder"),
        # Lightning-level settings are checked with the config, not deep inside the Trainer.
        ("training:\n  adam_eps: -1\n", "cfg.yaml:2: training.adam_eps: -1.0 must be positive"),
        ("training:\n  strategy: foo\n", "cfg.yaml:2: training.strategy: 'foo' is not one of auto, ddp"),
        ("training:\n  accelerator: tpu9\n", "cfg.yaml:2: training.accelerator: 'tpu9' is not one of auto, cpu"),
        ("training:\n  grad_clip: -1\n", "cfg.yaml:2: training.grad_clip: -1.0 must be non-negative"),
        ("data:\n  sentence_objective: mlm\n", "cfg.yaml:2: data.sentence_objective: 'mlm' is not one of none, "
                                              "nsp, sop"),
        ("model: 4\n", "cfg.yaml:1: model: expected a mapping of ModelConfig keys"),
        ("colour: blue\n", "cfg.yaml:1: colour: unknown key. known keys: name, data_dir"),
        ("data:\n  input_format: full\n", "cfg.yaml:2: data.input_format: 'full' is not one of segment-pair"),
        ("masking:\n  scheme: spans\n", "cfg.yaml:2: masking.scheme: 'spans' is not one of token, whole-word, span"),
        ("masking:\n  span_p: 0\n", "cfg.yaml:2: masking.span_p: 0.0 is outside (0, 1]"),
        ("masking:\n  span_max_words: 0\n", "cfg.yaml:2: masking.span_max_words: must be at least 1"),
        ("model:\n  hidden_size: 100\n  num_heads: 3\n", "cfg.yaml:3: model.num_heads: 3 heads do not divide"),
        ("masking: [1, 2\n", "cfg.yaml:2: not valid YAML"),
        ("masking:\n  mode: static\n  mode: dynamic\n", "cfg.yaml:3: key 'masking.mode' is given twice"),
        ("- masking\n", "cfg.yaml:1: expected a mapping of keys at the top level, got list"),
        # Renamed and moved keys say what to write instead.
        ("training:\n  lr: 1.0e-4\n", "cfg.yaml:2: training.lr: training.lr was renamed: use training.learning_rate"),
        ("data:\n  nsp: true\n", "cfg.yaml:2: data.nsp: data.nsp was replaced by data.sentence_objective: write "
                                "data.sentence_objective: nsp (for true) or none (for false)"),
        ("masking:\n  whole_word: true\n", "cfg.yaml:2: masking.whole_word: masking.whole_word was replaced by "
                                          "masking.scheme: write masking.scheme: whole-word (or token)"),
        ("learning_rate: 1.0e-4\n", "cfg.yaml:1: learning_rate: learning_rate is a fine-tuning setting: use "
                                    "finetune.learning_rate"),
        ("finetune:\n  hparams: {epochs: 2}\n", "cfg.yaml:2: finetune.hparams: finetune.hparams was removed: put its "
                                                "keys directly under finetune"),
        ("evaluate:\n  blimp: false\n", "cfg.yaml:2: evaluate.blimp: evaluate.blimp is a mapping: write "
                                         "evaluate.blimp.enabled: false to turn BLiMP off"),
        ("evaluate:\n  probes: false\n", "cfg.yaml:2: evaluate.probes: evaluate.probes is a mapping: write "
                                          "evaluate.probes.tasks: [] to turn the probes off"),
        ("evaluate:\n  probes: {features: pooled}\n", "cfg.yaml:2: evaluate.probes.features: expected cls, mean or "
                                                      "last4, got 'pooled'"),
    ],
)
def test_bad_values_name_key_file_and_line(tmp_path, text, expected):
    message = error_of(write(tmp_path, text))
    assert expected in message
    assert str(tmp_path) in message


def test_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_bytes(b"masking:\n  mode: st\xe4tic\n")
    assert f"{path}:2: not UTF-8 text" in error_of(path)


def test_roberta_positions_leave_room_for_the_padding_offset():
    assert load_config(overrides=["model.family=roberta", "data.max_length=510"]).data.max_length == 510
    message = error_of(overrides=["model.family=roberta", "data.max_length=512"])
    assert "512 exceeds the 510 positions" in message


@pytest.mark.parametrize("objective", ["nsp", "sop"])
def test_sentence_objectives_need_a_pair_format(objective):
    message = error_of(overrides=["data.input_format=full-sentences", f"data.sentence_objective={objective}"])
    assert message.startswith(f"--set data.sentence_objective={objective}: data.sentence_objective: '{objective}' "
                              "needs a pair format (segment-pair, sentence-pair), not 'full-sentences'; set "
                              "data.sentence_objective=none or data.input_format to a pair format"), message
    cfg = load_config(overrides=["data.input_format=full-sentences", "data.sentence_objective=none"])
    assert cfg.data.sentence_objective == "none"
    assert load_config(overrides=["data.input_format=sentence-pair", f"data.sentence_objective={objective}"])


def test_data_nsp_is_refused_with_what_to_write():
    assert error_of(overrides=["data.nsp=false"]) == (
        "--set data.nsp=false: data.nsp: data.nsp was replaced by data.sentence_objective: write "
        "data.sentence_objective: nsp (for true) or none (for false)")


def test_a_config_saved_with_data_nsp_is_refused_naming_its_line(tmp_path):
    """A run's bvr.yaml written before data.sentence_objective (``data.nsp: true`` in its place) is read as any config
    file: refused, naming the file, the line and what to write instead (`bvr export` reads it so)."""
    data = load_config(preset="tiny").to_dict()
    data["data"] = {("nsp" if key == "sentence_objective" else key): (True if key == "sentence_objective" else value)
                    for key, value in data["data"].items()}
    path = write(tmp_path, yaml.safe_dump(data, sort_keys=False), "bvr.yaml")
    line = path.read_text().splitlines().index("  nsp: true") + 1
    assert error_of(path).startswith(f"{path}:{line}: data.nsp: data.nsp was replaced by data.sentence_objective")
    cfg = load_config(preset="tiny")
    assert load_config(dump_config(cfg, tmp_path / "new.yaml")) == cfg  # today's saved configs load as they were


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


MODEL_SECTION_HASHES = {"default": "6d42fc92793f", "tiny": "cecefd9c116d", "small": "70e92439b878",
                        "base": "b80c2d046778", "large": "8b1989e65743"}
"""``config_hash`` of each shipped preset's ``model`` section (every run folder's key holds the section as it is), and
of the ``config.json`` its encoder exports, as they were before the section became the model's own dataclass: a
change renames every cached run and changes every exported folder. The test prints what it finds on failure."""
EXPORTED_HASHES = {"bert": "2a117250deb0", "roberta": "1190f287462f"}
"""``config_hash`` of the config.json of the tiny preset's encoder per family (roberta with 514 positions, as
experiments/bert-vs-roberta.yaml sets), for a 1,000-id vocabulary with the family's padding id."""


def test_shipped_model_sections_hash_as_before():
    found = {name: config_hash(dataclasses.asdict(load_config(preset=None if name == "default" else name).model))
             for name in MODEL_SECTION_HASHES}
    assert found == MODEL_SECTION_HASHES
    exported = {}
    for family, extra in (("bert", []), ("roberta", ["model.max_position_embeddings=514"])):
        cfg = load_config(preset="tiny", overrides=[f"model.family={family}", f"tokenizer.family={family}", *extra])
        encoder = EncoderConfig.from_model(cfg.model, vocab_size=1000, pad_token_id=PAD_TOKEN_IDS[family])
        exported[family] = config_hash(hf_config_dict(encoder, sentence_head=True))
    assert exported == EXPORTED_HASHES


def test_config_is_plain_data():
    assert Config().to_dict()["masking"]["split"] == [0.8, 0.1, 0.1]


def test_config_holds_the_finetune_and_evaluate_sections():
    shown = Config().to_dict()
    assert shown["finetune"]["learning_rate"] == 2e-5 and shown["finetune"]["per_task"] == {}
    assert shown["finetune"]["tasks"][:2] == ["sst2", "mrpc"] and shown["finetune"]["seeds"] == 5
    assert shown["evaluate"]["blimp"] == {"enabled": True, "per_paradigm": 100, "seed": 0}


# Each task's effective fine-tuning settings, as the separate fine-tuning file and its defaults class resolved them
# before the fine-tuning settings became the finetune section (fine-tuning caches hash these values).
_SHARED = {"accelerator": "auto", "adam_betas": [0.9, 0.999], "adam_eps": 1e-06, "article_split_fraction": 0.2,
           "article_split_seed": 0, "batch_size": 32, "eval_batch_size": 64, "grad_clip": 1.0, "log_every_steps": 10,
           "max_steps": None, "num_workers": 0, "precision": "auto", "subset_seed": 0, "warmup_fraction": 0.1,
           "weight_decay": 0.01}
_FULL = {"max_train_examples": None, "max_eval_examples": None, "stride": 128}
_TINY = {"learning_rate": 1e-4, "epochs": 2, "max_train_examples": 2000, "max_eval_examples": 500, "max_length": 128,
         "stride": 128}
RESOLVED = {
    ("sst2", None): {**_FULL, "learning_rate": 2e-5, "epochs": 3, "max_length": 128},
    ("sst2", "tiny"): _TINY,
    ("conll2003", None): {**_FULL, "learning_rate": 5e-5, "epochs": 3, "max_length": 128},
    ("conll2003", "tiny"): {**_TINY, "max_train_examples": 1000},
    ("squad", None): {**_FULL, "learning_rate": 3e-5, "epochs": 2, "max_length": 384},
    ("squad", "tiny"): {**_TINY, "max_train_examples": 500, "max_eval_examples": 200, "max_length": 256, "stride": 64},
}


_ADDED = {"null_threshold": 0.0, "null_threshold_heldout": 0.0}
"""Keys added since."""


@pytest.mark.parametrize(("task", "preset"), list(RESOLVED))
def test_finetune_settings_resolve_as_before(task, preset):
    from bvr.tasks.registry import get_task

    # one learning rate and one epochs value: one grid point, which holds nothing out for selection and records
    # (and hashes) no selection key
    (resolved,) = (point.config for point in resolve_finetune(load_config(preset=preset), get_task(task)).grid())
    assert resolved.as_dict() == {**_SHARED, **_ADDED, **RESOLVED[(task, preset)]}
    assert set(resolved.hashed()) == set(_SHARED) - set(NOT_HASHED) | set(_ADDED) | set(RESOLVED[(task, preset)])
    tuned = resolve_finetune(load_config(preset=preset, overrides=["finetune.null_threshold=-1.5"]), get_task(task))
    assert tuned.grid()[0].config.hashed() == {**resolved.hashed(), "null_threshold": -1.5}
