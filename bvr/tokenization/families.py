"""The two tokenizer families, BERT's WordPiece and RoBERTa's byte-level BPE: how each is built, trained,
post-processed and saved (:data:`FAMILIES`), and the ids of its special tokens."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bvr.errors import BvrError

WORDPIECE_ALPHABET_LIMIT = 1_000
"""Most frequent characters WordPiece keeps as its alphabet; rarer ones become [UNK]. Without a limit, every
character seen once in Wikipedia (thousands of CJK and symbol characters) would take a vocabulary slot, and a
second one for its `##` form."""

Texts = Iterable[str] | Iterable[list[str]]


@dataclass(frozen=True)
class TokenizerFamily:
    """How to build, train, post-process and save one tokenizer family.

    Attributes:
        model_type: the `tokenizers` model class ("WordPiece", "BPE"); names the family of a foreign tokenizer.json.
        special_tokens: in id order, so the first gets id 0.
        roles: transformers' special-token attributes to tokens ("pad_token" -> "[PAD]").
        min_vocab_size: the specials plus any fixed alphabet (an alphabet found in the text comes on top).
        scans_texts: whether ``trainer`` reads the texts before training does, so they must be read twice.
        trainer: special tokens it adds beyond ``special_tokens`` only pin ids during training and are released
            afterwards.
        hf_config: tokenizer_config.json keys naming the transformers class and the flags it rebuilds the
            normaliser and pre-tokenizer from (transformers 5 rebuilds them rather than reading tokenizer.json).
        sentence_prefix: what stands before every sentence of a document but its first when sentences are encoded
            one at a time (:func:`running_text`): the space that precedes it in running text where the
            pre-tokenizer keeps spaces (byte-level BPE: " The" is ``ĠThe``, as in fine-tuning text), nothing where
            it drops them (WordPiece, whose ids the space would not change).
    """

    name: str
    model_type: str
    special_tokens: tuple[str | AddedToken, ...]
    roles: Mapping[str, str]
    default_vocab_size: int
    min_vocab_size: int
    build: Callable[[], Tokenizer]
    scans_texts: bool
    trainer: Callable[[int, int, bool, Texts], trainers.Trainer]
    post_processor: Callable[[Tokenizer], processors.PostProcessor]
    hf_config: Mapping[str, object]
    word_start: Callable[[str], bool]
    sentence_prefix: str


# --- BERT: uncased WordPiece -----------------------------------------------------------------------------------

_BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _bert_normalizer() -> normalizers.Normalizer:
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)


def _bert_build() -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = _bert_normalizer()
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def _bert_alphabet(texts: Texts) -> list[str]:
    """The most frequent non-space characters after normalisation, ties broken by code point."""
    raw: Counter[str] = Counter()
    for item in texts:
        for text in [item] if isinstance(item, str) else item:
            raw.update(text)
    # Normalising each distinct character rather than the text is four times faster (3 s against 12 s for 55 MB);
    # counts differ only where normalisation depends on context, which can shift a rank but not break determinism.
    normalizer = _bert_normalizer()
    counts: Counter[str] = Counter()
    for char, count in raw.items():
        for normal in normalizer.normalize_str(char):
            counts[normal] += count
    ranked = sorted((char for char in counts if not char.isspace()), key=lambda char: (-counts[char], char))
    return ranked[:WORDPIECE_ALPHABET_LIMIT]


def _bert_trainer(vocab_size: int, min_frequency: int, show_progress: bool, texts: Texts) -> trainers.Trainer:
    # The `tokenizers` trainer numbers `##c` tokens in hash-map order, breaks ties between equally frequent merges
    # by id, and cuts the alphabet among equal counts in hash-map order, so two runs on Wikipedia differed in 222 of
    # 30,000 tokens. Choosing the alphabet here and pinning the `##c` ids as extra special tokens (released after
    # training) makes the result a function of the text.
    alphabet = _bert_alphabet(texts)
    # No `##c` for the characters the BERT pipeline always splits off (punctuation, CJK ideographs): asking the
    # pipeline itself avoids restating its Unicode tables.
    normalizer, pre_tokenizer = _bert_normalizer(), pre_tokenizers.BertPreTokenizer()
    continuations = [f"##{char}" for char in alphabet
                     if len(pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(f"a{char}a"))) == 1]
    return trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress,
        special_tokens=[*_BERT_SPECIALS, *continuations], initial_alphabet=alphabet, limit_alphabet=len(alphabet),
        continuing_subword_prefix="##")


def _bert_post_processor(tokenizer: Tokenizer) -> processors.PostProcessor:
    cls, sep = "[CLS]", "[SEP]"
    return processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))],
    )


# --- RoBERTa: byte-level BPE ------------------------------------------------------------------------------------

# `<mask>` swallows the space before it, as in the released RoBERTa, so "is <mask>." masks a "Ġword" token.
_ROBERTA_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, normalized=False, special=True))
_BYTE_LEVEL_DECODER = decoders.ByteLevel()


def _roberta_build() -> Tokenizer:
    # No unknown token in the model: the 256-byte alphabet spells every input.
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _roberta_trainer(vocab_size: int, min_frequency: int, show_progress: bool, texts: Texts) -> trainers.Trainer:
    del texts  # the alphabet is all 256 bytes, whatever the text
    return trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress,
                               special_tokens=list(_ROBERTA_SPECIALS),
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def _roberta_post_processor(tokenizer: Tokenizer) -> processors.PostProcessor:
    sep, cls = "</s>", "<s>"
    return processors.RobertaProcessing(
        (sep, tokenizer.token_to_id(sep)), (cls, tokenizer.token_to_id(cls)), trim_offsets=True, add_prefix_space=False
    )


def _byte_level_word_start(token: str) -> bool:
    # Decoding maps "Ġ" back to " "; a token starting inside a multi-byte character decodes to U+FFFD (not ASCII).
    first = _BYTE_LEVEL_DECODER.decode([token])[:1]
    return first.isascii() and not first.isalnum()


FAMILIES: dict[str, TokenizerFamily] = {
    "bert": TokenizerFamily(
        name="bert",
        model_type="WordPiece",
        special_tokens=_BERT_SPECIALS,
        roles={"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
               "mask_token": "[MASK]"},
        default_vocab_size=30_000,
        min_vocab_size=len(_BERT_SPECIALS) + 1,
        build=_bert_build,
        scans_texts=True,
        trainer=_bert_trainer,
        post_processor=_bert_post_processor,
        hf_config={"tokenizer_class": "BertTokenizerFast", "do_lower_case": True, "strip_accents": True,
                   "tokenize_chinese_chars": True},
        word_start=lambda token: not token.startswith("##"),
        sentence_prefix="",
    ),
    "roberta": TokenizerFamily(
        name="roberta",
        model_type="BPE",
        special_tokens=_ROBERTA_SPECIALS,
        roles={"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>", "cls_token": "<s>",
               "sep_token": "</s>", "mask_token": "<mask>"},
        # The RoBERTa paper's "50K subword units"; the released roberta-base vocabulary has 50,265 ids.
        default_vocab_size=50_000,
        min_vocab_size=len(_ROBERTA_SPECIALS) + 256,
        build=_roberta_build,
        scans_texts=False,
        trainer=_roberta_trainer,
        post_processor=_roberta_post_processor,
        hf_config={"tokenizer_class": "RobertaTokenizerFast", "add_prefix_space": False, "trim_offsets": True,
                   "errors": "replace"},
        word_start=_byte_level_word_start,
        sentence_prefix=" ",
    ),
}
"""The tokenizer families by name, each as in its paper. "bert": uncased WordPiece, `[CLS] A [SEP] B [SEP]` with
token types 0 then 1; the alphabet is the :data:`WORDPIECE_ALPHABET_LIMIT` most frequent characters, each also in
`##` form unless the pre-tokenizer always splits it off (punctuation, CJK), and a word with any other character
becomes `[UNK]`. "roberta": byte-level BPE without a prefix space, all 256 bytes in the alphabet (so nothing is
unknown), `<s> A </s></s> B </s>` with token type 0 throughout. Both number their five specials 0-4."""

DEFAULT_VOCAB_SIZE: dict[str, int] = {name: family.default_vocab_size for name, family in FAMILIES.items()}


def family_spec(name: str, where: str | Path = "family") -> TokenizerFamily:
    """The family called ``name``; ``where`` names the setting or file it came from in the error for an unknown one."""
    if name not in FAMILIES:
        raise BvrError(f"unknown tokenizer family {name!r}", where=where, hint=f"choose one of: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def running_text(sentences: Sequence[str], family: str) -> list[str]:
    """A document's sentences as they stand in running text, to be encoded (or trained on) one at a time.

    Every sentence but the first gets the family's :attr:`~TokenizerFamily.sentence_prefix`: with byte-level BPE
    the space that separates it from the sentence before, so the first word of "He left. The cat sat." is encoded
    ``ĠThe`` whether the text is encoded whole or sentence by sentence, as it is in fine-tuning text, and
    whole-word masking sees it start a word. A document's first sentence stands like the start of a fine-tuning
    text, with no space. WordPiece sentences are returned as they are.

    >>> running_text(["He left.", "The cat sat."], "roberta"), running_text(["He left.", "The cat sat."], "bert")
    (['He left.', ' The cat sat.'], ['He left.', 'The cat sat.'])
    """
    prefix = family_spec(family).sentence_prefix
    if not prefix:
        return list(sentences)
    return [sentence if i == 0 else prefix + sentence for i, sentence in enumerate(sentences)]


def special_token_ids(tokenizer: Tokenizer, family: TokenizerFamily) -> dict[str, int]:
    """The ids of the family's special tokens, refusing a tokenizer that lacks one."""
    ids = {}
    for token in map(str, family.special_tokens):
        ids[token] = tokenizer.token_to_id(token)
        if ids[token] is None:
            raise BvrError(f"the tokenizer has no {token} token, so it is not a {family.name} tokenizer",
                           where="family", hint="name the family it was trained as")
    return ids


def added_special_ids(tokenizer: Tokenizer) -> set[int]:
    """The ids of every added token marked special (the family's and any others the tokenizer carries)."""
    return {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
