"""Tests of the four input formats on synthetic corpora whose token ids record where each token came from.

Every corpus token id is ``BASE + its position in the corpus token stream``, so a token's document, sentence and
neighbours are found by lookup, and "drops nothing" means the stripped tokens are exactly ``BASE, BASE + 1, ...``.
Special ids are below ``BASE``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import pytest

from bvr.errors import BvrError
from bvr.model import IGNORE_INDEX
from bvr.pretraining.formats import (
    FORMATS,
    PAIR_FORMATS,
    create_instances,
)
from bvr.pretraining.instances import IN_ORDER, IS_NEXT, NOT_NEXT, SWAPPED, Template
from bvr.pretraining.pairs import truncated_lengths

BASE = 1000
CLS, SEP = 3, 4
TEMPLATES = {family: Template.for_family(family, CLS, SEP) for family in ("bert", "roberta")}


@dataclass
class Corpus:
    """Documents plus, for every stream position, the document and the end of its sentence."""

    documents: list[list[np.ndarray]]
    doc_of: np.ndarray  # (n_tokens,) document index
    sentence_end: np.ndarray  # (n_tokens,) stream position one past the end of the token's sentence

    @property
    def n_tokens(self) -> int:
        return len(self.doc_of)


def make_corpus(seed: int, n_docs: int, sentences: tuple[int, int], tokens: tuple[int, int]) -> Corpus:
    """Documents of a random number of sentences of random lengths (both ranges inclusive)."""
    rng = np.random.default_rng(seed)
    documents, doc_of, sentence_end, position = [], [], [], 0
    for d in range(n_docs):
        doc = []
        for length in rng.integers(tokens[0], tokens[1] + 1, size=rng.integers(sentences[0], sentences[1] + 1)):
            doc.append(np.arange(BASE + position, BASE + position + length, dtype=np.int64))
            doc_of += [d] * length
            sentence_end += [position + length] * length
            position += length
        documents.append(doc)
    return Corpus(documents, np.array(doc_of), np.array(sentence_end))


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return make_corpus(0, n_docs=60, sentences=(1, 40), tokens=(1, 30))


def make(
    corpus: Corpus, fmt: str, family: str = "bert", *, max_length: int = 64, objective: str = "none", seed: int = 0
):
    return create_instances(
        corpus.documents, fmt, max_length=max_length, objective=objective, template=TEMPLATES[family],
        rng=random.Random(seed),
    )


def split_pair(ids: np.ndarray, template: Template) -> tuple[np.ndarray, np.ndarray]:
    """A and B of a pair, after checking that the specials stand exactly where the template puts them."""
    special = np.flatnonzero(ids < BASE)
    len_a = special[1] - 1
    expected = [0, *range(1 + len_a, 1 + len_a + len(template.pair_middle)), len(ids) - 1]
    assert special.tolist() == expected
    assert ids[0] == template.cls_id and ids[-1] == template.sep_id
    assert tuple(ids[1 + len_a : 1 + len_a + len(template.pair_middle)]) == template.pair_middle
    return ids[1 : special[1]] - BASE, ids[special[-2] + 1 : -1] - BASE


def content(ids: np.ndarray, template: Template) -> np.ndarray:
    """A single-segment sequence without its opening and closing tokens (document separators kept)."""
    assert ids[0] == template.cls_id and ids[-1] == template.sep_id
    return ids[1:-1]


def is_run(positions: np.ndarray) -> bool:
    return len(positions) > 0 and bool(np.all(np.diff(positions) == 1))


# ------------------------------------------------------------------------------------------- template


def test_templates_of_both_families() -> None:
    bert, roberta = TEMPLATES["bert"], TEMPLATES["roberta"]
    assert (bert.pair_middle, bert.doc_sep_id, bert.pair_token_types) == ((SEP,), SEP, True)
    assert (roberta.pair_middle, roberta.doc_sep_id, roberta.pair_token_types) == ((SEP, SEP), SEP, False)
    assert (bert.single_overhead, bert.pair_overhead) == (2, 3)
    assert (roberta.single_overhead, roberta.pair_overhead) == (2, 4)
    with pytest.raises(BvrError, match="unknown tokenizer family 'gpt'.*bert, roberta"):
        Template.for_family("gpt", CLS, SEP)


# ----------------------------------------------------------------------------------------- all formats


@pytest.mark.parametrize("family", ["bert", "roberta"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("max_length", [7, 64, 200])
def test_lengths_dtypes_and_token_types(corpus: Corpus, fmt: str, family: str, max_length: int) -> None:
    template = TEMPLATES[family]
    out = make(corpus, fmt, family, max_length=max_length, objective="nsp" if fmt in PAIR_FORMATS else "none")
    assert len(out["input_ids"]) == len(out["token_type_ids"]) == len(out["sentence_label"]) > 0
    for ids, types in zip(out["input_ids"], out["token_type_ids"], strict=True):
        assert ids.dtype == np.int32 and types.dtype == np.int8 and len(ids) == len(types) <= max_length
        if fmt in PAIR_FORMATS:
            a, b = split_pair(ids, template)
            assert len(a) >= 1 and len(b) >= 1
            b_start = len(ids) - len(b) - 1
            expected = np.r_[np.zeros(b_start), np.ones(len(b) + 1)] if template.pair_token_types else 0
            np.testing.assert_array_equal(types, expected)
        else:
            content(ids, template)
            assert not types.any()


def test_empty_documents_and_sentences_are_ignored(corpus: Corpus) -> None:
    empty = np.array([], dtype=np.int64)
    noisy = [[], *[[empty, *doc, empty] for doc in corpus.documents], [empty]]
    for fmt in FORMATS:
        objective = "nsp" if fmt in PAIR_FORMATS else "none"
        clean = make(corpus, fmt, objective=objective)
        dirty = create_instances(noisy, fmt, max_length=64, objective=objective, template=TEMPLATES["bert"],
                                 rng=random.Random(0))
        assert all(np.array_equal(x, y) for x, y in zip(clean["input_ids"], dirty["input_ids"], strict=True))
    assert create_instances(
        [[], [empty]], "segment-pair", max_length=64, objective="nsp", template=TEMPLATES["bert"],
        rng=random.Random(0)
    ) == {"input_ids": [], "token_type_ids": [], "sentence_label": []}


@pytest.mark.parametrize(("fmt", "objective"), [*((fmt, "nsp" if fmt in PAIR_FORMATS else "none") for fmt in FORMATS),
                                               *((fmt, "sop") for fmt in PAIR_FORMATS)])
def test_same_seed_same_output(corpus: Corpus, fmt: str, objective: str) -> None:
    first, again = make(corpus, fmt, objective=objective, seed=7), make(corpus, fmt, objective=objective, seed=7)
    assert first["sentence_label"] == again["sentence_label"]
    for column in ("input_ids", "token_type_ids"):
        assert all(np.array_equal(x, y) for x, y in zip(first[column], again[column], strict=True))


@pytest.mark.parametrize(("fmt", "objective"), [("segment-pair", "nsp"), ("segment-pair", "none"),
                                               ("sentence-pair", "nsp"), ("segment-pair", "sop"),
                                               ("sentence-pair", "sop")])
def test_different_seed_different_output(corpus: Corpus, fmt: str, objective: str) -> None:
    first, other = make(corpus, fmt, objective=objective, seed=1), make(corpus, fmt, objective=objective, seed=2)
    same = len(first["input_ids"]) == len(other["input_ids"]) and all(
        np.array_equal(x, y) for x, y in zip(first["input_ids"], other["input_ids"], strict=True)
    )
    assert not same


def test_packed_formats_use_no_randomness(corpus: Corpus) -> None:
    for fmt in ("full-sentences", "doc-sentences"):
        one, two = make(corpus, fmt, seed=1), make(corpus, fmt, seed=2)
        assert all(np.array_equal(x, y) for x, y in zip(one["input_ids"], two["input_ids"], strict=True))


# ----------------------------------------------------------------------------------------- pair formats


@pytest.mark.parametrize("family", ["bert", "roberta"])
@pytest.mark.parametrize("fmt", PAIR_FORMATS)
@pytest.mark.parametrize("nsp", [True, False])
def test_pairs_are_continuations_or_other_documents(corpus: Corpus, fmt: str, family: str, nsp: bool) -> None:
    template = TEMPLATES[family]
    max_length = 64
    out = make(corpus, fmt, family, max_length=max_length, objective="nsp" if nsp else "none")
    assert set(out["sentence_label"]) == ({IS_NEXT, NOT_NEXT} if nsp else {IGNORE_INDEX})
    untruncated = 0
    for ids, label in zip(out["input_ids"], out["sentence_label"], strict=True):
        a, b = split_pair(ids, template)
        assert is_run(a) and is_run(b)  # truncation keeps each segment contiguous
        (doc_a,), (doc_b,) = set(corpus.doc_of[a]), set(corpus.doc_of[b])
        if label == NOT_NEXT:
            assert doc_a != doc_b
            continue
        assert doc_a == doc_b and b[0] > a[-1]
        if len(ids) < max_length:  # nothing was truncated, so B starts right after A ends
            assert b[0] == a[-1] + 1
            untruncated += 1
    assert untruncated >= 30  # the exact check above did run


@pytest.mark.parametrize("fmt", PAIR_FORMATS)
def test_nsp_balance(fmt: str) -> None:
    """NotNext is decided by a fair coin for every pair, short documents included (where BERT's rule of forcing a
    lone sentence to NotNext tilts the labels); tolerance 0.02 is over 3 standard deviations (0.0064 at 6k pairs)."""
    for sentences in ((60, 100), (1, 3)):
        corpus = make_corpus(3, n_docs=2000 if sentences == (1, 3) else 400, sentences=sentences, tokens=(5, 30))
        labels = np.array(make(corpus, fmt, max_length=128, objective="nsp")["sentence_label"])
        assert len(labels) > 2500
        assert abs((labels == NOT_NEXT).mean() - 0.5) < 0.02, sentences


# --------------------------------------------------------------------------------- sentence-order prediction


def first_and_second(ids: np.ndarray, types: np.ndarray, template: Template) -> tuple[np.ndarray, np.ndarray]:
    """The two segments of a pair in the order they stand, after checking their token types (BERT: the first
    segment and its specials 0, the second and the closing token 1; RoBERTa: all 0)."""
    first, second = split_pair(ids, template)
    expected = np.zeros(len(ids), dtype=np.int8)
    if template.pair_token_types:
        expected[1 + len(first) + len(template.pair_middle) :] = 1
    assert types.dtype == np.int8 and np.array_equal(types, expected)
    return first, second


@pytest.mark.parametrize("family", ["bert", "roberta"])
@pytest.mark.parametrize("fmt", PAIR_FORMATS)
def test_sop_pairs_are_consecutive_spans_of_one_document_in_or_out_of_order(
    corpus: Corpus, fmt: str, family: str
) -> None:
    """In order (0): the first segment, then the one that follows it in its document; swapped (1): the same two
    with the later one first. Never two documents; token types follow the order the segments stand in."""
    template, max_length = TEMPLATES[family], 64
    out = make(corpus, fmt, family, max_length=max_length, objective="sop")
    assert set(out["sentence_label"]) == {IN_ORDER, SWAPPED}
    untruncated = {IN_ORDER: 0, SWAPPED: 0}
    for ids, types, label in zip(out["input_ids"], out["token_type_ids"], out["sentence_label"], strict=True):
        first, second = first_and_second(ids, types, template)
        assert is_run(first) and is_run(second)  # truncation keeps each segment contiguous
        earlier, later = (first, second) if label == IN_ORDER else (second, first)
        assert len(set(corpus.doc_of[earlier]) | set(corpus.doc_of[later])) == 1  # one document
        assert later[0] > earlier[-1]
        if len(ids) < max_length:  # nothing was truncated: the later segment starts where the earlier one ends
            assert later[0] == earlier[-1] + 1
            untruncated[label] += 1
    assert min(untruncated.values()) >= 30  # the exact check above did run for both labels


@pytest.mark.parametrize("fmt", PAIR_FORMATS)
def test_sop_swaps_half_the_pairs(fmt: str) -> None:
    """A fair coin per pair, short documents (lone sentences cut inside) included; the bound is 4 standard
    deviations of a share at the number of pairs made (0.045 at 2,000 pairs, the fewest made here)."""
    for sentences in ((60, 100), (1, 3)):
        corpus = make_corpus(3, n_docs=2000 if sentences == (1, 3) else 400, sentences=sentences, tokens=(5, 30))
        labels = np.array(make(corpus, fmt, max_length=128, objective="sop")["sentence_label"])
        assert len(labels) > 2000 and set(labels) == {IN_ORDER, SWAPPED}
        assert abs((labels == SWAPPED).mean() - 0.5) < 4 * math.sqrt(0.25 / len(labels)), sentences


@pytest.mark.parametrize("fmt", PAIR_FORMATS)
def test_sop_swaps_the_same_pairs_the_other_way(corpus: Corpus, fmt: str) -> None:
    """Nothing truncated, SOP's pairs put back in order cover every token once; in ``sentence-pair`` they are the
    pairs made without an objective (consecutive sentences, a lone last sentence cut inside at a random token)."""
    sop = spans_in_order(make(corpus, fmt, max_length=4096, objective="sop"))
    if fmt == "sentence-pair":
        plain = spans_in_order(make(corpus, fmt, max_length=4096))
        assert sorted((start, end) for start, _, _, end in sop) == sorted((start, end) for start, _, _, end in plain)
        whole = {name: sorted(p for p in pairs if corpus.sentence_end[p[0]] == p[1] + 1)  # A a whole sentence
                 for name, pairs in (("sop", sop), ("none", plain))}
        assert whole["sop"] == whole["none"] and len(whole["sop"]) > 100
    covered = sorted(position for start, _, _, end in sop for position in range(start, end + 1))
    assert covered == list(range(corpus.n_tokens))  # every token once: nothing dropped or repeated


def spans_in_order(out: dict[str, list]) -> list[tuple[int, int, int, int]]:
    """Per pair, the stream positions (first, last) of its earlier segment, then of its later one."""
    pairs = []
    for ids, label in zip(out["input_ids"], out["sentence_label"], strict=True):
        first, second = split_pair(ids, TEMPLATES["bert"])
        earlier, later = (second, first) if label == SWAPPED else (first, second)
        pairs.append((int(earlier[0]), int(earlier[-1]), int(later[0]), int(later[-1])))
    return pairs


def test_sop_needs_no_second_document(corpus: Corpus) -> None:
    """Unlike NotNext, a swap stays inside the document: a one-document shard still makes both labels (a document
    of 42 sentences, 17 pairs: both labels but with probability 2 / 2^17)."""
    document = [sentence for doc in corpus.documents[:4] for sentence in doc]
    out = create_instances([document], "segment-pair", max_length=32, objective="sop",
                           template=TEMPLATES["bert"], rng=random.Random(0))
    assert set(out["sentence_label"]) == {IN_ORDER, SWAPPED}


def test_sentence_pair_uses_every_sentence_once_in_order() -> None:
    """With no truncation, each sentence is an A or an IsNext B exactly once, A's walking each document in order;
    a document's last sentence that draws IsNext is cut inside into A and B."""
    corpus = make_corpus(4, n_docs=30, sentences=(1, 20), tokens=(2, 10))
    out = make(corpus, "sentence-pair", max_length=32, objective="nsp")
    used, last_a = [], {}
    for ids, label in zip(out["input_ids"], out["sentence_label"], strict=True):
        a, b = split_pair(ids, TEMPLATES["bert"])
        cut_inside = label == IS_NEXT and b[0] == a[-1] + 1 and corpus.sentence_end[a[0]] == b[-1] + 1
        if not cut_inside:
            assert corpus.sentence_end[a[0]] == a[-1] + 1 and corpus.sentence_end[b[0]] == b[-1] + 1  # whole
        doc = corpus.doc_of[a[0]]
        assert a[0] > last_a.get(doc, -1)
        last_a[doc] = a[0]
        used += [a] + ([b] if label == IS_NEXT else [])
    np.testing.assert_array_equal(np.sort(np.concatenate(used)), np.arange(corpus.n_tokens))


