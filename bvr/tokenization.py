"""Train, save, load and describe the two tokenizer families: BERT's WordPiece and RoBERTa's byte-level BPE."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bvr.errors import BvrError


@dataclass(frozen=True)
class VocabInfo:
    """What the data path needs to know about a trained tokenizer's vocabulary.

    Attributes:
        family: "bert" (WordPiece) or "roberta" (byte-level BPE).
        vocab_size: number of ids, specials included.
        pad_id: padding id.
        unk_id: unknown-token id.
        cls_id: id that opens a sequence ([CLS] or <s>).
        sep_id: id that closes a segment ([SEP] or </s>).
        mask_id: the mask token's id ([MASK] or <mask>).
        special_ids: every special token's id; masking never chooses them.
        word_start: (vocab_size,) bool, True where a token begins a word (for whole-word masking).
    """

    family: str
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    special_ids: tuple[int, ...]
    word_start: np.ndarray


TOKENIZER_FILE = "tokenizer.json"
"""The `tokenizers` serialisation; transformers reads it too."""

BVR_FILE = "bvr_tokenizer.json"
"""A small record of what bvr knows beyond tokenizer.json (the family)."""

_TRAIN_HINT = "train one with `bvr tokenizer train`"

WORDPIECE_ALPHABET_LIMIT = 1_000
"""Most frequent characters WordPiece keeps as its alphabet; rarer ones become [UNK].

Without a limit, every character seen once in Wikipedia (thousands of CJK and symbol characters) would take a
vocabulary slot, and a second one for its `##` form.
"""

Texts = Iterable[str] | Iterable[list[str]]


@dataclass(frozen=True)
class TokenizerFamily:
    """How to build, train, post-process and save one tokenizer family.

    Attributes:
        name: the registry key.
        model_type: the `tokenizers` model class ("WordPiece", "BPE"); names the family of a foreign tokenizer.json.
        special_tokens: the special tokens in id order, so the first gets id 0.
        roles: transformers' special-token attributes to tokens ("pad_token" -> "[PAD]").
        default_vocab_size: the vocabulary size when none is asked for.
        min_vocab_size: the smallest vocabulary worth training: the specials plus any fixed alphabet (an alphabet
            found in the text comes on top).
        build: returns an untrained tokenizer with its model, normaliser, pre-tokenizer and decoder.
        scans_texts: whether ``trainer`` reads the texts before training does, so they must be read twice.
        trainer: (vocab_size, min_frequency, show_progress, texts) -> the `tokenizers` trainer. Special tokens it
            adds beyond ``special_tokens`` only pin ids during training and are released afterwards.
        post_processor: trained tokenizer -> the post-processor that adds the specials around one or two segments.
        hf_config: tokenizer_config.json keys naming the transformers class and the flags it rebuilds the
            normaliser and pre-tokenizer from (transformers 5 rebuilds them rather than reading tokenizer.json).
        word_start: non-special token -> whether it begins a word.
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


def _strings(texts: Texts) -> Iterator[str]:
    for item in texts:
        if isinstance(item, str):
            yield item
        else:
            yield from item


def _bert_alphabet(texts: Texts) -> list[str]:
    """The most frequent non-space characters after normalisation, ties broken by code point."""
    raw: Counter[str] = Counter()
    for text in _strings(texts):
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


def _can_continue_word(char: str) -> bool:
    """False for characters the BERT pipeline always splits off (punctuation, CJK ideographs)."""
    # Asking the pipeline itself avoids restating its Unicode tables.
    text = _bert_normalizer().normalize_str(f"a{char}a")
    return len(pre_tokenizers.BertPreTokenizer().pre_tokenize_str(text)) == 1


def _bert_trainer(vocab_size: int, min_frequency: int, show_progress: bool, texts: Texts) -> trainers.Trainer:
    # The `tokenizers` trainer numbers `##c` tokens in hash-map order, breaks ties between equally frequent merges
    # by id, and cuts the alphabet among equal counts in hash-map order, so two runs on Wikipedia differed in 222 of
    # 30,000 tokens. Choosing the alphabet here and pinning the `##c` ids as extra special tokens (released after
    # training) makes the result a function of the text.
    alphabet = _bert_alphabet(texts)
    continuations = [f"##{char}" for char in alphabet if _can_continue_word(char)]
    return trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=show_progress,
        special_tokens=[*_BERT_SPECIALS, *continuations],
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        continuing_subword_prefix="##",
    )


