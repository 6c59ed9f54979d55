"""The sections of a report, as document blocks: what each table and paragraph says, and where its numbers
come from.

:func:`report_blocks` lays out one ablation's report: the headline (did pretraining help at this budget, then the
ablation's effect), what is missing, the tests against the control and between arms, every measure per arm with its
variance components, BLiMP beside the published models, the fine-tuning scores, the paper beside our runs,
pretraining, the setup, and how to read it all. :func:`summary_blocks` lays out the index across ablations. Every
number is taken from an :class:`~bvr.report.analysis.Analysis` (so from MLflow, in points); every run id links to the
MLflow UI.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bvr.display import duration
from bvr.report.analysis import (
    PRETRAIN_TASK,
    Analysis,
    Comparison,
    Measure,
    headlines,
    metric_label,
    pretrain_table,
)
from bvr.report.collect import Collected
from bvr.report.document import Block, Bullets, Cell, Figure, Heading, Link, Notice, Paragraph, Table
from bvr.report.inference import adjusted_confidence
from bvr.report.stats import Summary

MLFLOW_UI = "http://127.0.0.1:5000"
"""Where ``mlflow ui`` serves a local store; run links point there unless the store is itself a server."""


# ---------------------------------------------------------------------------------------------------------------
# Formatting


def _fmt(value: float | None, digits: int = 1) -> str:
    """A number with ``digits`` decimals; '—' for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def _signed(value: float | None, digits: int = 1) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:+.{digits}f}"


def _count(value: float | None) -> str:
    """'12.3M', '45.6K', '812'; '—' for None or NaN.

    >>> _count(12_345_678), _count(45_600), _count(812), _count(float("nan"))
    ('12.3M', '45.6K', '812', '—')
    """
    if value is None or math.isnan(value):
        return "—"
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= size:
            return f"{value / size:.1f}{suffix}"
    return f"{value:.0f}"


def _rate(value: float | None) -> str:
    """A throughput with thousands separated: '12,345'."""
    return "—" if value is None or math.isnan(value) else f"{value:,.0f}"


def _ci(low: float, high: float, digits: int = 1) -> str:
    return "—" if math.isnan(low) else f"[{low:.{digits}f}, {high:.{digits}f}]"


def _digits(metric: str) -> int:
    """Decimals for a metric: scores in points get 1, perplexities and losses 2."""
    return 1 if not (metric.endswith("perplexity") or metric.endswith("loss")) else 2


class _Links:
    """Links to runs in the MLflow UI: ``BASE/#/experiments/ID/runs/RUN``."""

    def __init__(self, collected: Collected) -> None:
        base = collected.uri if collected.uri.startswith(("http://", "https://")) else MLFLOW_UI
        self.base = base.rstrip("/")
        self.experiment_id = collected.experiment_id

    def run(self, run_id: str, text: str | None = None) -> Cell:
        if self.experiment_id is None:
            return text or run_id[:8]
        return Link(text or run_id[:8], f"{self.base}/#/experiments/{self.experiment_id}/runs/{run_id}")

    def experiment(self, name: str) -> Cell:
        if self.experiment_id is None:
            return name
        return Link(name, f"{self.base}/#/experiments/{self.experiment_id}")


# ---------------------------------------------------------------------------------------------------------------
# Sections


def _title(a: Analysis) -> list[Block]:
    m, missing = a.collected.manifest, a.collected.missing
    status = ("Complete: every planned run is in MLflow and agrees with the manifest." if not missing else
              f"Partial: {len(missing)} planned item(s) are missing or disagree (listed under Missing); the "
              "statistics use the runs that are there.")
    facts = [f"source {_relative(m.source)}", f"preset {m.preset or 'none (defaults)'}",
             f"plan {m.plan_hash or '—'}"]
    return [Heading(f"Ablation report: {a.collected.ablation}", 1),
            Paragraph(str(m.description or "").strip() or "(no description)"),
            Paragraph(status), Paragraph(" · ".join(facts))]


