"""``bvr report NAME``: one ablation's runs, read from MLflow, written as ``reports/NAME/``.

:func:`render_report` writes ``report.md``, a self-contained ``report.html``, ``metrics.json``, ``metrics/`` (the rows
of ``dvc metrics show``), ``figures/*.png`` and ``plots/*.csv`` (the data behind the figures, for ``dvc plots show``),
staged and moved into place only when all are done, so a crash leaves the previous report whole (:func:`_swap_in`);
then logs the report to the ablation's parent MLflow run under ``report/``. :func:`render_summary` writes
``reports/index.md`` and ``index.html``: each ablation's headline verdicts side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

from bvr.ablation.manifest import Manifest
from bvr.errors import BvrError
from bvr.fs import refuse_link, replace_dir, write_text
from bvr.report import figures as fig
from bvr.report.analysis import Analysis, analyse
from bvr.report.budget import budget_context, budget_curve, budget_frame
from bvr.report.collect import collect
from bvr.report.document import Figure, to_html, to_markdown
from bvr.report.headlines import brief, effect_rows
from bvr.report.measures import MLM
from bvr.report.numbers import (
    EXPORTED_COLUMNS,
    dvc_metrics,
    effect_metrics,
    effects_table,
    metrics_payload,
    pretrain_table,
    summary_rows,
)
from bvr.report.published import load_published
from bvr.report.sections import report_blocks, summary_blocks
from bvr.report.selection import selection_figure, selection_frame
from bvr.report.shown import CURVE_METRICS, ReportViews, ViewWriter
from bvr.tracking import check_store, log_params_batched, store_client, ui_base

REPORTS_DIR = Path("reports")
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
METRICS_JSON = "metrics.json"
DVC_METRICS_DIR = "metrics"  # the rows of ``dvc metrics show`` (:func:`dvc_metrics`)
FIGURES_DIR = "figures"
PLOTS_DIR = "plots"
INDEX_MD = "index.md"
INDEX_HTML = "index.html"
ARTIFACT_PATH = "report"  # where the report goes among the parent run's artifacts
EFFECTS_CSV = "effects.csv"
EFFECTS_PNG = "effects.png"
TAG_REPORT = "bvr.report"  # tag on the parent run holding the path of ``report.html``


@dataclass
class ReportResult:
    """What :func:`render_report` wrote."""

    out_dir: Path
    html: Path
    markdown: Path
    metrics: Path
    dvc_metrics: list[Path] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # a line per planned unit not usable, and per disagreement
    complete: bool = True  # every planned unit is done and found in MLflow, and nothing disagrees
    brief: list[str] = field(default_factory=list)  # the headline the command prints (:func:`headlines.brief`)
    level: str = "95%"  # of the headline's simultaneous intervals (:attr:`bvr.report.analysis.Analysis.level`)


# --- Files -----------------------------------------------------------------------------------------------------


def _draw(analysis: Analysis, folder: Path) -> dict[str, Figure]:
    colours = fig.arm_colors(analysis.collected.arms, analysis.collected.control)
    curve, grid = budget_curve(analysis), selection_frame(analysis.collected.manifest)
    embeddings = analysis.collected.pretrain.drop_duplicates("arm")["run/params_embedding"].dropna()
    steps = [
        *([("budget", f"The budget curve: arm − {curve.control} per measure against tokens per pretraining run (log "
                      f"axis), with {analysis.level} simultaneous intervals (green where the fixed sequence declares "
                      "that pretraining helps, red where the control is better), and validation MLM loss (mean and 95% "
                      "t interval over pretraining seeds) beside the unigram entropy of the validation tokens.",
            lambda: fig.budget_figure(curve))] if curve is not None else []),
        ("scores", "Fine-tuning scores per arm and task: a point per run (× collapsed), dash = median of the runs, "
                   "black = mean over pretraining seeds with its 95% t interval.",
         lambda: fig.task_scores(analysis, colours)),
        ("selection", "The fine-tuning grid: each model's score on the selection split (training examples held out of "
                      "training) against the learning rate; a line per arm through the median of its seeds, shaded "
                      "from the lowest seed to the highest. Each model kept its best point.",
         lambda: selection_figure(grid, colours, analysis.scales)),
        ("differences", f"Paired differences b − a per measure, in points (validation MLM loss in nats, in a panel "
                        f"of its own): grey points per pretraining seed, coloured point and bar = mean and "
                        f"{analysis.level} simultaneous interval (green where b is better, red where a is, when Holm "
                        "finds a difference; grey where it does not).",
         lambda: fig.differences_figure(analysis)),
        ("curves", "Pretraining: training MLM loss in nats per token (smoothed over the faint raw curve) and "
                   "validation perplexity, one curve per pretraining run, coloured by arm.",
         lambda: fig.curves_figure(analysis.collected.history, colours)),
        ("throughput", "Training throughput and wall time per pretrained arm (the last invocation of each run, "
                       "under whatever else ran on the machine: see the table's note).",
         lambda: fig.throughput(analysis, colours)),
        *([("parameters", "Parameters per arm, with and without the embeddings.",
            lambda: fig.parameters(analysis, colours))]
          if embeddings.nunique() > 1 or analysis.collected.ablation == "vocab" else []),
    ]
    drawn = {}
    for name, caption, draw in steps:
        path = fig.save_figure(draw(), folder / f"{name}.png")
        if path is not None:
            drawn[name] = Figure(path, caption, f"{FIGURES_DIR}/{path.name}")
    return drawn


def _csv(frame: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False, float_format="%.6g")
    return path


def _write_plots(analysis: Analysis, folder: Path) -> list[Path]:
    """The data behind the figures as CSV, one row per point (as ``dvc.yaml``'s plot templates draw it): every run
    (``scores.csv``) and each task's (``scores_TASK.csv``), each pretraining seed's paired differences, the
    ``pretrain_*.csv`` curves (means over an arm's pretraining seeds), a budget curve's ``budget.csv`` and the
    pretraining table."""
    scores = analysis.scores.rename(columns={"points": "score"})[
        ["arm", "task", "pretrain_seed", "seed", "score", "collapsed", "run_id"]]
    differences = pd.DataFrame([{"comparison": c.name, "measure": c.key, "pretrain_seed": unit, "difference": diff}
                                for c in [*analysis.comparisons, *analysis.control] if c.key != MLM
                                for unit, diff in zip(c.test.units, c.test.differences, strict=False)],
                               columns=["comparison", "measure", "pretrain_seed", "difference"])
    paths = [_csv(scores, folder / "scores.csv"), _csv(differences, folder / "differences.csv")]
    for task, rows in scores.groupby("task", sort=False):
        paths.append(_csv(rows[["arm", "pretrain_seed", "seed", "score"]], folder / f"scores_{task}.csv"))
    history = analysis.collected.history
    for key in ("train/mlm_loss", "val/perplexity", "val/mlm_loss"):
        rows = history.loc[history["key"] == key, ["arm", "step", "value"]]
        order = {arm: i for i, arm in enumerate(dict.fromkeys(rows["arm"]))}  # the report's arm order, not sorted
        curve = rows.groupby(["arm", "step"], as_index=False)["value"].mean()
        curve = curve.sort_values(["arm", "step"], key=lambda col: col.map(order) if col.name == "arm" else col)
        paths.append(_csv(curve, folder / f"pretrain_{key.replace('/', '_')}.csv"))
    curve = budget_curve(analysis)
    if curve is not None:
        paths.append(_csv(budget_frame(curve), folder / "budget.csv"))
    paths.append(_csv(pretrain_table(analysis)[["arm", *EXPORTED_COLUMNS]], folder / "pretrain_runs.csv"))
    return paths


def _write_dvc_metrics(analysis: Analysis, folder: Path) -> list[Path]:
    """Write :func:`dvc_metrics`' rows under ``folder`` (created even when empty, so DVC finds the folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, values in dvc_metrics(analysis).items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def _swap_in(staging: Path, out_dir: Path) -> None:
    """Move the staged files into ``out_dir``: folders replaced whole, files by atomic rename; a symbolic link at any
    of their names is refused before anything moves (:func:`bvr.fs.refuse_link`), so the report stays whole."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in (FIGURES_DIR, PLOTS_DIR, DVC_METRICS_DIR, REPORT_MD, REPORT_HTML, METRICS_JSON):
        refuse_link(out_dir / name)
    for name in (FIGURES_DIR, PLOTS_DIR, DVC_METRICS_DIR):
        replace_dir(staging / name, out_dir / name)
    for name in (REPORT_MD, REPORT_HTML, METRICS_JSON):
        os.replace(staging / name, out_dir / name)


def parent_params(manifest: Manifest) -> dict[str, str]:
    """The parent run's parameters: ablation, preset, plan hash, arms and their declared keys, control, seeds, tasks."""
    params = {"ablation": manifest.ablation, "preset": manifest.preset or "default",
              "plan_hash": manifest.plan_hash or "-", "arms": ", ".join(manifest.arms),
              "control": manifest.control_arm or "none",
              "pretrain_seeds": ", ".join(map(str, manifest.pretrain_seeds)) or "-",
              "tasks": ", ".join(manifest.tasks) or "-"}
    if manifest.control_seeds:  # the control's own initialisations, compared unpaired
        params["control_seeds"] = ", ".join(map(str, manifest.control_seeds))
    for arm, keys in manifest.declared.items():
        params[f"arm.{arm}"] = ", ".join(f"{key}={value}" for key, value in keys.items()) or "the base only"
    return params


def _description(analysis: Analysis, result: ReportResult) -> str:
    """The parent run's description, short enough for the UI to show whole (100 px, without a click): a partial
    report's note, then the headline in brief (:func:`bvr.report.headlines.brief`)."""
    partial = [f"Partial: {len(result.missing)} item(s) missing (listed in the report)."] if not result.complete else []
    return "\n".join([*partial, *(f"- {line}" for line in brief(analysis))])


def _effect_estimates(analysis: Analysis) -> list[Metric]:
    """Each effect's estimate as a metric, rounded as the report prints it (nats to 3 decimals, points to 1)."""
    now = int(time.time() * 1000)
    return [Metric(k, round(v, 3 if k.startswith("effect/mlm/") else 1), now, 0)
            for k, v in effect_metrics(analysis).items() if not k.endswith(("/low", "/high", "/p_holm"))]


def _log_files(client: MlflowClient, run_id: str, analysis: Analysis, result: ReportResult) -> None:
    """The report's files under ``report/`` of the parent run, and ``effects.csv`` and ``effects.png`` (differences)."""
    for path in (result.markdown, result.html, result.metrics):
        client.log_artifact(run_id, str(path), ARTIFACT_PATH)
    for name in (FIGURES_DIR, PLOTS_DIR, DVC_METRICS_DIR):
        client.log_artifacts(run_id, str(result.out_dir / name), f"{ARTIFACT_PATH}/{name}")
    client.log_text(run_id, effects_table(analysis).to_csv(index=False), f"{ARTIFACT_PATH}/{EFFECTS_CSV}")
    figure = result.out_dir / FIGURES_DIR / "differences.png"
    if figure.is_file():
        with tempfile.TemporaryDirectory(prefix="bvr-effects-") as tmp:
            shutil.copyfile(figure, Path(tmp) / EFFECTS_PNG)
            client.log_artifact(run_id, str(Path(tmp) / EFFECTS_PNG), ARTIFACT_PATH)


def _log_views(client: MlflowClient, analysis: Analysis, write_views: ViewWriter | None) -> None:
    """The effects and scores views' rows, the pretraining runs' colours (the figures') and the curves' values, handed
    to ``write_views`` (:func:`bvr.ops.views.write_report_views` writes them with the views' fitted y axes)."""
    collected = analysis.collected
    if write_views is None or collected.experiment_id is None:
        return
    pretrain, history = collected.pretrain, collected.history
    has_parent = collected.parent_run_id is not None
    shown = ReportViews(
        effects=effect_rows(analysis) if has_parent else [], scores=summary_rows(analysis) if has_parent else [],
        colours=fig.arm_colors(collected.arms, collected.control),
        pretrain_runs=dict(zip(pretrain["run_id"], pretrain["arm"], strict=True)),
        curves={key: history.loc[history["key"] == key, "value"] for key in CURVE_METRICS})
    write_views(client, collected.experiment_id, collected.parent_run_id, shown)


def _log(analysis: Analysis, result: ReportResult, write_views: ViewWriter | None) -> None:
    """Log the report to the parent run: its files, description, parameters, each effect's estimate as a metric
    (with intervals and Holm p-values in ``report/effects.csv`` and ``report/effects.png``) and, with
    ``write_views``, the saved views."""
    run_id = analysis.collected.parent_run_id
    if run_id is None:
        return
    client = store_client(analysis.collected.uri)
    try:
        _log_files(client, run_id, analysis, result)
        effects = _effect_estimates(analysis)
        for i in range(0, len(effects), 500):  # MLflow takes at most 1,000 metrics a batch
            client.log_batch(run_id, metrics=effects[i:i + 500])
        present = client.get_run(run_id).data.params  # a parameter, once logged, cannot change
        log_params_batched(client, run_id, {k: v for k, v in parent_params(analysis.collected.manifest).items()
                                            if k not in present})
        client.set_tag(run_id, MLFLOW_RUN_NOTE, _description(analysis, result))
        client.set_tag(run_id, TAG_REPORT, str(result.html))
        _log_views(client, analysis, write_views)
    except MlflowException as err:
        raise BvrError(f"could not log the report to parent run {run_id}: {err.message}", where=analysis.collected.uri,
                       hint="the files are written; render again with log_to_mlflow=False to skip MLflow") from None
    except OSError as err:
        raise artifact_root_error(client, run_id, err) from None


def artifact_root_error(client: MlflowClient, run_id: str, err: OSError) -> BvrError:
    """The one-line error of an artifact folder the store recorded that cannot be written: it names that folder
    (where the store was made; a copied or moved store still points there), not the output folder."""
    root = client.get_run(run_id).info.artifact_uri
    return BvrError(f"cannot write the report into the MLflow store's artifact folder {root}: "
                    f"{err.strerror or err}", where=err.filename or root,
                    hint="the store records that folder from where it was made (a copied or moved store keeps the old "
                         "path): make it writable, or run bvr where the store was made; the report's files are written")


def render_report(manifest: Manifest, out_dir: Path | None = None, *, workdir: Path | None = None,
                  log_to_mlflow: bool = True, ui_url: str | None = None,
                  write_views: ViewWriter | None = None) -> ReportResult:
    """Render one ablation's report from its MLflow runs (the store in ``workdir``) into ``out_dir`` (default
    ``reports/NAME``), partial for an unfinished ablation; logging to MLflow fails only after the files are written.
    ``ui_url`` is the MLflow UI run ids link to (:func:`bvr.tracking.ui.ui_base`); ``write_views`` writes the report's
    MLflow views (:func:`bvr.ops.views.write_report_views`; None: none)."""
    check_store(workdir)
    collected = collect(manifest, workdir=workdir)
    ui_base(collected.uri, ui_url)  # a bad address fails before anything is drawn
    analysis = analyse(collected, load_published())
    out_dir = Path(out_dir) if out_dir is not None else REPORTS_DIR / collected.ablation
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-render-", dir=out_dir.parent))
    try:
        (staging / FIGURES_DIR).mkdir()
        figures = _draw(analysis, staging / FIGURES_DIR)
        plots = _write_plots(analysis, staging / PLOTS_DIR)
        blocks = report_blocks(analysis, figures, ui_url, budget_note=budget_context(out_dir.parent, analysis))
        write_text(staging / REPORT_MD, to_markdown(blocks))
        write_text(staging / REPORT_HTML, to_html(blocks, f"bvr report: {collected.ablation}"))
        write_text(staging / METRICS_JSON, json.dumps(metrics_payload(analysis), indent=2) + "\n")
        rows = _write_dvc_metrics(analysis, staging / DVC_METRICS_DIR)
        _swap_in(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result = ReportResult(
        out_dir=out_dir, html=out_dir / REPORT_HTML, markdown=out_dir / REPORT_MD, metrics=out_dir / METRICS_JSON,
        dvc_metrics=[out_dir / DVC_METRICS_DIR / r.relative_to(staging / DVC_METRICS_DIR) for r in rows],
        plots=[out_dir / PLOTS_DIR / p.name for p in plots],
        figures=[out_dir / FIGURES_DIR / f.path.name for f in figures.values()],
        missing=list(collected.missing), complete=not collected.missing,
        brief=brief(analysis, bold=False), level=analysis.level,
    )
    if log_to_mlflow:
        _log(analysis, result, write_views)
    return result


# --- Summary across ablations ----------------------------------------------------------------------------------


def render_summary(manifests: list[Manifest], out_dir: Path = REPORTS_DIR, *, workdir: Path | None = None) -> Path:
    """Write ``out_dir/index.md`` and ``index.html`` (returned): every ablation's status and headline verdicts, one
    manifest each, linking each report found in ``out_dir/NAME/``."""
    published = load_published()
    analyses = [analyse(collect(m, workdir=workdir), published) for m in manifests]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reports = [f"{analysis.collected.ablation}/{REPORT_HTML}"
               if (out_dir / analysis.collected.ablation / REPORT_HTML).exists() else None for analysis in analyses]
    blocks = summary_blocks(analyses, reports)
    for name, text in ((INDEX_MD, to_markdown(blocks)), (INDEX_HTML, to_html(blocks, "bvr: ablation reports"))):
        write_text(out_dir / name, text)
    return out_dir / INDEX_HTML
