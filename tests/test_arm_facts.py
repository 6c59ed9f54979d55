"""Whether an ablation's arms compare fairly, as its report states it (issue 54, items 3 and 5).

What a pretraining run records of it (:func:`bvr.pretraining.exposure.vocabulary_exposure` and
:func:`~bvr.pretraining.exposure.ids_per_word`) on a hand-checkable corpus; the report's setup (the table of what
each arm saw, the learning rate per batch size, every setting in which the arms differ) and its headline's first line
where an arm beats the control on no measure, on analyses built by hand (no MLflow store: reading run/* metrics back
is :mod:`bvr.report.collect`'s, tested with the report's store in ``tests/test_report.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import datasets
import pandas as pd
import pytest

from bvr.ablation.manifest import Manifest
from bvr.ablation.records import PretrainRecord
from bvr.config import flatten
from bvr.pretraining.exposure import RARE_OCCURRENCES, ids_per_word, vocabulary_exposure
from bvr.report.analysis import Analysis, analyse
from bvr.report.arm_facts import arm_facts, settings_that_differ
from bvr.report.collect import (
    EVALUATION_COLUMNS,
    FINETUNE_COLUMNS,
    HISTORY_COLUMNS,
    PRETRAIN_COLUMNS,
    Collected,
)
from bvr.report.document import to_markdown
from bvr.report.headlines import brief, headlines
from bvr.report.published import load_published
from bvr.report.sections import report_blocks
from tests.report_fixtures import CONTROL, PRETRAIN_SEEDS, label

# ---------------------------------------------------------------------------------------------------------------
# What a pretraining run records


def test_id_occurrences_and_words_seen_on_a_hand_checkable_corpus(tmp_path: Path) -> None:
    """Vocabulary of 10 ids, 0-2 special. The training sequences hold [CLS] 3 3 3 4 [SEP] and [CLS] 3 5 5 6 [SEP]:
    text ids 3 x4, 4 x1, 5 x2, 6 x1 and 7, 8, 9 never, so the 7 text ids occur 4, 1, 2, 1, 0, 0, 0 times: median 1,
    and all 7 under 10. 8 of the 12 tokens are text. The corpus: 6 words, tokenized into 3 + 2 + 4 = 9 ids (train
    and validation), 1.5 ids a word; 1,200 tokens seen are 1,200 x 8/12 / 1.5 = 533.3 words."""
    corpus, tokenized = tmp_path / "corpus", tmp_path / "tokenized"
    (corpus / "documents").mkdir(parents=True)
    (corpus / "documents" / "corpus_stats.json").write_text(json.dumps({"documents": 2, "words": 6}))
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"token_ids": [[3, 3, 3], [4, 5]]}),
                          "validation": datasets.Dataset.from_dict({"token_ids": [[5, 6, 3, 9]]})}
                         ).save_to_disk(str(tokenized / "tokenized"))
    assert ids_per_word(corpus, tokenized) == 1.5
    train = datasets.Dataset.from_dict({"input_ids": [[1, 3, 3, 3, 4, 2], [1, 3, 5, 5, 6, 2]]})
    vocab = SimpleNamespace(vocab_size=10, special_ids=(0, 1, 2))
    assert RARE_OCCURRENCES == 10
    assert vocabulary_exposure(train, vocab, 1200, 1.5) == pytest.approx(
        {"id_occurrences_median": 1.0, "id_rare_share": 1.0, "ids_per_word": 1.5, "words_seen": 1200 * 8 / 12 / 1.5})
    common = datasets.Dataset.from_dict({"input_ids": [[1, *[3] * 12, *[4] * 10, 5, 2]]})
    small = SimpleNamespace(vocab_size=6, special_ids=(0, 1, 2))  # text ids 3, 4, 5 occur 12, 10 and 1 times
    assert vocabulary_exposure(common, small, 25, None) == {"id_occurrences_median": 10.0, "id_rare_share": 1 / 3}
    (corpus / "documents" / "corpus_stats.json").unlink()  # a corpus built before its statistics: no words
    assert ids_per_word(corpus, tokenized) is None


# ---------------------------------------------------------------------------------------------------------------
# The report's setup


ARMS = ("static", "dynamic")
LOGGED = {  # arm -> run/* metric -> per pretraining seed
    "static": {"tokens_seen": (153_600,) * 3, "steps": (300,) * 3, "epochs": (12.0,) * 3,
               "params_total": (4_200_000,) * 3, "params_embedding": (1_000_000,) * 3,
               "params_non_embedding": (3_200_000,) * 3, "words_seen": (120_000, 118_000, 122_000),
               "ids_per_word": (1.28,) * 3, "id_occurrences_median": (37, 41, 39), "id_rare_share": (0.125,) * 3},
    "dynamic": {"tokens_seen": (153_600,) * 3, "steps": (150,) * 3, "epochs": (6.0, 6.5, 5.5),
                "params_total": (6_200_000,) * 3, "params_embedding": (3_000_000,) * 3,
                "params_non_embedding": (3_200_000,) * 3, "words_seen": (100_000,) * 3,
                "ids_per_word": (1.536,) * 3, "id_occurrences_median": (12, 14, 13), "id_rare_share": (0.4, 0.5, 0.3)},
}
"""Each pretraining run's run/* metrics (medians: words 120.0K and 100.0K, the median id 39 and 13 times, 12.5% and
40.0% of ids rare). Tokens per step: 153,600 / 300 = 512 and 153,600 / 150 = 1,024."""
NEW = ("steps", "words_seen", "ids_per_word", "id_occurrences_median", "id_rare_share")
"""The metrics runs logged before issue 54 lack."""


def _config(arm: str, seed: int) -> dict:
    """A resolved config as the manifest keeps it: the dynamic arm takes a larger vocabulary and half the steps."""
    return {"name": arm, "tokenizer": {"family": "bert", "vocab_size": 1000 if arm == "static" else 3000},
            "data": {"input_format": "segment-pair", "max_length": 64},
            "masking": {"mode": arm}, "model": {"family": "bert", "num_layers": 2, "hidden_size": 64, "num_heads": 2},
            "training": {"batch_size": 8, "max_steps": 300 if arm == "static" else 150, "learning_rate": 5e-4,
                         "seed": seed}}


def _setup(old: bool = False, configs: dict[str, dict] | None = None) -> Analysis:
    """The two arms' pretraining runs (``old``: without :data:`NEW`) and their configs (default :func:`_config`)."""
    models = [(arm, label(arm, seed), seed) for arm in ARMS for seed in PRETRAIN_SEEDS]
    manifest = Manifest(ablation="vocab", arms=[*ARMS, CONTROL], control_arm=CONTROL, tasks=[],
                        labels=[name for _, name, _ in models], pretrain=[PretrainRecord(*model) for model in models],
                        configs=configs or {name: _config(arm, seed) for arm, name, seed in models})
    rows = []
    for arm in ARMS:
        for seed in PRETRAIN_SEEDS:
            config = flatten(manifest.configs[label(arm, seed)])
            logged = {f"run/{key}": float(values[seed]) for key, values in LOGGED[arm].items()
                      if not (old and key in NEW)}
            rows.append({"arm": arm, "pretrain_seed": seed, "run_id": f"{arm}{seed}", "steps": 300, **logged,
                         **{key: str(value) for key, value in config.items() if key in PRETRAIN_COLUMNS}})
    collected = Collected(manifest, "vocab", None, "sqlite:///unused.db", pd.DataFrame(columns=FINETUNE_COLUMNS),
                          pd.DataFrame(rows, columns=PRETRAIN_COLUMNS), pd.DataFrame(columns=HISTORY_COLUMNS), [],
                          None, pd.DataFrame(columns=EVALUATION_COLUMNS))
    return analyse(collected, load_published())


