"""Reports: measured effects across fine-tuning seeds, set beside the published ones.

An ablation's runs are read back from MLflow (:mod:`~bvr.report.collect`, guided by the runner's manifest), turned
into measures in points (:mod:`~bvr.report.measures`) and summaries and paired comparisons that hold their level
(:mod:`~bvr.report.stats`, :mod:`~bvr.report.inference`, :mod:`~bvr.report.analysis`), set beside the papers' numbers
(:mod:`~bvr.report.published`), then laid out as blocks (:mod:`~bvr.report.sections` with
:mod:`~bvr.report.results`, :mod:`~bvr.report.headlines`, :mod:`~bvr.report.budget`, :mod:`~bvr.report.arm_facts`)
and written as Markdown and self-contained HTML (:mod:`~bvr.report.document`), with figures
(:mod:`~bvr.report.figures`), ``metrics.json`` and DVC's metrics (:mod:`~bvr.report.numbers`), and the rows of the
MLflow views (:mod:`~bvr.report.shown`), by :mod:`~bvr.report.render`.

This package reads results and never imports training code (``bvr.pretraining``, the model's modules,
``bvr.tasks.module`` or ``bvr.tasks.run``: of ``bvr.model``, only its plain-data config); :mod:`bvr.report.collect`
reads MLflow through :mod:`bvr.tracking` (MLflow, not Lightning or torch). Nothing is imported here, so that
``import bvr.report.stats`` stays as light as numpy.
"""
