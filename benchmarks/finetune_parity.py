"""Fine-tuning parity: ``bvr finetune`` against transformers' BertForSequenceClassification from one checkpoint.

A BERT-architecture checkpoint is saved by transformers (``BertModel.save_pretrained``: encoder and pooler, no
pretraining heads, weights at BERT's initialisation, seed 0) with a bvr WordPiece tokenizer trained on the SST-2
training sentences beside it. Both sides then fine-tune it on SST-2 (a random subset of the training split, the
whole dev split) for the same seeds:

- bvr: the ``bvr finetune --task sst2 --checkpoint DIR --seeds N`` a user runs, in a folder of its own (its MLflow
  store and caches there); each seed's final dev accuracy is read from its ``result.json``;
- transformers: ``BertForSequenceClassification.from_pretrained(DIR)`` (its stored pooler, its own classifier
  layer) trained by a plain loop with what bvr uses: the same encoded examples (bvr's reader, subset and
  tokenization), the same batches in the same order per epoch (bvr's length-grouped sampler, seeded by the seed
  and the epoch), bvr's AdamW (no decay on biases and LayerNorms, eps 1e-6) and linear schedule with 10% warm-up,
  gradient clipping at 1.0, the same classifier initialisation (bvr's head for the seed, copied in), dropout 0.1.

Dropout draws differ between the two, so single runs differ; the claim is about the seeds: the mean dev accuracies
of the two sides differ by less than the larger of their seed spreads (standard deviations), printed with each
seed's score. Without a data folder, or with ``--dry-run``, a tiny 2-layer model on the SST-2 rows of the tests'
fixtures runs, so that CI checks that the script runs; its figures mean nothing.

    python benchmarks/finetune_parity.py --data-dir DATA [--layers 6 --hidden 384 --heads 12] [--seeds 3]
        [--train-examples 2000] [--epochs 2] [--learning-rate 5e-5] [--json out.json] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bvr.config import FinetuneConfig
from bvr.pretrained import load_pretrained
from bvr.tasks.data import load_task_data, loader
from bvr.tasks.module import build_model
from bvr.tasks.registry import get_task
from bvr.tasks.source import EncoderSource
from bvr.tokenization import save_tokenizer, train_tokenizer, vocab_info
from bvr.training.optim import adamw

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
SST2 = get_task("sst2")


def make_checkpoint(folder: Path, data_dir: Path, *, layers: int, hidden: int, heads: int, vocab: int) -> Path:
    """A ``BertModel`` of the given shape saved by transformers, with a WordPiece tokenizer of SST-2's training
    sentences beside it."""
    import transformers

    lines = (data_dir / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    sentences = [line.split("\t")[0] for line in lines if "\t" in line]
    tokenizer = train_tokenizer("bert", sentences, vocab_size=vocab, min_frequency=1, show_progress=False)
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=hidden,
                                     num_hidden_layers=layers, num_attention_heads=heads,
                                     intermediate_size=4 * hidden, max_position_embeddings=512, pad_token_id=0)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(folder)
    save_tokenizer(tokenizer, "bert", folder)
    return folder


def run_bvr(checkpoint: Path, data_dir: Path, workdir: Path, cfg: FinetuneConfig, seeds: int) -> list[float]:
    """Each seed's final dev accuracy (points) from ``bvr finetune``, run as a user runs it in ``workdir``."""
    sets = [f"finetune.{key}={value}" for key, value in (
        ("max_train_examples", cfg.max_train_examples), ("epochs", cfg.epochs), ("learning_rate", cfg.learning_rate),
        ("batch_size", cfg.batch_size), ("max_length", cfg.max_length))]
    command = [sys.executable, "-m", "bvr.cli", "finetune", "--task", "sst2", "--checkpoint", str(checkpoint),
               "--data-dir", str(data_dir), "--seeds", str(seeds), *(a for s in sets for a in ("--set", s))]
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bvr finetune failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    results = {}
    for path in workdir.glob("outputs/**/result.json"):
        result = json.loads(path.read_text())["seed"]
        results[result["seed"]] = 100 * result["scores"]["dev/accuracy"]
    return [results[seed] for seed in range(seeds)]


