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
  DVC plots, drawn by the templates of :mod:`bvr.runner.dvc_plots` (``.dvc/plots/``, written beside ``dvc.yaml``).

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
held to :data:`~bvr.ablation.declare.ARM_NAME` and the experiment's to :func:`~bvr.config.loading.is_name`. No value
of ``params.yaml`` is substituted at all: DVC would paste it into the command before the shell reads it, and no
quoting survives a value holding the quote. The stages pass ``--data-dir-from params.yaml`` and bvr reads
``data_dir`` there itself (:func:`read_data_dir`); each stage still lists ``params.yaml: [data_dir]``, so DVC re-runs
them when it changes.
"""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bvr.ablation.plan import Plan, Unit, UnitKind
from bvr.config import PRESETS_DIR, read_yaml
from bvr.errors import BvrError
from bvr.runner.dvc_plots import plots_spec
from bvr.runner.stage_folder import evaluation_file

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


def _sections(file: Path, keys: list[str], apart: tuple[str, ...]) -> list[str]:
    """``KEY.SECTION`` for every section under each of ``keys`` in ``file`` but those ``apart``; ``KEY`` itself where
    it holds no mapping."""
    data, _ = read_yaml(file)
    out = []
    for key in keys:
        node: Any = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            out += [f"{key}.{section}" for section in node if section not in apart]
        elif node is not None:
            out.append(key)
    return out


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
    bvr += f" --data-dir-from {PARAMS_FILE} --stage-dir {shlex.quote(stage_dir)} --no-progress --only"

    # The sections of base and of the preset that pretraining reads; evaluate and finetune are their stages' own. No
    # key lies under another any stage lists, or DVC, merging them, would show a list twice (`dvc params diff`).
    shared_keys = _sections(exp, ["base", *([f"presets.{preset}"] if preset else [])], apart=("evaluate", "finetune"))
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
        "outs": [f"{stage_dir}/corpus.json"],
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
               "outs": [f"{stage_dir}/data-${{key}}.json"]},
    }
    stages["pretrain"] = {
        "foreach": {a.label: {"arm": a.arm} for a in pretrained},
        "do": {"cmd": f"{bvr} pretrain:${{key}}", "params": _arm_param(shared, exp, "${item.arm}", root),
               "deps": [f"{stage_dir}/data-${{key}}.json"],
               "outs": [f"{stage_dir}/${{key}}/model", f"{stage_dir}/${{key}}/pretrain.json"]},
    }
    if controls:
        stages["init"] = {
            "foreach": {a.label: {"family": a.config.tokenizer.family} for a in controls},
            "do": {"cmd": f"{bvr} pretrain:${{key}}", "params": shared,
                   "deps": [f"{stage_dir}/tokenizer-${{item.family}}"],
                   "outs": [f"{stage_dir}/${{key}}/model",
                            f"{stage_dir}/${{key}}/pretrain.json"]},
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
                   "outs": [f"{stage_dir}/${{item.arm}}/${{item.out}}"]},
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
               "outs": [f"{stage_dir}/${{item.arm}}/finetune-${{item.task}}.json"]},
    }
    stages["report"] = {
        "cmd": f"{bvr} report",
        "deps": [
            # The whole stage folder: after every other stage, in one column of `dvc exp show` (the files it reads,
            # ARM/pretrain.json, ARM/blimp.json, ARM/probe-TASK.json, ARM/finetune-TASK.json, would be one each).
            stage_dir,
            *(["reports/published.yaml"] if (root / "reports" / "published.yaml").is_file() else []),
            *(["bvr/report"] if (root / "bvr" / "report").is_dir() else []),  # a change of the report re-renders it
        ],
        "outs": [f"{report_dir}/report.md", f"{report_dir}/report.html", f"{report_dir}/figures",
                 f"{report_dir}/metrics.json", f"{report_dir}/plots"],
        "metrics": [f"{report_dir}/metrics"],
    }
    return {"stages": stages, "plots": plots_spec(plan, report_dir)}


def _evaluation_out(unit: Unit) -> str:
    """The file an evaluation unit writes in its model's stage folder: ``blimp.json``, ``probe-sst2.json``."""
    return evaluation_file(unit.kind.value, unit.task)


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


def pipeline_data_dir(root: Path) -> Path | None:
    """The data folder dvc.yaml's stages pass to bvr: ``data_dir`` in ``params.yaml`` (relative to ``root``, where
    DVC runs them), or the ``BVR_DATA_DIR`` variable where that is empty; None when neither is set."""
    value = _params_data_dir(root) or os.environ.get("BVR_DATA_DIR", "")
    return (Path(root) / Path(value).expanduser()).resolve() if value else None


