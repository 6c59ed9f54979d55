"""``bvr data prepare``: corpus → documents → tokenizer → tokenized documents → pretraining instances.

Each stage is declared as a :class:`~bvr.cache.Stage` (``corpus_stage`` ... ``instances_stage``: its key, the input
files whose bytes enter it, its builder) and cached under ``output_dir/cache/KIND-HASH`` by
:func:`~bvr.cache.build_stages`, where HASH covers the configuration of that stage and of every stage before it, so
a second run with the same config reuses everything, and an arm that changes only the input format reuses the
corpus, the tokenizer and the tokenized documents. Masking is not a stage: masks are computed by the collator as a
pure function of (seed, sequence index, copy or epoch), so static and dynamic masking share the prepared instances.

Every stage's key holds :data:`bvr.cache.CACHE_VERSION`; a stage whose folders another version of bvr made is
built anew, in one line (:func:`bvr.cache.other_versions`). Where the corpus is read from (:func:`resolve_corpus`):
an absolute path, the data folder, the working directory, or the Hugging Face hub when it can be reached.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa

from bvr.cache import CACHE_VERSION, Stage, arrow_problem, build_stages
from bvr.config import Config
from bvr.corpus import HoldOut, SourceOptions, build_corpus, datasets_progress, load_corpus
from bvr.errors import BvrError
from bvr.pretraining.formats import create_instances
from bvr.pretraining.instances import Template, documents_of, instance_stats
from bvr.tokenization import (
    load_tokenizer,
    running_text,
    save_tokenizer,
    size_by_frequency,
    tokenizer_stats,
    train_tokenizer,
    vocab_info,
)
from bvr.write_checks import check_free_space, check_writable, tree_bytes

STAGE_DISK = {"corpus": 1.0, "tokenized": 2.0, "data": 2.5}
"""The disk a stage needs free while it builds, as a multiple of its input's size (the corpus files, the corpus
stage's folder, the tokenized stage's folder). Measured on a megabyte of English Wikipedia with a 2,000-word
vocabulary, the stages end at 0.9x, 1.1x and 1.6x the corpus files, and a map's Arrow file and its saved copy are
both on disk before the first is removed: the factors are those peaks, rounded down, so the check refuses only
what could not fit."""
MIN_VALIDATION_DOCUMENTS = 2
"""Validation documents a corpus is given at least (taken from train when the split's hash chose fewer): NotNext
segments come from another document, so one document alone cannot make a validation set of every format."""

INSTANCE_FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "token_type_ids": datasets.Sequence(datasets.Value("int8")),
        "sentence_label": datasets.Value("int8"),
    }
)
TOKENIZED_FEATURES = datasets.Features(
    {
        "doc_id": datasets.Value("string"),
        "token_ids": datasets.Sequence(datasets.Value("int32")),
        "sentence_lengths": datasets.Sequence(datasets.Value("int32")),
    }
)


@dataclass(frozen=True)
class Prepared:
    """The folders of every prepared stage."""

    corpus: Path
    tokenizer: Path
    tokenized: Path
    instances: Path

    def stats(self) -> dict[str, Any]:
        """The statistics written by each stage."""
        files = {
            "corpus": self.corpus / "documents" / "corpus_stats.json",
            "tokenizer": self.tokenizer / "tokenizer_stats.json",
            "instances": self.instances / "data_stats.json",
        }
        return {k: json.loads(p.read_text()) for k, p in files.items() if p.is_file()}


@dataclass(frozen=True)
class CorpusLocation:
    """Where the corpus is read from, once the data folder and the network have been taken into account."""

    source: str
    path: str
    hf_config: str | None = None


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def resolve_corpus(cfg: Config) -> CorpusLocation:
    """Decide where the corpus comes from: an absolute path, the data folder, the working directory or the hub."""
    corpus = cfg.corpus
    path = Path(corpus.path).expanduser()
    if path.is_absolute():
        candidate = path
    elif cfg.data_dir:
        candidate = Path(cfg.data_dir).expanduser() / path
    elif path.exists():
        candidate = path
    elif corpus.source == "hf":
        return CorpusLocation("hf", corpus.path, corpus.hub_config)
    elif _hub_reachable():
        return CorpusLocation("hf", corpus.hub_id, corpus.hub_config)
    else:
        raise BvrError(
            "no data folder is set and the Hugging Face hub cannot be reached",
            where="data_dir",
            hint="pass --data-dir PATH or set BVR_DATA_DIR to a folder holding "
            f"{corpus.path}",
        )
    if not candidate.exists():
        raise BvrError(f"{candidate} does not exist", where="corpus.path", hint="check --data-dir / BVR_DATA_DIR")
    return CorpusLocation(corpus.source, str(candidate.resolve()), corpus.hub_config if corpus.source == "hf" else None)


def cache_root(cfg: Config) -> Path:
    return Path(cfg.output_dir) / "cache"


# Stages


def prepare_corpus(cfg: Config, *, progress: bool = True, built: set[Path] | None = None) -> Path:
    """The corpus stage alone (``bvr data corpus``, the runner's corpus unit); reused when already built. The first
    stage of every command that prepares data, so the output folder is checked writable first."""
    check_writable(Path(cfg.output_dir), "output folder (--output-dir)")
    return build_stages([corpus_stage(cfg, resolve_corpus(cfg), progress)], built=built)[0]


def corpus_stage(cfg: Config, location: CorpusLocation, progress: bool = True) -> Stage:
    """The corpus read into documents (Arrow, train/validation by document). Local files enter the key by their
    content, not by where they lie; a hub id by its name."""
    corpus, where = asdict(cfg.corpus), asdict(location)
    local = Path(location.path).exists()
    if local:
        corpus = {k: v for k, v in corpus.items() if k != "path"}
        where = {k: v for k, v in where.items() if k != "path"}
    return Stage(cache_root(cfg), "corpus", {"version": CACHE_VERSION, "corpus": corpus, "location": where},
                 partial(_build_corpus, cfg, location, progress), content={"content": location.path if local else None},
                 check=arrow_problem)


def _build_corpus(cfg: Config, location: CorpusLocation, progress: bool, tmp: Path, folder: Path) -> None:
    if location.source != "hf":
        _check_disk(tmp, "corpus", Path(location.path))
    corpus = cfg.corpus
    build_corpus(location.source, location.path, tmp / "documents",
                 held_out=HoldOut(corpus.validation_fraction, corpus.split_seed, MIN_VALIDATION_DOCUMENTS),
                 max_documents=corpus.max_documents,
                 reading=SourceOptions(text_column=corpus.text_column, hf_config=location.hf_config), progress=progress)


class SentenceBatches:
    """The sentences of a document split, in batches, as they stand in running text for ``family``
    (:func:`~bvr.tokenization.running_text`: byte-level BPE sentences after a document's first keep their leading
    space); iterating again starts over (WordPiece reads twice), so the corpus is streamed from its memory-mapped
    Arrow files and never held in memory."""

    def __init__(self, split: datasets.Dataset, family: str, batch_docs: int = 1000) -> None:
        self.split, self.family, self.batch_docs = split, family, batch_docs

    def __iter__(self):
        for batch in self.split.iter(batch_size=self.batch_docs):
            yield [sentence for doc in batch["sentences"] for sentence in running_text(doc, self.family)]

    def __len__(self) -> int:
        return -(-self.split.num_rows // self.batch_docs)


def prepare_tokenizer(cfg: Config, corpus_dir: Path, *, progress: bool = True,
                      built: set[Path] | None = None) -> Path:
    """The tokenizer stage alone, on the documents of ``corpus_dir`` (built already)."""
    return build_stages([tokenizer_stage(cfg, corpus_dir, progress)], built=built)[0]


def tokenizer_stage(cfg: Config, corpus_dir: Path, progress: bool = True) -> Stage:
    """The configured tokenizer trained on the training documents (or ``tokenizer.path``, which enters the key by
    its content), with its stats."""
    tok_cfg = cfg.tokenizer
    return Stage(cache_root(cfg), f"tokenizer-{tok_cfg.family}",
                 {"version": CACHE_VERSION, "corpus": corpus_dir.name, "tokenizer": asdict(tok_cfg)},
                 partial(_build_tokenizer, cfg, corpus_dir, progress),
                 content={"tokenizer_content": tok_cfg.path or None})


def _build_tokenizer(cfg: Config, corpus_dir: Path, progress: bool, tmp: Path, folder: Path) -> None:
    tok_cfg = cfg.tokenizer
    docs = load_corpus(corpus_dir / "documents")
    if tok_cfg.path:
        tokenizer, family = load_tokenizer(Path(tok_cfg.path))
        if family != tok_cfg.family:
            raise BvrError(f"{tok_cfg.path} is a {family} tokenizer, not {tok_cfg.family}", where="tokenizer.path")
    else:
        train = training_sample(docs["train"], tok_cfg.train_documents)
        if progress and train.num_rows < docs["train"].num_rows:
            print(f"training the tokenizer on {train.num_rows:,} of the {docs['train'].num_rows:,} training "
                  "documents, evenly spaced (tokenizer.train_documents)", file=sys.stderr)
        start, texts = time.perf_counter(), SentenceBatches(train, tok_cfg.family)
        if tok_cfg.min_count is None:  # at vocab_size; else at the size min_count picks, with its record
            tokenizer, rule = train_tokenizer(tok_cfg.family, texts, vocab_size=tok_cfg.resolved_vocab_size,
                                              min_frequency=tok_cfg.min_frequency, show_progress=progress), {}
        else:
            tokenizer, rule = size_by_frequency(tok_cfg.family, texts, max_size=tok_cfg.resolved_vocab_size,
                                                min_count=tok_cfg.min_count, percentile=tok_cfg.count_percentile,
                                                min_frequency=tok_cfg.min_frequency)
        train_seconds = time.perf_counter() - start
    save_tokenizer(tokenizer, tok_cfg.family, tmp, model_max_length=cfg.model.max_tokens)
    held_out = (running_text(doc, tok_cfg.family) for doc in docs["validation"]["sentences"])
    stats = tokenizer_stats(tokenizer, held_out)
    stats.update(family=tok_cfg.family, vocab_size=tokenizer.get_vocab_size(), held_out="validation documents")
    if not tok_cfg.path:
        stats.update(train_seconds=round(train_seconds, 1), trained_on_documents=train.num_rows,
                     training_documents=docs["train"].num_rows, **rule)
    (tmp / "tokenizer_stats.json").write_text(json.dumps(stats, indent=2))


def training_sample(train: datasets.Dataset, most: int | None) -> datasets.Dataset:
    """``most`` documents of ``train`` evenly spaced through it (all of them when there are no more than ``most``).

    Evenly spaced rather than the first ``most``: a corpus in file order (WikiExtractor's, by article id) would
    otherwise train the tokenizer on one era of the encyclopaedia. The selection is an index over the memory-mapped
    split, not a copy.

    >>> training_sample(datasets.Dataset.from_dict({"n": list(range(10))}), 4).to_dict()["n"]
    [0, 3, 6, 9]
    """
    if most is None or train.num_rows <= most:
        return train
    return train.select(np.linspace(0, train.num_rows - 1, most).round().astype(np.int64))


def _tokenize_batch(batch: dict[str, list], tokenizer, family: str) -> dict[str, list]:
    """Encode every sentence of a batch of documents as it stands in running text (as :class:`SentenceBatches`);
    keep each document's sentence lengths."""
    flat = [sentence for doc in batch["sentences"] for sentence in running_text(doc, family)]
    encodings = tokenizer.encode_batch_fast(flat, add_special_tokens=False)
    token_ids, sentence_lengths, cursor = [], [], 0
    for doc in batch["sentences"]:
        ids = [e.ids for e in encodings[cursor : cursor + len(doc)]]
        cursor += len(doc)
        token_ids.append([t for sentence in ids for t in sentence])
        sentence_lengths.append([len(sentence) for sentence in ids])
    return {"doc_id": batch["doc_id"], "token_ids": token_ids, "sentence_lengths": sentence_lengths}


def tokenized_stage(cfg: Config, corpus_dir: Path, tokenizer_dir: Path, progress: bool = True) -> Stage:
    """Every sentence tokenized once; documents keep their sentence boundaries."""
    return Stage(cache_root(cfg), "tokenized",
                 {"version": CACHE_VERSION, "corpus": corpus_dir.name, "tokenizer": tokenizer_dir.name},
                 partial(_build_tokenized, corpus_dir, tokenizer_dir, progress), check=arrow_problem)


def _build_tokenized(corpus_dir: Path, tokenizer_dir: Path, progress: bool, tmp: Path, folder: Path) -> None:
    _check_disk(tmp, "tokenized", corpus_dir)
    tokenizer, family = load_tokenizer(tokenizer_dir)
    out = {}
    with datasets_progress(progress):  # the bars of datasets.map, silenced with progress=False (--no-progress)
        docs = load_corpus(corpus_dir / "documents")
        for split, ds in docs.items():
            out[split] = _map(ds, split, tmp, folder, _tokenize_batch, batch_size=1000, features=TOKENIZED_FEATURES,
                              fn_kwargs={"tokenizer": tokenizer, "family": family},
                              desc=f"tokenizing {split} documents")
        _save(datasets.DatasetDict(out), tmp / "tokenized")


def _check_disk(tmp: Path, stage: str, source: Path) -> None:
    """Refuse to build ``stage`` into ``tmp`` when its disk has less free than :data:`STAGE_DISK` says it needs."""
    check_free_space(tmp, STAGE_DISK[stage] * tree_bytes(source), f"the {stage} stage (from {source})")


def _map(ds: datasets.Dataset, split: str, tmp: Path, folder: Path, function, **options: Any) -> datasets.Dataset:
    """``ds.map(function)`` in batches into ``tmp``, its columns replaced, fingerprinted by the stage's folder."""
    return ds.map(function, batched=True, remove_columns=ds.column_names,
                  cache_file_name=str(tmp / f"map-{split}.arrow"), new_fingerprint=f"{folder.name}-{split}", **options)


def _save(dataset: datasets.DatasetDict, path: Path) -> None:
    """save_to_disk without its progress bars (the copy is fast; the map bars before it show the real work), then
    the maps' files beside ``path`` removed.

    An empty split is written as one empty shard: by default datasets writes none, and then cannot load it back.
    """
    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        dataset.save_to_disk(str(path), num_shards={split: 1 for split, ds in dataset.items() if len(ds) == 0})
    finally:
        if was_enabled:
            datasets.enable_progress_bars()
    for stale in path.parent.glob("map-*.arrow"):
        stale.unlink()


def _instances_batch(table: pa.Table, indices: list[int], cfg: Config, template: Template, split: str) -> dict:
    shard = indices[0] // cfg.data.shard_documents
    # A string seed is hashed with SHA-512 by `random`: stable across processes and Python versions.
    rng = random.Random(f"bvr-instances:{cfg.data.seed}:{split}:{shard}")
    return create_instances(
        documents_of(table),
        cfg.data.input_format,
        max_length=cfg.data.max_length,
        objective=cfg.data.sentence_objective,
        template=template,
        rng=rng,
        short_seq_prob=cfg.data.short_seq_prob,
    )


def instances_stage(cfg: Config, tokenized_dir: Path, tokenizer_dir: Path, progress: bool = True) -> Stage:
    """The tokenized documents as sequences of the configured input format."""
    return Stage(cache_root(cfg), f"data-{cfg.data.input_format}",
                 {"version": CACHE_VERSION, "tokenized": tokenized_dir.name, "data": asdict(cfg.data)},
                 partial(_build_instances, cfg, tokenized_dir, tokenizer_dir, progress), check=arrow_problem)


def _build_instances(cfg: Config, tokenized_dir: Path, tokenizer_dir: Path, progress: bool, tmp: Path,
                     folder: Path) -> None:
    _check_disk(tmp, "data", tokenized_dir)
    tokenizer, family = load_tokenizer(tokenizer_dir)
    vocab = vocab_info(tokenizer, family)
    template = Template.for_family(family, vocab.cls_id, vocab.sep_id)
    start = time.perf_counter()
    out, stats = {}, {}
    with datasets_progress(progress):
        tokenized = datasets.load_from_disk(str(tokenized_dir / "tokenized"))
        for split, ds in tokenized.items():
            out[split] = _map(ds.with_format("arrow"), split, tmp, folder, _instances_batch,
                              batch_size=cfg.data.shard_documents, with_indices=True, features=INSTANCE_FEATURES,
                              fn_kwargs={"cfg": cfg, "template": template, "split": split},
                              desc=f"{cfg.data.input_format} {split} sequences").with_format(None)
            stats[split] = instance_stats(out[split], cfg.data.max_length, cfg.data.sentence_objective)
            if not stats[split]["sequences"]:
                raise BvrError(f"the {split} split makes no {cfg.data.input_format} sequences (from {ds.num_rows} "
                               "document(s))", where=str(tokenized_dir),
                               hint="use a larger corpus, or a larger corpus.validation_fraction for validation")
        _save(datasets.DatasetDict(out), tmp / "instances")
    stats["seconds"] = round(time.perf_counter() - start, 1)
    stats["input_format"], stats["sentence_objective"] = cfg.data.input_format, cfg.data.sentence_objective
    (tmp / "data_stats.json").write_text(json.dumps(stats, indent=2))


def prepare(cfg: Config, *, progress: bool = True, built: set[Path] | None = None) -> Prepared:
    """Run (or reuse) every stage for ``cfg``, in order: each declared with the folders of the stages it reads, then
    all built by :func:`bvr.cache.build_stages` (each folder it builds rather than reuses joins ``built``). A folder
    that cannot be written is the first thing to say, before the corpus is looked for."""
    check_writable(Path(cfg.output_dir), "output folder (--output-dir)")
    corpus = corpus_stage(cfg, resolve_corpus(cfg), progress)
    tokenizer = tokenizer_stage(cfg, corpus.folder, progress)
    tokenized = tokenized_stage(cfg, corpus.folder, tokenizer.folder, progress)
    instances = instances_stage(cfg, tokenized.folder, tokenizer.folder, progress)
    return Prepared(*build_stages([corpus, tokenizer, tokenized, instances], built=built))


def load_instances(prepared: Prepared) -> datasets.DatasetDict:
    """The prepared sequences (memory-mapped Arrow)."""
    return datasets.load_from_disk(str(prepared.instances / "instances"))
