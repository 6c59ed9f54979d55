"""Parity with Hugging Face transformers, both ways, through the production converter and folders.

Tiny random transformers models (built from configs, never downloaded) are saved to tmp_path and loaded with
:func:`bvr.model.hf.load_hf`, or converted with :func:`from_hf_state_dict`; our random models are exported with
:func:`export_hf` and loaded by transformers. Outputs must agree to 1e-5 on a padded batch with two segments.
Weights are redrawn at a larger scale than the 0.02 initialisation, so that a wrong wiring cannot hide in tiny
activations.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat

import pytest
import torch
from safetensors.torch import load_file, save_file

from bvr.errors import BvrError
from bvr.model import PretrainingModel
from bvr.model.hf import export_hf, from_hf_state_dict, load_hf, to_hf_state_dict
from bvr.model.hf_config import config_from_hf, hf_config_dict
from tests.test_model import preset_encoder

transformers = pytest.importorskip("transformers")

VOCAB, HIDDEN, LAYERS, HEADS, FFN = 100, 32, 2, 4, 37
ATOL = 1e-5
KINDS = {
    "bert-pretraining": ("bert", "BertForPreTraining", True),
    "bert-mlm": ("bert", "BertForMaskedLM", False),
    "roberta-mlm": ("roberta", "RobertaForMaskedLM", False),
}
PAD = {"bert": 0, "roberta": 1}


def hf_config(family: str):
    common = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "intermediate_size": FFN}
    if family == "bert":
        return transformers.BertConfig(**common, max_position_embeddings=40, pad_token_id=0)
    # roberta-base's constants: one token type, eps 1e-5, positions offset by pad + 1
    return transformers.RobertaConfig(**common, max_position_embeddings=42, pad_token_id=1, bos_token_id=0,
                                      eos_token_id=2, type_vocab_size=1, layer_norm_eps=1e-5)


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Redraw every parameter, LayerNorms and biases too, at scale 0.2 (LayerNorm gains around 1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():  # tied parameters are visited once
            gain = name.endswith("weight") and ("LayerNorm" in name or "layer_norm" in name)
            param.copy_(torch.randn(param.shape, generator=gen) * 0.2 + (1.0 if gain else 0.0))


def tiny_hf(kind: str):
    family, cls_name, _ = KINDS[kind]
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(hf_config(family))
    randomize(model, seed=1)
    return model.eval()


def batch(family: str) -> dict[str, torch.Tensor]:
    """Three sequences (lengths 12, 8, 5; right-padded), token types for bert, masked positions for the MLM."""
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(3, VOCAB, (3, 12), generator=gen)  # ids 0-2 are specials: never pad by accident
    mask = torch.ones_like(ids)
    for row, length in ((1, 8), (2, 5)):
        ids[row, length:] = PAD[family]
        mask[row, length:] = 0
    labels = torch.full_like(ids, -100)
    for row, col in ((0, 0), (0, 5), (0, 11), (1, 3), (1, 7), (2, 2)):
        labels[row, col] = ids[row, col]
    out = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    if family == "bert":
        types = torch.zeros_like(ids)
        types[:, 4:] = 1
        out["token_type_ids"] = types * mask
    return out


def hf_outputs(model, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    args = {k: v for k, v in inputs.items() if k != "labels"}
    with torch.no_grad():
        out = model(**args, output_hidden_states=True)
    logits = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits
    nsp = getattr(out, "seq_relationship_logits", None)
    return {"hidden": out.hidden_states[-1], "logits": logits, "nsp": nsp}


def assert_matches(ours: PretrainingModel, reference: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]):
    """Hidden states, dense and sparse MLM logits and NSP logits of ``ours`` equal ``reference`` to ATOL."""
    args = (inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids"))
    labels = inputs["labels"]
    masked = labels != -100
    with torch.no_grad():
        dense = ours(*args)
        sparse = ours(*args, labels=labels)
        trained_logits = ours.mlm_head(ours.encoder.forward_selected(args[0], masked, *args[1:]))  # training path
    close = {"rtol": 0, "atol": ATOL}
    # Real tokens only: a third of the batch is padding, so ours runs packed, and states at padding are no one's.
    real = inputs["attention_mask"].bool()
    torch.testing.assert_close(dense.hidden[real], reference["hidden"][real], **close)
    torch.testing.assert_close(dense.mlm_logits[real], reference["logits"][real], **close)
    torch.testing.assert_close(sparse.mlm_logits, reference["logits"][masked], **close)
    torch.testing.assert_close(trained_logits, reference["logits"][masked], **close)
    if reference["nsp"] is not None:
        torch.testing.assert_close(dense.sentence_logits, reference["nsp"], **close)
    else:
        assert dense.sentence_logits is None


# ---------------------------------------------------------------------------------------------------------------
# transformers -> bvr


@pytest.mark.parametrize("kind", list(KINDS))
def test_load_hf_folder_matches_transformers(kind, tmp_path):
    family, _, nsp = KINDS[kind]
    reference_model = tiny_hf(kind)
    reference_model.save_pretrained(tmp_path)
    ours, config = load_hf(tmp_path)
    assert (config.family, ours.sentence_head, ours.training) == (family, nsp, False)
    assert (config.type_vocab_size, config.layer_norm_eps) == (hf_config(family).type_vocab_size,
                                                                hf_config(family).layer_norm_eps)
    inputs = batch(family)
    assert_matches(ours, hf_outputs(reference_model, inputs), inputs)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_from_hf_state_dict_matches_transformers(kind, fast):
    """Both of the encoder's paths: the fast one (the default) and the reference modules, BERT as written."""
    family, _, nsp = KINDS[kind]
    reference_model = tiny_hf(kind)
    config = config_from_hf(reference_model.config.to_dict())
    ours = PretrainingModel(config, sentence_head=nsp, fast=fast)
    ours.load_state_dict(from_hf_state_dict(reference_model.state_dict(), config), strict=True)
    ours.eval()
    # loading through the tied aliases must not untie the decoder
    assert ours.mlm_head.decoder.weight is ours.encoder.embeddings.word_embeddings.weight
    inputs = batch(family)
    assert_matches(ours, hf_outputs(reference_model, inputs), inputs)


