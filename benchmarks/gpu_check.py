"""The device check: on one GPU, in one run of a few minutes, what bvr does there and how fast, against transformers.

It prints, section by section (each section's failure is printed and the next one runs):

1. **tests**: ``pytest -m gpu tests/test_gpu.py`` (parity with transformers in fp32 and bf16 autocast, bit-exact
   resume, dropout rates, packing and selection, a short fine-tuning), its summary line.
2. **peak**: the best rate of large bf16 matrix products (8192 x 8192 x 8192), the peak that utilisation is read
   against.
3. **pretraining step** at BERT-base shape (12 layers, hidden 768, 12 heads, FFN 3072, vocab 30,522), sequence 128
   (batch 128) and 512 (batch 32), 15% masked, no padding, dropout 0.1: bvr's step against transformers'
   ``BertForMaskedLM``
   (``attn_implementation="sdpa"``), both under bf16 autocast with torch's fused AdamW, on the same batches:
   tokens/s, the ratio, model FLOPs utilisation and peak memory; bvr with the attention it used on every device
   before (scores materialised, ``F.dropout``: "bvr explicit"); then bvr with ``training.compile=true`` (its
   layers through ``torch.compile``), compile time in the first step's column.
4. **tiny pretraining**: 200 steps of the tiny preset's encoder through bvr's Lightning module and Trainer, on a
   synthetic corpus (a first-order Markov chain over 2,000 token ids, so the loss has structure to fall through), on
   the GPU in bf16-mixed and fp32 and on the CPU in fp32, with the same batches and seed. The curves are compared as
   means over windows of 20 steps: the GPU's must lie within 0.1 nats of the CPU's in every window (dropout draws
   differ between devices, so the curves are not equal step by step). On a GPU a fourth run compiles the layers
   (``training.compile=true``) under the same Trainer.
5. **fine-tuning step** at BERT-base shape: sequence classification on SST-2-like lengths (batch 32, dynamic
   padding), bvr's model and head against ``BertForSequenceClassification``, bf16 autocast, fused AdamW.

Model FLOPs are those of the full dense model (every layer and the MLM head at every position, backward twice the
forward), the same count for both sides, so the ratio of utilisations is the ratio of tokens/s. bvr computes less
than that (its last layer and head run at the masked positions only): its hardware FLOPs are printed beside.

``--dry-run`` runs the same code on the CPU at toy sizes (a 2-layer, hidden-64 encoder, a few steps), so that CI
checks that the script runs; its figures mean nothing.

6. **breakdown**: where bvr's eager step at sequence 512 spends its device time, by kernel kind (matmuls,
   attention, optimiser, LayerNorm, softmax and loss, dropout, other), from torch's profiler, and the model FLOPs
   over the matmul time alone: what utilisation the rest of the step leaves.

    python benchmarks/gpu_check.py [--dry-run] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bvr from this checkout, installed or not

from bvr.model import IGNORE_INDEX, EncoderConfig, PretrainingModel, fast  # noqa: E402
from bvr.model.encoder import Encoder, compile_layers, init_weights  # noqa: E402
from bvr.model.hf import to_hf_state_dict  # noqa: E402
from bvr.training.optim import adamw  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WINDOW, CURVE_TOLERANCE = 20, 0.1


@dataclass(frozen=True)
class Sizes:
    """What a run measures at: BERT-base on a GPU, toy sizes on the CPU for ``--dry-run``."""

    device: str
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    shapes: tuple[tuple[int, int], ...]  # (batch, seq) of the pretraining step
    steps: int
    warmup: int
    tiny_steps: int
    peak_n: int
    peak_dtype: torch.dtype
    compile: bool  # time bvr with training.compile=true too


GPU = Sizes("cuda", 12, 768, 12, 3072, 30_522, ((128, 128), (32, 512)), 10, 3, 200, 8192, torch.bfloat16, True)
# Compiling on the CPU takes half a minute of C++ builds, even at toy sizes: the dry run leaves it out.
DRY = Sizes("cpu", 2, 64, 2, 256, 1000, ((4, 32), (2, 64)), 2, 1, 40, 256, torch.float32, False)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def reset_memory(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gb(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 1e9 if device == "cuda" else None


def autocast(device: str):
    return torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")


# ---------------------------------------------------------------------------------------------------------------
# 1. tests


def run_tests(sizes: Sizes) -> dict:
    """The gpu-marked tests, in a child process (on the CPU they are all skipped, which still checks the call)."""
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_gpu.py", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=-ra"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines()
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    for line in failures:
        print(f"  {line}")
    return {"exit_code": done.returncode, "summary": lines[-1] if lines else "", "failures": failures,
            "seconds": round(time.perf_counter() - started, 1),
            "output": "\n".join(lines)[-6000:] if done.returncode not in (0, 5) else ""}


# ---------------------------------------------------------------------------------------------------------------
# 2. peak


def matmul_peak(sizes: Sizes) -> dict:
    """Best FLOP/s of ten n x n x n products in ``sizes.peak_dtype`` after three warm-ups."""
    n = sizes.peak_n
    a = torch.randn(n, n, device=sizes.device, dtype=sizes.peak_dtype)
    b = torch.randn(n, n, device=sizes.device, dtype=sizes.peak_dtype)
    best = float("inf")
    for i in range(13):
        synchronize(sizes.device)
        started = time.perf_counter()
        a @ b
        synchronize(sizes.device)
        if i >= 3:
            best = min(best, time.perf_counter() - started)
    return {"tflops": 2 * n**3 / best / 1e12, "n": n, "dtype": str(sizes.peak_dtype).removeprefix("torch.")}


# ---------------------------------------------------------------------------------------------------------------
# 3. pretraining step


def encoder_config(sizes: Sizes, dropout: float = 0.1) -> EncoderConfig:
    return EncoderConfig(family="bert", vocab_size=sizes.vocab, hidden_size=sizes.hidden, num_layers=sizes.layers,
                         num_heads=sizes.heads, intermediate_size=sizes.ffn, max_position_embeddings=512,
                         pad_token_id=0, dropout=dropout, attention_dropout=dropout)


def mlm_batch(sizes: Sizes, batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    """Random ids with 15% of each row masked ([MASK] = 4), labels -100 elsewhere, no padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, sizes.vocab, (batch, seq), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    chosen = torch.zeros(batch, seq, dtype=torch.bool)
    chosen[:, 1:-1] = torch.rand(batch, seq - 2, generator=g).argsort(dim=1).argsort(dim=1) < round(0.15 * (seq - 2))
    labels = torch.where(chosen, ids, IGNORE_INDEX)
    out = {"input_ids": torch.where(chosen, 4, ids), "attention_mask": torch.ones_like(ids), "labels": labels}
    return {k: v.to(sizes.device) for k, v in out.items()}


