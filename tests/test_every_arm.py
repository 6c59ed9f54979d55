"""Every arm of every shipped ablation pretrains and is scored as `bvr ablate` scores it (issue 54): no unit of a
shipped ablation may fail on the folders the ablation itself writes.

Each experiment file is resolved as `bvr ablate NAME --preset tiny` resolves it, then taken to fixture size
(:func:`fixture_plan`): one tiny encoder shape for every arm, and the settings the arms declare (batch sizes and
steps, vocabulary sizes, budgets) divided by one factor per ablation (:class:`Scale`), so that each arm keeps what
makes it that arm (its tokenizer and encoder families, input format and sentence objective, masking mode, scheme and
split, SBO, its batch size against the others' at equal sequences). The plan's own units then run through
:func:`bvr.runner.run.run_ablation` on a generated corpus, the BLiMP fixture, a probe task and one fine-tuning seed:
the real tokenizers, Lightning Trainer, model folders, evaluations and manifest.

Every arm (and the control) is pretrained. Scoring is shared where two model folders read alike: a reader of a
folder goes by its config.json, its tokenizer files and the names and shapes of its weights
(:func:`reading_signature`), so each scoring unit runs unless a folder of the same signature was already scored by a
unit of the same kind, task and settings (:func:`scoring_settings`), whose records then stand for it (the case says
which). The vocabulary ablation's byte-level BPE beside BERT's encoder is a signature of its own: its BLiMP, probe
and fine-tuning units once failed on their own folder.
"""

from __future__ import annotations

import dataclasses
import io
import math
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from safetensors import safe_open

from bvr.ablation.arms import check_arms, equal_passes
from bvr.ablation.declare import CONTROL_ARM, Ablation, list_experiments
from bvr.ablation.loading import load_ablation
from bvr.ablation.manifest import Manifest
from bvr.ablation.plan import ArmSeed, Plan, Unit, UnitKind, make_plan
from bvr.config import Config, config_hash, flatten
from bvr.errors import BvrError
from bvr.pretrained import load_pretrained
from bvr.pretraining.initialise import initialise
from bvr.runner.run import PRETRAINING_KINDS, run_ablation
from tests.test_prepare import write_wiki_corpus
from tests.test_probe import write_probe_data

pytestmark = pytest.mark.usefixtures("one_thread")

FIXTURES = Path(__file__).parent / "fixtures"
PRESET = "tiny"
"""The preset every ablation is resolved with before it is shrunk (the one a user on 2 cores runs)."""
DOCUMENTS = 20
"""Generated articles: about 50 training sequences of 32 tokens in every format, so that the largest fixture batch
(32) fits and a static arm makes more passes than it has masks (the ablation refuses it otherwise)."""
MODEL = {"num_layers": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32}
"""The encoder shape of every arm at fixture size."""
LENGTH = 32
"""Tokens per sequence of the arm with the shortest."""
BATCH, MAX_BATCH = 4, 32
"""Sequences per step of the arm with the smallest batch, and at most of any (the corpus must hold a batch)."""
STEPS = 32
"""Steps of the arm with the most."""
VOCAB = 300
"""Ids of the arm with the smallest vocabulary (the least ``tokenizer.vocab_size`` takes)."""
SCORING = (UnitKind.BLIMP, UnitKind.PROBE, UnitKind.FINETUNE)


