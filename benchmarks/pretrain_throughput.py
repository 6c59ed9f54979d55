"""Pretraining throughput: bvr's encoder against transformers' BertForMaskedLM, in one run, on one machine.

Both models get the same configuration (4 layers, hidden 256, 4 heads, FFN 1024, vocab 30,522, dropout 0.1),
the same batches (32 x 128 tokens, 15% of them masked, MLM only, fp32) and the same optimiser: torch's fused
AdamW, which bvr uses (``bvr.training.optim.adamw``) and which transformers' Trainer picks by default for
torch >= 2.8 (``adamw_torch_fused``). A training step is forward + backward + optimiser step. The two models
alternate step by step so that noise from other work on the machine hits both alike; the median step time of each
is reported.

It also measures an fp32 matrix-multiply peak on the same machine (the best rate of large square matmuls) and
reports our achieved FLOP/s as a fraction of it. The FLOPs counted are the ones our step really performs
(the last layer and the MLM head run only at the masked positions), with the backward pass taken as twice the
forward; the embedding lookups, softmax and LayerNorm are not counted.

It then replays the matrix multiplies of one of our steps alone (recorded with their shapes and layouts, run on
random tensors with nothing between them) and prints their time, their own fraction of the peak and their share of
the step: the fraction a step could reach if every other op (GELU, dropout, LayerNorm, softmax, copies, the
optimiser) were free. Their FLOPs are those counted above, measured instead of derived.

glibc's malloc keeps its default thresholds for both sides unless ``--keep-freed-memory`` (what bvr's CLI sets:
``bvr.memory``; ``benchmarks/freed_memory.py`` measures that setting alone).

With ``--fusion-bounds`` it also times our step with dropout removed, and with dropout and GELU removed: no fused
kernel for them can be faster than leaving them out, so these fractions of the peak bound what fusing bias + GELU +
dropout could give.

``--dry-run`` runs the same code at toy sizes (:data:`DRY`: a 2-layer, hidden-64 encoder, batch 4 x 48), so that CI
checks that the script runs; its figures mean nothing.

Targets: at least 5x transformers' tokens/s and at least 75% of the measured matmul peak.

    python benchmarks/pretrain_throughput.py [--steps 10] [--threads N] [--compile] [--keep-freed-memory]
                                             [--fusion-bounds] [--dry-run] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map, tree_map_only

from bvr.memory import keep_freed_memory
from bvr.model import IGNORE_INDEX, EncoderConfig, PretrainingModel
from bvr.model.encoder import compile_layers
from bvr.model.layers import Intermediate
from bvr.training.optim import adamw

MASK_PROB = 0.15


@dataclass(frozen=True)
class Shape:
    """The benchmark encoder and its batch (the other CPU benchmarks use it too)."""

    layers: int = 4
    hidden: int = 256
    heads: int = 4
    ffn: int = 1024
    vocab: int = 30_522
    batch: int = 32
    """Sequences a batch."""
    seq: int = 128
    """Tokens a sequence."""
    peak_n: int = 2048
    """The side of the square matmuls the fp32 peak is measured on."""

    def encoder_config(self, **extra) -> EncoderConfig:
        """bvr's configuration of this encoder (BERT family); ``extra``: other EncoderConfig fields."""
        return EncoderConfig(family="bert", vocab_size=self.vocab, hidden_size=self.hidden, num_layers=self.layers,
                             num_heads=self.heads, intermediate_size=self.ffn, **extra)

    def describe(self) -> str:
        return f"{self.layers} layers, hidden {self.hidden}, {self.heads} heads, FFN {self.ffn}, vocab {self.vocab:,}"


BENCH = Shape()
DRY = Shape(layers=2, hidden=64, heads=2, ffn=128, vocab=2000, batch=4, seq=48, peak_n=128)
"""``--dry-run``: toy sizes for CI (ids start at 1000 in some benchmarks, and the collator's split needs seq > 32)."""


