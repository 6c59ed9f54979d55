"""What holds a small encoder on the unigram plateau: bvr's pretraining bisected against a plain masked LM.

The corpus is a bigram chain (:func:`write_chain_corpus`): every pseudo-word fixes the next one, so a masked word
is predictable from its neighbours and a model that does not use context stays at the unigram entropy (~6.1 nats
for 600 words). A plain PyTorch MLM (``torch.nn.TransformerEncoder``, pre-LayerNorm, no dropout, BERT's
initialisation, tied decoder) leaves that plateau within a few hundred steps. Each row below moves one difference
between that reference and bvr's pretraining, with everything else the reference's, and prints the validation
loss in nats at ``--report`` steps (mean over ``--seeds`` seeds, each seed in brackets):

- ``reference``: the plain model on word ids, AdamW (decay 0.01 on everything, betas 0.9/0.999), warm-up then
  linear decay, 80/10/10 masking of 15% of the words, batches of 32 x 128, no clipping;
- ``bvr model``: bvr's :class:`~bvr.model.PretrainingModel` (``model.norm=pre``, no dropout) in its place, with
  BERT's layout and initialisation: a LayerNorm on the embeddings' sum, random token-type vectors, the MLM head's
  dense + GELU + LayerNorm before the decoder; then each of ``model.token_type_init=zero``,
  ``model.embedding_norm=false`` and ``model.head_transform=false`` alone and together;
- ``+ bvr optimiser``: the recipe with bvr's AdamW (no decay on biases and LayerNorms, betas 0.9/0.98, epsilon
  1e-6, torch's fused kernel) and gradient clipping at 1.0;
- ``+ bvr data``: the recipe on bvr's prepared data of the same corpus (WordPiece, full sentences of at most 128
  tokens with [CLS], [SEP] and full stops, bvr's dynamic-masking and validation collators), still in the plain loop;
- ``bvr pretrain``: the real thing, Lightning and all (``bvr.pretraining.run.pretrain``), with BERT's layout and
  with the recipe.

    python benchmarks/plateau_bisect.py --data-dir CHAIN [--steps 1200] [--report 300 600 1200] [--seeds 2]
    python benchmarks/plateau_bisect.py --make-chain CHAIN   # writes the corpus first (600 words, 4,000 documents)
    python benchmarks/plateau_bisect.py --dry-run            # toy sizes: checks that every row runs

CHAIN is a data folder holding ``corpus/chain/chain.txt`` (bvr's ``corpus.source=text`` layout). Rows run one after
another, one thread each; ``--dry-run`` writes a small chain to a temporary folder and runs each row for a few steps.
The measured table is in docs/recipes.md.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from bvr.config import Config, load_config
from bvr.model import EncoderConfig, PretrainingModel
from bvr.pretraining.data import InstanceDataset, fixed_validation_collator, training_collator
from bvr.pretraining.prepare import load_instances, prepare
from bvr.pretraining.run import pretrain
from bvr.tokenization import load_tokenizer, vocab_info
from bvr.tracking import RunContext
from bvr.training.optim import adamw

SYLLABLES = ("ka", "lo", "mi", "nu", "pe", "ra", "si", "tu", "ve", "zo", "ba", "de", "fi", "go", "hu")
RECIPE = {"token_type_init": "zero", "embedding_norm": False, "head_transform": False}
"""The three knobs this bisection found (``model.*``)."""
BERT_LAYOUT = {"token_type_init": "normal", "embedding_norm": True, "head_transform": True}


def write_chain_corpus(folder: Path, words: int = 600, documents: int = 4000, seed: int = 0) -> Path:
    """Write ``folder/corpus/chain/chain.txt``: documents of 3 paragraphs of 4 sentences of 12 pseudo-words, each
    word after the first the image of the one before under a fixed random permutation of the vocabulary."""
    rng = random.Random(seed)
    vocab: set[str] = set()
    while len(vocab) < words:
        vocab.add("".join(rng.choice(SYLLABLES) for _ in range(3)))
    ordered = sorted(vocab)
    successor = dict(zip(ordered, rng.sample(ordered, len(ordered)), strict=True))
    path = folder / "corpus" / "chain" / "chain.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for _ in range(documents):
            for _ in range(3):
                sentences = []
                for _ in range(4):
                    word, sentence = rng.choice(ordered), []
                    for _ in range(12):
                        sentence.append(word)
                        word = successor[word]
                    sentences.append(" ".join(sentence).capitalize() + ".")
                out.write(" ".join(sentences) + "\n")
            out.write("\n")
    return path


@dataclasses.dataclass(frozen=True)
class Setting:
    """Sizes shared by every row."""

    steps: int
    warmup: int
    batch: int = 32
    length: int = 128
    layers: int = 2
    hidden: int = 128
    heads: int = 2
    lr: float = 3e-3


# ---------------------------------------------------------------------------------------------------------------
# Word-id data and the plain model


class WordData:
    """The corpus as lower-cased word ids packed into rows of ``length`` words; 1% of the rows (at least 8) held out
    for validation, masked once with a fixed generator."""

    MASK = 2
    FIRST_WORD = 3

    def __init__(self, corpus: Path, length: int) -> None:
        words = re.findall(r"[a-z0-9']+", corpus.read_text(encoding="utf-8").lower())
        itos = ["[PAD]", "[UNK]", "[MASK]"] + [w for w, _ in collections.Counter(words).most_common()]
        index = {w: i for i, w in enumerate(itos)}
        ids = torch.tensor([index[w] for w in words])
        rows = ids[: len(ids) // length * length].view(-1, length)  # (rows, length)
        held_out = max(8, len(rows) // 100)
        self.vocab_size = len(itos)
        self.validation, self.train = rows[:held_out], rows[held_out:]
        self.val_batch = self.mask(self.validation[:256], torch.Generator().manual_seed(123))

    def mask(self, x: torch.Tensor, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """15% of the positions chosen; 80% of those become [MASK], 10% a random word, 10% stay."""
        x, labels = x.clone(), torch.full_like(x, -100)
        chosen = torch.rand(x.shape, generator=generator) < 0.15
        labels[chosen] = x[chosen]
        r = torch.rand(x.shape, generator=generator)
        x[chosen & (r < 0.8)] = self.MASK
        swap = chosen & (r >= 0.8) & (r < 0.9)
        x[swap] = torch.randint(self.FIRST_WORD, self.vocab_size, (int(swap.sum()),), generator=generator)
        return {"input_ids": x, "labels": labels}

    def batches(self, batch: int) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            yield self.mask(self.train[torch.randint(len(self.train), (batch,))])


class PlainMLM(nn.Module):
    """The reference: token + position embeddings, ``nn.TransformerEncoder`` (pre-LayerNorm, GELU, no dropout), a
    final LayerNorm and a decoder tied to the token embedding; BERT's initialisation (normal 0.02, zero biases)."""

    def __init__(self, vocab_size: int, s: Setting) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, s.hidden)
        self.positions = nn.Embedding(s.length, s.hidden)
        layer = nn.TransformerEncoderLayer(s.hidden, s.heads, 4 * s.hidden, 0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, s.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(s.hidden)
        self.decoder = nn.Linear(s.hidden, vocab_size)
        self.decoder.weight = self.tokens.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for block in self.layers.layers:
            nn.init.normal_(block.self_attn.in_proj_weight, std=0.02)

    def loss(self, input_ids: torch.Tensor, labels: torch.Tensor, **_) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.norm(self.layers(self.tokens(input_ids) + self.positions(positions)))  # (batch, seq, hidden)
        return F.cross_entropy(self.decoder(hidden).flatten(0, 1), labels.flatten())


class BvrMLM(nn.Module):
    """bvr's pretraining model behind the same ``loss`` as :class:`PlainMLM`."""

    def __init__(self, vocab_size: int, s: Setting, layout: dict, pad_token_id: int = 0,
                 max_positions: int = 512) -> None:
        super().__init__()
        config = EncoderConfig(family="bert", vocab_size=vocab_size, hidden_size=s.hidden, num_layers=s.layers,
                               num_heads=s.heads, intermediate_size=4 * s.hidden, dropout=0.0, attention_dropout=0.0,
                               norm="pre", pad_token_id=pad_token_id, max_position_embeddings=max_positions, **layout)
        self.model = PretrainingModel(config)

    def loss(self, input_ids, labels, attention_mask=None, token_type_ids=None, **_) -> torch.Tensor:
        return self.model.pretraining_loss(input_ids, labels, attention_mask, token_type_ids).mlm_loss


# ---------------------------------------------------------------------------------------------------------------
# The plain loop


def plain_optimiser(model: nn.Module, s: Setting) -> tuple[torch.optim.Optimizer, Callable[[], None]]:
    """The reference's AdamW (decay 0.01 on every parameter) and schedule; no clipping."""
    optimiser = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda step: min((step + 1) / s.warmup, max(0.0, (s.steps - step) / (s.steps - s.warmup))))
    return optimiser, schedule.step


