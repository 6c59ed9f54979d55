"""A planned configuration's recipe in one line, as the budget curve's report and another ablation's Setup line
print it (:func:`recipe_text`)."""

from __future__ import annotations

from typing import Any

LAYOUT = (("embedding_norm", True, "no embedding LayerNorm"), ("token_type_init", "normal", "zero token types"),
          ("head_transform", True, "no head transform"))
"""The model's departures from BERT's layout (``model`` key, BERT's value, the words for the other)."""


def recipe_text(config: dict[str, Any]) -> str:
    """A planned config's recipe in a line: encoder, vocabulary, inputs, masking, optimisation, corpus.

    >>> recipe_text({"model": {"family": "bert", "norm": "pre", "num_layers": 2, "hidden_size": 128},
    ...              "data": {"input_format": "segment-pair", "sentence_objective": "nsp", "max_length": 128},
    ...              "masking": {"mode": "dynamic", "split": [1.0, 0.0, 0.0]}, "training": {"dropout": False}})
    'bert 2x128 pre-LayerNorm, segment-pair x 128 + nsp, dynamic masking 100/0/0, no dropout'
    """
    def get(section: str, key: str) -> Any:
        return (config.get(section) or {}).get(key)

    layers, hidden = get("model", "num_layers"), get("model", "hidden_size")
    shape = f"{layers}x{hidden}" if layers and hidden else None
    model = " ".join(str(v) for v in (get("model", "family"), shape) if v)
    parts = [model + (" pre-LayerNorm" if get("model", "norm") == "pre" else "")]
    layout = [text for key, bert_way, text in LAYOUT if get("model", key) not in (None, bert_way)]
    if layout:
        parts[0] += " (" + ", ".join(layout) + ")"
    tokenizer = get("tokenizer", "family")
    if tokenizer:
        size = (f"vocabulary sized by min_count {get('tokenizer', 'min_count')}" if get("tokenizer", "min_count")
                else f"vocabulary {get('tokenizer', 'vocab_size') or 'default'}")
        parts.append(f"{tokenizer} {size}")
    if get("data", "input_format"):
        objective = get("data", "sentence_objective")
        parts.append(f"{get('data', 'input_format')} x {get('data', 'max_length')}"
                     + (f" + {objective}" if objective and objective != "none" else ""))
    split = get("masking", "split")
    if get("masking", "mode"):
        parts.append(f"{get('masking', 'mode')} masking"
                     + (" " + "/".join(f"{100 * v:.0f}" for v in split) if isinstance(split, list) else ""))
    if get("training", "dropout") is False:
        parts.append("no dropout")
    for key, text in (("learning_rate", "peak lr {:g}"), ("batch_size", "batch {}")):
        if get("training", key) is not None:
            parts.append(text.format(get("training", key)))
    if get("corpus", "max_documents"):
        parts.append(f"first {get('corpus', 'max_documents'):,} documents")
    return ", ".join(p for p in parts if p)
