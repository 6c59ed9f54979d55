"""The budget curve: ``kind: budget`` experiment files, the report's "Budget curve" section, its figure and
``metrics.json`` key, and the line every other report gives on where its budget sits.

The store is ``tests/report_fixtures.py``'s, read as a budget curve (the manifest's ``kind: budget``) whose two arms
pretrained for different budgets: after the fixture is written, the static runs log ``run/tokens_seen`` 460,800 and
the dynamic runs 150,000, 153,600 and 157,200 (mean 153,600), so the smaller budget is the second arm of the file
and the curve must order by tokens, not by file order. Every run logs ``run/val_unigram_entropy``
(:data:`ENTROPY`).

Hand-worked values (points). With two arms, the budget curve's between-arm pairs (each budget and the next) are the
one pair a masking report has, so the report's 13 comparisons and its hand-worked numbers hold (see
``tests/test_report.py``): Bonferroni-simultaneous intervals at 1 - 0.05/13, critical t on 2 df 16.078, half-width
16.078 * sd / sqrt(3) = 9.2826 * sd.

- dynamic - control: BLiMP 23, 24, 22 -> +23.0 [13.7, 32.3]; probe 16, 15, 17 -> +16.0 [6.7, 25.3]; SST-2 27, 29.1,
  24.9 (sd 2.1) -> +27.0 [7.5, 46.5]; SQuAD 2.0 18, 18.5, 17.5 (sd 0.5) -> +18.0 [13.4, 22.6].
- static - control: BLiMP 20, 22, 18 (sd 2) -> +20.0 [1.4, 38.6]; probe 15, 16, 14 -> +15.0 [5.7, 24.3]; SST-2 25, 27,
  23 (sd 2) -> +25.0 [6.4, 43.6]; SQuAD 2.0 18, 19, 17 -> +18.0 [8.7, 27.3].
- The turn is the fixed sequence's (one-sided t tests from the largest budget down, each at 0.05 / 4 measures =
  1.25%): every one-sided p is far below it, so pretraining starts to help every measure at the smaller budget,
  dynamic's 153.6K tokens. Its one-sided bound on BLiMP at 98.75%: 23 - t_{2, 0.9875} / sqrt(3) = 23 - 6.2053 *
  0.57735 = 19.4 (every interval lies above 0 too, so the old rule, the first budget whose interval excludes zero,
  turned there as well). Validation MLM loss: static (3.0 + 3.1 + 2.9) / 3 = 3.000, dynamic (2.9 + 2.95 + 2.85) / 3
  = 2.900.

A second, hand-built analysis (no store) has three budgets on BLiMP and a probe, so that the turn is not the first
budget tried, and one measure never turns.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.entities import Metric
from scipy import stats

from bvr.ablation.loading import load_ablation
from bvr.ablation.manifest import Manifest
from bvr.ablation.plan import make_plan
from bvr.errors import BvrError
from bvr.report.analysis import Analysis, analyse
from bvr.report.budget import budget_context, budget_curve, budget_payload, recipe_text, turning_lines
from bvr.report.collect import (
    EVALUATION_COLUMNS,
    FINETUNE_COLUMNS,
    HISTORY_COLUMNS,
    PRETRAIN_COLUMNS,
    Collected,
    collect,
)
from bvr.report.document import to_markdown
from bvr.report.numbers import effect_metrics
from bvr.report.published import load_published
from bvr.report.render import ReportResult, render_report
from bvr.report.sections import report_blocks
from tests.report_fixtures import CONTROL, PRETRAIN_SEEDS, Store, entry, filled, label, variant

PNG = b"\x89PNG\r\n\x1a\n"
TOKENS = {"static": (460_800.0,) * 3, "dynamic": (150_000.0, 153_600.0, 157_200.0)}
"""``run/tokens_seen`` per pretraining seed, logged over the fixture's 153,600."""
ENTROPY = {"static": (6.0, 6.2, 5.8), "dynamic": (5.5, 5.6, 5.7)}
"""``run/val_unigram_entropy`` per pretraining seed (nats): means 6.0 and 5.6."""
HALF = 16.078 / math.sqrt(3)
"""Half-width of a simultaneous interval per point of standard deviation (13 comparisons, 3 seeds)."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    with filled(tmp_path_factory.mktemp("budget-store")) as store:
        for arm, values in TOKENS.items():
            for seed, tokens, entropy in zip(PRETRAIN_SEEDS, values, ENTROPY[arm], strict=True):
                record = entry(store.manifest, "pretrain", label=label(arm, seed))
                later = 1_800_000_000_000  # after the fixture's value, so this one is the run's latest
                store.client.log_batch(record.run_id, metrics=[Metric("run/tokens_seen", tokens, later, 0),
                                                               Metric("run/val_unigram_entropy", entropy, later, 0)])
                record.metrics["tokens_seen"] = tokens
        yield store


def _budget(manifest: Manifest) -> Manifest:
    out = variant(manifest, "budget")  # the same runs, read as a budget curve
    out.kind = "budget"
    return out


@pytest.fixture(scope="module")
def report(store: Store) -> ReportResult:
    return render_report(_budget(store.manifest), store.workdir / "reports" / "budget", workdir=store.workdir,
                         log_to_mlflow=False)


def _rows(markdown: str, heading: str) -> dict[str, list[str]]:
    """The first table under ``heading`` of a Markdown report: first cell -> the row's cells."""
    section = markdown.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("|")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[2:]}