def make_batch(seed: int = 0, shape: Shape = BENCH) -> dict[str, torch.Tensor]:
    """Random ids (specials excluded) with exactly 15% of each row masked, labels -100 elsewhere."""
    g = torch.Generator().manual_seed(seed)
    batch, seq = shape.batch, shape.seq
    ids = torch.randint(5, shape.vocab, (batch, seq), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
    k = round((seq - 2) * MASK_PROB)
    keys = torch.rand(batch, seq - 2, generator=g)
    chosen = torch.zeros(batch, seq, dtype=torch.bool)
    chosen[:, 1:-1] = keys.argsort(dim=1).argsort(dim=1) < k
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    inputs = torch.where(chosen, torch.full_like(ids, 4), ids)  # [MASK]
    return {"input_ids": inputs, "attention_mask": torch.ones_like(ids), "labels": labels}


def ours(compiled: bool = False, dropout: float = 0.1, gelu: bool = True,
         shape: Shape = BENCH) -> tuple[torch.nn.Module, callable]:
    """Our model and its training step; ``dropout=0`` and ``gelu=False`` remove those ops (for the fusion bounds)."""
    config = shape.encoder_config(pad_token_id=0, dropout=dropout, attention_dropout=dropout)
    model = PretrainingModel(config, sentence_head=False).train()
    if not gelu:
        for module in model.modules():
            if isinstance(module, Intermediate):
                module.forward = module.dense.forward  # the feed-forward's first projection, without its GELU
    if compiled:
        compile_layers(model.encoder)
    optimizer = adamw(model.named_parameters(), learning_rate=1e-4, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-6,
                      warmup_steps=0, max_steps=10**6)["optimizer"]

    def step(batch: dict[str, torch.Tensor]) -> float:
        loss = model.pretraining_loss(batch["input_ids"], batch["labels"], batch["attention_mask"]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach().item()

    return model, step


def theirs(shape: Shape = BENCH) -> tuple[torch.nn.Module, callable]:
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                        num_attention_heads=shape.heads, intermediate_size=shape.ffn, max_position_embeddings=512)
    model = BertForMaskedLM(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6, fused=True)

    def step(batch: dict[str, torch.Tensor]) -> float:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach().item()

    return model, step


def step_flops(masked: int, shape: Shape = BENCH) -> float:
    """FLOPs of one of our training steps (forward x 3), counting matmuls only."""
    n, seq, hidden, ffn = shape.batch * shape.seq, shape.seq, shape.hidden, shape.ffn
    full_layer = 2 * n * hidden * 3 * hidden + 4 * n * seq * hidden + 2 * n * hidden * hidden + 4 * n * hidden * ffn
    # The last layer computes keys and values everywhere, everything else at the masked positions only.
    last_layer = 2 * n * hidden * 2 * hidden + 2 * masked * hidden * hidden + 4 * masked * seq * hidden \
        + 2 * masked * hidden * hidden + 4 * masked * hidden * ffn
    head = 2 * masked * hidden * hidden + 2 * masked * hidden * shape.vocab
    return 3.0 * ((shape.layers - 1) * full_layer + last_layer + head)


BOUNDS = {"bvr, no dropout": ("no_dropout", {"dropout": 0.0}),
          "bvr, no dropout/GELU": ("no_dropout_no_gelu", {"dropout": 0.0, "gelu": False})}
"""``--fusion-bounds``: runner name -> (figures key, the ops :func:`ours` leaves out)."""

MATMULS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm")


class _MatmulRecorder(TorchDispatchMode):
    """Records every matrix multiply of what runs under it: the op, and its tensors' shapes, strides and dtypes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket._qualified_op_name in MATMULS:
            spec = lambda t: ("tensor", tuple(t.shape), t.stride(), t.dtype)  # noqa: E731
            self.calls.append((func, tree_map_only(torch.Tensor, spec, (args, kwargs))))
        return func(*args, **kwargs)


def matmul_floor(step, batch: dict[str, torch.Tensor], repeats: int = 5) -> tuple[float, float]:
    """The time and FLOPs of one step's matrix multiplies alone: recorded in a step, then replayed on random
    tensors of the same shapes and layouts with nothing between them (the step with every other op free)."""
    recorder = _MatmulRecorder()
    with recorder:
        step(batch)

    def is_spec(x) -> bool:
        return isinstance(x, tuple) and len(x) == 4 and x[0] == "tensor"

    def make(x):
        return torch.empty_strided(x[1], x[2], dtype=x[3]).normal_() if is_spec(x) else x

    calls = [(func, *tree_map(make, spec, is_leaf=is_spec)) for func, spec in recorder.calls]
    flops = 0.0
    for _func, args, _ in calls:
        a, b = [x for x in args if isinstance(x, torch.Tensor)][-2:]
        flops += 2 * a.shape[:-1].numel() * a.shape[-1] * b.shape[-1]
    times = []
    for _ in range(repeats + 1):  # the first one warms up
        start = time.perf_counter()
        for func, args, kwargs in calls:
            func(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]), flops


def matmul_peak(size: int = 2048, repeats: int = 8) -> float:
    """Best fp32 FLOP/s of ``size`` x ``size`` matmuls on this machine."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model first")
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: all cores]")
    parser.add_argument("--compile", action="store_true",
                        help="also time bvr with its layers compiled (torch.compile, inductor), and the compile time")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="raise glibc's malloc thresholds as bvr's CLI does (bvr.memory), for both sides; off by "
                             "default, as a peer run by itself would have glibc's defaults "
                             "(benchmarks/freed_memory.py measures the setting alone)")
    parser.add_argument("--fusion-bounds", action="store_true",
                        help="also time bvr's step without dropout, and without dropout and GELU: the most that fusing "
                             "them (bias + GELU + dropout) could give, as a fraction of the peak")
    parser.add_argument("--dry-run", action="store_true", help="the same code at toy sizes (for CI)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    shape = DRY if args.dry_run else BENCH
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    heap = args.keep_freed_memory and keep_freed_memory()  # process-wide: both sides
    print("heap: freed memory kept between steps (bvr.memory)" if heap else "heap: the C library's defaults")
    torch.manual_seed(0)

    batches = [make_batch(seed, shape) for seed in range(4)]
    runners = {"bvr": ours(shape=shape)[1], "transformers": theirs(shape)[1]}
    if args.compile:
        runners["bvr+compile"] = ours(compiled=True, shape=shape)[1]
    if args.fusion_bounds:
        runners.update({name: ours(**removed, shape=shape)[1] for name, (_, removed) in BOUNDS.items()})
    first_step: dict[str, float] = {}
    for name, step in runners.items():
        for i in range(args.warmup):
            start = time.perf_counter()
            step(batches[i % len(batches)])
            first_step.setdefault(name, time.perf_counter() - start)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for i in range(args.steps):
        for name, step in runners.items():  # alternate, so background load hits both alike
            start = time.perf_counter()
            step(batches[i % len(batches)])
            times[name].append(time.perf_counter() - start)

    tokens = shape.batch * shape.seq
    median = {name: statistics.median(t) for name, t in times.items()}
    rate = {name: tokens / median[name] for name in runners}
    flops = step_flops(int((batches[0]["labels"] != IGNORE_INDEX).sum()), shape)
    achieved = flops / median["bvr"]
    peak = matmul_peak(shape.peak_n)
    floor_s, floor_flops = matmul_floor(runners["bvr"], batches[0])
    figures = {
        "threads": torch.get_num_threads(),
        "freed_memory_kept": heap,
        "bvr_tokens_per_s": rate["bvr"],
        "transformers_tokens_per_s": rate["transformers"],
        "speedup": rate["bvr"] / rate["transformers"],
        "bvr_step_s": median["bvr"],
        "transformers_step_s": median["transformers"],
        "bvr_gflops": achieved / 1e9,
        "matmul_peak_gflops": peak / 1e9,
        "peak_fraction": achieved / peak,
        "matmul_only_s": floor_s,
        "matmul_only_fraction_of_peak": floor_flops / floor_s / peak,
        "matmul_share_of_step": floor_s / median["bvr"],
    }
    print(f"config: {shape.describe()}, batch {shape.batch}x{shape.seq}, "
          f"fp32, MLM only, {figures['threads']} threads, median of {args.steps} steps")
    print(f"{'model':<22}{'step (s)':>10}{'tokens/s':>12}")
    for name in runners:
        print(f"{name:<22}{median[name]:>10.3f}{rate[name]:>12,.0f}")
    if "bvr+compile" in runners:
        figures["compiled_tokens_per_s"] = rate["bvr+compile"]
        figures["compile_gain"] = rate["bvr+compile"] / rate["bvr"]
        figures["compile_seconds"] = first_step["bvr+compile"] - median["bvr+compile"]
        print(f"torch.compile of the layers: {figures['compile_gain']:.2f}x bvr uncompiled, "
              f"{rate['bvr+compile'] / rate['transformers']:.2f}x transformers; compile took "
              f"{figures['compile_seconds']:.0f} s (first step less a compiled step)")
    print(f"speed-up: {figures['speedup']:.2f}x transformers (target >= 5x)")
    print(f"achieved: {figures['bvr_gflops']:.1f} GFLOP/s of a measured fp32 matmul peak of "
          f"{figures['matmul_peak_gflops']:.1f} GFLOP/s = {figures['peak_fraction']:.0%} (target >= 75%)")
    print(f"its matrix multiplies alone ({floor_flops / 1e9:.1f} GFLOP, replayed with nothing between them): "
          f"{floor_s:.3f} s, {figures['matmul_only_fraction_of_peak']:.0%} of the peak and "
          f"{figures['matmul_share_of_step']:.0%} of the step; everything else takes {median['bvr'] - floor_s:.3f} s")
    if args.fusion_bounds:
        for name, (key, _) in BOUNDS.items():
            figures[f"peak_fraction_{key}"] = flops / median[name] / peak
            print(f"{name}: {figures[f'peak_fraction_{key}']:.0%} of the peak: the most a fused dropout"
                  + (" and bias + GELU" if "GELU" in name else "") + " could give")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
