"""Tests for CoNLL-2003 NER (bvr.tasks.readers.conll, iob, ner, ner_metric): the CoNLL reader, IOB schemes,
sub-token labels and seqeval-style entity F1."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from bvr.errors import BvrError
from bvr.model.losses import IGNORE_INDEX
from bvr.tasks.iob import detect_scheme, entity_types, extract_entities, to_iob2
from bvr.tasks.ner import (
    align_labels,
    encode_ner,
    labels_to_tags,
    predictions_to_tags,
)
from bvr.tasks.ner_metric import EntityF1, entity_f1
from bvr.tasks.readers.conll import Sentence, read_conll
from bvr.tokenization import train_tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "conll"


# --- reader --------------------------------------------------------------------------------------------------


def test_reader_skips_docstart_and_keeps_a_last_sentence_without_blank_line():
    sentences, report = read_conll(FIXTURES / "sample.txt")
    assert (report.documents, report.sentences, report.tokens, report.bad_lines) == (2, 4, 14, [])
    assert sentences[0] == Sentence(
        ["EU", "rejects", "German", "call", "."], ["B-ORG", "O", "B-MISC", "O", "O"], document=0
    )
    assert sentences[1].tokens == ["Peter", "Blackburn"]
    assert [sentence.document for sentence in sentences] == [0, 0, 1, 1]
    # The file ends on a token line: the last sentence must not be lost.
    assert sentences[-1].tokens == ["The", "European", "Commission", "said", "."]
    assert report.scheme == "IOB2" and not report.converted
    assert "4 sentences" in report.describe()


def test_reader_counts_and_reports_lines_with_too_few_columns():
    sentences, report = read_conll(FIXTURES / "bad_columns.txt")
    assert report.bad_lines == [4, 7]
    assert [sentence.tokens for sentence in sentences] == [["Peter", "met"], ["Paris"]]
    assert (report.sentences, report.tokens) == (2, 3)
    assert "lines 4, 7" in report.describe()


def test_reader_refuses_a_file_whose_lines_mostly_lack_columns(tmp_path):
    # A 2-column file (token and tag) once read as zero sentences and crashed later in torch.
    two = tmp_path / "two_columns.txt"
    two.write_text("-DOCSTART- O\n\nEU B-ORG\nrejects O\n\nPeter B-PER\n", encoding="utf-8")
    with pytest.raises(BvrError, match=r"two_columns\.txt:3: 3 of 3 token lines have fewer than 4 columns") as err:
        read_conll(two)
    assert "token POS chunk NER" in err.value.hint


def test_reader_refuses_non_utf8_naming_the_line(tmp_path):
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("EU NNP B-NP B-ORG\n\nM\xfcnchen NNP B-NP B-LOC\n".encode("latin-1"))
    with pytest.raises(BvrError, match=r"latin1\.txt:3: not UTF-8") as err:
        read_conll(latin)
    assert "iconv" in err.value.hint


def test_reader_refuses_too_many_columns_naming_file_and_line():
    with pytest.raises(BvrError, match=r"too_many_columns\.txt:2: 5 columns"):
        read_conll(FIXTURES / "too_many_columns.txt")


def test_reader_refuses_a_tag_that_is_not_iob(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("Peter NNP B-NP B-PER\nParis NNP B-NP X-LOC\n", encoding="utf-8")
    with pytest.raises(BvrError, match=r"bad\.txt:2: 'X-LOC' is not an IOB tag"):
        read_conll(path)


def test_reader_refuses_a_missing_file(tmp_path):
    with pytest.raises(BvrError, match="no such CoNLL file"):
        read_conll(tmp_path / "absent.txt")


def test_reader_converts_iob1_to_iob2():
    sentences, report = read_conll(FIXTURES / "iob1.txt")  # the fixture also lacks a final newline
    assert report.scheme == "IOB1" and report.converted
    assert sentences[0].tags == ["B-PER", "I-PER", "O", "B-PER", "B-PER", "O", "B-LOC", "B-ORG"]
    unconverted, _ = read_conll(FIXTURES / "iob1.txt", convert_to_iob2=False)
    assert unconverted[0].tags[0] == "I-PER"


# --- schemes and labels --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sequences", "scheme"),
    [
        ([["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "B-ORG"]], "IOB2"),
        ([["O", "O"], []], "IOB2"),
        ([["I-PER", "I-PER", "B-PER", "O"], ["I-LOC"]], "IOB1"),
        ([["I-PER", "O", "B-LOC"]], "mixed"),
        ([["I-PER", "I-LOC"]], "IOB1"),  # an I- of another type opens an entity
        ([["B-PER", "I-LOC"]], "mixed"),  # B- after nothing and I- after another type
    ],
)
def test_detect_scheme(sequences, scheme):
    assert detect_scheme(sequences) == scheme


def test_to_iob2_converts_iob1_and_leaves_iob2_alone():
    assert to_iob2(["I-PER", "I-PER", "B-PER", "I-PER", "O", "I-LOC", "I-ORG"]) == [
        "B-PER",
        "I-PER",
        "B-PER",
        "I-PER",
        "O",
        "B-LOC",
        "B-ORG",
    ]
    iob2 = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC"]
    assert to_iob2(iob2) == iob2


def test_conversion_keeps_the_entities():
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "I-ORG"]
    assert extract_entities(to_iob2(iob1)) == extract_entities(iob1)


def test_entity_types_are_sorted_without_their_prefixes():
    assert entity_types(["O", "B-PER", "I-PER", "B-LOC"]) == ["LOC", "PER"]


# --- alignment -----------------------------------------------------------------------------------------------


def test_align_labels_marks_first_sub_tokens_only():
    assert align_labels([None, 0, 0, 1, 2, 2, 2, None], [4, 5, 6]) == [-100, 4, -100, 5, 6, -100, -100, -100]
    assert align_labels([], []) == []


def _words(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    syllables = ["ka", "to", "ri", "men", "sa", "lo", "ver", "un", "di", "pa"]
    return ["".join(rng.choices(syllables, k=rng.randint(1, 4))).capitalize() for _ in range(n)]


WORDS = _words()
LABELS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
LABEL_TO_ID = {label: i for i, label in enumerate(LABELS)}


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tokenizer(request) -> tuple[Tokenizer, str]:
    # A vocabulary far smaller than the words, so most words split into several sub-tokens.
    texts = [" ".join(WORDS[i : i + 10]) for i in range(0, len(WORDS), 10)]
    size = {"bert": 120, "roberta": 300}[request.param]
    return train_tokenizer(request.param, texts, vocab_size=size, show_progress=False), request.param


def _sentences(n: int = 12, seed: int = 1) -> list[Sentence]:
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        tokens = rng.sample(WORDS, rng.randint(3, 9)) + ["U.S.", "'s"]
        tags = to_iob2(rng.choices(["O", "I-PER", "I-LOC"], k=len(tokens)))
        sentences.append(Sentence(tokens, tags))
    return sentences


def test_encode_ner_labels_each_word_on_its_first_sub_token(tokenizer):
    tokenizer, family = tokenizer
    sentences = _sentences()
    features = encode_ner(tokenizer, family, sentences, LABEL_TO_ID, max_length=128)
    split_words = 0
    for sentence, ids, labels, word_ids in zip(
        sentences, features["input_ids"], features["labels"], features["word_ids"], strict=True
    ):
        assert word_ids[0] is None and word_ids[-1] is None  # the specials
        assert labels[0] == labels[-1] == IGNORE_INDEX
        firsts = [word_ids.index(word) for word in range(len(sentence.tokens))]
        assert [labels[i] for i in firsts] == [LABEL_TO_ID[tag] for tag in sentence.tags]
        assert all(label == IGNORE_INDEX for i, label in enumerate(labels) if i not in firsts)
        tokens = [tokenizer.id_to_token(ids[i]) for i in firsts]
        if family == "roberta":
            # Every word, the first included, starts with the byte-level space marker.
            assert all(token.startswith("Ġ") for token in tokens)
        else:
            assert not any(token.startswith("##") for token in tokens)
        split_words += len(word_ids) - 2 - len(firsts)
    assert split_words > 0  # the test would prove little if no word had a second sub-token
    assert set(features["truncated_words"]) == set(features["untokenized_words"]) == {0}
    assert all(set(mask) == {1} for mask in features["attention_mask"])


def test_encode_ner_counts_words_cut_off_by_truncation(tokenizer):
    tokenizer, family = tokenizer
    sentence = Sentence(WORDS[:20], ["B-PER"] + ["O"] * 19)
    full = encode_ner(tokenizer, family, [sentence], LABEL_TO_ID, max_length=512)
    cut = encode_ner(tokenizer, family, [sentence], LABEL_TO_ID, max_length=12)
    assert len(cut["input_ids"][0]) == 12
    kept_words = len({word for word in cut["word_ids"][0] if word is not None})
    assert cut["truncated_words"] == [20 - kept_words] and kept_words < 20
    # The kept part is aligned exactly as without truncation.
    assert cut["labels"][0][:-1] == full["labels"][0][:11]
    assert cut["untokenized_words"] == [0]


def test_encode_ner_refuses_unknown_tags_and_families(tokenizer):
    tokenizer, family = tokenizer
    with pytest.raises(BvrError, match="B-MISC"):
        encode_ner(tokenizer, family, [Sentence(["Ka"], ["B-MISC"])], LABEL_TO_ID, max_length=16)
    with pytest.raises(BvrError, match="unknown tokenizer family"):
        encode_ner(tokenizer, "gpt", [Sentence(["Ka"], ["O"])], LABEL_TO_ID, max_length=16)


def test_encode_ner_leaves_the_callers_tokenizer_settings_alone(tokenizer):
    tokenizer, family = tokenizer
    padded = Tokenizer.from_str(tokenizer.to_str())
    padded.enable_padding(length=64)
    features = encode_ner(padded, family, [Sentence(["Ka", "To"], ["O", "B-PER"])], LABEL_TO_ID, max_length=16)
    assert len(features["input_ids"][0]) < 16  # not padded: the collator pads
    assert padded.padding is not None and padded.padding["length"] == 64


# --- entities and scores -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tags", "entities"),
    [
        (["I-PER", "I-PER", "O"], {("PER", 0, 2)}),  # I- without B- opens an entity
        (["O", "I-LOC"], {("LOC", 1, 2)}),
        (["B-PER", "I-LOC"], {("PER", 0, 1), ("LOC", 1, 2)}),  # a type change ends one entity and opens another
        (["B-PER", "I-LOC", "I-LOC"], {("PER", 0, 1), ("LOC", 1, 3)}),
        (["B-PER", "B-PER"], {("PER", 0, 1), ("PER", 1, 2)}),  # adjacent B-B: two entities
        (["O", "B-LOC", "I-LOC"], {("LOC", 1, 3)}),  # entity at the end of the sentence
        (["B-ORG", "I-ORG", "B-ORG", "I-ORG"], {("ORG", 0, 2), ("ORG", 2, 4)}),
        (["O", "O"], set()),
        ([], set()),
    ],
)
def test_extract_entities(tags, entities):
    assert extract_entities(tags) == entities


def test_extract_entities_refuses_non_iob_tags():
    with pytest.raises(ValueError, match="E-PER"):
        extract_entities(["E-PER"])


# Worked by hand: gold PER(0,2) LOC(3,4) ORG(0,1); predicted PER(0,2) ORG(3,4) ORG(0,1); PER and ORG(0,1) match.
GOLD = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
PRED = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]


def test_entity_f1_overall_and_per_type_by_hand():
    scores = entity_f1(GOLD, PRED)
    assert scores["precision"] == pytest.approx(2 / 3)
    assert scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(2 / 3)
    assert (scores["support"], scores["predicted"]) == (3, 3)
    per_type = scores["per_type"]
    assert per_type["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1, "predicted": 1}
    assert per_type["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 0}
    assert per_type["ORG"]["precision"] == 0.5 and per_type["ORG"]["recall"] == 1.0
    assert per_type["ORG"]["f1"] == pytest.approx(2 / 3)


def test_entity_f1_requires_exact_boundaries():
    # A predicted entity one word short is both a false positive and a false negative.
    scores = entity_f1([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    assert (scores["precision"], scores["recall"], scores["f1"]) == (0.0, 0.0, 0.0)


def test_entity_f1_is_zero_without_predictions_or_gold():
    assert entity_f1([["B-PER", "O"]], [["O", "O"]])["f1"] == 0.0
    assert entity_f1([["O", "O"]], [["B-PER", "O"]])["f1"] == 0.0
    nothing = entity_f1([["O"]], [["O"]])
    assert (nothing["f1"], nothing["per_type"]) == (0.0, {})


def test_entity_f1_refuses_sequences_of_different_lengths():
    with pytest.raises(ValueError, match="2 gold tags but 1 predicted"):
        entity_f1([["O", "O"]], [["O"]])


def test_entity_f1_metric_equals_the_function_over_batches():
    rng = random.Random(3)
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
    gold = [rng.choices(tags, k=rng.randint(1, 12)) for _ in range(40)]
    pred = [[tag if rng.random() < 0.7 else rng.choice(tags) for tag in sentence] for sentence in gold]
    metric = EntityF1.from_labels(tags)
    for start in range(0, len(gold), 7):
        metric.update(gold[start : start + 7], pred[start : start + 7])
    expected = entity_f1(gold, pred)
    assert metric.compute().item() == expected["f1"]
    assert metric.report() == expected
    metric.reset()
    with pytest.raises(ValueError, match="MISC"):
        metric.update([["B-MISC"]], [["O"]])


def test_predictions_and_labels_back_to_word_tags():
    id_to_label = ["O", "B-PER", "I-PER"]
    labels = torch.tensor([[-100, 1, -100, 2, -100], [-100, 0, 0, -100, -100]])  # (batch, seq)
    logits = torch.zeros(2, 5, 3)  # (batch, seq, labels)
    logits[0, 1, 1] = logits[0, 3, 0] = logits[1, 1, 0] = logits[1, 2, 1] = 1.0
    logits[0, 2, 2] = 5.0  # a later sub-token: ignored
    assert labels_to_tags(labels, id_to_label) == [["B-PER", "I-PER"], ["O", "O"]]
    assert predictions_to_tags(logits, labels, id_to_label) == [["B-PER", "O"], ["O", "B-PER"]]