def test_the_table_holds_the_hand_worked_values(report: ReportResult) -> None:
    text = report.markdown.read_text(encoding="utf-8")
    assert text.index("## Budget curve") < text.index("## Did pretraining help")  # right after the headline
    rows = _rows(text, "Budget curve")
    assert list(rows) == ["dynamic", "static"]  # by tokens, not by file order
    better = "pretraining better"
    assert rows["dynamic"] == ["153.6K", "+23.0 [13.7, 32.3]", better, "+16.0 [6.7, 25.3]", better,
                               "+27.0 [7.5, 46.5]", better, "+18.0 [13.4, 22.6]", better, "2.900", "5.600"]
    assert rows["static"] == ["460.8K", "+20.0 [1.4, 38.6]", better, "+15.0 [5.7, 24.3]", better,
                              "+25.0 [6.4, 43.6]", better, "+18.0 [8.7, 27.3]", better, "3.000", "6.000"]
    assert "the sst2 probe: Δ 99.62% CI" in text and "fine-tuned squad_v2: Δ 99.62% CI" in text
    assert ("BLiMP macro accuracy (zero-shot): pretraining starts to help at 153.6K tokens per run (dynamic: +23.0 "
            "points, at least +19.4 at 98.75% one-sided), and helps at every larger budget (static).") in text
    assert ("in a fixed sequence, from the largest budget down, each at 1.25% (5% split over the 4 measures, not over "
            "the budgets), stopping at the first budget that does not reject") in text
    assert "| budget |" not in text  # the curve says nothing about where it sits on itself


def test_metrics_json_holds_the_curve(report: ReportResult) -> None:
    curve = json.loads(report.metrics.read_text(encoding="utf-8"))["budget_curve"]
    assert list(curve["arms"]) == ["dynamic", "static"] and curve["control"] == CONTROL
    dynamic, static = curve["arms"]["dynamic"], curve["arms"]["static"]
    assert (dynamic["tokens_seen"], static["tokens_seen"], dynamic["runs"]) == (153_600, 460_800, 3)
    assert (static["val_mlm_loss"], dynamic["val_mlm_loss"]) == pytest.approx((3.0, 2.9))
    assert (static["val_unigram_entropy"], dynamic["val_unigram_entropy"]) == pytest.approx((6.0, 5.6))
    sd = {"blimp": (1.0, 2.0), "probe_sst2": (1.0, 1.0), "finetune_sst2": (2.1, 2.0), "finetune_squad_v2": (0.5, 1.0)}
    means = {"blimp": (23, 20), "probe_sst2": (16, 15), "finetune_sst2": (27, 25), "finetune_squad_v2": (18, 18)}
    for key, (sd_dynamic, sd_static) in sd.items():
        for arm, mean, spread in (("dynamic", means[key][0], sd_dynamic), ("static", means[key][1], sd_static)):
            found = curve["arms"][arm]["measures"][key]
            assert (found["mean"], found["ci_low"], found["ci_high"]) == pytest.approx(
                (mean, mean - HALF * spread, mean + HALF * spread), abs=2e-3), (key, arm)
            assert (found["helps"], found["significant"], found["n"]) == (True, True, 3)
        smaller, larger = dynamic["measures"][key], static["measures"][key]
        # The fixed sequence tests the larger budget first: the smaller's adjusted p is the larger of the two.
        assert larger["sequence_p"] == larger["one_sided_p"]
        assert smaller["sequence_p"] == max(smaller["one_sided_p"], larger["one_sided_p"]) < 0.0125, key
        assert smaller["sequence_rejects"] and larger["sequence_rejects"], key
        turn = curve["measures"][key]
        assert (turn["starts_to_help_arm"], turn["starts_to_help_tokens"]) == ("dynamic", 153_600), key
    assert curve["turn"]["procedure"].startswith("fixed sequence: one-sided t tests of arm − control")
    assert (curve["turn"]["alpha"], curve["turn"]["measures"], curve["turn"]["alpha_per_measure"]) == (0.05, 4, 0.0125)
    assert curve["arms"]["dynamic"]["measures"]["blimp"]["bound"] == pytest.approx(23 - 6.2053 / math.sqrt(3), abs=1e-3)
    assert curve["measures"]["probe_sst2"]["name"] == "the sst2 probe" and curve["largest_tokens_seen"] == 460_800
    assert curve["recipe"] == ("bert 2x64, bert vocabulary 1000, segment-pair x 64 + sop, dynamic masking, "
                               "peak lr 0.0005, batch 8, first 50 documents")


