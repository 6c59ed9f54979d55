"""Finding an ablation's runs when the data folder is named another way than when they were made: a plan's hash
holds its data by content, but `bvr report NAME --preset tiny` without a data folder (the data moved, or never
named) computes another plan than `bvr ablate` did, as does a plan made before the data entered by content, so its
manifest is not where that plan looks. :func:`made_elsewhere` finds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bvr.ablation.folders import manifests_of
from bvr.ablation.manifest import Manifest
from bvr.ablation.plan import Plan
from bvr.cache import fingerprint
from bvr.errors import BvrError

TASK_FOLDERS = ("glue", "conll2003", "squad", "blimp")
"""The data folder's task datasets, compared where both folders hold them."""


@dataclass(frozen=True)
class Elsewhere:
    """The manifest of the same plan made with another data folder."""

    manifest: Path
    data_dir: str
    """The data folder the runs were made with, as the manifest records it."""

    def note(self) -> str:
        """The line a command prints when it uses these runs."""
        return f"the runs were made with the data folder {self.data_dir}; using them (same settings)"


def made_elsewhere(plan: Plan, rebuild: Callable[[str], Plan]) -> Elsewhere | None:
    """The most recent manifest of ``plan``'s ablation and preset that ``rebuild`` (the same command with another
    data folder) reproduces exactly; None if there is none. Where both data folders exist, a file the plan reads
    (each arm's corpus, the task folders) that differs is refused."""
    for path in manifests_of(plan.name, plan.output_dir, plan.preset or "default"):
        data_dir = Manifest.load(path).context.data_dir
        if not data_dir or data_dir == str(plan.data_dir):
            continue
        if rebuild(data_dir).manifest_path.resolve() != path.resolve():
            continue
        if plan.data_dir is not None and Path(data_dir).is_dir():
            _check_same_content(plan, plan.data_dir, Path(data_dir))
        return Elsewhere(path, data_dir)
    return None


def _check_same_content(plan: Plan, ours: Path, theirs: Path) -> None:
    """Refuse, naming the first differing file or folder, when ``ours`` (the plan's) and ``theirs`` hold other data."""
    corpora = {arm.config.corpus.path for arm in plan.arms}
    for relative in [*sorted(corpora), *TASK_FOLDERS]:
        mine, other = ours / relative, theirs / relative
        if not mine.exists() and not other.exists():
            continue
        if fingerprint(mine) != fingerprint(other):
            raise BvrError(f"the runs of ablation '{plan.name}' were made with the data folder {theirs}, whose "
                           f"{relative} differs from {mine}", where="--data-dir",
                           hint=f"pass --data-dir {theirs} to report those runs, or run `bvr ablate {plan.name}` "
                                "on this data")
