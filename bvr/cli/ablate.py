"""``bvr ablate``, ``bvr report`` and ``bvr pipeline``: run an ablation, render its report, export it to DVC."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from bvr.ablation.plan import UnitKind
from bvr.cli.options import EXPERIMENTS_HELP, DataDirOpt, OutputDirOpt, console, data_dir_or_env, one_of
from bvr.config import preset_names
from bvr.display import duration
from bvr.errors import BvrError

UNIT_KINDS_HELP = ", ".join(kind.value for kind in UnitKind)

AblationArg = Annotated[str, typer.Argument(help=f"Ablation: {EXPERIMENTS_HELP}, or the path of an experiment "
                                              "file.")]
AblationPresetOpt = Annotated[str | None, typer.Option("--preset", "-p", help=f"Preset: {one_of(preset_names())} "
                                                       "(tiny: 2 CPU cores, under an hour for masking; the "
                                                       "others: GPUs).")]
AblationSetOpt = Annotated[list[str] | None, typer.Option("--set", "-s", help="Override a config key for every arm, "
                                                          "e.g. --set training.devices=8 (not a key the arms "
                                                          "differ in).")]


UiUrlOpt = Annotated[str | None, typer.Option("--ui-url", help="Address of the MLflow UI "
                                              "that run ids in the report link to, as `mlflow ui` prints it (e.g. "
                                              "http://127.0.0.1:5000). Default: BVR_MLFLOW_UI, else the tracking server "
                                              "when MLFLOW_TRACKING_URI is one; otherwise run ids stay plain text.")]


def _plan(name: str, preset: str | None, set_: list[str] | None, data_dir: Path | None, output_dir: Path | None):
    from bvr.ablation.plan import make_plan

    return make_plan(name, preset=preset, overrides=set_, data_dir=data_dir_or_env(data_dir),
                     output_dir=output_dir or Path("outputs"))


def ablate_cmd(
    name: AblationArg,
    preset: AblationPresetOpt = None,
    set_: AblationSetOpt = None,
    only: Annotated[list[str] | None, typer.Option("--only", help="Run just this unit (repeatable): KIND, "
                                                   f"KIND:NAME or KIND:NAME:TASK with KIND one of {UNIT_KINDS_HELP}, "
                                                   "e.g. tokenizer:FAMILY, pretrain:ARM, finetune:ARM:TASK. DVC "
                                                   "stages use it.")] = None,
    stage_dir: Annotated[Path | None, typer.Option("--stage-dir", help="Also write each unit's products here "
                                                   "for DVC to track (pipeline/NAME).")] = None,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Render reports/NAME at the end.")] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bars.")] = True,
    ui_url: UiUrlOpt = None,
    data_dir: DataDirOpt = None,
    output_dir: OutputDirOpt = None,
) -> None:
    """Run an ablation end to end: pretrain every arm, fine-tune every arm on its tasks and seeds, render the report.

    Arms, tasks and seeds come from experiments/NAME.yaml. MLflow gets the experiment NAME with a parent run per
    invocation and nested runs ARM/pretrain, ARM/finetune/TASK and ARM/finetune/TASK/seedN. Finished units are
    reused, so running the same command again runs nothing, and an interrupted run continues where it stopped.
    """
    from bvr.ablation.run import run_ablation

    plan = _plan(name, preset, set_, data_dir, output_dir)
    result = run_ablation(plan, only=only, stage_dir=stage_dir, report=report, progress=progress, console=console,
                          ui_url=ui_url)
    ran, reused = len(result.ran), len(result.reused)
    console.print(f"ablation {plan.name}: {ran} unit(s) run, {reused} reused, in {duration(result.seconds)}",
                  highlight=False)
    if result.report is not None:
        console.print(f"report: {result.report.html}", highlight=False)
    elif not only:
        console.print(f"next: bvr report {plan.name}" + (f" --preset {plan.preset}" if plan.preset else ""),
                      highlight=False)


def report_cmd(
    name: Annotated[str | None, typer.Argument(help="Ablation to report (default with --all: every ablation "
                                               "that has runs).")] = None,
    preset: AblationPresetOpt = None,
    set_: AblationSetOpt = None,
    all_: Annotated[bool, typer.Option("--all", help="Also (or only) write the summary across ablations, "
                                       "reports/index.html.")] = False,
    out: Annotated[Path, typer.Option("--out", help="Folder of the reports.")] = Path("reports"),
    ui_url: UiUrlOpt = None,
    data_dir: DataDirOpt = None,
    output_dir: OutputDirOpt = None,
) -> None:
    """Render reports/NAME (report.md, report.html, figures, metrics.json, plots) from the ablation's MLflow runs.

    Without --preset or --set, reports the ablation's most recent invocation. Units not finished yet are listed
    as missing. The report is also logged to the ablation's parent MLflow run.
    """
    from bvr.ablation.manifest import Manifest, find_manifest, latest_manifests
    from bvr.report.render import render_report, render_summary

    outputs = output_dir or Path("outputs")
    if name is None and not all_:
        raise BvrError("name an ablation or pass --all", where="report",
                       hint="e.g. bvr report masking --preset tiny")
    if name is not None:
        plan = _plan(name, preset, set_, data_dir, outputs) if preset is not None or set_ else None
        path = plan.manifest_path if plan is not None else find_manifest(name, outputs)
        if not path.is_file():
            raise BvrError(f"no runs of ablation '{name}' with these settings ({path})", where="report",
                           hint=f"run `bvr ablate {name}" + (f" --preset {preset}" if preset else "") + "` first")
        result = render_report(Manifest.load(path), out / Path(name).stem, workdir=Path.cwd(), ui_url=ui_url)
        console.print(f"wrote {result.html}" + ("" if result.complete else
                                                 f" (partial: {len(result.missing)} item(s) missing)"),
                      highlight=False)
        for line in result.missing:
            console.print(f"  missing: {line}", markup=False, highlight=False)
    if all_:
        summary = render_summary(latest_manifests(outputs), out, workdir=Path.cwd())
        console.print(f"wrote {summary}", highlight=False)


def pipeline_cmd(
    name: AblationArg,
    preset: AblationPresetOpt = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write ('-': print).")] = Path("dvc.yaml"),
) -> None:
    """Write the DVC pipeline (dvc.yaml) that runs an ablation stage by stage; then run it with `dvc repro`.

    Stages: corpus, tokenizer (per family), data, pretrain (per arm), init (the control), finetune (per arm and
    task) and report. Each stage's params are the experiment-file keys it reads, so changing one arm re-runs only
    that arm's stages and the report. The plot templates dvc.yaml names go into .dvc/plots/ beside it.
    """
    from bvr.ablation.dvc import TEMPLATES_DIR, render_pipeline, write_plot_templates

    if str(output) != "-" and not output.parent.is_dir():
        raise BvrError(f"folder {output.parent} does not exist", where=f"--output {output}",
                       hint="give a file in the repository's root folder (dvc.yaml and .dvc/ sit there)")
    plan = _plan(name, preset, None, None, None)
    text = render_pipeline(plan, Path.cwd(), output="dvc.yaml" if str(output) == "-" else str(output))
    if str(output) == "-":
        sys.stdout.write(text)
        return
    output.write_text(text, encoding="utf-8")
    write_plot_templates(output.parent)
    params = output.parent / "params.yaml"
    if not params.exists():
        params.write_text("# Read by dvc.yaml. data_dir: the data folder; empty: the BVR_DATA_DIR variable.\n"
                          "data_dir: ''\n", encoding="utf-8")
    console.print(f"wrote {output} and its plot templates in {output.parent / TEMPLATES_DIR}; run it with: dvc repro",
                  highlight=False)
