"""The corpus reader of Hugging Face datasets: a folder written by ``save_to_disk``, local data files, or a hub id →
documents, plain ``.txt`` files through the plain-text reader (:mod:`bvr.corpus.readers`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import datasets

from bvr.corpus.readers import document_of, id_root, read_plain_text, resolve_files
from bvr.corpus.stats import CorpusStats, Document
from bvr.errors import BvrError

# Local data files by suffix → the `datasets` packaged builder that reads them.
_HF_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
_HF_HINT = "pass a local path: a data file or folder, or a folder written by Dataset.save_to_disk"


def read_hf_dataset(name_or_path: str, stats: CorpusStats, *, text_column: str = "text", split: str = "train",
                    config_name: str | None = None) -> Iterator[Document]:
    """Read a Hugging Face dataset, one document per row.

    ``name_or_path`` is tried as, in order: a folder written by ``save_to_disk`` (``datasets.load_from_disk``),
    local ``.txt`` files (a file, or a folder of nothing else), read by the plain-text rule of
    :func:`read_plain_text` (same documents and ids as ``--source text``; only split ``train``), other local data
    files (``datasets.load_dataset``, streamed), then a hub id (streamed). Newlines in ``text_column`` separate
    paragraphs; doc_id comes from an ``id`` column if there is one, else ``"SPLIT:ROW"``; title from a ``title``
    column, else "".
    """
    path = Path(name_or_path).expanduser()
    if _is_plain_text(path):
        if split != "train":
            raise BvrError(f"local text files have only the 'train' split, not {split!r}", where=path,
                           hint="read split 'train'")
        yield from read_plain_text(resolve_files(path), stats, root=id_root(path))
        return
    rows = _open_hf(name_or_path, split, config_name, stats)
    for index, row in enumerate(rows):
        if index == 0 and text_column not in row:
            raise BvrError(f"no column {text_column!r}; the columns are {sorted(row)}", where=name_or_path,
                           hint="pass --text-column")
        if index == 0 and not isinstance(row[text_column], str | None):
            raise BvrError(f"column {text_column!r} holds {type(row[text_column]).__name__}, not text",
                           where=name_or_path, hint="pass --text-column")
        doc_id = str(row["id"]) if row.get("id") is not None else f"{split}:{index}"
        paragraphs = (row[text_column] or "").splitlines()
        title = str(row.get("title") or "")
        yield from document_of(doc_id, title, paragraphs, stats)


def _saved_to_disk(path: Path) -> bool:
    return (path / "dataset_dict.json").exists() or (path / "state.json").exists()


def _is_plain_text(path: Path) -> bool:
    """Whether ``path`` is a ``.txt`` file, or a folder (not one ``save_to_disk`` wrote) holding only ``.txt`` files."""
    if path.is_file():
        return path.suffix == ".txt"
    if not path.is_dir() or _saved_to_disk(path):
        return False
    return {file.suffix for file in resolve_files(path)} == {".txt"}


def _open_hf(name_or_path: str, split: str, config_name: str | None, stats: CorpusStats) -> Iterable[dict[str, Any]]:
    """The rows of the dataset named by ``name_or_path`` (see :func:`read_hf_dataset`): a ``save_to_disk`` folder
    (the split chosen from a ``DatasetDict``), local data files, or a hub dataset; the last two streamed, so
    nothing is cached or held in memory."""
    path = Path(name_or_path).expanduser()
    if _saved_to_disk(path):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise BvrError(f"no split {split!r}; the splits are {sorted(loaded)}", where=path,
                               hint="pass --hf-split")
            loaded = loaded[split]
        stats.files += len(loaded.cache_files)
        return loaded
    if path.exists():
        return _hf_from_files(path, split, stats)
    if name_or_path.startswith((".", "/", "~")) or path.suffix in _HF_BUILDERS:
        raise BvrError("no such file or folder", where=name_or_path, hint="check the path")
    try:
        return datasets.load_dataset(name_or_path, config_name, split=split, streaming=True)
    except (ConnectionError, OSError, ValueError) as exc:
        raise BvrError(f"cannot load {name_or_path!r} from the Hugging Face hub ({exc})", where=name_or_path,
                       hint=_HF_HINT) from exc


def _hf_from_files(path: Path, split: str, stats: CorpusStats) -> datasets.IterableDataset:
    """Local data files (a file or a folder of them)."""
    files = resolve_files(path)
    kwargs: dict[str, Any] = {}
    if path.is_file():
        if path.suffix not in _HF_BUILDERS:
            raise BvrError(f"unknown data file type {path.suffix!r}", where=path, hint=f"use {sorted(_HF_BUILDERS)}")
        kwargs.update(path=_HF_BUILDERS[path.suffix], data_files=str(path))
    else:
        kwargs.update(path=str(path))
    try:
        rows = datasets.load_dataset(split=split, streaming=True, **kwargs)
    except (ValueError, FileNotFoundError) as exc:
        raise BvrError(f"cannot read these data files ({exc})", where=path, hint="check the files, --hf-split") from exc
    stats.files += len(files)
    return rows
