"""Train, save, load and describe the two tokenizer families: BERT's WordPiece and RoBERTa's byte-level BPE."""

from bvr.tokenization.families import DEFAULT_VOCAB_SIZE, FAMILIES, WORDPIECE_ALPHABET_LIMIT, running_text
from bvr.tokenization.files import BVR_FILE, TOKENIZER_FILE, load_tokenizer, plain_tokenizer, save_tokenizer
from bvr.tokenization.stats import describe_stats, tokenizer_stats
from bvr.tokenization.training import size_by_frequency, train_tokenizer
from bvr.tokenization.vocab import VocabInfo, vocab_info

__all__ = [
    "BVR_FILE", "DEFAULT_VOCAB_SIZE", "FAMILIES", "TOKENIZER_FILE", "WORDPIECE_ALPHABET_LIMIT", "VocabInfo",
    "describe_stats", "load_tokenizer", "plain_tokenizer", "running_text", "save_tokenizer", "tokenizer_stats",
    "size_by_frequency", "train_tokenizer", "vocab_info",
]