def bvr_optimiser(model: nn.Module, s: Setting) -> tuple[torch.optim.Optimizer, Callable[[], None]]:
    """bvr's AdamW (its parameter groups, betas and epsilon, fused) and schedule; clipping at 1.0 before each step."""
    built = adamw(model.named_parameters(), learning_rate=s.lr, weight_decay=0.01, betas=(0.9, 0.98), eps=1e-6,
                  warmup_steps=s.warmup, max_steps=s.steps)
    schedule = built["lr_scheduler"]["scheduler"]
    return built["optimizer"], schedule.step


def train(model: nn.Module, batches: Iterator[dict], val_batch: dict, s: Setting, report: list[int],
          optimiser=plain_optimiser, clip: float = 0.0) -> dict[int, float]:
    """Train for ``s.steps`` steps; the validation loss at each step in ``report``."""
    opt, after_step = optimiser(model, s)
    out = {}
    for step in range(1, s.steps + 1):
        model.train()
        loss = model.loss(**next(batches))
        opt.zero_grad()
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        after_step()
        if step in report:
            model.eval()
            with torch.no_grad():
                out[step] = float(model.loss(**val_batch))
    return out


# ---------------------------------------------------------------------------------------------------------------
# bvr's data and bvr pretrain


def chain_config(chain: Path, s: Setting, layout: dict, dry_run: bool, output: Path) -> Config:
    """bvr's configuration of the chain run: the tiny preset, full sentences, no sentence objective, no dropout."""
    sets = ["corpus.source=text", "corpus.path=corpus/chain", "data.input_format=full-sentences",
            "data.sentence_objective=none", "model.norm=pre", "training.dropout=false",
            f"training.learning_rate={s.lr}", f"training.max_steps={s.steps}", f"training.warmup_steps={s.warmup}",
            f"training.batch_size={s.batch}", f"data.max_length={s.length}",
            *(f"model.{key}={str(value).lower()}" for key, value in layout.items())]
    if dry_run:
        sets += ["tokenizer.vocab_size=300", "corpus.validation_fraction=0.1"]
    return load_config(preset="tiny", overrides=sets, extra={"data_dir": str(chain), "output_dir": str(output)})


