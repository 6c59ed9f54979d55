"""Checks on an ablation's arms: they differ, and only where declared, and they see equal passes over the data.

:func:`equal_passes` holds the data seen fixed, as RoBERTa's comparisons do: the batch-size ablation (Table 3)
trades batch size against steps at an equal number of sequences; the input-format ablation (section 4.2, Table 2)
raises the batch size of ``sentence-pair``, whose pairs of single sentences are much shorter than ``max_length``,
"so that the total number of tokens remains similar", and that of ``doc-sentences`` dynamically to match
``full-sentences``' tokens. An arm without ``training.tokens_per_batch`` has its tokens estimated from the config
alone (:func:`sequence_tokens`, an upper bound), since nothing is prepared when an ablation is planned.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

from bvr.config import Config, flatten
from bvr.errors import BvrError

if TYPE_CHECKING:
    from bvr.ablation.declare import Ablation

SENTENCE_PAIR_TOKENS = 64
"""Estimated tokens of a ``sentence-pair`` instance (two natural sentences with their specials, about 60)."""


def arm_differences(ablation: Ablation) -> dict[tuple[str, str], set[str]]:
    """For each pair of arms (in file order), the dotted config keys whose resolved values differ (``name`` aside)."""
    flat = {arm: flatten(cfg.to_dict()) for arm, cfg in ablation.arms.items()}
    return {(a, b): {k for k in set(flat[a]) | set(flat[b]) if k != "name" and flat[a].get(k) != flat[b].get(k)}
            for a, b in itertools.combinations(flat, 2)}


def check_arms(ablation: Ablation) -> None:
    """Refuse identical arms (they would run one model twice and report the noise between them as an effect), and
    arms that differ in anything neither of them declares."""
    for (a, b), keys in arm_differences(ablation).items():
        if not keys:
            raise BvrError(f"arms '{a}' and '{b}' are identical: their configurations differ in nothing but the name",
                           where=ablation.source,
                           hint=f"an ablation compares arms that differ: change what '{b}' is about, or remove it")
        undeclared = sorted(keys - ablation.declared.get(a, set()) - ablation.declared.get(b, set()))
        if undeclared:
            fa, fb = flatten(ablation.arms[a].to_dict()), flatten(ablation.arms[b].to_dict())
            detail = ", ".join(f"{k} ({fa.get(k)!r} vs {fb.get(k)!r})" for k in undeclared)
            raise BvrError(f"arms '{a}' and '{b}' differ in undeclared keys: {detail}", where=ablation.source,
                           hint="declare the keys in the arms that change them, or make them equal")


def sequence_tokens(cfg: Config) -> int:
    """Estimated tokens per training sequence: ``data.max_length``, except ``sentence-pair`` (at most
    :data:`SENTENCE_PAIR_TOKENS`). An upper bound for the other formats (``doc-sentences`` ends documents short).

    >>> from bvr.config import Config, DataConfig
    >>> sequence_tokens(Config(data=DataConfig(input_format="sentence-pair", max_length=512)))
    64
    """
    if cfg.data.input_format == "sentence-pair":
        return min(cfg.data.max_length, SENTENCE_PAIR_TOKENS)
    return cfg.data.max_length


def tokens_per_step(cfg: Config) -> int:
    """Tokens per optimiser step: ``training.tokens_per_batch`` where set (each step is filled to it, to within one
    sequence), else the estimate ``batch_size x`` :func:`sequence_tokens` (padding aside).

    >>> from bvr.config import Config, DataConfig, TrainingConfig
    >>> tokens_per_step(Config(data=DataConfig(input_format="doc-sentences", sentence_objective="none")))
    4096
    >>> tokens_per_step(Config(training=TrainingConfig(tokens_per_batch=4000)))
    4000
    """
    if cfg.training.tokens_per_batch is not None:
        return cfg.training.tokens_per_batch
    return cfg.training.batch_size * sequence_tokens(cfg)


def tokens_seen(cfg: Config) -> int:
    """Tokens fed over the whole run: :func:`tokens_per_step` ``x max_steps``."""
    return tokens_per_step(cfg) * cfg.training.max_steps


def budget_tokens(cfg: Config) -> int:
    """Tokens a run may see: :func:`tokens_seen`, or ``training.max_tokens`` where that stops it sooner (what the
    arms of a budget curve are ordered by).

    >>> from bvr.config import Config, TrainingConfig
    >>> budget_tokens(Config(training=TrainingConfig(max_steps=300))), budget_tokens(
    ...     Config(training=TrainingConfig(max_steps=300, max_tokens=10_000)))
    (1228800, 10000)
    """
    cap = cfg.training.max_tokens
    return tokens_seen(cfg) if cap is None else min(cap, tokens_seen(cfg))


def _tokens_detail(cfg: Config) -> str:
    """How an arm's tokens are counted, for the error of :func:`equal_passes`."""
    t = cfg.training
    if t.tokens_per_batch is not None:
        return f"{t.tokens_per_batch} tokens per step x {t.max_steps} = {tokens_seen(cfg)}"
    return f"{t.batch_size} x {t.max_steps} x {sequence_tokens(cfg)} tokens = {tokens_seen(cfg)}"


