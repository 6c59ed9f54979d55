"""Corpora: WikiExtractor output, WikiText, plain text and Hugging Face datasets → documents as lists of sentences.

Every reader yields documents as ``{"doc_id": str, "title": str, "sentences": list[str]}`` and counts what it read
and what it skipped in a :class:`CorpusStats`. :func:`build_corpus` streams those documents into an Arrow-backed
``datasets.DatasetDict`` (``train`` and ``validation``) on disk, one document at a time, so a corpus larger than
memory works; :func:`load_corpus` memory-maps it back.

Formats (each reader's docstring has the details): ``wikiextractor`` (``<doc ...>`` blocks, :func:`read_wikiextractor`;
headings, table markup and template debris are dropped and counted, because BERT pretrained on text passages only),
``wikitext`` (an article per ``= Title =`` line, :func:`read_wikitext`), ``text`` (a paragraph per line, a blank line
between documents, :func:`read_plain_text`) and ``hf`` (a Hugging Face dataset, a document per row,
:func:`read_hf_dataset`; local ``.txt`` files are read by the ``text`` rule).

Files may be gzip, bzip2 or xz compressed (by suffix). Bytes that are not valid UTF-8 become U+FFFD, one per
byte, and are counted.
"""

from bvr.corpus.hf_reader import read_hf_dataset
from bvr.corpus.readers import read_plain_text, read_wikiextractor, read_wikitext, resolve_files
from bvr.corpus.sentences import is_heading, is_markup, split_sentences
from bvr.corpus.sources import READERS, SOURCES, SourceOptions
from bvr.corpus.stats import CorpusStats
from bvr.corpus.store import STATS_FILE, HoldOut, build_corpus, datasets_progress, is_validation, load_corpus

__all__ = [
    "READERS", "SOURCES", "STATS_FILE", "CorpusStats", "HoldOut", "SourceOptions", "build_corpus", "datasets_progress",
    "is_heading", "is_markup", "is_validation", "load_corpus", "read_hf_dataset", "read_plain_text",
    "read_wikiextractor", "read_wikitext", "resolve_files", "split_sentences",
]
