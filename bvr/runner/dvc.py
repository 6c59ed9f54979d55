"""``bvr pipeline NAME``: write the DVC pipeline (``dvc.yaml``) that runs an ablation stage by stage.

The stages are the units of :mod:`bvr.runner.run`, each a ``bvr ablate NAME --only UNIT`` call, so ``dvc repro`` and
``bvr ablate`` share every cache and produce the same runs and report:

- ``corpus``, ``tokenizer`` (``foreach`` family), ``data`` (``foreach`` arm): the prepared data;
- ``pretrain`` (``foreach`` arm and pretraining seed) and ``init`` (the no-pretraining control's random encoder,
  one per pretraining seed);
- ``evaluate`` (``foreach`` model and evaluation): zero-shot BLiMP and the frozen-feature probes;
- ``finetune`` (``foreach`` arm x task, the control included);
- ``report``: ``reports/NAME/``, whose ``metrics/`` folder is the DVC metric (one small file per row of ``dvc metrics
  show``: each arm's median per task, each paired difference with its interval) and whose ``plots/`` CSVs are the
  DVC plots, drawn by the templates :data:`PLOT_TEMPLATES` (``.dvc/plots/bvr-*.json``, written beside ``dvc.yaml``).

``bvr ablate`` renders the same report, so ``dvc metrics show`` and ``dvc plots show`` read alike after either
entry point. The stage folder's ``pretrain.json`` files are plain outputs, not metrics: ``bvr ablate`` without
``--stage-dir`` does not write them, and DVC would warn that it failed to load them.

Each stage's ``params`` are the keys of the experiment files it reads, so DVC re-runs exactly what a change
touches: an arm's block (``arms.ARM``) re-runs that arm's stages and the report; the preset and ``base`` re-run
everything. Each stage writes its products under ``pipeline/NAME/`` for DVC to track (the exported model of each
arm, the data statistics, per-task scores); the heavy caches stay in ``outputs/``.

The file is generated rather than written by hand because the stage lists (arms, tasks, tokenizer families)
come from the experiment file at a preset; regenerate it after adding an arm or a task. The data folder comes
from ``params.yaml`` (``data_dir``; empty: the ``BVR_DATA_DIR`` environment variable).

DVC runs each ``cmd`` through a shell, so every value written into one is shell-quoted (:func:`shlex.quote`): a path
with ``$(...)`` or ``;`` in it stays one word and runs nothing. The names DVC substitutes (arms, tasks, units) are
held to :data:`~bvr.ablation.declare.ARM_NAME` and the experiment's to :func:`~bvr.config.loading.is_name`.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from bvr.ablation.plan import Plan, Unit, UnitKind
from bvr.config import PRESETS_DIR, read_yaml
from bvr.errors import BvrError
from bvr.fs import write_text
from bvr.runner.stages import evaluation_file

PARAMS_FILE = "params.yaml"


def _rel(path: Path, root: Path) -> str:
    path = Path(path).resolve()
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _has(data: dict[str, Any], dotted: str) -> bool:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _params(file: Path, keys: list[str], root: Path) -> dict[str, list[str]] | None:
    """``{file: [keys that exist]}``; None when no key exists (DVC refuses a missing key)."""
    data, _ = read_yaml(file)
    present = [k for k in keys if _has(data, k)]
    return {_rel(file, root): present} if present else None


def pipeline_spec(plan: Plan, root: Path = Path(".")) -> dict[str, Any]:
    """The ``dvc.yaml`` content for ``plan`` (paths relative to the repository ``root``)."""
    name, preset = plan.name, plan.preset
    exp = plan.ablation.source
    exp_rel = _rel(exp, root)
    stage_dir = f"pipeline/{name}"
    report_dir = f"reports/{name}"
    bvr = f"bvr ablate {shlex.quote(exp_rel)}"  # the file in the workspace, the one DVC tracks as params
    if preset:
        bvr += f" --preset {shlex.quote(preset)}"
    bvr += f' --data-dir "${{data_dir}}" --stage-dir {shlex.quote(stage_dir)} --no-progress --only'

    shared_keys = ["base", *([f"presets.{preset}"] if preset else [])]
    shared: list[Any] = [{PARAMS_FILE: ["data_dir"]}]
    if preset:
        shared.append({_rel(PRESETS_DIR / f"{preset}.yaml", root): None})
    shared.append(_params(exp, shared_keys, root))
    shared = [p for p in shared if p]

    pretrained = plan.pretrained
    families = plan.families()
    controls = [a for a in plan.arms if a.control]
    stages: dict[str, Any] = {}
    stages["corpus"] = {
        "cmd": f"{bvr} corpus",
        "params": shared,
        "outs": [{f"{stage_dir}/corpus.json": {"cache": False}}],
    }
    stages["tokenizer"] = {
        "foreach": families,
        "do": {"cmd": f"{bvr} tokenizer:${{item}}", "params": _with_arms(shared, exp, plan, root),
               "deps": [f"{stage_dir}/corpus.json"], "outs": [f"{stage_dir}/tokenizer-${{item}}"]},
    }
    stages["data"] = {
        "foreach": {a.label: {"family": a.config.tokenizer.family, "arm": a.arm} for a in pretrained},
        "do": {"cmd": f"{bvr} data:${{key}}", "params": _arm_param(shared, exp, "${item.arm}", root),
               "deps": [f"{stage_dir}/tokenizer-${{item.family}}"],
               "outs": [{f"{stage_dir}/data-${{key}}.json": {"cache": False}}]},
    }
    stages["pretrain"] = {
        "foreach": {a.label: {"arm": a.arm} for a in pretrained},
        "do": {"cmd": f"{bvr} pretrain:${{key}}", "params": _arm_param(shared, exp, "${item.arm}", root),
               "deps": [f"{stage_dir}/data-${{key}}.json"],
               "outs": [f"{stage_dir}/${{key}}/model", {f"{stage_dir}/${{key}}/pretrain.json": {"cache": False}}]},
    }
    if controls:
        stages["init"] = {
            "foreach": {a.label: {"family": a.config.tokenizer.family} for a in controls},
            "do": {"cmd": f"{bvr} pretrain:${{key}}", "params": shared,
                   "deps": [f"{stage_dir}/tokenizer-${{item.family}}"],
                   "outs": [f"{stage_dir}/${{key}}/model",
                            {f"{stage_dir}/${{key}}/pretrain.json": {"cache": False}}]},
        }
    evaluate_keys = ["base.evaluate", *([f"presets.{preset}.evaluate"] if preset else [])]
    evaluate_params = [p for p in (_params(exp, evaluate_keys, root), {PARAMS_FILE: ["data_dir"]}) if p]
    # BLiMP needs blimp/ in the data folder, which is known only when the stage runs.
    evaluations = [Unit(UnitKind.BLIMP, a.label) for a in plan.arms] if plan.evaluations.blimp else []
    evaluations += [Unit(UnitKind.PROBE, a.label, t) for a in plan.arms for t in plan.evaluations.probe_tasks]
    if evaluations:
        stages["evaluate"] = {
            "foreach": {unit.id.replace(":", "-"): {"unit": unit.id, "arm": unit.name, "out": _evaluation_out(unit)}
                        for unit in evaluations},
            "do": {"cmd": f"{bvr} ${{item.unit}}", "params": evaluate_params,
                   "deps": [f"{stage_dir}/${{item.arm}}/model"],
                   "outs": [{f"{stage_dir}/${{item.arm}}/${{item.out}}": {"cache": False}}]},
        }
    finetune_params = [p for p in (
        _params(exp, ["base.finetune", *([f"presets.{preset}.finetune"] if preset else [])], root),
        {_rel(PRESETS_DIR / f"{preset}.yaml", root): None} if preset else None,
        {PARAMS_FILE: ["data_dir"]},
    ) if p]
    stages["finetune"] = {
        "foreach": {f"{a.label}-{t}": {"arm": a.label, "task": t} for a in plan.arms for t in plan.tasks},
        "do": {"cmd": f"{bvr} finetune:${{item.arm}}:${{item.task}}", "params": finetune_params,
               "deps": [f"{stage_dir}/${{item.arm}}/model"],
               "outs": [{f"{stage_dir}/${{item.arm}}/finetune-${{item.task}}.json": {"cache": False}}]},
    }
    stages["report"] = {
        "cmd": f"{bvr} report",
        "deps": [
            *(f"{stage_dir}/{a.label}/pretrain.json" for a in pretrained),
            *(f"{stage_dir}/{u.name}/{_evaluation_out(u)}" for u in evaluations),
            *(f"{stage_dir}/{a.label}/finetune-{t}.json" for a in plan.arms for t in plan.tasks),
            *(["reports/published.yaml"] if (root / "reports" / "published.yaml").is_file() else []),
            *(["bvr/report"] if (root / "bvr" / "report").is_dir() else []),  # a change of the report re-renders it
        ],
        "outs": [f"{report_dir}/report.md", f"{report_dir}/report.html", f"{report_dir}/figures",
                 {f"{report_dir}/metrics.json": {"cache": False}}, {f"{report_dir}/plots": {"cache": False}}],
        "metrics": [{f"{report_dir}/metrics": {"cache": False}}],
    }
    return {"vars": [PARAMS_FILE], "stages": stages, "plots": _plots(plan, report_dir)}


def _evaluation_out(unit: Unit) -> str:
    """The file an evaluation unit writes in its model's stage folder: ``blimp.json``, ``probe-sst2.json``."""
    return evaluation_file(unit.kind.value, unit.task)


