"""Reports: measured effects across fine-tuning seeds, set beside the published ones.

- :mod:`bvr.report.stats`: summaries across seeds, paired differences between arms, verdicts in words;
- :mod:`bvr.report.published`: the papers' numbers (``reports/published.yaml``) with their sources.

This package reads results and never imports training code (``bvr.pretraining``, ``bvr.model``,
``bvr.tasks.module`` or ``bvr.tasks.run``), so a report renders without torch. Nothing is
imported here, so that ``import bvr.report.stats`` stays as light as numpy.
"""
