"""The sections of a report, as document blocks: :func:`report_blocks` lays out one ablation's report (its result
sections are in :mod:`bvr.report.results`), :func:`summary_blocks` the index across ablations. Every number is taken
from an :class:`~bvr.report.analysis.Analysis` (so from MLflow, in points); every run id links to the MLflow UI."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from bvr.ablation.status import PROGRESS_HEADER, progress_rows
from bvr.formatting import duration
from bvr.report.analysis import Analysis, Comparison
from bvr.report.arm_facts import arm_facts
from bvr.report.budget import budget_curve, budget_section
from bvr.report.cells import RunLinks, arm_config, fmt, fmt_ci, fmt_count, fmt_p, mean_of, relative_path, signed
from bvr.report.document import Block, Bullets, Cell, Figure, Heading, Link, Notice, Paragraph, Table
from bvr.report.headlines import brief, headlines, too_small
from bvr.report.numbers import pretrain_table
from bvr.report.results import blimp_section, measures_section, pretraining_section, published_section, scores_section


def _title(analysis: Analysis) -> list[Block]:
    """The title and the status: what the first screen holds above the headline."""
    status = ("Complete: every planned run is in MLflow and agrees with the manifest." if not analysis.collected.missing
              else f"Partial: {len(analysis.collected.missing)} planned item(s) are missing or disagree (listed under "
                   "Missing); the statistics use the runs that are there.")
    return [Heading(f"Ablation report: {analysis.collected.ablation}", 1), Paragraph(status)]


def _setup(analysis: Analysis) -> list[Block]:
    """Below the headline: the run that was made, then the experiment's description (the question in its paper's
    terms, whose settings a preset scales down) and the plan."""
    m = analysis.collected.manifest
    facts = [f"source {relative_path(m.source)}", f"preset {m.preset or 'none (defaults)'}",
             f"plan {m.plan_hash or '—'}"]
    described = str(m.description or "").strip()
    setting = "in its paper's setting" if m.published else "as declared"
    question = (f"The ablation {setting} ({relative_path(m.source)}; the values of this run are those above): "
                f"{described}" if described else "(no description)")
    return [*([Paragraph(run)] if (run := _this_run(analysis)) else []), Paragraph(question),
            Paragraph(" · ".join(facts))]


def _in_arm_order(values: Sequence[Any]) -> str:
    """Distinct values in the arms' order, ' / ' between them: '300 / 900 / 1800' for a budget curve's steps."""
    return " / ".join(dict.fromkeys(str(v) for v in values))


def _per_arm(analysis: Analysis, get: Callable[[dict[str, Any]], Any]) -> str:
    """``get`` of each pretrained arm's resolved config, one value where the arms agree, else each in arm order."""
    manifest = analysis.collected.manifest
    return _in_arm_order([get(arm_config(manifest, arm)) for arm in analysis.collected.pretrained_arms])