def _plots(plan: Plan, report_dir: str) -> list[dict[str, Any]]:
    """Top-level DVC plots over the report's long CSVs, each drawn by one of :data:`PLOT_TEMPLATES`: the
    pretraining curves per arm, every run's score per task by pretraining seed, and the paired differences."""
    plots = f"{report_dir}/plots"
    curves = [("pretrain_train_mlm_loss", "training MLM loss", "MLM loss (nats)"),
              ("pretrain_val_perplexity", "validation perplexity", "perplexity")]
    out: list[dict[str, Any]] = [
        {f"{title} per arm": {"template": "bvr-curves", "title": f"{title} (mean over pretraining seeds)",
                              "x": "step", "x_label": "optimiser step", "y": {f"{plots}/{name}.csv": "value"},
                              "y_label": label}}
        for name, title, label in curves]
    out += [{f"{task} score per seed": {"template": "bvr-seeds",
                                        "title": f"{task}: every fine-tuning run (points), by pretraining seed",
                                        "x": "pretrain_seed", "x_label": "pretraining seed",
                                        "y": {f"{plots}/scores_{task}.csv": "score"}, "y_label": "score (points)"}}
            for task in plan.tasks]
    out.append({"paired differences": {"template": "bvr-differences",
                                       "title": "paired difference b - a per pretraining seed (0: no difference)",
                                       "x": "measure", "x_label": "measure", "y": {f"{plots}/differences.csv":
                                                                                   "difference"},
                                       "y_label": "b - a (points)"}})
    return out


