"""Reports: measured effects across fine-tuning seeds, set beside the published ones.

- :mod:`bvr.report.stats`: summaries of one arm across seeds (median, quartiles, bootstrap interval, collapses);
- :mod:`bvr.report.inference`: comparisons that hold their level (paired t over pretraining seeds, Holm, power);
- :mod:`bvr.report.published`: the papers' numbers (``reports/published.yaml``) with their sources;
- :mod:`bvr.report.collect`: an ablation's runs read back from MLflow, guided by the runner's manifest;
- :mod:`bvr.report.measures`: what a report measures (BLiMP, probes, fine-tuning, MLM loss), in points;
- :mod:`bvr.report.analysis`: summaries and paired comparisons in points, beside the paper;
- :mod:`bvr.report.pretrain_runs`: the pretraining table (throughput, time, size, losses per arm);
- :mod:`bvr.report.arm_facts`: whether the arms compare fairly (tokens in ids and words, parameters, id
  occurrences, the learning rate per batch, every setting that differs);
- :mod:`bvr.report.figures`: the figures (matplotlib, Agg canvas);
- :mod:`bvr.report.document`: a report as blocks, written as Markdown and as a self-contained HTML page;
- :mod:`bvr.report.sections`: the sections of a report and of the index, as blocks; the result sections are in
  :mod:`bvr.report.results`, their cells and run links in :mod:`bvr.report.cells`;
- :mod:`bvr.report.budget`: a budget curve's section (each budget against the control, where each measure turns)
  and the line on where another ablation's budget sits on it;
- :mod:`bvr.report.numbers`: ``metrics.json``, the rows of ``dvc metrics show`` and the parent run's effect metrics;
- :mod:`bvr.report.render`: ``reports/NAME/`` and ``reports/index.*``, and the report logged to MLflow.

This package reads results and never imports training code (``bvr.pretraining``, the model's modules,
``bvr.tasks.module`` or ``bvr.tasks.run``: of ``bvr.model``, only its plain-data config); :mod:`bvr.report.collect`
reads MLflow through :mod:`bvr.tracking` (MLflow, not Lightning or torch). Nothing is imported here, so that
``import bvr.report.stats`` stays as light as numpy.
"""