def _section(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    return cfg.get(name) or {}


def _budget(analysis: Analysis) -> str:
    """Steps, what a step holds (sequences, or tokens where ``training.tokens_per_batch`` fills it) and the input
    format from the arms' resolved configs, then the tokens each pretraining run saw and the epochs that made (the
    runs' run/tokens_seen and run/epochs; medians over pretraining seeds)."""
    def step(cfg: dict[str, Any]) -> str:
        training, data = _section(cfg, "training"), _section(cfg, "data")
        if training.get("tokens_per_batch"):
            return f"{training['tokens_per_batch']:,} tokens in sequences of up to {data.get('max_length')} tokens"
        return f"{training.get('batch_size')} sequences of up to {data.get('max_length')} tokens"

    def shape(cfg: dict[str, Any]) -> str:
        data = _section(cfg, "data")
        return f"{data.get('input_format')}, sentence objective {data.get('sentence_objective') or 'nsp'}"

    text = (f"{_per_arm(analysis, lambda c: _section(c, 'training').get('max_steps'))} steps of "
            f"{_per_arm(analysis, step)} ({_per_arm(analysis, shape)})")
    table = pretrain_table(analysis)
    seen = table[table["tokens_seen"].notna()]
    if seen.empty:
        return text
    return (text + f", {_in_arm_order([fmt_count(t) for t in seen['tokens_seen']])} tokens seen per pretraining run"
            f" ({_in_arm_order([fmt(e) for e in seen['epochs']])} epochs)")


def _this_run(analysis: Analysis) -> str:
    """The run that was made, from the pretrained arms' resolved configs (the description gives the paper's
    setting): preset, encoder, budget, corpus, tokenizer, masking and seeds; budget, input format and tokenizer per
    arm where the arms differ in them (the first arm's for the rest)."""
    arms = analysis.collected.pretrained_arms
    cfg = arm_config(analysis.collected.manifest, arms[0]) if arms else {}
    if not cfg:
        return ""
    model, training, corpus, masking = (_section(cfg, name) for name in ("model", "training", "corpus", "masking"))
    seeds = len({r.pretrain_seed for r in analysis.collected.manifest.records() if r.arm in arms})
    recipe = [*(["pre-LayerNorm"] if model.get("norm") == "pre" else []),
              *(["no dropout while pretraining"] if training.get("dropout") is False else [])]
    parts = [f"{model.get('num_layers')} layers of hidden {model.get('hidden_size')} and {model.get('num_heads')} "
             "heads" + (f" ({', '.join(recipe)})" if recipe else ""),
             _budget(analysis),
             f"the first {corpus['max_documents']:,} documents" if corpus.get("max_documents") else "the whole corpus",
             _per_arm(analysis, _tokenizer),
             f"masking split {masking.get('split') or [0.8, 0.1, 0.1]}, dupe_factor {masking.get('dupe_factor')} "
             "where static",
             f"{seeds} pretraining seed(s) per arm"]
    return f"This run (preset {analysis.collected.manifest.preset or 'none'}): " + "; ".join(parts) + "."


def _tokenizer(cfg: dict[str, Any]) -> str:
    tokenizer = _section(cfg, "tokenizer")
    return f"a {tokenizer.get('family')} tokenizer" + (f" of {tokenizer['vocab_size']:,} ids"
                                                        if tokenizer.get("vocab_size") else "")


def _effect_cells(c: Comparison) -> list[str]:
    """Δ, its simultaneous interval, the Holm-adjusted p and the detectable effect of one comparison."""
    d = c.measure.digits
    if not c.test.tested:
        return [signed(c.estimate, d), f"— (n={c.test.n})", "—", "—"]
    return [signed(c.estimate, d), fmt_ci(c.interval.ci_low, c.interval.ci_high, d), fmt_p(c.adjusted_p), fmt(c.mde, d)]


def _headline(analysis: Analysis, budget_note: str | None = None) -> list[Block]:
    """A line per question (the ablation's effect, then pretraining against the control), then every finding in
    full, in the same order; where an arm beats the control nowhere, the brief says first that the budget is too small
    to judge, and ``budget_note`` says where this budget sits on the budget curve."""
    lines = headlines(analysis)
    if not lines:
        return [Heading("Headline"), Paragraph("No comparison yet: no measure has values for two arms.")]
    intro = Paragraph(f"The ablation's effect on each measure, then whether pretraining helped at this budget (each "
                      f"arm against the control). Differences in points (MLM loss in nats), with {analysis.level} "
                      f"simultaneous intervals; verdicts follow Holm-adjusted p-values over all {analysis.m} tested "
                      "comparisons of this report (family-wise error 5%).")
    curve = [Paragraph(budget_note)] if budget_note and too_small(analysis) else []
    return [Heading("Headline"), intro, Bullets(tuple(brief(analysis, bold=False))), *curve, Paragraph("In full:"),
            Bullets(tuple(lines))]


def _seeds(seeds: list[int]) -> str:
    """A seed list, a run of consecutive seeds as a range.

    >>> _seeds([0, 1, 2, 3]), _seeds([0, 2, 5])
    ('0-3', '0, 2, 5')
    """
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _sanity(analysis: Analysis) -> list[Block]:
    if not analysis.control:
        return []
    rows = []
    for c in analysis.control:
        arm_units, control_units = c.measure.units(c.arm_b), c.measure.units(c.arm_a)
        rows.append([c.measure.title, c.arm_b, f"{fmt(mean_of(arm_units))} (n={len(arm_units)})",
                     f"{fmt(mean_of(control_units))} (n={len(control_units)})", *_effect_cells(c), c.ours])
    header = ["measure", "arm", "arm mean", "control mean", "Δ arm − control", f"{analysis.level} CI", "Holm p",
              "detectable Δ", "verdict"]
    own = analysis.collected.manifest.control_seeds
    pairing = ("Δ pairs arm seed s with the control's seed-s initialisation, the weights that arm started from; "
               if not own else
               f"the control has {len(own)} initialisations of its own (seeds {_seeds(own)}), so Δ compares the "
               "arm's pretraining seeds with them unpaired (Welch's t on the smaller side's n − 1 degrees of freedom: "
               "pretraining erases what an initialisation brings, so pairing could not cancel a random encoder's "
               "spread across initialisations, and many of them average it down); ")
    caption = ("Means over pretraining seeds (each seed's fine-tuning or probe seeds averaged first; n: seeds). "
               + pairing + "fine-tuning seed "
               "t gives both the same data order and initial task-head output layer, and the same pooler only where "
               "neither checkpoint has one (an arm pretrained with NSP or SOP brings its trained pooler, the control "
               "the random one of its initialisation when the base config has a sentence objective); "
               + ("paired t over pretraining seeds; " if not own else "")
               + "intervals Bonferroni-simultaneous over the report; detectable Δ: the smallest "
               "true difference found with 80% power at Holm's strictest level.")
    return [Heading("Did pretraining help at this budget?"), Table(header, rows, align="LLrrrrrrl", caption=caption)]


def _ablation(analysis: Analysis) -> list[Block]:
    if not analysis.comparisons:
        return []
    rows = [[c.measure.title, c.name, *_effect_cells(c), signed(c.published, c.measure.digits),
             str(c.needed) if c.needed is not None else "—", c.ours, c.agreement] for c in analysis.comparisons]
    header = ["measure", "b − a", "Δ", f"{analysis.level} CI", "Holm p", "detectable Δ", "paper Δ",
              "seeds for the paper's Δ", "we see", "beside the paper"]
    caption = ("b − a over pretraining seeds (paired t), in the same family of tests as the section above. "
               "seeds for the paper's Δ: pretraining seeds per arm that would detect the published difference with "
               "80% power at this report's strictest level and at the noise measured here.")
    return [Heading("The ablation's effect"), Table(header, rows, align="LLrrrrrrll", caption=caption)]


def _missing(analysis: Analysis) -> list[Block]:
    missing = analysis.collected.missing
    if not missing and not analysis.notes:
        return []
    blocks: list[Block] = [Heading("Missing")]
    if not analysis.collected.manifest.complete:
        blocks.append(Table(PROGRESS_HEADER, progress_rows(analysis.collected.manifest), align="lrrrl",
                            caption="Units per stage from the manifest (a fine-tuning unit is one seed); "
                                    "`bvr status NAME` shows the same, with the runs in progress."))
    if missing:
        blocks.append(Notice(f"{len(missing)} planned item(s) are missing or disagree; units without a usable run "
                             "are left out of every statistic below.", tuple(missing)))
    if analysis.notes:
        blocks.append(Bullets(tuple(analysis.notes)))
    return blocks


def _hardware(hw: dict[str, Any]) -> str:
    """The machine the manifest's context records (:func:`bvr.runner.run.hardware`)."""
    cpu = f"{hw.get('cpu') or 'CPU'} × {hw.get('cpu_count') or '?'}"
    gpu = f"; {hw['gpu']} × {hw.get('gpu_count') or 1}" if hw.get("gpu") else "; no GPU"
    soft = ", ".join(f"{k} {hw[k]}" for k in ("python", "torch") if hw.get(k))
    return f"{cpu}{gpu}" + (f" ({soft}; {hw['platform']})" if soft and hw.get("platform") else "")


def _corpus(analysis: Analysis) -> str:
    """The pretraining corpus of the first arm (arms share it unless one declares otherwise)."""
    arm = analysis.collected.arms[0]
    source, path = _config_value(analysis, arm, "corpus.source"), _config_value(analysis, arm, "corpus.path")
    cap = _config_value(analysis, arm, "corpus.max_documents")
    return f"{source}: {path}" + (f", first {cap} documents" if cap not in ("—", "null") else "")


def _commits(analysis: Analysis) -> str:
    """The manifest's commit, and every other commit a run was tagged with (a mixed ablation must say so)."""
    planned = analysis.collected.manifest.context.git_commit
    runs = pd.concat([analysis.collected.pretrain["git_commit"], analysis.collected.finetune["git_commit"]]).dropna()
    others = sorted(set(runs) - {planned})
    return (planned or "unknown") + (f" (runs also tagged with {', '.join(others)})" if others else "")


def _context(analysis: Analysis, links: RunLinks, budget_note: str | None = None) -> list[Block]:
    collected = analysis.collected
    m = collected.manifest
    context = m.context
    parent = collected.parent_run_id
    rows: list[list[Cell]] = [
        ["arms", ", ".join(collected.arms) + (f" (control: {collected.control})" if collected.control else "")],
        ["tasks", ", ".join(collected.tasks) or "—"],
        ["fine-tuning seeds", ", ".join(map(str, m.finetune_seeds)) or "—"],
        ["pretraining seeds", ", ".join(map(str, m.pretrain_seeds)) or "—"],
        *([["control initialisations", f"{_seeds(m.control_seeds)} ({len(m.control_seeds)}; compared unpaired)"]]
          if m.control_seeds else []),
        ["overrides", ", ".join(m.overrides) or "none"],
        ["corpus", _corpus(analysis)],
        ["task data", str(context.data_dir or "—")],
        ["hardware", _hardware(context.hardware)],
        ["started", context.started or "—"],  # not the manifest's last save: a re-render changes no byte
        ["wall time (all invocations, up to the last unit that ran)", duration(context.wall_seconds)],
        ["git commit", _commits(analysis)],
        ["MLflow store", collected.uri],
        ["MLflow experiment", links.experiment(collected.experiment)],
        ["parent run", links.run(parent, parent) if parent else "—"],
        ["MLflow views", links.views()],
        *([["budget", budget_note]] if budget_note else []),
    ]
    return [Heading("Setup"), Table(["setting", "value"], rows), *_arms_table(analysis, links), *arm_facts(analysis)]


def _config_value(analysis: Analysis, arm: str, key: str) -> str:
    """A config value of an arm: its pretraining run's logged param, else the plan's config (the control)."""
    rows = analysis.collected.pretrain[analysis.collected.pretrain["arm"] == arm]
    logged = rows[key].dropna() if key in rows else pd.Series(dtype=object)
    if not logged.empty:
        return str(logged.iloc[0])
    value: Any = arm_config(analysis.collected.manifest, arm)
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "—" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _arms_table(analysis: Analysis, links: RunLinks) -> list[Block]:
    declared = analysis.collected.manifest.declared
    table = pretrain_table(analysis).set_index("arm")
    rows = []
    for arm in analysis.collected.arms:
        if arm == analysis.collected.control:
            change = "no pretraining: the shared base config's encoder, randomly initialised per seed"
        else:
            change = ", ".join(f"{k}={v}" for k, v in (declared.get(arm) or {}).items()) or "—"
        model = "/".join(_config_value(analysis, arm, f"model.{k}") for k in ("num_layers", "hidden_size", "num_heads"))
        vocab = (arm_config(analysis.collected.manifest, arm).get("tokenizer") or {}).get("vocab_size")
        family = _config_value(analysis, arm, "tokenizer.family")
        tokenizer = f"{family} {vocab:,}" if isinstance(vocab, int) else f"{family} (default size)"
        stats = table.loc[arm].to_dict() if arm in table.index else {"runs": []}
        get = stats.get
        rows.append([arm, change, tokenizer, model, _config_value(analysis, arm, "data.input_format"),
                     _config_value(analysis, arm, "training.batch_size"),
                     _config_value(analysis, arm, "training.max_steps"),
                     _config_value(analysis, arm, "training.learning_rate"), fmt_count(get("params_total")),
                     duration(get("wall_seconds")), tuple(links.run(r) for r in stats["runs"]) or "—"])
    caption = ("Config values are the pretraining runs' MLflow params (the control, never pretrained, shows its "
               "planned config). model: layers/hidden/heads. params (all of them) and wall time are the runs' run/* "
               "metrics (wall time: each run's last invocation); the tables below give the tokens each arm saw and "
               "its parameters in and outside the embeddings.")
    header = ["arm", "changes", "tokenizer", "model", "input", "batch", "steps", "learning rate", "params",
              "wall time", "pretrain run"]
    return [Table(header, rows, align="LlllLrrrrrl", caption=caption)]


def _methods(analysis: Analysis, links: RunLinks) -> list[Block]:
    return [Heading("How to read this report"), Bullets((
        "Every number is read from the MLflow run the manifest names for it, not from the manifest's copies; "
        + (f"run ids link to the MLflow UI at {links.base}." if links.linked else
           "run ids are plain text because the address of an MLflow UI is not known: start `mlflow ui` in the folder "
           "of the store and render again with `bvr report NAME --ui-url ADDRESS` (the address it prints), or set "
           "BVR_MLFLOW_UI."),
        "Scores are in points: BLiMP, probe, GLUE and CoNLL-2003 metrics are logged as fractions and multiplied by "
        "100; SQuAD is logged in points; MLM loss is in nats per token. metrics.json uses the same units.",
        "The unit of replication is the pretraining seed: each model's fine-tuning or probe seeds are averaged "
        "first, and every test is a paired t test over pretraining seeds (arm seed s pairs with the control's "
        "seed-s initialisation and with the other arms' seed s)"
        + (", but against a control with initialisations of its own (control_seeds), an unpaired test over the arm's "
           "pretraining seeds and the control's initialisations (Welch's t on the smaller side's n − 1 degrees of "
           "freedom)" if analysis.collected.manifest.control_seeds else "")
        + ". Fewer than 3 seeds a side: no test.",
        f"All {analysis.m} tested comparisons form one family: verdicts follow Holm-adjusted p-values at a family-wise "
        "error of 5% (the chance that any verdict in the report is false); intervals are Bonferroni-simultaneous "
        f"({analysis.level}), so an interval that excludes 0 always comes with a verdict (not always the converse).",
        "detectable Δ: the smallest true difference the design finds with 80% power at Holm's strictest level "
        "(5% / number of comparisons): 'no difference detected' means the true one is probably smaller than that, "
        "not zero. tests/test_inference.py checks the level and the power by simulation.",
        "Collapsed fine-tuning runs (one class, only O tags, or only empty answers; tag bvr.collapsed) are kept in "
        "every statistic and counted; leaving them out would flatter an arm that collapses more often.",
        "plots/*.csv hold the data behind the figures for `dvc plots show`, one row per point: scores.csv (every "
        "run), scores_TASK.csv (one task), differences.csv (each pretraining seed's paired difference) and the "
        "pretrain_*.csv curves (the mean over an arm's pretraining seeds). metrics/ holds what `dvc metrics show` "
        "lists: one file per comparison, B-minus-A.json, with the mean paired difference per measure (the "
        "intervals are in metrics.json).",
    ))]


def report_blocks(analysis: Analysis, figures: dict[str, Figure], ui_url: str | None = None, *,
                  budget_note: str | None = None) -> list[Block]:
    """One ablation's report, results first; ``figures`` maps a figure's name ('scores', 'curves') to its block,
    ``ui_url`` is the MLflow UI run ids link to (:func:`bvr.tracking.ui.ui_base`), ``budget_note`` the setup's line
    on where this budget sits on the budget curve (:func:`bvr.report.budget.budget_context`). A budget curve's
    report has its section (:func:`bvr.report.budget.budget_section`) right after the headline."""
    links = RunLinks(analysis.collected, ui_url)
    return [*_title(analysis), *_headline(analysis, budget_note), *_setup(analysis),
            *budget_section(budget_curve(analysis), figures.get("budget")), *_missing(analysis),
            *_sanity(analysis), *_ablation(analysis),
            *([figures["differences"]] if "differences" in figures else []), *measures_section(analysis, links),
            *blimp_section(analysis), *scores_section(analysis, links, figures), *published_section(analysis),
            *pretraining_section(analysis, links, figures), *_context(analysis, links, budget_note),
            *_methods(analysis, links)]


# --- The index across ablations --------------------------------------------------------------------------------


def _agreement_counts(analysis: Analysis) -> str:
    found = [c.agreement for c in analysis.comparisons if c.published is not None]
    if not found:
        return "no published comparison measured"
    counts = {k: found.count(k) for k in ("agree", "disagree", "inconclusive") if found.count(k)}
    return f"{len(found)} published comparison(s): " + ", ".join(f"{v} {k}" for k, v in counts.items())


def summary_blocks(analyses: Sequence[Analysis], reports: Sequence[str | None]) -> list[Block]:
    """The index across ablations: a status table, then each ablation's headline sentences; ``reports`` holds per
    ablation the link to its ``report.html`` relative to the index (None: not rendered yet)."""
    overview = []
    sections: list[Block] = []
    for analysis, href in zip(analyses, reports, strict=True):
        name = analysis.collected.ablation
        link: Cell = Link("report", href) if href else "not rendered yet"
        missing = analysis.collected.missing
        status = "complete" if not missing else f"partial ({len(missing)} missing)"
        overview.append([name, status, ", ".join(analysis.collected.arms), str(len(analysis.collected.tasks)),
                         _agreement_counts(analysis), link])
        lines = headlines(analysis) or ["no comparison yet"]
        sections += [Heading(name), Paragraph(str(analysis.collected.manifest.description or "").strip()),
                     Bullets(tuple(lines))]
    head = [Heading("bvr: ablation reports", 1),
            Paragraph("Each ablation's headline verdicts, read from MLflow; differences are in points (GLUE, "
                      "CoNLL-2003, BLiMP and probes ×100) over pretraining seeds, Holm-adjusted within each report. "
                      "Follow a report link for the tables, figures and runs."),
            Table(["ablation", "status", "arms", "tasks", "beside the paper", "report"], overview)]
    return head + sections
