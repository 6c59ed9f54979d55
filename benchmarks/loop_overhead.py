"""The real loop against the bare step: how much of the model's speed ``bvr pretrain`` keeps.

The bare step is forward + backward + gradient clipping + AdamW of :class:`bvr.model.PretrainingModel` on batches
collated in advance, in a plain Python loop. The real loop is :func:`bvr.pretraining.run.pretrain`, as ``bvr
pretrain`` runs it: the Lightning Trainer, the DataLoader reading memory-mapped Arrow, the masking collator, the
learning-rate schedule, logging to a real MLflow store every 10 steps, a checkpoint every 100 steps and the
progress bar off. Both train the same model (4 layers, hidden 256, 4 heads, FFN 1024, batch 32 x 128, fp32,
FULL-SENTENCES without NSP) on the same prepared data: the first documents of the corpus in ``--data-dir``, with a
WordPiece tokenizer trained on them. Validation is off in both (it is not training throughput).

Tokens/s of the real loop are measured between the end of its first ``--skip`` steps and the end of training
(a callback reads the clock), so start-up (data loading, MLflow run creation) is not counted; the final export is
not either. The two are run in turn, bare, loop, bare, loop, and the median of each is reported.

``--dry-run`` runs the same code with a toy encoder (2 layers, hidden 32, batch 8 x 64), so that CI checks that
the script runs; its figures mean nothing.

Target: the real loop at least 90% of the bare step's tokens/s.

    python benchmarks/loop_overhead.py --data-dir DATA [--steps 60] [--dry-run] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import lightning as L
import torch

from bvr.config import load_config
from bvr.memory import keep_freed_memory
from bvr.pretraining.data import PretrainingDataModule
from bvr.pretraining.export import build_model
from bvr.pretraining.prepare import load_instances, prepare
from bvr.pretraining.run import pretrain
from bvr.tokenization import load_tokenizer, vocab_info
from bvr.tracking import RunContext
from bvr.training import adamw

DRY = ["model.num_layers=2", "model.hidden_size=32", "model.num_heads=2", "model.intermediate_size=64",
       "training.batch_size=8", "data.max_length=64"]
"""``--dry-run``: overrides set after the benchmark's own."""


class Clock(L.Callback):
    """Reads the clock and the tokens seen after step ``skip`` and at the end of training."""

    def __init__(self, skip: int) -> None:
        self.skip = skip
        self.marks: list[tuple[float, int]] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.skip:
            self.marks.append((time.perf_counter(), module.tokens_seen))

    def on_train_end(self, trainer, module) -> None:
        self.marks.append((time.perf_counter(), module.tokens_seen))

    def rate(self) -> float:
        (start, first), (end, last) = self.marks[0], self.marks[-1]
        return (last - first) / (end - start)


def config(data_dir: Path, output: Path, steps: int, seed: int, documents: int, dry_run: bool = False):
    sets = [f"corpus.max_documents={documents}", "data.input_format=full-sentences", "data.sentence_objective=none",
            "model.num_layers=4", "model.hidden_size=256", "model.num_heads=4", "model.intermediate_size=1024",
            "training.batch_size=32", f"training.max_steps={steps}", f"training.warmup_steps={min(10, steps)}",
            f"training.val_every_steps={10 * steps}", "training.checkpoint_every_steps=100",
            "training.log_every_steps=10", f"training.seed={seed}", *(DRY if dry_run else [])]
    return load_config(preset="tiny", overrides=sets, extra={"data_dir": str(data_dir), "output_dir": str(output)})


def bare(cfg, steps: int, skip: int) -> float:
    """Tokens/s of the bare step on batches collated in advance (the same collator and data as the loop)."""
    prepared = prepare(cfg, progress=False)
    tokenizer, family = load_tokenizer(prepared.tokenizer)
    vocab = vocab_info(tokenizer, family)
    datamodule = PretrainingDataModule(cfg, load_instances(prepared), vocab)
    loader = datamodule.train_dataloader()
    batches = []
    while len(batches) < steps:
        batches.extend(loader)
    batches = batches[:steps]
    model = build_model(cfg, vocab).train()
    t = cfg.training
    configured = adamw(model.named_parameters(), learning_rate=t.learning_rate, weight_decay=t.weight_decay,
                       betas=t.adam_betas, eps=t.adam_eps, warmup_steps=t.warmup_steps, max_steps=t.max_steps)
    optimizer, schedule = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    tokens, start = 0, 0.0
    for step, batch in enumerate(batches):
        if step == skip:
            tokens, start = 0, time.perf_counter()
        loss = model.pretraining_loss(batch["input_ids"], batch["labels"], batch["attention_mask"],
                                      batch["token_type_ids"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += int(batch["attention_mask"].sum())
    return tokens / (time.perf_counter() - start)


def loop(cfg, skip: int) -> float:
    clock = Clock(skip)
    pretrain(cfg, context=RunContext(experiment="bvr-benchmark"), progress=False, callbacks=[clock])
    return clock.rate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("BVR_DATA_DIR", "data")),
                        help="data folder holding the corpus [default: $BVR_DATA_DIR]")
    parser.add_argument("--steps", type=int, default=60, help="training steps per run")
    parser.add_argument("--skip", type=int, default=10, help="first steps of each run not timed")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each, in turn")
    parser.add_argument("--documents", type=int, default=1000, help="corpus documents prepared")
    parser.add_argument("--dry-run", action="store_true", help="the same code with a toy encoder (for CI)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    heap = keep_freed_memory()  # as pretrain()'s Trainer does, so the bare step runs under the same allocator
    print("heap: freed memory kept between steps (bvr.memory)" if heap else "heap: the C library's defaults")
    rates: dict[str, list[float]] = {"bare": [], "loop": []}
    with tempfile.TemporaryDirectory(prefix="bvr-loop-bench-") as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # the MLflow store (./mlflow.db) goes to the temporary folder
        try:
            for repeat in range(args.repeats):
                cfg = config(Path(cwd, args.data_dir), Path(tmp) / "outputs", args.steps, repeat, args.documents,
                             args.dry_run)
                rates["bare"].append(bare(cfg, args.steps, args.skip))
                rates["loop"].append(loop(cfg, args.skip))
        finally:
            os.chdir(cwd)
    median = {name: statistics.median(values) for name, values in rates.items()}
    figures = {"threads": torch.get_num_threads(), "bare_tokens_per_s": median["bare"],
               "loop_tokens_per_s": median["loop"], "ratio": median["loop"] / median["bare"], "runs": rates}
    m, t = cfg.model, cfg.training
    print(f"config: {m.num_layers} layers, hidden {m.hidden_size}, batch {t.batch_size} x {cfg.data.max_length}, "
          f"FULL-SENTENCES, fp32, {figures['threads']} threads, "
          f"{args.steps} steps a run ({args.skip} untimed), {args.repeats} runs each, in turn")
    print(f"bare step:  {median['bare']:>8,.0f} tokens/s  (runs: {', '.join(f'{r:,.0f}' for r in rates['bare'])})")
    print(f"real loop:  {median['loop']:>8,.0f} tokens/s  (runs: {', '.join(f'{r:,.0f}' for r in rates['loop'])})")
    print(f"ratio: {figures['ratio']:.1%} of the bare step (target >= 90%)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