def equal_passes(ablation: Ablation) -> None:
    """Refuse arms that do not see the same number of tokens (:func:`tokens_seen`); a budget curve's arms differ in
    tokens by design: it passes."""
    if ablation.is_budget:
        return
    seen = {arm: tokens_seen(cfg) for arm, cfg in ablation.arms.items()}
    if len(set(seen.values())) > 1:
        detail = ", ".join(f"{arm}: {_tokens_detail(cfg)}" for arm, cfg in ablation.arms.items())
        raise BvrError(f"arms see different numbers of tokens ({detail})", where=ablation.source,
                       hint="choose training.tokens_per_batch (or batch_size) and max_steps so that the tokens per "
                            "step x max_steps are equal in every arm")


class ArmsCannotDiffer(BvrError):
    """Arms the prepared data shows to be one arm: the whole ablation stops before any pretraining."""


def check_static_masks_repeat(arm: str, cfg: Config, other_modes: set[str], train: dict[str, Any]) -> None:
    """Refuse a static arm compared with a dynamic one whose run ends before it reuses a mask (``train``:
    ``data_stats.json``'s ``train``, the prepared training split).

    Static masking gives epoch ``e`` the copy ``e % dupe_factor``, dynamic masking the copy ``e``
    (:func:`bvr.pretraining.masking.mask_copy`): while the epochs started stay within ``dupe_factor`` the two are the
    same masks on the same data, so the arms are one run twice and any "no difference" between them measures nothing.

    >>> from bvr.config import load_config
    >>> cfg = load_config(overrides=["masking.mode=static", "masking.dupe_factor=3", "training.max_steps=60",
    ...                              "training.batch_size=32", "training.warmup_steps=6"])
    >>> check_static_masks_repeat("static", cfg, {"dynamic"}, {"sequences": 900, "tokens": 0})
    Traceback (most recent call last):
    bvr.ablation.arms.ArmsCannotDiffer: data:static: arm 'static' makes 2.13 passes over its 900 training ...
    give it more passes than masks: training.max_steps above 84, or masking.dupe_factor 2
    """
    if cfg.masking.mode != "static" or "dynamic" not in other_modes:
        return
    training, dupe = cfg.training, cfg.masking.dupe_factor  # passes: sequences (or tokens) fed over those held
    epochs = (training.max_steps * training.batch_size / train["sequences"] if training.tokens_per_batch is None
              else training.max_steps * training.tokens_per_batch / train["tokens"])
    if math.ceil(epochs) > dupe:
        return
    steps = math.floor(cfg.training.max_steps * dupe / epochs)  # the last step count at which it still never repeats
    lower = f", or masking.dupe_factor {math.ceil(epochs) - 1}" if math.ceil(epochs) > 1 else ""
    raise ArmsCannotDiffer(
        f"arm '{arm}' makes {epochs:.2f} passes over its {train['sequences']:,} training sequences with "
        f"masking.dupe_factor {dupe}, so it never reuses a mask: its masks are the dynamic arm's and the arms cannot "
        "differ", where=f"data:{arm}", hint=f"give it more passes than masks: training.max_steps above {steps}{lower}")
