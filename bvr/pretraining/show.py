"""Show prepared sequences as the model sees them, masks and labels included (``bvr data show``)."""

from __future__ import annotations

from bvr.config import Config
from bvr.model.losses import IGNORE_INDEX
from bvr.pretraining.data import training_collator
from bvr.pretraining.instances import IN_ORDER, IS_NEXT, NOT_NEXT, SWAPPED
from bvr.pretraining.masking import mask_copy, mask_exposure
from bvr.pretraining.prepare import Prepared, load_instances
from bvr.tokenization import load_tokenizer, vocab_info

LABEL_NAMES = {"nsp": {IS_NEXT: "IsNext", NOT_NEXT: "NotNext"}, "sop": {IN_ORDER: "in order", SWAPPED: "swapped"}}
"""The names of the sentence labels, by ``data.sentence_objective``."""


def render_examples(cfg: Config, prepared: Prepared, *, count: int = 3, epoch: int = 0) -> str:
    """Text showing ``count`` training sequences at ``epoch``: ``[MASK]{word}`` marks a masked-out word,
    ``~x{word}`` a random replacement and ``={word}`` a chosen token left unchanged. A span (span scheme) shows as
    consecutive marks of one kind."""
    tokenizer, family = load_tokenizer(prepared.tokenizer)
    vocab = vocab_info(tokenizer, family)
    train = load_instances(prepared)["train"]
    rows = [dict(train[i], index=i, epoch=epoch) for i in range(min(count, train.num_rows))]
    batch = training_collator(vocab, cfg)(rows)
    copy = mask_copy(cfg.masking.mode, epoch, cfg.masking.dupe_factor)
    lines = [f"{cfg.data.input_format}, {cfg.masking.mode} masking, epoch {epoch} (mask copy {copy}), "
             f"{cfg.masking.scheme} scheme; "
             f"exposure over 40 epochs: {mask_exposure(cfg.masking.mode, 40, cfg.masking.dupe_factor)}"]
    for row in range(len(rows)):
        words = []
        for pos in range(int(batch["attention_mask"][row].sum())):
            shown = _readable(tokenizer, int(batch["input_ids"][row, pos]), family)
            label = int(batch["labels"][row, pos])
            if label >= 0:
                original = _readable(tokenizer, label, family)
                shown = f"{shown}{{{original}}}" if shown != original else f"={{{original}}}"
            words.append(shown)
        label = int(batch["sentence_labels"][row])
        names = LABEL_NAMES.get(cfg.data.sentence_objective, {})
        shown_label = "no sentence objective" if label == IGNORE_INDEX else names.get(label, "?")
        lines.append(f"\n#{rows[row]['index']} ({len(words)} tokens, {shown_label}):\n" + " ".join(words))
    return "\n".join(lines)


def _readable(tokenizer, token_id: int, family: str) -> str:
    """A token as text: WordPiece pieces as they are (``##ing``); byte-level pieces decoded, a leading space as ▁."""
    token = tokenizer.id_to_token(token_id)
    if family != "roberta" or token_id in (tokenizer.token_to_id(t) for t in ("<s>", "</s>", "<pad>", "<mask>")):
        return token
    return tokenizer.decoder.decode([token]).replace(" ", "▁")
