"""``bvr report``: a report rendered from a real MLflow store, checked against numbers worked out by hand.

The store (``tests/report_fixtures.py``) holds a finished masking ablation under a version-2 manifest: static,
dynamic and the no-pretraining control at pretraining seeds 0 to 2; BLiMP and an SST-2 probe (3 probe seeds) per
model; fine-tuning on SST-2 (fractions) and SQuAD 2.0 (points) with seeds 0 and 1. Creating an SQLite store costs
several seconds, so one store and one full render are shared by the module; tests that need another render write to
folders of their own and leave MLflow alone (``log_to_mlflow=False``).

Hand-worked values (points). Inner seeds sit symmetrically about each model's value, so a model's value (the mean
over its probe or fine-tuning seeds) is the fixture's ``UNITS`` entry. Every test is a paired t over the 3
pretraining seeds, df = 2, for which the two-sided p-value has the closed form ``p = 1 - |t| / sqrt(t**2 + 2)``.

- 13 comparisons are tested: each arm against the control on BLiMP, the probe, SST-2 and SQuAD 2.0 (8), and
  dynamic - static on those four and on MLM loss (5). Bonferroni-simultaneous intervals are at 1 - 0.05/13 = 99.615%;
  with a = 0.05/13 = 1/260 the df-2 critical value is (1 - a) sqrt(2 / (a (2 - a))) = 259 sqrt(2/519) = 16.078.
- SST-2 fine-tuned, dynamic - static: 2, 2.1, 1.9 (82 - 80, 86.1 - 84, 77.9 - 76): mean 2, sd 0.1, se 0.1/sqrt(3),
  t = 20 sqrt(3) = 34.64, p = 1 - sqrt(1200/1202) = 0.000832. It is the 3rd smallest of the 13 p-values (after
  SQuAD dynamic - control, t = 36 sqrt(3), and BLiMP dynamic - control, t = 23 sqrt(3)), so Holm multiplies it by
  11: 0.00916, significant. Interval 2 ± 16.078 * 0.1 / sqrt(3) = [1.072, 2.928]: "dynamic better"; the paper's
  +0.4 (RoBERTa Table 1) agrees.
- BLiMP, dynamic - static: 3, 2, 4: mean 3, sd 1, t = 3 sqrt(3) = 5.196, p = 1 - sqrt(27/29) = 0.0351 (below 5% on
  its own), 10th of 13, so Holm gives 4p = 0.1404: no difference detected. Interval 3 ± 16.078 / sqrt(3) =
  [-6.28, 12.28].
- SQuAD 2.0, dynamic - static: 0, -0.5, 0.5: t = 0, p = 1, Holm 1; the paper's +0.4 is inconclusive here.
- Each arm against the control: the smallest t is BLiMP static - control, 20, 22, 18: t = 10 sqrt(3), p =
  1 - sqrt(300/302) = 0.00332, 9th of 13, Holm 5p = 0.0166; all 8 are significant, so pretraining helped both arms.
- Every measure, per arm: static on SST-2 fine-tuned is 80, 84, 76 (runs 79, 81 / 83, 85 / 75, 77): mean 80, sd 4,
  95% t interval 80 ± 4.303 * 4 / sqrt(3) = [70.1, 89.9]; within-model mean square 2 (SD 1.41), between-seed mean
  square 2 * 16 = 32, so the between-seed variance is (32 - 2) / 2 = 15 (SD 3.87).
- BLiMP beside the published models, over the 3 paradigms of ``tests/fixtures/blimp``: GPT-2 (0.994 + 0.948 +
  0.785) / 3 = 90.9, 5-gram (0.439 + 0.489 + 0.298) / 3 = 40.9.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE
from scipy import integrate, optimize, stats

from bvr.ablation.manifest import Manifest
from bvr.errors import BvrError
from bvr.ops.views import saved_view, write_report_views
from bvr.report.analysis import Analysis, Outcome, analyse
from bvr.report.cells import RunLinks, fmt_p
from bvr.report.collect import FINETUNE_COLUMNS, HISTORY_COLUMNS, PRETRAIN_COLUMNS, Collected, collect
from bvr.report.document import Table, to_markdown
from bvr.report.figures import arm_colors, curves_figure, differences_figure
from bvr.report.headlines import headlines
from bvr.report.published import load_published
from bvr.report.render import ReportResult, render_report, render_summary
from bvr.report.results import measures_section, pretraining_section, published_section
from bvr.report.sections import report_blocks
from bvr.tracking.ui import MODEL_TRAINING, ui_base
from tests.report_fixtures import (
    ALL_ARMS,
    ARMS,
    BLIMP_DATA,
    CONTROL,
    MLM_LOSS,
    PRETRAIN_SEEDS,
    UNITS,
    Store,
    entry,
    fill_store,
    filled,
    variant,
)

MODE = "&".join(f"{k}={v}" for k, v in MODEL_TRAINING.items())

PNG = b"\x89PNG\r\n\x1a\n"
M = 13
"""Tested comparisons in the full report."""
MEASURES = {"blimp": "blimp", "probe_sst2": "probe/sst2", "finetune_sst2": "sst2", "finetune_squad_v2": "squad_v2"}
"""metrics.json's measure key -> the fixture's ``UNITS`` key."""
COMPARISONS = [*((CONTROL, arm, key) for key in MEASURES for arm in ARMS),
               *(("static", "dynamic", key) for key in [*MEASURES, "mlm"])]
"""(a, b, measure) of every comparison ``b - a`` in the full report."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    with filled(tmp_path_factory.mktemp("report-store")) as store:
        yield store


@pytest.fixture(scope="module")
def report(store: Store) -> ReportResult:
    # Any port: the links follow the address given, never a fixed one.
    return render_report(store.manifest, store.workdir / "reports" / "masking", workdir=store.workdir,
                         ui_url="http://127.0.0.1:8765/", write_views=write_report_views)  # as bvr report passes it


@pytest.fixture(scope="module")
def analysis(store: Store) -> Analysis:
    return analyse(collect(store.manifest, workdir=store.workdir), load_published())


def _metrics(result: ReportResult) -> dict:
    return json.loads(result.metrics.read_text(encoding="utf-8"))


def _units(measure: str, arm: str) -> np.ndarray:
    """The fixture's value per pretraining seed of one arm on one measure (metrics.json's measure key)."""
    return np.array(MLM_LOSS[arm] if measure == "mlm" else UNITS[(MEASURES[measure], arm)])


def _holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment, written out independently of bvr.report.inference."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for step, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - step) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def _mde(sd: float, n: int, alpha: float, power: float = 0.8) -> float:
    """Smallest true mean difference a two-sided paired t test at ``alpha`` detects with ``power``.

    The t statistic is ``(Z + ncp) / sqrt(V / df)`` with ``V`` chi-squared on ``df``, so it exceeds ``c`` with
    chance ``E[Phi(ncp - c sqrt(V / df))]``: integrated here over V's density (scipy's noncentral t returns NaN in
    the far tails that df = 2 and alpha = 0.05/13 reach).
    """
    df = n - 1
    critical = stats.t.ppf(1 - alpha / 2, df)

    def rejects(ncp: float) -> float:
        def tails(v: float) -> float:
            scale = critical * math.sqrt(v / df)
            return (stats.norm.cdf(ncp - scale) + stats.norm.cdf(-ncp - scale)) * stats.chi2.pdf(v, df)

        return integrate.quad(tails, 0, np.inf, limit=200)[0]

    return optimize.brentq(lambda ncp: rejects(ncp) - power, 0.1, 1000.0, xtol=1e-10) * sd / math.sqrt(n)