class BvrData:
    """bvr's prepared sequences of the chain corpus with its training and validation collators."""

    def __init__(self, cfg: Config) -> None:
        prepared = prepare(cfg, progress=False)
        instances = load_instances(prepared)
        tokenizer, family = load_tokenizer(prepared.tokenizer)
        self.vocab = vocab_info(tokenizer, family)
        self.train = InstanceDataset(instances["train"])
        self.rows = instances["train"].num_rows
        validation = instances["validation"]
        rows = [(i, 0) for i in range(min(256, validation.num_rows))]
        self.val_batch = fixed_validation_collator(self.vocab, cfg)(InstanceDataset(validation).__getitems__(rows))
        self.collate = training_collator(self.vocab, cfg)

    def batches(self, batch: int, seed: int) -> Iterator[dict[str, torch.Tensor]]:
        generator, step = torch.Generator().manual_seed(seed), 0
        while True:
            step += 1
            rows = torch.randint(self.rows, (batch,), generator=generator).tolist()
            yield self.collate(self.train.__getitems__([(row, step) for row in rows]))


class ValidationLosses(L.Callback):
    """Records ``val/mlm_loss`` at each validation of a ``bvr pretrain`` run."""

    def __init__(self) -> None:
        self.losses: dict[int, float] = {}

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking and "val/mlm_loss" in trainer.callback_metrics:
            self.losses[trainer.global_step] = float(trainer.callback_metrics["val/mlm_loss"])


def bvr_pretrain(cfg: Config, seed: int, report: list[int], output: Path) -> dict[int, float]:
    """A real ``bvr pretrain`` run, validated at the report steps; its losses there."""
    every = report[0] if all(step % report[0] == 0 for step in report) else 1
    cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, seed=seed, val_every_steps=every))
    losses = ValidationLosses()
    cwd = Path.cwd()
    os.chdir(output)  # its MLflow store lands beside its outputs
    try:
        pretrain(cfg, context=RunContext(experiment="bvr-plateau-bisect"), progress=False, callbacks=[losses])
    finally:
        os.chdir(cwd)
    return {step: losses.losses[step] for step in report if step in losses.losses}


# ---------------------------------------------------------------------------------------------------------------
# Rows