def _template(mark: dict[str, Any], encoding: dict[str, Any]) -> dict[str, Any]:
    """A Vega-Lite plot with DVC's anchors: data, title, x and y (y not forced from zero), labels."""
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "data": {"values": "<DVC_METRIC_DATA>"},
        "title": "<DVC_METRIC_TITLE>",
        "width": 480,
        "height": 300,
        "mark": {**mark, "tooltip": {"content": "data"}},
        "encoding": {
            **encoding,
            "y": {"field": "<DVC_METRIC_Y>", "type": "quantitative", "title": "<DVC_METRIC_Y_LABEL>",
                  "scale": {"zero": False}},
        },
    }


_ARM = {"field": "arm", "type": "nominal", "sort": None, "title": "arm"}
"""Colour (and offset) by arm, in the order the data gives the arms (the report's), not sorted."""
_REV = {"field": "rev", "type": "nominal", "title": "revision"}
"""What DVC adds to each point: ``workspace`` or a commit, told apart under ``dvc plots diff``."""

PLOT_TEMPLATES: dict[str, dict[str, Any]] = {
    "bvr-curves": _template(
        {"type": "line"},
        {"x": {"field": "<DVC_METRIC_X>", "type": "quantitative", "title": "<DVC_METRIC_X_LABEL>"},
         "color": _ARM, "strokeDash": _REV}),
    "bvr-seeds": _template(
        {"type": "point", "filled": True, "size": 60},
        {"x": {"field": "<DVC_METRIC_X>", "type": "ordinal", "title": "<DVC_METRIC_X_LABEL>",
               "axis": {"labelAngle": 0}},
         "xOffset": _ARM, "color": _ARM, "shape": _REV}),
    "bvr-differences": {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "data": {"values": "<DVC_METRIC_DATA>"},
        "title": "<DVC_METRIC_TITLE>",
        "facet": {"column": {"field": "comparison", "type": "nominal", "sort": None, "title": None}},
        "resolve": {"scale": {"y": "independent"}},
        "spec": {
            "width": 240,
            "height": 300,
            "layer": [
                {"mark": {"type": "rule", "color": "black", "strokeDash": [4, 4]}, "encoding": {"y": {"datum": 0}}},
                {"mark": {"type": "point", "filled": True, "size": 60, "tooltip": {"content": "data"}},
                 "encoding": {
                     "x": {"field": "<DVC_METRIC_X>", "type": "nominal", "sort": None,
                           "title": "<DVC_METRIC_X_LABEL>", "axis": {"labelAngle": -30}},
                     "y": {"field": "<DVC_METRIC_Y>", "type": "quantitative", "title": "<DVC_METRIC_Y_LABEL>"},
                     "color": {"field": "<DVC_METRIC_X>", "type": "nominal", "sort": None, "legend": None},
                     "shape": _REV}},
            ],
        },
    },
}
"""DVC plot templates (Vega-Lite) for ``.dvc/plots/NAME.json``: coloured by arm (DVC's own colour only the
revision), seeds as categories, y not forced from zero; the differences one panel per comparison with zero marked.
The HTML of ``dvc plots show`` loads Vega from a CDN; ``dvc plots show --json`` gives these specs filled, offline."""


