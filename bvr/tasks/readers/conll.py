"""Read CoNLL column files (format ``conll``) into :class:`Sentence` s and a :class:`ConllReport` (:func:`read_conll`),
converting IOB1 tags to IOB2 (:func:`~bvr.tasks.iob.detect_scheme`, :func:`~bvr.tasks.iob.to_iob2`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from bvr.errors import BvrError
from bvr.fs import utf8_lines
from bvr.tasks.iob import detect_scheme, is_tag, to_iob2

DOCSTART = "-DOCSTART-"
CONLL_COLUMNS = 4
"""CoNLL-2003 English: token, part of speech, syntactic chunk, entity tag."""


class Sentence(NamedTuple):
    """One sentence of a CoNLL file: its words, one entity tag per word (IOB2 after reading unless conversion was
    turned off), and the index of its ``-DOCSTART-`` document (0 when the file has none)."""

    tokens: list[str]
    tags: list[str]
    document: int = 0


@dataclass
class ConllReport:
    """What :func:`read_conll` read and what it skipped: ``bad_lines``, the 1-based numbers of the lines with too few
    columns (skipped), ``untagged``, how many of those hold one column (a token and no tag), and ``scheme``, the
    tagging scheme found in the file ("IOB2", "IOB1" or "mixed"; see :func:`detect_scheme`)."""

    path: str
    documents: int = 0
    sentences: int = 0
    tokens: int = 0
    bad_lines: list[int] = field(default_factory=list)
    untagged: int = 0
    scheme: str = "IOB2"
    converted: bool = False

    def describe(self) -> str:
        """One line for logs and the CLI."""
        text = (f"{self.path}: {self.documents:,} documents, {self.sentences:,} sentences, {self.tokens:,} tokens, "
                f"scheme {self.scheme}{' (converted to IOB2)' if self.converted else ''}")
        if self.bad_lines:
            shown = ", ".join(map(str, self.bad_lines[:10])) + (", ..." if len(self.bad_lines) > 10 else "")
            text += f"; {len(self.bad_lines)} lines with too few columns skipped (lines {shown})"
        return text


MAX_BAD_SHARE = 0.5
"""Token lines with too few columns are skipped and reported (:meth:`ConllReport.describe`) up to this share of
the token lines; beyond it the file is another layout (a 2-column file, say) and is refused."""


def _check_enough_lines(report: ConllReport, path: Path, n_columns: int) -> None:
    """Refuse a file whose token lines mostly lack columns (another layout, or a broken export), rather than train
    on what is left of it; a file of tokens alone (one column, no tags) is named as such."""
    bad = len(report.bad_lines)
    if bad and report.tokens == 0 and report.untagged == bad:
        raise BvrError(f"no tags: each of the {bad:,} token lines has one column, the token (first at line "
                       f"{report.bad_lines[0]})", where=f"{path}:{report.bad_lines[0]}",
                       hint="a CoNLL file holds 'token POS chunk NER' lines, the entity tag last: give the tagged "
                            "file")
    if bad and bad > MAX_BAD_SHARE * (bad + report.tokens):
        raise BvrError(f"{bad:,} of {bad + report.tokens:,} token lines have fewer than {n_columns} columns "
                       f"(first at line {report.bad_lines[0]})", where=f"{path}:{report.bad_lines[0]}",
                       hint="CoNLL-2003 lines are 'token POS chunk NER', separated by spaces; pass n_columns for "
                            "other layouts")


def read_conll(path: str | Path, *, n_columns: int = CONLL_COLUMNS, convert_to_iob2: bool = True,
               labels: Sequence[str] | None = None) -> tuple[list[Sentence], ConllReport]:
    """Read a CoNLL column file: one token per line, tag in the last column, blank lines between sentences.

    ``-DOCSTART-`` lines are skipped and counted as documents; the last sentence needs no trailing blank line. Lines
    with fewer than ``n_columns`` are skipped and reported (:attr:`ConllReport.bad_lines`), a line with more is
    refused. ``labels`` are the task's tags (as written, before conversion): another tag is refused at its line.
    IOB1 (or mixed) tags are converted to IOB2, the scheme models are trained on, unless ``convert_to_iob2`` is off.
    """
    path = Path(path)
    if not path.is_file():
        raise BvrError("no such CoNLL file", where=path, hint="check the task's data paths")
    report = ConllReport(path=str(path))
    sentences: list[Sentence] = []
    words: list[tuple[str, str]] = []  # (token, tag) of the sentence being read

    def close() -> None:  # at a blank or -DOCSTART- line and at the end of the file
        if words:
            sentences.append(Sentence([token for token, _ in words], [tag for _, tag in words],
                                      max(report.documents - 1, 0)))
            report.sentences += 1
            report.tokens += len(words)
            words.clear()

    for number, line in utf8_lines(path):
        columns = line.split()
        if not columns or columns[0] == DOCSTART:
            close()
            if columns:  # a -DOCSTART- line opens a document
                report.documents += 1
        elif len(columns) < n_columns:
            report.bad_lines.append(number)
            report.untagged += int(len(columns) == 1)
        elif len(columns) > n_columns:
            # More columns than the format has means a different format (or tokens with spaces): reading on would
            # take the wrong column as the tag, so stop.
            raise BvrError(f"{len(columns)} columns where {n_columns} were expected", where=f"{path}:{number}",
                           hint="CoNLL-2003 lines are 'token POS chunk NER'; pass n_columns for other layouts")
        elif not is_tag(columns[-1]):
            raise BvrError(f"{columns[-1]!r} is not an IOB tag", where=f"{path}:{number}",
                           hint="use O, B-TYPE or I-TYPE")
        elif labels is not None and columns[-1] not in labels:
            # Refused where it is, in every split: found only when encoding, a dev sample without it passed.
            raise BvrError(f"unknown tag {columns[-1]!r}", where=f"{path}:{number}",
                           hint=f"expected one of: {', '.join(labels)}")
        else:
            words.append((columns[0], columns[-1]))
    close()
    _check_enough_lines(report, path, n_columns)
    if report.sentences == 0:  # only -DOCSTART- lines, say: a model trained or scored on it would report nothing
        raise BvrError(f"no sentences could be read ({report.describe()})", where=path,
                       hint="a CoNLL file holds 'token POS chunk NER' lines, a blank line after each sentence; "
                            "download the task's files again")
    report.scheme = detect_scheme(sentence.tags for sentence in sentences)
    if convert_to_iob2 and report.scheme != "IOB2":
        sentences = [sentence._replace(tags=to_iob2(sentence.tags)) for sentence in sentences]
        report.converted = True
    return sentences, report
