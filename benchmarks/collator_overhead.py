"""How much of a training step the masking collator costs, for the benchmark encoder on CPU.

Times :class:`bvr.pretraining.masking.PretrainingCollator` on a batch of 32 sequences of 128 tokens from a
30,522-token vocabulary (dynamic, static, whole-word and span masking) against one fp32 training step (forward, backward
and AdamW) of the encoder of ``pretrain_throughput.py``: 4 layers, hidden 256, 4 heads, FFN 1024, MLM logits over the
full vocabulary at the masked positions only. The target is a collator under 1% of a step, so that masking in the
DataLoader never starves the model even with a single worker.

``--dry-run`` runs the same code at ``pretrain_throughput.py``'s toy sizes, so that CI checks that the script runs;
its figures mean nothing.

The step is bvr's own training step: :class:`bvr.model.PretrainingModel` (with the NSP head, as BERT's recipe)
through ``pretraining_loss``, then backward and AdamW.

Run: ``python benchmarks/collator_overhead.py [--steps 10] [--collator-calls 100] [--threads 2] [--dry-run]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from pretrain_throughput import BENCH, DRY, Shape

from bvr.memory import keep_freed_memory
from bvr.model import PretrainingModel
from bvr.pretraining.collator import PretrainingCollator
from bvr.pretraining.masking import MaskRule
from bvr.tokenization import VocabInfo

THREADS = 2  # the benchmark machine's cores


def synthetic_vocab(seed: int = 0, shape: Shape = BENCH) -> VocabInfo:
    """BERT-uncased-shaped vocabulary facts: [PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103."""
    rng = np.random.default_rng(seed)
    word_start = rng.random(shape.vocab) > 0.2  # about one token in five continues a word
    return VocabInfo(
        family="bert",
        vocab_size=shape.vocab,
        pad_id=0,
        unk_id=100,
        cls_id=101,
        sep_id=102,
        mask_id=103,
        special_ids=(0, 100, 101, 102, 103),
        word_start=word_start,
    )


def synthetic_examples(vocab: VocabInfo, first_index: int, epoch: int, seed: int = 0,
                       shape: Shape = BENCH) -> list[dict]:
    """A batch of full-length segment pairs ``[CLS] a [SEP] b [SEP]`` with random split points."""
    rng = np.random.default_rng(seed + first_index)
    examples = []
    seq = shape.seq
    for row in range(shape.batch):
        ids = rng.integers(1000, vocab.vocab_size, size=seq)
        cut = int(rng.integers(16, seq - 16))
        ids[[0, cut, seq - 1]] = (vocab.cls_id, vocab.sep_id, vocab.sep_id)
        types = [0] * (cut + 1) + [1] * (seq - cut - 1)
        examples.append(
            {
                "input_ids": ids.tolist(),
                "token_type_ids": types,
                "sentence_label": row % 2,
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


def time_step(batch: dict[str, torch.Tensor], steps: int, shape: Shape = BENCH) -> float:
    """Median seconds of forward + backward + AdamW step."""
    torch.manual_seed(0)
    # The step of pretrain_throughput.py's config (4 layers, hidden 256), fixed there: the tiny preset's shape changes.
    config = shape.encoder_config(pad_token_id=0)
    model = PretrainingModel(config, sentence_head=True).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    inputs = {k: batch[k] for k in ("input_ids", "labels", "attention_mask", "token_type_ids", "sentence_labels")}

    def step(_: int) -> None:
        optimiser.zero_grad(set_to_none=True)
        model.pretraining_loss(**inputs).loss.backward()
        optimiser.step()

    return median_seconds(step, steps, warmup=3)


def time_collator(collate: PretrainingCollator, inputs: list[list[dict]], calls: int) -> float:
    """Median seconds per batch; every call masks other sequences, as in training."""
    return median_seconds(lambda call: collate(inputs[call % len(inputs)]), calls, warmup=5)


def main(steps: int = 10, collator_calls: int = 100, threads: int = THREADS, shape: Shape = BENCH) -> None:
    """Print the step time, each collator's time per batch and the ratio."""
    torch.set_num_threads(threads)
    heap = keep_freed_memory()  # as bvr's CLI and Trainer do: the step is timed as training runs it
    print("heap: freed memory kept between steps (bvr.memory)" if heap else "heap: the C library's defaults")
    vocab = synthetic_vocab(shape=shape)
    inputs = [synthetic_examples(vocab, first_index=call * shape.batch, epoch=call, shape=shape) for call in range(20)]
    arms = {
        "dynamic": PretrainingCollator(vocab, mode="dynamic", seed=0),
        "static (dupe 10)": PretrainingCollator(vocab, mode="static", seed=0, dupe_factor=10),
        "dynamic whole-word": PretrainingCollator(vocab, mode="dynamic", seed=0, rule=MaskRule(scheme="whole-word")),
        "dynamic span": PretrainingCollator(vocab, mode="dynamic", seed=0, rule=MaskRule(scheme="span")),
    }
    step = time_step(arms["dynamic"](inputs[0]), steps, shape)
    print(f"batch {shape.batch} x {shape.seq}, vocab {shape.vocab:,}, fp32 CPU, {threads} threads")
    print(f"training step (bvr encoder {shape.layers}L/{shape.hidden}H/{shape.heads}A/FFN {shape.ffn} + NSP, AdamW): "
          f"{step * 1e3:8.2f} ms")
    for name, collate in arms.items():
        seconds = time_collator(collate, inputs, collator_calls)
        print(f"collator {name:<20}: {seconds * 1e3:8.3f} ms/batch = {100 * seconds / step:5.2f}% of a step")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="timed training steps")
    parser.add_argument("--collator-calls", type=int, default=100, help="timed batches per collator")
    parser.add_argument("--threads", type=int, default=THREADS, help=f"torch threads [default: {THREADS}]")
    parser.add_argument("--dry-run", action="store_true", help="the same code at toy sizes (for CI)")
    args = parser.parse_args()
    main(args.steps, args.collator_calls, args.threads, DRY if args.dry_run else BENCH)


if __name__ == "__main__":
    cli()