def test_the_figure_and_its_data_are_written(report: ReportResult) -> None:
    figure = report.out_dir / "figures" / "budget.png"
    assert figure in report.figures and figure.read_bytes().startswith(PNG)
    assert "(figures/budget.png)" in report.markdown.read_text(encoding="utf-8")
    data = pd.read_csv(report.out_dir / "plots" / "budget.csv")
    assert len(data) == 8 and list(data["arm"].unique()) == ["dynamic", "static"]
    row = data[(data["arm"] == "static") & (data["measure"] == "blimp")].iloc[0]
    assert (row["tokens_seen"], row["difference"], bool(row["helps"])) == (460_800, 20.0, True)


def test_a_budget_curve_with_no_runs_yet_renders(store: Store, tmp_path: Path) -> None:
    manifest = _budget(store.manifest)
    manifest.experiment, manifest.parent_run_id = "never-run", None
    result = render_report(manifest, tmp_path / "budget", workdir=store.workdir)
    assert not result.complete and result.figures == []
    rows = _rows(result.markdown.read_text(encoding="utf-8"), "Budget curve")
    assert rows["static"] == ["—", "—", "—"] and list(rows) == ["static", "dynamic"]  # file order without tokens
    curve = json.loads(result.metrics.read_text(encoding="utf-8"))["budget_curve"]
    assert curve["measures"] == {} and curve["arms"]["static"]["tokens_seen"] is None


def test_the_budget_kind_compares_each_budget_with_the_next_only(store: Store) -> None:
    a = analyse(collect(_budget(store.manifest), workdir=store.workdir), load_published())
    assert {(c.arm_a, c.arm_b) for c in a.comparisons} == {("static", "dynamic")} and a.m == 13
    metrics = effect_metrics(a)  # the parent run's metrics in MLflow
    assert metrics["budget/probe/sst2/starts_to_help_tokens"] == 153_600
    assert metrics["effect/blimp/static-vs-no-pretraining"] == pytest.approx(20.0)


# ---------------------------------------------------------------------------------------------------------------
# Where another ablation's budget sits


def test_another_report_says_where_its_budget_sits(report: ReportResult, store: Store, tmp_path: Path) -> None:
    masking = analyse(collect(store.manifest, workdir=store.workdir), load_published())
    line = budget_context(report.out_dir.parent, masking)
    # The same store read as the masking ablation: its runs now log 460,800 tokens (static) and 153,600 on average
    # (dynamic), so its budget is their mean over the six runs, (3 x 460,800 + 3 x 153,600) / 6 = 307,200.
    assert line.startswith("This budget: 307.2K tokens per pretraining run. On the budget curve (reports/budget, "
                           "recipe: bert 2x64, ")
    assert ("pretraining starts to help BLiMP at 153.6K tokens (dynamic), the sst2 probe at 153.6K tokens (dynamic), "
            "fine-tuned sst2 at 153.6K tokens (dynamic), fine-tuned squad_v2 at 153.6K tokens (dynamic). This budget "
            "lies between the curve's dynamic and static points.") in line
    absent = budget_context(tmp_path, masking)
    assert absent.endswith("The budget curve has not been run (" + str(tmp_path / "budget") + " is absent): "
                           "`bvr ablate budget --preset tiny` runs it, and this line then says from which budget on "
                           "pretraining helps each measure.")
    text = to_markdown(report_blocks(masking, {}, budget_note=line))
    assert f"| budget | {line} |" in text
    (tmp_path / "budget").mkdir()
    (tmp_path / "budget" / "metrics.json").write_text('{"complete": true}')
    assert "holds no budget curve" in budget_context(tmp_path, masking)


