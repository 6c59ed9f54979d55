"""Tests for SQuAD (bvr.tasks.readers.squad_json, bvr.tasks.squad: windows, decode, metric): reader, article split,
windows, span decoding and the official metrics."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, processors

from bvr.errors import BvrError
from bvr.tasks.readers.squad_json import SquadExample, read_squad, references, split_by_article
from bvr.tasks.squad.decode import decode_predictions, window_candidates
from bvr.tasks.squad.metric import (
    best_threshold,
    evaluate_v2,
    exact_match,
    na_probability,
    normalize_answer,
    squad_scores,
    token_f1,
)
from bvr.tasks.squad.windows import CLS_INDEX, encode_squad
from bvr.tokenization import train_tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "squad"


# --- reader --------------------------------------------------------------------------------------------------


def test_read_v1_1():
    examples, report = read_squad(FIXTURES / "v1.1.json")
    assert (report.version, report.articles, report.paragraphs, report.questions) == ("1.1", 3, 4, 5)
    assert (report.answerable, report.impossible, report.reference_answers) == (5, 0, 9)
    assert report.answers_per_question == {1: 2, 2: 2, 3: 1}
    assert report.answer_mismatches == 0
    first = examples[0]
    assert (first.id, first.title, first.question) == ("sb-1", "Super_Bowl_50", "Which team won Super Bowl 50?")
    assert first.answer_texts == ["Denver Broncos", "The Denver Broncos", "Denver Broncos"]
    for text, start in first.answers:
        assert first.context[start : start + len(text)] == text
    assert not first.is_impossible
    assert "5 questions" in report.describe()


def test_read_v2_0():
    examples, report = read_squad(FIXTURES / "v2.0.json")
    assert (report.version, report.questions, report.answerable, report.impossible) == ("2.0", 4, 2, 2)
    impossible = {example.id: example for example in examples if example.is_impossible}
    assert set(impossible) == {"no-2", "wa-2"}
    assert impossible["no-2"].answers == ()
    assert references(examples) == {"no-1": ["France"], "no-2": [], "wa-2": [], "wa-1": ["Vistula River"]}


def test_malformed_entry_names_file_question_and_path():
    with pytest.raises(BvrError) as caught:
        read_squad(FIXTURES / "malformed.json")
    message = str(caught.value)
    assert "malformed.json:data[0].paragraphs[0].qas[1].answers[0]" in message
    assert "'wa-bad'" in message and "does not fit the context" in message


def _edited(tmp_path: Path, edit) -> Path:
    content = json.loads((FIXTURES / "v2.0.json").read_text(encoding="utf-8"))
    edit(content["data"][1]["paragraphs"][0]["qas"])
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda qas: qas[1].pop("question"), r"qas\[1\]: question 'wa-1': missing 'question'"),
        (lambda qas: qas[0].update(answers=[{"text": "Warsaw", "answer_start": 0}]), "is_impossible but has answers"),
        (lambda qas: qas[1].update(answers=[]), "no answers and not marked is_impossible"),
        (lambda qas: qas[1].update(id="no-1"), "occur more than once"),
        (lambda qas: qas[1]["answers"][0].update(answer_start="3"), "'answer_start' is a str"),
    ],
)
def test_reader_refuses_malformed_entries(tmp_path, edit, expected):
    with pytest.raises(BvrError, match=expected):
        read_squad(_edited(tmp_path, edit))


def test_reader_refuses_invalid_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [\n{"title": }', encoding="utf-8")
    with pytest.raises(BvrError, match=r"broken\.json:2: not valid JSON"):
        read_squad(path)


def test_reader_refuses_non_utf8_naming_the_line(tmp_path):
    path = tmp_path / "latin1.json"
    text = (FIXTURES / "v1.1.json").read_text(encoding="utf-8")
    path.write_bytes(text.replace("Which team", "Wh\xefch team", 1).encode("latin-1", errors="replace"))
    line = text[: text.index("Which team")].count("\n") + 1
    with pytest.raises(BvrError, match=rf"latin1\.json:{line}: not UTF-8"):
        read_squad(path)


def test_reader_refuses_answers_mostly_off_their_offsets(tmp_path):
    # Offsets one character late on every answer (bytes counted, say) once trained on the wrong spans silently.
    content = json.loads((FIXTURES / "v1.1.json").read_text(encoding="utf-8"))
    for article in content["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                for answer in qa["answers"]:
                    answer["answer_start"] = max(answer["answer_start"] - 1, 0)
    path = tmp_path / "shifted.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(BvrError, match=r"shifted\.json: 9 of 9 answers are not at their answer_start") as err:
        read_squad(path)
    assert "counts characters of the context from 0" in err.value.hint


# --- article split -------------------------------------------------------------------------------------------


def _articles(n_articles: int = 20) -> list[SquadExample]:
    return [
        SquadExample(f"{a}-{q}", f"Article {a}", "Some context.", "Why?", (("context", 5),))
        for a in range(n_articles)
        for q in range(a % 4 + 1)
    ]


def test_split_by_article_is_disjoint_deterministic_and_order_free():
    examples = _articles()
    train, evaluation, description = split_by_article(examples, 0.2, seed=0)
    train_titles, eval_titles = {e.title for e in train}, {e.title for e in evaluation}
    assert not train_titles & eval_titles
    assert len(eval_titles) == 4 and len(train) + len(evaluation) == len(examples)
    assert split_by_article(examples, 0.2, seed=0) == (train, evaluation, description)
    shuffled = random.Random(0).sample(examples, len(examples))
    assert {e.title for e in split_by_article(shuffled, 0.2, seed=0)[1]} == eval_titles
    assert any({e.title for e in split_by_article(examples, 0.2, seed=s)[1]} != eval_titles for s in range(1, 4))
    assert f"eval 4 articles, {len(evaluation)} questions" in description
    assert f"train 16 articles, {len(train)} questions" in description
    assert all(title in description for title in train_titles | eval_titles)


def test_split_by_article_keeps_both_sides_non_empty_and_checks_its_arguments():
    train, evaluation, _ = split_by_article(_articles(3), 0.01, seed=0)
    assert len({e.title for e in evaluation}) == 1 and train
    with pytest.raises(BvrError, match="fraction"):
        split_by_article(_articles(), 1.0, seed=0)
    with pytest.raises(BvrError, match="cannot be split"):
        split_by_article(_articles(1), 0.5, seed=0)


# --- metrics -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Denver Broncos", "denver broncos"),
        ("  Levi's   Stadium. ", "levis stadium"),
        ("an apple a day", "apple day"),
        ("Theatre of the arts", "theatre of arts"),  # "the" only as a word
        ("The.", ""),
        ("Denver-Broncos, Inc.", "denverbroncos inc"),
    ],
)
def test_normalize_answer(text, normal):
    assert normalize_answer(text) == normal


def test_exact_match_and_f1_by_hand():
    assert exact_match("the Denver Broncos!", ["Denver Broncos"]) == 1.0
    assert exact_match("Broncos", ["Denver Broncos"]) == 0.0
    # "denver" against "denver broncos": precision 1, recall 1/2.
    assert token_f1("Denver", ["Denver Broncos"]) == pytest.approx(2 / 3)
    # The best reference counts: 1/2 against the first, P 1 and R 2/3 (F1 0.8) against the second.
    assert token_f1("Broncos won", ["Denver Broncos", "Broncos won it"]) == pytest.approx(0.8)
    assert exact_match("Levi's Stadium.", ["Levis Stadium", "Santa Clara"]) == 1.0
    # Repeated tokens count only as often as they occur in both.
    assert token_f1("go go go", ["go"]) == pytest.approx(0.5)


def test_no_answer_scoring_follows_each_script():
    assert (exact_match("", []), token_f1("", [])) == (1.0, 1.0)
    assert (exact_match("Paris", []), token_f1("Paris", [])) == (0.0, 0.0)
    assert (exact_match("", ["Paris"]), token_f1("", ["Paris"])) == (0.0, 0.0)
    assert token_f1("", ["Paris"], version="1.1") == 0.0
    # A reference that normalises to nothing: v2.0 drops it (so "" is expected), v1.1 keeps it and its F1 is 0.
    assert (exact_match("a", ["the"]), token_f1("a", ["the"])) == (1.0, 1.0)
    assert (exact_match("a", ["the"], "1.1"), token_f1("a", ["the"], "1.1")) == (1.0, 0.0)


def test_squad_scores_v2_with_breakdown_by_hand():
    refs = {"q1": ["Denver Broncos"], "q2": ["Paris", "City of Paris"], "q3": [], "q4": []}
    preds = {"q1": "Denver", "q2": "paris", "q3": "", "q4": "London"}
    scores = squad_scores(preds, refs, version="2.0")
    assert scores["exact"] == pytest.approx(100 * 2 / 4)
    assert scores["f1"] == pytest.approx(100 * (2 / 3 + 1 + 1 + 0) / 4)
    assert (scores["HasAns_exact"], scores["HasAns_total"]) == (50.0, 2)
    assert scores["HasAns_f1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert (scores["NoAns_exact"], scores["NoAns_f1"], scores["NoAns_total"]) == (50.0, 50.0, 2)
    assert scores["total"] == 4 and scores["missing"] == 0


def test_missing_predictions_follow_each_script():
    refs = {"q1": ["Paris"], "q2": ["Rome"]}
    v1 = squad_scores({"q1": "Paris"}, refs, version="1.1")
    assert (v1["exact"], v1["total"], v1["missing"]) == (50.0, 2, 1)  # v1.1 scores it 0
    v2 = squad_scores({"q1": "Paris"}, refs, version="2.0")
    assert (v2["exact"], v2["total"], v2["missing"]) == (100.0, 1, 1)  # v2.0 leaves it out
    assert "NoAns_total" not in v2 and "HasAns_total" not in v1
    with pytest.raises(BvrError, match="unknown SQuAD version"):
        squad_scores({}, {}, version="3")


# --- windows -------------------------------------------------------------------------------------------------


def _lexicon(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    syllables = ["ka", "to", "ri", "men", "sa", "lo", "ver", "un", "di", "pa"]
    return ["".join(rng.choices(syllables, k=rng.randint(1, 3))) for _ in range(n)]


LEXICON = _lexicon()


@pytest.fixture(scope="module", params=["bert", "roberta", "roberta-untrimmed"])
def tokenizer(request) -> Tokenizer:
    family = request.param.split("-")[0]
    texts = [" ".join(LEXICON[i : i + 10]) + "." for i in range(0, len(LEXICON), 10)]
    trained = train_tokenizer(family, texts, vocab_size={"bert": 150, "roberta": 320}[family], show_progress=False)
    if request.param == "roberta-untrimmed":
        # Offsets that keep the space before each word, so the module's own trimming is what maps spans exactly.
        trained.post_processor = processors.RobertaProcessing(
            ("</s>", trained.token_to_id("</s>")), ("<s>", trained.token_to_id("<s>")), trim_offsets=False
        )
    return trained


def _context(n_words: int = 60, seed: int = 2) -> str:
    rng = random.Random(seed)
    words = rng.choices(LEXICON, k=n_words)
    return " ".join(word.capitalize() if i % 9 == 0 else word for i, word in enumerate(words)) + "."


def _every_two_word_answer(context: str) -> list[SquadExample]:
    starts = [0] + [i + 1 for i, char in enumerate(context) if char == " "]
    examples = []
    for n, start in enumerate(starts[:-2]):
        text = context[start : starts[n + 2] - 1]
        examples.append(SquadExample(f"q{n}", "T", context, " What is it?", ((text, start),)))
    return examples


def _window_span(offsets) -> tuple[int, int]:
    spans = [offset for offset in offsets if offset is not None and offset[1] > offset[0]]
    return spans[0][0], spans[-1][1]


def test_windows_label_answers_they_hold_whole_and_cls_otherwise(tokenizer):
    context = _context()
    examples = _every_two_word_answer(context)
    features = encode_squad(tokenizer, examples, max_length=40, stride=10, max_question_length=8)
    assert all(len(ids) <= 40 for ids in features["input_ids"])
    crossing = 0
    for example_index, example in enumerate(examples):
        (text, start), end = example.answers[0], example.answers[0][1] + len(example.answers[0][0])
        windows = [w for w, i in enumerate(features["example_index"]) if i == example_index]
        assert len(windows) > 1
        holding = 0
        for w in windows:
            first, last = _window_span(features["offsets"][w])
            s, e = features["start_positions"][w], features["end_positions"][w]
            if first <= start and end <= last:
                holding += 1
                offsets = features["offsets"][w]
                assert context[offsets[s][0] : offsets[e][1]] == text  # exact characters, no stray space
            else:
                crossing += first < end and start < last  # the answer straddles this window's edge
                assert (s, e) == (CLS_INDEX, CLS_INDEX)
        assert holding >= 1
    assert crossing > 0  # some answers did cross a window boundary


def test_windows_overlap_by_the_stride_and_put_the_question_first(tokenizer):
    context = _context()
    example = SquadExample("q", "T", context, "What is it?", ((context[:4], 0),))
    features = encode_squad(tokenizer, [example], max_length=40, stride=10, max_question_length=8)
    context_ids = [
        [token for token, offset in zip(ids, offsets, strict=True) if offset is not None]
        for ids, offsets in zip(features["input_ids"], features["offsets"], strict=True)
    ]
    assert len(context_ids) >= 3
    for before, after in zip(context_ids, context_ids[1:], strict=False):
        assert before[-10:] == after[:10]
    ids, offsets = features["input_ids"][0], features["offsets"][0]
    assert offsets[0] is None and offsets[1] is None and offsets[-1] is None  # CLS, question, closing separator
    assert ids[0] == tokenizer.token_to_id("[CLS]" if tokenizer.token_to_id("[CLS]") is not None else "<s>")


def test_question_is_cut_and_impossible_questions_point_at_cls(tokenizer):
    context = _context(20)
    long_question = " ".join(LEXICON[:30]) + "?"
    examples = [
        SquadExample("long", "T", context, long_question, ((context[:4], 0),)),
        SquadExample("none", "T", context, "Why?", (), is_impossible=True),
    ]
    features = encode_squad(tokenizer, examples, max_length=64, stride=16, max_question_length=8)
    assert set(features["example_index"]) == {0, 1}
    assert {i for i, cut in zip(features["example_index"], features["question_truncated"], strict=True) if cut} == {0}
    impossible = [w for w, i in enumerate(features["example_index"]) if i == 1]
    assert all(features["start_positions"][w] == features["end_positions"][w] == CLS_INDEX for w in impossible)
    with pytest.raises(BvrError, match="not more than the stride"):
        encode_squad(tokenizer, examples, max_length=32, stride=24, max_question_length=8)


def test_perfect_logits_decode_to_the_answer(tokenizer):
    context = _context()
    examples = _every_two_word_answer(context)[::7]
    features = encode_squad(tokenizer, examples, max_length=40, stride=10, max_question_length=8)
    starts, ends = [], []
    for ids, s, e in zip(features["input_ids"], features["start_positions"], features["end_positions"], strict=True):
        starts.append(np.eye(len(ids))[s] * 10)
        ends.append(np.eye(len(ids))[e] * 10)
    decoded = decode_predictions(examples, features, starts, ends)
    assert decoded.predictions == {example.id: example.answers[0][0] for example in examples}


# --- decoding ------------------------------------------------------------------------------------------------

# A hand-made window: [CLS] q q [SEP] alpha bravo charlie delta [SEP], context "alpha bravo charlie delta".
CONTEXT = "alpha bravo charlie delta"
OFFSETS = [None, None, None, None, (0, 5), (6, 11), (12, 19), (20, 25), None]


def _logits(values: dict[int, float]) -> np.ndarray:
    logits = np.zeros(len(OFFSETS))
    for position, value in values.items():
        logits[position] = value
    return logits


def test_span_decoding_keeps_context_order_and_length_limits():
    # The highest start is a question token, and the highest end comes before every good start: neither wins.
    starts = _logits({1: 9.0, 4: -5.0, 5: 2.0, 6: 4.0})
    ends = _logits({4: 8.0, 6: 3.0, 7: 2.5})
    candidates = sorted(window_candidates(starts, ends, OFFSETS, CONTEXT), key=lambda c: -c.score)
    assert [(c.text, c.score) for c in candidates[:3]] == [
        ("charlie", 7.0),
        ("charlie delta", 6.5),
        ("bravo charlie", 5.0),
    ]
    context_spans = {offset for offset in OFFSETS if offset is not None}
    for candidate in candidates:
        assert candidate.start_char in {s for s, _ in context_spans} and candidate.end_char in {
            e for _, e in context_spans
        }
        assert candidate.start_char < candidate.end_char
        assert candidate.text == CONTEXT[candidate.start_char : candidate.end_char]
    assert len(candidates) == 10  # every (start, end) pair of the 4 context tokens with end >= start
    # Length limit: "bravo charlie delta" is 3 tokens.
    starts, ends = _logits({5: 5.0}), _logits({7: 5.0, 6: 1.0})
    assert max(window_candidates(starts, ends, OFFSETS, CONTEXT), key=lambda c: c.score).text == "bravo charlie delta"
    limited = window_candidates(starts, ends, OFFSETS, CONTEXT, max_answer_length=2)
    assert max(limited, key=lambda c: c.score).text == "bravo charlie"
    assert all(c.end_char <= 19 or c.start_char >= 12 for c in limited)


def test_span_decoding_ignores_padding_beyond_the_offsets():
    starts = np.concatenate([_logits({4: 1.0}), [50.0, 50.0]])  # padded positions score highest
    ends = np.concatenate([_logits({4: 1.0}), [50.0, 50.0]])
    assert max(window_candidates(starts, ends, OFFSETS, CONTEXT), key=lambda c: c.score).text == "alpha"


def _hand_features(n_windows: int) -> dict[str, list]:
    return {"example_index": [0] * n_windows, "offsets": [OFFSETS] * n_windows}


def test_best_span_is_chosen_over_all_windows():
    example = SquadExample("q", "T", CONTEXT, "?", (("delta", 20),))
    starts = [_logits({4: 1.0}), _logits({7: 3.0})]
    ends = [_logits({4: 1.0}), _logits({7: 3.0})]
    decoded = decode_predictions([example], _hand_features(2), starts, ends)
    assert decoded.predictions == {"q": "delta"} and decoded.candidates["q"][0].score == 6.0


def test_v2_null_decision_uses_the_smallest_cls_score_and_the_threshold():
    example = SquadExample("q", "T", CONTEXT, "?", ())
    # Window CLS scores 6 and 2: the null score is 2. The best span scores 3 ("bravo").
    starts = [_logits({0: 3.0, 5: 1.0}), _logits({0: 1.0, 5: 1.5})]
    ends = [_logits({0: 3.0, 5: 1.0}), _logits({0: 1.0, 5: 1.5})]
    decoded = decode_predictions([example], _hand_features(2), starts, ends, version_2=True)
    assert decoded.null_diffs["q"] == pytest.approx(2.0 - 3.0)
    assert decoded.na_probs["q"] == pytest.approx(1 / (1 + math.e))  # softmax of null (2) against span (3)
    assert decoded.predictions["q"] == "bravo"  # -1 is not above the threshold 0
    decoded = decode_predictions([example], _hand_features(2), starts, ends, version_2=True, threshold=-1.5)
    assert decoded.predictions["q"] == "" and decoded.best_spans["q"] == "bravo"
    v1 = decode_predictions([example], _hand_features(2), starts, ends, threshold=-1.5)
    assert v1.predictions["q"] == "bravo"  # v1.1 always answers


def test_no_valid_span_means_no_answer():
    example = SquadExample("q", "T", CONTEXT, "?", ())
    only_question = [None, None, None, None, None, None, None, None, None]
    features = {"example_index": [0], "offsets": [only_question]}
    decoded = decode_predictions([example], features, [_logits({})], [_logits({})], version_2=True)
    assert decoded.predictions["q"] == "" and decoded.null_diffs["q"] == math.inf and decoded.na_probs["q"] == 1.0


def test_best_threshold_by_hand():
    # Sorted by null-score difference: A (has answer, right), C (has answer, F1 0.8), D and B (no answer, spans).
    # Exact match: 2 (all null) -> A 3 -> C 3 -> D 2 -> B 1: best 3/4 at A's -1.0.
    # F1: 2 -> A 3 -> C 3.8 -> D 2.8 -> B 1.8: best 3.8/4 at C's 0.2.
    refs = {"A": ["Denver Broncos"], "B": [], "C": ["Broncos won it"], "D": []}
    spans = {"A": "Denver Broncos", "B": "x", "C": "Broncos won", "D": "y"}
    diffs = {"A": -1.0, "B": 2.0, "C": 0.2, "D": 0.5}
    result = best_threshold(spans, diffs, refs)
    assert result["best_exact"] == pytest.approx(75.0) and result["best_exact_thresh"] == -1.0
    assert result["best_f1"] == pytest.approx(95.0) and result["best_f1_thresh"] == 0.2
    # Applying the threshold reproduces the best score.
    answered = {qid: "" if diffs[qid] > result["best_f1_thresh"] else span for qid, span in spans.items()}
    assert squad_scores(answered, refs, "2.0")["f1"] == pytest.approx(95.0)
    # Answering nothing is best when every span is wrong: threshold 0.0, as the script starts.
    nothing = best_threshold({"A": "x", "B": "y"}, {"A": 1.0, "B": 2.0}, {"A": ["z"], "B": []})
    assert (nothing["best_exact"], nothing["best_exact_thresh"]) == (50.0, 0.0)
    with pytest.raises(ValueError, match="lack a prediction"):
        best_threshold({}, {}, refs)


# --- the v2.0 script's whole output ----------------------------------------------------------------------------

# A and C answered (C half right), B answered "" rightly, D given a span though unanswerable, E answered "" wrongly.
V2_REFS = {"A": ["Denver Broncos"], "B": [], "C": ["Broncos won it"], "D": [], "E": ["Paris"]}
V2_PREDS = {"A": "Denver Broncos", "B": "", "C": "Broncos won", "D": "y", "E": ""}
V2_NA_PROBS = {"A": 0.1, "B": 0.9, "C": 0.4, "D": 0.4, "E": 0.7}  # C and D tie


def test_evaluate_v2_by_hand():
    scores = evaluate_v2(V2_PREDS, V2_NA_PROBS, V2_REFS)
    # Per question (exact, F1): A (1, 1), B (1, 1), C (0, 0.8), D (0, 0), E (0, 0).
    assert scores["exact"] == pytest.approx(40.0) and scores["f1"] == pytest.approx(56.0) and scores["total"] == 5
    assert scores["HasAns_exact"] == pytest.approx(100 / 3) and scores["HasAns_f1"] == pytest.approx(60.0)
    assert (scores["NoAns_exact"], scores["NoAns_f1"], scores["HasAns_total"], scores["NoAns_total"]) == (50, 50, 3, 2)
    # Swept in na_prob order A (0.1), C (0.4), D (0.4), E (0.7), B (0.9) from 2 (the two no-answer questions):
    # exact 2 -> 3 at A, then C +0, D -1, E +0, B 0: best 3/5 at 0.1; F1 2 -> 3 -> 3.8 at C, then 2.8: 3.8/5 at 0.4.
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (pytest.approx(60.0), 0.1)
    assert (scores["best_f1"], scores["best_f1_thresh"]) == (pytest.approx(76.0), 0.4)
    # Without a threshold the scores are squad_scores'.
    plain = squad_scores(V2_PREDS, V2_REFS, "2.0")
    assert {key: scores[key] for key in plain} == plain


def test_evaluate_v2_ties_follow_the_order_of_the_na_prob_file():
    # D before C: the running F1 total drops to 2 at D before C adds 0.8, so 3.8 is never reached.
    swapped = {"A": 0.1, "B": 0.9, "D": 0.4, "C": 0.4, "E": 0.7}
    scores = evaluate_v2(V2_PREDS, swapped, V2_REFS)
    assert (scores["best_f1"], scores["best_f1_thresh"]) == (pytest.approx(60.0), 0.1)
    assert (scores["exact"], scores["f1"]) == (pytest.approx(40.0), pytest.approx(56.0))


def test_evaluate_v2_applies_the_na_prob_threshold_and_leaves_missing_questions_out():
    # Above 0.3: C (loses its 0.8), D (now right), E and B answer "".
    strict = evaluate_v2(V2_PREDS, V2_NA_PROBS, V2_REFS, na_prob_thresh=0.3)
    assert (strict["exact"], strict["f1"]) == (pytest.approx(60.0), pytest.approx(60.0))
    assert strict["best_f1"] == pytest.approx(76.0)  # the sweep uses the raw scores, as in the script
    partial = evaluate_v2({q: p for q, p in V2_PREDS.items() if q != "E"}, V2_NA_PROBS, V2_REFS)
    # E is left out of every total, but the sweep still starts from both no-answer questions: 3.8 of 4.
    assert (partial["total"], partial["missing"], partial["HasAns_total"]) == (4, 1, 2)
    assert partial["best_f1"] == pytest.approx(95.0) and partial["f1"] == pytest.approx(70.0)
    with pytest.raises(ValueError, match="lack a no-answer probability"):
        evaluate_v2(V2_PREDS, {"A": 0.5}, V2_REFS)


@pytest.mark.parametrize(("diff", "probability"), [(0.0, 0.5), (math.log(3), 0.75), (-math.log(3), 0.25),
                                                   (-800.0, 0.0), (800.0, 1.0), (math.inf, 1.0)])
def test_na_probability_is_a_softmax_over_null_and_span(diff, probability):
    assert na_probability(diff) == pytest.approx(probability, abs=1e-15)
