"""``bvr pipeline NAME``: write the DVC pipeline (``dvc.yaml``) that runs an ablation.

One stage, ``ablate``: ``bvr ablate NAME`` itself, so ``dvc repro`` and ``bvr ablate`` share every cache, runs and
report. bvr's runner, not DVC, decides which units run: after any change ``dvc repro`` trains only what it touched,
and an interrupted one continues where it stopped. Outputs: ``pipeline/NAME/`` (``--stage-dir``) and
``reports/NAME/``; metrics: ``reports/NAME/metrics/``; plots: the report's ``plots/`` CSVs (:mod:`bvr.ops.dvc.plots`).

The experiment file and its preset are the dependencies (their folder, as one, where both lie in it); the
``params`` are only the arms' blocks and ``data_dir``: DVC shows every dependency and listed param as a column of
``dvc exp show``, with no setting to hide one. No code is a dependency: ``bvr report NAME`` re-renders. The file is
generated because the arms come from the experiment file; regenerate it after adding an arm.

DVC runs ``cmd`` through a shell, so every value in it is shell-quoted (:func:`shlex.quote`). No value of
``params.yaml`` is substituted: DVC would paste it in before the shell reads it, and no quoting survives a value
holding the quote. The stage passes ``--data-dir-from params.yaml`` and bvr reads ``data_dir`` (empty: the
``BVR_DATA_DIR`` variable) there itself (:func:`read_data_dir`); listed as a param, it still re-runs the stage.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bvr.ablation.plan import Plan
from bvr.config import PRESETS_DIR, read_yaml
from bvr.errors import BvrError
from bvr.fs import refuse_link, write_text
from bvr.ops.dvc.plots import PAGE_TEMPLATE, TEMPLATES_DIR, plot_templates, plots_spec, write_plot_templates

PARAMS_FILE = "params.yaml"
PARAMS_TEXT = "# Read by dvc.yaml. data_dir: the data folder; empty: the BVR_DATA_DIR variable.\ndata_dir: ''\n"
"""What ``bvr pipeline`` writes into ``params.yaml`` where there is none."""


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


def _display_params(plan: Plan, exp: Path, root: Path) -> list[dict[str, list[str]]]:
    """The keys ``dvc exp show`` shows as the ablation's params (only these: see the module's docstring):
    ``data_dir`` and each pretrained arm's block that the file holds (DVC refuses a missing key)."""
    data, _ = read_yaml(exp)
    arms = [key for key in dict.fromkeys(f"arms.{a.arm}" for a in plan.pretrained) if _has(data, key)]
    return [{PARAMS_FILE: ["data_dir"]}, *([{_rel(exp, root): arms}] if arms else [])]


def _config_deps(plan: Plan, exp: Path, root: Path) -> list[str]:
    """What the stage reads besides ``params.yaml``: the experiment file and its preset, as one dependency on the
    folder holding both where there is one (one column of ``dvc exp show``), else each file."""
    files = [exp, *([PRESETS_DIR / f"{plan.preset}.yaml"] if plan.preset else [])]
    folder = exp.resolve().parent
    inside = folder != Path(root).resolve() and all(f.resolve().is_relative_to(folder) for f in files)
    return [_rel(folder, root)] if inside else [_rel(f, root) for f in files]


def pipeline_spec(plan: Plan, root: Path = Path(".")) -> dict[str, Any]:
    """The ``dvc.yaml`` content for ``plan`` (paths relative to the repository ``root``): one stage, ``ablate``."""
    name, preset = plan.name, plan.preset
    exp = plan.ablation.source
    stage_dir, report_dir = f"pipeline/{name}", f"reports/{name}"
    cmd = f"bvr ablate {shlex.quote(_rel(exp, root))}"  # the file in the workspace, the one DVC tracks
    if preset:
        cmd += f" --preset {shlex.quote(preset)}"
    cmd += f" --data-dir-from {PARAMS_FILE} --stage-dir {shlex.quote(stage_dir)} --no-progress"
    stage = {
        "cmd": cmd,
        "params": _display_params(plan, exp, root),
        "deps": _config_deps(plan, exp, root),
        "outs": [stage_dir, *(f"{report_dir}/{out}" for out in ("report.md", "report.html", "figures",
                                                                 "metrics.json", "plots"))],
        "metrics": [f"{report_dir}/metrics"],
    }
    return {"stages": {"ablate": stage}, "plots": plots_spec(plan, report_dir)}


def _params_data_dir(root: Path) -> str:
    """``data_dir`` in ``root/params.yaml``, or '' (unset: the stages read ``BVR_DATA_DIR``, which DVC does not
    track, so a run with any data folder stands for them)."""
    params = Path(root) / PARAMS_FILE
    return read_data_dir(params) if params.is_file() else ""