# ---------------------------------------------------------------------------------------------------------------
# Which budget turns: a hand-built analysis


BLIMP = {CONTROL: (50.0, 52.0, 48.0), "steps-300": (51.0, 57.0, 45.0), "steps-900": (60.0, 63.0, 57.0),
         "steps-2700": (70.0, 74.0, 66.0)}
"""BLiMP per pretraining seed: arm - control is 1, 5, -3 (sd 4), then 10, 11, 9 and 20, 22, 18."""
PROBE = {CONTROL: (60.0, 62.0, 58.0), "steps-300": (61.0, 67.0, 55.0), "steps-900": (62.0, 60.0, 64.0),
         "steps-2700": (60.0, 66.0, 54.0)}
"""The probe: arm - control is 1, 5, -3, then 2, -2, 6 and 0, 4, -4 (sd 4 each): pretraining never helps."""
LOSS = {"steps-300": (6.0, 6.1, 5.9), "steps-900": (5.0, 5.2, 4.9), "steps-2700": (4.0, 4.1, 3.7)}
SIZES = {"steps-300": 0.9e6, "steps-900": 2.7e6, "steps-2700": 8.1e6}


def _hand_built() -> Analysis:
    arms = [*SIZES, CONTROL]
    evaluations = [{"arm": arm, "label": label(arm, seed), "pretrain_seed": seed, "kind": kind, "task": task,
                    "run_id": f"{arm}{seed}{kind}", "metric": metric, "value": units[arm][seed] / 100,
                    "seeds": {0: units[arm][seed] / 100}, "baseline": None, "seconds": 1.0}
                   for kind, task, metric, units in (("blimp", None, "blimp/macro_accuracy", BLIMP),
                                                     ("probe", "sst2", "probe/sst2/accuracy", PROBE))
                   for arm in arms for seed in PRETRAIN_SEEDS]
    pretrain = [{"arm": arm, "pretrain_seed": seed, "run_id": f"{arm}{seed}", "val/mlm_loss": LOSS[arm][seed],
                 "run/tokens_seen": SIZES[arm], "run/val_unigram_entropy": 7.0, "tokenizer.family": "bert",
                 "tokenizer.vocab_size": "1000"} for arm in SIZES for seed in PRETRAIN_SEEDS]
    manifest = Manifest(ablation="budget", arms=arms, control_arm=CONTROL, tasks=[], kind="budget")
    collected = Collected(manifest, "budget", None, "sqlite:///unused.db", pd.DataFrame(columns=FINETUNE_COLUMNS),
                          pd.DataFrame(pretrain, columns=PRETRAIN_COLUMNS), pd.DataFrame(columns=HISTORY_COLUMNS),
                          [], None, pd.DataFrame(evaluations, columns=EVALUATION_COLUMNS))
    return analyse(collected, load_published())


def test_starts_to_help_is_the_fixed_sequence_turn() -> None:
    a = _hand_built()
    curve = budget_curve(a)
    # 3 arms x 2 measures against the control, and each budget against the next on both and on MLM loss.
    assert a.m == 12 and [p.arm for p in curve.points] == list(SIZES)
    half = stats.t.ppf(1 - 0.05 / 12 / 2, 2) / math.sqrt(3)
    blimp = {arm: curve.comparison("blimp", arm) for arm in SIZES}
    assert (blimp["steps-300"].interval.ci_low, blimp["steps-300"].interval.ci_high) == pytest.approx(
        (1 - 4 * half, 1 + 4 * half))
    assert blimp["steps-900"].interval.ci_low == pytest.approx(10 - half) and 10 - half > 0
    # The fixed sequence, each test at 0.05 / 2 measures: BLiMP's steps-2700 (20, 22, 18) and steps-900 (10, 11, 9)
    # both have t = 10 sqrt(3), one-sided p 0.0017 on 2 df; steps-300's t = 1 / (4 / sqrt(3)) = 0.433 has p 0.354,
    # so the sequence stops there and the turn is steps-900 (as the first interval excluding zero was). The probe's
    # steps-2700 (estimate 0) has p 0.5: nothing on it rejects.
    assert curve.turn_alpha == 0.025
    assert curve.one_sided_p("blimp", "steps-900") == pytest.approx(stats.t.sf(10 * math.sqrt(3), 2))
    assert curve.one_sided_p("blimp", "steps-300") == pytest.approx(stats.t.sf(math.sqrt(3) / 4, 2))
    assert curve.bound("blimp", "steps-900") == pytest.approx(10 - stats.t.ppf(0.975, 2) / math.sqrt(3))
    assert curve.sequences["blimp"].rejected == (False, True, True) and curve.sequences["probe/sst2"].turn is None
    assert curve.starts_to_help("blimp").arm == "steps-900" and curve.starts_to_help("probe/sst2") is None
    payload = budget_payload(curve)
    assert payload["measures"]["blimp"]["starts_to_help_tokens"] == 2.7e6
    assert payload["turn"]["alpha_per_measure"] == 0.025 and payload["turn"]["measures"] == 2
    assert payload["measures"]["probe_sst2"]["starts_to_help_arm"] is None
    assert payload["arms"]["steps-900"]["val_mlm_loss"] == pytest.approx(np.mean(LOSS["steps-900"]))
    assert turning_lines(curve) == [
        "BLiMP macro accuracy (zero-shot): pretraining starts to help at 2.7M tokens per run (steps-900: +10.0 points, "
        "at least +7.5 at 97.5% one-sided), and helps at every larger budget (steps-2700).",
        "sst2 probe (mean features): pretraining does not help within the budgets tried (up to 8.1M tokens per run)."]