def test_pretraining_checkpoint_loads_without_nsp_like_bert_base_uncased(tmp_path):
    """bert-base-uncased carries the pooler and NSP head: an MLM-only model drops them."""
    reference_model = tiny_hf("bert-pretraining")
    reference_model.save_pretrained(tmp_path)
    ours, _ = load_hf(tmp_path, sentence_head=False, pooler=False)
    assert not ours.sentence_head and ours.encoder.pooler is None
    inputs = batch("bert")
    reference = hf_outputs(reference_model, inputs)
    reference["nsp"] = None
    assert_matches(ours, reference, inputs)


def test_legacy_checkpoint_names_load(tmp_path):
    """Old checkpoints: pytorch_model.bin, LayerNorm gamma/beta, position_ids buffers, decoder copies written."""
    reference_model = tiny_hf("bert-pretraining")
    reference_model.config.save_pretrained(tmp_path)
    legacy = {}
    for key, value in reference_model.state_dict().items():
        if "LayerNorm" in key:
            key = key.replace(".weight", ".gamma").replace(".bias", ".beta")
        legacy[key] = value.clone()
    legacy["bert.embeddings.position_ids"] = torch.arange(40)[None]
    assert "cls.predictions.decoder.bias" in legacy and "cls.predictions.decoder.weight" in legacy
    del legacy["cls.predictions.bias"]  # only the decoder's copy of the output bias
    torch.save(legacy, tmp_path / "pytorch_model.bin")
    ours, _ = load_hf(tmp_path)
    inputs = batch("bert")
    assert_matches(ours, hf_outputs(reference_model, inputs), inputs)


def test_roberta_checkpoint_with_pooler_loads_like_roberta_base():
    reference_model = tiny_hf("roberta-mlm")
    state = dict(reference_model.state_dict())
    state["roberta.pooler.dense.weight"] = torch.zeros(HIDDEN, HIDDEN)
    state["roberta.pooler.dense.bias"] = torch.zeros(HIDDEN)
    config = config_from_hf(reference_model.config.to_dict())
    weights = from_hf_state_dict(state, config)
    assert not any("pooler" in key for key in weights)


