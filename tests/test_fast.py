"""The fast path (bvr.model.fast, what an encoder runs by default) equals the reference path (bvr.model.layers, BERT
as written): forward and gradients, with dropout off, and with dropout on under the same random masks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bvr.model import EncoderConfig, PretrainingModel, cpu, fast, layers

VOCAB = 101
PAD = {"bert": 0, "roberta": 1}
CLOSE = {"rtol": 1e-5, "atol": 1e-5}


def twins(family: str, nsp: bool = False, norm: str = "post", **overrides) -> tuple[PretrainingModel, PretrainingModel]:
    """The same weights in a fast model and a reference one."""
    fields = {"vocab_size": VOCAB, "hidden_size": 32, "num_layers": 2, "num_heads": 4, "intermediate_size": 37,
              "max_position_embeddings": 48, "pad_token_id": PAD[family], "norm": norm, **overrides}
    config = EncoderConfig(family=family, **fields)
    torch.manual_seed(0)
    quick = PretrainingModel(config, sentence_head=nsp)
    reference = PretrainingModel(config, sentence_head=nsp, fast=False)
    reference.load_state_dict(quick.state_dict())
    return quick, reference


def padded_batch(family: str) -> dict[str, torch.Tensor]:
    """Four rows of 40 positions holding 40, 30, 20 and 10 real tokens: 100 real tokens, packed as 128 of the 160
    positions, so the fast path runs packed with some padding left out; a few masked positions per row."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, VOCAB, (4, 40), generator=gen)
    mask = torch.ones_like(ids)
    for row, length in enumerate((40, 30, 20, 10)):
        ids[row, length:], mask[row, length:] = PAD[family], 0
    labels = torch.full_like(ids, -100)
    masked = (torch.rand(ids.shape, generator=gen) < 0.2) & mask.bool()
    labels[masked] = ids[masked]
    types = None
    if family == "bert":
        types = torch.zeros_like(ids)
        types[:, 6:] = 1
        types *= mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "labels": labels,
            "sentence_labels": torch.tensor([0, 1, 1, 0])}


def gradients(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: param.grad for name, param in model.named_parameters() if param.grad is not None}


def with_bit_mask_dropout(model: nn.Module) -> nn.Module:
    """Each ``nn.Dropout`` of the reference path swapped for :class:`bvr.model.cpu.Dropout`: the same inverted
    dropout, its mask drawn as the fast path draws its masks on the CPU (``cpu.drop_mask``), from the same stream."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, cpu.Dropout(child.p))
    return model


def test_the_seam_builds_the_fast_or_the_reference_modules_with_one_state_dict():
    quick, reference = twins("bert")
    assert type(quick.encoder.encoder) is fast.FastLayerStack and type(reference.encoder.encoder) is layers.LayerStack
    assert {type(layer) for layer in quick.encoder.encoder.layer} == {fast.FastLayer}
    assert {type(layer) for layer in reference.encoder.encoder.layer} == {layers.Layer}
    assert type(quick.encoder.embeddings) is fast.FastEmbeddings
    assert type(reference.encoder.embeddings) is layers.Embeddings
    assert list(quick.state_dict()) == list(reference.state_dict())


SMALL_BUDGET = {"embedding_norm": False, "head_transform": False, "token_type_init": "zero"}


@pytest.mark.parametrize(("family", "nsp", "norm", "layout"), [
    ("bert", True, "post", {}), ("roberta", False, "post", {}), ("bert", False, "pre", {}),
    ("bert", True, "pre", SMALL_BUDGET), ("roberta", False, "pre", SMALL_BUDGET)])
def test_fast_path_equals_reference_without_dropout(family, nsp, norm, layout):
    """Eval mode on a batch the fast path packs: hidden states at real tokens, every layer's states, the last
    layer run at the selected tokens only, the pretraining loss and every parameter's gradient."""
    quick, reference = twins(family, nsp, norm, **layout)
    batch = padded_batch(family)
    args = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    real, masked = batch["attention_mask"].bool(), batch["labels"] != -100
    assert fast.Packing.from_mask(batch["attention_mask"]) is not None
    results = []
    for model in (quick.eval(), reference.eval()):
        loss = model.pretraining_loss(**batch)
        loss.loss.backward()
        with torch.no_grad():
            hidden = model.encoder(*args)
            every = model.encoder.hidden_states(*args)
            selected = model.encoder.forward_selected(batch["input_ids"], masked, *args[1:])
        results.append((loss, hidden, every, selected, gradients(model)))
    (loss, hidden, every, selected, grads), (ref_loss, ref_hidden, ref_every, _, ref_grads) = results
    torch.testing.assert_close(loss.loss, ref_loss.loss, **CLOSE)
    torch.testing.assert_close(hidden[real], ref_hidden[real], **CLOSE)
    left_out = torch.ones(4 * 40, dtype=torch.bool)
    left_out[fast.Packing.from_mask(batch["attention_mask"]).index] = False
    assert int(left_out.sum()) == 32 and not hidden[left_out.view(4, 40)].any()  # no one's states: zeros
    assert len(every) == len(ref_every) == 3
    for ours, theirs in zip(every, ref_every, strict=True):
        torch.testing.assert_close(ours[real], theirs[real], **CLOSE)
    torch.testing.assert_close(selected, ref_hidden[masked], **CLOSE)
    assert grads.keys() == ref_grads.keys() and len(grads) == len(list(quick.parameters()))
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(("family", "padded"), [("bert", False), ("roberta", True)])
def test_fast_path_equals_reference_with_dropout_under_the_same_masks(family, padded):
    """Training mode, dropout on everywhere: the fast path (bit masks, scales folded into the weights, values
    pre-scaled) and the reference path with its dropouts drawing the same bit masks give the same states and
    gradients under one seed, and other ones under another seed. Dropout's masks follow the shapes they drop, so
    the batch is one the fast path neither packs (1 position in 40 padded, under ``MIN_PADDING``) nor selects."""
    quick, reference = twins(family, dropout=0.3, attention_dropout=0.2)
    with_bit_mask_dropout(reference)
    ids = padded_batch(family)["input_ids"][:2]
    mask = torch.ones_like(ids)
    if padded:
        ids[1, -1], mask[1, -1] = PAD[family], 0
    assert fast.Packing.from_mask(mask) is None
    x = (ids, mask if padded else None)
    # Not the sum of squares: after the last LayerNorm that is nearly constant, and its gradients rounding noise.
    probe = torch.randn(*ids.shape, 32, generator=torch.Generator().manual_seed(2))
    outputs = []
    for model in (quick.train(), reference.train()):
        torch.manual_seed(7)
        hidden = model.encoder(*x)
        (hidden * probe).sum().backward()
        outputs.append((hidden.detach(), gradients(model)))
    (hidden, grads), (ref_hidden, ref_grads) = outputs
    torch.testing.assert_close(hidden, ref_hidden, **CLOSE)
    assert grads.keys() == ref_grads.keys()
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
    torch.manual_seed(8)
    with torch.no_grad():  # other masks: the equality above rests on the masks being the same
        assert not torch.allclose(reference.encoder(*x), hidden, atol=1e-3)