def test_an_ordinary_ablation_has_no_budget_curve(store: Store) -> None:
    assert budget_curve(analyse(collect(store.manifest, workdir=store.workdir), load_published())) is None
    assert recipe_text({}) == ""


# ---------------------------------------------------------------------------------------------------------------
# Experiment files


def test_the_shipped_budget_curve_loads_and_plans(tmp_path: Path) -> None:
    ablation = load_ablation("budget", preset="tiny")
    assert ablation.is_budget and ablation.control and ablation.pretrain_seeds == [0, 1, 2, 3, 4]
    assert {arm: cfg.training.max_steps for arm, cfg in ablation.arms.items()} == {
        "steps-1200": 1200, "steps-4800": 4800, "steps-19200": 19200}
    cfg = ablation.arms["steps-1200"]
    # the plateau fix (docs/recipes.md)
    assert (cfg.model.norm, cfg.model.embedding_norm, cfg.model.token_type_init, cfg.model.head_transform) == (
        "pre", False, "zero", False)
    assert (cfg.training.dropout, cfg.training.learning_rate, cfg.data.max_length, cfg.tokenizer.vocab_size) == (
        False, 1.5e-3, 64, 8192)
    assert cfg.corpus.max_documents == 40000 and ablation.finetune_tasks == ["sst2"]
    plan = make_plan("budget", preset="tiny", output_dir=tmp_path)  # arms of different tokens are not refused
    assert [arm.label for arm in plan.arms][:2] == ["steps-1200-p0", "steps-1200-p1"]
    assert Manifest.new(plan, {}).kind == "budget"


BUDGET = """\
kind: budget
base:
  masking: {mode: dynamic}
arms:
  short:
    training: {max_steps: 100, warmup_steps: 10}
  long:
    training: {max_steps: 300}
    masking: {mode: static}
control: true
"""


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "curve.yaml"
    path.write_text(text)
    with pytest.raises(BvrError) as info:
        load_ablation(path, preset="tiny")
    return str(info.value)


def test_a_budget_arm_changing_anything_but_the_budget_is_refused_at_its_line(tmp_path: Path) -> None:
    message = _error(tmp_path, BUDGET)
    assert message.startswith(f"{tmp_path / 'curve.yaml'}:9: arms.long.masking.mode: arm 'long' changes "
                              "masking.mode, but the arms of a budget curve may differ only in training.max_steps, "
                              "training.warmup_steps, training.max_tokens")
    assert "\n" not in message.split(". ", 1)[0]


@pytest.mark.parametrize(("change", "where", "says"), [
    (("    masking: {mode: static}\n", ""), ":7: arms.long", "no more than 'short' before it"),
    (("control: true\n", "control: false\n"), ":10: control", "set control: true"),
    (("kind: budget\n", "kind: curve\n"), ":1: kind", "expected one of ablation, budget, got 'curve'"),
])
def test_a_malformed_budget_curve_is_refused(tmp_path: Path, change: tuple[str, str], where: str, says: str) -> None:
    text = BUDGET.replace(*change)
    if "no more" in says:
        text = text.replace("max_steps: 300", "max_steps: 100")
    message = _error(tmp_path, text)
    assert f"curve.yaml{where}:" in message and says in message
