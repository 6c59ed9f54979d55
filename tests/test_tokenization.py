"""Tests for bvr.tokenization: both families trained on a small generated corpus, offline and in seconds."""

from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from bvr.errors import BvrError
from bvr.tokenization import (
    BVR_FILE,
    DEFAULT_VOCAB_SIZE,
    FAMILIES,
    TOKENIZER_FILE,
    WORDPIECE_ALPHABET_LIMIT,
    describe_stats,
    load_tokenizer,
    save_tokenizer,
    tokenizer_stats,
    train_tokenizer,
    vocab_info,
)

# Small enough to train in milliseconds, large enough that the corpus below fills them exactly.
VOCAB_SIZE = {"bert": 300, "roberta": 400}
SPECIALS = {
    "bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    "roberta": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
}
EXTRA_SENTENCES = [
    "Café au lait and a naïve résumé, déjà vu.",
    "東京 and 北京 are capitals; 😀 is an emoji.",
    "Numbers like 1234 and 2021 appear too!",
]


def _corpus(n_sentences: int = 2_000, seed: int = 0) -> list[str]:
    """Sentences of invented words drawn with Zipf-like weights, so merges have many frequent pairs to choose from."""
    rng = random.Random(seed)
    syllables = ["ka", "to", "ri", "men", "sa", "lo", "ver", "un", "di", "pa", "ne", "gor", "shi", "el", "tra", "bo"]
    lexicon = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(300)]
    weights = [1.0 / (rank + 1) for rank in range(len(lexicon))]
    sentences = []
    for _ in range(n_sentences):
        words = rng.choices(lexicon, weights=weights, k=rng.randint(4, 12))
        sentences.append(" ".join(words).capitalize() + rng.choice([".", "!", "?"]))
    return sentences + EXTRA_SENTENCES * 5


CORPUS = _corpus()


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def trained() -> dict[str, Tokenizer]:
    return {name: train_tokenizer(name, CORPUS, vocab_size=VOCAB_SIZE[name], show_progress=False) for name in FAMILIES}