def run_transformers(checkpoint: Path, data_dir: Path, cfg: FinetuneConfig, seed: int) -> float:
    """One seed's final dev accuracy (points) from BertForSequenceClassification trained as bvr trains."""
    import transformers

    pretrained = load_pretrained(checkpoint, need_mlm_head=False)
    pad = vocab_info(pretrained.tokenizer, pretrained.family).pad_id
    data = load_task_data(SST2, data_dir, pretrained.tokenizer, pretrained.family, pad, cfg.data_settings())
    transformers.set_seed(seed)
    model = transformers.BertForSequenceClassification.from_pretrained(checkpoint, num_labels=SST2.num_labels)
    head = build_model(EncoderSource(pretrained, from_scratch=False).build(seed), data, seed).head
    with torch.no_grad():  # bvr's output layer for this seed: both start from the same weights
        model.classifier.weight.copy_(head.out.weight)
        model.classifier.bias.copy_(head.out.bias)
    train = loader(data, data.train, cfg.batch_size, seed=seed)
    total = len(train) * cfg.epochs
    optimiser = adamw(model.named_parameters(), learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay,
                      betas=tuple(cfg.adam_betas), eps=cfg.adam_eps, warmup_steps=round(cfg.warmup_fraction * total),
                      max_steps=total, fused=False)
    optimizer, schedule = optimiser["optimizer"], optimiser["lr_scheduler"]["scheduler"]
    for epoch in range(cfg.epochs):
        train.sampler.set_epoch(epoch)
        model.train()
        for batch in train:
            loss = model(**{k: v for k, v in batch.items() if k != "labels"}, labels=batch["labels"]).loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            schedule.step()
    model.eval()
    right = seen = 0
    with torch.no_grad():
        for batch in loader(data, data.evals["dev"], cfg.eval_batch_size):
            logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
            right += int((logits.argmax(-1) == batch["labels"]).sum())
            seen += len(batch["labels"])
    return 100 * right / seen


def _spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="the data folder (glue/SST-2); none: the tests' fixtures")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--train-examples", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--dry-run", action="store_true", help="a tiny model on the fixtures (CI)")
    args = parser.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    data_dir = args.data_dir
    if args.dry_run or data_dir is None:
        data_dir, args.layers, args.hidden, args.heads, args.vocab = FIXTURES, 2, 32, 4, 200
        args.seeds, args.train_examples, args.epochs = 2, 64, 1
    cfg = FinetuneConfig(max_train_examples=args.train_examples, epochs=args.epochs, learning_rate=args.learning_rate,
                         max_length=128)
    with tempfile.TemporaryDirectory(prefix="bvr-parity-") as tmp:
        checkpoint = make_checkpoint(Path(tmp) / "bert", data_dir, layers=args.layers, hidden=args.hidden,
                                     heads=args.heads, vocab=args.vocab)
        (Path(tmp) / "work").mkdir()
        start = time.perf_counter()
        ours = run_bvr(checkpoint, data_dir, Path(tmp) / "work", cfg, args.seeds)
        middle = time.perf_counter()
        theirs = [run_transformers(checkpoint, data_dir, cfg, seed) for seed in range(args.seeds)]
        end = time.perf_counter()
    gap = statistics.mean(ours) - statistics.mean(theirs)
    spread = max(_spread(ours), _spread(theirs))
    shape = f"{args.layers} layers, hidden {args.hidden}, {args.heads} heads"
    print(f"SST-2 dev accuracy, {shape}; {args.train_examples} training examples, {args.epochs} epoch(s), "
          f"lr {args.learning_rate}, seeds 0-{args.seeds - 1}")
    print(f"  bvr finetune:   {', '.join(f'{v:.1f}' for v in ours)}  mean {statistics.mean(ours):.1f} "
          f"(sd {_spread(ours):.1f}; {middle - start:.0f} s)")
    print(f"  transformers:   {', '.join(f'{v:.1f}' for v in theirs)}  mean {statistics.mean(theirs):.1f} "
          f"(sd {_spread(theirs):.1f}; {end - middle:.0f} s)")
    agree = abs(gap) <= max(spread, 0.05)  # equal to the printed digit counts as agreeing
    print(f"  bvr - transformers: {gap:+.1f} points; the larger seed spread {spread:.1f}: "
          f"{'agree' if agree else 'DIFFER'}")
    if args.json:
        args.json.write_text(json.dumps({"shape": shape, "bvr": ours, "transformers": theirs, "gap": gap,
                                         "spread": spread, "agree": agree}, indent=2) + "\n")


if __name__ == "__main__":
    main()
