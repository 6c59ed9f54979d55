"""Building a corpus on disk: documents streamed from a reader into an Arrow-backed ``DatasetDict`` (``train`` and
``validation``, split by a stable hash of each document's id), moved into place atomically, and loaded back."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import uuid
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import datasets
from datasets.arrow_writer import ArrowWriter

from bvr.corpus.sources import READERS, SOURCES, SourceOptions
from bvr.corpus.stats import CorpusStats, Document
from bvr.errors import BvrError
from bvr.fs import replace_dir, write_text

SPLITS = ("train", "validation")
STATS_FILE = "corpus_stats.json"
FEATURES = datasets.Features({"doc_id": datasets.Value("string"), "title": datasets.Value("string"),
                              "sentences": datasets.Sequence(datasets.Value("string"))})


def is_validation(doc_id: str, fraction: float, seed: int) -> bool:
    """Whether a document belongs to the validation split (``fraction``: the expected share, in [0, 1]), by
    :func:`split_rank` (not ``hash()``, which changes per process): it depends neither on reading order nor on the
    process, and a document's split never changes when the corpus grows."""
    return split_rank(doc_id, seed) < fraction * 2**64


def split_rank(doc_id: str, seed: int) -> int:
    """A document's place in [0, 2**64) for the split: BLAKE2b of ``(seed, doc_id)``; the lowest are validation."""
    digest = hashlib.blake2b(f"{seed}\0{doc_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class HoldOut:
    """How :func:`build_corpus` holds documents out for validation."""

    fraction: float = 0.01
    """Expected share of documents in the validation split, in [0, 1)."""
    seed: int = 0
    """Seed of the train/validation choice (see :func:`is_validation`)."""
    min_documents: int = 0
    """When the hash puts fewer documents in validation, the training documents with the lowest :func:`split_rank`
    (the nearest to being chosen) move over until there are this many, so a small corpus still has a validation
    split; a corpus that would then have no training document is an error."""


def build_corpus(source: str, path: str | Path, out_dir: Path, *, held_out: HoldOut = HoldOut(),
                 max_documents: int | None = None, reading: SourceOptions | None = None,
                 progress: bool = True) -> CorpusStats:
    """Read a corpus and write it to ``out_dir`` as a ``DatasetDict`` (train, validation) plus ``corpus_stats.json``.

    Documents stream from the reader into Arrow files one at a time, so memory does not grow with the corpus.
    The corpus is built in a hidden sibling folder and renamed into place at the end, so an interrupted run
    leaves ``out_dir`` as it was; an ``out_dir`` holding something other than a corpus is refused. ``path`` is the
    corpus file or folder, or (for "hf") a dataset path or hub id; ``reading`` holds the settings only some sources
    read (None: :class:`~bvr.corpus.sources.SourceOptions`' defaults). Returns the counts, also written to
    ``out_dir/corpus_stats.json``.
    """
    out_dir = Path(out_dir).expanduser()
    _check_build_args(source, held_out.fraction, max_documents, out_dir)
    stats = CorpusStats(source=source, path=str(path))
    options = dataclasses.replace(reading or SourceOptions(), progress=progress)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = out_dir.with_name(f".{out_dir.name}.building-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with closing(READERS[source](path, stats, options)) as documents:
            _write_arrow(documents, work / "stream", stats, held_out.fraction, held_out.seed, max_documents)
        if stats.documents == 0:
            raise BvrError(f"no documents found. {stats.summary().removesuffix('.')}", where=path,
                           hint=f"check corpus.path and corpus.source ({', '.join(SOURCES)})")
        if stats.documents <= held_out.min_documents:
            raise BvrError(f"{stats.documents} document(s) found: too few to hold out {held_out.min_documents} for "
                           "validation and train on the rest", where=path,
                           hint=f"use a corpus of at least {held_out.min_documents + 1} documents (in plain text, "
                                "a blank line ends a document)")
        _warn_if_not_words(stats, path)
        _save_corpus(work / "stream", work / "corpus", stats, held_out.min_documents, held_out.seed,
                     progress=progress)
        replace_dir(work / "corpus", out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return stats


WORD_CHARACTERS_LIMIT = 20
"""Characters a word on average past which a corpus is said not to be text split into words (English: about 6)."""


def _warn_if_not_words(stats: CorpusStats, path: str | Path) -> None:
    """One line on stderr when the text is hardly split into words by spaces (a single 50 MB line of one "word",
    say): WordPiece reads a word longer than 100 characters as one unknown token, so that text never reaches the
    model, and a run on it trains on a few unknown tokens."""
    per_word = stats.characters / max(stats.words, 1)
    if per_word > WORD_CHARACTERS_LIMIT:
        print(f"{path}: warning: {stats.characters:,} characters in {stats.words:,} word(s), {per_word:,.0f} "
              "characters a word (English: about 6): the tokenizer reads a word longer than 100 characters as one "
              "unknown token, so most of this text will not reach the model. is it text with spaces between words?",
              file=sys.stderr, flush=True)


def _check_build_args(source: str, validation_fraction: float, max_documents: int | None, out_dir: Path) -> None:
    """Refuse an unknown source, a fraction outside [0, 1), a non-positive document limit, or an ``out_dir`` that
    holds anything but a corpus (it is deleted when the new one lands)."""
    if source not in READERS:
        raise BvrError(f"unknown corpus source {source!r}", where="source", hint=f"use one of {', '.join(SOURCES)}")
    if not 0 <= validation_fraction < 1:
        raise BvrError(f"{validation_fraction} is not in [0, 1)", where="validation_fraction")
    if max_documents is not None and max_documents < 1:
        raise BvrError(f"{max_documents} is not a positive number", where="max_documents")
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / STATS_FILE).exists():
        raise BvrError("exists and is not a corpus written by bvr", where=out_dir,
                       hint="choose an empty or new output folder")


def _write_arrow(documents: Iterable[Document], folder: Path, stats: CorpusStats, fraction: float, seed: int,
                 max_documents: int | None) -> None:
    """Stream documents into ``folder/{train,validation}.arrow``, choosing each one's split by its id."""
    folder.mkdir(parents=True)
    writers = {split: ArrowWriter(features=FEATURES, path=str(folder / f"{split}.arrow")) for split in SPLITS}
    try:
        for document in documents:
            split = "validation" if is_validation(document["doc_id"], fraction, seed) else "train"
            writers[split].write(document)
            if split == "validation":
                stats.validation_documents += 1
            else:
                stats.train_documents += 1
            if max_documents is not None and stats.train_documents + stats.validation_documents >= max_documents:
                stats.stopped_at_max_documents = True
                break
    finally:
        for writer in writers.values():
            writer.finalize()


def _save_corpus(stream: Path, folder: Path, stats: CorpusStats, min_validation: int, seed: int, *,
                 progress: bool) -> None:
    """Turn the streamed Arrow files into a ``save_to_disk`` folder, memory-mapped so nothing is loaded; top the
    validation split up to ``min_validation`` documents from train first."""
    corpus = datasets.DatasetDict({split: datasets.Dataset.from_file(str(stream / f"{split}.arrow"), split=split)
                                   for split in SPLITS})
    missing = min_validation - len(corpus["validation"])
    if missing > 0:
        corpus = _move_to_validation(corpus, missing, seed)
        stats.train_documents -= missing
        stats.validation_documents += missing
        stats.validation_documents_from_train = missing
    # datasets writes no shard at all for an empty split and then cannot load it: ask for one shard there.
    empty = {split: 1 for split, dataset in corpus.items() if len(dataset) == 0}
    with datasets_progress(progress):
        corpus.save_to_disk(str(folder), num_shards=empty)
    write_text(folder / STATS_FILE, json.dumps(asdict(stats), indent=2) + "\n")


def _move_to_validation(corpus: datasets.DatasetDict, count: int, seed: int) -> datasets.DatasetDict:
    """Move the ``count`` training documents of lowest :func:`split_rank` to validation (after its own documents)."""
    train = corpus["train"]
    ranks = [split_rank(doc_id, seed) for doc_id in train["doc_id"]]
    moved = sorted(sorted(range(len(ranks)), key=ranks.__getitem__)[:count])
    kept = sorted(set(range(len(ranks))) - set(moved))
    validation = datasets.concatenate_datasets([corpus["validation"], train.select(moved)])
    return datasets.DatasetDict({"train": train.select(kept), "validation": validation})


@contextmanager
def datasets_progress(enabled: bool) -> Iterator[None]:
    """Silence the ``datasets`` progress bars inside the block when ``enabled`` is False, then restore them."""
    silence = not enabled and datasets.is_progress_bar_enabled()
    if silence:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if silence:
            datasets.enable_progress_bars()


def load_corpus(out_dir: Path) -> datasets.DatasetDict:
    """Open a corpus written by :func:`build_corpus` (``train`` and ``validation``), memory-mapped."""
    out_dir = Path(out_dir).expanduser()
    if not (out_dir / "dataset_dict.json").exists():
        raise BvrError("no prepared corpus here", where=out_dir, hint="run `bvr data prepare`")
    return datasets.load_from_disk(str(out_dir))
