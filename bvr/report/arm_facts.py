"""Whether the arms compare fairly, in the report's setup (:func:`arm_facts`): what each pretrained arm's runs saw
and how large it was, the learning rate where the batch size differs (RoBERTa's Table 3 sets one per size), and every
setting in which the arms' resolved configurations differ (:func:`settings_that_differ`), declared or taken from the
preset alike, so a recipe comparison such as BERT against RoBERTa lists each of its differences.
"""

from __future__ import annotations

import math
from typing import Any

from bvr.ablation.manifest import Manifest
from bvr.config import flatten
from bvr.report.analysis import Analysis
from bvr.report.cells import fmt, fmt_count
from bvr.report.document import Block, Paragraph, Table
from bvr.report.numbers import pretrain_table

BATCH_KEYS = ("training.batch_size", "training.tokens_per_batch")
"""The settings that make an arm's batch: sequences a step, or tokens a step where set."""


def shown(value: Any) -> str:
    """A config value as the experiment file would write it.

    >>> shown(True), shown(None), shown(7e-4), shown([0.9, 0.98]), shown("bert")
    ('true', 'null', '0.0007', '[0.9, 0.98]', 'bert')
    """
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


def _configs_of(manifest: Manifest, arm: str) -> list[dict[str, Any]]:
    """The arm's resolved configs, flattened, one per pretraining seed (a manifest keyed by arm: that one)."""
    labels = dict.fromkeys(r.label for r in manifest.records() if r.arm == arm and r.label)
    found = [manifest.configs[label] for label in labels if isinstance(manifest.configs.get(label), dict)]
    if not found and isinstance(manifest.configs.get(arm), dict):
        found = [manifest.configs[arm]]
    return [flatten(config) for config in found]


def settings_that_differ(manifest: Manifest, arms: list[str]) -> dict[str, dict[str, Any]]:
    """Every dotted setting whose resolved value differs between ``arms``, with each arm's value, in the configs' order.
    The config's ``name`` (the arm's or the run's) and a setting that differs between the pretraining seeds of one arm
    (its seed) are left out: they are not differences between arms. Empty with fewer than two arms that have a config.
    """
    configs = {arm: found for arm in arms if (found := _configs_of(manifest, arm))}
    if len(configs) < 2:
        return {}
    per_seed = {"name"} | {key for found in configs.values() for config in found for key in config
                           if any(other.get(key) != config.get(key) for other in found)}
    keys = dict.fromkeys(key for found in configs.values() for key in found[0])
    return {key: {arm: found[0].get(key) for arm, found in configs.items()} for key in keys
            if key not in per_seed and len({shown(found[0].get(key)) for found in configs.values()}) > 1}


def _differences(arms: list[str], differ: dict[str, dict[str, Any]]) -> list[Block]:
    if not differ:
        return []
    rows = [[key, *(shown(values[arm]) if arm in values else "—" for arm in arms)] for key, values in differ.items()]
    caption = (f"Every setting in which the pretrained arms' resolved configurations differ ({len(differ)}), as "
               "`bvr ablate` ran them: what an arm declares and what it takes from the preset alike. Settings that "
               "differ only between one arm's pretraining seeds (its seed) and the config's name are left out.")
    return [Table(["setting", *arms], rows, align="L" + "l" * len(arms), caption=caption)]


def _learning_rates(manifest: Manifest, arms: list[str], differ: dict[str, dict[str, Any]]) -> list[Block]:
    """Where the batch differs between arms, whether the learning rate was set per batch (RoBERTa's Table 3)."""
    batch = next((key for key in BATCH_KEYS if key in differ), None)
    if batch is None:
        return []
    sizes = "; ".join(f"{arm}: {shown(differ[batch].get(arm))}" for arm in arms if arm in differ[batch])
    if "training.learning_rate" not in differ:
        rate = next(iter(_configs_of(manifest, arms[0])), {}).get("training.learning_rate")
        return [Paragraph(f"The batch ({batch}) differs between the arms ({sizes}) at one learning rate, "
                          f"{shown(rate)}: it was not set per batch size as RoBERTa's Table 3 sets it.")]
    rates = differ["training.learning_rate"]
    pairs = "; ".join(f"{arm}: {shown(differ[batch].get(arm))} at {shown(rates.get(arm))}" for arm in arms
                      if arm in rates)
    return [Paragraph(f"The learning rate was set per batch size, as RoBERTa's Table 3 sets it (each size at the rate "
                      f"that suits it; {batch} and learning rate per arm: {pairs}). The tokens each arm saw are in "
                      "the table above.")]


def _share(value: float) -> str:
    return "—" if value is None or math.isnan(value) else f"{value * 100:.1f}%"


def _facts(analysis: Analysis, vocabulary: bool) -> list[Block]:
    """What each arm's runs measured; ``vocabulary``: with how often each vocabulary's ids occur."""
    table = pretrain_table(analysis)
    if table.empty:
        return []
    rows = []
    for r in table.to_dict("records"):
        row = [r["arm"], fmt_count(r["tokens_per_step"]), fmt_count(r["tokens_seen"]), fmt_count(r["words_seen"]),
               fmt(r["ids_per_word"], 2), fmt(r["epochs"], 2), fmt_count(r["params_embedding"]),
               fmt_count(r["params_non_embedding"])]
        rows.append(row + ([fmt(r["id_occurrences_median"], 0), _share(r["id_rare_share"])] if vocabulary else []))
    header = ["arm", "tokens per step", "tokens seen (ids)", "tokens seen (words)", "ids per word", "epochs",
              "params: embeddings", "params: rest"]
    header += ["occurrences of the median id", "ids seen < 10 times"] if vocabulary else []
    caption = ("What each arm's pretraining runs measured (medians over pretraining seeds; — where a run was logged "
               "before the measure existed). Tokens per step: tokens seen over steps. Tokens seen in ids count every "
               "token fed, specials included and padding not; in words, the text tokens among them over the "
               "corpus's ids per word (the ids of every document as tokenized, over the whitespace-separated words "
               "of the same sentences), so arms whose tokenizers cut the same text into different numbers of ids "
               "compare in the same unit. params: the word, position and token-type embedding tables, and the "
               "rest (the MLM output bias included; a tied decoder counted once).")
    if vocabulary:
        caption += (" The tokenizers differ: how often the median id of each vocabulary (specials aside, ids never "
                    "seen counting 0) occurs in the arm's training sequences, once through (the model saw it about "
                    "epochs times that), and the share of its ids seen fewer than 10 times.")
    align = "L" + "r" * (len(header) - 1)
    return [Table(header, rows, align=align, caption=caption)]


def arm_facts(analysis: Analysis) -> list[Block]:
    """The setup's blocks on whether the arms compare fairly: what each saw, learning rate per batch, differences."""
    arms = analysis.collected.pretrained_arms
    differ = settings_that_differ(analysis.collected.manifest, arms)
    vocabulary = any(key.startswith("tokenizer.") for key in differ)
    return [*_facts(analysis, vocabulary), *_learning_rates(analysis.collected.manifest, arms, differ),
            *_differences(arms, differ)]
