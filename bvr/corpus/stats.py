"""What a corpus is made of (:data:`Document`) and what a build of one counted (:class:`CorpusStats`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Document = dict[str, Any]
"""One document: ``{"doc_id": str, "title": str, "sentences": list[str]}``."""

@dataclass
class CorpusStats:
    """What a corpus build read and what it skipped (documents, sentences, words and characters count what was kept,
    words split on whitespace); JSON-serialisable with ``dataclasses.asdict``.

    Attributes:
        empty_documents: documents skipped because nothing was left after dropping title, headings and markup.
        undecodable_bytes: bytes that were not valid UTF-8, each replaced by U+FFFD.
        nul_bytes_dropped: NUL bytes removed from WikiExtractor and WikiText files (plain text with one is refused
            as binary).
        headings_dropped: WikiExtractor's heading lines (:func:`~bvr.corpus.sentences.is_heading`) and WikiText's
            ``= = Section = =`` lines.
        markup_sentences_dropped: WikiExtractor sentences with leftovers of unexpanded templates (``}}{{``, ``#if:``).
        validation_documents_from_train: of the validation documents, how many were moved from train to reach the
            minimum.
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
    nul_bytes_dropped: int = 0
    headings_dropped: int = 0
    markup_lines_dropped: int = 0
    markup_sentences_dropped: int = 0
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
            f"{self.markup_lines_dropped:,} markup lines"
            + (f" and {self.markup_sentences_dropped:,} sentences of template markup"
               if self.markup_sentences_dropped else "") + "; "
            f"replaced {self.undecodable_bytes:,} undecodable bytes with U+FFFD"
            + (f" and dropped {self.nul_bytes_dropped:,} NUL bytes. " if self.nul_bytes_dropped else ". ") +
            f"Split {self.train_documents:,} train / {self.validation_documents:,} validation documents"
            + (f" ({self.validation_documents_from_train:,} moved from train to reach the minimum)."
               if self.validation_documents_from_train else ".")
        )
        return text + (" Stopped early at max_documents." if self.stopped_at_max_documents else "")
