"""Comparisons of arms that hold their nominal level: paired t over pretraining seeds, Holm, and power.

Pure functions on numbers (numpy and scipy): no files, no MLflow, no pandas.

Design. Each arm (``static``, ``dynamic``, the no-pretraining ``control``) is pretrained at several pretraining
seeds, and each pretrained model is evaluated (one number, or one per probe seed) and fine-tuned over fine-tuning
seeds nested inside the pretraining seed. The pretraining seed is the unit of replication for the ablated factor:
fine-tuning seeds measure one pretrained model more precisely but are not new draws of the pretraining run, so
treating them as independent replicates would overstate the evidence. Hence:

- :func:`unit_values` averages the inner (fine-tuning or probe) seeds to one value per pretraining seed, and
  :func:`variance_components` says how the spread splits between pretraining seeds and fine-tuning seeds;
- :func:`compare` tests ``a - b`` over the units. Arms share pretraining seed ``s``'s initialisation, so units pair
  by pretraining seed and the test is a paired t test on the per-unit differences, with a t interval. Without
  pairing (asked for, or no unit in common) it is Welch's t test. An exact permutation p-value is reported beside
  it: sign flips of the paired differences (exact under symmetric differences, assuming nothing else), or
  relabelling of units between arms when unpaired. With ``n`` pairs it can never go below ``2 / 2**n``, 0.0625 at
  ``n = 5``, which is why the verdict rests on the t test and the permutation p-value is there to be read beside
  it: when the two disagree, the t verdict leans on its assumption that the differences are roughly normal.
- Fewer than :data:`MIN_UNITS` units on either side gives no test at all (``reason == "too few units"``): with two
  pairs the t test has one degree of freedom and its verdict turns on a single spread estimate.

Why not the percentile bootstrap the report used: with 2 to 5 paired seeds its "95 %" interval is far too narrow
(simulated with normal differences, a true null gave a "better" verdict 50 % of the time at 2 pairs, 25 % at 3
and 16 % at 5), whereas the t interval has its nominal coverage under normal differences at any ``n``.
``tests/test_inference.py`` simulates the claims: at 3, 5 and 10 pairs the rate of false "better" verdicts is
5 % under normal differences and 3.5 to 4.4 % under Student t with 3 df and under a contaminated normal (heavy
symmetric tails make the t test conservative).

Limits. The level holds when the paired differences are symmetric about 0, as they are under the null that the two arms
are interchangeable. Differences can be skewed with equal means only when the arms fail differently (one arm
occasionally collapsing, say); the t test is then liberal (centred exponential differences gave false "better" verdicts
10 to 12 % of the time at 3 to 10 pairs), and the sign-flip test, which assumes symmetry too, does not rescue it; a
report should show collapsed runs beside its verdicts for that reason. Welch's test is approximate: simulated at 3 to 10
units per arm, with one arm up to three times as noisy, its level was 3.3 to 5.3 %.

Multiplicity. One report makes about 10 to 70 comparisons, and every verdict in it is a claim a reader will act
on alone ("dynamic masking helps SST-2"). :func:`holm` therefore controls the family-wise error rate: the chance
that *any* verdict in the report is false stays at ``alpha``. Benjamini-Hochberg would control only the expected
share of false verdicts among the positive ones, which is too weak when each comparison is read as a finding on
its own. Holm rejects everything Bonferroni rejects, sometimes more, and holds under any dependence between
comparisons (they share arms and seeds). Intervals are made simultaneous with Bonferroni
(:func:`adjusted_confidence`, :func:`simultaneous`): each at ``1 - alpha / m``. Those intervals are conservative,
and agree with Holm in one direction only: a Bonferroni interval that excludes 0 implies Holm rejects (its raw p
is below ``alpha / m``), but Holm may reject a comparison whose Bonferroni interval still covers 0.

Power. :func:`min_detectable_effect` is the smallest true difference the design would declare 80 % of the time
at the level used (``alpha / m`` for a family of ``m``, Holm's first and strictest step), from the noncentral
t distribution; a "no difference detected" verdict quotes it so that "no difference" is not read as "the same".
:func:`units_needed` answers the converse: how many pretraining seeds a given effect would need.

>>> c = compare({0: 81.0, 1: 82.0, 2: 83.0}, {0: 80.0, 1: 80.0, 2: 80.0})
>>> c.estimate, c.sd, c.n, c.df, round(c.t, 3), round(c.p_value, 4), c.permutation_p
(2.0, 1.0, 3, 2.0, 3.464, 0.0742, 0.25)
>>> round(holm([c.p_value])[0], 4), round(c.mde(0.05), 2)  # Holm p of a family of one; |d| detectable at 80 %
(0.0742, 3.26)

Ordered hypotheses. A budget curve's budgets are ordered before any data is seen, so "from which budget on does
pretraining help?" is answered by the fixed-sequence procedure (:func:`fixed_sequences`): one-sided tests from the
largest budget down, each at the full per-measure level, stopping at the first that does not reject. Its alpha is
split over the measures only, never over the budgets, where Holm over the whole report splits it over every test.
"""

from bvr.report.inference.compare import (
    EXACT_PERMUTATION_LIMIT,
    PERMUTATION_DRAWS,
    PERMUTATION_SEED,
    TOO_FEW_UNITS,
    Comparison,
    compare,
    sign_flip_p,
)
from bvr.report.inference.multiplicity import adjusted_confidence, holm, simultaneous, with_confidence
from bvr.report.inference.power import (
    DEFAULT_POWER,
    MIN_UNITS,
    UNITS_CAP,
    UnitsNeeded,
    min_detectable_effect,
    power,
    units_needed,
)
from bvr.report.inference.seeds import VarianceComponents, unit_values, variance_components
from bvr.report.inference.sequence import FixedSequence, fixed_sequence, fixed_sequences, one_sided_bound, one_sided_p

__all__ = [
    "DEFAULT_POWER", "EXACT_PERMUTATION_LIMIT", "MIN_UNITS", "PERMUTATION_DRAWS", "PERMUTATION_SEED", "TOO_FEW_UNITS",
    "UNITS_CAP", "Comparison", "FixedSequence", "UnitsNeeded", "VarianceComponents", "adjusted_confidence", "compare",
    "fixed_sequence", "fixed_sequences", "holm", "min_detectable_effect", "one_sided_bound", "one_sided_p", "power",
    "sign_flip_p", "simultaneous", "unit_values", "units_needed", "variance_components", "with_confidence",
]