def _rows(markdown: str, first: str) -> dict[str, list[str]]:
    """The rows of the table whose header starts with ``| first |``: first cell -> the row's other cells."""
    table = markdown.split(f"| {first} |", 1)[1].split("\n\n", 1)[0]
    rows = [line.strip("|").split("|") for line in table.splitlines()[2:] if line.startswith("|")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}


def test_the_setup_states_what_each_arm_saw_in_ids_words_and_parameters() -> None:
    text = to_markdown(report_blocks(_setup(), {}))
    setup = text.split("## Setup\n", 1)[1]
    assert ("| arm | tokens per step | tokens seen (ids) | tokens seen (words) | ids per word | epochs | params: "
            "embeddings | params: rest | occurrences of the median id | ids seen < 10 times |") in setup
    rows = _rows(setup, "arm | tokens per step")
    assert rows["static"] == ["512", "153.6K", "120.0K", "1.28", "12.00", "1.0M", "3.2M", "39", "12.5%"]
    assert rows["dynamic"] == ["1.0K", "153.6K", "100.0K", "1.54", "6.00", "3.0M", "3.2M", "13", "40.0%"]
    # The arms table: the learning rate beside batch and steps, and all parameters.
    assert "| static | — | bert 1,000 | 2/64/2 | segment-pair | 8 | 300 | 0.0005 | 4.2M |" in setup