def model_flops_per_token(sizes: Sizes, seq: int) -> float:
    """Training FLOPs per token of the dense model (matmuls only: every layer and the MLM head at every position)."""
    h, f = sizes.hidden, sizes.ffn
    layer = 2 * (4 * h * h + 2 * h * f) + 2 * 2 * seq * h  # projections + feed-forward, then QK^T and PV
    head = 2 * (h * h + h * sizes.vocab)
    return 3.0 * (sizes.layers * layer + head)


def bvr_flops_per_token(sizes: Sizes, seq: int, masked_share: float) -> float:
    """What bvr's step computes: the last layer's queries, attention and feed-forward and the head at masked tokens."""
    h, f = sizes.hidden, sizes.ffn
    full = 2 * (4 * h * h + 2 * h * f) + 4 * seq * h
    last = 2 * 2 * h * h + masked_share * (2 * 2 * h * h + 4 * seq * h + 4 * h * f)
    head = masked_share * 2 * (h * h + h * sizes.vocab)
    return 3.0 * ((sizes.layers - 1) * full + last + head)


def explicit_attend(q, k, v, mask, dropout_p, values_scaled=False):
    """Attention with dropout as bvr computed it on every device before SDPA took it off the CPU: the scores
    materialised, softmax, ``F.dropout``, then the values (for the comparison row only)."""
    scores = q @ k.transpose(-1, -2)  # (batch, heads, q_len, k_len)
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)
    return F.dropout(scores.softmax(dim=-1), dropout_p, training=dropout_p > 0) @ v


