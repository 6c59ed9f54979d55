"""A report as a list of blocks, written out twice: as Markdown and as one self-contained HTML page.

Sections build blocks (:class:`Heading`, :class:`Paragraph`, :class:`Bullets`, :class:`Table`, :class:`Figure`,
:class:`Notice`) from plain text and :class:`Link` pieces; :func:`to_markdown` and :func:`to_html` write the same
blocks, so the two files can never say different things. The HTML page needs nothing beside it: its CSS is inline
and every figure is embedded as a base64 ``data:`` URI, so it opens offline, from an MLflow artifact or a mail.

>>> blocks = [Heading("Scores"), Table(["arm", "median"], [["static", "84.1"]], align="lr")]
>>> print(to_markdown(blocks))
## Scores
<BLANKLINE>
| arm | median |
|:--|--:|
| static | 84.1 |
<BLANKLINE>
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Link:
    """Text that links to ``href`` (an MLflow run, another report)."""

    text: str
    href: str


Inline = str | Link  # a piece of running text: plain (escaped on output) or a link
Cell = Inline | tuple[Inline, ...]  # one piece or several side by side (the runs of one arm, each linked)


@dataclass(frozen=True)
class Heading:
    """A section heading; level 1 is the page title, and every level-2 heading is listed in the contents."""

    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    """Running text made of pieces."""

    parts: tuple[Inline, ...]

    def __init__(self, *parts: Inline) -> None:
        object.__setattr__(self, "parts", parts)


@dataclass(frozen=True)
class Bullets:
    """A bulleted list; each item is a tuple of pieces (or one string)."""

    items: tuple[Cell, ...]


@dataclass(frozen=True)
class Notice:
    """A highlighted paragraph: what is missing from a partial report, or a warning the reader must see."""

    text: str
    items: tuple[str, ...] = ()


@dataclass(frozen=True)
class Table:
    """A table with a header row; ``align`` holds one letter per column: 'l' left, 'r' right (numbers), 'L' left
    and never wrapped (arm names such as 'full-sentences − segment-pair'); default all 'l'."""

    header: Sequence[str]
    rows: Sequence[Sequence[Cell]]
    align: str = ""
    caption: str = ""  # shown under the table: units, what the columns mean


@dataclass(frozen=True)
class Figure:
    """An image file (PNG or SVG) with a caption; Markdown links it, HTML embeds it."""

    path: Path
    caption: str
    relative: str  # the path Markdown uses, relative to the report (``figures/scores.png``)


Block = Heading | Paragraph | Bullets | Notice | Table | Figure


# --- Markdown --------------------------------------------------------------------------------------------------


def _md_text(text: str) -> str:
    """Text safe in a Markdown table cell or line: '|' escaped, line breaks folded."""
    return text.replace("|", "\\|").replace("\n", " ")


def _inline(piece: Cell, text: Callable[[str], str], link: Callable[[Link], str]) -> str:
    """A piece (or pieces, a space between them) written with ``text`` for plain text and ``link`` for links."""
    if isinstance(piece, tuple):
        return " ".join(_inline(p, text, link) for p in piece)
    return link(piece) if isinstance(piece, Link) else text(piece)


def _md_inline(piece: Cell) -> str:
    return _inline(piece, _md_text, lambda link: f"[{_md_text(link.text)}]({link.href})")


def _md_table(table: Table) -> list[str]:
    align = table.align or "l" * len(table.header)
    rule = "|" + "|".join("--:" if a == "r" else ":--" for a in align) + "|"
    lines = ["| " + " | ".join(_md_text(h) for h in table.header) + " |", rule]
    lines += ["| " + " | ".join(_md_inline(cell) for cell in row) + " |" for row in table.rows]
    if table.caption:
        lines += ["", f"*{_md_text(table.caption)}*"]
    return lines


def _md_block(block: Block) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * block.level + " " + block.text]
    if isinstance(block, Paragraph):
        return ["".join(_md_inline(p) for p in block.parts)]
    if isinstance(block, Bullets):
        return [f"- {_md_inline(item)}" for item in block.items]
    if isinstance(block, Notice):
        return [f"> **{_md_text(block.text)}**", *([">"] if block.items else []),
                *(f"> - {_md_text(item)}" for item in block.items)]
    if isinstance(block, Table):
        return _md_table(block)
    return [f"![{_md_text(block.caption)}]({block.relative})", "", f"*{_md_text(block.caption)}*"]


def to_markdown(blocks: Sequence[Block]) -> str:
    """The blocks as GitHub-flavoured Markdown; figures are linked by their relative paths."""
    return "\n\n".join("\n".join(_md_block(block)) for block in blocks) + "\n"


# --- HTML ------------------------------------------------------------------------------------------------------

_STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #1f2328;
       max-width: 1080px; margin: 2em auto; padding: 0 1.5em; }
h1 { font-size: 1.8em; border-bottom: 1px solid #d0d7de; padding-bottom: .3em; }
h2 { font-size: 1.35em; margin-top: 2em; border-bottom: 1px solid #eaeef2; padding-bottom: .2em; }
h3 { font-size: 1.1em; margin-top: 1.5em; }
a { color: #0969da; text-decoration: none; } a:hover { text-decoration: underline; }
.wrap { overflow-x: auto; margin: .8em 0; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
/* break-word, not anywhere: a column is never narrower than its longest word, so no header or cell is split
   inside a word ('detectabl e', '2/1 28/ 2'); a table too wide for the page scrolls in its .wrap instead. */
th, td { border: 1px solid #d0d7de; padding: 4px 6px; vertical-align: top; overflow-wrap: break-word;
         hyphens: none; }
th { background: #f6f8fa; text-align: left; overflow-wrap: normal; word-break: keep-all; }
th .word, td .word { white-space: nowrap; }
tr:nth-child(even) td { background: #fbfcfd; }
td.r { text-align: right; white-space: nowrap; } td.L { min-width: 8em; }
td .run { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
.caption { color: #57606a; font-size: 13px; margin: .3em 0 1.2em; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
figcaption { color: #57606a; font-size: 13px; }
.notice { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px; padding: .6em 1em; margin: 1em 0; }
.notice ul { margin: .3em 0; font-size: 13px; }
nav { background: #f6f8fa; border-radius: 6px; padding: .5em 1em; font-size: 14px; }
nav ol { margin: .2em 0; columns: 2; }
"""

_MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


def slug(text: str) -> str:
    """An HTML id for a heading.

    >>> slug("Beside the paper: RoBERTa Table 1")
    'beside-the-paper-roberta-table-1'
    """
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _html_inline(piece: Cell) -> str:
    return _inline(piece, html.escape, lambda link: f'<a href="{html.escape(link.href)}">{html.escape(link.text)}</a>')


_HYPHENATED = re.compile(r"\S*(?:[^\W\d_][-–][^\W_]|[^\W_][-–][^\W\d_])\S*")
"""A word with a hyphen or dash next to a letter ('no-pretraining', 'min–max', 'q1–q3'); not a range of numbers."""


def _unbroken(text: str) -> str:
    """Escaped text with each hyphenated word in a span that never wraps: a browser may break a line after a hyphen,
    which split table headers and arm names ('min–' / 'max', 'no-' / 'pretraining').

    >>> _unbroken("IQR (q1–q3) of no-pretraining: 75.0–85.0, -0.3")
    'IQR <span class="word">(q1–q3)</span> of <span class="word">no-pretraining:</span> 75.0–85.0, -0.3'
    """
    return _HYPHENATED.sub(lambda m: f'<span class="word">{m.group(0)}</span>', html.escape(text))


def _html_cell(cell: Cell) -> str:
    text = _unbroken(cell) if isinstance(cell, str) else _html_inline(cell)
    # Run links are ids: set them in a monospace span so columns of ids line up.
    is_runs = isinstance(cell, Link) or (isinstance(cell, tuple) and all(isinstance(p, Link) for p in cell))
    return f'<span class="run">{text}</span>' if is_runs and cell else text


def _html_table(table: Table) -> str:
    align = table.align or "l" * len(table.header)
    head = "".join(f"<th>{_unbroken(h)}</th>" for h in table.header)
    body = "".join(
        "<tr>" + "".join(f'<td class="{a}">{_html_cell(cell)}</td>' for a, cell in zip(align, row, strict=False))
        + "</tr>" for row in table.rows)
    caption = f'<p class="caption">{html.escape(table.caption)}</p>' if table.caption else ""
    return f'<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{caption}'


def _embedded(path: Path) -> str:
    """The image as a ``data:`` URI (SVG could go inline, but a data URI keeps its ids apart from the page's)."""
    mime = _MIME.get(path.suffix.lower(), "application/octet-stream")
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _html_block(block: Block) -> str:
    if isinstance(block, Heading):
        return f'<h{block.level} id="{slug(block.text)}">{html.escape(block.text)}</h{block.level}>'
    if isinstance(block, Paragraph):
        return "<p>" + "".join(_html_inline(p) for p in block.parts) + "</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{_html_inline(item)}</li>" for item in block.items) + "</ul>"
    if isinstance(block, Notice):
        items = "".join(f"<li>{html.escape(item)}</li>" for item in block.items)
        return (f'<div class="notice"><strong>{html.escape(block.text)}</strong>'
                + (f"<ul>{items}</ul>" if items else "") + "</div>")
    if isinstance(block, Table):
        return _html_table(block)
    caption = html.escape(block.caption)
    return (f'<figure><img src="{_embedded(block.path)}" alt="{caption}">'
            f"<figcaption>{caption}</figcaption></figure>")


def _contents(blocks: Sequence[Block]) -> str:
    headings = [b for b in blocks if isinstance(b, Heading) and b.level == 2]
    if len(headings) < 3:
        return ""
    items = "".join(f'<li><a href="#{slug(h.text)}">{html.escape(h.text)}</a></li>' for h in headings)
    return f"<nav><strong>Contents</strong><ol>{items}</ol></nav>"


def to_html(blocks: Sequence[Block], title: str) -> str:
    """The blocks as one HTML page with inline CSS, embedded figures and a table of contents after the title."""
    parts = [_html_block(block) for block in blocks]
    contents = _contents(blocks)
    if contents:  # after the title and the paragraphs that open the page
        first = next((i for i, b in enumerate(blocks) if i and isinstance(b, Heading)), len(parts))
        parts.insert(first, contents)
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{html.escape(title)}'
            f"</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")