# ---------------------------------------------------------------------------------------------------------------
# bvr -> transformers


@pytest.mark.parametrize(("family", "nsp"), [("bert", True), ("bert", False), ("roberta", False)])
def test_export_loads_in_transformers(family, nsp, tmp_path):
    config = config_from_hf(hf_config(family).to_dict())
    torch.manual_seed(3)
    ours = PretrainingModel(config, sentence_head=nsp)
    randomize(ours, seed=4)
    ours.eval()
    folder = export_hf(ours, config, tmp_path / "export")
    loader = transformers.BertForPreTraining if nsp else transformers.AutoModelForMaskedLM
    reference_model, info = loader.from_pretrained(folder, output_loading_info=True)
    assert not any(info.get(kind) for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    assert type(reference_model).__name__ == hf_config_dict(config, nsp)["architectures"][0]
    inputs = batch(family)
    assert_matches(ours, hf_outputs(reference_model.eval(), inputs), inputs)


def test_exported_weights_are_readable_by_all(tmp_path):
    # safetensors writes through a private temporary file (mode 0600); a shared model folder must be readable.
    previous = os.umask(0o022)
    try:
        folder = export_hf(PretrainingModel(config_from_hf(hf_config("bert").to_dict())), None, tmp_path / "export")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((folder / "model.safetensors").stat().st_mode) == 0o644


@pytest.mark.parametrize(("family", "nsp"), [("bert", True), ("roberta", False), ("roberta", True)])
def test_export_then_load_hf_round_trips(family, nsp, tmp_path):
    config = config_from_hf(hf_config(family).to_dict())
    ours = PretrainingModel(config, sentence_head=nsp)
    randomize(ours, seed=5)
    export_hf(ours, None, tmp_path)
    written = load_file(str(tmp_path / "model.safetensors"))
    assert not any(".decoder." in key for key in written)  # tied aliases are not written, as save_pretrained
    again, config_again = load_hf(tmp_path)
    assert config_again == config and again.sentence_head == nsp
    for key, value in ours.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key


def test_zero_token_type_init_round_trips_through_config_json(tmp_path):
    """A control (the same encoder, never trained) is initialised from the exported folder's config: the recipe's
    initialisation travels in bvr's own key, written only where it is not BERT's; transformers still loads it."""
    config = dataclasses.replace(config_from_hf(hf_config("bert").to_dict()), token_type_init="zero")
    data = hf_config_dict(config, sentence_head=False)
    assert data["bvr_token_type_init"] == "zero" and data["model_type"] == "bert"
    assert config_from_hf(data) == config
    assert not any(key.startswith("bvr_") for key in hf_config_dict(
        dataclasses.replace(config, token_type_init="normal"), sentence_head=False))
    export_hf(PretrainingModel(config, sentence_head=False), None, tmp_path)
    assert load_hf(tmp_path)[1] == config
    transformers.AutoModelForMaskedLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_small_budget_layout_round_trips_and_transformers_refuses_it(family, tmp_path):
    """No embeddings' LayerNorm, no head transform: bvr's own model type, loaded back by bvr equal, refused by
    transformers by name (it would otherwise draw the missing LayerNorms afresh)."""
    config = dataclasses.replace(config_from_hf(hf_config(family).to_dict()), norm="pre", embedding_norm=False,
                                 head_transform=False)
    ours = PretrainingModel(config, sentence_head=False)
    randomize(ours, seed=2)
    export_hf(ours, None, tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["model_type"] == f"bvr-{family}-prelayernorm" and "bvr_note" in data
    assert (data["bvr_embedding_norm"], data["bvr_head_transform"]) == (False, False)
    again, config_again = load_hf(tmp_path)
    assert config_again == config
    for key, value in ours.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key
    with pytest.raises((ValueError, KeyError)):
        transformers.AutoModelForMaskedLM.from_pretrained(tmp_path)


def test_to_hf_state_dict_unties_shared_storage():
    config = config_from_hf(hf_config("bert").to_dict())
    state = PretrainingModel(config, sentence_head=False).state_dict()
    state["cls.predictions.transform.dense.bias"] = state["bert.embeddings.LayerNorm.bias"]  # shares storage
    out = to_hf_state_dict(state, config)
    pointers = [tensor.untyped_storage().data_ptr() for tensor in out.values()]
    assert len(pointers) == len(set(pointers))
    assert "cls.predictions.decoder.weight" not in out


def test_hf_config_dict_fields():
    roberta = config_from_hf(hf_config("roberta").to_dict())
    data = hf_config_dict(roberta, sentence_head=False)
    assert data["architectures"] == ["RobertaForMaskedLM"] and data["model_type"] == "roberta"
    assert (data["bos_token_id"], data["eos_token_id"], data["pad_token_id"]) == (0, 2, 1)
    assert (data["type_vocab_size"], data["layer_norm_eps"], data["max_position_embeddings"]) == (1, 1e-5, 42)
    assert data["hidden_act"] == "gelu" and data["tie_word_embeddings"] is True
    bert = hf_config_dict(preset_encoder("base", "bert", 30_522, 0), sentence_head=True)
    assert bert["architectures"] == ["BertForPreTraining"] and "bos_token_id" not in bert
    assert (bert["num_hidden_layers"], bert["num_attention_heads"], bert["intermediate_size"]) == (12, 12, 3072)
    assert hf_config_dict(preset_encoder("tiny", "bert", 100, 0), sentence_head=False)["architectures"] == [
        "BertForMaskedLM"]


# ---------------------------------------------------------------------------------------------------------------
# Bad folders


def write_folder(tmp_path, config: dict, weights: dict[str, torch.Tensor] | None = None):
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    if weights is not None:
        save_file(weights, str(tmp_path / "model.safetensors"))
    return tmp_path


def test_unknown_model_type_names_file_and_key(tmp_path):
    write_folder(tmp_path, {**hf_config("bert").to_dict(), "model_type": "gpt2"}, {})
    with pytest.raises(BvrError, match="gpt2") as info:
        load_hf(tmp_path)
    assert info.value.where == f"{tmp_path / 'config.json'}: model_type"


def test_missing_weights_names_the_folder(tmp_path):
    write_folder(tmp_path, hf_config("bert").to_dict())
    with pytest.raises(BvrError, match="no weights file") as info:
        load_hf(tmp_path)
    assert info.value.where == str(tmp_path)


def test_missing_config_and_missing_folder(tmp_path):
    with pytest.raises(BvrError, match="config.json"):
        load_hf(tmp_path)
    with pytest.raises(BvrError, match="not a folder"):
        load_hf(tmp_path / "nowhere")


def test_unsupported_activation_is_refused(tmp_path):
    write_folder(tmp_path, {**hf_config("bert").to_dict(), "hidden_act": "gelu_new"}, {})
    with pytest.raises(BvrError, match="gelu_new") as info:
        load_hf(tmp_path)
    assert info.value.where.endswith("hidden_act")


def test_invalid_config_value_names_the_config_json_key(tmp_path):
    write_folder(tmp_path, {**hf_config("bert").to_dict(), "num_attention_heads": 5}, {})
    with pytest.raises(BvrError, match="do not divide") as info:
        load_hf(tmp_path)
    assert info.value.where == f"{tmp_path / 'config.json'}: num_attention_heads"


def test_weights_that_do_not_fit_list_the_keys(tmp_path):
    reference_model = tiny_hf("bert-mlm")
    reference_model.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, "vocab_size": VOCAB + 1}))
    with pytest.raises(BvrError, match="wrong shape 2: ") as info:
        load_hf(tmp_path)
    assert "bert.embeddings.word_embeddings.weight (100, 32) (expected (101, 32))" in info.value.message
    assert info.value.where.endswith("model.safetensors")