@dataclass(frozen=True)
class Scale:
    """The divisors that take one ablation to fixture size: the same for every arm, so what the arms declare keeps
    its ratios (2K sequences x 4 steps against 256 x 32, a 30K WordPiece against a 50K BPE, increasing budgets)."""

    batch: int
    steps: int
    length: int
    vocab: int
    dupe: int

    @classmethod
    def of(cls, configs: Iterable[Config]) -> Scale:
        configs = list(configs)
        batches = [c.training.batch_size for c in configs]
        return cls(batch=max(min(batches) // BATCH, -(-max(batches) // MAX_BATCH), 1),
                   steps=max(max(c.training.max_steps for c in configs) // STEPS, 1),
                   length=max(min(c.data.max_length for c in configs) // LENGTH, 1),
                   vocab=max(min(c.tokenizer.resolved_vocab_size for c in configs) // VOCAB, 1),
                   dupe=min(c.masking.dupe_factor for c in configs))

    def shrink(self, cfg: Config) -> Config:
        """``cfg`` at fixture size: the generated corpus, the tiny encoder, every scaled setting divided, one
        thread."""
        t = cfg.training
        steps = max(t.max_steps // self.steps, 1)
        per_step = self.batch * self.length  # tokens per step shrink as batch x length
        training = dataclasses.replace(
            t, batch_size=t.batch_size // self.batch, max_steps=steps,
            warmup_steps=min(t.warmup_steps // self.steps, steps), threads=1,
            tokens_per_batch=t.tokens_per_batch and t.tokens_per_batch // per_step,
            max_tokens=t.max_tokens and t.max_tokens // (per_step * self.steps))
        return dataclasses.replace(
            cfg, training=training, model=dataclasses.replace(cfg.model, **MODEL),
            corpus=dataclasses.replace(cfg.corpus, source="wikiextractor", path="corpus/wiki", max_documents=None),
            tokenizer=dataclasses.replace(cfg.tokenizer, vocab_size=cfg.tokenizer.resolved_vocab_size // self.vocab),
            data=dataclasses.replace(cfg.data, max_length=cfg.data.max_length // self.length),
            masking=dataclasses.replace(cfg.masking, dupe_factor=cfg.masking.dupe_factor // self.dupe))


def scoring_overrides(ablation: Ablation) -> list[str]:
    """``--set`` values that keep the ablation's scoring protocol (its tasks, probe features, held-out probe
    examples, fine-tuning grid) at fixture size: one pretraining seed, the first probe task and fine-tuning task,
    one seed of each."""
    evaluations = ablation.evaluations
    heldout = "null" if evaluations.probe_heldout_examples is None else 2
    return ["pretrain_seeds=[0]", "evaluate.blimp.per_paradigm=2",
            f"evaluate.probes.tasks=[{evaluations.probe_tasks[0]}]", "evaluate.probes.seeds=1",
            "evaluate.probes.max_train_examples=null",
            f"evaluate.probes.heldout_examples={heldout}", f"finetune.tasks=[{ablation.finetune_tasks[0]}]",
            "finetune.optional=[]", "finetune.seeds=1", "finetune.max_train_examples=null",
            "finetune.max_eval_examples=null", "finetune.epochs=1", "finetune.max_length=32"]


def fixture_plan(name: str, data_dir: Path, output_dir: Path) -> Plan:
    """The plan of `bvr ablate NAME --preset tiny`, with every arm (the control too) at fixture size.

    Raises:
        BvrError: the shrunk arms no longer differ only where declared, or no longer see equal tokens.
    """
    plan = make_plan(name, preset=PRESET, overrides=scoring_overrides(load_ablation(name, preset=PRESET)),
                     data_dir=data_dir, output_dir=output_dir)
    scale = Scale.of(plan.ablation.arms.values())
    ablation = plan.ablation
    control = ablation.control_base and scale.shrink(ablation.control_base)
    small = dataclasses.replace(ablation, arms={arm: scale.shrink(cfg) for arm, cfg in ablation.arms.items()},
                                control_base=control)
    check_arms(small)
    equal_passes(small)
    arms = [dataclasses.replace(arm, config=scale.shrink(arm.config)) for arm in plan.arms]
    return dataclasses.replace(plan, ablation=small, arms=arms)


def reading_signature(model_dir: Path) -> str:
    """What a reader of a model folder goes by besides the values of the weights: config.json, the tokenizer's
    files, and the names and shapes of the weights (bvr.yaml only names the run)."""
    with safe_open(model_dir / "model.safetensors", "pt") as weights:
        shapes = {name: weights.get_slice(name).get_shape() for name in weights.keys()}  # noqa: SIM118
    files = {p.name: p.read_text() for p in sorted(model_dir.iterdir()) if p.name not in ("model.safetensors",
                                                                                           "bvr.yaml")}
    return config_hash(shapes, files)


def scoring_settings(plan: Plan, unit: Unit) -> dict[str, Any]:
    """What a scoring unit runs with besides the model: BLiMP's or the probe's settings, or the fine-tuning
    protocol (the preset under the ablation's hyperparameters, the seeds)."""
    if unit.kind is UnitKind.FINETUNE:
        return {"preset": plan.preset, "finetune": plan.ablation.finetune_overrides(), "seeds": plan.seeds}
    return {key: value for key, value in plan.evaluations.to_dict().items() if key.startswith(unit.kind.value)}


@dataclass
class Ran:
    """One ablation run at fixture size: its plan, its manifest, what it printed, and which unit scored each of its
    scoring units' questions."""

    plan: Plan
    manifest: Manifest
    log: str
    scored_by: dict[str, tuple[str, Unit]] = field(default_factory=dict)
    """Unit id -> (ablation, unit) that ran on a folder read alike with the same settings."""


def model_dir(manifest: Manifest, arm: ArmSeed) -> Path | None:
    """The arm's model folder (the control's initialisation), or None where its pretraining left none."""
    if arm.control:
        return initialise(arm.config, progress=False).model_dir
    run_dir = manifest.pretrain_record(arm.label).run_dir
    return Path(run_dir) / "model" if run_dir and (Path(run_dir) / "model" / "config.json").is_file() else None


class Runs:
    """Runs each ablation once, when its first case asks: every pretraining unit, then each scoring unit whose model
    reads unlike every model scored before with the same settings."""

    def __init__(self, data_dir: Path, output_dir: Path) -> None:
        self.data_dir, self.output_dir = data_dir, output_dir
        self.done: dict[str, Ran] = {}
        self.scorers: dict[str, tuple[str, Unit]] = {}
        """Hash of (reading signature, unit kind and task, settings) -> the (ablation, unit) that scored it."""

    def __call__(self, name: str) -> Ran:
        if name not in self.done:
            self.done[name] = self._run(name)
        return self.done[name]

    def _run(self, name: str) -> Ran:
        plan = fixture_plan(name, self.data_dir, self.output_dir)
        out = io.StringIO()
        console = Console(file=out, width=200)
        self._ablate(plan, [u.id for u in plan.units() if u.kind in PRETRAINING_KINDS], console)
        manifest = Manifest.load(plan.manifest_path)
        folders = {arm.label: model_dir(manifest, arm) for arm in plan.arms}
        signatures = {label: reading_signature(folder) for label, folder in folders.items() if folder is not None}
        ran = Ran(plan, manifest, "")
        for unit in plan.units():
            if unit.kind in SCORING and unit.name in signatures:
                key = config_hash(signatures[unit.name], unit.kind.value, unit.task, scoring_settings(plan, unit))
                ran.scored_by[unit.id] = self.scorers.setdefault(key, (name, unit))
        self._ablate(plan, [u.id for u_id, (scorer, u) in ran.scored_by.items() if (scorer, u.id) == (name, u_id)],
                     console)
        ran.manifest, ran.log = Manifest.load(plan.manifest_path), out.getvalue()
        return ran

    @staticmethod
    def _ablate(plan: Plan, units: list[str], console: Console) -> None:
        """Run ``units`` as `bvr ablate --only` does; what failed is in the manifest and the log, for each case."""
        if not units:
            return
        try:
            run_ablation(plan, only=units, report=False, progress=False, console=console)
        except BvrError as err:
            console.print(err.one_line(), highlight=False, soft_wrap=True)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The generated corpus, the GLUE fixtures with a larger SST-2, CoNLL-2003's sample (its training split five
    times over, so that a fine-tuning grid can hold some of it out) and BLiMP's fixture."""
    root = write_probe_data(tmp_path_factory.mktemp("data"))
    sample = (FIXTURES / "conll" / "sample.txt").read_text().strip()
    (root / "conll2003" / "train.txt").write_text("\n\n".join([sample] * 5) + "\n")
    write_wiki_corpus(root, documents=DOCUMENTS)
    shutil.copytree(FIXTURES / "blimp", root / "blimp")
    return root


@pytest.fixture(scope="module")
def runs(data_dir, tmp_path_factory):
    """The ablations run so far, in one working folder (the MLflow store lives there) and one output folder."""
    work = tmp_path_factory.mktemp("every-arm")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)
        yield Runs(data_dir, work / "outputs")


def _cases() -> list[tuple[str, str]]:
    return [(name, arm) for name in list_experiments()
            for arm in [*load_ablation(name, preset=PRESET).arms, CONTROL_ARM]]


CASES = _cases()


def test_every_shipped_ablation_is_a_case():
    """The cases are the shipped experiment files' arms and controls, found as `bvr ablate` finds them."""
    names = {name for name, _arm in CASES}
    assert names == set(list_experiments()) >= {"masking", "span-masking", "sentence-objective", "mask-split", "nsp",
                                                "batch-size", "vocab", "bert-vs-roberta"}
    assert ("vocab", "byte-bpe-50k") in CASES


@pytest.mark.parametrize("name", sorted({name for name, _arm in CASES}))
def test_fixture_size_keeps_what_each_arm_declares(name, tmp_path):
    """At fixture size the arms still differ only in what they declare and see equal tokens (:func:`fixture_plan`
    checks both); each declared value is kept, a scaled one divided by its ablation's factor."""
    tiny = load_ablation(name, preset=PRESET)
    small = fixture_plan(name, None, tmp_path).ablation
    scale = Scale.of(tiny.arms.values())
    divisors = {"training.batch_size": scale.batch, "training.max_steps": scale.steps,
                "training.warmup_steps": scale.steps, "tokenizer.vocab_size": scale.vocab,
                "data.max_length": scale.length, "masking.dupe_factor": scale.dupe,
                "training.tokens_per_batch": scale.batch * scale.length,
                "training.max_tokens": scale.batch * scale.length * scale.steps}
    for arm, keys in tiny.declared.items():
        before, after = flatten(tiny.arms[arm].to_dict()), flatten(small.arms[arm].to_dict())
        for key in keys:
            expected = before[key] // divisors[key] if key in divisors else before[key]
            if key == "training.warmup_steps":
                expected = min(expected, after["training.max_steps"])
            assert after[key] == expected, (arm, key, before[key], after[key])


@pytest.mark.parametrize(("name", "arm"), CASES, ids=[f"{name}:{arm}" for name, arm in CASES])
def test_every_arm_pretrains_and_is_scored(runs, name, arm):
    """The arm pretrains (finite losses; its sentence objective and SBO measured where it has them) and its folder,
    or one read alike, gets BLiMP, a probe and a fine-tuning seed, each done with a finite score in range and its
    MLflow run in the manifest."""
    ran = runs(name)
    [seed] = [a for a in ran.plan.arms if a.arm == arm]
    if not seed.control:
        record = ran.manifest.pretrain_record(seed.label)
        assert record.status == "done", f"{name}:{arm}: pretraining {record.status}: {record.error}\n{ran.log}"
        _check_pretraining(seed.config, record.metrics)
    units = [unit for unit in ran.plan.units() if unit.kind in SCORING and unit.name == seed.label]
    assert {unit.kind for unit in units} == set(SCORING), units  # BLiMP, a probe and fine-tuning are planned
    for unit in units:
        assert unit.id in ran.scored_by, f"{name}:{arm}: no model folder to score\n{ran.log}"
        scorer, scored = ran.scored_by[unit.id]
        where = f"{name}:{unit}" + ("" if (scorer, scored) == (name, unit) else f" (read as {scorer}:{scored})")
        records = runs(scorer).manifest.records_of(scored)
        assert records, where
        for record in records:
            assert record.status == "done", f"{where}: {record.status}: {record.error}\n{runs(scorer).log}"
            assert record.run_id and math.isfinite(record.score) and _in_range(record.main_key, record.score), \
                (where, record)


def _check_pretraining(cfg: Config, metrics: dict[str, float]) -> None:
    assert metrics["steps"] == cfg.training.max_steps, metrics
    assert all(math.isfinite(metrics[key]) for key in ("train/mlm_loss", "val/mlm_loss")), metrics
    objective = cfg.data.sentence_objective
    assert (f"val/{objective}_acc" in metrics) == (objective != "none"), metrics
    assert ("val/sbo_loss" in metrics) == cfg.model.sbo, metrics


def _in_range(key: str, score: float) -> bool:
    """Correlations lie in [-1, 1]; every other score of bvr's is a fraction."""
    low = -1.0 if any(word in key for word in ("pearson", "spearman", "mcc")) else 0.0
    return low <= score <= 1.0


def test_the_byte_level_bpe_arm_is_scored_on_its_own_folder(runs):
    """The vocabulary ablation's BPE arm (a byte-level BPE beside BERT's encoder) reads as no other arm does: its
    own folder is scored, and loads as written."""
    ran = runs("vocab")
    for unit_id, (scorer, unit) in ran.scored_by.items():
        if unit_id.split(":")[1] == "byte-bpe-50k":
            assert (scorer, unit.id) == ("vocab", unit_id)
    loaded = load_pretrained(model_dir(ran.manifest, ran.plan.arm("byte-bpe-50k")))
    assert (loaded.family, loaded.model.config.family) == ("roberta", "bert")
