"""The corpus readers of files: WikiExtractor output, WikiText and plain text → documents, counted in a
:class:`~bvr.corpus.stats.CorpusStats` (Hugging Face datasets: :mod:`bvr.corpus.hf_reader`; the source table,
:data:`~bvr.corpus.sources.READERS`: :mod:`bvr.corpus.sources`)."""

from __future__ import annotations

import bz2
import gzip
import html
import lzma
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bvr.corpus.sentences import is_heading, is_markup, is_template_debris, split_sentences
from bvr.corpus.stats import CorpusStats, Document
from bvr.errors import BvrError

# --- Files ------------------------------------------------------------------------------------------------------------

_OPEN_COMPRESSED: dict[str, Callable[..., BinaryIO]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# Bytes that are not UTF-8 come back from "surrogateescape" as lone surrogates U+DC80..U+DCFF, one per byte;
# valid UTF-8 can never decode to these, so counting them counts the bad bytes exactly.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def resolve_files(path: Path) -> list[Path]:
    """The files to read: ``path`` itself, or every file under the folder ``path`` but hidden ones (and those in
    hidden folders), sorted by their path relative to ``path`` so the order does not depend on the file system."""
    path = Path(path).expanduser()
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise BvrError("no such file or folder", where=path, hint="check the corpus path")
    files = [file for file in path.rglob("*")
             if file.is_file() and not any(part.startswith(".") for part in file.relative_to(path).parts)]
    if not files:
        raise BvrError("the folder holds no (non-hidden) files", where=path, hint="check the corpus path")
    return sorted(files, key=lambda file: file.relative_to(path).as_posix())


def _read_lines(path: Path, stats: CorpusStats, *, drop_nul: bool = False) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` for each line of ``path``, newline stripped; bad bytes replaced and counted.
    ``drop_nul`` removes and counts NUL bytes (in formats whose structure is checked, a stray NUL is damage to skip;
    a binary file fails that check anyway)."""
    stats.files += 1
    opener = _OPEN_COMPRESSED.get(path.suffix, open)
    with opener(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if drop_nul and b"\0" in raw:
                stats.nul_bytes_dropped += raw.count(b"\0")
                raw = raw.replace(b"\0", b"")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:  # each undecodable byte becomes U+FFFD, counted
                text, replaced = _ESCAPED_BYTE.subn("\ufffd", raw.decode("utf-8", "surrogateescape"))
                stats.undecodable_bytes += replaced
            yield number, text.rstrip("\r\n")


def _file_name(path: Path, root: Path | None) -> str:
    """How document ids name a file: relative to ``root`` when given, else its bare name."""
    return path.relative_to(root).as_posix() if root is not None and path != root else path.name


def document_of(doc_id: str, title: str, paragraphs: Iterable[str], stats: CorpusStats, *,
                drop_wiki_lines: bool = False) -> Iterator[Document]:
    """Yield the paragraphs split into sentences as one document, counted; nothing (counted as empty) when nothing
    is left.

    ``drop_wiki_lines`` drops WikiExtractor headings and markup lines first (counted), then sentences with template
    debris.
    """
    sentences: list[str] = []
    for index, paragraph in enumerate(paragraphs):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if drop_wiki_lines and is_heading(paragraph, first=index == 0):
            stats.headings_dropped += 1
            continue
        if drop_wiki_lines and is_markup(paragraph):
            stats.markup_lines_dropped += 1
            continue
        kept = split_sentences(paragraph)
        if drop_wiki_lines:  # sentences with template debris (is_template_debris), counted
            clean = [sentence for sentence in kept if not is_template_debris(sentence)]
            stats.markup_sentences_dropped += len(kept) - len(clean)
            kept = clean
        if kept:
            stats.paragraphs += 1
            sentences.extend(kept)
    if not sentences:
        stats.empty_documents += 1
        return
    stats.add_document(sentences)
    yield {"doc_id": doc_id, "title": title, "sentences": sentences}


# --- WikiExtractor ----------------------------------------------------------------------------------------------------

_DOC_OPEN = re.compile(r"<doc(?:\s[^>]*)?>")
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_WIKI_HINT = "is this WikiExtractor output? For one paragraph per line use --set corpus.source=text"


@dataclass
class _OpenDoc:
    """A ``<doc>`` block being read: where it started and its lines so far."""

    doc_id: str
    title: str
    line: int
    lines: list[str]


def read_wikiextractor(paths: Iterable[Path], stats: CorpusStats) -> Iterator[Document]:
    """Read files of ``<doc ...>`` ... ``</doc>`` blocks into documents: HTML entities such as ``&amp;`` unescaped,
    the title line and headings dropped; empty documents and NUL bytes dropped and counted. A broken block structure
    is an error at ``file:line``."""
    for path in map(Path, paths):
        doc: _OpenDoc | None = None
        for number, line in _read_lines(path, stats, drop_nul=True):
            where = f"{path}:{number}"
            if _DOC_OPEN.match(line):
                if doc is not None:
                    raise BvrError(f"<doc> opened inside the <doc> of line {doc.line}", where=where, hint=_WIKI_HINT)
                attributes = {key: html.unescape(value) for key, value in _ATTRIBUTE.findall(line)}
                doc_id = attributes.get("id") or f"{path.name}:{number}"  # a missing id falls back to file:line
                doc = _OpenDoc(doc_id=doc_id, title=attributes.get("title", ""), line=number, lines=[])
            elif line.strip() == "</doc>":
                if doc is None:
                    raise BvrError("</doc> without an opening <doc>", where=where, hint=_WIKI_HINT)
                # Entities are unescaped first: the title attribute is, and the title line must compare equal to it.
                lines = [html.unescape(text).strip() if "&" in text else text.strip() for text in doc.lines]
                lines = [text for text in lines if text]
                if lines and lines[0] == doc.title.strip():
                    lines = lines[1:]  # the line that repeats the title
                yield from document_of(doc.doc_id, doc.title, lines, stats, drop_wiki_lines=True)
                doc = None
            elif doc is not None:
                doc.lines.append(line)
            elif line.strip():
                raise BvrError("text outside a <doc ...> block", where=where, hint=_WIKI_HINT)
        if doc is not None:
            raise BvrError("<doc> never closed by </doc>", where=f"{path}:{doc.line}", hint=_WIKI_HINT)


# --- Plain text -------------------------------------------------------------------------------------------------------


def read_plain_text(paths: Iterable[Path], stats: CorpusStats, *, root: Path | None = None) -> Iterator[Document]:
    """Read plain text files: one paragraph per line, one or more blank lines between documents.

    This is the one plain-text rule: ``--source text`` and local ``.txt`` files read with ``--source hf`` both
    come here. A line holding only whitespace counts as blank; ``\\r\\n`` line ends are accepted. Document ids are
    ``NAME:LINE`` (the document's first line), NAME relative to ``root`` when given so that equal file names in
    different folders stay distinct. A NUL byte (a binary file) or a first line that is a WikiText title
    (``= Title =``) is an error.
    """
    for path in map(Path, paths):
        name = _file_name(path, root)
        first, block, seen_text = 0, [], False
        for number, line in _read_lines(path, stats):
            if "\0" in line:
                raise BvrError("NUL byte: this is a binary file, not text", where=f"{path}:{number}")
            if line.strip():
                if not seen_text and _wikitext_level(line) == 1:
                    raise BvrError("this looks like WikiText: its first line is a '= Title =' heading, and as plain "
                                   "text every section would become a document", where=f"{path}:{number}",
                                   hint="read it with corpus.source=wikitext")
                seen_text = True
                first = first if block else number
                block.append(line)
            elif block:
                yield from document_of(f"{name}:{first}", "", block, stats)
                block = []
        if block:
            yield from document_of(f"{name}:{first}", "", block, stats)


# --- WikiText ---------------------------------------------------------------------------------------------------------

# "= Title =", "= = Section = =", "= = = Subsection = = =": as many "= " before the text as " =" after it.
_WIKITEXT_HEADING = re.compile(r"((?:= )+)(.*?\S)((?: =)+)")
_WIKITEXT_HINT = "is this a WikiText file (articles opened by '= Title =' lines)? For plain text use --source text"


def _wikitext_level(line: str) -> int:
    """The heading level of a WikiText line (1 for ``= Title =``, 2 for ``= = Section = =``), 0 for text."""
    match = _WIKITEXT_HEADING.fullmatch(line.strip())
    if match is None or len(match.group(1)) != len(match.group(3)):
        return 0
    return len(match.group(1)) // 2


def read_wikitext(paths: Iterable[Path], stats: CorpusStats, *, root: Path | None = None) -> Iterator[Document]:
    """Read WikiText files (``wiki.train.raw`` of wikitext-103/-2, raw or tokenized) into one document per article.

    An article starts at a top-level ``= Title =`` line and runs to the next one, so its sections stay in one
    document (and on one side of the train/validation split). Section headings (``= = Section = =`` and deeper)
    are dropped and counted in ``headings_dropped``; every other non-blank line is a paragraph. A heading is such a
    line with blank lines around it, as WikiText writes every heading (or the file's first line, which can be
    nothing else): a formula shaped ``= a = b =`` amid an article's text stays text. The text is kept as written
    (WikiText's ``@-@`` and spaced punctuation included). NUL bytes are dropped and counted. Ids are
    ``NAME:LINE`` as in :func:`read_plain_text`, LINE that of the title; text before the first title is an error.
    """
    for path in map(Path, paths):
        name = _file_name(path, root)
        article: _OpenDoc | None = None
        for number, text, framed in _framed_lines(_read_lines(path, stats, drop_nul=True)):
            level = _wikitext_level(text) if framed or article is None else 0
            if level == 1:
                if article is not None:
                    yield from document_of(article.doc_id, article.title, article.lines, stats)
                title = _WIKITEXT_HEADING.fullmatch(text).group(2)  # type: ignore[union-attr]
                article = _OpenDoc(doc_id=f"{name}:{number}", title=title, line=number, lines=[])
            elif article is None:
                raise BvrError("text before the first '= Title =' line", where=f"{path}:{number}",
                               hint=_WIKITEXT_HINT)
            elif level > 1:
                stats.headings_dropped += 1
            else:
                article.lines.append(text)
        if article is not None:
            yield from document_of(article.doc_id, article.title, article.lines, stats)


def _framed_lines(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str, bool]]:
    """``(line number, text, framed)`` of each non-blank line, stripped; framed: the lines before and after it are
    blank (or the file's start or end), as around every WikiText heading."""
    held: tuple[int, str, bool] | None = None  # the last non-blank line, waiting for the next; blank before it
    blank_before = True
    for number, line in lines:
        text = line.strip()
        if held is not None:
            yield held[0], held[1], held[2] and not text
            held = None
        if text:
            held = (number, text, blank_before)
        blank_before = not text
    if held is not None:
        yield held


def id_root(path: Path) -> Path:
    """The folder document ids name files relative to: ``path`` itself when it is a folder, else its parent."""
    return path if path.is_dir() else path.parent