def test_missing_and_unexpected_keys_are_listed():
    reference_model = tiny_hf("bert-mlm")
    config = config_from_hf(reference_model.config.to_dict())
    state = dict(reference_model.state_dict())
    del state["bert.encoder.layer.1.output.dense.weight"]
    state["bert.encoder.layer.1.extra.weight"] = torch.zeros(3)
    with pytest.raises(BvrError) as info:
        from_hf_state_dict(state, config)
    message = info.value.message
    assert "missing 1: bert.encoder.layer.1.output.dense.weight" in message
    assert "unexpected 1: bert.encoder.layer.1.extra.weight" in message


# ---------------------------------------------------------------------------------------------------------------
# Pre-LayerNorm encoders (model.norm=pre)


def tiny_pre_norm_hf():
    """Hugging Face's RobertaPreLayerNormForMaskedLM, roberta-base's constants, every parameter redrawn."""
    torch.manual_seed(0)
    config = transformers.RobertaPreLayerNormConfig(**hf_config("roberta").to_dict())
    model = transformers.RobertaPreLayerNormForMaskedLM(config)
    randomize(model, seed=5)
    return model.eval()


def pre_norm_outputs(model, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """As :func:`hf_outputs`, the hidden states after the final LayerNorm (HF's hidden_states[-1] is before it)."""
    args = {k: v for k, v in inputs.items() if k != "labels"}
    with torch.no_grad():
        hidden = model.roberta_prelayernorm(**args).last_hidden_state
        logits = model(**args).logits
    return {"hidden": hidden, "logits": logits, "nsp": None}


def test_pre_norm_roberta_loads_from_transformers(tmp_path):
    reference_model = tiny_pre_norm_hf()
    reference_model.save_pretrained(tmp_path)
    ours, config = load_hf(tmp_path)
    assert (config.family, config.norm) == ("roberta", "pre")
    inputs = batch("roberta")
    assert_matches(ours, pre_norm_outputs(reference_model, inputs), inputs)


def test_pre_norm_roberta_exports_as_roberta_prelayernorm(tmp_path):
    config = dataclasses.replace(config_from_hf(hf_config("roberta").to_dict()), norm="pre")
    torch.manual_seed(3)
    ours = PretrainingModel(config)
    randomize(ours, seed=6)
    folder = export_hf(ours.eval(), config, tmp_path / "export")
    reference_model, info = transformers.AutoModelForMaskedLM.from_pretrained(folder, output_loading_info=True)
    assert not any(info.get(kind) for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    assert type(reference_model).__name__ == "RobertaPreLayerNormForMaskedLM"
    inputs = batch("roberta")
    assert_matches(ours, pre_norm_outputs(reference_model.eval(), inputs), inputs)


def test_pre_norm_bert_exports_for_bvr_only(tmp_path):
    """Hugging Face has no pre-LayerNorm BERT: the folder says so, transformers refuses it by its type (instead of
    loading the weights into a post-LayerNorm BERT), and bvr loads it back exactly."""
    config = dataclasses.replace(config_from_hf(hf_config("bert").to_dict()), norm="pre")
    torch.manual_seed(3)
    ours = PretrainingModel(config, sentence_head=True)
    randomize(ours, seed=7)
    folder = export_hf(ours.eval(), config, tmp_path / "export")
    written = json.loads((folder / "config.json").read_text())
    assert (written["model_type"], written["architectures"]) == ("bvr-bert-prelayernorm",
                                                                  ["BvrPreLayerNormBertForPreTraining"])
    assert "no class for it" in written["bvr_note"]
    with pytest.raises((ValueError, KeyError), match="bvr-bert-prelayernorm"):
        transformers.AutoConfig.from_pretrained(folder)
    loaded, loaded_config = load_hf(folder)
    assert loaded_config == config
    inputs = batch("bert")
    args = (inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
    with torch.no_grad():
        torch.testing.assert_close(loaded(*args).mlm_logits, ours(*args).mlm_logits, rtol=0, atol=0)


def test_post_norm_keeps_bert_parameter_names():
    """The default (post-LayerNorm) has exactly BERT's parameters: no pre-LayerNorm or final LayerNorm."""
    config = config_from_hf(hf_config("bert").to_dict())
    names = set(PretrainingModel(config).state_dict())
    assert config.norm == "post"
    assert not any(".attention.LayerNorm." in n or ".intermediate.LayerNorm." in n for n in names)
    assert "bert.LayerNorm.weight" not in names
    assert "bert.encoder.layer.0.attention.output.LayerNorm.weight" in names
