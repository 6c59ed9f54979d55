"""``bvr ablate``, ``bvr report`` and ``bvr pipeline``: run an ablation, render its report, export it to DVC."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from bvr.ablation.plan import UnitKind
from bvr.cli.launching import check_launcher, launch_local, launch_slurm, print_slurm_jobs
from bvr.cli.options import (
    EXPERIMENTS_HELP,
    DataDirOpt,
    OutputDirOpt,
    Overrides,
    ablation_plan,
    console,
    folder_option,
    one_of,
)
from bvr.cli.ui import print_views
from bvr.config import preset_names
from bvr.errors import BvrError
from bvr.formatting import duration, literal
from bvr.ops.launch.launch import Launcher
from bvr.write_checks import check_file_target, check_writable

UNIT_KINDS_HELP = ", ".join(kind.value for kind in UnitKind)
REPORTS_FOLDER = "reports folder (--out)"

AblationArg = Annotated[str, typer.Argument(help=f"Ablation: {EXPERIMENTS_HELP}, or the path of an experiment "
                                              "file.")]
AblationPresetOpt = Annotated[str | None, typer.Option("--preset", "-p", help=f"Preset: {one_of(preset_names())} "
                                                       "(tiny: 2 CPU cores, under an hour for masking; the "
                                                       "others: GPUs).")]
AblationSetOpt = Annotated[list[str] | None, typer.Option("--set", "-s", help="Override a config key for every arm "
                                                          "and the control, e.g. --set training.devices=8, --set "
                                                          "finetune.seeds=1 or --set pretrain_seeds=[0] (not a key "
                                                          "the arms differ in).")]
AblationConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML file of config sections laid over "
                                                        "every arm and the control, as one --set per key (before the "
                                                        "--set options; not a key the arms differ in).")]
UiUrlOpt = Annotated[str | None, typer.Option("--ui-url", help="Address of the MLflow UI that run ids in the report "
                                              "link to, as `mlflow ui` prints it (e.g. http://127.0.0.1:5000). "
                                              "Default: BVR_MLFLOW_UI, else the tracking server when "
                                              "MLFLOW_TRACKING_URI is one; otherwise run ids stay plain text.")]


def ablate_cmd(
    name: AblationArg,
    preset: AblationPresetOpt = None,
    config: AblationConfigOpt = None,
    set_: AblationSetOpt = None,
    only: Annotated[list[str] | None, typer.Option("--only", help="Run just this unit (repeatable): KIND, "
                                                   f"KIND:NAME or KIND:NAME:TASK with KIND one of {UNIT_KINDS_HELP}, "
                                                   "e.g. tokenizer:FAMILY, pretrain:ARM, finetune:ARM:TASK.")] = None,
    stage_dir: Annotated[Path | None, typer.Option("--stage-dir", help="Also write each unit's products here "
                                                   "for DVC to track (pipeline/NAME).")] = None,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Render reports/NAME at the end.")] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bars (on a terminal only; "
                                           "a log gets one line per finished unit).")] = True,
    ui_url: UiUrlOpt = None,
    data_dir: DataDirOpt = None,
    data_dir_from: Annotated[Path | None, typer.Option("--data-dir-from", metavar="PARAMS", help="Read the data "
                                                       "folder from data_dir in this YAML file, as dvc.yaml's "
                                                       "stages do from params.yaml (so that no character of it "
                                                       "passes through a shell); where it is empty: --data-dir, "
                                                       "else BVR_DATA_DIR.")] = None,
    output_dir: OutputDirOpt = None,
    launcher: Annotated[Launcher, typer.Option("--launcher", help="Where the units run: inline (one after another in "
                                          "this process), local (each its own process, --jobs at a time, on this "
                                          "machine) or slurm (one SLURM job per unit, resources from the launcher "
                                          "config section; returns once they are queued).")] = Launcher.INLINE,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="With --launcher local: units at a "
                                             "time, each with its share of the CPU threads (default 2).")] = None,
) -> None:
    """Run an ablation end to end: pretrain every arm, fine-tune every arm on its tasks and seeds, render the report.

    Arms, tasks and seeds come from experiments/NAME.yaml. MLflow gets the experiment NAME with a parent run per
    invocation and nested runs ARM/pretrain, ARM/finetune/TASK and ARM/finetune/TASK/seedN. Finished units are
    reused, so running the same command again runs nothing, and an interrupted run continues where it stopped.
    """
    from bvr.ops.dvc.pipeline import join_pipeline, read_data_dir, record_lock
    from bvr.runner.run import run_ablation

    overrides = Overrides.of(config, set_)
    value = read_data_dir(data_dir_from) if data_dir_from is not None else ""  # checked as --data-dir is
    data_dir = folder_option(f"data folder (data_dir in {data_dir_from})")(Path(value)) if value else data_dir
    check_launcher(launcher.value, jobs, only, stage_dir)
    plan = ablation_plan(name, preset, overrides, data_dir, output_dir)
    if launcher is not Launcher.INLINE:
        from bvr.ops.launch.launch import Invocation

        invocation = Invocation(name, plan.preset, tuple(overrides.texts), plan.data_dir, plan.output_dir, Path.cwd())
        if launcher is Launcher.LOCAL:
            launch_local(plan, invocation, jobs or 2, ui_url)
        else:
            launch_slurm(plan, invocation, ui_url)
        return
    joined = None if only or stage_dir or not report else join_pipeline(plan, Path.cwd())  # dvc.yaml runs this plan
    result = run_ablation(plan, only=only, stage_dir=stage_dir or (joined and joined.stage_dir), report=report,
                          progress=progress, console=console, ui_url=ui_url)
    if joined is not None:
        console.plain(joined.why_not or record_lock(Path.cwd(), plan.data_dir))
    ran, reused = len(result.ran), len(result.reused)
    console.plain(f"ablation {plan.name}: {ran} unit(s) run, {reused} reused, in {duration(result.seconds)}", wrap=True)
    if result.report is not None:  # its headline, where it is, and the MLflow addresses (the effects first)
        _print_headline(result.report)
        console.plain(f"report: {result.report.html}{_partial(result.report)}")
        print_views(plan.experiment, ui_url, result.manifest.parent_run_id)
    elif not only:  # the same --preset, --set and folders pick this invocation's manifest (a smoke run's, say)
        options = _plan_options(plan.preset, overrides.texts, data_dir, output_dir)
        console.plain("next: " + shlex.join(["bvr", "report", name, *options]))


def _partial(report: Any) -> str:
    return "" if report.complete else f" (partial: {len(report.missing)} item(s) missing)"


def _plan_options(preset: str | None, overrides: list[str] | None, data_dir: str | Path | None,
                  output_dir: str | Path | None) -> list[str]:
    """The options that pick an ablation's plan again, and so its manifest: what entered the plan hash (the preset,
    every --set, the data folder) and the output folder the manifest is in."""
    return [*(["--preset", preset] if preset else []),
            *(arg for text in overrides or [] for arg in ("--set", text)),
            *(["--data-dir", str(data_dir)] if data_dir else []),
            *(["--output-dir", str(output_dir)] if output_dir else [])]


def _print_headline(report: Any) -> None:
    """The report's headline in a line per question, as its first screen has them, under the level of their
    intervals (the full sentences are the report's)."""
    if report.brief:
        console.plain(f"headline (Δ [{report.level} simultaneous interval]; verdicts: Holm, family-wise error 5%):",
                      wrap=True)
    for line in report.brief:
        console.plain(f"- {line}")


def report_cmd(
    name: Annotated[str | None, typer.Argument(help="Ablation to report (default with --all: every ablation "
                                               "that has runs).")] = None,
    preset: AblationPresetOpt = None,
    config: AblationConfigOpt = None,
    set_: AblationSetOpt = None,
    all_: Annotated[bool, typer.Option("--all", help="Also (or only) write the summary across ablations, "
                                       "reports/index.html.")] = False,
    out: Annotated[Path, typer.Option("--out", help="Folder of the reports.")] = Path("reports"),
    ui_url: UiUrlOpt = None,
    data_dir: DataDirOpt = None,
    output_dir: OutputDirOpt = None,
    browser_check: Annotated[Path | None, typer.Option(
        "--browser-check", metavar="DIR",
        help="Also look at the report in headless Chromium: start `mlflow ui` on a free loopback port, check "
             "for broken images, tables wider than the page at 1,200 px and links that do not resolve, and save "
             "screenshots of the report and the MLflow views (effects, scores and pretraining curves by arm) in DIR. "
             "Needs Chromium (Debian: apt-get install chromium).")] = None,
) -> None:
    """Render reports/NAME (report.md, report.html, figures, metrics.json, plots) from the ablation's MLflow runs.

    Without --preset, --config or --set, reports the ablation's most recent invocation. Units not finished yet are
    listed as missing. The report is also logged to the ablation's parent MLflow run.
    """
    from bvr.ablation.manifest import Manifest, find_manifest, latest_manifests
    from bvr.ops.views import write_report_views
    from bvr.report.render import render_report, render_summary

    outputs = output_dir or Path("outputs")
    if name is None and not all_:
        raise BvrError("name an ablation or pass --all", where="report",
                       hint="e.g. bvr report masking --preset tiny")
    overrides = Overrides.of(config, set_)
    if name is not None:
        plan = (ablation_plan(name, preset, overrides, data_dir, outputs)
                if preset is not None or overrides.texts else None)
        path = plan.manifest_path if plan is not None else find_manifest(name, outputs)
        if plan is not None and not path.is_file():  # made with the data folder named another way?
            from bvr.ablation.locate import made_elsewhere

            found = made_elsewhere(plan, lambda other: ablation_plan(name, preset, overrides, Path(other), outputs))
            if found is not None:
                path = found.manifest
                console.plain(found.note(), wrap=True)
        if not path.is_file():
            raise BvrError(f"no runs of ablation '{name}' with these settings ({path})", where="report",
                           hint=f"run `bvr ablate {name}" + (f" --preset {preset}" if preset else "") + "` first")
        check_writable(out, REPORTS_FOLDER)
        result = render_report(Manifest.load(path), out / Path(name).stem, workdir=Path.cwd(), ui_url=ui_url,
                               write_views=write_report_views)
        console.plain(f"wrote {result.html}{_partial(result)}")
        for line in result.missing:
            console.plain(f"  missing: {line}", wrap=True)
        _print_headline(result)
        if browser_check is not None:
            _browser_check(Manifest.load(path), browser_check)
    if all_:
        manifests = latest_manifests(outputs)
        if not manifests:  # else an empty table, as if there were nothing to run
            raise BvrError(f"no ablation has runs under {outputs / 'ablations'}: nothing to summarise",
                           where="report --all", hint="run `bvr ablate NAME` first, or pass the --output-dir it used")
        summary = render_summary(manifests, check_writable(out, REPORTS_FOLDER), workdir=Path.cwd())
        console.plain(f"wrote {summary}")


def _browser_check(manifest: Any, out: Path) -> None:
    """Render a copy of the report linked to a fresh `mlflow ui`, check it in Chromium, save the screenshots."""
    from bvr.ops.browser.check import check_in_browser
    from bvr.ops.browser.chromium import find_chromium, mlflow_ui
    from bvr.report.render import render_report
    from bvr.tracking import store_client, tracking_uri

    if find_chromium() is None:
        raise BvrError("no Chromium found for --browser-check", where="--browser-check",
                       hint="install it (Debian: apt-get install chromium) or set BVR_CHROMIUM to its path")
    uri = tracking_uri(Path.cwd())
    console.plain(f"starting `mlflow ui` for {uri} and headless Chromium (about a minute)...", wrap=True)
    with mlflow_ui(uri) as base:
        copy = render_report(manifest, out / "report", workdir=Path.cwd(), ui_url=base, log_to_mlflow=False)
        parent = manifest.parent_run_id
        experiment_id = store_client(uri).get_run(parent).info.experiment_id if parent else None
        check = check_in_browser(copy.html, base, out, experiment_id=experiment_id, parent_run_id=parent)
    console.plain(f"browser check: {check.images} image(s), {check.links} link(s) into MLflow; screenshots and "
                  f"check.json in {out}")
    if check.problems:
        raise BvrError("; ".join(check.problems), where=str(check.report),
                       hint="see check.json and the screenshots beside it")


def status_cmd(
    name: Annotated[str, typer.Argument(help="The ablation (experiments/NAME.yaml).")],
    preset: Annotated[str | None, typer.Option("--preset", help="Its preset (default: the most recent invocation "
                                               "of any preset).")] = None,
    ui_url: UiUrlOpt = None,
    output_dir: OutputDirOpt = None,
) -> None:
    """What an ablation has done, is doing and has left: units per stage from its manifest, runs in progress from
    MLflow, failed units with their errors, and the command that continues it."""
    from rich.table import Table

    from bvr.ablation.declare import EXPERIMENTS_DIR
    from bvr.ablation.manifest import Manifest, find_manifest
    from bvr.ablation.status import PROGRESS_HEADER, progress, progress_rows, running_now
    from bvr.tracking import tracking_uri, ui_address, ui_base

    path = find_manifest(name, output_dir or Path("outputs"), preset=preset, command="status")
    manifest = Manifest.load(path)
    console.print(f"[bold]{literal(manifest.ablation)}[/bold] (preset {literal(manifest.preset or 'default')}), "
                  f"manifest {literal(path)}, updated {literal(manifest.context.updated or '—')}", highlight=False,
                  soft_wrap=True)
    table = Table(*PROGRESS_HEADER)
    for row in progress_rows(manifest):
        table.add_row(*map(literal, row))
    console.print(table)
    base = ui_base(tracking_uri(Path.cwd()), ui_url)
    running = running_now(manifest, Path.cwd())
    for run in running:
        where = f" {ui_address(base, run.experiment_id, run.run_id)}" if base else f" (run {run.run_id})"
        console.plain(f"running now: {run.name}, process {run.pid}, since {run.started}{where}")
    queued = print_slurm_jobs(path.parent, manifest)
    lines = [f"failed: {line}" for line in dict.fromkeys(f"{s.stage} {e}" for s in progress(manifest)
                                                         for e in s.errors)]  # each failed unit's error, once
    lines += [f"{gap}: bvr ablate adds them, as missing" for gap in manifest.gaps()]
    for line in lines:
        console.plain(line)
    # Commands that run as printed: the experiment as bvr ablate takes it (a file's path as given here, else a shipped
    # experiment by its name, any other by its recorded path), every option of the plan hash, quoted.
    experiment, shipped = manifest.source, EXPERIMENTS_DIR / f"{manifest.ablation}.yaml"
    if Path(name).suffix in (".yaml", ".yml") or Path(name).is_file():
        experiment = name
    elif not manifest.source or Path(manifest.source).resolve() == shipped.resolve():
        experiment = manifest.ablation
    arguments = [experiment, *_plan_options(manifest.preset, manifest.overrides, manifest.context.data_dir, output_dir)]
    if manifest.complete:
        console.plain("complete; the report: " + shlex.join(["bvr", "report", *arguments]))
    elif running or queued:
        console.print("in progress" + (f" ({queued} SLURM job(s) queued or running)" if queued else "") +
                      "; when it stops, the same command continues it", highlight=False)
    else:
        slurm = ["--launcher", "slurm"] if (path.parent / "jobs.json").is_file() else []
        console.plain("next: " + shlex.join(["bvr", "ablate", *arguments, *slurm]) + " (finished units are reused)")


def pipeline_cmd(
    name: AblationArg,
    preset: AblationPresetOpt = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write ('-': print).")] = Path("dvc.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Replace an --output file that bvr did not write (one that "
                                        "does not open with bvr's header).")] = False,
) -> None:
    """Write the DVC pipeline (dvc.yaml) that runs an ablation; then run it with `dvc repro`.

    One stage, `bvr ablate NAME`: bvr reuses every unit a change did not touch, so changing one arm retrains only
    that arm. Its params are the keys `dvc exp show` shows (what the arms declare and data_dir);
    its metrics are the arm-vs-arm differences. The plot templates dvc.yaml names go into .dvc/plots/ beside it,
    and params.yaml where there is none. bvr replaces a dvc.yaml it wrote (its header says so), never the user's
    own without --force; every file is written beside its name and renamed into place, and a symbolic link at one
    of the names is refused (the file it points to stays whole).
    """
    from bvr.ops.dvc.pipeline import render_pipeline, write_pipeline
    from bvr.ops.dvc.plots import TEMPLATES_DIR

    if str(output) != "-":  # a folder that is missing or a file, or a target that is no file, is refused first
        folder = output.parent
        if not folder.is_dir():
            found = f"{folder} is not a folder" if folder.exists() else f"folder {folder} does not exist"
            raise BvrError(found, where=f"--output {output}",
                           hint="give a file in the repository's root folder (dvc.yaml and .dvc/ sit there)")
        check_file_target(output, "pipeline file (--output)")
    plan = ablation_plan(name, preset, Overrides(), None, None)
    if str(output) == "-":
        sys.stdout.write(render_pipeline(plan, Path.cwd(), output="dvc.yaml"))
        return
    write_pipeline(plan, output, force=force)
    console.plain(f"wrote {output} and its plot templates in {output.parent / TEMPLATES_DIR}; run it with: dvc repro")