def read_data_dir(params: Path) -> str:
    """``data_dir`` in the params file ``params`` as written, or '' where unset or empty: what the stages'
    ``bvr ablate --data-dir-from params.yaml`` reads, so that no character of it passes through a shell."""
    value = read_yaml(params, "params file")[0].get("data_dir")
    if isinstance(value, dict | list):
        raise BvrError(f"data_dir is a {type(value).__name__}, not a folder's path", where=params,
                       hint="write the data folder's path, or '' to read BVR_DATA_DIR")
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Joined:
    """How a full ``bvr ablate`` run joins the DVC pipeline of its folder: where it also writes each unit's products
    (``pipeline/NAME``), or why it cannot stand for the stages (then nothing is written for DVC)."""

    stage_dir: Path | None
    why_not: str | None = None


def join_pipeline(plan: Plan, root: Path = Path(".")) -> Joined | None:
    """Whether ``bvr ablate`` run in ``root`` can record itself as ``dvc repro`` of ``root/dvc.yaml`` would have:
    ``dvc.yaml`` holds ``plan``'s stages as ``bvr pipeline`` writes them and the run is theirs (no ``--set``, the
    default output folder, ``params.yaml``'s data folder). The run then writes the stage folder and, once complete,
    :func:`record_lock` records it. None where ``dvc.yaml`` is missing or runs another ablation or preset."""
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
    set_in_params = _params_data_dir(root)  # relative to root, where DVC runs the stages
    wanted = (root / Path(set_in_params).expanduser()).resolve()
    if not (root / ".dvc").is_dir():
        why = "no .dvc folder (run `dvc init`)"
    elif plan.overrides:
        why = f"--set {' '.join(plan.overrides)} is not in the stages"
    elif Path(plan.output_dir).resolve() != (root / "outputs").resolve():
        why = f"the output folder {plan.output_dir} is not the stages' ({root / 'outputs'})"
    elif set_in_params and (plan.data_dir and Path(plan.data_dir).resolve()) != wanted:
        why = f"the data folder {plan.data_dir or '(none)'} is not data_dir in {PARAMS_FILE} ({set_in_params})"
    else:
        return Joined(root / "pipeline" / plan.name)
    return Joined(None, f"dvc.lock not recorded: {why}; dvc repro will run every stage (each reuses what is cached)")


def record_lock(root: Path, data_dir: Path | None) -> str:
    """Record the workspace in ``root/dvc.lock`` (``dvc commit --force``; the outputs go into DVC's cache); returns
    what to tell the user, naming the data folder the run read and where ``dvc repro`` will take it from."""
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
    recorded = f"{len(stages)} stage{'' if len(stages) == 1 else 's'}"
    return (f"DVC: recorded {recorded} in dvc.lock (commit it with git); dvc status is clean and dvc repro "
            f"runs nothing. Data folder {data_dir or '(none)'}; dvc repro reads it from {source}")


class _NoAliases(yaml.SafeDumper):
    """Writes repeated lists out in full: DVC files are read by people."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


HEADER = """\
# DVC pipeline of the ablation '{name}' at preset '{preset}': one stage, bvr ablate (see bvr/ops/dvc/pipeline.py).
# Generated from {source} by:
#     bvr pipeline {name}{preset_opt} --output {output}
# Re-run that after adding an arm; tests/test_ablate.py checks that this file matches it.
# Run:  dvc repro                (the data folder: data_dir in params.yaml, or BVR_DATA_DIR when it is empty)
#       dvc exp run -S {max_steps}    (vary a parameter)
#       dvc metrics show; dvc plots show      (templates: .dvc/plots/bvr-*.json; docs/dvc.md says how to read them)
"""


def render_pipeline(plan: Plan, root: Path = Path("."), output: str = "dvc.yaml") -> str:
    """The text of ``dvc.yaml``: a header saying how it was made, then the stages. A name with a line break (the
    experiment file's, ``output``, the preset) is refused: it would end the header's comment."""
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


def write_pipeline(plan: Plan, output: Path, *, force: bool = False) -> None:
    """``bvr pipeline``: write ``output`` (:func:`render_pipeline`), the plot templates beside it and, where there is
    none, ``params.yaml``. A symbolic link at a name it writes is refused before anything is written; so, without
    ``force``, is an ``output`` that does not open with bvr's header."""
    root = output.parent
    params = root / PARAMS_FILE
    templates = [root / TEMPLATES_DIR / name for name in [*plot_templates(), PAGE_TEMPLATE]]
    for path in [output, *templates, *([] if params.exists() else [params])]:
        refuse_link(path)
    ours = HEADER.split("'", 1)[0]  # how bvr's header opens
    if output.exists() and not force and not output.read_text(encoding="utf-8", errors="replace").startswith(ours):
        raise BvrError("a file bvr pipeline did not write (its first line is not bvr's header); bvr does not replace "
                       "it", where=output, hint="pass --force to replace it, or --output another file")
    write_text(output, render_pipeline(plan, Path.cwd(), output=str(output)))
    write_plot_templates(root)
    if not params.exists():
        write_text(params, PARAMS_TEXT)

