"""Which tiny pretraining recipe helps downstream: each recipe against its own random-init control.

A recipe is a list of ``--set`` overrides on top of the masking ablation's tiny setup (its dynamic arm: 2 layers of
hidden 128, WordPiece, segment pairs with NSP, 300 steps of 32 x 128 on the first 250 documents). For each recipe
one pretraining seed is trained, and it and the control (the same encoder and tokenizer, never trained) are scored on:

- validation MLM loss against the unigram entropy of the validation tokens (a loss not clearly under it has
  learned which tokens are frequent and nothing more);
- zero-shot BLiMP (pseudo-log-likelihood, 50 pairs per paradigm);
- the frozen-feature SST-2 probe (mean features, 4,000 training examples, scored on 10,000 held-out ones);
- fine-tuned SST-2 (4,000 examples, 2 epochs, lr 3e-4: the masking ablation's tiny settings), one seed.

A screen, one pretraining seed per row: rows that stand out are worth the masking ablation's several seeds, not a
claim on their own. Every run goes to the MLflow store in the working folder (experiment ``bvr-recipe-search``);
results are appended to ``--out`` as JSON lines, one per recipe, and rows already there are not run again.

``--dry-run`` runs the same code at toy sizes (a few pretraining steps of a hidden-32 encoder, a few BLiMP pairs, the
probe and fine-tuning on whatever the data folder holds), so that CI checks that the script runs; its scores mean
nothing.

Run: ``python benchmarks/recipe_search.py --data-dir DATA [--only NAME ...] [--out recipe_search.jsonl] [--dry-run]``
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from bvr.ablation.declare import Evaluations
from bvr.config import load_config
from bvr.evaluation.run import evaluate_model
from bvr.pretraining.initialise import initialise
from bvr.pretraining.run import pretrain
from bvr.tasks.run import FinetuneSetup, finetune
from bvr.tracking import RunContext

EXPERIMENT = "bvr-recipe-search"

MASKING_TINY = [
    "tokenizer.family=bert", "model.family=bert", "data.input_format=segment-pair", "data.sentence_objective=nsp",
    "masking.mode=dynamic", "corpus.max_documents=250", "corpus.validation_fraction=0.04",
    "training.max_steps=300", "training.warmup_steps=30", "training.val_every_steps=100",
]
"""The masking ablation's tiny preset, dynamic arm (experiments/masking.yaml), as overrides of presets/tiny.yaml."""

FINETUNE = ["finetune.max_train_examples=4000", "finetune.max_eval_examples=null", "finetune.learning_rate=3e-4",
            "finetune.epochs=2"]

CRAM = ["model.norm=pre", "training.dropout=false", "masking.split=[1.0,0.0,0.0]"]
"""Pre-LayerNorm, no dropout while pretraining, no unmasking (BabyBERTa, cramming)."""
PLATEAU_FIX = ["model.norm=pre", "training.dropout=false", "model.token_type_init=zero", "model.embedding_norm=false",
               "model.head_transform=false", "training.learning_rate=3e-3"]
"""The recipe the plateau bisection found (docs/recipes.md): pre-LayerNorm without the embeddings' LayerNorm or the
MLM head transform, token types from zero, no dropout, lr 3e-3."""
RECIPES: dict[str, list[str]] = {
    "bert": [],
    "cram": CRAM,
    "cram-2k": [*CRAM, "corpus.max_documents=2000"],
    "cram-2k-rule": [*CRAM, "corpus.max_documents=2000", "tokenizer.min_count=100"],
    "cram-2k-rule-900": [*CRAM, "corpus.max_documents=2000", "tokenizer.min_count=100", "training.max_steps=900",
                         "training.warmup_steps=60"],
    "cram-8k-rule-900": [*CRAM, "corpus.max_documents=8000", "tokenizer.min_count=100", "training.max_steps=900",
                         "training.warmup_steps=60"],
    "cram-2k-rule-1200-lr3e-3": [*CRAM, "corpus.max_documents=2000", "tokenizer.min_count=100",
                                 "training.max_steps=1200", "training.warmup_steps=72", "training.learning_rate=3e-3"],
    "cram-2k-rule-1200-lr3e-3-64": [*CRAM, "corpus.max_documents=2000", "tokenizer.min_count=100",
                                    "training.max_steps=1200", "training.warmup_steps=72",
                                    "training.learning_rate=3e-3", "data.max_length=64", "training.batch_size=64"],
    "fix": PLATEAU_FIX,
    "fix-full-sentences": [*PLATEAU_FIX, "data.input_format=full-sentences", "data.sentence_objective=none"],
    "fix-40k-6000": [*PLATEAU_FIX, "corpus.max_documents=40000", "corpus.validation_fraction=0.01",
                     "tokenizer.vocab_size=8192", "data.max_length=64", "data.input_format=full-sentences",
                     "data.sentence_objective=none", "training.max_steps=6000", "training.warmup_steps=300",
                     "training.val_every_steps=1000"],
}
"""The rows of the recipe table in docs/recipes.md, in the order they were run."""


