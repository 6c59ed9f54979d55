"""``bvr report``: a report rendered from a real MLflow store, checked against numbers worked out by hand.

The store (``tests/report_fixtures.py``) holds a finished masking ablation: static, dynamic and the no-pretraining
control, on SST-2 (logged as fractions) and SQuAD 2.0 (logged in points), seeds 0 to 2. Creating an SQLite store
costs a couple of seconds, so one store and one full render are shared by the module; tests that need another
render write to folders of their own and leave MLflow alone (``log_to_mlflow=False``).

Hand-worked values (points):

- SST-2 medians: static 80 (of 78, 80, 82), dynamic 83 (of 81, 83, 84), control 50 (of 49, 50, 51);
  SQuAD 2.0 medians: static 41, dynamic 41 (quartiles 40.75 and 41.25), control 5.
- dynamic - static on SST-2, seeds 0 to 2: +3, +2, +3, mean 8/3. A bootstrap mean of three draws from {2, 3, 3}
  is 2 with chance 1/27 (3.7%) and 3 with chance 8/27 (29.6%), so its 2.5% and 97.5% quantiles are 2 and 3 (10,000
  resamples put those chances within a few tenths of a percent): interval [2, 3], half-width 0.5, distinguishable.
- dynamic - static on SQuAD 2.0: +0.5, -0.5, 0, mean 0; interval [-0.5, 0.5] by the same argument: covers 0.
- RoBERTa Table 1: SST-2 92.5 -> 92.9 and SQuAD 2.0 F1 78.3 -> 78.7, both +0.4 for dynamic: SST-2 agrees, SQuAD 2.0
  is inconclusive.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

from bvr.errors import BvrError
from bvr.report.analysis import analyse, headlines
from bvr.report.collect import FINETUNE_COLUMNS, HISTORY_COLUMNS, PRETRAIN_COLUMNS, Collected, collect
from bvr.report.published import load_published
from bvr.report.render import ReportResult, render_report, render_summary
from bvr.report.stats import paired_difference, verdict
from tests.report_fixtures import CONTROL, Store, fill_store, variant

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    workdir = tmp_path_factory.mktemp("report-store")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.chdir(workdir)  # anything MLflow writes relative to the working directory lands in tmp
        yield fill_store(workdir)


@pytest.fixture(scope="module")
def report(store: Store) -> ReportResult:
    return render_report(store.manifest, store.workdir / "reports" / "masking", workdir=store.workdir)


def _metrics(result: ReportResult) -> dict:
    return json.loads(result.metrics.read_text(encoding="utf-8"))


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


def test_metrics_json_holds_the_hand_worked_medians(report: ReportResult) -> None:
    metrics = _metrics(report)
    scores = metrics["scores"]
    medians = {(arm, task): scores[arm][task]["median"] for arm in scores for task in scores[arm]}
    assert medians == pytest.approx({("static", "sst2"): 80.0, ("dynamic", "sst2"): 83.0, (CONTROL, "sst2"): 50.0,
                                     ("static", "squad_v2"): 41.0, ("dynamic", "squad_v2"): 41.0,
                                     (CONTROL, "squad_v2"): 5.0})
    squad = scores["dynamic"]["squad_v2"]
    assert (squad["q1"], squad["q3"], squad["iqr"], squad["n"]) == pytest.approx((40.75, 41.25, 0.5, 3))
    assert scores[CONTROL]["sst2"]["collapsed"] == 1 and scores["static"]["sst2"]["collapsed"] == 0
    assert (metrics["complete"], metrics["missing"]) == (True, 0)


def test_paired_differences_match_the_hand_worked_intervals(report: ReportResult) -> None:
    diff = _metrics(report)["differences"]["dynamic_minus_static"]
    assert diff["sst2"] == pytest.approx({"mean": 8 / 3, "ci_low": 2.0, "ci_high": 3.0, "n": 3,
                                          "distinguishable": True}, abs=1e-6)
    assert diff["squad_v2"] == pytest.approx({"mean": 0.0, "ci_low": -0.5, "ci_high": 0.5, "n": 3,
                                              "distinguishable": False}, abs=1e-6)
    assert _metrics(report)["differences"][f"static_minus_{CONTROL}"]["sst2"]["mean"] == pytest.approx(30.0)


def test_markdown_states_verdicts_and_the_papers_direction(report: ReportResult) -> None:
    text = report.markdown.read_text(encoding="utf-8")
    assert ("- dynamic vs static: dynamic better on sst2 by 2.7 ± 0.5; no difference detected on squad_v2; beside "
            "the paper: agree on sst2, inconclusive on squad_v2") in text
    assert f"- static vs {CONTROL}: static better on sst2 by 30.0 ± 1.0, squad_v2 by 36.0 ± 1.0" in text
    assert "| dynamic − static | +2.7 ± 0.5 | (+0.0 ± 0.5) | (-1.50) |" in text  # the headline matrix
    assert "| dynamic − static, paper | +0.4 | +0.4 | — |" in text
    assert ("| sst2 | dynamic − static | 3 | +2.7 | [2.0, 3.0] | yes | dynamic better by 2.7 ± 0.5 accuracy points "
            "(95% CI, n=3) | — |") in text
    assert ("| squad_v2 | dynamic − static | 3 | +0.0 | [-0.5, 0.5] | no | no difference detected at this scale "
            "(n=3)") in text
    assert ("| SST-2 (Acc) | dynamic − static | 92.5 | 92.9 | +0.4 | dynamic better | +2.7 [2.0, 3.0] | "
            "dynamic better | agree |") in text
    assert "| SQuAD 2.0 (F1) | dynamic − static | 78.3 | 78.7 | +0.4 | dynamic better | +0.0 [-0.5, 0.5] | " in text
    assert "| static | 78.3 / 41.0 | 92.5 / 80.0 |" in text  # paper / ours, per published column of a task run
    assert "Published columns for tasks this ablation does not run: MNLI-m (Acc)." in text
    assert "logged as fractions and shown ×100" in text
    assert "![" in text and "(figures/scores.png)" in text


def test_every_number_links_to_its_run(report: ReportResult, store: Store) -> None:
    text = report.markdown.read_text(encoding="utf-8")
    for unit in [*store.manifest["finetune"], *store.manifest["pretrain"]]:
        assert f"#/experiments/{store.experiment_id}/runs/{unit['run_id']}" in text
    assert "[s2×]" in text  # the collapsed control seed is flagged where its run is linked
    assert store.manifest["context"]["git_commit"] in text


def test_html_is_self_contained(report: ReportResult) -> None:
    page = report.html.read_text(encoding="utf-8")
    assert page.count('<img src="data:image/png;base64,') == len(report.figures)
    assert page.count("<table>") >= 6 and "<style>" in page
    assert "<script" not in page and "<link" not in page and 'src="http' not in page
    assert "dynamic better by 2.7 ± 0.5 accuracy points" in page and "dynamic better on sst2 by 2.7" in page
    assert '<h2 id="beside-the-paper">' in page


def test_plots_hold_every_point_long_and_per_arm_wide(report: ReportResult) -> None:
    plots = {p.name: pd.read_csv(p) for p in report.plots}
    scores = plots["scores.csv"]
    assert len(scores) == 18 and {"arm", "task", "seed", "score", "collapsed", "run_id"} <= set(scores.columns)
    static = scores[(scores["arm"] == "static") & (scores["task"] == "sst2")].sort_values("seed")
    assert static["score"].tolist() == pytest.approx([80.0, 82.0, 78.0])
    assert plots["scores_sst2.csv"].set_index("seed")["static"].tolist() == pytest.approx([80.0, 82.0, 78.0])
    ppl = plots["pretrain_val_perplexity.csv"]  # the layout dvc.yaml's plots read: step x arm
    assert list(ppl.columns[:1]) == ["step"] and {"static", "dynamic"} <= set(ppl.columns)
    assert ppl["dynamic"].dropna().tolist() == [55.0, 28.0, 18.5]
    assert set(plots["differences.csv"]["comparison"]) == {"dynamic − static", f"static − {CONTROL}",
                                                           f"dynamic − {CONTROL}"}


def test_report_is_logged_to_the_parent_run(report: ReportResult, store: Store) -> None:
    client, run_id = store.client, store.parent_run_id
    logged = {a.path for a in client.list_artifacts(run_id, "report")}
    assert {"report/report.html", "report/report.md", "report/metrics.json", "report/figures",
            "report/plots"} <= logged
    assert {a.path for a in client.list_artifacts(run_id, "report/figures")} == {
        f"report/figures/{p.name}" for p in report.figures}
    tags = client.get_run(run_id).data.tags
    assert str(report.html) in tags[MLFLOW_RUN_NOTE] and "report/report.html" in tags[MLFLOW_RUN_NOTE]
    assert "dynamic better on sst2 by 2.7 ± 0.5" in tags[MLFLOW_RUN_NOTE]
    assert tags["bvr.report"] == str(report.html)


# ---------------------------------------------------------------------------------------------------------------
# Partial and broken inputs


def _partial(store: Store) -> dict:
    """The manifest with a run id the store lacks, a unit not run, a failed pretraining and a copied score that
    differs from its run's."""
    manifest = variant(store.manifest)
    units = manifest["finetune"]
    units[0].update(run_id="0" * 32)  # static sst2 seed 0: done, but not in the store
    units[4].update(status="missing", run_id=None, score=None)  # static squad_v2 seed 1
    units[7].update(score=0.99)  # dynamic sst2 seed 1: the manifest's copy disagrees; the run's value is used
    manifest["pretrain"][1].update(status="failed", run_id=None, error="loss is NaN at step 120")
    manifest["parent_run_id"] = "f" * 32
    return manifest