def _bert_post_processor(tokenizer: Tokenizer) -> processors.PostProcessor:
    cls, sep = "[CLS]", "[SEP]"
    return processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))],
    )


def _wordpiece_word_start(token: str) -> bool:
    return not token.startswith("##")


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
    return trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=show_progress,
        special_tokens=list(_ROBERTA_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )


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
        roles={
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "mask_token": "[MASK]",
        },
        default_vocab_size=30_000,
        min_vocab_size=len(_BERT_SPECIALS) + 1,
        build=_bert_build,
        scans_texts=True,
        trainer=_bert_trainer,
        post_processor=_bert_post_processor,
        hf_config={
            "tokenizer_class": "BertTokenizerFast",
            "do_lower_case": True,
            "strip_accents": True,
            "tokenize_chinese_chars": True,
        },
        word_start=_wordpiece_word_start,
    ),
    "roberta": TokenizerFamily(
        name="roberta",
        model_type="BPE",
        special_tokens=_ROBERTA_SPECIALS,
        roles={
            "bos_token": "<s>",
            "eos_token": "</s>",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
            "cls_token": "<s>",
            "sep_token": "</s>",
            "mask_token": "<mask>",
        },
        # The RoBERTa paper's "50K subword units"; the released roberta-base vocabulary has 50,265 ids.
        default_vocab_size=50_000,
        min_vocab_size=len(_ROBERTA_SPECIALS) + 256,
        build=_roberta_build,
        scans_texts=False,
        trainer=_roberta_trainer,
        post_processor=_roberta_post_processor,
        hf_config={
            "tokenizer_class": "RobertaTokenizerFast",
            "add_prefix_space": False,
            "trim_offsets": True,
            "errors": "replace",
        },
        word_start=_byte_level_word_start,
    ),
}
"""The tokenizer families by name.

"bert": uncased WordPiece as in BERT: BertNormalizer (clean text, spaces around CJK characters, lower case, accents
stripped), BertPreTokenizer, `##` continuations, specials `[PAD] [UNK] [CLS] [SEP] [MASK]` with ids 0-4,
`[CLS] A [SEP] B [SEP]` with token types 0 then 1; default 30,000 ids. The alphabet is the
:data:`WORDPIECE_ALPHABET_LIMIT` most frequent characters, each also in `##` form unless the pre-tokenizer always
splits it off (punctuation, CJK); a word with any other character becomes `[UNK]`.

"roberta": byte-level BPE as in RoBERTa: the GPT-2 byte-level pre-tokenizer without a prefix space, all 256 bytes in
the alphabet (so nothing is unknown), specials `<s> <pad> </s> <unk> <mask>` with ids 0-4, `<s> A </s></s> B </s>` with
token type 0 throughout; default 50,000 ids (the released roberta-base has 50,265).
"""

DEFAULT_VOCAB_SIZE: dict[str, int] = {name: family.default_vocab_size for name, family in FAMILIES.items()}


def _family(name: str, where: str | Path = "family") -> TokenizerFamily:
    if name not in FAMILIES:
        known = ", ".join(FAMILIES)
        raise BvrError(f"unknown tokenizer family {name!r}", where=where, hint=f"choose one of: {known}")
    return FAMILIES[name]


def _check_training_args(family: TokenizerFamily, vocab_size: int, min_frequency: int) -> None:
    if vocab_size < family.min_vocab_size:
        raise BvrError(
            f"vocab_size {vocab_size} is too small for {family.name}",
            where="vocab_size",
            hint=f"use at least {family.min_vocab_size} (the special tokens plus the base alphabet)",
        )
    if min_frequency < 1:
        raise BvrError(f"min_frequency {min_frequency} is below 1", where="min_frequency", hint="use 1 or more")


