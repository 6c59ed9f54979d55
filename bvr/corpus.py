"""Corpus readers: WikiExtractor output, plain text and Hugging Face datasets → documents as lists of sentences.

Every reader yields documents as ``{"doc_id": str, "title": str, "sentences": list[str]}`` and counts what it read
and what it skipped in a :class:`CorpusStats`. :func:`build_corpus` streams those documents into an Arrow-backed
``datasets.DatasetDict`` (``train`` and ``validation``) on disk, one document at a time, so a corpus larger than
memory works; :func:`load_corpus` memory-maps it back.

Formats:

- ``wikiextractor``: ``<doc id=".." url=".." title="..">`` ... ``</doc>`` blocks. The first line inside a block
  repeats the title and is dropped; every other non-blank line is a paragraph. Section headings (see
  :func:`is_heading`) and leftover table markup (:func:`is_markup`) are dropped and counted, because BERT
  pretrained on text passages only.
- ``text``: one paragraph per line; one or more blank lines end a document.
- ``hf``: a Hugging Face dataset (a folder saved with ``save_to_disk``, local data files, or a hub id); each row
  is a document whose text column holds paragraphs separated by newlines.

Files may be gzip, bzip2 or xz compressed (by suffix). Bytes that are not valid UTF-8 become U+FFFD, one per
byte, and are counted.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import html
import json
import lzma
import os
import re
import shutil
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

import datasets
from datasets.arrow_writer import ArrowWriter
from rich.progress import track

from bvr.errors import BvrError

SPLITS = ("train", "validation")
STATS_FILE = "corpus_stats.json"
FEATURES = datasets.Features(
    {
        "doc_id": datasets.Value("string"),
        "title": datasets.Value("string"),
        "sentences": datasets.Sequence(datasets.Value("string")),
    }
)

Document = dict[str, Any]


@dataclass
class CorpusStats:
    """What a corpus build read and what it skipped; JSON-serialisable with ``dataclasses.asdict``.

    Attributes:
        source: the reader used ("wikiextractor", "text" or "hf").
        path: the file, folder or dataset name read.
        files: input files opened.
        documents: documents kept (at least one sentence).
        empty_documents: documents skipped because nothing was left after dropping title, headings and markup.
        paragraphs: paragraphs (lines of text) kept.
        sentences: sentences kept.
        words: whitespace-separated words in the kept sentences.
        characters: characters in the kept sentences.
        undecodable_bytes: bytes that were not valid UTF-8, each replaced by U+FFFD.
        headings_dropped: WikiExtractor section-heading lines dropped (see :func:`is_heading`).
        markup_lines_dropped: WikiExtractor lines of table or tag markup dropped (see :func:`is_markup`).
        train_documents: documents written to the train split.
        validation_documents: documents written to the validation split.
        validation_documents_from_train: of those, how many were moved from train to reach the minimum.
        stopped_at_max_documents: True when ``max_documents`` ended the build before the input did.
    """

    source: str = ""
    path: str = ""
    files: int = 0
    documents: int = 0
    empty_documents: int = 0
    paragraphs: int = 0
    sentences: int = 0
    words: int = 0
    characters: int = 0
    undecodable_bytes: int = 0
    headings_dropped: int = 0
    markup_lines_dropped: int = 0
    train_documents: int = 0
    validation_documents: int = 0
    validation_documents_from_train: int = 0
    stopped_at_max_documents: bool = False

    def add_document(self, sentences: list[str]) -> None:
        """Count one kept document's sentences, words and characters."""
        self.documents += 1
        self.sentences += len(sentences)
        self.words += sum(len(sentence.split()) for sentence in sentences)
        self.characters += sum(len(sentence) for sentence in sentences)

    def summary(self) -> str:
        """One paragraph for a person: what was read, what was kept and what was skipped."""
        text = (
            f"Read {self.files:,} file(s) as {self.source or '?'} from {self.path or '?'}: kept {self.documents:,} "
            f"documents, {self.sentences:,} sentences, {self.words:,} words, {self.characters:,} characters. "
            f"Skipped {self.empty_documents:,} empty documents, {self.headings_dropped:,} heading lines and "
            f"{self.markup_lines_dropped:,} markup lines; "
            f"replaced {self.undecodable_bytes:,} undecodable bytes with U+FFFD. "
            f"Split {self.train_documents:,} train / {self.validation_documents:,} validation documents"
            + (f" ({self.validation_documents_from_train:,} moved from train to reach the minimum)."
               if self.validation_documents_from_train else ".")
        )
        return text + (" Stopped early at max_documents." if self.stopped_at_max_documents else "")