def _effect_cells(c: Comparison) -> list[str]:
    """Δ, its simultaneous interval, the Holm-adjusted p and the detectable effect of one comparison."""
    d = 3 if c.task == "mlm" else 1
    if not c.test.tested:
        return [_signed(c.estimate, d), f"— (n={c.test.n})", "—", "—"]
    p = "<0.001" if c.adjusted_p < 0.001 else f"{c.adjusted_p:.3f}"
    return [_signed(c.estimate, d), _ci(c.interval.ci_low, c.interval.ci_high, d), p, _fmt(c.mde, d)]


def _level(a: Analysis) -> str:
    m = a.m
    return f"{adjusted_confidence(0.95, m) * 100:.4g}%" if m else "95%"


def _headline(a: Analysis) -> list[Block]:
    lines = headlines(a)
    if not lines:
        return [Heading("Headline"), Paragraph("No comparison yet: no measure has values for two arms.")]
    intro = Paragraph(f"First: did pretraining help at this budget (each arm against the control)? Then the "
                      f"ablation's effect on each measure. Differences in points (MLM loss in nats), with "
                      f"{_level(a)} simultaneous intervals; verdicts follow Holm-adjusted p-values over all "
                      f"{a.m} tested comparisons of this report (family-wise error 5%).")
    return [Heading("Headline"), intro, Bullets(tuple(lines))]


def _sanity(a: Analysis, links: _Links) -> list[Block]:
    if not a.control:
        return []
    rows = []
    for c in a.control:
        arm_units, control_units = c.measure.units(c.b), c.measure.units(c.a)
        rows.append([c.measure.title, c.b, f"{_fmt(_mean(arm_units))} (n={len(arm_units)})",
                     f"{_fmt(_mean(control_units))} (n={len(control_units)})", *_effect_cells(c),
                     c.ours])
    header = ["measure", "arm", "arm mean", "control mean", "Δ arm − control", f"{_level(a)} CI", "Holm p",
              "detectable Δ", "verdict"]
    caption = ("Means over pretraining seeds (each seed's fine-tuning or probe seeds averaged first). Δ pairs arm "
               "seed s with the control's seed-s initialisation, the weights that arm started from; paired t over "
               "pretraining seeds; intervals Bonferroni-simultaneous over the report; detectable Δ: the smallest "
               "true difference found with 80% power at Holm's strictest level.")
    return [Heading("Did pretraining help at this budget?"),
            Table(header, rows, align="LLrrrrrrl", caption=caption)]


def _ablation(a: Analysis) -> list[Block]:
    if not a.comparisons:
        return []
    rows = []
    for c in a.comparisons:
        d = 3 if c.task == "mlm" else 1
        rows.append([c.measure.title, c.name, *_effect_cells(c), _signed(c.published, d),
                     str(c.needed) if c.needed is not None else "—", c.ours, c.agreement])
    header = ["measure", "b − a", "Δ", f"{_level(a)} CI", "Holm p", "detectable Δ", "paper Δ",
              "seeds for the paper's Δ", "we see", "beside the paper"]
    caption = ("b − a over pretraining seeds (paired t), in the same family of tests as the section above. "
               "seeds for the paper's Δ: pretraining seeds per arm that would detect the published difference with "
               "80% power at this report's strictest level and at the noise measured here.")
    return [Heading("The ablation's effect"), Table(header, rows, align="LLrrrrrrll", caption=caption)]


def _mean(values: dict[int, float]) -> float | None:
    return sum(values.values()) / len(values) if values else None


def _measure_runs(a: Analysis, links: _Links, x: Measure, arm: str) -> Cell:
    """Links to the runs behind one arm's values of a measure, one per pretraining seed (``p0``, ``p1``): the
    evaluation runs for BLiMP and the probes, the pretraining runs for MLM loss; fine-tuning runs are linked
    per seed under Fine-tuning scores."""
    if x.key == "mlm":
        rows = a.collected.pretrain[a.collected.pretrain["arm"] == arm]
    elif x.key == "blimp" or x.key.startswith("probe/"):
        frame = a.collected.evaluations
        kind, _, task = x.key.partition("/")
        rows = frame[(frame["arm"] == arm) & (frame["kind"] == kind)]
        rows = rows[rows["task"] == task] if task else rows
    else:
        return "under Fine-tuning scores"
    found = rows.sort_values("pretrain_seed")[["pretrain_seed", "run_id"]].itertuples(index=False)
    return tuple(links.run(run_id, f"p{seed}") for seed, run_id in found) or "—"