def bvr_step(sizes: Sizes, compiled: bool, explicit: bool = False) -> Callable[[dict], float]:
    model = PretrainingModel(encoder_config(sizes), sentence_head=False).to(sizes.device).train()
    if compiled:
        compile_layers(model.encoder)
    optimizer = adamw(model.named_parameters(), learning_rate=1e-4, weight_decay=0.01, betas=(0.9, 0.98), eps=1e-6,
                      warmup_steps=0, max_steps=10**6)["optimizer"]

    def step(batch: dict[str, torch.Tensor]) -> float:
        fused = fast.attend
        fast.attend = explicit_attend if explicit else fused
        try:
            with autocast(sizes.device):
                loss = model.pretraining_loss(batch["input_ids"], batch["labels"], batch["attention_mask"]).loss
            loss.backward()
        finally:
            fast.attend = fused
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def hf_config(sizes: Sizes, **extra):
    from transformers import BertConfig

    return BertConfig(vocab_size=sizes.vocab, hidden_size=sizes.hidden, num_hidden_layers=sizes.layers,
                      num_attention_heads=sizes.heads, intermediate_size=sizes.ffn, max_position_embeddings=512,
                      **extra)


def hf_model(cls, config):
    """``cls`` with SDPA attention, whichever way this transformers version takes it."""
    try:
        return cls._from_config(config, attn_implementation="sdpa")
    except (TypeError, ValueError):
        config._attn_implementation = "sdpa"
        return cls(config)


def hf_step(sizes: Sizes) -> tuple[Callable[[dict], float], str]:
    from transformers import BertForMaskedLM

    model = hf_model(BertForMaskedLM, hf_config(sizes)).to(sizes.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6,
                                  fused=sizes.device == "cuda")

    def step(batch: dict[str, torch.Tensor]) -> float:
        with autocast(sizes.device):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step, str(getattr(model.config, "_attn_implementation", "?"))


def time_steps(sizes: Sizes, step: Callable[[dict], float], batches: list[dict]) -> dict:
    """Median step time over ``sizes.steps`` steps after ``sizes.warmup`` (the first warm-up timed apart: compiling)."""
    reset_memory(sizes.device)
    synchronize(sizes.device)
    started = time.perf_counter()
    step(batches[0])
    synchronize(sizes.device)
    first = time.perf_counter() - started
    for i in range(1, sizes.warmup):
        step(batches[i % len(batches)])
    times = []
    for i in range(sizes.steps):
        synchronize(sizes.device)
        started = time.perf_counter()
        step(batches[i % len(batches)])
        synchronize(sizes.device)
        times.append(time.perf_counter() - started)
    return {"step_s": statistics.median(times), "first_step_s": first, "peak_memory_gb": peak_memory_gb(sizes.device)}