# ---------------------------------------------------------------------------------------------------------------
# Sentence splitting
# ---------------------------------------------------------------------------------------------------------------


def _word_set(words: str) -> frozenset[str]:
    """The set of the space-separated words in ``words`` (long word lists read better as one string)."""
    return frozenset(words.split())


# A candidate stop: a run of terminal punctuation, any closing quotes or brackets, then whitespace.
_STOP = re.compile(r"([.!?…]+)([\"'”’»)\]]*)\s+")
_OPENERS = "\"'“‘«([{"
# Words that are usually abbreviations before a ".". Case matters: "Art." is one, "art." is the word.
_ABBREVIATIONS = _word_set(
    "Mr Mrs Ms Mx Dr Prof Sr Jr St Mt Ft Gen Col Lt Capt Cpt Sgt Maj Adm Cmdr Rev Fr Hon Gov Pres Sen Rep "
    "Rt Esq Messrs No Nos Vol Vols Fig Figs Eq Ch Sec Art Ed Eds Op pp p ch sec vol fig eq ed "
    "b d fl r c ca cf approx est vs v viz al etc Inc Ltd Co Corp Bros Ave Rd Blvd Dept Univ Assn "
    "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec"
)
# Dotted acronyms and degrees: "U.S", "e.g", "i.e", "a.m", "Ph.D", "B.Sc" (the final "." is the stop itself).
_DOTTED = re.compile(r"(?:[A-Za-z]{1,2}\.)+[A-Za-z]{1,2}")
# Characters looked at around a stop: longer than any abbreviation or sentence opener.
_WINDOW = 24
# What numbers a list item: "3", "(3", "IV", "b".
_ENUMERATOR = re.compile(r"\(?(?:\d{1,3}|[IVXLC]{1,6}|[A-Za-z])")
# After an abbreviation, acronym or initial, a new sentence is assumed only before one of these common openers
# ("... in the U.S. The ..." splits; "U.S. Army" and "J. R. R. Tolkien" do not).
_SENTENCE_STARTERS = _word_set(
    "The A An This That These Those There It Its He She His Her They Their We Our In On At As By For From To "
    "With After Before During Since Although Though While When Where However Following Despite According "
    "Many Most Some Several Both All Each Other Such One Today Later Then Thus Also But And If Because Unlike "
    "Upon Under Between Within Over Of"
)


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences with a few fast rules.

    Rules:

    - A sentence ends at ``.``, ``!``, ``?``, ``…`` or a run of them (``...``, ``?!``), plus any closing quotes or
      brackets right after it (``"Stop." Then`` splits after the quote), when whitespace follows and the next
      word begins with an upper-case letter or a digit, possibly behind an opening quote or bracket. So ``3.5``
      and ``example.com`` never split (no whitespace), nor does ``e.g. the`` or ``... and then`` (lower case).
    - A single ``.`` after a known abbreviation (``Dr.``, ``St.``, ``No.``, ``etc.``, ``Inc.``, months), a dotted
      acronym (``U.S.``, ``e.g.``, ``Ph.D.``) or a capital initial (``J. R. R. Tolkien``) ends a sentence only
      when the next word is a common sentence opener (``The``, ``He``, ``In``, ...).
    - A list enumerator (``11.``, ``IV.``, ``b.``) at the start of a sentence does not end it.

    Args:
        text: one paragraph; newlines count as spaces.

    Returns:
        The sentences, stripped, in order; an empty list for blank text.

    >>> split_sentences('Dr. J. R. R. Tolkien earned 3.5 marks in the U.S. He said "No." Then he left...')
    ['Dr. J. R. R. Tolkien earned 3.5 marks in the U.S.', 'He said "No."', 'Then he left...']
    """
    sentences: list[str] = []
    start = 0
    for match in _STOP.finditer(text):
        # A list enumerator ("11. The ...", "IV. Later ...") opens a sentence rather than being one.
        if _ends_sentence(text, match) and not _ENUMERATOR.fullmatch(text[start : match.start()].strip()):
            sentences.append(text[start : match.end(2)].strip())
            start = match.end()
    rest = text[start:].strip()
    if rest:
        sentences.append(rest)
    return sentences


def _ends_sentence(text: str, match: re.Match[str]) -> bool:
    """Whether the candidate stop ``match`` in ``text`` ends a sentence (see :func:`split_sentences`)."""
    following = _next_word(text, match.end())
    first = following.lstrip(_OPENERS)[:1]
    if not (first.isupper() or first.isdigit()):
        return False
    if match.group(1) != ".":
        return True
    if _is_abbreviation(_word_before(text, match.start()).lstrip(_OPENERS)):
        # Trailing "," or ";" still marks a full word; a trailing "." ("A. A. Milne") marks another initial.
        return following.rstrip(",;:") in _SENTENCE_STARTERS
    return True


def _next_word(text: str, index: int) -> str:
    """The word starting at ``index`` (only its first :data:`_WINDOW` characters matter)."""
    words = text[index : index + _WINDOW].split(maxsplit=1)
    return words[0] if words else ""


def _word_before(text: str, end: int) -> str:
    """The word ending at ``end``, or "" when it is longer than :data:`_WINDOW` (no abbreviation is)."""
    # A bounded window keeps this O(1) per stop; split() also breaks at no-break spaces ("C.\xa0P.").
    window = text[max(0, end - _WINDOW) : end]
    words = window.split()
    if not words or (end > _WINDOW and len(words[-1]) == len(window)):
        return ""
    return words[-1]


def _is_abbreviation(word: str) -> bool:
    """Whether ``word`` (the text before a ".") is an abbreviation, dotted acronym or capital initial."""
    if word in _ABBREVIATIONS or (len(word) == 1 and word.isupper()):
        return True
    return _DOTTED.fullmatch(word) is not None


# Section headings in WikiExtractor output are short lines ending in "." ("Early life and education.").
HEADING_MAX_WORDS = 8
# The first line is usually the lead sentence, verbless on list and year pages ("Events in the year 2018 in
# Nepal."), so there only very short lines ("Results.", "Early life.") count as headings.
LEAD_HEADING_MAX_WORDS = 2
# One-line paragraphs that are real sentences almost always hold one of these ("He died in 1990.").
_SENTENCE_WORDS = _word_set(
    "is was are were be been being am has have had will would can could may might shall should must do does did "
    "he she it they we i you there"
)
_INNER_STOP = re.compile(r"[.!?]\s")


def is_heading(line: str, *, first: bool = False) -> bool:
    """Whether a WikiExtractor line is a section heading, by a heuristic.

    WikiExtractor writes each heading as its own line with a "." appended. A line counts as a heading when it
    ends in ".", has at most :data:`HEADING_MAX_WORDS` words, holds no earlier sentence stop, and contains none of
    the auxiliary verbs and subject pronouns that short real sentences almost always have; the first line of a
    document must have at most :data:`LEAD_HEADING_MAX_WORDS` words. On enwiki this drops
    "Career.", "Early life and education." and "Fort Lauderdale City Commissioner (2003–2006)." while keeping
    "He died in 1990." and "This species was described from Ghana."; a rare short sentence without such a word
    ("Hayakawa played for Yomiuri Beleza.") is dropped too.

    Args:
        line: one stripped line of text.
        first: whether it is the document's first line after the title.

    Returns:
        True for a heading.
    """
    if not line.endswith("."):
        return False
    words = line.split()
    if len(words) > (LEAD_HEADING_MAX_WORDS if first else HEADING_MAX_WORDS) or _INNER_STOP.search(line) is not None:
        return False
    return not any(word.strip("\"'()[],.;:").lower() in _SENTENCE_WORDS for word in words)


# Table rows, tags and bare links that WikiExtractor leaves behind ("! colspan=3 | Career", "<onlyinclude>").
_MARKUP = re.compile(r"[!|<]|\{\||https?://\S+$")


def is_markup(line: str) -> bool:
    """Whether a WikiExtractor line is leftover markup rather than prose.

    A line is markup when it starts like a wiki table row or cell (``!``, ``|``, ``{|``) or an HTML tag (``<``),
    or is nothing but a URL.

    Args:
        line: one stripped line of text.

    Returns:
        True for markup.
    """
    return _MARKUP.match(line) is not None


# ---------------------------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------------------------

_OPEN_COMPRESSED: dict[str, Callable[..., BinaryIO]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# Bytes that are not UTF-8 come back from "surrogateescape" as lone surrogates U+DC80..U+DCFF, one per byte;
# valid UTF-8 can never decode to these, so counting them counts the bad bytes exactly.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def resolve_files(path: Path) -> list[Path]:
    """The files to read: ``path`` itself, or every file under the folder ``path``.

    Args:
        path: a file or a folder (searched recursively).

    Returns:
        Files sorted by their path relative to ``path`` (so the order does not depend on the file system);
        hidden files and anything inside hidden folders are skipped.

    Raises:
        BvrError: the path does not exist, or the folder holds no visible files.
    """
    path = Path(path).expanduser()
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise BvrError("no such file or folder", where=path, hint="check the corpus path")
    files = [
        file
        for file in path.rglob("*")
        if file.is_file() and not any(part.startswith(".") for part in file.relative_to(path).parts)
    ]
    if not files:
        raise BvrError("the folder holds no (non-hidden) files", where=path, hint="check the corpus path")
    return sorted(files, key=lambda file: file.relative_to(path).as_posix())


def _read_lines(path: Path, stats: CorpusStats) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` for each line of ``path``, newline stripped; bad bytes replaced and counted."""
    stats.files += 1
    opener = _OPEN_COMPRESSED.get(path.suffix, open)
    with opener(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            yield number, _decode(raw, stats).rstrip("\r\n")


def _decode(raw: bytes, stats: CorpusStats) -> str:
    """Decode one line as UTF-8, replacing each undecodable byte by U+FFFD and counting it."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "surrogateescape")
        text, replaced = _ESCAPED_BYTE.subn("\ufffd", text)
        stats.undecodable_bytes += replaced
        return text


def _drop_wiki_line(line: str, index: int, stats: CorpusStats) -> bool:
    """Whether a WikiExtractor line is a heading or table markup; counts it if so."""
    if is_heading(line, first=index == 0):
        stats.headings_dropped += 1
        return True
    if is_markup(line):
        stats.markup_lines_dropped += 1
        return True
    return False


def _make_document(
    doc_id: str, title: str, paragraphs: Iterable[str], stats: CorpusStats, *, drop_wiki_lines: bool
) -> Document | None:
    """Split paragraphs into sentences and count them; None (counted as empty) when nothing is left.

    ``drop_wiki_lines`` drops WikiExtractor headings and markup first.
    """
    sentences: list[str] = []
    for index, paragraph in enumerate(paragraphs):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if drop_wiki_lines and _drop_wiki_line(paragraph, index, stats):
            continue
        stats.paragraphs += 1
        sentences.extend(split_sentences(paragraph))
    if not sentences:
        stats.empty_documents += 1
        return None
    stats.add_document(sentences)
    return {"doc_id": doc_id, "title": title, "sentences": sentences}


# ---------------------------------------------------------------------------------------------------------------
# WikiExtractor
# ---------------------------------------------------------------------------------------------------------------

_DOC_OPEN = re.compile(r"<doc(?:\s[^>]*)?>")
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_WIKI_HINT = "is this WikiExtractor output? For one paragraph per line use --source text"


@dataclass
class _OpenDoc:
    """A ``<doc>`` block being read: where it started and its lines so far."""

    doc_id: str
    title: str
    line: int
    lines: list[str]


def read_wikiextractor(paths: Iterable[Path], stats: CorpusStats) -> Iterator[Document]:
    """Read WikiExtractor output files into documents.

    Args:
        paths: files of ``<doc ...>`` ... ``</doc>`` blocks, read in order.
        stats: counts to update (files, documents, empty documents, headings, bytes, ...).

    Yields:
        ``{"doc_id", "title", "sentences"}`` per document with at least one sentence; HTML entities such as
        ``&amp;`` are unescaped, the title line and headings dropped. Empty documents are counted and skipped.

    Raises:
        BvrError: at ``file:line``, for text outside a ``<doc>`` block, a ``<doc>`` opened inside another, a
            ``</doc>`` with no ``<doc>``, or a ``<doc>`` never closed.
    """
    for path in paths:
        yield from _wiki_file(Path(path), stats)


def _wiki_file(path: Path, stats: CorpusStats) -> Iterator[Document]:
    """Documents of one WikiExtractor file (see :func:`read_wikiextractor`)."""
    doc: _OpenDoc | None = None
    for number, line in _read_lines(path, stats):
        where = f"{path}:{number}"
        if _DOC_OPEN.match(line):
            if doc is not None:
                raise BvrError(f"<doc> opened inside the <doc> of line {doc.line}", where=where, hint=_WIKI_HINT)
            doc = _open_doc(line, path, number)
        elif line.strip() == "</doc>":
            if doc is None:
                raise BvrError("</doc> without an opening <doc>", where=where, hint=_WIKI_HINT)
            document = _close_doc(doc, stats)
            if document is not None:
                yield document
            doc = None
        elif doc is not None:
            doc.lines.append(line)
        elif line.strip():
            raise BvrError("text outside a <doc ...> block", where=where, hint=_WIKI_HINT)
    if doc is not None:
        raise BvrError("<doc> never closed by </doc>", where=f"{path}:{doc.line}", hint=_WIKI_HINT)


def _open_doc(line: str, path: Path, number: int) -> _OpenDoc:
    """Start a document from its ``<doc id=".." title="..">`` line; a missing id falls back to ``file:line``."""
    attributes = {key: html.unescape(value) for key, value in _ATTRIBUTE.findall(line)}
    doc_id = attributes.get("id") or f"{path.name}:{number}"
    return _OpenDoc(doc_id=doc_id, title=attributes.get("title", ""), line=number, lines=[])


def _close_doc(doc: _OpenDoc, stats: CorpusStats) -> Document | None:
    """Turn a finished block into a document, dropping the line that repeats the title."""
    # Entities are unescaped first: the title attribute is, and the title line must compare equal to it.
    lines = [html.unescape(line).strip() if "&" in line else line.strip() for line in doc.lines]
    lines = [line for line in lines if line]
    if lines and lines[0] == doc.title.strip():
        lines = lines[1:]
    return _make_document(doc.doc_id, doc.title, lines, stats, drop_wiki_lines=True)


# ---------------------------------------------------------------------------------------------------------------
# Plain text
# ---------------------------------------------------------------------------------------------------------------


def read_plain_text(paths: Iterable[Path], stats: CorpusStats, *, root: Path | None = None) -> Iterator[Document]:
    """Read plain text files: one paragraph per line, one or more blank lines between documents.

    Args:
        paths: text files, read in order.
        stats: counts to update.
        root: folder the files were found under; document ids name files relative to it so that equal file
            names in different folders stay distinct. Without it, ids use the bare file name.

    Yields:
        ``{"doc_id": "NAME:LINE", "title": "", "sentences"}``, LINE being the document's first line number.

    Raises:
        BvrError: at ``file:line``, for a NUL byte (a binary file, not text).
    """
    for path in paths:
        path = Path(path)
        name = path.relative_to(root).as_posix() if root is not None and path != root else path.name
        yield from _text_file(path, name, stats)


def _text_file(path: Path, name: str, stats: CorpusStats) -> Iterator[Document]:
    """Documents of one plain text file (see :func:`read_plain_text`)."""
    first, block = 0, []
    for number, line in _read_lines(path, stats):
        if "\0" in line:
            raise BvrError("NUL byte: this is a binary file, not text", where=f"{path}:{number}")
        if line.strip():
            first = first if block else number
            block.append(line)
        elif block:
            yield from _optional(_make_document(f"{name}:{first}", "", block, stats, drop_wiki_lines=False))
            block = []
    if block:
        yield from _optional(_make_document(f"{name}:{first}", "", block, stats, drop_wiki_lines=False))


def _optional(document: Document | None) -> Iterator[Document]:
    """Yield the document unless it is None."""
    if document is not None:
        yield document


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face datasets
# ---------------------------------------------------------------------------------------------------------------

# Local data files by suffix → the `datasets` packaged builder that reads them.
_HF_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
_HF_HINT = "pass a local path: a data file or folder, or a folder written by Dataset.save_to_disk"


def read_hf_dataset(
    name_or_path: str,
    stats: CorpusStats,
    *,
    text_column: str = "text",
    split: str = "train",
    config_name: str | None = None,
) -> Iterator[Document]:
    """Read a Hugging Face dataset, one document per row.

    ``name_or_path`` is tried as, in order: a folder written by ``save_to_disk`` (``datasets.load_from_disk``),
    a local data file or folder (``datasets.load_dataset``, streamed; ``.txt`` files give one row per block of
    lines between blank lines), then a hub id (streamed).

    Args:
        name_or_path: local path or hub id.
        stats: counts to update.
        text_column: the column holding the text; newlines in it separate paragraphs.
        split: the split to read.
        config_name: the dataset configuration (hub datasets with several).

    Yields:
        ``{"doc_id", "title", "sentences"}``: doc_id from an ``id`` column if there is one, else
        ``"SPLIT:ROW"``; title from a ``title`` column if there is one, else "".

    Raises:
        BvrError: a missing path, split or column, an unreadable file, or a hub that cannot be reached.
    """
    rows = _open_hf(name_or_path, split, config_name, stats)
    for index, row in enumerate(rows):
        if index == 0:
            _check_text_column(row, text_column, name_or_path)
        doc_id = str(row["id"]) if row.get("id") is not None else f"{split}:{index}"
        paragraphs = (row[text_column] or "").splitlines()
        title = str(row.get("title") or "")
        yield from _optional(_make_document(doc_id, title, paragraphs, stats, drop_wiki_lines=False))


def _check_text_column(row: dict[str, Any], text_column: str, where: str) -> None:
    """Refuse a first row that lacks the text column or holds something other than text in it."""
    if text_column not in row:
        raise BvrError(
            f"no column {text_column!r}; the columns are {sorted(row)}", where=where, hint="pass --text-column"
        )
    if not isinstance(row[text_column], str | None):
        kind = type(row[text_column]).__name__
        raise BvrError(f"column {text_column!r} holds {kind}, not text", where=where, hint="pass --text-column")


def _open_hf(name_or_path: str, split: str, config_name: str | None, stats: CorpusStats) -> Iterable[dict[str, Any]]:
    """The rows of the dataset named by ``name_or_path`` (see :func:`read_hf_dataset`)."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
            return _hf_from_disk(path, split, stats)
        return _hf_from_files(path, split, stats)
    if name_or_path.startswith((".", "/", "~")) or path.suffix in _HF_BUILDERS:
        raise BvrError("no such file or folder", where=name_or_path, hint="check the path")
    return _hf_from_hub(name_or_path, split, config_name)


def _hf_from_disk(path: Path, split: str, stats: CorpusStats) -> datasets.Dataset:
    """A dataset folder written by ``save_to_disk``; the split is chosen from a ``DatasetDict``."""
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise BvrError(f"no split {split!r}; the splits are {sorted(loaded)}", where=path, hint="pass --hf-split")
        loaded = loaded[split]
    stats.files += len(loaded.cache_files)
    return loaded


def _hf_from_files(path: Path, split: str, stats: CorpusStats) -> datasets.IterableDataset:
    """Local data files (a file or a folder of them), streamed so nothing is cached or held in memory."""
    files = resolve_files(path)
    # Blocks of lines between blank lines are documents, as for --source text (datasets' "paragraph" sampling).
    kwargs: dict[str, Any] = {"sample_by": "paragraph"} if {file.suffix for file in files} == {".txt"} else {}
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


def _hf_from_hub(name: str, split: str, config_name: str | None) -> datasets.IterableDataset:
    """A hub dataset, streamed; any failure to reach it becomes a :class:`BvrError`."""
    try:
        return datasets.load_dataset(name, config_name, split=split, streaming=True)
    except (ConnectionError, OSError, ValueError) as exc:
        raise BvrError(f"cannot load {name!r} from the Hugging Face hub ({exc})", where=name, hint=_HF_HINT) from exc


# ---------------------------------------------------------------------------------------------------------------
# Sources, split, build
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SourceOptions:
    """Reader settings that only some sources use."""

    text_column: str
    hf_split: str
    hf_config: str | None
    progress: bool


def _wikiextractor_source(
    path: str | Path, stats: CorpusStats, options: _SourceOptions
) -> Generator[Document, None, None]:
    """Documents from WikiExtractor files, with a progress bar over files."""
    files = track(resolve_files(Path(path)), description="Reading files", disable=not options.progress)
    yield from read_wikiextractor(files, stats)


def _text_source(path: str | Path, stats: CorpusStats, options: _SourceOptions) -> Generator[Document, None, None]:
    """Documents from plain text files, with a progress bar over files."""
    path = Path(path).expanduser()
    files = track(resolve_files(path), description="Reading files", disable=not options.progress)
    yield from read_plain_text(files, stats, root=path if path.is_dir() else path.parent)


def _hf_source(path: str | Path, stats: CorpusStats, options: _SourceOptions) -> Generator[Document, None, None]:
    """Documents from a Hugging Face dataset, with a progress bar over documents (the file count is unknown)."""
    documents = read_hf_dataset(
        str(path), stats, text_column=options.text_column, split=options.hf_split, config_name=options.hf_config
    )
    yield from track(documents, description="Reading documents", disable=not options.progress)


# Each reader is a generator, so that closing it ends its progress bar and closes its open file.
READERS: dict[str, Callable[[str | Path, CorpusStats, _SourceOptions], Generator[Document, None, None]]] = {
    "wikiextractor": _wikiextractor_source,
    "text": _text_source,
    "hf": _hf_source,
}
SOURCES = tuple(READERS)


def is_validation(doc_id: str, fraction: float, seed: int) -> bool:
    """Whether a document belongs to the validation split.

    The choice is a stable hash of ``(seed, doc_id)`` (BLAKE2b, not ``hash()``, which changes per process), so it
    depends neither on reading order nor on the process, and a document's split never changes when the corpus
    grows.

    Args:
        doc_id: the document's id.
        fraction: the expected share of validation documents, in [0, 1].
        seed: changes which documents are chosen.

    Returns:
        True for validation.
    """
    return split_rank(doc_id, seed) < fraction * 2**64


def split_rank(doc_id: str, seed: int) -> int:
    """A document's place in [0, 2**64) for the split: BLAKE2b of ``(seed, doc_id)``; the lowest are validation."""
    digest = hashlib.blake2b(f"{seed}\0{doc_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def build_corpus(
    source: str,
    path: str | Path,
    out_dir: Path,
    *,
    validation_fraction: float = 0.01,
    split_seed: int = 0,
    max_documents: int | None = None,
    text_column: str = "text",
    hf_split: str = "train",
    hf_config: str | None = None,
    min_validation_documents: int = 0,
    progress: bool = True,
) -> CorpusStats:
    """Read a corpus and write it to ``out_dir`` as a ``DatasetDict`` (train, validation) plus ``corpus_stats.json``.

    Documents stream from the reader into Arrow files one at a time, so memory does not grow with the corpus.
    The corpus is built in a hidden sibling folder and renamed into place at the end, so an interrupted run
    leaves ``out_dir`` as it was.

    Args:
        source: one of :data:`SOURCES`.
        path: the corpus file or folder, or (for "hf") a dataset path or hub id.
        out_dir: where the corpus goes; an existing corpus there is replaced.
        validation_fraction: expected share of documents in the validation split, in [0, 1).
        split_seed: seed of the train/validation choice (see :func:`is_validation`).
        max_documents: stop after this many documents (for quick runs); None reads everything.
        text_column: ("hf") the column holding the text.
        hf_split: ("hf") the split to read.
        hf_config: ("hf") the dataset configuration.
        min_validation_documents: when the hash puts fewer documents in validation, move the training documents
            with the lowest :func:`split_rank` (the nearest to being chosen) over until there are this many, so a
            small corpus still has a validation split; a corpus that would then have no training document is an
            error.
        progress: show a progress bar.

    Returns:
        The counts, also written to ``out_dir/corpus_stats.json``.

    Raises:
        BvrError: an unknown source, a bad fraction, unreadable input, no documents at all (or too few for
            ``min_validation_documents``), or an ``out_dir`` that holds something other than a corpus.
    """
    _check_build_args(source, validation_fraction, max_documents)
    out_dir = Path(out_dir).expanduser()
    _check_replaceable(out_dir)
    stats = CorpusStats(source=source, path=str(path))
    options = _SourceOptions(text_column, hf_split, hf_config, progress)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = out_dir.with_name(f".{out_dir.name}.building-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with closing(READERS[source](path, stats, options)) as documents:
            _write_arrow(documents, work / "stream", stats, validation_fraction, split_seed, max_documents)
        if stats.documents == 0:
            raise BvrError(f"no documents found. {stats.summary()}", where=path, hint="check --source and the path")
        if stats.documents <= min_validation_documents:
            raise BvrError(f"{stats.documents} document(s) found: too few to hold out {min_validation_documents} for "
                           "validation and train on the rest", where=path,
                           hint=f"use a corpus of at least {min_validation_documents + 1} documents (in plain text, "
                                "a blank line ends a document)")
        _save_corpus(work / "stream", work / "corpus", stats, min_validation_documents, split_seed, progress=progress)
        _replace_dir(work / "corpus", out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return stats


def _check_build_args(source: str, validation_fraction: float, max_documents: int | None) -> None:
    """Refuse an unknown source, a fraction outside [0, 1) or a non-positive document limit."""
    if source not in READERS:
        raise BvrError(f"unknown corpus source {source!r}", where="source", hint=f"use one of {', '.join(SOURCES)}")
    if not 0 <= validation_fraction < 1:
        raise BvrError(f"{validation_fraction} is not in [0, 1)", where="validation_fraction")
    if max_documents is not None and max_documents < 1:
        raise BvrError(f"{max_documents} is not a positive number", where="max_documents")


def _check_replaceable(out_dir: Path) -> None:
    """Refuse to replace a folder that holds anything but a corpus: it is deleted when the new one lands."""
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / STATS_FILE).exists():
        raise BvrError(
            "exists and is not a corpus written by bvr", where=out_dir, hint="choose an empty or new output folder"
        )


def _write_arrow(
    documents: Iterable[Document],
    folder: Path,
    stats: CorpusStats,
    fraction: float,
    seed: int,
    max_documents: int | None,
) -> None:
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
    corpus = datasets.DatasetDict(
        {split: datasets.Dataset.from_file(str(stream / f"{split}.arrow"), split=split) for split in SPLITS}
    )
    missing = min_validation - len(corpus["validation"])
    if missing > 0:
        corpus = _move_to_validation(corpus, missing, seed)
        stats.train_documents -= missing
        stats.validation_documents += missing
        stats.validation_documents_from_train = missing
    # datasets writes no shard at all for an empty split and then cannot load it: ask for one shard there.
    empty = {split: 1 for split, dataset in corpus.items() if len(dataset) == 0}
    with _datasets_progress(progress):
        corpus.save_to_disk(str(folder), num_shards=empty)
    (folder / STATS_FILE).write_text(json.dumps(asdict(stats), indent=2) + "\n", encoding="utf-8")


def _move_to_validation(corpus: datasets.DatasetDict, count: int, seed: int) -> datasets.DatasetDict:
    """Move the ``count`` training documents of lowest :func:`split_rank` to validation (after its own documents)."""
    train = corpus["train"]
    ranks = [split_rank(doc_id, seed) for doc_id in train["doc_id"]]
    moved = sorted(sorted(range(len(ranks)), key=ranks.__getitem__)[:count])
    kept = sorted(set(range(len(ranks))) - set(moved))
    validation = datasets.concatenate_datasets([corpus["validation"], train.select(moved)])
    return datasets.DatasetDict({"train": train.select(kept), "validation": validation})


@contextmanager
def _datasets_progress(enabled: bool) -> Iterator[None]:
    """Silence the ``datasets`` progress bars inside the block when ``enabled`` is False, then restore them."""
    silence = not enabled and datasets.is_progress_bar_enabled()
    if silence:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if silence:
            datasets.enable_progress_bars()


def _replace_dir(built: Path, out_dir: Path) -> None:
    """Move ``built`` to ``out_dir``, replacing what is there with two renames and no half-written state."""
    old = out_dir.with_name(f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}")
    if out_dir.exists():
        out_dir.rename(old)
    built.rename(out_dir)
    shutil.rmtree(old, ignore_errors=True)


def load_corpus(out_dir: Path) -> datasets.DatasetDict:
    """Open a corpus written by :func:`build_corpus`, memory-mapped.

    Args:
        out_dir: the folder given to :func:`build_corpus`.

    Returns:
        The ``DatasetDict`` with ``train`` and ``validation`` splits.

    Raises:
        BvrError: there is no corpus in ``out_dir``.
    """
    out_dir = Path(out_dir).expanduser()
    if not (out_dir / "dataset_dict.json").exists():
        raise BvrError("no prepared corpus here", where=out_dir, hint="run `bvr data prepare`")
    return datasets.load_from_disk(str(out_dir))
