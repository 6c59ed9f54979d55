"""Fine-tuning step: bvr against transformers' BertForSequenceClassification and BertForTokenClassification.

One training step (forward, loss, backward, AdamW) of sequence classification at SST-2-like lengths and of token
classification at CoNLL-2003-like lengths, batch 32, dynamic padding (each batch padded to its longest row, the
padding masked), dropout 0.1, fp32, on the benchmark config of ``pretrain_throughput.py`` (4 layers, hidden 256, 4
heads, FFN 1024, vocab 30,522). Both sides start from the same weights and get the same batches; the two alternate
step by step, so that background load hits both alike, and the median step time of each is reported. Tokens/s
counts real (unpadded) tokens.

bvr's side is what ``bvr finetune`` trains: :class:`bvr.model.Encoder` with the task head of
:mod:`bvr.tasks.heads`, its loss (:mod:`bvr.tasks.kinds`) and bvr's fused AdamW (``bvr.training.optim.adamw``);
transformers' side gets the fused AdamW its Trainer picks by default for torch >= 2.8 (``adamw_torch_fused``).

Lengths are drawn from fixed log-normal distributions shaped like the two datasets' tokenized lengths (SST-2:
median about 20 tokens, at most 66; CoNLL-2003 sentences: median about 20 sub-tokens, at most 128), so the
benchmark needs no data.

``--dry-run`` runs the same code at ``pretrain_throughput.py``'s toy sizes, so that CI checks that the script runs;
its figures mean nothing.

Target: at least 1.5x transformers' tokens/s on both.

    python benchmarks/finetune_step.py [--steps 20] [--threads N] [--dry-run] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from pretrain_throughput import BENCH, DRY, Shape

from bvr.memory import keep_freed_memory
from bvr.model import IGNORE_INDEX
from bvr.model.encoder import Encoder, init_weights
from bvr.model.hf import to_hf_state_dict
from bvr.tasks.heads import FinetuneModel, SequenceHead, TokenHead, take_pooler
from bvr.tasks.kinds import KINDS
from bvr.training.optim import adamw

SHAPES = {
    # task kind: (median length, log-normal sigma, longest, labels)
    "classification": (20, 0.55, 66, 2),
    "tagging": (20, 0.6, 128, 9),
}


def make_batch(kind: str, seed: int, shape: Shape = BENCH) -> dict[str, torch.Tensor]:
    """A padded batch: [CLS] ids [SEP] rows of drawn lengths, padding 0, labels per row or per token (-100 at pads).
    Its lengths are the task kind's; ``shape`` gives the rows and the vocabulary."""
    median, sigma, longest, labels = SHAPES[kind]
    rng = np.random.default_rng(seed)
    batch = shape.batch
    lengths = np.clip(np.round(rng.lognormal(np.log(median), sigma, batch)), 4, longest).astype(int)
    width = int(lengths.max())
    ids = torch.zeros(batch, width, dtype=torch.long)
    mask = torch.zeros(batch, width, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.from_numpy(rng.integers(1000, shape.vocab, n))
        ids[row, 0], ids[row, n - 1] = 101, 102
        mask[row, :n] = 1
    if kind == "classification":
        target = torch.from_numpy(rng.integers(0, labels, batch))
    else:
        target = torch.from_numpy(rng.integers(0, labels, (batch, width)))
        target[mask == 0] = IGNORE_INDEX
        target[:, 0] = IGNORE_INDEX
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids), "labels": target}