def test_short_seq_prob_draws_one_target_per_document() -> None:
    """One-token sentences make every chunk but a document's last exactly its target (specials included).

    2,000 documents of 200 tokens: each document's full chunks share one length, and the share of documents whose
    target is short is 0.1 x 59/60 (a short draw of the full budget, 61, is not short); its sd at 2,000 documents is
    about 0.0067, so 0.03 is 4.5 sd.
    """
    n_docs, doc_tokens, max_length = 2000, 200, 64
    documents = [[np.array([BASE + d * doc_tokens + i]) for i in range(doc_tokens)] for d in range(n_docs)]
    targets = {}
    for prob in (0.0, 0.1):
        out = create_instances(documents, "segment-pair", max_length=max_length, objective="none",
                               template=TEMPLATES["bert"], rng=random.Random(0), short_seq_prob=prob)
        chunks: dict[int, list[np.ndarray]] = {}
        for ids in out["input_ids"]:
            content = ids[ids >= BASE] - BASE
            chunks.setdefault(int(content.min()) // doc_tokens, []).append(content)
        assert sorted(chunks) == list(range(n_docs))
        lengths = {}
        for d, doc_chunks in chunks.items():
            last = max(range(len(doc_chunks)), key=lambda k: doc_chunks[k].max())
            full = {len(c) + 3 for k, c in enumerate(doc_chunks) if k != last}
            assert len(full) <= 1, f"document {d} has chunks of different targets: {sorted(full)}"
            lengths[d] = full.pop() if full else None
        targets[prob] = np.array([n for n in lengths.values() if n is not None])
    assert np.all(targets[0.0] == max_length) and len(targets[0.0]) == n_docs
    assert len(targets[0.1]) > 0.95 * n_docs
    short_share = (targets[0.1] < max_length).mean()
    assert abs(short_share - 0.1 * 59 / 60) < 0.03
    assert np.all(targets[0.1] >= 5)  # a short target is at least 2 tokens besides the 3 specials


def test_segment_pair_truncates_at_both_ends() -> None:
    """Documents of one long sentence: every pair is cut at a random token, then truncated front or back."""
    documents = [[np.arange(BASE + 100 * d, BASE + 100 * d + 100)] for d in range(300)]
    out = create_instances(
        documents, "segment-pair", max_length=20, objective="none", template=TEMPLATES["bert"], rng=random.Random(0)
    )
    fronts = backs = 0
    for ids in out["input_ids"]:
        assert len(ids) == 20
        a, b = split_pair(ids, TEMPLATES["bert"])
        fronts += a[0] % 100 != 0 or b[0] != a[-1] + 1
        backs += b[-1] % 100 != 99 or b[0] != a[-1] + 1
    assert fronts > 50 and backs > 50


def test_lone_units_without_nsp_are_split_inside() -> None:
    documents = [[np.arange(BASE, BASE + 5)], [np.array([BASE + 5])]]  # the one-token document cannot make a pair
    for fmt in PAIR_FORMATS:
        out = create_instances(
            documents, fmt, max_length=16, objective="none", template=TEMPLATES["roberta"], rng=random.Random(0)
        )
        assert len(out["input_ids"]) == 1
        a, b = split_pair(out["input_ids"][0], TEMPLATES["roberta"])
        np.testing.assert_array_equal(np.r_[a, b], np.arange(5))


@pytest.mark.parametrize("len_a", range(1, 12))
def test_truncated_lengths_match_token_by_token_removal(len_a: int) -> None:
    for len_b in range(1, 12):
        for budget in range(2, 24):
            a, b = len_a, len_b
            while a + b > budget:  # BERT's rule: shorten the longer one, B on ties
                if a > b:
                    a -= 1
                else:
                    b -= 1
            assert truncated_lengths(len_a, len_b, budget) == (a, b)


# --------------------------------------------------------------------------------------- packed formats


def test_full_sentences_crosses_documents_with_separator_and_drops_nothing(corpus: Corpus) -> None:
    template = TEMPLATES["roberta"]
    out = make(corpus, "full-sentences", "roberta", max_length=64)
    crossings, stream = 0, []
    for ids in out["input_ids"]:
        body = content(ids, template)
        is_sep = body == template.doc_sep_id
        tokens = body[~is_sep] - BASE
        assert is_run(tokens) and not is_sep[0] and not is_sep[-1]
        # A separator stands exactly where the document changes, and nowhere else.
        changes = np.flatnonzero(np.diff(corpus.doc_of[tokens])) + 1
        np.testing.assert_array_equal(np.flatnonzero(is_sep) - np.arange(is_sep.sum()), changes)
        assert np.all(np.diff(corpus.doc_of[tokens]) <= 1)
        crossings += len(changes)
        stream.append(tokens)
    assert crossings > 0
    np.testing.assert_array_equal(np.concatenate(stream), np.arange(corpus.n_tokens))


@pytest.mark.parametrize("fmt", ["full-sentences", "doc-sentences"])
def test_packing_is_tight(corpus: Corpus, fmt: str) -> None:
    """A sequence ends only when the next sentence (and a separator it would need) does not fit."""
    budget = 64 - 2
    sequences = [content(ids, TEMPLATES["bert"]) for ids in make(corpus, fmt, max_length=64)["input_ids"]]
    for current, following in zip(sequences, sequences[1:], strict=False):
        first, last = following[0] - BASE, current[-1] - BASE
        new_doc = corpus.doc_of[first] != corpus.doc_of[last]
        if fmt == "doc-sentences" and new_doc:
            continue
        assert len(current) + int(new_doc) + corpus.sentence_end[first] - first > budget


def test_one_token_sentences_pack_to_exactly_max_length() -> None:
    """When no sentence boundary gets in the way, (nearly) every packed sequence is exactly max_length."""
    corpus = make_corpus(5, n_docs=20, sentences=(2000, 4000), tokens=(1, 1))
    for fmt in ("full-sentences", "doc-sentences"):
        lengths = np.array([len(ids) for ids in make(corpus, fmt, max_length=64)["input_ids"]])
        assert (lengths == 64).mean() > 0.9


def test_doc_sentences_never_crosses_documents_and_drops_nothing(corpus: Corpus) -> None:
    out = make(corpus, "doc-sentences", "roberta", max_length=64)
    stream = []
    for ids in out["input_ids"]:
        tokens = content(ids, TEMPLATES["roberta"]) - BASE
        assert is_run(tokens) and len(set(corpus.doc_of[tokens])) == 1
        stream.append(tokens)
    np.testing.assert_array_equal(np.concatenate(stream), np.arange(corpus.n_tokens))
    assert len(out["input_ids"]) > len(make(corpus, "full-sentences", max_length=64)["input_ids"])


@pytest.mark.parametrize("fmt", ["full-sentences", "doc-sentences"])
def test_sentences_longer_than_the_budget_are_split(fmt: str) -> None:
    documents = [[np.arange(BASE, BASE + 3), np.arange(BASE + 3, BASE + 30), np.arange(BASE + 30, BASE + 32)]]
    out = create_instances(documents, fmt, max_length=12, objective="none", template=TEMPLATES["bert"],
                           rng=random.Random())
    bodies = [content(ids, TEMPLATES["bert"]) - BASE for ids in out["input_ids"]]
    assert [len(b) for b in bodies] == [3, 10, 10, 9]  # the long sentence's tail is packed with what follows
    np.testing.assert_array_equal(np.concatenate(bodies), np.arange(32))


def test_doc_sentences_are_shorter_than_full_sentences(corpus: Corpus) -> None:
    full = np.mean([len(ids) for ids in make(corpus, "full-sentences", max_length=128)["input_ids"]])
    doc = np.mean([len(ids) for ids in make(corpus, "doc-sentences", max_length=128)["input_ids"]])
    assert doc < full <= 128


# ----------------------------------------------------------------------------------------------- errors


def test_unknown_format_lists_the_formats(corpus: Corpus) -> None:
    with pytest.raises(BvrError, match="unknown input format 'full'") as error:
        make(corpus, "full")
    assert error.value.where == "data.input_format" and all(fmt in error.value.hint for fmt in FORMATS)


@pytest.mark.parametrize("fmt", ["full-sentences", "doc-sentences"])
@pytest.mark.parametrize(("objective", "name"), [("nsp", "next-sentence"), ("sop", "sentence-order")])
def test_sentence_objective_with_a_single_segment_format(corpus: Corpus, fmt: str, objective: str, name: str) -> None:
    with pytest.raises(BvrError, match=f"cannot carry {name} prediction") as error:
        make(corpus, fmt, objective=objective)
    assert error.value.where == "data.sentence_objective" and "set it to none" in error.value.hint


def test_unknown_sentence_objective(corpus: Corpus) -> None:
    with pytest.raises(BvrError, match="unknown sentence objective 'mlm'") as error:
        make(corpus, "segment-pair", objective="mlm")
    assert error.value.where == "data.sentence_objective" and error.value.hint == "choose one of none, nsp, sop"


@pytest.mark.parametrize(
    ("fmt", "family", "smallest"),
    [
        ("segment-pair", "bert", 5),
        ("sentence-pair", "roberta", 6),
        ("full-sentences", "bert", 4),
        ("doc-sentences", "roberta", 4),
    ],
)
def test_max_length_too_small(corpus: Corpus, fmt: str, family: str, smallest: int) -> None:
    with pytest.raises(BvrError, match=f"max_length {smallest - 1} leaves fewer than 2 tokens") as error:
        make(corpus, fmt, family, max_length=smallest - 1)
    assert error.value.where == "data.max_length" and str(smallest) in error.value.hint
    out = make(corpus, fmt, family, max_length=smallest)
    assert max(len(ids) for ids in out["input_ids"]) == smallest


@pytest.mark.parametrize("fmt", PAIR_FORMATS)
def test_one_document_shard_with_nsp_falls_back_to_is_next(corpus: Corpus, fmt: str) -> None:
    """NotNext needs another document: a one-document shard (empty documents do not count) makes IsNext only."""
    one = [corpus.documents[0], [], [np.array([], dtype=np.int64)]]
    kwargs = {"max_length": 64, "template": TEMPLATES["bert"]}
    with_nsp = create_instances(one, fmt, objective="nsp", rng=random.Random(0), **kwargs)
    without = create_instances(one, fmt, objective="none", rng=random.Random(0), **kwargs)
    assert set(with_nsp["sentence_label"]) == {IS_NEXT} and set(without["sentence_label"]) == {IGNORE_INDEX}
    # The same pairs as with NSP off: true continuations, lone units cut inside.
    assert all(np.array_equal(x, y) for x, y in zip(with_nsp["input_ids"], without["input_ids"], strict=True))
    assert len(with_nsp["input_ids"]) == len(without["input_ids"]) > 0


def test_short_seq_prob_must_be_a_probability(corpus: Corpus) -> None:
    with pytest.raises(BvrError) as error:
        create_instances(
            corpus.documents,
            "segment-pair",
            max_length=64,
            objective="nsp",
            template=TEMPLATES["bert"],
            rng=random.Random(0),
            short_seq_prob=1.5,
        )
    assert error.value.where == "data.short_seq_prob"
