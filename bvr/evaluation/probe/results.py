"""The results of a probe run (:class:`ProbeResult`, one :class:`SeedProbe` per feature kind and seed) and their
printed summary."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bvr.errors import BvrError
from bvr.evaluation.probe.bow import KIND as BOW
from bvr.evaluation.probe.fit import MAX_ITERATIONS
from bvr.formatting import duration, points


@dataclass
class SeedProbe:
    """One probe: one feature kind trained on one seed's subsample.

    Attributes:
        scores: dev metric -> value, the headline (``main_metric``) included.
        l2: the L2 strength chosen on the held-out part; ``held_out``: per L2 strength tried, the held-out headline.
        heldout_scores: metric -> value on the held-out training examples (empty unless ``heldout_examples``).
    """

    scores: dict[str, float]
    l2: float
    held_out: dict[float, float]
    iterations: int
    converged: bool
    heldout_scores: dict[str, float] = field(default_factory=dict)


@dataclass
class ProbeResult:
    """Probes of every feature kind over every seed, with the baselines.

    Attributes:
        from_scratch: the encoder was randomly initialised (the no-pretraining control).
        split: the evaluation split ('dev', or 'dev_matched' for MNLI).
        probes: feature kind -> seed -> :class:`SeedProbe`.
        baseline: seed -> the trivial baseline's dev scores (its majority comes from the seed's subsample).
        subsamples: seed -> indices (0-based, file order) of the training examples it drew.
        train_size: examples (sentences) in the training file; eval_size, eval_total: dev examples probed, in the file.
        heldout_size: training examples set aside and scored as a second test set (0: none).
        heldout_baseline: seed -> the trivial baseline's scores on them.
        seconds: 'extract' (features), 'probe' (every fit), 'bow' (the bag-of-words baseline) and 'total'.
        reports: what was read, one line per file, then the caps.
        bow: seed -> the bag-of-words baseline's dev scores (empty for tagging).
    """

    task: str
    checkpoint: str
    from_scratch: bool
    split: str
    main_metric: str
    features: tuple[str, ...]
    seeds: list[int]
    probes: dict[str, dict[int, SeedProbe]]
    baseline: dict[int, dict[str, float]]
    subsamples: dict[int, list[int]]
    train_size: int
    eval_size: int
    eval_total: int
    heldout_size: int = 0
    heldout_baseline: dict[int, dict[str, float]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    reports: list[str] = field(default_factory=list)
    bow: dict[int, dict[str, float]] = field(default_factory=dict)
    heldout_bow: dict[int, dict[str, float]] = field(default_factory=dict)
    bow_words: int = 0

    def metrics(self, seed: int) -> dict[str, float]:
        """One seed's scores, flat: ``probe/TASK/FEATURE/METRIC``, ``probe/TASK/baseline/METRIC`` and
        ``probe/TASK/bow/METRIC`` (the bag-of-words baseline) on dev, and ``probe/TASK/FEATURE/heldout/METRIC`` (and
        the baselines') on the held-out training examples, if any."""
        if seed not in self.baseline:
            raise BvrError(f"no probe with seed {seed}", where="seed", hint=f"seeds run: {self.seeds}")
        groups = [(f"{kind}/", self.probes[kind][seed].scores) for kind in self.features]
        groups.append(("baseline/", self.baseline[seed]))
        groups += [(f"{kind}/heldout/", self.probes[kind][seed].heldout_scores) for kind in self.features]
        groups += [("baseline/heldout/", self.heldout_baseline.get(seed, {})), (f"{BOW}/", self.bow.get(seed, {})),
                   (f"{BOW}/heldout/", self.heldout_bow.get(seed, {}))]
        return {f"probe/{self.task}/{prefix}{name}": value
                for prefix, scores in groups for name, value in scores.items()}

    def headline(self, kind: str) -> list[float]:
        """The headline dev score of feature kind ``kind``, per seed in order."""
        return [self.probes[kind][seed].scores[self.main_metric] for seed in self.seeds]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: everything but the subsample indices (their sizes instead), and every seed's flat metrics."""
        data = dataclasses.asdict(self)
        data["subsamples"] = {seed: len(indices) for seed, indices in self.subsamples.items()}
        data["median"] = {kind: float(np.median(self.headline(kind))) for kind in self.features}
        data["metrics"] = {seed: self.metrics(seed) for seed in self.seeds}
        return data


# --- Printing --------------------------------------------------------------------------------------------------


def _row(name: str, values: list[float], note: str = "") -> str:
    """One printed row: the name, the median, then every seed's value, in points."""
    return f"  {name:<9}{points(float(np.median(values))):>8}{''.join(f'  {points(v):>8}' for v in values)}{note}"


def describe(result: ProbeResult) -> str:
    """A table for the CLI: per feature kind the median and every seed's headline score in points, beside the
    baselines."""
    key = result.main_metric
    control = " (no-pretraining control: random encoder of the same shape)" if result.from_scratch else ""
    seeds = "".join(f"  {'seed ' + str(seed):>8}" for seed in result.seeds)
    lines = [f"{result.task}: linear probes on frozen features of {result.checkpoint}{control}",
             f"{key} in points on {result.split} ({result.eval_size:,} examples), median over "
             f"{len(result.seeds)} seed(s)",
             f"  {'feature':<9}{'median':>8}{seeds}  L2 chosen"]
    for kind in result.features:
        l2s = " ".join(f"{result.probes[kind][seed].l2:g}" for seed in result.seeds)
        lines.append(_row(kind, result.headline(kind), f"  {l2s}"))
    lines.append(_row("baseline", [result.baseline[seed][key] for seed in result.seeds],
                      "  (majority class, or the training mean)"))
    if result.bow:
        lines.append(_row(BOW, [result.bow[seed][key] for seed in result.seeds],
                          f"  (bag of words: {result.bow_words:,} words' counts)"))
    if result.heldout_size:
        lines.append(f"{key} on {result.heldout_size:,} held-out training examples")
        for kind in result.features:
            lines.append(_row(kind, [result.probes[kind][seed].heldout_scores[key] for seed in result.seeds]))
        lines.append(_row("baseline", [result.heldout_baseline[seed][key] for seed in result.seeds]))
        if result.heldout_bow:
            lines.append(_row(BOW, [result.heldout_bow[seed][key] for seed in result.seeds]))
    unconverged = sorted({kind for kind in result.features for p in result.probes[kind].values() if not p.converged})
    if unconverged:
        lines.append(f"note: L-BFGS hit {MAX_ITERATIONS} iterations for {', '.join(unconverged)}")
    lines.extend(f"data: {line}" for line in result.reports)
    seconds = result.seconds
    lines.append(f"time: {duration(seconds.get('total'))} (features {duration(seconds.get('extract'))}, "
                 f"probes {duration(seconds.get('probe'))}, bag of words {duration(seconds.get('bow'))})")
    return "\n".join(lines)