@dataclass(frozen=True)
class Screen:
    """What a row runs at: the recipe table's settings, or toy sizes for ``--dry-run``."""

    shrink: tuple[str, ...]
    """Pretraining overrides set after the recipe's own (empty: the recipe as written)."""
    finetune: tuple[str, ...]
    """Fine-tuning overrides of the tiny preset."""
    evaluations: Evaluations
    """BLiMP and probe settings."""


FULL = Screen(shrink=(), finetune=tuple(FINETUNE), evaluations=Evaluations(
    blimp_per_paradigm=50, probe_tasks=("sst2",), probe_seeds=1, probe_heldout_examples=10_000))
DRY = Screen(
    shrink=("corpus.max_documents=60", "corpus.validation_fraction=0.1", "tokenizer.vocab_size=400",
            "tokenizer.min_count=null", "data.max_length=64", "model.hidden_size=32", "model.num_heads=4",
            "model.intermediate_size=64", "training.batch_size=8", "training.max_steps=4", "training.warmup_steps=2",
            "training.val_every_steps=2"),
    finetune=(*FINETUNE, "finetune.epochs=1", "finetune.batch_size=4", "finetune.max_length=64"),
    evaluations=Evaluations(blimp_per_paradigm=2, probe_tasks=("sst2",), probe_seeds=1,
                            probe_max_train_examples=None))
"""``--dry-run``: the settings of tests/test_ablate.py's tiny ablation, which the test data folder can feed."""


def command(name: str, data_dir: Path) -> str:
    """The command line that reproduces one row."""
    return f"python benchmarks/recipe_search.py --data-dir {shlex.quote(str(data_dir))} --only {name}"


def score(model_dir: Path, label: str, evaluations: Evaluations, data_dir: Path, output_dir: Path,
          seed: int) -> dict[str, float]:
    """BLiMP and the SST-2 probe of one model folder (cached under ``output_dir``, as the ablations do)."""
    common = {"data_dir": data_dir, "output_dir": output_dir,
              "context": RunContext(experiment=EXPERIMENT, label=label, tags={"bvr.pretrain_seed": seed})}
    blimp = evaluate_model(model_dir, "blimp", None, evaluations, **common)
    probe = evaluate_model(model_dir, "probe", "sst2", evaluations, **common)
    return {"blimp": blimp.score, "probe_sst2": probe.score}


def finetuned(checkpoint: Path, label: str, data_dir: Path, output_dir: Path, overrides: tuple[str, ...]) -> float:
    """Fine-tuned SST-2 dev accuracy, one seed."""
    setup = FinetuneSetup(data_dir=data_dir, output_dir=output_dir, preset="tiny", overrides=list(overrides))
    result = finetune(checkpoint, "sst2", seeds=[0], setup=setup,
                      context=RunContext(experiment=EXPERIMENT, label=label))
    return result.seeds[0].scores[result.main_key]


def run_recipe(name: str, overrides: list[str], data_dir: Path, output_dir: Path, seed: int,
               screen: Screen = FULL) -> dict:
    """Pretrain one seed of a recipe and score it and its control."""
    sets = [*MASKING_TINY, *overrides, *screen.shrink, f"training.seed={seed}", f"masking.seed={seed}",
            f"data.seed={seed}"]
    cfg = load_config(preset="tiny", overrides=sets, extra={"data_dir": str(data_dir), "output_dir": str(output_dir)})
    start = time.perf_counter()
    trained = pretrain(cfg, context=RunContext(experiment=EXPERIMENT, label=name), progress=False)
    pretrain_seconds = time.perf_counter() - start
    control = initialise(cfg, progress=False)
    row = {"recipe": name, "overrides": overrides, "seed": seed, "command": command(name, data_dir),
           "pretrain_seconds": round(pretrain_seconds, 1), "reused": trained.reused,
           "tokens": trained.metrics.get("tokens_seen"), "val_mlm_loss": trained.metrics.get("val/mlm_loss"),
           "val_unigram_entropy": trained.metrics.get("val_unigram_entropy")}
    for label, folder in ((name, trained.model_dir), (f"{name}-control", control.model_dir)):
        scores = score(folder, label, screen.evaluations, data_dir, output_dir, seed)
        scores["finetune_sst2"] = finetuned(folder, label, data_dir, output_dir, screen.finetune)
        suffix = "" if folder == trained.model_dir else "_control"
        row.update({f"{k}{suffix}": round(v, 4) for k, v in scores.items()})
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--output-dir", type=Path, default=Path("outputs"))
    ap.add_argument("--out", type=Path, default=Path("recipe_search.jsonl"))
    ap.add_argument("--only", nargs="*", default=None, help="recipes to run (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="the same code at toy sizes (for CI)")
    a = ap.parse_args()
    done = set()
    if a.out.exists():
        done = {(r["recipe"], r["seed"]) for r in map(json.loads, a.out.read_text().splitlines())}
    for name in a.only or RECIPES:
        if (name, a.seed) in done:
            continue
        row = run_recipe(name, RECIPES[name], a.data_dir.resolve(), a.output_dir, a.seed, DRY if a.dry_run else FULL)
        print(json.dumps(row), flush=True)
        with a.out.open("a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
