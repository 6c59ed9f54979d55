"""SQuAD windows: questions and contexts encoded as overlapping (question, context) token windows, each with its
tokens' context characters and the answer's start and end token (:func:`encode_squad`)."""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

from bvr.errors import BvrError
from bvr.tasks.readers.squad_json import SquadExample
from bvr.tokenization import plain_tokenizer

CLS_INDEX = 0
"""Where both families put [CLS] / <s>; a window without the answer points its start and end here."""

MAX_LENGTH = 384
DOC_STRIDE = 128
MAX_QUESTION_LENGTH = 64
"""Question tokens kept, as in BERT's run_squad.py, so a long question cannot crowd the context out of a window."""

Offsets = list[tuple[int, int] | None]
"""Per token, the (start, end) characters of the context it covers; None for question and special tokens."""


def _trim(context: str, start: int, end: int) -> tuple[int, int]:
    """A character span without the whitespace at its ends (byte-level tokens carry the space before a word)."""
    while start < end and context[start].isspace():
        start += 1
    while end > start and context[end - 1].isspace():
        end -= 1
    return start, end


def _cut_questions(tokenizer: Tokenizer, questions: list[str],
                   max_question_length: int) -> tuple[list[str], list[bool]]:
    """Questions cut after their first ``max_question_length`` tokens, and which were cut."""
    encodings = tokenizer.encode_batch(questions, add_special_tokens=False) if questions else []
    cut, was_cut = [], []
    for question, encoding in zip(questions, encodings, strict=True):
        too_long = len(encoding.ids) > max_question_length
        cut.append(question[: encoding.offsets[max_question_length - 1][1]] if too_long else question)
        was_cut.append(too_long)
    return cut, was_cut


def _labelled_span(example: SquadExample, offsets: Offsets) -> tuple[int, int]:
    """The window's first and last token of the first reference answer (the one training uses), or
    (:data:`CLS_INDEX`, :data:`CLS_INDEX`) when the question is impossible or the window lacks the whole answer."""
    if example.is_impossible or not example.answers:
        return CLS_INDEX, CLS_INDEX
    text, start = example.answers[0]
    start_char, end_char = _trim(example.context, start, start + len(text))
    tokens = [i for i, offset in enumerate(offsets) if offset is not None and offset[1] > offset[0]]
    if not tokens or offsets[tokens[0]][0] > start_char or offsets[tokens[-1]][1] < end_char:
        return CLS_INDEX, CLS_INDEX
    return (next(i for i in tokens if offsets[i][1] > start_char),
            next(i for i in reversed(tokens) if offsets[i][0] < end_char))


_SQUAD_KEYS = ("input_ids", "attention_mask", "token_type_ids", "example_index", "example_id", "offsets",
               "start_positions", "end_positions", "question_truncated")


def encode_squad(tokenizer: Tokenizer, examples: Sequence[SquadExample], *, max_length: int = MAX_LENGTH,
                 stride: int = DOC_STRIDE, max_question_length: int = MAX_QUESTION_LENGTH) -> dict[str, list]:
    """Windows of (question, context) token pairs over each example's context, for training and evaluation alike.

    The question comes first, whitespace at its start removed and cut to ``max_question_length`` tokens; the
    context fills the rest of each window, consecutive windows sharing ``stride`` tokens, so every answer shorter
    than the overlap lies whole in some window. The family's pair template adds the specials (BERT:
    ``[CLS] q [SEP] c [SEP]``, token types 0 then 1; RoBERTa: ``<s> q </s></s> c </s>``); byte-level offsets that
    start at the space before a word are trimmed to the word. The tokenizer's own truncation and padding are ignored,
    and nothing is padded. Per window: ``input_ids``, ``attention_mask``, ``token_type_ids``, ``example_index`` (into
    ``examples``), ``example_id``, ``offsets`` (:data:`Offsets`), ``start_positions`` and ``end_positions``
    (:func:`_labelled_span`) and ``question_truncated``.
    """
    room = max_length - tokenizer.num_special_tokens_to_add(is_pair=True) - max_question_length
    if stride < 0 or room <= stride:
        raise BvrError(f"max_length {max_length} leaves {room} context tokens per window, not more than the stride "
                       f"{stride}", where="max_length",
                       hint="raise max_length or lower the stride or max_question_length")
    windowed = plain_tokenizer(tokenizer)  # a copy: truncation is tokenizer state
    questions = [example.question.lstrip() for example in examples]
    questions, cut = _cut_questions(windowed, questions, max_question_length)
    windowed.enable_truncation(max_length, stride=stride, strategy="only_second")
    pairs = [(question, example.context) for question, example in zip(questions, examples, strict=True)]
    encodings = windowed.encode_batch(pairs) if pairs else []
    features: dict[str, list] = {key: [] for key in _SQUAD_KEYS}
    for index, (example, encoding) in enumerate(zip(examples, encodings, strict=True)):
        for window in [encoding, *encoding.overflowing]:
            offsets = [_trim(example.context, *offset) if sequence == 1 else None  # context tokens only
                       for offset, sequence in zip(window.offsets, window.sequence_ids, strict=True)]
            values = (window.ids, window.attention_mask, window.type_ids, index, example.id, offsets,
                      *_labelled_span(example, offsets), cut[index])
            for key, value in zip(_SQUAD_KEYS, values, strict=True):
                features[key].append(value)
    return features