def ours(kind: str, shape: Shape = BENCH) -> tuple[torch.nn.Module, Callable[[dict], float]]:
    cfg = shape.encoder_config()
    encoder = Encoder(cfg, add_pooler=True)
    encoder.apply(lambda m: init_weights(m, cfg.initializer_range))
    labels = SHAPES[kind][3]
    head = SequenceHead(cfg, labels, take_pooler(encoder)) if kind == "classification" else TokenHead(cfg, labels)
    model = FinetuneModel(encoder, head).train()
    task_kind = KINDS[kind]
    optimizer = adamw(model.named_parameters(), learning_rate=1e-5, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-6,
                      warmup_steps=0, max_steps=10**6)["optimizer"]

    def step(batch: dict[str, torch.Tensor]) -> float:
        loss = task_kind.loss(model(batch), batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach().item()

    return model, step


def theirs(kind: str, weights: dict[str, torch.Tensor], shape: Shape = BENCH) -> Callable[[dict], float]:
    from transformers import BertConfig, BertForSequenceClassification, BertForTokenClassification

    hf_config = BertConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                           num_attention_heads=shape.heads, intermediate_size=shape.ffn, num_labels=SHAPES[kind][3])
    cls = BertForSequenceClassification if kind == "classification" else BertForTokenClassification
    model = cls(hf_config).train()
    model.bert.load_state_dict(weights, strict=False)  # the same encoder weights (heads stay freshly drawn)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, eps=1e-6, fused=True)

    def step(batch: dict[str, torch.Tensor]) -> float:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach().item()

    return step


def measure(kind: str, steps: int, warmup: int, shape: Shape = BENCH) -> dict[str, float]:
    model, our_step = ours(kind, shape)
    encoder_state = {k.removeprefix("encoder."): v for k, v in model.state_dict().items() if k.startswith("encoder.")}
    hf_state = {k: v for k, v in to_hf_state_dict(encoder_state, shape.encoder_config()).items()
                if not k.startswith("pooler")}
    runners = {"bvr": our_step, "transformers": theirs(kind, hf_state, shape)}
    batches = [make_batch(kind, seed, shape) for seed in range(8)]
    for step in runners.values():
        for i in range(warmup):
            step(batches[i % len(batches)])
    times: dict[str, list[float]] = {name: [] for name in runners}
    for i in range(steps):
        for name, step in runners.items():  # alternate, so background load hits both alike
            start = time.perf_counter()
            step(batches[i % len(batches)])
            times[name].append(time.perf_counter() - start)
    # Median over the steps of each batch shape's time, then tokens / mean of those: every batch counts once.
    tokens = [int(b["attention_mask"].sum()) for b in batches]
    figures: dict[str, float] = {}
    for name, values in times.items():
        per_batch = [statistics.median(values[j::len(batches)]) for j in range(min(len(batches), steps))]
        figures[f"{name}_tokens_per_s"] = sum(tokens[:len(per_batch)]) / sum(per_batch)
        figures[f"{name}_step_s"] = statistics.mean(per_batch)
    figures["speedup"] = figures["bvr_tokens_per_s"] / figures["transformers_tokens_per_s"]
    figures["padding_fraction"] = 1 - sum(tokens) / sum(b["input_ids"].numel() for b in batches)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=24, help="timed steps per model and task kind")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: all cores]")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    parser.add_argument("--dry-run", action="store_true", help="the same code at toy sizes (for CI)")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="raise glibc's malloc thresholds as bvr's CLI does (bvr.memory), for both sides; off by "
                             "default, as a peer run by itself would have glibc's defaults "
                             "(benchmarks/freed_memory.py measures the setting alone)")
    args = parser.parse_args()
    shape = DRY if args.dry_run else BENCH
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    heap = args.keep_freed_memory and keep_freed_memory()  # process-wide: both sides
    print("heap: freed memory kept between steps (bvr.memory)" if heap else "heap: the C library's defaults")
    torch.manual_seed(0)
    results = {kind: measure(kind, args.steps, args.warmup, shape) for kind in SHAPES}
    print(f"config: {shape.describe()}, batch {shape.batch}, "
          f"dynamic padding, dropout 0.1, fp32, {torch.get_num_threads()} threads, {args.steps} steps each")
    print(f"{'task kind':<16}{'padding':>8}{'bvr tok/s':>12}{'HF tok/s':>12}{'speed-up':>10}")
    for kind, f in results.items():
        print(f"{kind:<16}{f['padding_fraction']:>8.0%}{f['bvr_tokens_per_s']:>12,.0f}"
              f"{f['transformers_tokens_per_s']:>12,.0f}{f['speedup']:>9.2f}x")
    print("target: >= 1.5x transformers on both")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
