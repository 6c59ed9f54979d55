"""The pretraining sections of the configuration: corpus, tokenizer, data, masking, training (``model`` is the
encoder's own :class:`~bvr.model.encoder_config.ModelConfig`). Each field is documented in place; ``__post_init__``
refuses impossible values naming the dotted key, which :mod:`bvr.config.layering` locates at its file and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bvr.config.layering import check_finite
from bvr.errors import BvrError, check, check_choice
from bvr.model.encoder_config import FAMILIES

INPUT_FORMATS = ("segment-pair", "sentence-pair", "full-sentences", "doc-sentences")
PAIR_FORMATS = ("segment-pair", "sentence-pair")
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "32")
"""Precision settings: ``auto`` (bf16-mixed on a GPU that has it, else 32-true) or one of Lightning's own
(``32`` is Lightning's old name of ``32-true``)."""
CORPUS_SOURCES = ("wikiextractor", "text", "hf", "wikitext")
MASKING_MODES = ("static", "dynamic")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")
STRATEGIES = ("auto", "ddp", "ddp_spawn", "ddp_find_unused_parameters_true", "fsdp")
MASKING_SCHEMES = ("token", "whole-word", "span")
SEED_MAX = 2**32 - 1
"""Largest training seed: Lightning's ``seed_everything`` and numpy's generators take seeds in 0 to 2**32 - 1."""
SENTENCE_OBJECTIVES = ("none", "nsp", "sop")
"""The sentence-level objective beside MLM: none, BERT's next-sentence prediction or ALBERT's sentence-order
prediction (the pair formats only)."""


@dataclass
class CorpusConfig:
    """Where the pretraining text comes from and how it is split."""

    source: str = "wikiextractor"
    """Reader: 'wikiextractor' (<doc> files), 'text' (a paragraph per line, blank line between documents), 'hf'
    (a dataset; local .txt files are read as 'text') or 'wikitext' (one document per '= Title =' article)."""
    path: str = "corpus/enwiki-2021-extract"
    """File or folder, relative to the data folder unless absolute; for source 'hf' a saved dataset or hub id."""
    hub_id: str = "wikimedia/wikipedia"
    """Hugging Face dataset used when no data folder is given and the hub can be reached."""
    hub_config: str | None = "20231101.en"
    """Configuration name of ``hub_id``."""
    text_column: str = "text"
    """Column holding the text, for 'hf' datasets."""
    validation_fraction: float = 0.01
    """Share of documents held out for validation and tokenizer statistics (chosen by a hash of the doc id)."""
    split_seed: int = 0
    """Seed of the train/validation split."""
    max_documents: int | None = None
    """Read at most this many documents (None: all)."""

    def __post_init__(self) -> None:
        check_choice(self.source, CORPUS_SOURCES, "corpus.source")
        check(0.0 < self.validation_fraction < 1.0, "corpus.validation_fraction", "must be in (0, 1)")
        check(self.max_documents is None or self.max_documents > 0, "corpus.max_documents", "must be positive")


@dataclass
class TokenizerConfig:
    """Which tokenizer family to train on the corpus, and how large."""

    family: str = "bert"
    """'bert' (uncased WordPiece, [CLS]/[SEP]/[MASK]) or 'roberta' (byte-level BPE, <s>/</s>/<mask>)."""
    vocab_size: int | None = None
    """Vocabulary size, specials included (None: 30,000 for bert, 50,000 for roberta)."""
    min_frequency: int = 2
    """A merge or word piece must occur this often in the corpus to enter the vocabulary."""
    path: str | None = None
    """Use this trained tokenizer (folder or tokenizer.json) instead of training one."""
    min_count: int | None = None
    """Size the vocabulary by the training text (ELC-BERT's rule): the largest size up to vocab_size in which the
    tokens making up count_percentile of the text each occur at least this often (ELC-BERT: about 100 at 95%).
    None: vocab_size."""
    count_percentile: float = 0.95
    """The share of the training tokens, from the most frequent token type down, that min_count applies to."""
    train_documents: int | None = 200_000
    """Train on at most this many training documents, evenly spaced through the split (a corpus the size of
    Wikipedia, ~6M articles, would otherwise be counted whole, in memory); None: all of them. The tokenizer's
    tokenizer_stats.json says how many it saw."""

    def __post_init__(self) -> None:
        check_choice(self.family, FAMILIES, "tokenizer.family")
        check(self.min_count is None or self.min_count >= 1, "tokenizer.min_count", "must be at least 1 (or null)")
        check(0.0 < self.count_percentile <= 1.0, "tokenizer.count_percentile", "must be in (0, 1]")
        check(self.min_count is None or self.path is None, "tokenizer.min_count",
              "sizes a tokenizer being trained; tokenizer.path names one already trained: set one of them")
        check(self.vocab_size is None or self.vocab_size >= 300, "tokenizer.vocab_size",
               f"{self.vocab_size} is too small (at least 300: byte-level BPE alone needs 256 + specials)")
        check(self.min_frequency >= 1, "tokenizer.min_frequency", "must be at least 1")
        check(self.train_documents is None or self.train_documents >= 1, "tokenizer.train_documents",
              "must be at least 1 (or null: every training document)")

    @property
    def resolved_vocab_size(self) -> int:
        return self.vocab_size or {"bert": 30_000, "roberta": 50_000}[self.family]


@dataclass
class DataConfig:
    """How tokenized documents become pretraining sequences (RoBERTa section 4.2)."""

    input_format: str = "segment-pair"
    """'segment-pair', 'sentence-pair', 'full-sentences' or 'doc-sentences'."""
    sentence_objective: str = "nsp"
    """'none', 'nsp' (BERT: 50% of pairs take B from another document; label 1 NotNext) or 'sop' (ALBERT: 50% of
    pairs of consecutive segments are swapped; label 1 swapped). 'nsp' and 'sop' need a pair format."""
    max_length: int = 128
    """Longest sequence, special tokens included."""
    short_seq_prob: float = 0.1
    """BERT's share of documents whose segment-pair sequences get a shorter random target length (drawn once per
    document and shared by its chunks, as BERT's create_pretraining_data.py)."""
    seed: int = 0
    """Seed of instance creation (targets, split points, NSP and SOP coins)."""
    shard_documents: int = 2000
    """Documents per shard; NotNext segments are drawn from the same shard."""

    def __post_init__(self) -> None:
        check_choice(self.input_format, INPUT_FORMATS, "data.input_format")
        check_choice(self.sentence_objective, SENTENCE_OBJECTIVES, "data.sentence_objective")
        check(self.sentence_objective == "none" or self.input_format in PAIR_FORMATS, "data.sentence_objective",
              f"'{self.sentence_objective}' needs a pair format ({', '.join(PAIR_FORMATS)}), not "
              f"'{self.input_format}'; set data.sentence_objective=none or data.input_format to a pair format")
        check(self.max_length >= 8, "data.max_length", f"{self.max_length} is too short (at least 8)")
        check(0.0 <= self.short_seq_prob < 1.0, "data.short_seq_prob", "must be in [0, 1)")
        check(self.shard_documents >= 2, "data.shard_documents", "must be at least 2")


@dataclass
class MaskingConfig:
    """Masked-language-model corruption (BERT section 3.1 and Table 8; RoBERTa section 4.1)."""

    mode: str = "dynamic"
    """'static' (BERT: dupe_factor masks fixed before training) or 'dynamic' (RoBERTa: new mask every feed)."""
    dupe_factor: int = 10
    """Distinct masks per sequence in static mode; epoch e uses mask e mod dupe_factor."""
    mask_prob: float = 0.15
    """Share of the non-special tokens of each sequence chosen for prediction."""
    split: list[float] = field(default_factory=lambda: [0.8, 0.1, 0.1])
    """Of the chosen tokens: shares replaced by the mask token, by a random token, left unchanged."""
    scheme: str = "token"
    """Which positions spend the budget: 'token' (single sub-word tokens, BERT), 'whole-word' (whole words, BERT's
    whole-word masking) or 'span' (spans of whole words, SpanBERT; the split then applies per span)."""
    span_p: float = 0.2
    """Span scheme: span lengths in words are geometric with this parameter (SpanBERT: 0.2)."""
    span_max_words: int = 10
    """Span scheme: the geometric law is truncated to 1..span_max_words and renormalised (SpanBERT: 10; mean 3.8)."""
    seed: int = 0
    """Seed of the masks; masks are a pure function of (seed, sequence index, copy or epoch)."""

    def __post_init__(self) -> None:
        check_choice(self.mode, MASKING_MODES, "masking.mode")
        check_choice(self.scheme, MASKING_SCHEMES, "masking.scheme")
        check(0.0 < self.span_p <= 1.0, "masking.span_p", f"{self.span_p} is outside (0, 1]")
        check(self.span_max_words >= 1, "masking.span_max_words", "must be at least 1")
        check(self.dupe_factor >= 1, "masking.dupe_factor", "must be at least 1")
        check(0.0 < self.mask_prob < 1.0, "masking.mask_prob", f"{self.mask_prob} is outside (0, 1)")
        check(len(self.split) == 3, "masking.split", "needs three shares: [mask token, random token, unchanged]")
        check(all(s >= 0 for s in self.split), "masking.split", f"{self.split} has a negative share")
        check(abs(sum(self.split) - 1.0) < 1e-6, "masking.split", f"{self.split} sums to {sum(self.split):g}, not 1")


@dataclass
class TrainingConfig:
    """Optimisation and budget of pretraining."""

    batch_size: int = 32
    """Sequences per optimiser step (split into micro-batches by grad_accum); with tokens_per_batch, only the
    validation batch."""
    tokens_per_batch: int | None = None
    """Fill each optimiser step with sequences up to this many tokens (specials included, padding not) instead of
    batch_size sequences: RoBERTa's dynamic batch size, so formats with shorter sequences (doc-sentences,
    sentence-pair) see as many tokens per step as full ones. Split evenly over devices x grad_accum; each share
    must hold a data.max_length sequence. None: batch_size sequences per step."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimiser step."""
    learning_rate: float = 5e-4
    """Peak learning rate."""
    warmup_steps: int = 100
    """Linear warm-up steps (at most max_steps)."""
    max_steps: int = 1000
    """Optimiser steps (the learning-rate schedule decays to zero at this step)."""
    max_tokens: int | None = None
    """Stop once this many (non-padding) tokens have been seen, if that comes before max_steps."""
    weight_decay: float = 0.01
    """AdamW weight decay (not on biases and LayerNorm)."""
    grad_clip: float = 1.0
    """Gradient norm clipping (0: off)."""
    seed: int = 0
    """Seed of initialisation, dropout and data order."""
    num_workers: int = 0
    """DataLoader worker processes."""
    threads: int = 0
    """Torch threads per process (0: the CPUs this process may use, divided among the jobs told to share them by
    ``bvr --jobs N``). An execution setting, not in the run's key; the same count gives the same weights."""
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    """AdamW betas (RoBERTa's 0.98 is more stable with large batches than BERT's 0.999)."""
    adam_eps: float = 1e-6
    """AdamW epsilon."""
    val_every_steps: int = 200
    """Validate every this many optimiser steps (and at the end)."""
    checkpoint_every_steps: int = 100
    """Write the resumable checkpoint (last.ckpt) every this many optimiser steps."""
    log_every_steps: int = 10
    """Log training metrics every this many optimiser steps."""
    precision: str = "auto"
    """'auto' (bf16-mixed on a GPU, else 32-true), '32-true', 'bf16-mixed' or '16-mixed'."""
    accelerator: str = "auto"
    """'auto', 'cpu', 'gpu'/'cuda' or 'mps'."""
    devices: int = 1
    """Devices per node; more than one trains with DDP."""
    num_nodes: int = 1
    """Nodes (torchrun or SLURM set the rest)."""
    strategy: str = "auto"
    """Lightning strategy: 'auto' (DDP when devices x nodes > 1), 'ddp', 'ddp_spawn' or 'fsdp'."""
    compile: bool = False
    """Compile the encoder with torch.compile (GPU runs)."""
    dropout: bool = True
    """Apply model.dropout and model.attention_dropout during pretraining. False pretrains without dropout
    (cramming: it only slows a run that sees each sequence a few times); the exported model keeps model's rates,
    so fine-tuning still uses them."""

    def __post_init__(self) -> None:
        check(self.precision in PRECISIONS, "training.precision",
              f"'{self.precision}' is not one of {', '.join(PRECISIONS[:-1])}")
        check(len(self.adam_betas) == 2 and all(0 <= b < 1 for b in self.adam_betas), "training.adam_betas",
               "needs two values in [0, 1)")
        check(self.max_tokens is None or self.max_tokens > 0, "training.max_tokens", "must be positive")
        check(self.tokens_per_batch is None or self.tokens_per_batch >= 1, "training.tokens_per_batch",
              "must be positive (or null for batch_size sequences per step)")
        for key in ("val_every_steps", "checkpoint_every_steps", "log_every_steps", "devices", "num_nodes",
                    "batch_size", "grad_accum", "max_steps"):
            check(getattr(self, key) >= 1, f"training.{key}", "must be at least 1")
        check(self.batch_size % self.grad_accum == 0, "training.grad_accum",
               f"{self.grad_accum} does not divide batch_size {self.batch_size}")
        check(0 <= self.seed <= SEED_MAX, "training.seed", f"{self.seed} is not a seed: use an integer from 0 to "
              f"{SEED_MAX}")
        check_finite({key: getattr(self, key) for key in ("learning_rate", "weight_decay", "grad_clip", "adam_eps")},
                     "training.")
        check(self.learning_rate > 0, "training.learning_rate", "must be positive")
        check(self.warmup_steps >= 0, "training.warmup_steps", "must be non-negative")
        if self.warmup_steps > self.max_steps:
            raise BvrError(f"{self.warmup_steps} warm-up steps are more than training.max_steps {self.max_steps}: "
                           "the learning rate would never reach its peak", where="training.warmup_steps",
                           hint="set it to at most max_steps (the presets warm up for 1% to 10% of it)")
        check(self.num_workers >= 0, "training.num_workers", "must be non-negative")
        check(self.threads >= 0, "training.threads", f"{self.threads} must be 0 (from the CPUs) or a thread count")
        check(self.adam_eps > 0, "training.adam_eps", f"{self.adam_eps} must be positive (RoBERTa: 1e-6)")
        check(self.weight_decay >= 0, "training.weight_decay", f"{self.weight_decay} must be non-negative")
        check(self.grad_clip >= 0, "training.grad_clip", f"{self.grad_clip} must be non-negative (0: no clipping)")
        check_choice(self.accelerator, ACCELERATORS, "training.accelerator")
        check_choice(self.strategy, STRATEGIES, "training.strategy")