def pretraining_step(sizes: Sizes, peak_tflops: float) -> list[dict]:
    rows = []
    for batch, seq in sizes.shapes:
        batches = [mlm_batch(sizes, batch, seq, seed) for seed in range(4)]
        tokens = batch * seq
        masked = float((batches[0]["labels"] != IGNORE_INDEX).float().mean())
        sides: dict[str, dict] = {}
        makers = {"transformers": lambda: hf_step(sizes), "bvr": lambda: (bvr_step(sizes, False), ""),
                  "bvr explicit": lambda: (bvr_step(sizes, False, explicit=True), "")}
        if sizes.compile:
            makers["bvr compiled"] = lambda: (bvr_step(sizes, True), "")
        for name, make in makers.items():
            torch.manual_seed(0)
            step, attention = make()
            sides[name] = time_steps(sizes, step, batches) | ({"attention": attention} if attention else {})
            del step
        dense = model_flops_per_token(sizes, seq)
        for side in sides.values():
            side["tokens_per_s"] = tokens / side["step_s"]
            side["mfu"] = side["tokens_per_s"] * dense / (peak_tflops * 1e12)
            side["ratio"] = side["tokens_per_s"] / sides["transformers"]["tokens_per_s"]
        sides["bvr"]["hardware_flops_utilisation"] = (
            sides["bvr"]["tokens_per_s"] * bvr_flops_per_token(sizes, seq, masked) / (peak_tflops * 1e12))
        rows.append({"batch": batch, "seq": seq, "sides": sides})
        print(f"  batch {batch} x seq {seq}:")
        for name, side in sides.items():
            memory = f"{side['peak_memory_gb']:6.1f} GB" if side["peak_memory_gb"] is not None else "     -"
            print(f"    {name:<14}{side['tokens_per_s']:>12,.0f} tok/s {side['ratio']:>6.2f}x  MFU "
                  f"{side['mfu']:6.1%}  peak memory {memory}  first step {side['first_step_s']:6.1f} s"
                  + (f"  attention {side['attention']}" if "attention" in side else ""))
        print(f"    bvr hardware FLOPs utilisation {sides['bvr']['hardware_flops_utilisation']:.1%}")
    return rows


KERNEL_KINDS = (  # (kind, substrings of a kernel's lower-cased name), first match wins
    ("attention", ("flash", "fmha", "attention", "efficient")),
    ("matmul", ("gemm", "xmma", "cutlass", "nvjet", "cublas", "matmul", "addmm", "mm_", "::mm", "bmm")),
    ("optimizer", ("adam", "multi_tensor")),
    ("layer norm", ("layer_norm", "layernorm")),
    ("softmax and loss", ("softmax", "cross_entropy", "nll")),
    ("dropout", ("dropout", "philox", "bernoulli")),
)


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, keys in KERNEL_KINDS if any(key in lowered for key in keys)), "other")


def step_breakdown(sizes: Sizes, peak_tflops: float) -> dict:
    """Where bvr's eager step at the longest shape spends its device time, by kernel kind (torch's profiler over 3
    steps): the measured reason utilisation is what it is."""
    from torch.profiler import ProfilerActivity, profile

    batch, seq = sizes.shapes[-1]
    batches = [mlm_batch(sizes, batch, seq, seed) for seed in range(3)]
    torch.manual_seed(0)
    step = bvr_step(sizes, False)
    for b in batches:
        step(b)
    activity = ProfilerActivity.CUDA if sizes.device == "cuda" else ProfilerActivity.CPU
    synchronize(sizes.device)
    started = time.perf_counter()
    with profile(activities=[activity]) as prof:
        for b in batches:
            step(b)
        synchronize(sizes.device)
    wall = (time.perf_counter() - started) / len(batches)
    totals: dict[str, float] = {}
    others: dict[str, float] = {}
    for event in prof.key_averages():
        if sizes.device == "cuda":  # kernels only: the ops that launch them carry the same time again
            own = event.self_device_time_total if str(event.device_type).endswith("CUDA") else 0
        else:  # self times exclude the children's, so the ops add up
            own = event.self_cpu_time_total
        if own > 0:
            totals[kernel_kind(event.key)] = totals.get(kernel_kind(event.key), 0.0) + own / 1e6 / len(batches)
            if kernel_kind(event.key) == "other":
                others[event.key[:90]] = own / 1e6 / len(batches)
    busy = sum(totals.values())
    dense = model_flops_per_token(sizes, seq) * batch * seq
    result = {"batch": batch, "seq": seq, "step_s_profiled": wall, "busy_s": busy,
              "seconds_by_kind": {k: round(v, 5) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}}
    result["largest_other"] = {k: round(v, 5) for k, v in sorted(others.items(), key=lambda kv: -kv[1])[:12]}
    if "matmul" in totals:
        result["matmul_only_mfu"] = dense / totals["matmul"] / (peak_tflops * 1e12)
    print(f"  bvr eager, batch {batch} x seq {seq}: {wall * 1e3:.1f} ms a step under the profiler, device busy "
          f"{busy * 1e3:.1f} ms")
    for kind, seconds in result["seconds_by_kind"].items():
        print(f"    {kind:<18}{seconds * 1e3:8.2f} ms {seconds / busy:6.1%}")
    for name, seconds in result["largest_other"].items():
        print(f"      other: {seconds * 1e3:6.2f} ms  {name}")
    if "matmul_only_mfu" in result:
        print(f"    model FLOPs over the matmul time alone: {result['matmul_only_mfu']:.1%} of the peak")
    return result