def _non_empty(texts: Texts, replay: bool) -> Texts:
    """``texts``, refused when empty; held in a list when it must be read twice but can be read only once."""
    if replay and iter(texts) is texts:
        texts = list(texts)
    items = iter(texts)
    if (first := next(items, None)) is None:
        raise BvrError("no text to train the tokenizer on", where="texts", hint="check that the corpus has documents")
    return texts if items is not texts else itertools.chain([first], items)


def _release_pins(tokenizer: Tokenizer, family: TokenizerFamily) -> Tokenizer:
    """Keep only the family's special tokens as added tokens; pinned ones stay ordinary vocabulary entries."""
    keep = set(map(str, family.special_tokens))
    data = json.loads(tokenizer.to_str())
    data["added_tokens"] = [token for token in data["added_tokens"] if token["content"] in keep]
    return Tokenizer.from_str(json.dumps(data))


def train_tokenizer(
    family: str,
    texts: Texts,
    *,
    vocab_size: int | None = None,
    min_frequency: int = 2,
    show_progress: bool = True,
    length: int | None = None,
) -> Tokenizer:
    """Train a tokenizer of one family from text; the same texts and settings give the same tokenizer.json.

    Args:
        family: a key of :data:`FAMILIES` ("bert" or "roberta").
        texts: strings, or batches (lists) of strings; batches cut the Python-to-Rust overhead on large corpora.
            "bert" reads them twice (the first pass fixes the alphabet): pass something that starts over when
            iterated again (a list, a dataset); a one-shot iterator is first copied into memory.
        vocab_size: ids in the result, specials included; the family's default when None. Training stops short of
            it only when the text has no more pairs seen ``min_frequency`` times; the base alphabet is always
            kept, so a size below it comes out larger.
        min_frequency: how often a pair must occur to be merged.
        show_progress: draw the `tokenizers` progress bars.
        length: how many items ``texts`` holds, for the progress bar only.

    Returns:
        The trained tokenizer, with the family's post-processor set, so ``encode(a, b)`` adds the specials.

    Raises:
        BvrError: the family is unknown, the sizes are out of range, or ``texts`` is empty.
    """
    spec = _family(family)
    size = spec.default_vocab_size if vocab_size is None else vocab_size
    _check_training_args(spec, size, min_frequency)
    texts = _non_empty(texts, replay=spec.scans_texts)
    trainer = spec.trainer(size, min_frequency, show_progress, texts)
    tokenizer = spec.build()
    tokenizer.train_from_iterator(texts, trainer=trainer, length=length)
    tokenizer = _release_pins(tokenizer, spec)
    tokenizer.post_processor = spec.post_processor(tokenizer)
    return tokenizer


def _special_ids(tokenizer: Tokenizer, family: TokenizerFamily) -> dict[str, int]:
    """The ids of the family's special tokens, refusing a tokenizer that lacks one."""
    ids = {}
    for token in map(str, family.special_tokens):
        ids[token] = tokenizer.token_to_id(token)
        if ids[token] is None:
            raise BvrError(
                f"the tokenizer has no {token} token, so it is not a {family.name} tokenizer",
                where="family",
                hint="name the family it was trained as",
            )
    return ids


def _write_json(path: Path, content: Mapping[str, object]) -> None:
    path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _added_tokens_decoder(tokenizer: Tokenizer) -> dict[str, dict[str, object]]:
    # transformers 5 rebuilds the model from the vocabulary and takes added tokens' flags (lstrip of <mask>) from here.
    fields = ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
    return {
        str(i): {name: getattr(token, name) for name in fields}
        for i, token in sorted(tokenizer.get_added_tokens_decoder().items())
    }


def _hf_tokenizer_config(tokenizer: Tokenizer, family: TokenizerFamily, model_max_length: int) -> dict[str, object]:
    return {
        **family.hf_config,
        **family.roles,
        "model_max_length": model_max_length,
        # Our decoders already produce the text; transformers' extra clean-up would break byte-level round trips.
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": _added_tokens_decoder(tokenizer),
    }