def test_runs_logged_before_the_measures_render_a_dash() -> None:
    rows = _rows(to_markdown(arm_facts(_setup(old=True))), "arm")
    # Tokens per step over the last logged training step (300), where a run logged no run/steps.
    assert rows["static"] == ["512", "153.6K", "—", "—", "12.00", "1.0M", "3.2M", "—", "—"]
    assert rows["dynamic"] == ["512", "153.6K", "—", "—", "6.00", "3.0M", "3.2M", "—", "—"]


def test_one_tokenizer_shows_no_vocabulary_columns() -> None:
    configs = {label(arm, seed): _config(arm, seed) for arm in ARMS for seed in PRETRAIN_SEEDS}
    for config in configs.values():
        config["tokenizer"]["vocab_size"] = 1000
    text = to_markdown(arm_facts(_setup(configs=configs)))
    assert "| params: rest |\n" in text and "occurrences of the median id" not in text


def test_every_setting_that_differs_between_the_arms_is_listed() -> None:
    configs = {label(arm, seed): _config(arm, seed) for arm in ARMS for seed in PRETRAIN_SEEDS}
    configs[label("static", 1)]["data"]["nsp"] = False  # one seed of one arm: not a difference between arms
    manifest = _setup(configs=configs).collected.manifest
    # training.seed differs between every arm's seeds and name is the arm's: neither is a difference between arms.
    assert settings_that_differ(manifest, list(ARMS)) == {
        "tokenizer.vocab_size": {"static": 1000, "dynamic": 3000},
        "masking.mode": {"static": "static", "dynamic": "dynamic"},
        "training.max_steps": {"static": 300, "dynamic": 150}}
    assert settings_that_differ(manifest, ["static"]) == {}
    rows = _rows(to_markdown(arm_facts(_setup(configs=configs))), "setting")
    assert rows == {"tokenizer.vocab_size": ["1000", "3000"], "masking.mode": ["static", "dynamic"],
                    "training.max_steps": ["300", "150"]}


def _with_batches(rates: dict[str, float]) -> Analysis:
    """The arms with the dynamic one at a batch of 64, each at its learning rate in ``rates``."""
    configs = {label(arm, seed): _config(arm, seed) for arm in ARMS for seed in PRETRAIN_SEEDS}
    for name, config in configs.items():
        arm = name.rsplit("-p", 1)[0]
        config["training"].update(learning_rate=rates[arm], **({"batch_size": 64} if arm == "dynamic" else {}))
    return _setup(configs=configs)


def test_a_batch_that_differs_says_whether_the_learning_rate_was_set_per_size() -> None:
    tuned = to_markdown(arm_facts(_with_batches({"static": 5e-4, "dynamic": 1e-3})))
    assert ("The learning rate was set per batch size, as RoBERTa's Table 3 sets it (each size at the rate that suits "
            "it; training.batch_size and learning rate per arm: static: 8 at 0.0005; dynamic: 64 at 0.001). The "
            "tokens each arm saw are in the table above.") in tuned
    assert "| training.batch_size | 8 | 64 |" in tuned and "| training.learning_rate | 0.0005 | 0.001 |" in tuned
    one = to_markdown(arm_facts(_with_batches({"static": 5e-4, "dynamic": 5e-4})))
    assert ("The batch (training.batch_size) differs between the arms (static: 8; dynamic: 64) at one learning "
            "rate, 0.0005: it was not set per batch size as RoBERTa's Table 3 sets it.") in one
    assert "per batch size" not in to_markdown(arm_facts(_setup()))  # equal batches: nothing to say