def _measures(a: Analysis, links: _Links) -> list[Block]:
    rows = []
    for x in a.measures:
        first = True
        for arm in a.collected.arms:
            units = x.units(arm)
            if not units:
                continue
            mean, low, high = x.mean_interval(arm)
            d = 3 if x.key == "mlm" else 1
            interval = _ci(low, high, d)
            comp = x.components(arm)
            inner = max(comp.n_inner) if comp and comp.n_inner else 1
            rows.append([x.title if first else "", arm, str(len(units)), str(inner), _fmt(mean, d),
                         interval, _fmt(comp.between_sd if comp else None, d),
                         _fmt(comp.within_sd if comp and inner > 1 else None, d),
                         _fmt(x.baseline, d) if first else "", _measure_runs(a, links, x, arm)])
            first = False
    if not rows:
        return []
    caption = ("n: pretraining seeds; inner: fine-tuning or probe seeds per pretraining seed. Mean over pretraining "
               "seeds with its 95% t interval (per arm, not adjusted). SD between: spread of the true per-seed "
               "means across pretraining seeds; SD within: across fine-tuning/probe seeds of one model (one-way "
               "random-effects ANOVA; with one value per model, SD between is their plain spread, which holds "
               "both). baseline: majority class (probes, fine-tuning) or chance (BLiMP). runs: one per pretraining "
               "seed.")
    header = ["measure", "arm", "n", "inner", "mean", "95% CI", "SD between", "SD within", "baseline", "runs"]
    return [Heading("Every measure, per arm"), Table(header, rows, align="LLrrrrrrrl", caption=caption)]


def _blimp(a: Analysis) -> list[Block]:
    x = a.measure("blimp")
    if x is None:
        return []
    details = a.collected.details
    blimp = details[details["kind"] == "blimp"]
    terms = blimp[blimp["key"].str.startswith("blimp/term/")]
    paradigms = sorted({key.removeprefix("blimp/paradigm/") for key in blimp["key"]
                        if key.startswith("blimp/paradigm/")})
    folder = a.collected.manifest.context.data_dir
    published = _published_blimp(folder, paradigms)
    arms = [arm for arm in a.collected.arms if x.units(arm)]
    header = ["", *arms, *published]
    count = f" ({len(paradigms)} paradigms)" if paradigms else ""
    rows = [[f"macro accuracy{count}", *(_fmt(_mean(x.units(arm))) for arm in arms),
             *(_fmt(100 * v["macro"]) for v in published.values())]]
    for term in sorted(set(terms["key"])):
        name = term.removeprefix("blimp/term/")
        cells = []
        for arm in arms:
            values = terms[(terms["key"] == term) & (terms["arm"] == arm)]["value"]
            cells.append(_fmt(100 * values.mean()) if not values.empty else "—")
        rows.append([name, *cells, *(_fmt(100 * v["terms"].get(name, math.nan)) for v in published.values())])
    settings = a.collected.manifest.evaluations_settings
    n = settings.get("blimp_per_paradigm")
    caption = (f"Accuracy in %, pseudo-log-likelihood scoring (each token masked in turn), "
               f"{f'{n} pairs per paradigm (the same pairs for every model)' if n else 'all 1,000 pairs per paradigm'}"
               "; ours are means over pretraining seeds. Published models (BLiMP paper, errata-corrected) score "
               "all pairs with their own (left-to-right) log-probabilities, averaged here over the paradigms our "
               "runs scored. Chance is 50%.")
    return [Heading("BLiMP beside the published models"), Table(header, rows, align="L" + "r" * (len(header) - 1),
                                                               caption=caption)]