def _params_data_dir(root: Path) -> str:
    """``data_dir`` in ``root/params.yaml``, or '' (unset: the stages read ``BVR_DATA_DIR``, which DVC does not
    track, so a run with any data folder stands for them)."""
    params = Path(root) / PARAMS_FILE
    return read_data_dir(params) if params.is_file() else ""


def read_data_dir(params: Path) -> str:
    """``data_dir`` in the params file ``params`` as it is written there, or '' where it is unset or empty: what the
    stages' ``bvr ablate --data-dir-from params.yaml`` reads, so that no character of it passes through a shell.

    Raises:
        BvrError: the file is missing or not a YAML mapping (:func:`~bvr.config.read_yaml`), or ``data_dir`` holds a
            list or a mapping rather than a path.
    """
    value = read_yaml(params, "params file")[0].get("data_dir")
    if isinstance(value, dict | list):
        raise BvrError(f"data_dir is a {type(value).__name__}, not a folder's path", where=params,
                       hint="write the data folder's path, or '' to read BVR_DATA_DIR")
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Joined:
    """How a full ``bvr ablate`` run joins the DVC pipeline of its folder (:func:`join_pipeline`).

    Attributes:
        stage_dir: where the run also writes each unit's products, as the stages would (``pipeline/NAME``); None
            when the run cannot stand for the stages.
        why_not: why the run cannot stand for the stages (then nothing is written for DVC), or None.
    """

    stage_dir: Path | None
    why_not: str | None = None


def join_pipeline(plan: Plan, root: Path = Path(".")) -> Joined | None:
    """Whether ``bvr ablate`` run in ``root`` can record itself as ``dvc repro`` of ``root/dvc.yaml`` would have.

    It can when ``dvc.yaml`` holds this ablation's stages as ``bvr pipeline`` writes them for ``plan`` and the run is
    the one those stages make: no ``--set``, the default output folder and, where ``params.yaml`` sets ``data_dir``,
    that data folder. The run then writes the stage folder and, once complete, :func:`record_lock`
    records it in ``dvc.lock``, so ``dvc repro`` right after it runs nothing and ``dvc status`` is clean.

    Returns:
        None when ``dvc.yaml`` is missing or runs another ablation or preset; else a :class:`Joined`, with the
        reason when the run differs from the stages.
    """
    root = Path(root)
    file = root / "dvc.yaml"
    if not file.is_file():
        return None
    try:
        stages = (yaml.safe_load(file.read_text(encoding="utf-8")) or {}).get("stages")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    if stages != pipeline_spec(plan, root)["stages"]:
        return None
    wanted = pipeline_data_dir(root)
    if not (root / ".dvc").is_dir():
        why = "no .dvc folder (run `dvc init`)"
    elif plan.overrides:
        why = f"--set {' '.join(plan.overrides)} is not in the stages"
    elif Path(plan.output_dir).resolve() != (root / "outputs").resolve():
        why = f"the output folder {plan.output_dir} is not the stages' ({root / 'outputs'})"
    elif (set_in_params := _params_data_dir(root)) and (plan.data_dir and Path(plan.data_dir).resolve()) != wanted:
        why = f"the data folder {plan.data_dir or '(none)'} is not data_dir in {PARAMS_FILE} ({set_in_params})"
    else:
        return Joined(root / "pipeline" / plan.name)
    return Joined(None, f"dvc.lock not recorded: {why}; dvc repro will run every stage (each reuses what is cached)")


def record_lock(root: Path, data_dir: Path | None) -> str:
    """Record the workspace in ``root/dvc.lock`` (``dvc commit --force``: every stage's dependencies, params and
    outputs as they are now; the outputs go into DVC's cache); returns what to tell the user, naming the data
    folder the run read (``data_dir``) and where ``dvc repro`` will take it from."""
    from dvc.repo import Repo

    dvc_log = logging.getLogger("dvc")
    level = dvc_log.level
    dvc_log.setLevel(logging.WARNING)  # its "Updating lock file 'dvc.lock'" is said by the line returned
    try:
        with Repo(str(root)) as repo:
            stages = repo.commit(None, force=True)
    finally:
        dvc_log.setLevel(level)
    source = (f"data_dir in {PARAMS_FILE}" if _params_data_dir(root) else
              f"BVR_DATA_DIR, as data_dir in {PARAMS_FILE} is empty")
    return (f"DVC: recorded {len(stages)} stages in dvc.lock (commit it with git); dvc status is clean and dvc repro "
            f"runs nothing. Data folder {data_dir or '(none)'}; dvc repro reads it from {source}")


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
