"""Splitting paragraphs into sentences, and recognising the WikiExtractor lines and sentences that are not running
text (section headings, table markup, template debris)."""

from __future__ import annotations

import re

# A candidate stop: a run of terminal punctuation, any closing quotes or brackets, then whitespace.
_STOP = re.compile(r"([.!?…]+)([\"'”’»)\]]*)\s+")
_OPENERS = "\"'“‘«([{"
# Words that are usually abbreviations before a ".". Case matters: "Art." is one, "art." is the word.
_ABBREVIATIONS = frozenset(
    "Mr Mrs Ms Mx Dr Prof Sr Jr St Mt Ft Gen Col Lt Capt Cpt Sgt Maj Adm Cmdr Rev Fr Hon Gov Pres Sen Rep "
    "Rt Esq Messrs No Nos Vol Vols Fig Figs Eq Ch Sec Art Ed Eds Op pp p ch sec vol fig eq ed "
    "b d fl r c ca cf approx est vs v viz al etc Inc Ltd Co Corp Bros Ave Rd Blvd Dept Univ Assn "
    "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec".split()
)
# Dotted acronyms and degrees: "U.S", "e.g", "i.e", "a.m", "Ph.D", "B.Sc" (the final "." is the stop itself).
_DOTTED = re.compile(r"(?:[A-Za-z]{1,2}\.)+[A-Za-z]{1,2}")
# Characters looked at around a stop: longer than any abbreviation or sentence opener.
_WINDOW = 24
# What numbers a list item: "3", "(3", "IV", "b".
_ENUMERATOR = re.compile(r"\(?(?:\d{1,3}|[IVXLC]{1,6}|[A-Za-z])")
# After an abbreviation, acronym or initial, a new sentence is assumed only before one of these common openers
# ("... in the U.S. The ..." splits; "U.S. Army" and "J. R. R. Tolkien" do not).
_SENTENCE_STARTERS = frozenset(
    "The A An This That These Those There It Its He She His Her They Their We Our In On At As By For From To "
    "With After Before During Since Although Though While When Where However Following Despite According "
    "Many Most Some Several Both All Each Other Such One Today Later Then Thus Also But And If Because Unlike "
    "Upon Under Between Within Over Of".split()
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

    Newlines count as spaces; the sentences come back stripped, none for blank text.

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
    words = text[match.end() : match.end() + _WINDOW].split(maxsplit=1)  # only the next word's start matters
    following = words[0] if words else ""
    first = following.lstrip(_OPENERS)[:1]
    if not (first.isupper() or first.isdigit()):
        return False
    if match.group(1) != ".":
        return True
    before = _word_before(text, match.start()).lstrip(_OPENERS)
    if before in _ABBREVIATIONS or (len(before) == 1 and before.isupper()) or _DOTTED.fullmatch(before):
        # An abbreviation, dotted acronym or capital initial. Trailing "," or ";" still marks a full word; a
        # trailing "." ("A. A. Milne") marks another initial.
        return following.rstrip(",;:") in _SENTENCE_STARTERS
    return True


def _word_before(text: str, end: int) -> str:
    """The word ending at ``end``, or "" when it is longer than :data:`_WINDOW` (no abbreviation is)."""
    # A bounded window keeps this O(1) per stop; split() also breaks at no-break spaces ("C.\xa0P.").
    window = text[max(0, end - _WINDOW) : end]
    words = window.split()
    if not words or (end > _WINDOW and len(words[-1]) == len(window)):
        return ""
    return words[-1]


# Section headings in WikiExtractor output are short lines ending in "." ("Early life and education.").
HEADING_MAX_WORDS = 8
# The first line is usually the lead sentence, verbless on list and year pages ("Events in the year 2018 in
# Nepal."), so there only very short lines ("Results.", "Early life.") count as headings.
LEAD_HEADING_MAX_WORDS = 2
# One-line paragraphs that are real sentences almost always hold one of these ("He died in 1990.").
_SENTENCE_WORDS = frozenset(
    "is was are were be been being am has have had will would can could may might shall should must do does did "
    "he she it they we i you there".split()
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
    ("Hayakawa played for Yomiuri Beleza.") is dropped too. ``first``: the document's first line after the title.
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
    """Whether a stripped WikiExtractor line is leftover markup rather than prose: it starts like a wiki table row or
    cell (``!``, ``|``, ``{|``) or an HTML tag (``<``), or is nothing but a URL."""
    return _MARKUP.match(line) is not None


# What an older WikiExtractor leaves of templates it could not expand: their braces ("}}{{", "{{Infobox",
# "{{{1|}}}") and MediaWiki parser functions ("#if:", "#switch:", "#invoke:").
_TEMPLATE_DEBRIS = re.compile(r"\{\{|\}\}|#(?:if|ifeq|iferror|ifexist|ifexpr|switch|expr|invoke|tag|time|titleparts|"
                              r"property)\s*:", re.IGNORECASE)


def is_template_debris(sentence: str) -> bool:
    """Whether a WikiExtractor sentence holds leftovers of an unexpanded template (``}}{{``, ``{{``, ``#if:``).

    Such a sentence is cut wherever the template happened to end, so it is dropped whole rather than trained on.
    """
    return _TEMPLATE_DEBRIS.search(sentence) is not None