def test_partial_report_lists_what_is_missing(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "masking"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "stale.png").write_bytes(PNG)
    (out / "plots").mkdir()
    (out / "plots" / "stale.csv").write_text("x,y\n", encoding="utf-8")
    result = render_report(_partial(store), out, workdir=store.workdir, log_to_mlflow=False)
    assert not result.complete
    missing = "\n".join(result.missing)
    assert f"static/finetune/sst2/seed0: run {'0' * 32} is not in the MLflow experiment" in missing
    assert "static/finetune/squad_v2/seed1: status 'missing' in the manifest" in missing
    assert "dynamic/pretrain: status 'failed' in the manifest: loss is NaN at step 120" in missing
    assert "dynamic/finetune/sst2/seed1: the manifest's score 0.99 differs" in missing
    assert f"parent run {'f' * 32}" in missing
    assert len(result.missing) == 5
    metrics = _metrics(result)
    assert (metrics["complete"], metrics["missing"]) == (False, 5)
    assert metrics["scores"]["static"]["sst2"]["n"] == 2
    assert metrics["scores"]["static"]["sst2"]["median"] == pytest.approx(80.0)  # (82 + 78) / 2
    assert metrics["scores"]["dynamic"]["sst2"]["median"] == pytest.approx(83.0)  # from MLflow, not 0.99
    assert list(metrics["pretrain"]) == ["static"]
    text = result.markdown.read_text(encoding="utf-8")
    assert "Partial: 5 planned item(s)" in text and "## Missing" in text
    assert not (out / "figures" / "stale.png").exists() and not (out / "plots" / "stale.csv").exists()