@pytest.fixture(scope="module")
def saved(trained: dict[str, Tokenizer], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {name: save_tokenizer(tok, name, tmp_path_factory.mktemp(name)) for name, tok in trained.items()}


# --- registry and training -------------------------------------------------------------------------------------


def test_registry_and_defaults_agree() -> None:
    assert DEFAULT_VOCAB_SIZE == {"bert": 30_000, "roberta": 50_000}
    assert set(DEFAULT_VOCAB_SIZE) == set(FAMILIES)
    assert all(spec.name == name for name, spec in FAMILIES.items())


def test_special_tokens_have_ids_0_to_4(trained: dict[str, Tokenizer], family: str) -> None:
    tok = trained[family]
    assert [tok.id_to_token(i) for i in range(5)] == SPECIALS[family]


def test_vocab_size_is_respected(trained: dict[str, Tokenizer], family: str) -> None:
    assert trained[family].get_vocab_size() == VOCAB_SIZE[family]


def test_training_is_deterministic(trained: dict[str, Tokenizer], family: str) -> None:
    again = train_tokenizer(family, CORPUS, vocab_size=VOCAB_SIZE[family], show_progress=False)
    assert again.to_str() == trained[family].to_str()


def test_batches_train_the_same_tokenizer_as_strings(trained: dict[str, Tokenizer], family: str) -> None:
    batches = [CORPUS[i : i + 64] for i in range(0, len(CORPUS), 64)]
    from_batches = train_tokenizer(family, batches, vocab_size=VOCAB_SIZE[family], show_progress=False)
    assert from_batches.to_str() == trained[family].to_str()


def _tied_letters(count: int) -> list[str]:
    """``count`` letters that the BERT normaliser leaves alone, in code-point order."""
    normal = FAMILIES["bert"].build().normalizer
    chars = (chr(code) for code in range(0x100, 0x3000))
    return [c for c in chars if unicodedata.category(c) == "Lo" and normal.normalize_str(c) == c][:count]


def test_wordpiece_is_deterministic_when_the_alphabet_limit_cuts_ties() -> None:
    # 1,500 letters seen 3 times each: the stock trainer keeps a different 1,000 of them on each run.
    letters = _tied_letters(WORDPIECE_ALPHABET_LIMIT + 500)
    words = ["".join(letters[(i * 7 + j) % len(letters)] for j in range(3)) for i in range(len(letters))]
    corpus = [" ".join(words[k : k + 10]) for k in range(0, len(words), 10)]
    runs = {train_tokenizer("bert", corpus, vocab_size=3_000, show_progress=False).to_str() for _ in range(3)}
    assert len(runs) == 1
    kept = {token for token in json.loads(runs.pop())["model"]["vocab"] if token in letters}
    assert kept == set(letters[:WORDPIECE_ALPHABET_LIMIT])  # ties go to the lower code point


def test_unknown_family_names_the_families() -> None:
    with pytest.raises(BvrError) as caught:
        train_tokenizer("gpt2", CORPUS, show_progress=False)
    message = str(caught.value)
    assert "'gpt2'" in message and "bert" in message and "roberta" in message


def test_too_small_vocabulary_is_refused() -> None:
    with pytest.raises(BvrError, match="vocab_size 100 is too small for roberta"):
        train_tokenizer("roberta", CORPUS, vocab_size=100, show_progress=False)


def test_empty_text_is_refused() -> None:
    with pytest.raises(BvrError, match="no text"):
        train_tokenizer("bert", iter([]), vocab_size=100, show_progress=False)


# --- BERT WordPiece ----------------------------------------------------------------------------------------------


def test_wordpiece_has_continuations(trained: dict[str, Tokenizer]) -> None:
    tok = trained["bert"]
    assert any(token.startswith("##") for token in tok.get_vocab())
    pieces = tok.encode("karimenshidipagortra", add_special_tokens=False).tokens
    assert len(pieces) > 1 and all(piece.startswith("##") for piece in pieces[1:])


def test_only_the_family_specials_are_added_tokens(trained: dict[str, Tokenizer], family: str) -> None:
    # Training pins the WordPiece `##c` ids with extra special tokens; they must not match raw input afterwards.
    tok = trained[family]
    assert [token.content for token in tok.get_added_tokens_decoder().values()] == SPECIALS[family]
    if family == "bert":
        assert not any(token.startswith("##") for token in tok.encode("##ka ##to", add_special_tokens=False).tokens)


def test_one_shot_iterators_train_like_lists(trained: dict[str, Tokenizer], family: str) -> None:
    # "bert" reads its texts twice; a generator must give the same result as a list.
    once = train_tokenizer(family, (s for s in CORPUS), vocab_size=VOCAB_SIZE[family], show_progress=False)
    assert once.to_str() == trained[family].to_str()


def test_bert_lowercases_strips_accents_and_splits_cjk(trained: dict[str, Tokenizer]) -> None:
    tok = trained["bert"]
    assert tok.normalizer.normalize_str("Café RÉSUMÉ Naïve") == "cafe resume naive"
    assert tok.encode("Café RÉSUMÉ").ids == tok.encode("cafe resume").ids
    assert tok.encode("東京", add_special_tokens=False).tokens == ["東", "京"]


def test_wordpiece_round_trips_lowercase_words(trained: dict[str, Tokenizer]) -> None:
    tok = trained["bert"]
    text = " ".join(CORPUS[0].lower().rstrip(".!?").split() + ["karimenshi", "tobogor"])
    assert tok.decode(tok.encode(text).ids) == text


def test_bert_pair_template_and_token_types(trained: dict[str, Tokenizer]) -> None:
    tok = trained["bert"]
    first, second = tok.encode("ka to", add_special_tokens=False), tok.encode("ri", add_special_tokens=False)
    pair = tok.encode("ka to", "ri")
    assert pair.tokens == ["[CLS]", *first.tokens, "[SEP]", *second.tokens, "[SEP]"]
    assert pair.type_ids == [0] * (len(first.ids) + 2) + [1] * (len(second.ids) + 1)
    assert tok.encode("ka to").tokens == ["[CLS]", *first.tokens, "[SEP]"]


# --- RoBERTa byte-level BPE --------------------------------------------------------------------------------------

ROUND_TRIP_TEXTS = [
    "Hello, wörld! 😀 東京タワー",
    "  leading and trailing spaces  ",
    "tabs\tand\nnew lines\r\n",
    "e\u0301 (combining) ﬁ ligature, zero\u200bwidth, Ω≈ç√∫ 🇫🇷 👩🏽‍💻",
    "ALL CAPS and MiXeD and 12345.678",
    "",
]


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_byte_level_round_trips_any_text_without_unknowns(trained: dict[str, Tokenizer], text: str) -> None:
    tok = trained["roberta"]
    encoding = tok.encode(text, add_special_tokens=False)
    assert tok.decode(encoding.ids) == text
    assert tok.token_to_id("<unk>") not in encoding.ids


def test_roberta_pair_template_and_token_types(trained: dict[str, Tokenizer]) -> None:
    tok = trained["roberta"]
    first, second = tok.encode("Kato ri", add_special_tokens=False), tok.encode("sa", add_special_tokens=False)
    pair = tok.encode("Kato ri", "sa")
    assert pair.tokens == ["<s>", *first.tokens, "</s>", "</s>", *second.tokens, "</s>"]
    assert pair.type_ids == [0] * len(pair.ids)
    assert tok.encode("Kato ri").tokens == ["<s>", *first.tokens, "</s>"]


# --- vocab_info --------------------------------------------------------------------------------------------------


def test_vocab_info_fields(trained: dict[str, Tokenizer], family: str) -> None:
    tok = trained[family]
    info = vocab_info(tok, family)
    pad, unk, cls, sep, mask = {"bert": (0, 1, 2, 3, 4), "roberta": (1, 3, 0, 2, 4)}[family]
    assert (info.family, info.vocab_size) == (family, VOCAB_SIZE[family])
    assert (info.pad_id, info.unk_id, info.cls_id, info.sep_id, info.mask_id) == (pad, unk, cls, sep, mask)
    assert info.special_ids == (0, 1, 2, 3, 4)
    assert info.word_start.dtype == np.bool_ and info.word_start.shape == (VOCAB_SIZE[family],)
    assert info.word_start[list(info.special_ids)].all()


def test_wordpiece_word_starts(trained: dict[str, Tokenizer]) -> None:
    tok = trained["bert"]
    info = vocab_info(tok, "bert")
    for token, i in tok.get_vocab().items():
        assert info.word_start[i] == (i < 5 or not token.startswith("##")), token


def test_byte_level_word_starts(trained: dict[str, Tokenizer]) -> None:
    tok = trained["roberta"]
    info = vocab_info(tok, "roberta")
    vocab = tok.get_vocab()
    spaced = [i for token, i in vocab.items() if token.startswith("Ġ")]
    inner = [i for token, i in vocab.items() if i >= 5 and token[0].isascii() and token[0].isalpha()]
    assert spaced and inner
    assert info.word_start[spaced].all() and not info.word_start[inner].any()
    assert info.word_start[vocab[","]] and info.word_start[vocab["Ċ"]]  # punctuation and newline
    assert not info.word_start[vocab["©"]]  # byte 0xA9 only continues a multi-byte character


def test_vocab_info_refuses_the_wrong_family(trained: dict[str, Tokenizer]) -> None:
    with pytest.raises(BvrError, match="not a roberta tokenizer"):
        vocab_info(trained["bert"], "roberta")


# --- save and load -----------------------------------------------------------------------------------------------


def test_save_then_load_gives_the_same_tokenizer(
    trained: dict[str, Tokenizer], saved: dict[str, Path], family: str
) -> None:
    folder = saved[family]
    assert {p.name for p in folder.iterdir()} >= {TOKENIZER_FILE, "tokenizer_config.json", "special_tokens_map.json"}
    for path in (folder, folder / TOKENIZER_FILE):
        tok, loaded_family = load_tokenizer(path)
        assert loaded_family == family
        assert tok.to_str() == trained[family].to_str()


def test_saving_is_byte_identical(
    trained: dict[str, Tokenizer], saved: dict[str, Path], family: str, tmp_path: Path
) -> None:
    again = save_tokenizer(trained[family], family, tmp_path)
    for name in (TOKENIZER_FILE, "tokenizer_config.json", "special_tokens_map.json", BVR_FILE):
        assert (again / name).read_bytes() == (saved[family] / name).read_bytes()


def test_family_is_inferred_without_the_record(trained: dict[str, Tokenizer], family: str, tmp_path: Path) -> None:
    trained[family].save(str(tmp_path / TOKENIZER_FILE))
    assert load_tokenizer(tmp_path)[1] == family


@pytest.mark.parametrize(("given", "named"), [("nowhere", "nowhere"), ("", TOKENIZER_FILE)])
def test_missing_tokenizer_names_the_path(tmp_path: Path, given: str, named: str) -> None:
    # A missing path is named as given; an existing folder without the file names the file it looked for.
    with pytest.raises(BvrError, match="no tokenizer found") as caught:
        load_tokenizer(tmp_path / given)
    assert caught.value.where == str(tmp_path / named)
    assert "bvr tokenizer train" in caught.value.hint


def test_corrupt_tokenizer_names_the_file(tmp_path: Path) -> None:
    (tmp_path / TOKENIZER_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(BvrError, match="cannot read the tokenizer") as caught:
        load_tokenizer(tmp_path)
    assert caught.value.where == str(tmp_path / TOKENIZER_FILE)


def test_record_with_unknown_family_is_refused(trained: dict[str, Tokenizer], tmp_path: Path) -> None:
    save_tokenizer(trained["bert"], "bert", tmp_path)
    (tmp_path / BVR_FILE).write_text(json.dumps({"family": "xlnet"}), encoding="utf-8")
    with pytest.raises(BvrError, match="unknown tokenizer family 'xlnet'") as caught:
        load_tokenizer(tmp_path)
    assert caught.value.where == str(tmp_path / BVR_FILE)


def test_saving_under_the_wrong_family_is_refused(trained: dict[str, Tokenizer], tmp_path: Path) -> None:
    with pytest.raises(BvrError, match="not a bert tokenizer"):
        save_tokenizer(trained["roberta"], "bert", tmp_path)


# --- transformers parity -----------------------------------------------------------------------------------------

PARITY_TEXTS = ["Kato rimen sa lo.", "Café au lait, 東京 😀!", "Unseen wordsmithery  with  spaces\tand tabs"]
HF_SPECIALS = {
    "bert": {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    },
    "roberta": {
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "cls_token": "<s>",
        "sep_token": "</s>",
        "mask_token": "<mask>",
        "bos_token": "<s>",
        "eos_token": "</s>",
    },
}


@pytest.fixture(scope="module")
def transformers() -> ModuleType:
    """transformers, imported only by the parity tests (it is a test-only dependency)."""
    return pytest.importorskip("transformers")


def _assert_matches(hf_tokenizer: Any, tok: Tokenizer, family: str) -> None:
    for name, token in HF_SPECIALS[family].items():
        assert getattr(hf_tokenizer, name) == token
        assert getattr(hf_tokenizer, f"{name}_id") == tok.token_to_id(token)
    for text in PARITY_TEXTS:
        ours = tok.encode(text, "ka to ri")
        theirs = hf_tokenizer(text, "ka to ri", return_token_type_ids=True)
        assert theirs["input_ids"] == ours.ids
        assert theirs["token_type_ids"] == ours.type_ids
        assert hf_tokenizer.decode(ours.ids, skip_special_tokens=True) == tok.decode(ours.ids)
    masked = "Kato is <mask>." if family == "roberta" else "kato is [MASK]."
    assert hf_tokenizer(masked)["input_ids"] == tok.encode(masked).ids


def test_auto_tokenizer_loads_the_folder(
    transformers: ModuleType, trained: dict[str, Tokenizer], saved: dict[str, Path], family: str
) -> None:
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(saved[family])
    expected = {"bert": transformers.BertTokenizerFast, "roberta": transformers.RobertaTokenizerFast}[family]
    assert isinstance(hf_tokenizer, expected)
    assert hf_tokenizer.model_max_length == 512
    if family == "bert":
        assert hf_tokenizer.do_lower_case is True
    else:
        assert hf_tokenizer.add_prefix_space is False
    _assert_matches(hf_tokenizer, trained[family], family)


def test_fast_tokenizer_loads_the_file(
    transformers: ModuleType, trained: dict[str, Tokenizer], saved: dict[str, Path], family: str
) -> None:
    hf_tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(saved[family] / TOKENIZER_FILE), **HF_SPECIALS[family]
    )
    _assert_matches(hf_tokenizer, trained[family], family)


def test_transformers_pads_with_our_pad_id(transformers: ModuleType, saved: dict[str, Path], family: str) -> None:
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(saved[family])
    batch = hf_tokenizer(["ka", "ka to ri sa lo men"], padding=True)
    pad_id = vocab_info(load_tokenizer(saved[family])[0], family).pad_id
    assert batch["input_ids"][0][-1] == pad_id and batch["attention_mask"][0][-1] == 0


# --- tokenizer_stats ---------------------------------------------------------------------------------------------


def _word_level() -> Tokenizer:
    """A whitespace word-level tokenizer whose counts can be checked by hand."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "the": 2, "cat": 3, "sat": 4, "dog": 5, "mat": 6}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["[PAD]", "[UNK]"])
    return tok


def test_stats_by_hand() -> None:
    documents = [["the cat sat", "the dog"], ["a cat"], []]
    stats = tokenizer_stats(_word_level(), documents, batch_size=2)
    assert stats == {
        "documents": 3,
        "sentences": 3,
        "words": 7,
        "tokens": 7,
        "tokens_per_word": 1.0,
        "unk_tokens": 1,  # "a"
        "unk_rate": 1 / 7,
        "vocab_size": 7,
        "vocab_used": 4,  # the, cat, sat, dog: "[UNK]" is special
        "vocab_used_share": 4 / 5,
    }


def test_stats_of_nothing_are_zero() -> None:
    stats = tokenizer_stats(_word_level(), [])
    assert stats["tokens"] == 0 and stats["tokens_per_word"] == 0.0 and stats["unk_rate"] == 0.0


def test_stats_agree_with_one_by_one_encoding(trained: dict[str, Tokenizer], family: str) -> None:
    tok = trained[family]
    documents = [CORPUS[i : i + 7] for i in range(0, 70, 7)] + [EXTRA_SENTENCES]
    encodings = [tok.encode(s, add_special_tokens=False).ids for doc in documents for s in doc]
    stats = tokenizer_stats(tok, documents, batch_size=16)
    assert stats["tokens"] == sum(map(len, encodings))
    assert stats["words"] == sum(len(s.split()) for doc in documents for s in doc)
    assert stats["vocab_used"] == len({i for ids in encodings for i in ids} - {0, 1, 2, 3, 4})
    unk = tok.token_to_id("[UNK]") if family == "bert" else None
    assert stats["unk_tokens"] == sum(ids.count(unk) for ids in encodings)
    if family == "roberta":
        assert stats["unk_tokens"] == 0


def test_describe_stats_is_readable() -> None:
    text = describe_stats(tokenizer_stats(_word_level(), [["the cat sat", "a dog"]]))
    assert "documents 1, sentences 2, words 5" in text
    assert "tokens 5 (1.000 per word)" in text
    assert "unknown tokens 1 (20.000% of tokens)" in text
    assert "vocabulary used 4 of 7 ids (80.0% of the non-special ids)" in text


# --- vocabulary sized by a frequency rule (tokenizer.min_count) --------------------------------------------------


def test_size_by_frequency_takes_the_largest_size_that_keeps_the_rule(family: str) -> None:
    """The chosen size passes the rule (its token at the 95th percentile occurs min_count times) and the next size
    up fails it; every count is recomputed here from a tokenizer trained at that size."""
    from bvr.tokenization.training import count_at_percentile, size_by_frequency, token_counts

    tokenizer, record = size_by_frequency(family, CORPUS, max_size=1024, min_count=20, granularity=64)

    def count(size: int) -> int:
        trained = train_tokenizer(family, CORPUS, vocab_size=size, show_progress=False)
        return count_at_percentile(token_counts(trained, CORPUS)[len(SPECIALS[family]):], 0.95)  # specials: ids 0-4

    size = tokenizer.get_vocab_size()
    assert record["rule_size"] == size and record["rule_count_at_percentile"] >= 20
    assert count(size) == record["rule_count_at_percentile"]
    assert count(size + 64) < 20
    assert tokenizer.to_str() == train_tokenizer(family, CORPUS, vocab_size=size, show_progress=False).to_str()


def test_size_by_frequency_ends_when_the_largest_size_is_no_multiple_of_the_granularity() -> None:
    """max_size 1,000 with steps of 128: the search still narrows to adjacent multiples and stops."""
    from bvr.tokenization.training import count_at_percentile, size_by_frequency, token_counts

    tokenizer, record = size_by_frequency("bert", CORPUS, max_size=1000, min_count=20, granularity=128)
    assert record["rule_count_at_percentile"] >= 20 and record["rule_tries"] <= 5  # 1000, 128, then <= 3 of 8 steps
    bigger = train_tokenizer("bert", CORPUS, vocab_size=min(1000, record["rule_size"] // 128 * 128 + 128),
                             show_progress=False)
    assert count_at_percentile(token_counts(bigger, CORPUS)[len(SPECIALS["bert"]):], 0.95) < 20


def test_token_counts_count_every_token_once() -> None:
    from bvr.tokenization.training import token_counts

    tokenizer = train_tokenizer("bert", CORPUS, vocab_size=300, show_progress=False)
    texts = ["Kato rimen.", "kato kato"]
    counts = token_counts(tokenizer, [texts[:1], texts[1]])  # batches and strings alike
    expected = np.bincount([i for t in texts for i in tokenizer.encode(t, add_special_tokens=False).ids],
                           minlength=tokenizer.get_vocab_size())
    assert counts.tolist() == expected.tolist()
