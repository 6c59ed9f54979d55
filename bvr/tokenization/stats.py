"""How a tokenizer splits a corpus: tokens per word, unknown and unused tokens, for `bvr tokenizer stats`."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import numpy as np
from tokenizers import Tokenizer

from bvr.tokenization.families import added_special_ids


def count_ids(tokenizer: Tokenizer, sentences: list[str], counts: np.ndarray) -> None:
    """Add each id's occurrences in ``sentences`` (encoded without specials) to ``counts``."""
    encodings = tokenizer.encode_batch_fast(sentences, add_special_tokens=False)
    ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int64)
    counts += np.bincount(ids, minlength=len(counts))


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def tokenizer_stats(tokenizer: Tokenizer, documents: Iterable[list[str]], *, batch_size: int = 8_192) -> dict:
    """How a tokenizer cuts held-out text (documents as lists of sentences).

    Words are whitespace-separated strings, the same for every tokenizer, so the figures compare across families.
    ``tokens`` are counted without specials; ``unk_rate`` is 0 when the model has no unknown token; ``vocab_size``
    counts the specials, ``vocab_used`` the distinct non-special ids seen and ``vocab_used_share`` is of the
    non-special ids. Ratios over nothing are 0.0.
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
            count_ids(tokenizer, batch, counts)
            batch = []
    count_ids(tokenizer, batch, counts)
    unk_token = getattr(tokenizer.model, "unk_token", None)
    unk_id = tokenizer.token_to_id(unk_token) if unk_token else None
    unk_tokens = int(counts[unk_id]) if unk_id is not None else 0
    tokens = int(counts.sum())
    regular = np.ones(len(counts), dtype=bool)
    regular[list(added_special_ids(tokenizer))] = False
    used = int(np.count_nonzero(counts[regular]))
    return {"documents": n_documents, "sentences": n_sentences, "words": n_words, "tokens": tokens,
            "tokens_per_word": _ratio(tokens, n_words), "unk_tokens": unk_tokens,
            "unk_rate": _ratio(unk_tokens, tokens), "vocab_size": len(counts), "vocab_used": used,
            "vocab_used_share": _ratio(used, int(regular.sum()))}


def describe_stats(stats: dict) -> str:
    """A few readable lines from :func:`tokenizer_stats`, for the CLI."""
    return "\n".join([
        f"documents {stats['documents']:,}, sentences {stats['sentences']:,}, words {stats['words']:,}",
        f"tokens {stats['tokens']:,} ({stats['tokens_per_word']:.3f} per word)",
        f"unknown tokens {stats['unk_tokens']:,} ({stats['unk_rate']:.3%} of tokens)",
        f"vocabulary used {stats['vocab_used']:,} of {stats['vocab_size']:,} ids "
        f"({stats['vocab_used_share']:.1%} of the non-special ids)",
    ])