def test_an_ablation_with_no_runs_yet_renders(store: Store, tmp_path: Path) -> None:
    manifest = variant(store.manifest)
    manifest.update(experiment="never-run", parent_run_id=None)
    result = render_report(manifest, tmp_path / "empty", workdir=store.workdir)  # no parent run: nothing logged
    assert not result.complete and result.figures == []
    assert "MLflow experiment 'never-run' is not in" in result.missing[0]
    assert len(result.missing) == 1 + len(manifest["finetune"]) + len(manifest["pretrain"])
    assert "No finished fine-tuning run was found." in result.markdown.read_text(encoding="utf-8")
    assert _metrics(result)["scores"] == {}
    assert pd.read_csv(result.out_dir / "plots" / "scores.csv").empty


def test_seeds_not_run_are_listed_once_per_arm_and_task(store: Store) -> None:
    manifest = variant(store.manifest)
    for unit in manifest["finetune"]:
        if unit["arm"] == CONTROL and unit["task"] == "sst2":
            unit.update(status="missing", run_id=None, score=None)
    collected = collect(manifest, workdir=store.workdir)
    assert collected.missing == [f"{CONTROL}/finetune/sst2 seeds 0, 1, 2: status 'missing' in the manifest"]
    assert len(collected.finetune) == 15


@pytest.mark.parametrize(("change", "message"), [
    ({"arms": []}, "'arms' must be a non-empty list"),
    ({"version": 2}, "manifest version 2"),
    ({"finetune": [{"arm": "static"}]}, "finetune[0]: unit lacks task, seed, status"),
])
def test_a_malformed_manifest_is_a_user_error(store: Store, tmp_path: Path, change: dict, message: str) -> None:
    manifest = {**variant(store.manifest), **change}
    with pytest.raises(BvrError, match="manifest of ablation 'masking'") as err:
        render_report(manifest, tmp_path / "bad", workdir=store.workdir)
    assert message in str(err.value)
    assert not (tmp_path / "bad").exists()