# ---------------------------------------------------------------------------------------------------------------
# The headline where pretraining shows on no measure


UNSEEN = {CONTROL: (50.0, 52.0, 48.0), "wordpiece": (51.0, 57.0, 45.0), "bpe": (49.0, 53.0, 49.0)}
"""BLiMP per pretraining seed: wordpiece - control 1, 5, -3 and bpe - control -1, 1, 1: neither beats the control."""
SEEN = {**UNSEEN, "wordpiece": (70.0, 73.0, 66.0)}
"""The same with wordpiece 20, 21, 18 above the control: it beats it, bpe does not."""


def _analysis(blimp: dict[str, tuple[float, ...]], kind: str = "ablation") -> Analysis:
    arms = ["wordpiece", "bpe", CONTROL]
    evaluations = [{"arm": arm, "label": label(arm, seed), "pretrain_seed": seed, "kind": "blimp", "task": None,
                    "run_id": f"{arm}{seed}", "metric": "blimp/macro_accuracy", "value": blimp[arm][seed] / 100,
                    "seeds": {0: blimp[arm][seed] / 100}, "baseline": None, "seconds": 1.0}
                   for arm in arms for seed in PRETRAIN_SEEDS]
    manifest = Manifest(ablation="vocab", arms=arms, control_arm=CONTROL, tasks=[], kind=kind)
    collected = Collected(
        manifest, "vocab", None, "sqlite:///unused.db", pd.DataFrame(columns=FINETUNE_COLUMNS),
        pd.DataFrame(columns=PRETRAIN_COLUMNS), pd.DataFrame(columns=HISTORY_COLUMNS), [], None,
        pd.DataFrame(evaluations, columns=EVALUATION_COLUMNS))
    return analyse(collected, load_published())


NOTE = "This budget: 3.6M tokens per pretraining run. On the budget curve, pretraining starts to help BLiMP at 40.0M."


def test_a_budget_too_small_to_judge_is_the_headlines_first_line() -> None:
    a = _analysis(UNSEEN)
    assert brief(a, bold=False)[0] == (f"too small to judge: no arm beats the {CONTROL} control on any measure at "
                                       "this budget, so no difference between the arms can be read as the ablated "
                                       "choice's effect.")
    assert brief(a)[0].startswith("**too small to judge**: ")
    assert any(line.startswith("At this budget bpe does not beat") for line in headlines(a))  # and in full
    text = to_markdown(report_blocks(a, {}, budget_note=NOTE))
    headline = text.split("## Headline\n", 1)[1].split("\n## ", 1)[0]
    assert headline.index("- too small to judge: no arm beats") < headline.index(NOTE) < headline.index(
        "In full:")  # where this budget sits on the budget curve, in the headline and not only in the setup
    assert f"| budget | {NOTE} |" in text


def test_one_arm_that_beats_the_control_nowhere_is_named() -> None:
    a = _analysis(SEEN)
    assert brief(a, bold=False)[0] == (f"too small to judge: bpe does not beat the {CONTROL} control on any measure "
                                       "at this budget, so no difference involving bpe can be read as the ablated "
                                       "choice's effect.")
    headline = to_markdown(report_blocks(_analysis(SEEN), {}, budget_note=NOTE)).split("## Headline\n", 1)[1]
    assert NOTE in headline.split("In full:", 1)[0]
    assert not brief(_analysis({**SEEN, "bpe": (69.0, 74.0, 67.0)}), bold=False)[0].startswith("too small")


def test_a_budget_curve_whose_budgets_beat_the_control_nowhere_says_so_first() -> None:
    a = _analysis(UNSEEN, kind="budget")
    assert brief(a, bold=False)[0] == (f"too small to judge: no budget tried beats the {CONTROL} control on any "
                                       "measure, so pretraining does not show within these budgets.")
