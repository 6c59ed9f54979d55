"""Two CPU processes (gloo): ranks see disjoint sequences, with the masks one process would give them, and end
with the same weights."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from bvr.pretraining.data import training_collator
from bvr.pretraining.prepare import load_instances, prepare
from bvr.pretraining.run import pretrain
from bvr.tokenization import load_tokenizer, vocab_info
from tests.test_prepare import write_wiki_corpus
from tests.test_pretrain import config


class RecordBatches(L.Callback):
    """Saves, per rank, every training batch's sequence indices, epochs, inputs and labels, and the final weights."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.batches: list[dict[str, torch.Tensor]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append({k: batch[k].clone() for k in ("indices", "input_ids", "labels")}
                            | {"epoch": trainer.current_epoch})

    def on_train_end(self, trainer, pl_module) -> None:
        weights = {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()}
        torch.save({"batches": self.batches, "weights": weights}, self.folder / f"rank{trainer.global_rank}.pt")


@pytest.mark.slow
def test_ddp_ranks_see_disjoint_data_with_single_process_masks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data_dir = write_wiki_corpus(tmp_path / "data", documents=120)
    ddp = ["training.accelerator=cpu", "training.devices=2", "training.strategy=ddp_spawn", "masking.mode=dynamic"]
    prepared = prepare(config(data_dir, tmp_path / "out", *ddp), progress=False)
    train = load_instances(prepared)["train"]
    steps = -(-train.num_rows // 8) + 3  # one epoch (batches of 4 per rank) and a few steps into the next
    cfg = config(data_dir, tmp_path / "out", *ddp, f"training.max_steps={steps}")
    pretrain(cfg, progress=False, callbacks=[RecordBatches(tmp_path)])
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]

    tokenizer, family = load_tokenizer(prepared.tokenizer)
    collate = training_collator(vocab_info(tokenizer, family), cfg)
    assert len(ranks[0]["batches"]) == len(ranks[1]["batches"]) == steps
    epochs_seen = set()
    for b0, b1 in zip(ranks[0]["batches"], ranks[1]["batches"], strict=True):
        assert b0["indices"].numel() == b1["indices"].numel() <= 4  # batch 8 over 2 ranks; an epoch's last is short
        if b0["epoch"] == b1["epoch"]:
            assert not set(b0["indices"].tolist()) & set(b1["indices"].tolist())  # disjoint within a step
        for batch in (b0, b1):
            epochs_seen.add(batch["epoch"])
            alone = collate([dict(train[i], index=i, epoch=batch["epoch"]) for i in batch["indices"].tolist()])
            width = batch["input_ids"].shape[1]
            np.testing.assert_array_equal(alone["labels"][:, :width], batch["labels"])
            np.testing.assert_array_equal(alone["input_ids"][:, :width], batch["input_ids"])
    assert epochs_seen == {0, 1}  # the run crossed an epoch boundary: a new order, new masks
    for key, value in ranks[0]["weights"].items():
        torch.testing.assert_close(ranks[1]["weights"][key], value, msg=key)  # gradients were averaged
