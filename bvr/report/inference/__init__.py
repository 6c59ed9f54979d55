"""Comparisons of arms that hold their nominal level: paired t over pretraining seeds, Holm, and power. Pure
functions on numbers (numpy and scipy): no files, no MLflow, no pandas.

Design. Each arm (``static``, ``dynamic``, the no-pretraining ``control``) is pretrained at several pretraining
seeds, each model evaluated over inner (probe or fine-tuning) seeds. The pretraining seed is the unit of replication:
inner seeds measure one model more precisely but are not new draws of the pretraining run, and counting them would
overstate the evidence. So :func:`unit_values` averages the inner seeds first (:func:`variance_components` splits the
spread between the two kinds of seed) and :func:`compare` tests ``a - b`` over the units: a paired t test with its t
interval (arms share seed ``s``'s initialisation), Welch's when unpaired, none below :data:`MIN_UNITS` units (with two
pairs a verdict would turn on one spread estimate). The exact permutation p-value beside it never goes below
``2 / 2**n`` with ``n`` pairs (0.0625 at ``n = 5``), and a percentile bootstrap over 2 to 5 pairs is far too narrow
(a true null said "better" 50 % of the time at 2 pairs, 16 % at 5): the verdict rests on the t test. As
``tests/test_inference.py`` simulates, false "better" verdicts at 3, 5 and 10 pairs run at 5 % under normal
differences, 3.5 to 4.4 % under heavy symmetric tails.

Limits. The level holds when the paired differences are symmetric about 0, as under the null that the arms are
interchangeable. Skewed differences with equal means (one arm occasionally collapsing) make the t test liberal (10
to 12 % at 3 to 10 pairs), the sign-flip test too: hence a report shows collapsed runs beside its verdicts. Unpaired,
Welch's statistic is read on ``min(n) - 1`` degrees of freedom (Hsu's), which holds the level whatever the two
spreads; Welch-Satterthwaite's df did not at a report's levels (up to 2.5 times 0.005 at 4 units against 12).

Multiplicity. A report makes 10 to 70 comparisons, each read as a finding on its own, so :func:`holm` controls the
family-wise error (the chance that *any* verdict is false) under any dependence, not the false discovery rate.
Bonferroni-simultaneous intervals (:func:`adjusted_confidence`, :func:`simultaneous`) are each at ``1 - alpha / m``:
one that excludes 0 implies Holm rejects, not the converse. :func:`min_detectable_effect` is the smallest true
difference detected 80 % of the time at ``alpha / m`` (Holm's strictest step), so that "no difference detected" is
not read as "the same"; :func:`units_needed` the pretraining seeds an effect would need. Ordered hypotheses (from
which budget on does pretraining help?) take the fixed sequence (:func:`fixed_sequences`: alpha split over measures
only, never over budgets).

>>> c = compare({0: 81.0, 1: 82.0, 2: 83.0}, {0: 80.0, 1: 80.0, 2: 80.0})
>>> c.estimate, c.sd, c.n, c.df, round(c.t, 3), round(c.p_value, 4), c.permutation_p
(2.0, 1.0, 3, 2.0, 3.464, 0.0742, 0.25)
>>> round(holm([c.p_value])[0], 4), round(c.mde(0.05), 2)  # Holm p of a family of one; |d| detectable at 80 %
(0.0742, 3.26)
"""

from bvr.report.inference.compare import (
    Comparison,
    VarianceComponents,
    adjusted_confidence,
    compare,
    holm,
    sign_flip_p,
    simultaneous,
    unit_values,
    variance_components,
    with_confidence,
)
from bvr.report.inference.power import (
    MIN_UNITS,
    UnitsNeeded,
    detectable_for,
    min_detectable_effect,
    power,
    units_needed,
)
from bvr.report.inference.sequence import FixedSequence, fixed_sequence, fixed_sequences, one_sided_bound, one_sided_p

__all__ = [
    "MIN_UNITS", "Comparison", "FixedSequence", "UnitsNeeded", "VarianceComponents", "adjusted_confidence", "compare",
    "detectable_for", "fixed_sequence", "fixed_sequences", "holm", "min_detectable_effect", "one_sided_bound",
    "one_sided_p", "power",
    "sign_flip_p", "simultaneous", "unit_values", "units_needed", "variance_components", "with_confidence",
]
