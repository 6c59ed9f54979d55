"""The corpus sources: each ``corpus.source`` name and the reader that yields its documents, with a progress bar."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from bvr.corpus.hf_reader import read_hf_dataset
from bvr.corpus.readers import id_root, read_plain_text, read_wikiextractor, read_wikitext, resolve_files
from bvr.corpus.stats import CorpusStats, Document
from bvr.progress import track


@dataclass(frozen=True)
class SourceOptions:
    """Reader settings that only some sources use: the "hf" source's text column, split and configuration; and
    whether to show a progress bar."""

    text_column: str = "text"
    hf_split: str = "train"
    hf_config: str | None = None
    progress: bool = True


Source = Callable[[str | Path, CorpusStats, SourceOptions], Generator[Document, None, None]]


def _file_source(read: Callable[..., Iterator[Document]]) -> Source:
    """The source that reads the files under a path with ``read(files, stats, root=...)``, a progress bar over
    files."""

    def source(path: str | Path, stats: CorpusStats, options: SourceOptions) -> Generator[Document, None, None]:
        path = Path(path).expanduser()
        files = track(resolve_files(path), "Reading files", enabled=options.progress)
        yield from read(files, stats, root=id_root(path))

    return source


def _hf_source(path: str | Path, stats: CorpusStats, options: SourceOptions) -> Generator[Document, None, None]:
    """Documents from a Hugging Face dataset, with a progress bar over documents (the file count is unknown)."""
    documents = read_hf_dataset(str(path), stats, text_column=options.text_column, split=options.hf_split,
                                config_name=options.hf_config)
    yield from track(documents, "Reading documents", enabled=options.progress)


# Each reader is a generator, so that closing it ends its progress bar and closes its open file.
READERS: dict[str, Source] = {
    "wikiextractor": _file_source(lambda files, stats, root: read_wikiextractor(files, stats)),
    "text": _file_source(read_plain_text),
    "hf": _hf_source,
    "wikitext": _file_source(read_wikitext),
}
SOURCES = tuple(READERS)