def test_vocab_report_draws_parameter_counts_and_quotes_the_paper(store: Store, tmp_path: Path) -> None:
    manifest = variant(store.manifest, "vocab")
    manifest.update(published="vocab", parent_run_id=None)
    result = render_report(manifest, tmp_path / "vocab", workdir=store.workdir)
    assert "parameters.png" in {p.name for p in result.figures}
    text = result.markdown.read_text(encoding="utf-8")
    assert "RoBERTa (Liu et al., 2019), Section 4.4" in text
    assert "byte-level BPE, 50K: only slight differences" in text  # a finding stated in words, quoted


def _pretrained_only(families: tuple[str, str]) -> Collected:
    """A batch-size ablation with one pretraining run per arm and no fine-tuning yet, built without MLflow."""
    arms = zip(("256", "2k"), (4.0, 3.7), families, strict=True)
    rows = [{"arm": arm, "pretrain_seed": 0, "run_id": f"run-{arm}", "val/perplexity": ppl, "tokenizer.family": fam,
             "tokenizer.vocab_size": "30000"} for arm, ppl, fam in arms]
    manifest = {"ablation": "batch-size", "arms": ["256", "2k"], "control_arm": None, "published": "batch-size",
                "tasks": []}
    return Collected(manifest, "batch-size", None, "sqlite:///unused.db", pd.DataFrame(columns=FINETUNE_COLUMNS),
                     pd.DataFrame(rows, columns=PRETRAIN_COLUMNS), pd.DataFrame(columns=HISTORY_COLUMNS), [], None)


def test_perplexity_is_compared_only_within_one_tokenizer() -> None:
    [same] = analyse(_pretrained_only(("bert", "bert")), load_published()).comparisons
    assert same.published == pytest.approx(3.68 - 3.99) and same.paper == "2k better"
    assert (same.verdict, same.agreement) == ("too few paired seeds to tell (n=1)", "inconclusive")
    analysis = analyse(_pretrained_only(("bert", "roberta")), load_published())
    [mixed] = analysis.comparisons
    assert (mixed.comparable, mixed.agreement, mixed.ours) == (False, "not comparable", "not comparable")
    assert any("different tokenizers" in note for note in analysis.notes)
    assert headlines(analysis) == []  # nothing to say about perplexity across vocabularies


def test_verdicts_name_combined_scores() -> None:
    paired = paired_difference({0: 70.0, 1: 71.0, 2: 72.0}, {0: 72.0, 1: 73.0, 2: 74.0})
    assert verdict(paired, a_name="a", b_name="b", metric="dev/accuracy_f1", scale=1) == (
        "b better by 2.0 ± 0.0 accuracy/F1 points (95% CI, n=3)")
    assert "Pearson/Spearman points" in verdict(paired, a_name="a", b_name="b", metric="dev/pearson_spearman", scale=1)


def test_one_pretraining_seed_is_a_headline_only_beside_a_published_number() -> None:
    lines = headlines(analyse(_pretrained_only(("bert", "bert")), load_published()))
    assert lines == ["2k vs 256: too few seeds on perplexity; beside the paper: inconclusive on perplexity"]


# ---------------------------------------------------------------------------------------------------------------
# The summary across ablations


def test_summary_lists_each_ablations_verdicts(report: ReportResult, store: Store) -> None:
    other = _partial(store)
    other["ablation"] = "masking-rerun"  # the same runs under another name, with units missing, never rendered
    index = render_summary([store.manifest, other], store.workdir / "reports", workdir=store.workdir)
    assert index == store.workdir / "reports" / "index.html"
    text = (index.parent / "index.md").read_text(encoding="utf-8")
    assert "| masking | complete |" in text and "| masking-rerun | partial (5 missing) |" in text
    assert "[report](masking/report.html)" in text and "not rendered yet" in text
    assert "2 published comparison(s): 1 agree, 1 inconclusive" in text
    assert "- dynamic vs static: dynamic better on sst2 by 2.7 ± 0.5" in text
    # The rerun lacks static's seed 0, so it pairs seeds 1 and 2 only: +2 and +3 points.
    assert "- dynamic vs static: dynamic better on sst2 by 2.5 ± 0.5" in text
    page = index.read_text(encoding="utf-8")
    assert '<a href="masking/report.html">report</a>' in page and "<style>" in page


def test_reports_import_no_training_code() -> None:
    """Rendering reads MLflow and files only: neither torch nor Lightning is imported (DESIGN.md's layering)."""
    code = ("import sys, bvr.report.render, bvr.report.collect; "
            "print(sorted(m for m in ('torch', 'lightning', 'bvr.pretraining', 'bvr.model') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