_BLIMP_MODELS = {"ngram": "5-gram", "lstm": "LSTM", "txl": "Transformer-XL", "gpt2": "GPT-2"}
"""Columns of BLiMP's ``models_summary.jsonl`` and the paper's names for them (as
``bvr.evaluation.blimp.PUBLISHED_MODELS``, which a report cannot import: that module loads torch)."""


def _published_blimp(data_dir: str | None, paradigms: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """The published models' BLiMP accuracies, fractions: model -> ``{"macro": float, "terms": {term: float}}``.

    Read from the release's ``models_summary.jsonl`` (in ``DATA_DIR/blimp`` or ``DATA_DIR``) and averaged over
    ``paradigms``, the ones our runs scored (all of the file's when empty), so the columns compare like with like.
    Empty when the file is absent or unreadable: the report renders without the published columns.
    """
    if not data_dir:
        return {}
    folder = Path(data_dir) / "blimp"
    path = next((p / "models_summary.jsonl" for p in (folder, folder.parent)
                 if (p / "models_summary.jsonl").is_file()), None)
    if path is None:
        return {}
    accuracy: dict[str, dict[str, float]] = {name: {} for name in _BLIMP_MODELS.values()}
    term_of: dict[str, str] = {}
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            uid = row.get("UID")
            if not uid or uid == "overall" or (paradigms and uid not in paradigms):
                continue
            term_of[uid] = str(row.get("linguistics_term"))
            for column, name in _BLIMP_MODELS.items():
                accuracy[name][uid] = float(row[column])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    out = {}
    for name, by_paradigm in accuracy.items():
        if not by_paradigm:
            continue
        terms: dict[str, list[float]] = {}
        for uid, value in by_paradigm.items():
            terms.setdefault(term_of[uid], []).append(value)
        out[name] = {"macro": sum(by_paradigm.values()) / len(by_paradigm),
                     "terms": {term: sum(v) / len(v) for term, v in sorted(terms.items())}}
    return out


def _missing(a: Analysis) -> list[Block]:
    if not a.collected.missing and not a.notes:
        return []
    blocks: list[Block] = [Heading("Missing")]
    if a.collected.missing:
        blocks.append(Notice(f"{len(a.collected.missing)} planned item(s) are missing or disagree; units without a "
                             "usable run are left out of every statistic below.", tuple(a.collected.missing)))
    if a.notes:
        blocks.append(Bullets(tuple(a.notes)))
    return blocks


def _hardware(hw: dict[str, Any]) -> str:
    """The machine the manifest's context records (:func:`bvr.ablation.hardware.hardware`)."""
    cpu = f"{hw.get('cpu') or 'CPU'} × {hw.get('cpu_count') or '?'}"
    gpu = f"; {hw['gpu']} × {hw.get('gpu_count') or 1}" if hw.get("gpu") else "; no GPU"
    soft = ", ".join(f"{k} {hw[k]}" for k in ("python", "torch") if hw.get(k))
    return f"{cpu}{gpu}" + (f" ({soft}; {hw['platform']})" if soft and hw.get("platform") else "")


def _corpus(a: Analysis) -> str:
    """The pretraining corpus of the first arm (arms share it unless one declares otherwise)."""
    arm = a.collected.arms[0]
    source, path = _config_value(a, arm, "corpus.source"), _config_value(a, arm, "corpus.path")
    cap = _config_value(a, arm, "corpus.max_documents")
    return f"{source}: {path}" + (f", first {cap} documents" if cap not in ("—", "null") else "")


def _commits(a: Analysis) -> str:
    """The manifest's commit, and every other commit a run was tagged with (a mixed ablation must say so)."""
    planned = a.collected.manifest.context.git_commit
    runs = pd.concat([a.collected.pretrain["git_commit"], a.collected.finetune["git_commit"]]).dropna()
    others = sorted(set(runs) - {planned})
    text = planned or "unknown"
    return text + (f" (runs also tagged with {', '.join(others)})" if others else "")


def _context(a: Analysis, links: _Links) -> list[Block]:
    m = a.collected.manifest
    context = m.context
    parent = a.collected.parent_run_id
    rows: list[list[Cell]] = [
        ["arms", ", ".join(a.collected.arms) + (f" (control: {a.collected.control})" if a.collected.control else "")],
        ["tasks", ", ".join(a.collected.tasks) or "—"],
        ["fine-tuning seeds", ", ".join(map(str, m.finetune_seeds)) or "—"],
        ["pretraining seeds", ", ".join(map(str, m.pretrain_seeds)) or "—"],
        ["overrides", ", ".join(m.overrides) or "none"],
        ["corpus", _corpus(a)],
        ["task data", str(context.data_dir or "—")],
        ["hardware", _hardware(context.hardware)],
        ["started / updated", f"{context.started or '—'} / {context.updated or '—'}"],
        ["wall time (all invocations, up to this report)", duration(context.wall_seconds)],
        ["git commit", _commits(a)],
        ["MLflow store", a.collected.uri],
        ["MLflow experiment", links.experiment(a.collected.experiment)],
        ["parent run", links.run(parent, parent) if parent else "—"],
    ]
    return [Heading("Setup"), Table(["setting", "value"], rows), *_arms_table(a, links)]


def _config_value(a: Analysis, arm: str, key: str) -> str:
    """A config value of an arm: its pretraining run's logged param, else the plan's config (the control)."""
    rows = a.collected.pretrain[a.collected.pretrain["arm"] == arm]
    logged = rows[key].dropna() if key in rows else pd.Series(dtype=object)
    if not logged.empty:
        return str(logged.iloc[0])
    value: Any = _arm_config(a, arm)
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "—" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _arm_config(a: Analysis, arm: str) -> dict[str, Any]:
    """The planned config of an arm: the manifest keys configs by label (``static-p0``), one per pretraining seed,
    and the seeds of one arm differ only in their seed."""
    manifest = a.collected.manifest
    configs = manifest.configs
    if isinstance(configs.get(arm), dict):
        return configs[arm]
    labels = [record.label for record in manifest.records() if record.arm == arm]
    return next((configs[label] for label in labels if isinstance(configs.get(label), dict)), {})


def _arms_table(a: Analysis, links: _Links) -> list[Block]:
    declared = a.collected.manifest.declared
    table = pretrain_table(a).set_index("arm")
    rows = []
    for arm in a.collected.arms:
        if arm == a.collected.control:
            change = "no pretraining: the shared base config's encoder, randomly initialised per seed"
        else:
            change = ", ".join(f"{k}={v}" for k, v in (declared.get(arm) or {}).items()) or "—"
        model = "/".join(_config_value(a, arm, f"model.{k}") for k in ("num_layers", "hidden_size", "num_heads"))
        vocab = (_arm_config(a, arm).get("tokenizer") or {}).get("vocab_size")
        family = _config_value(a, arm, "tokenizer.family")
        tokenizer = f"{family} {vocab:,}" if isinstance(vocab, int) else f"{family} (default size)"
        stats = table.loc[arm].to_dict() if arm in table.index else {"runs": []}
        get = stats.get
        rows.append([arm, change, tokenizer, model, _config_value(a, arm, "data.input_format"),
                     _config_value(a, arm, "training.batch_size"), _config_value(a, arm, "training.max_steps"),
                     _count(get("tokens_seen")), _fmt(get("epochs")),
                     f"{_count(get('params_total'))} / {_count(get('params_non_embedding'))}",
                     duration(get("wall_seconds")), tuple(links.run(r) for r in stats["runs"]) or "—"])
    caption = ("Config values are the pretraining runs' MLflow params (the control, never pretrained, shows its "
               "planned config). model: layers/hidden/heads. params: total / without embeddings. Tokens seen, "
               "epochs, parameters and wall time are the runs' run/* metrics.")
    header = ["arm", "changes", "tokenizer", "model", "input", "batch", "steps", "tokens seen", "epochs",
              "params", "wall time", "pretrain run"]
    return [Table(header, rows, align="LlllLrrrrrrl", caption=caption)]


def _seed_links(a: Analysis, links: _Links, rows: pd.DataFrame) -> Cell:
    several = len(a.collected.manifest.pretrain_seeds) > 1 or a.scores["pretrain_seed"].nunique() > 1
    cells = []
    for r in rows.sort_values(["pretrain_seed", "seed"]).itertuples(index=False):
        text = (f"p{r.pretrain_seed}s{r.seed}" if several else f"s{r.seed}") + ("×" if r.collapsed else "")
        cells.append(links.run(r.run_id, text))
    return tuple(cells)


def _summary_cells(s: Summary, digits: int = 1) -> list[str]:
    collapsed = str(s.n_collapsed) if s.n_collapsed else "0"
    return [str(s.n), collapsed, _fmt(s.median, digits), f"{_fmt(s.iqr, digits)} ({_fmt(s.q1, digits)}–"
            f"{_fmt(s.q3, digits)})", f"{_fmt(s.min, digits)}–{_fmt(s.max, digits)}", _fmt(s.mean, digits)]


def _scores(a: Analysis, links: _Links, figures: dict[str, Figure]) -> list[Block]:
    rows = []
    for task in a.tasks:
        first = True
        for arm in a.collected.arms:
            summary = a.summaries.get((arm, task))
            if summary is None:
                continue
            scale = "×100" if a.scales.get(task) == 100 else "points"
            label = f"{task}: {metric_label(a.metric(task))}, {scale}" if first else ""
            seeds = a.scores[(a.scores["arm"] == arm) & (a.scores["task"] == task)]
            rows.append([label, arm, *_summary_cells(summary), _seed_links(a, links, seeds)])
            first = False
    blocks: list[Block] = [Heading("Fine-tuning scores")]
    if not rows:
        return [*blocks, Paragraph("No finished fine-tuning run was found.")]
    caption = ("Scores in points: GLUE and CoNLL-2003 are logged as fractions and shown ×100; SQuAD is logged in "
               "points. Each run's final-epoch score on the headline split, over every pretraining and fine-tuning "
               "seed. n: runs found; collapsed: runs predicting one class, only O tags or only empty answers "
               "(marked × in the runs column), kept in every statistic. IQR with the quartiles (linear "
               "interpolation). Intervals are in 'Every measure, per arm', over pretraining seeds.")
    header = ["task", "arm", "n", "collapsed", "median", "IQR (q1–q3)", "min–max", "mean", "runs"]
    blocks.append(Table(header, rows, align="llrrrrrrl", caption=caption))
    if "scores" in figures:
        blocks.append(figures["scores"])
    return blocks


def _published_rows(a: Analysis) -> list[list[Cell]]:
    """Direction of each effect in the paper and here, for every pair of our arms the paper also has."""
    rows = []
    for c in a.comparisons:
        pub = a.published
        if c.published is None:
            continue
        task = c.measure.task
        label = pub.loc[(pub["task"] == task) & (pub["metric"] == c.metric), "metric_label"].dropna()
        value = {arm: pub.loc[(pub["arm"] == arm) & (pub["task"] == task) & (pub["metric"] == c.metric),
                              "value"].iloc[0] for arm in (c.a, c.b)}
        d = _digits(c.metric)
        rows.append([label.iloc[0] if not label.empty else c.task, c.name, _fmt(value[c.a], d), _fmt(value[c.b], d),
                     _signed(c.published, d), c.paper, f"{_signed(c.estimate, d)} "
                     f"{_ci(c.interval.ci_low, c.interval.ci_high, d)}", c.ours, c.agreement])
    return rows


def _beside_rows(a: Analysis) -> tuple[list[str], list[list[Cell]], list[str]]:
    """Our medians beside the paper's values, per arm the two share and per published column of a task we ran;
    then the headings of the columns left out."""
    pub = a.published.dropna(subset=["task"])
    ran = {*a.tasks, PRETRAIN_TASK}
    every = list(pub[["task", "metric", "metric_label"]].drop_duplicates(["task", "metric"]).itertuples(index=False))
    columns = [c for c in every if c.task in ran]
    skipped = [c.metric_label or c.task for c in every if c.task not in ran]
    ppl = pretrain_table(a).set_index("arm")["val/perplexity"]
    rows = []
    for arm in [arm for arm in a.collected.pretrained_arms if arm in set(pub["arm"])]:
        cells: list[Cell] = [arm]
        for col in columns:
            paper = pub.loc[(pub["arm"] == arm) & (pub["task"] == col.task) & (pub["metric"] == col.metric), "value"]
            d = _digits(col.metric)
            if col.task == PRETRAIN_TASK:
                ours = ppl.get(arm, math.nan)
            else:
                summary = a.summaries.get((arm, col.task))
                ours = summary.median if summary is not None and a.metric(col.task) == col.metric else math.nan
            cells.append(f"{_fmt(paper.iloc[0] if not paper.empty else None, d)} / {_fmt(ours, d)}")
        rows.append(cells)
    return ["arm", *[f"{c.metric_label or c.task} paper / ours" for c in columns]], rows, skipped


def _published(a: Analysis) -> list[Block]:
    key = a.collected.manifest.published
    blocks: list[Block] = [Heading("Beside the paper")]
    if a.published.empty:
        why = (f"reports/published.yaml has no table for '{key}'." if key else
               "No published table informs this ablation.")
        return [*blocks, Paragraph(why)]
    first = a.published.iloc[0]
    blocks.append(Paragraph(f"{first['source']}: {first['setting']}. Paper values in points as printed; ours are "
                            "medians over all our runs, and our differences means over pretraining seeds with their "
                            "simultaneous intervals, in points, at our far smaller scale."))
    direction = _published_rows(a)
    if direction:
        header = ["paper column", "b − a", "paper a", "paper b", "paper Δ", "paper says", "our Δ [simultaneous CI]",
                  "we see", "agreement"]
        caption = ("agreement: Holm rejects and our difference has the paper's sign (agree) or the other sign "
                   "(disagree); inconclusive when Holm does not reject.")
        blocks.append(Table(header, direction, align="lLrrrllll", caption=caption))
    header, beside, skipped = _beside_rows(a)
    if beside and len(header) > 1:
        caption = "'—' where the paper has no value or our runs are missing." + (
            f" Published columns for tasks this ablation does not run: {', '.join(skipped)}." if skipped else "")
        blocks.append(Table(header, beside, align="L" + "r" * (len(header) - 1), caption=caption))
    words = a.published[a.published["task"].isna()]
    if not words.empty:
        blocks.append(Bullets(tuple(f"{r.arm_label}: {r.note}" for r in words.itertuples(index=False))))
    if not direction and words.empty:
        blocks.append(Paragraph("None of the paper's arm pairs was measured here (yet)."))
    return blocks


def _pretraining(a: Analysis, links: _Links, figures: dict[str, Figure]) -> list[Block]:
    table = pretrain_table(a)
    blocks: list[Block] = [Heading("Pretraining")]
    if table.empty:
        return [*blocks, Paragraph("No finished pretraining run was found.")]
    rows = [[r["arm"], _fmt(r["train/mlm_loss"], 3), _fmt(r["val/mlm_loss"], 3), _fmt(r["val/perplexity"], 2),
             _fmt(r["val/nsp_acc"] * 100 if not pd.isna(r["val/nsp_acc"]) else None), _rate(r["tokens_per_s"]),
             duration(r["wall_seconds"]), _count(r["steps"]), tuple(links.run(x) for x in r["runs"])]
            for r in table.to_dict("records")]
    header = ["arm", "train MLM loss", "val MLM loss", "val perplexity", "val NSP acc (%)", "tokens / s", "wall time",
              "last step", "runs"]
    caption = ("Last logged values. tokens / s: median of the logged training throughput (validation excluded). "
               "Perplexity counts tokens of the arm's own vocabulary.")
    blocks.append(Table(header, rows, align="lrrrrrrrl", caption=caption))
    blocks += [figures[k] for k in ("curves", "throughput", "parameters") if k in figures]
    return blocks


def _methods(a: Analysis) -> list[Block]:
    return [Heading("How to read this report"), Bullets((
        "Every number is read from the MLflow run the manifest names for it, not from the manifest's copies; run "
        f"ids link to the MLflow UI ({MLFLOW_UI} when `mlflow ui` runs in the folder of the store).",
        "Scores are in points: BLiMP, probe, GLUE and CoNLL-2003 metrics are logged as fractions and multiplied by "
        "100; SQuAD is logged in points; MLM loss is in nats per token. metrics.json uses the same units.",
        "The unit of replication is the pretraining seed: each model's fine-tuning or probe seeds are averaged "
        "first, and every test is a paired t test over pretraining seeds (arm seed s pairs with the control's "
        "seed-s initialisation and with the other arms' seed s). Fewer than 3 pretraining seeds: no test.",
        f"All {a.m} tested comparisons form one family: verdicts follow Holm-adjusted p-values at a family-wise "
        "error of 5% (the chance that any verdict in the report is false); intervals are Bonferroni-simultaneous "
        f"({_level(a)}), so an interval that excludes 0 always comes with a verdict (not always the converse).",
        "detectable Δ: the smallest true difference the design finds with 80% power at Holm's strictest level "
        "(5% / number of comparisons): 'no difference detected' means the true one is probably smaller than that, "
        "not zero. tests/test_inference.py checks the level and the power by simulation.",
        "Collapsed fine-tuning runs (one class, only O tags, or only empty answers; tag bvr.collapsed) are kept in "
        "every statistic and counted; leaving them out would flatter an arm that collapses more often.",
        "plots/*.csv hold the data behind the figures for `dvc plots show`: scores.csv and differences.csv one row "
        "per point, scores_TASK.csv and pretrain_*.csv one column per arm.",
    ))]


def report_blocks(a: Analysis, figures: dict[str, Figure]) -> list[Block]:
    """One ablation's report, results first; ``figures`` maps a figure's name ('scores', 'curves') to its block."""
    links = _Links(a.collected)
    return [*_title(a), *_headline(a), *_missing(a), *_sanity(a, links), *_ablation(a),
            *([figures["differences"]] if "differences" in figures else []), *_measures(a, links), *_blimp(a),
            *_scores(a, links, figures),
            *_published(a), *_pretraining(a, links, figures), *_context(a, links), *_methods(a)]


# ---------------------------------------------------------------------------------------------------------------
# The index across ablations


def _agreement_counts(a: Analysis) -> str:
    found = [c.agreement for c in a.comparisons if c.published is not None]
    if not found:
        return "no published comparison measured"
    counts = {k: found.count(k) for k in ("agree", "disagree", "inconclusive") if found.count(k)}
    return f"{len(found)} published comparison(s): " + ", ".join(f"{v} {k}" for k, v in counts.items())


def summary_blocks(analyses: Sequence[Analysis], reports: Sequence[str | None]) -> list[Block]:
    """The index across ablations: a status table, then each ablation's headline sentences.

    Args:
        analyses: one analysis per ablation.
        reports: per ablation, the link to its ``report.html`` relative to the index (None: not rendered yet).
    """
    overview = []
    sections: list[Block] = []
    for a, href in zip(analyses, reports, strict=True):
        name = a.collected.ablation
        link: Cell = Link("report", href) if href else "not rendered yet"
        status = "complete" if not a.collected.missing else f"partial ({len(a.collected.missing)} missing)"
        overview.append([name, status, ", ".join(a.collected.arms), str(len(a.collected.tasks)),
                         _agreement_counts(a), link])
        lines = headlines(a) or ["no comparison yet"]
        sections += [Heading(name), Paragraph(str(a.collected.manifest.description or "").strip()),
                     Bullets(tuple(lines))]
    head = [Heading("bvr: ablation reports", 1),
            Paragraph("Each ablation's headline verdicts, read from MLflow; differences are in points (GLUE, "
                      "CoNLL-2003, BLiMP and probes ×100) over pretraining seeds, Holm-adjusted within each report. "
                      "Follow a report link for the tables, figures and runs."),
            Table(["ablation", "status", "arms", "tasks", "beside the paper", "report"], overview)]
    return head + sections


def _relative(path: str | None) -> str:
    """A path relative to the working directory where it lies under it (reports are read from the repository)."""
    if not path:
        return "—"
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path