def save_tokenizer(tokenizer: Tokenizer, family: str, out_dir: Path, *, model_max_length: int = 512) -> Path:
    """Write a tokenizer folder that bvr and transformers both load.

    The folder holds ``tokenizer.json``; ``tokenizer_config.json`` and ``special_tokens_map.json`` so that
    ``transformers.AutoTokenizer.from_pretrained(out_dir)`` builds a ``BertTokenizerFast`` or ``RobertaTokenizerFast``
    with the right special tokens and flags; and ``bvr_tokenizer.json``, which records the family.

    Args:
        tokenizer: a tokenizer of ``family``.
        family: a key of :data:`FAMILIES`.
        out_dir: the folder, created when missing; files already there are replaced.
        model_max_length: the longest input, in tokens, transformers expects (it warns beyond it).

    Returns:
        ``out_dir``.

    Raises:
        BvrError: the family is unknown or the tokenizer lacks one of its special tokens.
    """
    spec = _family(family)
    _special_ids(tokenizer, spec)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    _write_json(out_dir / "tokenizer_config.json", _hf_tokenizer_config(tokenizer, spec, model_max_length))
    _write_json(out_dir / "special_tokens_map.json", dict(spec.roles))
    _write_json(out_dir / BVR_FILE, {"family": spec.name, "vocab_size": tokenizer.get_vocab_size()})
    return out_dir


def _read_family(folder: Path, tokenizer: Tokenizer) -> str:
    """The family recorded beside a tokenizer.json, or the one whose model type it has."""
    record = folder / BVR_FILE
    if record.is_file():
        try:
            family = str(json.loads(record.read_text(encoding="utf-8"))["family"])
        except (ValueError, KeyError, TypeError) as err:
            raise BvrError(f"unreadable tokenizer record ({err})", where=record, hint=_TRAIN_HINT) from err
        return _family(family, where=record).name
    model_type = type(tokenizer.model).__name__
    matches = [spec.name for spec in FAMILIES.values() if spec.model_type == model_type]
    if len(matches) != 1:
        raise BvrError(f"cannot tell the family of a {model_type} tokenizer", where=folder, hint=_TRAIN_HINT)
    return matches[0]


def load_tokenizer(path: Path) -> tuple[Tokenizer, str]:
    """Load a tokenizer saved by :func:`save_tokenizer` (or a Hugging Face tokenizer.json).

    Args:
        path: the folder, or its ``tokenizer.json``.

    Returns:
        The tokenizer and its family. Without ``bvr_tokenizer.json`` the family follows the model type
        (WordPiece -> "bert", BPE -> "roberta"), so a bert-base-uncased or roberta-base folder loads too.

    Raises:
        BvrError: the file is missing or cannot be read.
    """
    path = Path(path)
    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.is_file():
        raise BvrError("no tokenizer found", where=file, hint=_TRAIN_HINT)
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as err:  # the Rust side raises a bare Exception for any parse error
        raise BvrError(f"cannot read the tokenizer ({err})", where=file, hint=_TRAIN_HINT) from err
    return tokenizer, _read_family(file.parent, tokenizer)


def _special_id_set(tokenizer: Tokenizer) -> set[int]:
    return {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}


def vocab_info(tokenizer: Tokenizer, family: str) -> VocabInfo:
    """What the data path needs to know about a tokenizer's vocabulary.

    ``word_start`` marks the tokens that begin a word, for whole-word masking. Specials always do. WordPiece: every
    token not starting with ``##``. Byte-level BPE: a token whose first byte is whitespace (``Ġ`` is the byte-level
    space) or ASCII punctuation, which the GPT-2 pre-tokenizer always splits off, so punctuation is its own word as
    it is under BertPreTokenizer. The vocabulary cannot tell a word opening a text (which has no ``Ġ``) from the
    rest of a word; such a token counts as a continuation, so callers wanting it should also mark position 0.

    Args:
        tokenizer: a tokenizer of ``family``.
        family: a key of :data:`FAMILIES`.

    Returns:
        The vocabulary facts.

    Raises:
        BvrError: the family is unknown or the tokenizer lacks one of its special tokens.
    """
    spec = _family(family)
    ids = _special_ids(tokenizer, spec)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    word_start = np.zeros(size, dtype=bool)  # (vocab_size,)
    for token, i in tokenizer.get_vocab(with_added_tokens=True).items():
        word_start[i] = spec.word_start(token)
    special_ids = tuple(sorted(set(ids.values()) | _special_id_set(tokenizer)))
    word_start[list(special_ids)] = True
    role = {name: ids[token] for name, token in spec.roles.items()}
    return VocabInfo(
        family=spec.name,
        vocab_size=size,
        pad_id=role["pad_token"],
        unk_id=role["unk_token"],
        cls_id=role["cls_token"],
        sep_id=role["sep_token"],
        mask_id=role["mask_token"],
        special_ids=special_ids,
        word_start=word_start,
    )