def _expected() -> dict[tuple[str, str, str], dict]:
    """Every comparison's statistics computed with scipy straight from the fixture's numbers."""
    tests = {(a, b, key): stats.ttest_rel(_units(key, b), _units(key, a)) for a, b, key in COMPARISONS}
    holm = dict(zip(tests, _holm([t.pvalue for t in tests.values()]), strict=True))
    out = {}
    for (a, b, key), test in tests.items():
        d = _units(key, b) - _units(key, a)
        low, high = stats.t.interval(1 - 0.05 / M, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        out[(a, b, key)] = {"mean": d.mean(), "ci_low": low, "ci_high": high, "n": len(d), "p": test.pvalue,
                            "holm_p": holm[(a, b, key)], "detectable": _mde(d.std(ddof=1), len(d), 0.05 / M),
                            "significant": holm[(a, b, key)] <= 0.05}
    return out


# ---------------------------------------------------------------------------------------------------------------
# The full report


def test_files_have_their_fixed_names(report: ReportResult, store: Store) -> None:
    out = store.workdir / "reports" / "masking"
    assert (report.out_dir, report.html, report.markdown, report.metrics) == (
        out, out / "report.html", out / "report.md", out / "metrics.json")
    assert report.complete and report.missing == []
    assert {p.name for p in (out / "figures").iterdir()} == {p.name for p in report.figures}
    assert {p.name for p in (out / "plots").iterdir()} == {p.name for p in report.plots}
    assert all(p.suffix == ".csv" for p in report.plots)
    assert all(p.read_bytes().startswith(PNG) for p in report.figures)
    assert {"scores.png", "differences.png", "curves.png", "throughput.png"} <= {p.name for p in report.figures}
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no staging folder left behind


def test_metrics_json_holds_each_measure_per_arm(report: ReportResult) -> None:
    metrics = _metrics(report)
    means = {(key, arm): value["mean"] for key, arms in metrics["measures"].items() for arm, value in arms.items()}
    expected = {(key, arm): float(_units(key, arm).mean()) for key in MEASURES for arm in (*ARMS, CONTROL)}
    expected |= {("mlm", arm): float(_units("mlm", arm).mean()) for arm in ARMS}
    assert means == pytest.approx(expected, abs=1e-6)
    assert means[("finetune_sst2", "static")] == pytest.approx(80.0)  # (79 + 81 + 83 + 85 + 75 + 77) / 6
    assert {v["n"] for arms in metrics["measures"].values() for v in arms.values()} == {3}
    static = metrics["scores"]["static"]["sst2"]  # the spread of the six runs, no interval
    assert (static["median"], static["q1"], static["q3"], static["n"]) == pytest.approx((80.0, 77.5, 82.5, 6))
    assert "ci_low" not in static
    assert metrics["scores"][CONTROL]["sst2"]["collapsed"] == 1 and static["collapsed"] == 0
    assert (metrics["complete"], metrics["missing"], metrics["comparisons"]) == (True, 0, M)


def test_t_tests_holm_and_intervals_match_scipy(report: ReportResult) -> None:
    differences = _metrics(report)["differences"]
    found = {(a, b, key): differences[f"{b}_minus_{a}"][key] for a, b, key in COMPARISONS}
    assert sum(len(v) for v in differences.values()) == M
    for name, expected in _expected().items():  # metrics.json keeps 7 significant digits
        assert found[name] == pytest.approx(expected, rel=6e-7, abs=1e-9), name


def test_hand_worked_values(report: ReportResult) -> None:
    differences = _metrics(report)["differences"]
    sst2 = differences["dynamic_minus_static"]["finetune_sst2"]
    p = 1 - math.sqrt(1200 / 1202)  # t = 20 sqrt(3) on 2 df
    half = 259 * math.sqrt(2 / 519) * 0.1 / math.sqrt(3)  # t_{2, 1 - 0.05/26} * sd / sqrt(n)
    assert sst2["p"] == pytest.approx(p, rel=1e-4) and sst2["holm_p"] == pytest.approx(11 * p, rel=1e-4)
    assert (sst2["ci_low"], sst2["ci_high"]) == pytest.approx((2 - half, 2 + half), abs=1e-5)
    assert (sst2["ci_low"], sst2["ci_high"]) == pytest.approx((1.0717, 2.9283), abs=1e-4)
    assert sst2["significant"] is True
    blimp = differences["dynamic_minus_static"]["blimp"]
    p = 1 - math.sqrt(27 / 29)  # t = 3 sqrt(3)
    assert (blimp["mean"], blimp["p"], blimp["holm_p"]) == pytest.approx((3.0, p, 4 * p), rel=1e-4)
    assert blimp["p"] < 0.05 and blimp["significant"] is False  # nominally below 5%, not after Holm
    weakest = differences[f"static_minus_{CONTROL}"]["blimp"]
    p = 1 - math.sqrt(300 / 302)  # t = 10 sqrt(3)
    assert (weakest["holm_p"], weakest["significant"]) == (pytest.approx(5 * p, rel=1e-4), True)
    squad = differences["dynamic_minus_static"]["finetune_squad_v2"]
    assert (squad["mean"], squad["p"], squad["holm_p"]) == pytest.approx((0.0, 1.0, 1.0), abs=1e-9)


def test_headline_puts_the_ablation_first_in_a_line_per_question_then_in_full(report: ReportResult) -> None:
    text = report.markdown.read_text(encoding="utf-8")
    headline = text.split("## Headline", 1)[1].split("\n## ", 1)[0]
    assert text.index("## Headline") < text.index("This run (preset")  # the first screen: title, status, headline
    short, full = headline.split("\nIn full:\n")
    assert [line[2:] for line in short.splitlines() if line.startswith("- ")] == report.brief == [
        "dynamic − static: sst2 fine-tuned +2.0 [+1.1, +2.9] points, dynamic better; BLiMP +3.0, sst2 probe +1.0, "
        "squad_v2 fine-tuned +0.0, validation MLM loss -0.100: no difference detected.",
        f"pretraining − {CONTROL}: helped BLiMP (static +20.0, dynamic +23.0), sst2 probe (static +15.0, dynamic "
        "+16.0), sst2 fine-tuned (static +25.0, dynamic +27.0), squad_v2 fine-tuned (static +18.0, dynamic +18.0) "
        "(points)."]
    bullets = [line[2:] for line in full.splitlines() if line.startswith("- ")]
    assert [b.split(": ")[0].split(" by ")[0] for b in bullets] == [  # each bullet's subject
        "BLiMP macro accuracy (zero-shot)", "sst2 probe (mean features)",
        "dynamic better than static on sst2 fine-tuned (dev accuracy)", "squad_v2 fine-tuned (dev F1)",
        "validation MLM loss (fixed masks)", "Pretraining helped static", "Pretraining helped dynamic"]
    bullets = bullets[5:] + bullets[:5]  # as indexed below: the sanity check, then the ablation
    # Holm p of each arm against the control, from the p-values of the module docstring's closed form in the
    # order of the 13: static's probe (t = 15 sqrt(3), p = 0.00148) is 6th, x8 = 0.012; its SST-2 (t = 12.5
    # sqrt(3), p = 0.00213) 8th, x6 = 0.0128, raised to the 7th's 0.0141; its SQuAD (t = 18 sqrt(3), p = 0.00103)
    # 4th, x10 = 0.0103.
    assert bullets[0] == (
        f"Pretraining helped static: better than the {CONTROL} control on BLiMP macro accuracy (zero-shot) by "
        "20.0 [1.4, 38.6] points (Holm p = 0.017, n=3), sst2 probe (mean features) by 15.0 [5.7, 24.3] points "
        "(Holm p = 0.012, n=3), sst2 fine-tuned (dev accuracy) by 25.0 [6.4, 43.6] points (Holm p = 0.014, n=3), "
        "squad_v2 fine-tuned (dev F1) by 18.0 [8.7, 27.3] points (Holm p = 0.010, n=3).")
    assert bullets[4] == (
        "dynamic better than static on sst2 fine-tuned (dev accuracy) by 2.0 [1.1, 2.9] points (Holm p = 0.009, "
        "n=3); the paper: +0.4 (dynamic better), which would need 5 pretraining seeds per arm at this noise.")
    assert bullets[2] == (
        "BLiMP macro accuracy (zero-shot): no difference detected between static and dynamic (dynamic − static = "
        "+3.0 [-6.3, +12.3], n=3); the design detects \\|Δ\\| ≥ 11.8.")
    assert "with 99.62% simultaneous intervals" in headline and "all 13 tested comparisons" in headline
    assert "bootstrap" not in text and "distinguishable" not in text


def test_a_verdict_not_detected_says_what_could_have_been(analysis: Analysis) -> None:
    by_measure = {c.key: c for c in analysis.comparisons}
    blimp = by_measure["blimp"]
    mde = _mde(1.0, 3, 0.05 / M)  # BLiMP dynamic - static: sd 1
    assert blimp.mde == pytest.approx(mde, rel=1e-6) and f"{mde:.1f}" == "11.8"
    assert (blimp.outcome, blimp.winner, blimp.ours) == (Outcome.NO_DIFFERENCE, None, "no difference detected")
    sst2 = by_measure["finetune/sst2"]
    assert (sst2.outcome, sst2.winner, sst2.loser, sst2.ours) == (Outcome.B_BETTER, "dynamic", "static",
                                                                  "dynamic better")
    assert (sst2.estimate, sst2.interval.ci_low, sst2.interval.ci_high) == pytest.approx((2.0, 1.1, 2.9), abs=0.05)
    assert fmt_p(sst2.adjusted_p) == "0.009" and sst2.test.n == 3
    assert by_measure["mlm"].outcome is Outcome.NO_DIFFERENCE and f"{by_measure['mlm'].mde:.3f}" == "0.590"
    assert (analysis.m, {c.m for c in [*analysis.control, *analysis.comparisons]}) == (M, {M})


def test_a_measure_pretraining_did_not_move_cannot_show_the_ablation(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.report_fixtures as fixtures

    control = np.array(fixtures.UNITS[("probe/sst2", CONTROL)])  # the arms' probe scores at the control's, about
    monkeypatch.setitem(fixtures.UNITS, ("probe/sst2", "static"), tuple(control + (0.5, -0.4, 0.1)))
    monkeypatch.setitem(fixtures.UNITS, ("probe/sst2", "dynamic"), tuple(control + (-0.3, 0.2, 0.4)))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    store = fill_store(tmp_path)
    lines = headlines(analyse(collect(store.manifest, workdir=tmp_path), load_published()))
    static = next(line for line in lines if line.startswith("Pretraining helped static"))
    assert static.startswith(f"Pretraining helped static: better than the {CONTROL} control on BLiMP macro accuracy")
    assert "; not on sst2 probe (mean features) (+0.1, detectable " in static
    probe = next(line for line in lines if line.startswith("sst2 probe"))
    assert probe.endswith(f"; pretraining did not beat the {CONTROL} control on this measure, so it cannot show the "
                          "ablation's effect at this budget.")
    blimp = next(line for line in lines if line.startswith("BLiMP"))
    assert "cannot show" not in blimp


def test_every_holm_verdict_is_a_headline_in_either_direction(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Holm-significant comparison is said as found, whichever side wins: 'Pretraining hurt ARM', 'B better
    than A', never one more 'not on' or 'detectable' measure.

    Static sits on the control but for SST-2, 9.0, 10.0 and 9.5 points below it: t = -19 sqrt(3), p = 1 -
    sqrt(1083/1085) = 0.000922, 4th smallest of the 13, Holm x10 = 0.009; its lead 9.5 ± 16.078 * 0.5 / sqrt(3) =
    [4.9, 14.1]. Dynamic is 12.0, 13.5 and 12.6 below the control on SST-2, so dynamic - static = -3.0, -3.5, -3.1:
    mean -3.2, sd sqrt(0.07), t = -20.95, p = 1 - sqrt(438.9/440.9) = 0.00227, 9th, Holm x5 = 0.011; static's lead
    3.2 ± 16.078 * 0.2646 / sqrt(3) = [0.7, 5.7]."""
    import tests.report_fixtures as fixtures

    def below_control(measure: str, offsets: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(np.array(fixtures.UNITS[(measure, CONTROL)]) - offsets)

    monkeypatch.setitem(fixtures.UNITS, ("sst2", "static"), below_control("sst2", (9.0, 10.0, 9.5)))
    monkeypatch.setitem(fixtures.UNITS, ("sst2", "dynamic"), below_control("sst2", (12.0, 13.5, 12.6)))
    for measure, offsets in (("blimp", (-0.5, 0.4, -0.1)), ("probe/sst2", (0.3, -0.2, -0.4)),
                             ("squad_v2", (-0.2, -0.1, 0.4))):
        monkeypatch.setitem(fixtures.UNITS, (measure, "static"), below_control(measure, offsets))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    store = fill_store(tmp_path)
    a = analyse(collect(store.manifest, workdir=tmp_path), load_published())
    lines = headlines(a)
    lines = lines[sum(c.comparable for c in a.comparisons):]  # the sanity check, after the ablation's line per measure
    assert lines[0].startswith(f"At this budget static does not beat the {CONTROL} control on any measure (the "
                               "design detects differences of 3.8 points or more; static − no-pretraining: BLiMP")
    assert "sst2 fine-tuned" not in lines[0]  # hurt, so not among the measures it merely did not help
    assert lines[1] == (f"Pretraining hurt static: worse than the {CONTROL} control on sst2 fine-tuned (dev accuracy) "
                        "by 9.5 [4.9, 14.1] points (Holm p = 0.009, n=3).")
    assert lines[2].startswith(f"Pretraining helped dynamic: better than the {CONTROL} control on BLiMP")
    assert lines[3].startswith(f"Pretraining hurt dynamic: worse than the {CONTROL} control on sst2 fine-tuned")
    lines = headlines(a)
    assert ("static better than dynamic on sst2 fine-tuned (dev accuracy) by 3.2 [0.7, 5.7] points (Holm p = 0.011, "
            "n=3); the paper: +0.4 (dynamic better), which would need 11 pretraining seeds per arm at this noise; "
            f"pretraining hurt static and dynamic against the {CONTROL} control on this measure, so it cannot show "
            "the ablation's effect at this budget.") in lines
    significant = [c for c in [*a.control, *a.comparisons] if c.significant]
    assert len(significant) == 9
    for c in significant:  # each one said as found, in one bullet, and listed nowhere as not helped
        assert c.winner is not None and c.ours == f"{c.winner} better"
        if c.arm_a == CONTROL:
            subject = f"Pretraining {'helped' if c.winner == c.arm_b else 'hurt'} {c.arm_b}: "
        else:
            subject = f"{c.winner} better than {c.loser} on {c.measure.title} by "
        said = f"{c.measure.title} by {abs(c.estimate):.1f} ["
        assert len([line for line in lines if line.startswith(subject) and said in line]) == 1, c.name
        assert not any(f"{c.measure.title} {c.estimate:+.1f}, detectable" in line
                       or f"{c.measure.title} ({c.estimate:+.1f}, detectable" in line for line in lines), c.name


def _two_seeds(store: Store) -> Manifest:
    """The manifest with every unit of pretraining seed 2 not run: two pretraining seeds have values."""
    manifest = variant(store.manifest)
    for unit in manifest.records():
        if unit.pretrain_seed == 2:
            unit.update(status="missing", run_id=None, **({"score": None} if hasattr(unit, "score") else {}))
    return manifest


def test_two_pretraining_seeds_are_too_few_to_test(store: Store, tmp_path: Path) -> None:
    a = analyse(collect(_two_seeds(store), workdir=store.workdir), load_published())
    assert a.m == 0 and len(a.control) == 8 and len(a.comparisons) == 5
    for c in [*a.control, *a.comparisons]:
        assert (c.test.n, c.test.tested, c.significant, c.ours) == (2, False, False, "too few units")
        assert (c.outcome, c.winner, c.loser) == (Outcome.TOO_FEW_UNITS, None, None)
        assert math.isnan(c.adjusted_p) and c.needed is None
    lines = headlines(a)
    first = sum(c.comparable for c in a.comparisons)  # the sanity check follows the ablation's lines
    assert lines[first] == (f"Whether pretraining helped static is not tested: at most 2 pretraining seed(s) pair with "
                        f"the {CONTROL} control on any measure, and a test needs 3.")
    assert ("sst2 fine-tuned (dev accuracy): dynamic − static not tested (2 pretraining seed(s); at least 3 "
            "needed); the paper: +0.4 (dynamic better).") in lines
    assert not any("does not beat" in line or "did not beat" in line for line in lines)
    result = render_report(_two_seeds(store), tmp_path / "two", workdir=store.workdir, log_to_mlflow=False)
    text = result.markdown.read_text(encoding="utf-8")
    assert ("| sst2 fine-tuned (dev accuracy) | dynamic − static | +2.0 | — (n=2) | — | — | +0.4 | — | too few units "
            "| inconclusive |") in text
    assert _metrics(result)["comparisons"] == 0


def test_a_control_with_initialisations_of_its_own_is_compared_unpaired(store: Store, tmp_path: Path) -> None:
    """control_seeds: each arm against the control unpaired (Welch's statistic on min(n) - 1 df); between arms,
    still paired.

    BLiMP static (70, 74, 66) against the control (50, 52, 48): variances 16 and 4, so se = sqrt(16/3 + 4/3) on 2
    degrees of freedom; paired, the differences 20, 22, 18 gave se 2/sqrt(3)."""
    manifest = variant(store.manifest)
    manifest.control_seeds = [0, 1, 2]  # as a manifest of a plan whose control_seeds are not the pretraining seeds
    a = analyse(collect(manifest, workdir=store.workdir), load_published())
    blimp = next(c for c in a.control if c.key == "blimp" and c.arm_b == "static")
    assert (blimp.test.paired, blimp.test.n_a, blimp.test.n_b, blimp.estimate) == (False, 3, 3, 20.0)
    assert (blimp.test.se, blimp.test.df) == pytest.approx((math.sqrt(20 / 3), 2.0))
    assert blimp.test.p_value == pytest.approx(2 * stats.t.sf(20 / math.sqrt(20 / 3), 2))
    assert all(not c.test.paired for c in a.control) and all(c.test.paired for c in a.comparisons)
    text = render_report(manifest, tmp_path / "own", workdir=store.workdir, log_to_mlflow=False).markdown.read_text(
        encoding="utf-8")
    assert "| control initialisations | 0-2 (3; compared unpaired) |" in text
    assert "the control has 3 initialisations of its own (seeds 0-2), so Δ compares" in text


def test_tables_show_the_hand_worked_rows(report: ReportResult) -> None:
    text = report.markdown.read_text(encoding="utf-8")
    rows = [  # did pretraining help, the ablation's effect, every measure, BLiMP, scores, beside the paper, setup
        "| BLiMP macro accuracy (zero-shot) | static | 70.0 (n=3) | 50.0 (n=3) | +20.0 | [1.4, 38.6] | 0.017 | 23.6 "
        "| static better |",
        "| sst2 fine-tuned (dev accuracy) | dynamic − static | +2.0 | [1.1, 2.9] | 0.009 | 1.2 | +0.4 | 5 | "
        "dynamic better | agree |",
        "| BLiMP macro accuracy (zero-shot) | dynamic − static | +3.0 | [-6.3, 12.3] | 0.140 | 11.8 | — | — | "
        "no difference detected | no published value |",
        "| squad_v2 fine-tuned (dev F1) | dynamic − static | +0.0 | [-4.6, 4.6] | 1.000 | 5.9 | +0.4 | 26 | "
        "no difference detected | inconclusive |",
        "| validation MLM loss (fixed masks) | dynamic − static | -0.100 | [-0.564, 0.364] | 0.223 | 0.590 | — | — |",
        "| sst2 fine-tuned (dev accuracy) | static | 3 | 2 | 80.0 | [70.1, 89.9] | 3.9 | 1.4 | 50.9 | — | under "
        "Fine-tuning scores |",
        "| macro accuracy (3 paradigms) | 70.0 | 73.0 | 50.0 | 40.9 | 70.6 | 77.3 | 90.9 |",
        "| npi_licensing | 64.0 | 67.0 | 44.0 | 29.8 | 36.4 | 45.3 | 78.5 |",
        "| sst2: dev accuracy, ×100 (majority/trivial baseline 50.9) | static | 6 | 0 | 80.0 | 5.0 (77.5–82.5) | "
        "75.0–85.0 | 80.0 |",
        "| SST-2 (Acc) | dynamic − static | 92.5 | 92.9 | +0.4 | dynamic better | +2.0 [1.1, 2.9] | dynamic better | "
        "agree |",
        "| static | 78.3 / 68.0 | 92.5 / 80.0 |",
        "| no-pretraining | no pretraining: the shared base config's encoder, randomly initialised per seed | "
        "bert 1,000 | 2/64/2 | segment-pair | 8 | 300 |",
    ]
    for row in rows:
        assert row in text, row
    assert "| sst2 probe (mean features) | static | 3 | 3 | 67.0 |" in text  # three probe seeds per model
    # Beside the majority class, the bag of words (static-p0's run predates it: the others' value is shown).
    assert "| baseline | bag of words | runs |" in text
    assert "| sst2 probe (mean features) | static | 3 | 3 | 67.0 | [59.5, 74.5] | 2.9 | 1.0 | 50.9 | 77.8 |" in text
    assert "Published columns for tasks this ablation does not run: MNLI-m (Acc)." in text
    assert "logged as fractions and shown ×100" in text
    assert "![" in text and "(figures/scores.png)" in text and "(figures/differences.png)" in text


def test_the_introduction_describes_the_run_made_before_the_papers_setting(store: Store) -> None:
    """The run's own values come first (below the headline), from its resolved config and its runs (tokens seen:
    the fixture's run/tokens_seen, 153,600, over run/epochs 12), each arm's where the arms differ (the fixture's
    dynamic arm trains SOP); the experiment's description, which speaks of the paper's dupe_factor 10, follows and
    says whose setting it is."""
    manifest = variant(store.manifest)
    manifest.description = ("Static masking (BERT: masks fixed at data creation, dupe_factor 10) against dynamic "
                            "masking. Everything else is BERT-base's setup, as in RoBERTa Table 1.")
    for config in manifest.configs.values():
        config["masking"]["dupe_factor"] = 3  # the preset's, as the tiny preset resolves it
    text = to_markdown(report_blocks(analyse(collect(manifest, workdir=store.workdir), load_published()), {}))
    assert text.startswith("# Ablation report: masking\n\n")
    assert text.index("## Headline") < text.index("This run")  # the setup follows the headline
    assert (
        "\n\nThis run (preset tiny): 2 layers of hidden 64 and 2 heads; 300 steps of 8 sequences of up to 64 tokens "
        "(segment-pair, sentence objective nsp / segment-pair, sentence objective sop), 153.6K tokens seen per "
        "pretraining run (12.0 epochs); the first 50 "
        "documents; a bert tokenizer of 1,000 ids; masking split [0.8, 0.1, 0.1], dupe_factor 3 where static; 3 "
        "pretraining seed(s) per arm.\n\n"
        "The ablation in its paper's setting (experiments/masking.yaml; the values of this run are those above): "
        "Static masking (BERT: masks fixed at data creation, dupe_factor 10) against dynamic masking. Everything "
        "else is BERT-base's setup, as in RoBERTa Table 1.\n\n") in text
    budgets = variant(manifest)
    budgets.configs["dynamic-p0"]["training"]["max_steps"] = 1800
    budgets.configs["static-p0"]["training"]["max_steps"] = 900
    title = to_markdown(report_blocks(analyse(collect(budgets, workdir=store.workdir), load_published()), {}))
    assert "; 900 / 1800 steps of 8 sequences" in title  # in the arms' order, not sorted as text
    recipes = variant(manifest)  # bert-vs-roberta: the arms differ in tokenizer, format, objective and step
    for name, config in recipes.configs.items():
        if name.startswith("dynamic"):
            config["tokenizer"] = {"family": "roberta", "vocab_size": 2000}
            config["data"].update(input_format="full-sentences", sentence_objective="none")
            config["training"]["tokens_per_batch"] = 512
    title = to_markdown(report_blocks(analyse(collect(recipes, workdir=store.workdir), load_published()), {}))
    assert ("; 300 steps of 8 sequences of up to 64 tokens / 512 tokens in sequences of up to 64 tokens "
            "(segment-pair, sentence objective nsp / full-sentences, sentence objective none), ") in title
    assert "; a bert tokenizer of 1,000 ids / a roberta tokenizer of 2,000 ids; " in title


def test_every_number_links_to_its_run(report: ReportResult, store: Store) -> None:
    text = report.markdown.read_text(encoding="utf-8")
    units = [*store.manifest.finetune, *store.manifest.pretrain, *store.manifest.evaluations]
    assert len(units) == 36 + 6 + 18
    for unit in units:
        assert f"#/experiments/{store.experiment_id}/runs/{unit.run_id}" in text, unit.label
    probe = entry(store.manifest, "evaluations", label="static-p1", kind="probe").run_id
    assert f"[p1](http://127.0.0.1:8765/#/experiments/{store.experiment_id}/runs/{probe}?{MODE})" in text
    assert "run ids link to the MLflow UI at http://127.0.0.1:8765." in text
    assert "[p2s0×]" in text  # the collapsed control run is flagged where it is linked
    assert store.manifest.context.git_commit in text


def test_html_is_self_contained(report: ReportResult) -> None:
    page = report.html.read_text(encoding="utf-8")
    assert page.count('<img src="data:image/png;base64,') == len(report.figures)
    assert page.count("<table>") >= 8 and "<style>" in page
    assert "<script" not in page and "<link" not in page and 'src="http' not in page
    assert "dynamic better than static on sst2 fine-tuned (dev accuracy) by 2.0 [1.1, 2.9] points" in page
    assert '<h2 id="did-pretraining-help-at-this-budget">' in page and '<h2 id="beside-the-paper">' in page
    assert ">bag of words</th>" in page and ">77.8</td>" in page


def _css(page: str) -> dict[str, dict[str, str]]:
    """The declarations of the page's inline style per simple selector ('th', 'td.r'), later rules winning."""
    style = re.sub(r"/\*.*?\*/", "", page.split("<style>", 1)[1].split("</style>", 1)[0], flags=re.S)
    rules: dict[str, dict[str, str]] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", style):
        declared = dict(tuple(part.strip() for part in d.split(":", 1)) for d in body.split(";") if ":" in d)
        for selector in selectors.split(","):
            rules.setdefault(selector.strip(), {}).update(declared)
    return rules


def test_table_headers_and_cells_never_break_inside_words(report: ReportResult) -> None:
    """'detectabl e', 'collap sed', '2/1 28/ 2': overflow-wrap anywhere let a squeezed column split any word. Cells
    may break a word only when it alone overflows (break-word leaves a column's narrowest width at its longest word),
    headers at spaces only, and a hyphenated word in a table stays whole ('min–max', 'no-pretraining')."""
    page = report.html.read_text(encoding="utf-8")
    rules = _css(page)
    assert {k: rules["th"][k] for k in ("overflow-wrap", "word-break", "hyphens")} == {
        "overflow-wrap": "normal", "word-break": "keep-all", "hyphens": "none"}
    assert {k: rules["td"][k] for k in ("overflow-wrap", "hyphens")} == {"overflow-wrap": "break-word",
                                                                         "hyphens": "none"}
    assert not [(selector, d) for selector, declared in rules.items() for d in declared.items()
                if d in {("overflow-wrap", "anywhere"), ("word-break", "break-all"), ("hyphens", "auto")}]
    assert "<th>detectable Δ</th>" in page and "<th>collapsed</th>" in page and '<td class="l">2/64/2</td>' in page
    assert rules["th .word"] == rules["td .word"] == {"white-space": "nowrap"}
    assert '<th><span class="word">min–max</span></th>' in page
    assert f'<td class="L"><span class="word">{CONTROL}</span></td>' in page
    assert '<td class="L">sst2 probe (mean features)</td>' in page  # nothing hyphenated: no span


def test_probes_logged_without_a_bag_of_words_show_it_absent(store: Store) -> None:
    # Evaluations cached before the bag of words was logged: no probe/sst2/bow/* metric in any run.
    collected = collect(store.manifest, workdir=store.workdir)
    assert (collected.details["key"] == "probe/sst2/bow/accuracy").sum() == len(PRETRAIN_SEEDS) * 3 - 1
    collected.details = collected.details[~collected.details["key"].str.contains("/bow/")]
    a = analyse(collected, load_published())
    assert a.measure("probe/sst2").bow is None and a.measure("probe/sst2").baseline == pytest.approx(50.9)
    text = to_markdown(measures_section(a, RunLinks(collected)))
    assert "| sst2 probe (mean features) | static | 3 | 3 | 67.0 | [59.5, 74.5] | 2.9 | 1.0 | 50.9 | — |" in text


def test_plots_hold_every_point_long(report: ReportResult) -> None:
    plots = {p.name: pd.read_csv(p) for p in report.plots}
    scores = plots["scores.csv"]
    assert len(scores) == 3 * 3 * 2 * 2  # arms x pretraining seeds x tasks x fine-tuning seeds
    assert {"arm", "task", "pretrain_seed", "seed", "score", "collapsed", "run_id"} <= set(scores.columns)
    static = scores[(scores["arm"] == "static") & (scores["task"] == "sst2")].sort_values(["pretrain_seed", "seed"])
    assert static["score"].tolist() == pytest.approx([79.0, 81.0, 83.0, 85.0, 75.0, 77.0])
    sst2 = plots["scores_sst2.csv"]  # one task's runs, one row each: what dvc.yaml's seeds plot reads
    assert list(sst2.columns) == ["arm", "pretrain_seed", "seed", "score"] and len(sst2) == 3 * 3 * 2
    assert list(dict.fromkeys(sst2["arm"])) == ["static", "dynamic", CONTROL]  # the report's order
    static = sst2[sst2["arm"] == "static"]
    assert list(zip(static["pretrain_seed"], static["seed"], strict=True)) == [(0, 0), (0, 1), (1, 0), (1, 1),
                                                                               (2, 0), (2, 1)]
    assert static["score"].tolist() == pytest.approx([79.0, 81.0, 83.0, 85.0, 75.0, 77.0])
    ppl = plots["pretrain_val_perplexity.csv"]  # arm, step, mean over pretraining seeds
    assert list(ppl.columns) == ["arm", "step", "value"] and list(dict.fromkeys(ppl["arm"])) == ["static", "dynamic"]
    for arm, rows in ppl.groupby("arm"):
        assert rows["step"].is_monotonic_increasing and rows["step"].is_unique, arm
    last = ppl[ppl["arm"] == "dynamic"].iloc[-1]
    assert last["value"] == pytest.approx(np.mean(np.exp(MLM_LOSS["dynamic"])), rel=1e-5)
    differences = plots["differences.csv"]
    assert set(differences["comparison"]) == {"dynamic − static", f"static − {CONTROL}", f"dynamic − {CONTROL}"}
    assert len(differences) == (M - 1) * 3  # every comparison but MLM loss, one row per pretraining seed
    blimp = differences[(differences["comparison"] == "dynamic − static") & (differences["measure"] == "blimp")]
    assert blimp["difference"].tolist() == pytest.approx([3.0, 2.0, 4.0])


def test_figures_label_their_axes_name_their_arms_and_draw_the_mlm_loss(analysis: Analysis) -> None:
    """The curves: a y label on the loss panel, a legend of arms on each panel (the perplexity panel had none). The
    differences: validation MLM loss, the one effect the masking run found, in a panel of its own in nats: dynamic
    - static = -0.10, -0.15, -0.05 per pretraining seed (the fixture's MLM_LOSS), mean -0.10."""
    colours = arm_colors(analysis.collected.arms, analysis.collected.control)
    curves = curves_figure(analysis.collected.history, colours)
    assert [(ax.get_title(), ax.get_ylabel(), ax.get_xlabel()) for ax in curves.axes] == [
        ("training MLM loss", "MLM loss (nats per token)", "tokens seen"),
        ("validation perplexity", "perplexity", "tokens seen")]  # 17 to 55: no log scale
    for ax in curves.axes:
        assert [t.get_text() for t in ax.get_legend().get_texts()] == list(ARMS), ax.get_title()
        assert [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")] == list(ARMS)
    differences = differences_figure(analysis)
    between, mlm, control = differences.axes
    assert [ax.get_title() for ax in differences.axes] == ["between arms", "between arms: validation MLM loss",
                                                           "against no pretraining"]
    assert [t.get_text() for t in mlm.get_yticklabels()] == ["validation MLM loss (fixed masks): dynamic − static"]
    assert mlm.get_xlabel() == "difference over pretraining seeds (nats per token; b − a)"
    assert between.get_xlabel() == control.get_xlabel() == "difference over pretraining seeds (points; b − a)"
    assert mlm.collections[0].get_offsets()[:, 0].tolist() == pytest.approx([-0.10, -0.15, -0.05])
    assert [line.get_xdata()[0] for line in mlm.get_lines() if line.get_marker() == "o"] == pytest.approx([-0.10])
    assert len(between.get_yticklabels()) == 4 and len(control.get_yticklabels()) == 8  # every other comparison


def test_dvc_metrics_are_one_file_per_arm_comparison_keyed_by_measure(report: ReportResult, store: Store) -> None:
    """DVC's metrics are what `dvc exp show` puts in a column each: the arm-vs-arm differences, one file per
    comparison, one short key per measure, rounded as the report prints them (nats 3, points 1)."""
    folder = store.workdir / "reports" / "masking" / "metrics"
    rows = {p.relative_to(folder).as_posix(): json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(folder.rglob("*.json"))}
    assert sorted(rows) == sorted(p.relative_to(folder).as_posix() for p in report.dvc_metrics)
    assert list(rows) == ["dynamic-minus-static.json"]  # the control's comparisons are the report's
    row = rows["dynamic-minus-static.json"]
    assert list(row) == ["blimp", "probe_sst2", "finetune_sst2", "finetune_squad_v2", "mlm"]  # the report's order
    expected = _expected()
    for key, value in row.items():
        assert value == round(expected[("static", "dynamic", key)]["mean"], 3 if key == "mlm" else 1), key
    assert row["finetune_sst2"] == 2.0


def test_report_is_logged_to_the_parent_run(report: ReportResult, store: Store, tmp_path: Path) -> None:
    client, run_id = store.client, store.parent_run_id
    logged = {a.path for a in client.list_artifacts(run_id, "report")}
    assert {"report/report.html", "report/report.md", "report/metrics.json", "report/figures",
            "report/plots", "report/metrics"} <= logged
    assert {a.path for a in client.list_artifacts(run_id, "report/figures")} == {
        f"report/figures/{p.name}" for p in report.figures}
    tags = client.get_run(run_id).data.tags
    assert tags["bvr.report"] == str(report.html)
    # The description is the headline in brief, a line per question: short enough for the UI to show whole. The
    # effects view holds a row per comparison, with the report's simultaneous intervals.
    assert f"| {report.level} CI |" in report.markdown.read_text() and report.level == "99.62%"
    assert tags[MLFLOW_RUN_NOTE].split("\n") == [
        "- **dynamic − static**: sst2 fine-tuned +2.0 [+1.1, +2.9] points, dynamic better; BLiMP +3.0, sst2 probe "
        "+1.0, squad_v2 fine-tuned +0.0, validation MLM loss -0.100: no difference detected.",
        "- **pretraining − no-pretraining**: helped BLiMP (static +20.0, dynamic +23.0), sst2 probe (static +15.0, "
        "dynamic +16.0), sst2 fine-tuned (static +25.0, dynamic +27.0), squad_v2 fine-tuned (static +18.0, dynamic "
        "+18.0) (points)."]
    effects = client.search_runs([store.experiment_id], "tags.`bvr.stage` = 'effect'", order_by=["tags.`bvr.order`"])
    assert len(effects) == len(COMPARISONS) and {r.data.tags["mlflow.parentRunId"] for r in effects} == {run_id}
    sst2 = next(r for r in effects if r.info.run_name == "dynamic − static · sst2 fine-tuned")
    metrics = dict(sst2.data.metrics)
    assert metrics.pop("detectable") > 0 and metrics == {"difference": 2.0, "low": 1.1, "high": 2.9}
    assert {k: sst2.data.tags[k] for k in ("bvr.difference", "bvr.verdict", "bvr.interval")} == {
        "bvr.difference": "+2.0 [+1.1, +2.9] points", "bvr.verdict": "dynamic better (Holm p = 0.009)",
        "bvr.interval": "99.62% simultaneous"}
    mlm = next(r for r in effects if r.info.run_name == "dynamic − static · validation MLM loss")
    assert mlm.data.metrics["difference"] == -0.1 and mlm.data.tags["bvr.difference"].endswith(" nats")
    assert re.fullmatch(r"no difference detected \(Holm p = 1\.000\)|no difference detected \(Holm p = 0\.\d{3}\)",
                        mlm.data.tags["bvr.verdict"])
    # The ablation's pairs first, then each arm against the control, as the report orders them.
    names = [r.info.run_name for r in effects]
    assert all(" − no-pretraining" not in n for n in names[:5]) and all(" − no-pretraining" in n for n in names[5:])
    assert "report/effects.png" in {a.path for a in client.list_artifacts(run_id, "report")}
    # The answer is on the parent run as metrics: dynamic - static on BLiMP is 3, 2, 4 points (mean 3) and every
    # pretrained arm beats the control by ~20 points, rounded as the report prints them (points to 1 decimal, nats
    # to 3); intervals and Holm p-values are in report/effects.csv, not 40 more single-value metrics.
    data = client.get_run(run_id).data
    metrics = data.metrics
    assert metrics["effect/blimp/dynamic-vs-static"] == pytest.approx(3.0)
    assert metrics["effect/blimp/static-vs-no-pretraining"] == pytest.approx(20.0)
    assert metrics["effect/finetune/sst2/dynamic-vs-static"] == pytest.approx(2.0)
    assert metrics["effect/mlm/dynamic-vs-static"] == -0.1
    assert all(v == round(v, 3 if "/mlm/" in k else 1) for k, v in metrics.items())
    assert not [k for k in metrics if k.endswith(("/low", "/high", "/p_holm"))]
    effects = pd.read_csv(client.download_artifacts(run_id, "report/effects.csv", str(tmp_path)))
    row = effects[(effects.measure == "blimp") & (effects.b == "dynamic") & (effects.a == "static")].iloc[0]
    assert row.b_minus_a == pytest.approx(3.0) and row.low < 3.0 < row.high and row.n == 3
    control = effects[(effects.measure == "blimp") & (effects.a == "no-pretraining")]
    assert (control.p_holm < 0.05).all()
    # Its parameters say what was compared.
    params = data.params
    assert params["ablation"] == "masking" and params["arms"] == ", ".join(store.manifest.arms)
    assert params["arm.dynamic"] == "masking.mode=dynamic" and params["plan_hash"] == store.manifest.plan_hash


# ---------------------------------------------------------------------------------------------------------------
# Partial and broken inputs


def _partial(store: Store) -> Manifest:
    """The manifest with a run id the store lacks, a unit not run, a copied score that differs from its run's, a
    failed pretraining, an evaluation not run, and a parent run the store lacks."""
    manifest = variant(store.manifest)
    entry(manifest, "finetune", label="static-p0", task="sst2", seed=0).update(run_id="0" * 32)
    entry(manifest, "finetune", label="static-p0", task="squad_v2", seed=1).update(status="missing", run_id=None,
                                                                                   score=None)
    entry(manifest, "finetune", label="dynamic-p1", task="sst2", seed=1).update(score=0.99)  # the run has 0.871
    entry(manifest, "pretrain", label="dynamic-p1").update(status="failed", run_id=None,
                                                           error="loss is NaN at step 120")
    entry(manifest, "evaluations", label="static-p1", kind="probe").update(status="missing", run_id=None, score=None)
    manifest.parent_run_id = "f" * 32
    return manifest


def test_partial_report_lists_what_is_missing(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "masking"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "stale.png").write_bytes(PNG)
    (out / "plots").mkdir()
    (out / "plots" / "stale.csv").write_text("x,y\n", encoding="utf-8")
    (out / "metrics" / "gone").mkdir(parents=True)
    (out / "metrics" / "gone" / "sst2.json").write_text('{"median": 1}\n', encoding="utf-8")
    result = render_report(_partial(store), out, workdir=store.workdir, log_to_mlflow=False)
    assert not result.complete
    missing = "\n".join(result.missing)
    assert f"static-p0/finetune/sst2/seed0: run {'0' * 32} is not in the MLflow experiment" in missing
    assert "static-p0/finetune/squad_v2/seed1: status 'missing' in the manifest" in missing
    assert "dynamic-p1/finetune/sst2/seed1: the manifest's score 0.99 differs" in missing
    assert "dynamic-p1/pretrain: status 'failed' in the manifest: loss is NaN at step 120" in missing
    assert "static-p1/probe/sst2: status 'missing' in the manifest" in missing
    assert f"parent run {'f' * 32}" in missing
    assert len(result.missing) == 6
    metrics = _metrics(result)
    assert (metrics["complete"], metrics["missing"]) == (False, 6)
    assert metrics["scores"]["static"]["sst2"]["n"] == 5
    assert metrics["scores"]["static"]["sst2"]["median"] == pytest.approx(81.0)  # of 81, 83, 85, 75, 77
    assert metrics["measures"]["finetune_sst2"]["static"]["mean"] == pytest.approx((81 + 84 + 76) / 3)
    assert metrics["measures"]["finetune_sst2"]["dynamic"]["mean"] == pytest.approx(82.0)  # the run's, not 0.99
    assert metrics["measures"]["probe_sst2"]["static"]["n"] == 2 and metrics["measures"]["mlm"]["dynamic"]["n"] == 2
    probe = metrics["differences"]["dynamic_minus_static"]["probe_sst2"]
    assert (probe["n"], probe["p"], probe["holm_p"], probe["significant"]) == (2, None, None, False)
    assert metrics["comparisons"] == M - 3  # static's probe twice and MLM loss lost a pretraining seed
    text = result.markdown.read_text(encoding="utf-8")
    assert "Partial: 6 planned item(s)" in text and "## Missing" in text
    assert "| pretrain | 5 / 6 | 1 | 0 | dynamic-p1 |" in text  # the progress table of `bvr status`
    assert ("- sst2 probe (mean features): dynamic − static not tested (2 pretraining seed(s); at least 3 needed)."
            in text)
    assert not (out / "figures" / "stale.png").exists() and not (out / "plots" / "stale.csv").exists()
    assert not (out / "metrics" / "gone").exists()
    row = json.loads((out / "metrics" / "dynamic-minus-static.json").read_text(encoding="utf-8"))
    assert row["probe_sst2"] == pytest.approx(2.0)  # (1 + 3) / 2 over the seeds both have, though not tested


def test_an_ablation_with_no_runs_yet_renders(store: Store, tmp_path: Path) -> None:
    manifest = variant(store.manifest)
    manifest.experiment, manifest.parent_run_id = "never-run", None
    result = render_report(manifest, tmp_path / "empty", workdir=store.workdir)  # no parent run: nothing logged
    assert not result.complete and result.figures == []
    assert "MLflow experiment 'never-run' is not in" in result.missing[0]
    units = len(manifest.finetune) + len(manifest.pretrain) + len(manifest.evaluations)
    assert len(result.missing) == 1 + units
    text = result.markdown.read_text(encoding="utf-8")
    assert "No finished fine-tuning run was found." in text and "No comparison yet" in text
    metrics = _metrics(result)
    assert (metrics["scores"], metrics["measures"], metrics["differences"], metrics["comparisons"]) == ({}, {}, {}, 0)
    assert pd.read_csv(result.out_dir / "plots" / "scores.csv").empty
    assert result.dvc_metrics == [] and (result.out_dir / "metrics").is_dir()  # DVC finds the folder, empty


def test_seeds_not_run_are_listed_once_per_model_and_task(store: Store) -> None:
    manifest = variant(store.manifest)
    for unit in manifest.finetune:
        if unit.label == f"{CONTROL}-p0" and unit.task == "sst2":
            unit.update(status="missing", run_id=None, score=None)
    collected = collect(manifest, workdir=store.workdir)
    assert collected.missing == [f"{CONTROL}-p0/finetune/sst2 seeds 0, 1: status 'missing' in the manifest"]
    assert len(collected.finetune) == 34 and len(collected.evaluations) == 18 and len(collected.pretrain) == 6
    assert sorted(collected.evaluations["label"]) == sorted(store.manifest.labels * 2)


def test_runs_report_their_own_sentence_objective(store: Store) -> None:
    """Each pretraining run's data.sentence_objective is read from its logged params (static-p1's is none)."""
    pretrain = collect(store.manifest, workdir=store.workdir).pretrain
    objectives = {(r.arm, r.pretrain_seed): r.objective for r in
                  pretrain.rename(columns={"data.sentence_objective": "objective"}).itertuples()}
    assert objectives == {("static", 0): "nsp", ("static", 1): "none", ("static", 2): "nsp",
                          ("dynamic", 0): "sop", ("dynamic", 1): "sop", ("dynamic", 2): "sop"}


@pytest.mark.parametrize(("change", "message"), [
    ({"version": 1}, "manifest version 1 is not 2"),
    ({"arms": []}, "'arms' must be a non-empty list"),
    ({"finetune": [{"arm": "static"}]}, "finetune[0]: unit lacks task, seed, status"),
    ({"evaluations": [{"arm": "static", "status": "done"}]}, "evaluations[0]: unit lacks kind"),
    ({"evaluations": {"arm": "static"}}, "'evaluations' must be a list of units"),
])
def test_a_malformed_manifest_is_a_user_error(store: Store, tmp_path: Path, change: dict, message: str) -> None:
    data = {**store.manifest.to_dict(), **change}
    with pytest.raises(BvrError, match="manifest of ablation 'masking'") as err:
        render_report(Manifest.from_dict(data), tmp_path / "bad", workdir=store.workdir)
    assert message in str(err.value)
    assert not (tmp_path / "bad").exists()


def test_vocab_report_draws_parameter_counts_and_quotes_the_paper(store: Store, tmp_path: Path) -> None:
    manifest = variant(store.manifest, "vocab")
    manifest.published, manifest.parent_run_id = "vocab", None
    result = render_report(manifest, tmp_path / "vocab", workdir=store.workdir)
    assert "parameters.png" in {p.name for p in result.figures}
    text = result.markdown.read_text(encoding="utf-8")
    assert "RoBERTa (Liu et al., 2019), Section 4.4" in text
    assert "byte-level BPE, 50K: only slight differences" in text  # a finding stated in words, quoted


def _pretrained_only(families: tuple[str, str], first: tuple[float, ...] = (4.0, 4.1, 3.9),
                     formats: tuple[str, str] = ("segment-pair", "segment-pair")) -> Collected:
    """A batch-size ablation pretrained at three seeds per arm and not evaluated yet, built without MLflow.

    Validation MLM loss: 256 at ``first`` (4.0, 4.1, 3.9) and 2k at 3.7 each, so 2k - 256 = -0.3, -0.4, -0.2: mean
    -0.3, sd 0.1, t = -3 sqrt(3), p = 1 - sqrt(27/29) = 0.0351, the only test of the report; 95% interval -0.3 ±
    4.303 * 0.1 / sqrt(3) = [-0.548, -0.052].
    """
    losses = {"256": first, "2k": (3.7, 3.7, 3.7)}
    rows = [{"arm": arm, "pretrain_seed": seed, "run_id": f"run-{arm}-{seed}", "val/mlm_loss": loss,
             "val/perplexity": math.exp(loss), "tokenizer.family": family, "tokenizer.vocab_size": "30000",
             "data.input_format": fmt}
            for (arm, values), family, fmt in zip(losses.items(), families, formats, strict=True)
            for seed, loss in zip(PRETRAIN_SEEDS, values, strict=True)]
    manifest = Manifest(ablation="batch-size", arms=["256", "2k"], control_arm=None, published="batch-size", tasks=[])
    return Collected(manifest, "batch-size", None, "sqlite:///unused.db", pd.DataFrame(columns=FINETUNE_COLUMNS),
                     pd.DataFrame(rows, columns=PRETRAIN_COLUMNS), pd.DataFrame(columns=HISTORY_COLUMNS), [], None)


def test_mlm_loss_is_compared_only_between_arms_validated_on_the_same_sequences() -> None:
    same = analyse(_pretrained_only(("bert", "bert")), load_published())
    [c] = same.comparisons
    assert (c.key, c.comparable, c.test.n, same.m) == ("mlm", True, 3, 1)
    assert (c.estimate, c.test.p_value, c.adjusted_p) == pytest.approx((-0.3, 1 - math.sqrt(27 / 29),
                                                                         1 - math.sqrt(27 / 29)))
    assert (c.interval.ci_low, c.interval.ci_high) == pytest.approx((-0.3 - 0.24841, -0.3 + 0.24841), abs=1e-5)
    assert (c.ours, c.published, c.agreement) == ("2k better", None, "no published value")  # lower loss is better
    assert (c.outcome, c.winner, c.loser) == (Outcome.B_BETTER, "2k", "256")
    assert headlines(same) == ["2k better than 256 on validation MLM loss (fixed masks) by 0.300 [0.052, 0.548] nats "
                               "(Holm p = 0.035, n=3)."]
    mixed = analyse(_pretrained_only(("bert", "roberta")), load_published())
    [c] = mixed.comparisons
    assert (c.comparable, c.significant, c.ours, c.agreement, mixed.m) == (False, False, "not comparable",
                                                                         "no published value", 0)
    assert c.outcome is Outcome.NOT_COMPARABLE and c.winner is None
    assert any("different tokenizers" in note for note in mixed.notes)
    assert headlines(mixed) == []  # nothing to say about a loss counted in different units
    # The nsp ablation: one tokenizer, but each arm validated on its own format's sequences (sentence pairs are
    # short): its 'full-sentences better on validation MLM loss' compared two validation sets.
    formats = analyse(_pretrained_only(("bert", "bert"), formats=("segment-pair", "full-sentences")), load_published())
    [c] = formats.comparisons
    assert (c.comparable, c.outcome, formats.m, headlines(formats)) == (False, Outcome.NOT_COMPARABLE, 0, [])
    assert any("input formats are not compared" in note for note in formats.notes)


def test_arms_that_gave_the_same_numbers_did_not_differ_rather_than_showed_no_difference() -> None:
    """Every seed of 256 gives 2k's loss to the last digit (a static arm that never reused a mask is the dynamic arm):
    the report says the arms did not differ at this budget, never that no difference was detected."""
    same = analyse(_pretrained_only(("bert", "bert"), first=(3.7, 3.7, 3.7)), load_published())
    [c] = same.comparisons
    assert c.identical and c.outcome is Outcome.SAME and c.ours == "the arms did not differ at this budget"
    assert (c.winner, c.loser, c.significant) == (None, None, False)
    assert headlines(same) == ["validation MLM loss (fixed masks): the arms did not differ at this budget: each of 3 "
                               "pretraining seeds of 2k gave 256's value to the last digit, so this budget cannot "
                               "answer the question."]
    assert not any("no difference detected" in line for line in headlines(same))
    close = analyse(_pretrained_only(("bert", "bert"), first=(3.7, 3.7, 3.7000001)), load_published())
    assert not close.comparisons[0].identical  # a last digit apart is a measurement


def test_validation_mlm_loss_reads_the_same_in_every_table() -> None:
    """The Pretraining table gave the median over pretraining seeds, 'Every measure' the mean (7.330 against 7.328
    on the masking run). 256's losses 4.0, 4.3, 3.95 have median 4.000 and mean 12.25 / 3 = 4.083; both tables now
    print the mean, and its perplexity is the mean of e^4.0, e^4.3, e^3.95 = (54.598 + 73.700 + 51.936) / 3 =
    60.08."""
    collected = _pretrained_only(("bert", "bert"), first=(4.0, 4.3, 3.95))
    a = analyse(collected, load_published())
    links = RunLinks(collected)
    every = to_markdown(measures_section(a, links))
    pretraining = to_markdown(pretraining_section(a, links, {}))
    assert "| validation MLM loss (fixed masks) | 256 | 3 | 1 | 4.083 |" in every
    assert "| 256 | — | 4.083 | 60.08 | — | — |" in pretraining
    assert "| 2k | — | 3.700 | 40.45 | — | — |" in pretraining  # e^3.7 = 40.447
    assert ("Losses, perplexity and accuracies: means over the arm's pretraining seeds (validation MLM loss is the "
            "mean of 'Every measure, per arm'); tokens / s, wall time and last step: medians over them.") in pretraining


# ---------------------------------------------------------------------------------------------------------------
# The summary across ablations


def test_summary_lists_each_ablations_headlines(report: ReportResult, store: Store) -> None:
    other = _partial(store)
    other.ablation = "masking-rerun"  # the same runs under another name, with units missing, never rendered
    index = render_summary([store.manifest, other], store.workdir / "reports", workdir=store.workdir)
    assert index == store.workdir / "reports" / "index.html"
    text = (index.parent / "index.md").read_text(encoding="utf-8")
    assert "| masking | complete | static, dynamic, no-pretraining | 2 |" in text
    assert "| masking-rerun | partial (6 missing) |" in text
    assert "[report](masking/report.html)" in text and "not rendered yet" in text
    assert "2 published comparison(s): 1 agree, 1 inconclusive" in text
    masking, rerun = text.split("\n## masking\n", 1)[1].split("\n## masking-rerun\n", 1)
    assert "- Pretraining helped static: better than the no-pretraining control on BLiMP" in masking
    assert "- dynamic better than static on sst2 fine-tuned (dev accuracy) by 2.0 [1.1, 2.9] points" in masking
    # The rerun lacks static-p1's probe, so dynamic - static on the probe has two pretraining seeds.
    assert "- sst2 probe (mean features): dynamic − static not tested (2 pretraining seed(s)" in rerun
    assert "Holm-adjusted within each report" in text
    page = index.read_text(encoding="utf-8")
    assert '<a href="masking/report.html">report</a>' in page and "<style>" in page


def test_the_published_blimp_models_are_found_where_the_data_moved(tmp_path: Path, monkeypatch) -> None:
    """The recorded data folder first; where it no longer holds the file (the data moved), ``BVR_DATA_DIR``'s."""
    from bvr.report.results import _published_blimp

    gone = str(tmp_path / "moved-away")
    monkeypatch.delenv("BVR_DATA_DIR", raising=False)
    assert _published_blimp(gone) == {}
    monkeypatch.setenv("BVR_DATA_DIR", str(BLIMP_DATA))
    moved = _published_blimp(gone, ["only_npi_scope"])
    assert moved["GPT-2"].paradigms == 1 and moved == _published_blimp(str(BLIMP_DATA), ["only_npi_scope"])
    monkeypatch.setenv("BVR_DATA_DIR", gone)  # the recorded folder wins where it holds the file
    assert _published_blimp(str(BLIMP_DATA))["GPT-2"].paradigms == 3


def test_reports_import_no_training_code() -> None:
    """Rendering reads MLflow and files only: neither torch nor Lightning is imported (reports sit above training),
    not even to read the published BLiMP models' accuracies (:mod:`bvr.evaluation.blimp.published`, torch-free).
    The model's config (:mod:`bvr.model.encoder_config`, plain data the configuration reads) may load; no module
    of the model's code does."""
    code = ("import sys, bvr.report.render, bvr.report.collect, bvr.report.results as s; "
            f"assert s._published_blimp({str(BLIMP_DATA)!r})['GPT-2']; "
            "print(sorted(m for m in sys.modules if m in ('torch', 'lightning', 'bvr.pretraining', "
            "'bvr.evaluation.blimp.pll') "
            "or m.startswith('bvr.model.') and m != 'bvr.model.encoder_config'))")
    root = Path(__file__).resolve().parents[1]  # this checkout's bvr, whatever the current directory
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert done.stdout.strip() == "[]"


_TWO_TABLES = """\
tables:
  - ablation: masking
    source: "Paper A, Table 1"
    setting: "setting A"
    columns:
      - {task: squad_v2, metric: dev/f1, higher_is_better: true, label: "SQuAD 2.0 (F1)"}
    arms:
      static: {label: "static", values: [70.0]}
      dynamic: {label: "dynamic", values: [71.5]}
  - ablation: masking
    source: "Paper B, Table 9"
    setting: "setting B"
    columns:
      - {task: probe/sst2, metric: dev/accuracy, higher_is_better: true, label: "SST-2 feature-based"}
      - {task: squad_v2, metric: dev/f1, higher_is_better: true, label: "SQuAD 2.0 (F1)"}
    arms:
      static: {label: "static", values: [80.0, 60.0]}
      dynamic: {label: "dynamic", values: [79.0, 65.0]}
"""


def test_published_section_reads_each_table_and_feature_based_columns(store: Store, tmp_path: Path):
    # Two tables inform one ablation: each gets its own paragraph and rows, an effect is read inside the first
    # table holding both arms (SQuAD: 71.5 - 70.0 from Table 1, not 65 - 60 from Table 9), and a probe column
    # ('probe/sst2') is set beside our SST-2 probe although we log the probe under another metric name.
    path = tmp_path / "published.yaml"
    path.write_text(_TWO_TABLES, encoding="utf-8")
    a = analyse(collect(store.manifest, workdir=store.workdir), load_published(path))
    by_key = {c.measure.key: c for c in a.comparisons}
    assert by_key["finetune/squad_v2"].published == pytest.approx(1.5)
    assert by_key["probe/sst2"].published == pytest.approx(-1.0)
    blocks = published_section(a)
    text = to_markdown(blocks)
    assert "Paper A, Table 1: setting A." in text and "Paper B, Table 9: setting B." in text
    tables = [b for b in blocks if isinstance(b, Table)]
    direction_a, beside_a, direction_b, beside_b = tables
    assert [row[:5] for row in direction_a.rows] == [["SQuAD 2.0 (F1)", "dynamic − static", "70.0", "71.5", "+1.5"]]
    rows_b = {row[0]: row[:5] for row in direction_b.rows}
    assert rows_b["SST-2 feature-based"] == ["SST-2 feature-based", "dynamic − static", "80.0", "79.0", "-1.0"]
    assert rows_b["SQuAD 2.0 (F1)"][4] == "+5.0"  # Table 9's own difference, printed with Table 9
    # Ours: the median over every (pretraining seed, probe seed) of dynamic's probe, 68 +- 1, 69 +- 1, 67 +- 1.
    assert beside_b.header[1] == "SST-2 feature-based paper / ours"
    assert dict((row[0], row[1]) for row in beside_b.rows) == {"static": "80.0 / 67.0", "dynamic": "79.0 / 68.0"}


def test_run_ids_stay_plain_without_a_known_ui(store: Store, tmp_path: Path, monkeypatch) -> None:
    # A SQLite store is shown by whatever `mlflow ui` a user starts: with no --ui-url and no BVR_MLFLOW_UI the
    # report guesses no address, keeps the ids as text and says how to get links.
    monkeypatch.delenv("BVR_MLFLOW_UI", raising=False)
    result = render_report(store.manifest, tmp_path / "plain", workdir=store.workdir, log_to_mlflow=False)
    text = result.markdown.read_text(encoding="utf-8")
    assert "](http://" not in text and "127.0.0.1" not in text
    # The saved views are given as the path after the address `mlflow ui` prints, in its model-training mode.
    assert (f"followed by /#/experiments/{store.experiment_id}/runs?viewStateShareKey=bvr-effects&{MODE} (effects "
            f"between arms), /#/experiments/{store.experiment_id}/runs?viewStateShareKey=bvr-scores&{MODE} (scores by "
            "arm)" in text)
    assert "render again with `bvr report NAME --ui-url ADDRESS`" in text
    probe = entry(store.manifest, "evaluations", label="static-p1", kind="probe").run_id
    monkeypatch.setenv("BVR_MLFLOW_UI", "http://mlflow.lab.example:7000")
    linked = render_report(store.manifest, tmp_path / "env", workdir=store.workdir, log_to_mlflow=False)
    assert f"(http://mlflow.lab.example:7000/#/experiments/{store.experiment_id}/runs/{probe}?{MODE})" in (
        linked.markdown.read_text(encoding="utf-8"))


def test_ui_address_is_checked(store: Store, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("BVR_MLFLOW_UI", raising=False)
    with pytest.raises(BvrError, match="'127.0.0.1:5000' is not the address of an MLflow UI") as err:
        render_report(store.manifest, tmp_path / "bad", workdir=store.workdir, log_to_mlflow=False,
                      ui_url="127.0.0.1:5000")
    assert err.value.where == "--ui-url" and "http://127.0.0.1:5000" in err.value.hint
    assert not (tmp_path / "bad").exists()  # refused before anything is written
    assert ui_base("sqlite:///mlflow.db") is None
    assert ui_base("http://tracking:5000/", None) == "http://tracking:5000"  # a tracking server serves its own UI


def test_a_table_of_tasks_not_run_still_shows_the_papers_values(store: Store, tmp_path: Path):
    # Table A of _TWO_TABLES with its SQuAD column renamed to a task this ablation never ran (MNLI).
    path = tmp_path / "published.yaml"
    only_a = _TWO_TABLES.split("  - ablation: masking\n    source: \"Paper B")[0]
    path.write_text(only_a.replace("{task: squad_v2, metric: dev/f1", "{task: mnli, metric: dev_matched/accuracy"),
                    encoding="utf-8")
    blocks = published_section(analyse(collect(store.manifest, workdir=store.workdir), load_published(path)))
    (beside,) = [b for b in blocks if isinstance(b, Table)]
    assert [list(row) for row in beside.rows] == [["static", "70.0 / —"], ["dynamic", "71.5 / —"]]
    assert beside.caption == "The paper's values; none of these tasks runs at this preset ('—')."


def test_mlflow_opens_on_the_answer(report: ReportResult, store: Store) -> None:
    """The scores view's rows are the arms' means per measure as the report rounds them (the validation MLM loss
    among them); the pretraining runs are drawn in the report figures' colours; the curves' y axes fit the data."""
    client, experiment_id = store.client, store.experiment_id
    scores = saved_view(client.get_experiment(experiment_id).tags, "bvr-scores")
    rows = {r.info.run_name: r.data.metrics for r in client.search_runs([experiment_id], scores["searchFilter"])}
    assert len(rows) == 14 and rows["dynamic · BLiMP"] == {"mean": 73.0, "ci95_low": 65.5, "ci95_high": 80.5, "n": 3.0}
    assert rows["static · validation MLM loss"] == {"mean": 3.0, "ci95_low": 2.752, "ci95_high": 3.248, "n": 3.0}
    colours = arm_colors(store.manifest.arms, store.manifest.control_arm)
    for unit in store.manifest.pretrain:
        assert client.get_run(unit.run_id).data.tags["mlflow.runColor"] == colours[unit.arm]
    curves = saved_view(client.get_experiment(experiment_id).tags, "bvr-curves")
    ranges = {c["metricKey"]: c["range"] for c in curves["compareRunCharts"]}
    assert ranges == {"val/mlm_loss": {"yMin": 2.7875, "yMax": 4.1625},  # 2.85 to 4.1, and 5% of that on each side
                      "train/mlm_loss": {"yMin": 3.749, "yMax": 7.071}}


def test_an_artifact_folder_that_cannot_be_written_is_named(store: Store, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that records its artifacts where they cannot be written (a copied or moved store keeps the old path):
    the error names that folder, not the output folder."""
    import collections
    import sqlite3

    from mlflow.tracking._tracking_service import utils

    # MLflow keeps each run's artifact folder by run id for the process: the report fixture's is the original one.
    monkeypatch.setattr(utils, "_artifact_repos_cache", collections.OrderedDict())
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with sqlite3.connect(store.workdir / "mlflow.db") as source, sqlite3.connect(tmp_path / "mlflow.db") as db:
        source.backup(db)  # the store as it is, whatever of it is still in SQLite's journal
        db.execute("UPDATE runs SET artifact_uri = ? WHERE run_uuid = ?",
                   (f"{blocked.as_uri()}/artifacts", store.parent_run_id))
    with pytest.raises(BvrError) as err:
        render_report(store.manifest, tmp_path / "out", workdir=tmp_path)
    assert err.value.message.startswith(f"cannot write the report into the MLflow store's artifact folder "
                                        f"{blocked.as_uri()}/artifacts: ")
    assert "--output-dir" not in str(err.value) and "a copied or moved store keeps the old path" in err.value.hint
    assert (tmp_path / "out" / "report.html").is_file()  # the files are written first


def test_a_fine_tuning_grid_shows_each_models_chosen_point_and_the_selection_curve(store: Store,
                                                                                   tmp_path: Path) -> None:
    """Selection scores on sst2: at lr 1e-4 every seed scores 0.60; at 1e-3, 0.70 for pretraining seeds 0 and 1 and
    0.50 for seed 2 (whose model keeps 1e-4). An arm's median at 1e-3 over its 6 seeds is then 0.70 (70.0 points),
    at 1e-4 0.60."""
    manifest = variant(store.manifest)
    for record in manifest.finetune:
        if record.task != "sst2":
            continue
        high = 0.50 if record.pretrain_seed == 2 else 0.70
        record.selection = [{"learning_rate": 1e-4, "epochs": 2, "name": "lr 1e-04, 2 epochs", "score": 0.60},
                            {"learning_rate": 1e-3, "epochs": 2, "name": "lr 1e-03, 2 epochs", "score": high}]
        record.grid_point = "lr 1e-04, 2 epochs" if record.pretrain_seed == 2 else "lr 1e-03, 2 epochs"
    result = render_report(manifest, tmp_path / "grid", workdir=store.workdir)
    text = result.markdown.read_text(encoding="utf-8")
    assert "### Fine-tuning grid" in text and "selection.png" in {p.name for p in result.figures}
    for arm in ALL_ARMS:
        assert (f"| sst2 | {arm} | lr 1e-04, 2 epochs (p2); lr 1e-03, 2 epochs (p0, p1) | "
                f"lr 1e-04, 2 epochs 60.0, lr 1e-03, 2 epochs 70.0 |") in text
    # without a grid, no section and no figure
    plain = render_report(variant(store.manifest), tmp_path / "plain", workdir=store.workdir)
    assert "Fine-tuning grid" not in plain.markdown.read_text(encoding="utf-8")
    assert "selection.png" not in {p.name for p in plain.figures}