def rows(chain: Path, s: Setting, report: list[int], output: Path, dry_run: bool) -> dict[str, Callable[[int], dict]]:
    """Each row: a function of the seed giving ``{step: validation loss}``."""
    words = WordData(chain / "corpus" / "chain" / "chain.txt", s.length)

    def on_words(build: Callable[[], nn.Module], **train_args) -> Callable[[int], dict]:
        def run(seed: int) -> dict:
            torch.manual_seed(seed)
            return train(build(), words.batches(s.batch), words.val_batch, s, report, **train_args)
        return run

    def bvr_model(**layout) -> Callable[[], nn.Module]:
        return lambda: BvrMLM(words.vocab_size, s, {**BERT_LAYOUT, **layout})

    cache: dict[str, BvrData] = {}

    def on_bvr_data(seed: int) -> dict:
        data = cache.setdefault("data", BvrData(chain_config(chain, s, RECIPE, dry_run, output)))
        torch.manual_seed(seed)
        model = BvrMLM(data.vocab.vocab_size, s, RECIPE, pad_token_id=data.vocab.pad_id)
        return train(model, data.batches(s.batch, seed), data.val_batch, s, report)

    def real(layout: dict) -> Callable[[int], dict]:
        return lambda seed: bvr_pretrain(chain_config(chain, s, layout, dry_run, output), seed, report, output)

    return {
        "reference (plain nn.TransformerEncoder, word ids)": on_words(lambda: PlainMLM(words.vocab_size, s)),
        "bvr model, BERT's layout and init": on_words(bvr_model()),
        "  + token types zero": on_words(bvr_model(token_type_init="zero")),
        "  + no embedding LayerNorm": on_words(bvr_model(embedding_norm=False)),
        "  + no head transform": on_words(bvr_model(head_transform=False)),
        "  + token types zero, no embedding LayerNorm": on_words(bvr_model(token_type_init="zero",
                                                                           embedding_norm=False)),
        "  + token types zero, no head transform": on_words(bvr_model(token_type_init="zero", head_transform=False)),
        "  + all three (the recipe)": on_words(bvr_model(**RECIPE)),
        "the recipe + bvr's optimiser and clipping": on_words(bvr_model(**RECIPE), optimiser=bvr_optimiser, clip=1.0),
        "the recipe + bvr's data (WordPiece, full sentences, collators)": on_bvr_data,
        "bvr pretrain, BERT's layout": real(BERT_LAYOUT),
        "bvr pretrain, the recipe": real(RECIPE),
    }


def cell(losses: list[dict], step: int) -> str:
    values = [run[step] for run in losses if step in run]
    if not values:
        return "-"
    return f"{statistics.fmean(values):.2f} ({' / '.join(f'{v:.2f}' for v in values)})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="a folder holding corpus/chain/chain.txt")
    parser.add_argument("--make-chain", type=Path, help="write the chain corpus into this folder first, and use it")
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--report", type=int, nargs="+", default=[300, 600, 1200])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--only", nargs="+", type=int, help="run only these rows (numbered from 1)")
    parser.add_argument("--output-dir", type=Path, help="where bvr writes its rows (default: a temporary folder)")
    parser.add_argument("--dry-run", action="store_true",
                        help="toy sizes on a small chain: checks that every row runs")
    a = parser.parse_args(argv)
    torch.set_num_threads(1)
    scratch = Path(tempfile.mkdtemp(prefix="bvr-bisect-"))
    if a.dry_run:
        chain = write_chain_corpus(scratch / "chain", words=40, documents=40).parents[2]
        s, report, seeds = Setting(steps=4, warmup=2, batch=4, length=32, hidden=32, heads=2), [2, 4], 1
    else:
        chain = a.data_dir
        if a.make_chain:
            chain = write_chain_corpus(a.make_chain).parents[2]
        if chain is None or not (chain / "corpus" / "chain" / "chain.txt").is_file():
            sys.exit("give --data-dir CHAIN (a folder holding corpus/chain/chain.txt) or --make-chain CHAIN")
        s, report, seeds = Setting(steps=a.steps, warmup=a.warmup), sorted(a.report), a.seeds
    output = (a.output_dir or scratch / "out").resolve()
    output.mkdir(parents=True, exist_ok=True)
    table = rows(chain.resolve(), s, report, output, a.dry_run)
    print(f"validation MLM loss in nats at steps {', '.join(map(str, report))}; mean of {seeds} seed(s) (each)")
    print("| row | " + " | ".join(f"step {step}" for step in report) + " | seconds |")
    print("|---|" + "---|" * (len(report) + 1))
    for number, (name, run) in enumerate(table.items(), start=1):
        if a.only and number not in a.only:
            continue
        started = time.perf_counter()
        losses = [run(seed) for seed in range(seeds)]
        wall = (time.perf_counter() - started) / seeds
        print(f"| {number}. {name} | " + " | ".join(cell(losses, step) for step in report) + f" | {wall:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