# ---------------------------------------------------------------------------------------------------------------
# 4. tiny pretraining, GPU against CPU


def markov_examples(count: int, length: int, vocab: int, seed: int = 0) -> list[dict]:
    """``count`` sequences of a first-order Markov chain over ids 5..vocab-1, each next id drawn from 8 successors of
    the current one (so a model that learns the chain predicts a masked id from its left neighbour)."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(5, vocab, (vocab, 8))
    examples = []
    for index in range(count):
        ids = [int(rng.integers(5, vocab))]
        for choice in rng.integers(0, 8, length - 3):
            ids.append(int(successors[ids[-1], choice]))
        examples.append({"input_ids": [2, *ids, 3], "token_type_ids": [0] * length, "sentence_label": 0, "index": index,
                         "epoch": 0})
    return examples


def tiny_curve(sizes: Sizes, accelerator: str, precision: str, root: Path, compiled: bool = False) -> list[float]:
    """The training loss at each of ``sizes.tiny_steps`` steps of the tiny preset's encoder through bvr's Lightning
    module and Trainer."""
    import lightning as L

    from bvr.config import TrainingConfig
    from bvr.pretraining.collator import PretrainingCollator
    from bvr.pretraining.run import PretrainingModule
    from bvr.tokenization import VocabInfo
    from bvr.training import TrainerSettings, build_trainer

    vocab_size = 2000
    vocab = VocabInfo(family="bert", vocab_size=vocab_size, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4,
                      special_ids=(0, 1, 2, 3, 4), word_start=np.ones(vocab_size, dtype=bool))
    examples = markov_examples(32 * sizes.tiny_steps, 128, vocab_size)
    loader = torch.utils.data.DataLoader(examples, batch_size=32, shuffle=False,
                                         collate_fn=PretrainingCollator(vocab, mode="dynamic", seed=0))
    L.seed_everything(0, verbose=False)
    config = EncoderConfig(family="bert", vocab_size=vocab_size, hidden_size=128, num_layers=2, num_heads=2,
                           intermediate_size=512, pad_token_id=0)
    training = TrainingConfig(learning_rate=1e-3, warmup_steps=20, max_steps=sizes.tiny_steps)
    model = PretrainingModel(config, sentence_head=False)
    if compiled:  # as bvr pretrain does with training.compile=true
        compile_layers(model.encoder)
    module = PretrainingModule(model, training)
    losses: list[float] = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    settings = TrainerSettings(precision=precision, accelerator=accelerator, grad_clip=1.0, log_every_steps=10,
                               max_steps=sizes.tiny_steps)
    trainer = build_trainer(root, settings, False, progress=False, callbacks=[Record()])
    trainer.fit(module, train_dataloaders=loader)
    return losses


def windows(curve: list[float]) -> list[float]:
    return [statistics.mean(curve[i:i + WINDOW]) for i in range(0, len(curve) - WINDOW + 1, WINDOW)]


def tiny_pretraining(sizes: Sizes, scratch: Path) -> dict:
    runs = {"cpu 32-true": ("cpu", "32-true", False)}
    if sizes.device == "cuda":
        runs |= {"gpu bf16-mixed": ("gpu", "bf16-mixed", False), "gpu 32-true": ("gpu", "32-true", False),
                 "gpu bf16-mixed compiled": ("gpu", "bf16-mixed", True)}
    curves, seconds = {}, {}
    for name, (accelerator, precision, compiled) in runs.items():
        started = time.perf_counter()
        curves[name] = tiny_curve(sizes, accelerator, precision, scratch / name.replace(" ", "-"), compiled)
        seconds[name] = round(time.perf_counter() - started, 1)
    reference = windows(curves["cpu 32-true"])
    result = {"windows": {name: [round(x, 4) for x in windows(c)] for name, c in curves.items()}, "seconds": seconds,
              "tolerance": CURVE_TOLERANCE}
    print(f"  loss means over windows of {WINDOW} steps (first, last): "
          + ", ".join(f"{name} {w[0]:.3f} -> {w[-1]:.3f}" for name, w in result["windows"].items()))
    for name in curves:
        if name == "cpu 32-true":
            continue
        gap = max(abs(a - b) for a, b in zip(windows(curves[name]), reference, strict=True))
        result[f"max_gap {name}"] = round(gap, 4)
        print(f"  {name} against cpu 32-true: largest window gap {gap:.3f} nats "
              f"({'within' if gap <= CURVE_TOLERANCE else 'OUTSIDE'} {CURVE_TOLERANCE})")
    print(f"  wall: {seconds}")
    return result


# ---------------------------------------------------------------------------------------------------------------
# 5. fine-tuning step


def classification_batch(sizes: Sizes, seed: int, batch: int = 32) -> dict[str, torch.Tensor]:
    """SST-2-like lengths (log-normal, median 20, at most 66), padded to the longest row, two labels."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.round(rng.lognormal(np.log(20), 0.55, batch)), 4, 66).astype(int)
    ids = torch.zeros(batch, int(lengths.max()), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.from_numpy(rng.integers(5, sizes.vocab, n))
        ids[row, 0], ids[row, n - 1] = 2, 3
        mask[row, :n] = 1
    out = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
           "labels": torch.from_numpy(rng.integers(0, 2, batch))}
    return {k: v.to(sizes.device) for k, v in out.items()}


