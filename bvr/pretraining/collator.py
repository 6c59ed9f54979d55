"""The pretraining collator: pads a batch of prepared instances and masks it with
:func:`~bvr.pretraining.masking.mask_batch`, with the mask copy of the current epoch (static or dynamic masking)."""

from __future__ import annotations

import numpy as np
import torch

from bvr.errors import BvrError
from bvr.pretraining.masking import MASK_RULE, MaskRule, check_dupe_factor, check_mode, mask_batch, mask_copy
from bvr.tokenization import VocabInfo


class PretrainingCollator:
    """Pads a list of instances and masks them. Pure: output depends only on the examples.

    Each example is ``{"input_ids", "token_type_ids", "sentence_label", "index", "epoch"}``; its mask is a function of
    the collator's ``seed`` (the run's masking seed) and the example's index and epoch (through :func:`mask_copy`:
    ``mode`` static (BERT) or dynamic (RoBERTa), ``dupe_factor`` static copies), so workers, processes and resumed
    runs agree without sharing random state. ``pad_to_multiple_of`` rounds the padded length up to a multiple of
    itself (tensor-core friendly); None rounds nothing.

    Example:
        >>> from bvr.tokenization import VocabInfo
        >>> vocab = VocabInfo(family="bert", vocab_size=10, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4,
        ...                   special_ids=(0, 1, 2, 3, 4), word_start=np.ones(10, dtype=bool))
        >>> collate = PretrainingCollator(vocab, mode="dynamic", seed=0)
        >>> batch = collate([
        ...     {"input_ids": [2, 5, 6, 3, 7, 3], "token_type_ids": [0, 0, 0, 0, 1, 1], "sentence_label": 1,
        ...      "index": 0, "epoch": 0},
        ...     {"input_ids": [2, 8, 3], "token_type_ids": [0, 0, 0], "sentence_label": 0, "index": 1, "epoch": 0},
        ... ])
        >>> batch["input_ids"].shape  # longest is 6, rounded up to a multiple of 8
        torch.Size([2, 8])
        >>> batch["attention_mask"].tolist()
        [[1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]]
        >>> (batch["labels"] != -100).sum(dim=1).tolist()  # max(1, round(3 * 0.15)), max(1, round(1 * 0.15))
        [1, 1]
        >>> batch["sentence_labels"].tolist(), batch["indices"].tolist()
        ([1, 0], [0, 1])
    """

    def __init__(self, vocab: VocabInfo, *, mode: str, seed: int, dupe_factor: int = 10, rule: MaskRule = MASK_RULE,
                 pad_to_multiple_of: int | None = 8) -> None:
        # Validate here so a bad config fails at set-up, not in a DataLoader worker mid-epoch (the rule was checked
        # when it was made).
        check_mode(mode)
        check_dupe_factor(dupe_factor)
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise BvrError(f"pad_to_multiple_of must be at least 1, got {pad_to_multiple_of}",
                           where="masking.pad_to_multiple_of", hint="use 8, or null for no rounding")
        self.vocab, self.mode, self.seed, self.dupe_factor = vocab, mode, seed, dupe_factor
        self.rule, self.pad_to_multiple_of = rule, pad_to_multiple_of

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        """Pad and mask ``examples``: input_ids, token_type_ids, attention_mask and labels, (batch, seq) long;
        sentence_labels and indices, (batch,) long. Labels are -100 except at the masked positions."""
        if not examples:
            raise ValueError("cannot collate an empty batch")
        lengths = [len(example["input_ids"]) for example in examples]
        multiple = self.pad_to_multiple_of or 1
        shape = (len(examples), -(-max(lengths) // multiple) * multiple)  # the longest, rounded up
        input_ids = np.full(shape, self.vocab.pad_id, dtype=np.int64)
        token_types = np.zeros(shape, dtype=np.int64)
        for row, (example, length) in enumerate(zip(examples, lengths, strict=True)):
            if len(example["token_type_ids"]) != length:
                raise ValueError(f"example {example['index']}: token_type_ids and input_ids differ in length")
            input_ids[row, :length] = example["input_ids"]
            token_types[row, :length] = example["token_type_ids"]
        attention = (np.arange(shape[1])[None, :] < np.asarray(lengths)[:, None]).astype(np.int64)
        indices = np.array([example["index"] for example in examples], dtype=np.int64)  # (batch,)
        copies = np.array([mask_copy(self.mode, example["epoch"], self.dupe_factor) for example in examples])
        masked, labels = mask_batch(input_ids, indices, copies, self.vocab, seed=self.seed, rule=self.rule)
        return {
            "input_ids": torch.from_numpy(masked),
            "token_type_ids": torch.from_numpy(token_types),
            "attention_mask": torch.from_numpy(attention),
            "labels": torch.from_numpy(labels),
            "sentence_labels": torch.tensor([example["sentence_label"] for example in examples], dtype=torch.long),
            "indices": torch.from_numpy(indices),
        }