def _count_ids(tokenizer: Tokenizer, sentences: list[str], counts: np.ndarray) -> None:
    """Add each id's occurrences in ``sentences`` (encoded without specials) to ``counts``."""
    if not sentences:
        return
    encodings = tokenizer.encode_batch_fast(sentences, add_special_tokens=False)
    ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int64)
    counts += np.bincount(ids, minlength=len(counts))


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def tokenizer_stats(tokenizer: Tokenizer, documents: Iterable[list[str]], *, batch_size: int = 8_192) -> dict:
    """How a tokenizer cuts held-out text.

    Words are whitespace-separated strings, the same for every tokenizer, so the figures compare across families.

    Args:
        tokenizer: any `tokenizers` tokenizer.
        documents: documents as lists of sentences.
        batch_size: sentences per ``encode_batch_fast`` call.

    Returns:
        ``documents``, ``sentences``, ``words``, ``tokens`` (specials not added), ``tokens_per_word``,
        ``unk_tokens`` and ``unk_rate`` (their share of the tokens; 0 when the model has no unknown token),
        ``vocab_size`` (specials included), ``vocab_used`` (distinct non-special ids seen) and
        ``vocab_used_share`` (of the non-special ids). Ratios over nothing are 0.0.
    """
    counts = np.zeros(tokenizer.get_vocab_size(with_added_tokens=True), dtype=np.int64)  # (vocab_size,)
    n_documents = n_sentences = n_words = 0
    batch: list[str] = []
    for document in documents:
        n_documents += 1
        n_sentences += len(document)
        n_words += sum(len(sentence.split()) for sentence in document)
        batch.extend(document)
        if len(batch) >= batch_size:
            _count_ids(tokenizer, batch, counts)
            batch = []
    _count_ids(tokenizer, batch, counts)
    return _summarise(tokenizer, counts, n_documents, n_sentences, n_words)


def _summarise(tokenizer: Tokenizer, counts: np.ndarray, documents: int, sentences: int, words: int) -> dict:
    unk_token = getattr(tokenizer.model, "unk_token", None)
    unk_id = tokenizer.token_to_id(unk_token) if unk_token else None
    unk_tokens = int(counts[unk_id]) if unk_id is not None else 0
    tokens = int(counts.sum())
    regular = np.ones(len(counts), dtype=bool)
    regular[list(_special_id_set(tokenizer))] = False
    used = int(np.count_nonzero(counts[regular]))
    return {
        "documents": documents,
        "sentences": sentences,
        "words": words,
        "tokens": tokens,
        "tokens_per_word": _ratio(tokens, words),
        "unk_tokens": unk_tokens,
        "unk_rate": _ratio(unk_tokens, tokens),
        "vocab_size": len(counts),
        "vocab_used": used,
        "vocab_used_share": _ratio(used, int(regular.sum())),
    }


def describe_stats(stats: dict) -> str:
    """A few readable lines from :func:`tokenizer_stats`, for the CLI."""
    return "\n".join(
        [
            f"documents {stats['documents']:,}, sentences {stats['sentences']:,}, words {stats['words']:,}",
            f"tokens {stats['tokens']:,} ({stats['tokens_per_word']:.3f} per word)",
            f"unknown tokens {stats['unk_tokens']:,} ({stats['unk_rate']:.3%} of tokens)",
            f"vocabulary used {stats['vocab_used']:,} of {stats['vocab_size']:,} ids "
            f"({stats['vocab_used_share']:.1%} of the non-special ids)",
        ]
    )