def finetuning_step(sizes: Sizes) -> dict:
    from transformers import BertForSequenceClassification

    from bvr.tasks.heads import FinetuneModel, SequenceHead, take_pooler
    from bvr.tasks.kinds import KINDS

    torch.manual_seed(0)
    config = encoder_config(sizes)
    encoder = Encoder(config, add_pooler=True)
    encoder.apply(lambda m: init_weights(m, config.initializer_range))
    state = to_hf_state_dict(encoder.state_dict(), config)
    ours = FinetuneModel(encoder, SequenceHead(config, 2, take_pooler(encoder))).to(sizes.device).train()
    theirs = hf_model(BertForSequenceClassification, hf_config(sizes, num_labels=2))
    theirs.bert.load_state_dict(state, strict=False)
    theirs = theirs.to(sizes.device).train()
    kind = KINDS["classification"]

    def stepper(model, loss_of) -> Callable[[dict], float]:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=sizes.device == "cuda")

        def step(batch):
            with autocast(sizes.device):
                loss = loss_of(model, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.detach()

        return step

    batches = [classification_batch(sizes, seed) for seed in range(8)]
    tokens = sum(int(b["attention_mask"].sum()) for b in batches) / len(batches)
    sides = {"transformers": time_steps(sizes, stepper(theirs, lambda m, b: m(**b).loss), batches),
             "bvr": time_steps(sizes, stepper(ours, lambda m, b: kind.loss(m(b), b)), batches)}
    for side in sides.values():
        side["tokens_per_s"] = tokens / side["step_s"]
    ratio = sides["bvr"]["tokens_per_s"] / sides["transformers"]["tokens_per_s"]
    print(f"  SST-2-like batches of 32 (real tokens/s): bvr {sides['bvr']['tokens_per_s']:,.0f}, transformers "
          f"{sides['transformers']['tokens_per_s']:,.0f}, ratio {ratio:.2f}x")
    return {"sides": sides, "ratio": ratio}


# ---------------------------------------------------------------------------------------------------------------


def device_line(sizes: Sizes) -> dict:
    import lightning

    info = {"torch": torch.__version__, "lightning": lightning.__version__, "device": sizes.device}
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    if sizes.device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 1e9, 1)
    print("  " + ", ".join(f"{k} {v}" for k, v in info.items()))
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="the same code on the CPU at toy sizes (for CI)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    parser.add_argument("--scratch", type=Path, default=Path("gpu-check-runs"),
                        help="folder for the tiny pretraining's Trainer files [default: ./gpu-check-runs]")
    parser.add_argument("--skip", action="append", default=[], metavar="SECTION",
                        help="leave out a section (tests, peak, pretraining, tiny, finetuning); may repeat")
    parser.add_argument("--model", default=None, metavar="LAYERSxHIDDEN",
                        help="the pretraining step's encoder, heads of 64 and FFN 4x hidden [default: 12x768 on a GPU]")
    parser.add_argument("--shapes", default=None, metavar="BxS,...",
                        help="the pretraining step's batch x sequence shapes [default: 128x128,32x512 on a GPU]")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run to check the script on the CPU", file=sys.stderr)
        return 2
    sizes = DRY if args.dry_run else GPU
    if args.shapes:
        shapes = tuple(tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(","))
        sizes = dataclasses.replace(sizes, shapes=shapes)
    if args.model:
        layers_, hidden = (int(n) for n in args.model.split("x"))
        sizes = dataclasses.replace(sizes, layers=layers_, hidden=hidden, heads=hidden // 64, ffn=4 * hidden)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    results: dict = {}
    failed: list[str] = []

    def section(name: str, title: str, work: Callable[[], object]) -> None:
        if name in args.skip:
            return
        print(f"== {title}", flush=True)
        started = time.perf_counter()
        try:
            results[name] = work()
        except Exception:  # a failing section is reported and the next one runs
            traceback.print_exc()
            failed.append(name)
        print(f"   ({time.perf_counter() - started:.0f} s)", flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")

    section("device", "device", lambda: device_line(sizes))
    section("peak", "matmul peak", lambda: matmul_peak(sizes))
    if "peak" in results:
        print(f"  {results['peak']['tflops']:.0f} TFLOP/s ({results['peak']['dtype']}, n = {results['peak']['n']})")
    peak = results.get("peak", {}).get("tflops", float("nan"))
    section("pretraining", "pretraining step", lambda: pretraining_step(sizes, peak))
    section("breakdown", "where the step's time goes", lambda: step_breakdown(sizes, peak))
    section("tests", "gpu-marked tests", lambda: run_tests(sizes))
    if "tests" in results:
        print(f"  {results['tests']['summary']} (exit {results['tests']['exit_code']})")
    section("tiny", "tiny pretraining, GPU against CPU", lambda: tiny_pretraining(sizes, args.scratch))
    section("finetuning", "fine-tuning step", lambda: finetuning_step(sizes))
    tests_failed = results.get("tests", {}).get("exit_code", 0) not in (0, 5)  # 5: nothing collected or all skipped
    print("failed sections: " + (", ".join(failed) or "none") + ("; gpu tests failed" if tests_failed else ""))
    return 1 if failed or tests_failed else 0


if __name__ == "__main__":
    sys.exit(main())
