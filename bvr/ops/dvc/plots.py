"""The DVC plots of an ablation's pipeline: what ``dvc.yaml`` lists under ``plots``, bvr's Vega-Lite templates
(``.dvc/plots/bvr-*.json``) and the page ``dvc plots show`` writes. The report's figures come first, as images that
render with no network; the Vega-Lite plots over the report's CSVs are interactive and compare revisions under
``dvc plots diff``, and as DVC's page loads Vega from a CDN, bvr's page says in their place when it did not load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bvr.ablation.plan import Plan
from bvr.fs import write_text


def plots_spec(plan: Plan, report_dir: str) -> list[Any]:
    """Top-level DVC plots: the report's figures (images), then over its CSVs (:data:`PLOT_TEMPLATES`) the pretraining
    curves per arm, every run's score per task by pretraining seed, and the paired differences."""
    # Here, not at the top: bvr.report.render draws with matplotlib, which each `bvr ablate --only UNIT` stage would
    # otherwise import (two of a data stage's eleven seconds) to read two folder names.
    from bvr.report.render import FIGURES_DIR, PLOTS_DIR

    plots = f"{report_dir}/{PLOTS_DIR}"
    out: list[Any] = [f"{report_dir}/{FIGURES_DIR}"]
    curves = [("pretrain_train_mlm_loss", "training MLM loss", "MLM loss (nats)"),
              ("pretrain_val_perplexity", "validation perplexity", "perplexity")]
    out += [
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
revision), seeds as categories, y not forced from zero; the differences one panel per comparison with zero marked."""


TEMPLATES_DIR = Path(".dvc") / "plots"
"""Where DVC looks for a plot template named in ``dvc.yaml`` (relative to the repository root)."""


def plot_templates() -> dict[str, str]:
    """``{file name: text}`` of :data:`PLOT_TEMPLATES`, as ``bvr pipeline`` writes them into ``.dvc/plots/``."""
    return {f"{name}.json": json.dumps(content, indent=2, ensure_ascii=False) + "\n"
            for name, content in PLOT_TEMPLATES.items()}


PAGE_TEMPLATE = "bvr-page.html"
"""The page ``dvc plots show`` writes, in :data:`TEMPLATES_DIR` (named in ``.dvc/config``: ``plots.html_template``)."""

_PACKAGE = Path(__file__).resolve().parents[2]  # bvr/


def page_template(package: Path = _PACKAGE) -> str:
    """DVC's page layout with a note in place of each Vega plot when Vega cannot be loaded: the checkout's committed
    ``.dvc/plots/bvr-page.html``, else the copy an installed package carries in ``bvr/_dvc_plots/`` (``setup.py``)."""
    checkout = package.parent / TEMPLATES_DIR / PAGE_TEMPLATE
    if (package.parent / "pyproject.toml").is_file() and checkout.is_file():
        return checkout.read_text(encoding="utf-8")
    return (package / "_dvc_plots" / PAGE_TEMPLATE).read_text(encoding="utf-8")


def write_plot_templates(root: Path) -> None:
    """Write :func:`plot_templates` and the page template into ``root/.dvc/plots/`` (the folder ``dvc.yaml`` sits
    in) and name the page in ``root/.dvc/config`` unless a page is named there already."""
    folder = Path(root) / TEMPLATES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in {**plot_templates(), PAGE_TEMPLATE: page_template()}.items():
        write_text(folder / name, text)
    _name_page(Path(root) / ".dvc" / "config")


def _name_page(config: Path) -> None:
    """Set ``plots.html_template`` in DVC's repository config (a ``[plots]`` section added or extended), unless set."""
    text = config.read_text(encoding="utf-8") if config.exists() else ""
    if "html_template" in text:
        return
    line = f"    html_template = plots/{PAGE_TEMPLATE}\n"
    lines = text.splitlines(keepends=True)
    if "[plots]\n" in lines:
        lines.insert(lines.index("[plots]\n") + 1, line)
    else:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines += ["[plots]\n", line]
    write_text(config, "".join(lines))
