"""How much of a training step the masking collator costs, for the benchmark encoder on CPU.

Times :class:`bvr.pretraining.masking.PretrainingCollator` on a batch of 32 sequences of 128 tokens from a
30,522-token vocabulary (dynamic, static, whole-word and span masking) against one fp32 training step (forward, backward
and AdamW) of the encoder of ``pretrain_throughput.py``: 4 layers, hidden 256, 4 heads, FFN 1024, MLM logits over the
full vocabulary at the masked positions only. The target is a collator under 1% of a step, so that masking in the
DataLoader never starves the model even with a single worker.

The step is bvr's own training step: :class:`bvr.model.PretrainingModel` (with the NSP head, as BERT's recipe)
through ``pretraining_loss``, then backward and AdamW.

Run: ``python benchmarks/collator_overhead.py``
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from bvr.memory import keep_freed_memory
from bvr.model import EncoderConfig, PretrainingModel
from bvr.pretraining.collator import PretrainingCollator
from bvr.tokenization import VocabInfo

BATCH, SEQ, VOCAB = 32, 128, 30_522
HIDDEN, LAYERS, HEADS, FFN = 256, 4, 4, 1024
THREADS = 2  # the benchmark machine's cores


def synthetic_vocab(seed: int = 0) -> VocabInfo:
    """BERT-uncased-shaped vocabulary facts: [PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103."""
    rng = np.random.default_rng(seed)
    word_start = rng.random(VOCAB) > 0.2  # about one token in five continues a word
    return VocabInfo(
        family="bert",
        vocab_size=VOCAB,
        pad_id=0,
        unk_id=100,
        cls_id=101,
        sep_id=102,
        mask_id=103,
        special_ids=(0, 100, 101, 102, 103),
        word_start=word_start,
    )


def synthetic_examples(vocab: VocabInfo, first_index: int, epoch: int, seed: int = 0) -> list[dict]:
    """A batch of full-length segment pairs ``[CLS] a [SEP] b [SEP]`` with random split points."""
    rng = np.random.default_rng(seed + first_index)
    examples = []
    for row in range(BATCH):
        ids = rng.integers(1000, VOCAB, size=SEQ)
        cut = int(rng.integers(16, SEQ - 16))
        ids[[0, cut, SEQ - 1]] = (vocab.cls_id, vocab.sep_id, vocab.sep_id)
        types = [0] * (cut + 1) + [1] * (SEQ - cut - 1)
        examples.append(
            {
                "input_ids": ids.tolist(),
                "token_type_ids": types,
                "nsp_label": row % 2,
                "index": first_index + row,
                "epoch": epoch,
            }
        )
    return examples


def median_seconds(fn: Callable[[int], object], calls: int, warmup: int) -> float:
    """Median wall time of ``fn(call)`` over ``calls`` calls after ``warmup`` untimed ones."""
    for call in range(warmup):
        fn(call)
    times = []
    for call in range(calls):
        start = time.perf_counter()
        fn(warmup + call)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_step(batch: dict[str, torch.Tensor], steps: int) -> float:
    """Median seconds of forward + backward + AdamW step."""
    torch.manual_seed(0)
    # The step of pretrain_throughput.py's config (4 layers, hidden 256), fixed here: the tiny preset's shape changes.
    config = EncoderConfig(family="bert", vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=LAYERS, num_heads=HEADS,
                           intermediate_size=FFN, pad_token_id=0)
    model = PretrainingModel(config, nsp=True).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    inputs = {k: batch[k] for k in ("input_ids", "labels", "attention_mask", "token_type_ids", "nsp_labels")}

    def step(_: int) -> None:
        optimiser.zero_grad(set_to_none=True)
        model.pretraining_loss(**inputs).loss.backward()
        optimiser.step()

    return median_seconds(step, steps, warmup=3)


def time_collator(collate: PretrainingCollator, inputs: list[list[dict]], calls: int) -> float:
    """Median seconds per batch; every call masks other sequences, as in training."""
    return median_seconds(lambda call: collate(inputs[call % len(inputs)]), calls, warmup=5)


def main(steps: int = 10, collator_calls: int = 100) -> None:
    """Print the step time, each collator's time per batch and the ratio."""
    torch.set_num_threads(THREADS)
    heap = keep_freed_memory()  # as bvr's CLI and Trainer do: the step is timed as training runs it
    print("heap: freed memory kept between steps (bvr.memory)" if heap else "heap: the C library's defaults")
    vocab = synthetic_vocab()
    inputs = [synthetic_examples(vocab, first_index=call * BATCH, epoch=call) for call in range(20)]
    arms = {
        "dynamic": PretrainingCollator(vocab, mode="dynamic", seed=0),
        "static (dupe 10)": PretrainingCollator(vocab, mode="static", seed=0, dupe_factor=10),
        "dynamic whole-word": PretrainingCollator(vocab, mode="dynamic", seed=0, scheme="whole-word"),
        "dynamic span": PretrainingCollator(vocab, mode="dynamic", seed=0, scheme="span"),
    }
    step = time_step(arms["dynamic"](inputs[0]), steps)
    print(f"batch {BATCH} x {SEQ}, vocab {VOCAB:,}, fp32 CPU, {THREADS} threads")
    print(f"training step (bvr encoder {LAYERS}L/{HIDDEN}H/{HEADS}A/FFN {FFN} + NSP, AdamW): {step * 1e3:8.2f} ms")
    for name, collate in arms.items():
        seconds = time_collator(collate, inputs, collator_calls)
        print(f"collator {name:<20}: {seconds * 1e3:8.3f} ms/batch = {100 * seconds / step:5.2f}% of a step")


if __name__ == "__main__":
    main()