TEMPLATES_DIR = Path(".dvc") / "plots"
"""Where DVC looks for a plot template named in ``dvc.yaml`` (relative to the repository root)."""


def plot_templates() -> dict[str, str]:
    """``{file name: text}`` of :data:`PLOT_TEMPLATES`, as ``bvr pipeline`` writes them into ``.dvc/plots/``."""
    return {f"{name}.json": json.dumps(content, indent=2, ensure_ascii=False) + "\n"
            for name, content in PLOT_TEMPLATES.items()}


def write_plot_templates(root: Path) -> list[Path]:
    """Write :func:`plot_templates` into ``root/.dvc/plots/`` (the folder ``dvc.yaml`` sits in); returns the files."""
    folder = Path(root) / TEMPLATES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in plot_templates().items():
        write_text(folder / name, text)
        paths.append(folder / name)
    return paths


def _merged(params: list[dict[str, list[str] | None]]) -> list[dict[str, list[str] | None]]:
    """One entry per file, keys joined in order (a file listed whole stays whole)."""
    out: dict[str, list[str] | None] = {}
    for entry in params:
        for file, keys in entry.items():
            if file in out and out[file] is not None and keys is not None:
                out[file] = list(dict.fromkeys([*out[file], *keys]))
            else:
                out[file] = None if keys is None or file in out and out[file] is None else list(keys)
    return [{file: keys} for file, keys in out.items()]


def _arm_param(shared: list[Any], exp: Path, arm: str, root: Path) -> list[dict[str, list[str] | None]]:
    return _merged([*shared, {_rel(exp, root): [f"arms.{arm}"]}])


def _with_arms(shared: list[Any], exp: Path, plan: Plan, root: Path) -> list[Any]:
    """Tokenizers depend on every arm that could set tokenizer keys (the vocab ablation's arms do)."""
    arms = [f"arms.{a.arm}" for a in plan.pretrained if any(k.startswith(("tokenizer.", "corpus."))
                                                             for k in plan.ablation.declared.get(a.arm, ()))]
    extra = _params(exp, sorted(set(arms)), root) if arms else None
    return _merged([*shared, *([extra] if extra else [])])


class _NoAliases(yaml.SafeDumper):
    """Writes repeated lists out in full: DVC files are read by people."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


HEADER = """\
# DVC pipeline of the ablation '{name}' at preset '{preset}', stage by stage (see bvr/runner/dvc.py).
# Generated from {source} by:
#     bvr pipeline {name}{preset_opt} --output {output}
# Re-run that after adding an arm or a task; tests/test_ablate.py checks that this file matches it.
# Run:  dvc repro                (the data folder: data_dir in params.yaml, or BVR_DATA_DIR when it is empty)
#       dvc exp run -S {max_steps}    (vary a parameter)
#       dvc metrics show; dvc plots show      (templates: .dvc/plots/bvr-*.json; docs/dvc.md says how to read them)
"""


def render_pipeline(plan: Plan, root: Path = Path("."), output: str = "dvc.yaml") -> str:
    """The text of ``dvc.yaml``: a header saying how it was made, then the stages.

    Raises:
        BvrError: the experiment file's path, ``output`` or the preset has a line break, which would end the header's
            comment.
    """
    source = _rel(plan.ablation.source, root)
    for text in (source, output, plan.preset or "-"):
        if text.splitlines() != [text]:
            raise BvrError("a name with a line break cannot be written into dvc.yaml", where=repr(text),
                           hint="rename it")
    spec = pipeline_spec(plan, root)
    max_steps = shlex.quote(f"{source}:presets.{plan.preset or 'default'}.training.max_steps=300")
    header = HEADER.format(name=shlex.quote(plan.name), preset=plan.preset or "default", source=source,
                           preset_opt=f" --preset {shlex.quote(plan.preset)}" if plan.preset else "",
                           output=shlex.quote(output),
                           max_steps=max_steps if max_steps.startswith("'") else f"'{max_steps}'")  # quoted as was
    return header + yaml.dump(spec, Dumper=_NoAliases, sort_keys=False, width=120, default_flow_style=False)
