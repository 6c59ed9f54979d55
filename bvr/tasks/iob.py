"""IOB tags: the two schemes (IOB1, IOB2), converting between them, and chunking tags into entities, for the CoNLL
reader (:mod:`bvr.tasks.readers.conll`, which converts IOB1 files to IOB2) and entity scoring
(:mod:`bvr.tasks.ner_metric`, which chunks tags as conlleval does).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

OUTSIDE = "O"

Entity = tuple[str, int, int]
"""(type, start, end): an entity over word positions ``start`` to ``end - 1``."""


def is_tag(tag: str) -> bool:
    return tag == OUTSIDE or (tag[:2] in ("B-", "I-") and len(tag) > 2)


def _continues(previous: str, tag: str) -> bool:
    """Whether ``tag`` (B- or I-) follows a tag of its own entity type."""
    return previous != OUTSIDE and previous[2:] == tag[2:]


def detect_scheme(tag_sequences: Iterable[Sequence[str]]) -> str:
    """The IOB variant that tag sequences are written in. IOB2 opens every entity with B-; IOB1 opens entities with
    I- and uses B- only for an entity that directly follows another of the same type. "IOB2" when no I- tag opens an
    entity (so also for text with no entities, where the two agree); "IOB1" when some I- tag opens an entity and every
    B- follows a tag of its type; "mixed" when both rules are broken.
    """
    opening_i = opening_b = False
    for tags in tag_sequences:
        previous = OUTSIDE
        for tag in tags:
            if tag.startswith("I-") and not _continues(previous, tag):
                opening_i = True
            elif tag.startswith("B-") and not _continues(previous, tag):
                opening_b = True
            previous = tag
    if not opening_i:
        return "IOB2"
    return "mixed" if opening_b else "IOB1"


def to_iob2(tags: Sequence[str]) -> list[str]:
    """Rewrite IOB1 tags as IOB2: an I- tag that opens an entity (after O, at the start, or after a tag of another
    type: the conlleval rule) becomes B-, so the entities are unchanged; IOB2 input comes back as it was.

    >>> to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"])
    ['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC', 'B-ORG']
    """
    converted = []
    previous = OUTSIDE
    for tag in tags:
        opens = tag.startswith("I-") and not _continues(previous, tag)
        converted.append("B-" + tag[2:] if opens else tag)
        previous = tag
    return converted


def entity_types(labels: Iterable[str]) -> list[str]:
    """The entity types named by a label list, sorted (``["B-PER", "I-PER", "O"]`` -> ``["PER"]``)."""
    return sorted({label[2:] for label in labels if label != OUTSIDE})


def extract_entities(tags: Sequence[str]) -> set[Entity]:
    """The entities in one tag sequence, chunked as conlleval (and seqeval's default mode) does.

    B- always opens an entity; I- opens one after O, at the start, or after another type, and otherwise continues
    the open entity; an entity ends at O, at B-, or where the type changes.

    >>> sorted(extract_entities(["I-PER", "I-LOC", "O", "B-ORG", "B-ORG", "I-ORG"]))
    [('LOC', 1, 2), ('ORG', 3, 4), ('ORG', 4, 6), ('PER', 0, 1)]
    """
    entities: set[Entity] = set()
    current, start = None, 0
    for position, tag in enumerate(tags):
        if not is_tag(tag):
            raise ValueError(f"{tag!r} is not an IOB tag (O, B-TYPE or I-TYPE)")
        prefix, kind = (OUTSIDE, "") if tag == OUTSIDE else (tag[0], tag[2:])
        if current is not None and (prefix != "I" or kind != current):
            entities.add((current, start, position))
            current = None
        if prefix == "B" or (prefix == "I" and current is None):
            current, start = kind, position
    if current is not None:
        entities.add((current, start, len(tags)))
    return entities
