"""On a CUDA device: parity with transformers, bit-exact resume, dropout rates, packing and selection, fine-tuning.

Every test here carries the ``gpu`` marker and is skipped without CUDA (tests/conftest.py);
``benchmarks/gpu_check.py`` runs them on a GPU. Tolerances:

- fp32 on CUDA: bvr's hidden states and logits equal transformers' on the same device to 1e-4 absolute (the
  weights are redrawn at scale 0.2, so logits are of order 10; the kernels sum in different orders).
- bf16 autocast: bvr's largest distance from the fp32 reference is at most twice transformers' own plus 0.01.
- packing and last-layer selection: equal to the dense path to 1e-5 in fp32.
- resume: bit-exact, with torch's deterministic algorithms on (SDPA's memory-efficient backward is otherwise free to
  sum in any order).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from bvr.model import EncoderConfig, PretrainingModel, cpu, fast
from bvr.model.hf import from_hf_state_dict
from bvr.model.hf_config import config_from_hf
from tests.test_hf import KINDS, batch, hf_outputs, tiny_hf

# cuBLAS reads this when it first starts: deterministic GEMM workspaces for the resume test.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
MLM_KINDS = ["bert-mlm", "roberta-mlm"]


def on_cuda(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.to(CUDA) for k, v in inputs.items()}


def pair(kind: str) -> tuple[torch.nn.Module, PretrainingModel]:
    """transformers' tiny model and bvr's with the same weights, both on CUDA in eval mode."""
    reference = tiny_hf(kind)
    config = config_from_hf(reference.config.to_dict())
    ours = PretrainingModel(config, sentence_head=KINDS[kind][2])
    ours.load_state_dict(from_hf_state_dict(reference.state_dict(), config), strict=True)
    return reference.to(CUDA).eval(), ours.to(CUDA).eval()


def our_outputs(model: PretrainingModel, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    args = (inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids"))
    with torch.no_grad():
        dense = model(*args)
        sparse = model(*args, labels=inputs["labels"])
    return {"hidden": dense.hidden, "logits": dense.mlm_logits, "sparse": sparse.mlm_logits}


@pytest.mark.parametrize("kind", MLM_KINDS)
def test_fp32_matches_transformers_on_cuda(kind):
    reference, ours = pair(kind)
    inputs = on_cuda(batch(KINDS[kind][0]))
    theirs, mine = hf_outputs(reference, inputs), our_outputs(ours, inputs)
    real, masked = inputs["attention_mask"].bool(), inputs["labels"] != -100
    close = {"rtol": 0, "atol": 1e-4}
    torch.testing.assert_close(mine["hidden"][real], theirs["hidden"][real], **close)
    torch.testing.assert_close(mine["logits"][real], theirs["logits"][real], **close)
    torch.testing.assert_close(mine["sparse"], theirs["logits"][masked], **close)


@pytest.mark.parametrize("kind", MLM_KINDS)
def test_bf16_autocast_is_as_close_to_fp32_as_transformers(kind):
    reference, ours = pair(kind)
    inputs = on_cuda(batch(KINDS[kind][0]))
    exact = hf_outputs(reference, inputs)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        theirs, mine = hf_outputs(reference, inputs), our_outputs(ours, inputs)
    real = inputs["attention_mask"].bool()
    for key in ("hidden", "logits"):
        their_error = (theirs[key][real].float() - exact[key][real]).abs().max().item()
        our_error = (mine[key][real].float() - exact[key][real]).abs().max().item()
        assert our_error <= 2 * their_error + 0.01, (key, our_error, their_error)


def test_dropout_rates_on_cuda():
    torch.manual_seed(0)
    x = torch.ones(1_000_000, device=CUDA)
    y = cpu.dropout(x, 0.1, True)
    assert abs((y == 0).float().mean().item() - 0.1) < 5 * math.sqrt(0.1 * 0.9 / x.numel())
    kept = y[y != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1 / 0.9))
    # Attention dropout goes through SDPA here: with zero queries every probability is 1/64, and identity values
    # make the output the dropped probabilities themselves.
    q = torch.zeros(8, 4, 64, 64, device=CUDA)
    k = torch.randn(8, 4, 64, 64, device=CUDA)
    v = torch.eye(64, device=CUDA).expand(8, 4, 64, 64)
    out = fast.attend(q, k, v, None, 0.1)
    assert abs((out == 0).float().mean().item() - 0.1) < 5 * math.sqrt(0.1 * 0.9 / out.numel())
    kept = out[out != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1 / 64 / 0.9))
    assert torch.equal(fast.attend(q, k, v, None, 0.0), torch.full_like(out, 1 / 64))


def test_packing_and_selection_equal_the_dense_path_on_cuda(monkeypatch):
    torch.manual_seed(0)
    config = EncoderConfig(family="bert", vocab_size=100, hidden_size=64, num_layers=3, num_heads=4,
                           intermediate_size=128, pad_token_id=0)
    model = PretrainingModel(config).to(CUDA).eval()
    ids = torch.randint(5, 100, (4, 40), device=CUDA)
    mask = torch.ones_like(ids)
    for row, length in enumerate((40, 30, 20, 10)):
        ids[row, length:], mask[row, length:] = 0, 0
    real = mask.bool()
    selected = real & (torch.rand(ids.shape, device=CUDA) < 0.3)
    with torch.no_grad():
        assert fast.Packing.from_mask(mask) is not None  # 37.5% padding: this batch runs packed
        packed = model.encoder(ids, mask)
        sparse = model.encoder.forward_selected(ids, selected, mask)
        monkeypatch.setattr(fast, "MIN_PADDING", 1.0)  # nothing packs
        assert fast.Packing.from_mask(mask) is None
        dense = model.encoder(ids, mask)
    torch.testing.assert_close(packed[real], dense[real], rtol=0, atol=1e-5)
    torch.testing.assert_close(sparse, dense[selected], rtol=0, atol=1e-5)


def synthetic_loader(steps: int, batch_size: int = 8):
    from bvr.pretraining.collator import PretrainingCollator
    from bvr.tokenization import VocabInfo

    vocab = VocabInfo(family="bert", vocab_size=200, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4,
                      special_ids=(0, 1, 2, 3, 4), word_start=np.ones(200, dtype=bool))
    rng = np.random.default_rng(0)
    examples = []
    for index in range(steps * batch_size):
        length = int(rng.integers(20, 48))  # uneven lengths: padded batches, packed
        examples.append({"input_ids": [2, *rng.integers(5, 200, length - 2).tolist(), 3],
                         "token_type_ids": [0] * length, "sentence_label": 0, "index": index, "epoch": 0})
    return torch.utils.data.DataLoader(examples, batch_size=batch_size, shuffle=False,
                                       collate_fn=PretrainingCollator(vocab, mode="dynamic", seed=0))


def fit(root, max_steps: int, ckpt_path=None) -> dict[str, torch.Tensor]:
    """bvr's Lightning module and Trainer on CUDA in bf16-mixed for ``max_steps`` steps (4 an epoch, so the
    checkpoint at step 4 closes an epoch); the final weights."""
    import lightning as L

    from bvr.config import TrainingConfig
    from bvr.pretraining.run import PretrainingModule
    from bvr.training import TrainerSettings, build_trainer

    L.seed_everything(0, verbose=False)
    config = EncoderConfig(family="bert", vocab_size=200, hidden_size=64, num_layers=2, num_heads=2,
                           intermediate_size=128, pad_token_id=0)
    module = PretrainingModule(PretrainingModel(config), TrainingConfig(learning_rate=1e-3, warmup_steps=2,
                                                                         max_steps=8))
    settings = TrainerSettings(precision="bf16-mixed", accelerator="gpu", grad_clip=1.0, log_every_steps=1,
                               max_steps=max_steps, checkpoint_every_steps=4)
    trainer = build_trainer(root, settings, False, progress=False)
    trainer.fit(module, train_dataloaders=synthetic_loader(4), ckpt_path=ckpt_path)
    return {k: v.detach().cpu().clone() for k, v in module.model.state_dict().items()}


def test_resume_on_cuda_is_bit_exact(tmp_path):
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        straight = fit(tmp_path / "straight", 8)
        fit(tmp_path / "stopped", 4)
        resumed = fit(tmp_path / "stopped", 8, ckpt_path=tmp_path / "stopped" / "checkpoints" / "last.ckpt")
    finally:
        torch.use_deterministic_algorithms(deterministic)
    assert straight.keys() == resumed.keys()
    for key in straight:
        assert torch.equal(straight[key], resumed[key]), key


def test_short_finetuning_learns_on_cuda():
    from bvr.model.encoder import Encoder, init_weights
    from bvr.tasks.heads import FinetuneModel, SequenceHead, take_pooler
    from bvr.tasks.kinds import KINDS as TASK_KINDS

    torch.manual_seed(0)
    config = EncoderConfig(family="bert", vocab_size=100, hidden_size=64, num_layers=2, num_heads=2,
                           intermediate_size=128, pad_token_id=0)
    encoder = Encoder(config, add_pooler=True)
    encoder.apply(lambda m: init_weights(m, config.initializer_range))
    model = FinetuneModel(encoder, SequenceHead(config, 2, take_pooler(encoder))).to(CUDA).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    kind = TASK_KINDS["classification"]
    ids = torch.randint(5, 100, (64, 24), device=CUDA)
    labels = torch.randint(0, 2, (64,), device=CUDA)
    ids[:, 5] = torch.where(labels.bool(), 7, 8)  # the label is readable at one position
    mask = torch.ones_like(ids)
    mask[::2, 16:] = 0  # half the rows padded
    data = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids), "labels": labels}
    losses = []
    for _ in range(60):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = kind.loss(model(data), data)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        accuracy = (model(data).argmax(-1) == labels).float().mean().item()
    assert losses[-1] < 0.5 * losses[0] and accuracy >= 0.95, (losses[0], losses[-1], accuracy)
