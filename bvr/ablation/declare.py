"""Ablations declared once: ``experiments/NAME.yaml`` parsed into one resolved :class:`~bvr.config.Config` per arm.

An experiment file states one decision under test (a RoBERTa or BERT ablation: masking, input format and NSP, batch
size, vocabulary) as small diffs over a shared base: an arm lists only what it changes::

    description: Static (BERT) vs dynamic (RoBERTa) masking.
    published: {ablation: masking}     # the table of reports/published.yaml it compares with (or null)
    base:                               # a config layer shared by every arm, over the chosen preset
      masking: {dupe_factor: 10}
      finetune: {tasks: [sst2, mrpc], seeds: 5, optional: [mnli, qnli]}
      evaluate: {blimp: {per_paradigm: 100}, probes: {tasks: [sst2]}}
    presets:                            # preset name -> a config layer over the base (shared by every arm)
      tiny:
        corpus: {max_documents: 800}
        finetune: {tasks: [sst2], seeds: 3, max_train_examples: 1000}
        pretrain_seeds: [0, 1, 2, 3]    # the one ablation key a preset block may set besides config sections
    arms:                               # arm name -> the config keys this arm is about, nothing else
      static: {masking: {mode: static}}
      dynamic: {masking: {mode: dynamic}}
    control: true                       # add a 'no-pretraining' arm: same encoder, random init, same fine-tuning
    pretrain_seeds: [0, 1, 2]

The ``finetune`` and ``evaluate`` sections of the configuration say which tasks and seeds every arm is fine-tuned
on (with which hyperparameters: ``finetune.KEY``, ``finetune.per_task.TASK.KEY``) and which zero-shot and probe
evaluations every model gets; they are shared by every arm, so an arm may not set them. An arm may carry its own
``presets: {NAME: {...}}`` block to scale its values to a preset (the batch-size ablation does); such a block may
only touch keys the arm already declares in its main diff.

Each arm's configuration is built in layers, each over the one before, with :mod:`bvr.config`'s merging so that a
bad key, type or value names the file, line and key:

1. the dataclass defaults;
2. the preset file ``experiments/presets/NAME.yaml``;
3. the experiment's ``base``;
4. the experiment's ``presets: NAME``;
5. the arm's diff, then the arm's ``presets: NAME``;
6. ``--set`` overrides (applied to every arm).

The arm's config ``name`` is the arm name. Nothing here trains or fine-tunes: this module only parses, expands and
checks; the checks on the arms are in :mod:`bvr.ablation.arms` (:func:`~bvr.ablation.arms.check_arms`, run on
every ablation loaded here, refuses arms that differ in anything no arm declares).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bvr.ablation.arms import check_arms
from bvr.config import (
    HYPERPARAMETERS,
    PRESETS_DIR,
    Config,
    EvaluateConfig,
    Layer,
    at,
    build_config,
    build_dataclass,
    check_task_names,
    flatten,
    mapping,
    override_layer,
    preset_names,
    preset_path,
    read_yaml,
    sub_origins,
)
from bvr.errors import BvrError
from bvr.tasks.registry import TASKS, get_task

EXPERIMENTS_DIR = PRESETS_DIR.parent
"""Folder of the shipped experiment files."""

CONTROL_ARM = "no-pretraining"
"""Name of the control arm added by ``control: true``."""

TOP_KEYS = ("description", "published", "control", "arms", "base", "presets", "pretrain_seeds")
"""Keys allowed at the top of an experiment file."""

SHARED_SECTIONS = ("finetune", "evaluate")
"""Config sections every arm shares: set in ``base`` or ``presets``, never in an arm."""


@dataclass(frozen=True)
class Evaluations:
    """Evaluations run on every pretrained model and every control without fine-tuning (sensitive at small scale):
    the ``evaluate`` section of the arms' configuration (:class:`~bvr.config.EvaluateConfig`), flattened.

    Attributes:
        blimp: score BLiMP's minimal pairs zero-shot by pseudo-log-likelihood (where the data folder has blimp/).
        blimp_per_paradigm: pairs per paradigm, a fixed subsample the same for every model (None: all 1,000).
        blimp_seed: the seed that picks the subsample.
        probe_tasks: tasks of the frozen-feature linear probes.
        probe_seeds: probe seeds per model; a seed draws the probe's training subsample, nothing else.
        probe_features: the feature kind whose score is the probe's headline (``mean``, ``cls`` or ``last4``).
        probe_max_train_examples: training examples per probe (None: the whole train split).
        probe_max_eval_examples: evaluation examples (None: the whole split), the same for every model.
        probe_heldout_examples: training examples set aside and scored as the probe's test set, in place of the
            dev split as the headline (None: dev is the headline). A larger test set than a small dev split
            (SST-2's 872) cuts the sampling error of each model's score, and so of the comparisons.
    """

    blimp: bool = True
    blimp_per_paradigm: int | None = 100
    blimp_seed: int = 0
    probe_tasks: tuple[str, ...] = ("sst2", "conll2003")
    probe_seeds: int = 3
    probe_features: str = "mean"
    probe_max_train_examples: int | None = 4000
    probe_max_eval_examples: int | None = None
    probe_heldout_examples: int | None = None

    @classmethod
    def from_config(cls, section: EvaluateConfig) -> Evaluations:
        """The settings of an ``evaluate`` section (probe task names resolved in the registry)."""
        blimp, probes = section.blimp, section.probes
        return cls(blimp=blimp.enabled, blimp_per_paradigm=blimp.per_paradigm, blimp_seed=blimp.seed,
                   probe_tasks=tuple(get_task(t).name for t in probes.tasks), probe_seeds=probes.seeds,
                   probe_features=probes.features, probe_max_train_examples=probes.max_train_examples,
                   probe_max_eval_examples=probes.max_eval_examples, probe_heldout_examples=probes.heldout_examples)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "probe_tasks": list(self.probe_tasks)}


_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


@dataclass
class Ablation:
    """One ablation, expanded for one preset: a resolved config per arm and what each arm declares.

    Attributes:
        name: the experiment name (the file's stem), also the MLflow experiment.
        description: one paragraph from the file.
        arms: arm name -> resolved config (``name`` is the arm name), in file order; the control arm is not here.
        control: whether a ``no-pretraining`` control arm is fine-tuned too (see :meth:`control_config`).
        pretrain_seeds: seeds of pretraining, each arm pretrained once per seed.
        finetune_tasks: tasks every arm is fine-tuned on (``finetune.tasks``).
        finetune_seeds: fine-tuning seeds per (arm, task) (``finetune.seeds``).
        declared: arm name -> the dotted keys the arm's diff sets (what the arm is about).
        source: the experiment file.
        preset: the preset it was expanded for (None: dataclass defaults).
        published: the published table it compares with (``{'ablation': NAME}``), or None.
        optional_tasks: tasks fine-tuned too when their data files exist (``finetune.optional``).
        finetune_hparams: the fine-tuning hyperparameters the experiment file and ``--set`` give over the preset's
            (``KEY`` or ``per_task.TASK.KEY`` -> value, in the order they apply).
        control_base: the control's config: the shared layers (preset, base, the base's preset block, ``--set``)
            without any arm's diff.
        evaluations: the zero-shot and probe evaluations every model gets (``evaluate``).
    """

    name: str
    description: str
    arms: dict[str, Config]
    control: bool
    pretrain_seeds: list[int]
    finetune_tasks: list[str]
    finetune_seeds: int
    declared: dict[str, set[str]]
    source: Path
    preset: str | None = None
    published: dict[str, Any] | None = None
    optional_tasks: list[str] = field(default_factory=list)
    finetune_hparams: dict[str, Any] = field(default_factory=dict)
    control_base: Config | None = None
    evaluations: Evaluations = field(default_factory=Evaluations)

    @property
    def arm_names(self) -> list[str]:
        """Every arm to fine-tune, the control last."""
        return list(self.arms) + ([CONTROL_ARM] if self.control else [])

    @property
    def declared_keys(self) -> set[str]:
        """Every key some arm declares: the only keys arms may differ in."""
        return set().union(*self.declared.values()) if self.declared else set()

    def control_config(self) -> Config | None:
        """The control's config: the shared base with no arm's diff; it is never pretrained, only initialised.

        The control depends on nothing an arm declares, so changing one arm leaves the control's runs in place.
        Where arms differ in encoder shape or tokenizer (vocab, bert-vs-roberta), the control has the base's.
        """
        if not self.control:
            return None
        if self.control_base is not None:
            return self.control_base
        first = next(iter(self.arms.values()))
        return build_dataclass(Config, {**first.to_dict(), "name": CONTROL_ARM}, "")

    def finetune_overrides(self) -> list[str]:
        """:attr:`finetune_hparams` as ``finetune.KEY=VALUE`` strings for :func:`bvr.tasks.run.finetune`, which
        applies them over the preset's ``finetune`` section: each task resolves as it does in the arms' config."""
        return [f"finetune.{key}={_yaml_scalar(value)}" for key, value in self.finetune_hparams.items()]


def _yaml_scalar(value: Any) -> str:
    """A value written so that ``parse_override`` reads it back as it was (``null``, ``1.0e-4``, ``true``)."""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


# ---------------------------------------------------------------------------------------------------------------
# Loading


def list_experiments() -> list[str]:
    """Names of the shipped experiment files."""
    return sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml"))


def experiment_path(name_or_path: str | Path) -> Path:
    """The file of an experiment given by name ('masking') or path.

    Raises:
        BvrError: no such experiment (the message lists the shipped ones).
    """
    text = str(name_or_path)
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return path
    candidate = EXPERIMENTS_DIR / f"{text}.yaml"
    if candidate.is_file():
        return candidate
    raise BvrError(f"unknown experiment '{text}'", where="experiment",
                   hint=f"known experiments: {', '.join(list_experiments())}, or give a path to a YAML file")


def _config_layer(data: dict[str, Any], key: str, lines: dict[str, str]) -> Layer:
    """A block of config sections in the file (``base``, ``presets.tiny``, an arm) as a layer; refuses ``name``."""
    if "name" in data:
        raise BvrError("the config name is the arm name and cannot be set here", where=at(lines, f"{key}.name"))
    return data, sub_origins(lines, f"{key}.")


def _known_preset(name: str, key: str, lines: dict[str, str]) -> None:
    if name not in preset_names():
        raise BvrError(f"unknown preset '{name}'", where=at(lines, key),
                       hint=f"known presets: {', '.join(preset_names())}")


def _check_top(data: dict[str, Any], lines: dict[str, str]) -> None:
    """Refuse unknown top-level keys, and say where the old forms moved."""
    for key in data:
        if key in SHARED_SECTIONS:
            raise BvrError(f"a top-level '{key}:' block is the old form: move its keys under base: {{{key}: ...}} "
                           f"(every preset), its presets.NAME block under presets: {{NAME: {{{key}: ...}}}}",
                           where=at(lines, str(key)))
        if key not in TOP_KEYS:
            raise BvrError("unknown key", where=at(lines, str(key)), hint=f"known keys: {', '.join(TOP_KEYS)}")
    if isinstance(data.get("pretrain_seeds"), dict):
        raise BvrError("pretrain_seeds: {default: ..., NAME: ...} is the old form: write pretrain_seeds: [...] for "
                       "every preset and presets: {NAME: {pretrain_seeds: [...]}} for one",
                       where=at(lines, "pretrain_seeds"))


def load_ablation(
    name_or_path: str | Path,
    *,
    preset: str | None = None,
    overrides: list[str] | None = None,
) -> Ablation:
    """Read an experiment file and resolve one config per arm.

    Args:
        name_or_path: a shipped experiment's name ('masking') or a YAML file.
        preset: name of a file in ``experiments/presets``; None uses the dataclass defaults.
        overrides: ``section.key=value`` strings applied to every arm, last. A key some arm declares is refused,
            since setting it for every arm would erase the ablation.

    Returns:
        The ablation with every arm resolved; :func:`~bvr.ablation.arms.check_arms` has passed on it.

    Raises:
        BvrError: naming the file, line and key of anything wrong (unknown key, bad type or value, no arms, an
            arm preset block touching an undeclared key, an old form), or the arms and keys
            :func:`~bvr.ablation.arms.check_arms` refuses.
    """
    path = experiment_path(name_or_path)
    data, lines = read_yaml(path, "experiment file")
    _check_top(data, lines)
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise BvrError("expected text", where=at(lines, "description"))
    published = data.get("published")
    if published is not None and not (isinstance(published, dict) and isinstance(published.get("ablation"), str)):
        raise BvrError("expected {ablation: NAME} or null", where=at(lines, "published"))
    control = data.get("control", False)
    if not isinstance(control, bool):
        raise BvrError(f"expected true or false, got {control!r}", where=at(lines, "control"))
    pretrain_seeds = _seed_list(data.get("pretrain_seeds", [0]), "pretrain_seeds", lines)

    # Shared layers: preset file, experiment base, experiment presets[NAME] (its pretrain_seeds aside).
    shared: list[Layer] = [read_yaml(preset_path(preset))] if preset else []
    shared.append(_config_layer(mapping(data.get("base"), "base", lines, "config sections"), "base", lines))
    presets = mapping(data.get("presets"), "presets", lines, "preset names")
    for name, raw in presets.items():
        key = f"presets.{name}"
        _known_preset(name, key, lines)
        block = dict(mapping(raw, key, lines, "config sections"))
        seeds = _seed_list(block.pop("pretrain_seeds"), f"{key}.pretrain_seeds", lines) if "pretrain_seeds" in block \
            else None
        layer = _config_layer(block, key, lines)
        if name == preset:
            shared.append(layer)
            pretrain_seeds = seeds or pretrain_seeds
    override_layers = [override_layer(text) for text in overrides or []]

    arms_raw = mapping(data.get("arms"), "arms", lines, "arm names")
    if len(arms_raw) < 2:
        raise BvrError(f"an ablation needs at least two arms, found {len(arms_raw)}",
                       where=at(lines, "arms") if "arms" in lines else path)
    base = _resolve(CONTROL_ARM, [*shared, *override_layers])  # a bad shared value is reported here, for no arm
    arms: dict[str, Config] = {}
    declared: dict[str, set[str]] = {}
    for arm, raw in arms_raw.items():
        arm = str(arm)
        declared[arm], arm_layers = _arm_layers(arm, raw, lines, preset)
        arms[arm] = _resolve(arm, [*shared, *arm_layers, *override_layers])

    experiment_layers = [*(shared[1:] if preset else shared), *override_layers]  # the preset file's finetune aside
    tasks = _task_names(base.finetune.tasks, "finetune.tasks", experiment_layers)
    _check_per_task(base, [*shared, *override_layers])
    _task_names(base.evaluate.probes.tasks, "evaluate.probes.tasks", experiment_layers)
    ablation = Ablation(
        name=path.stem, description=description.strip(), arms=arms, control=control,
        pretrain_seeds=list(pretrain_seeds), finetune_tasks=tasks, finetune_seeds=base.finetune.seeds,
        declared=declared, source=path, preset=preset, published=published,
        optional_tasks=[t for t in _task_names(base.finetune.optional, "finetune.optional", experiment_layers)
                        if t not in tasks],
        finetune_hparams=_finetune_hparams(experiment_layers), control_base=base if control else None,
        evaluations=Evaluations.from_config(base.evaluate),
    )
    for _nested, where in override_layers:
        (text,) = where  # the dotted key of the --set
        if text in ablation.declared_keys or any(k.startswith(f"{text}.") for k in ablation.declared_keys):
            raise BvrError("this key is what the arms differ in; setting it for every arm would erase the ablation",
                           where=f"--set {text}")
    check_arms(ablation)
    return ablation


def _arm_layers(arm: str, raw: Any, lines: dict[str, str], preset: str | None) -> tuple[set[str], list[Layer]]:
    """An arm's declared keys and its layers: its diff, then its own ``presets: PRESET`` block."""
    key = f"arms.{arm}"
    if not _ARM_NAME.match(arm) or arm == CONTROL_ARM:
        raise BvrError(f"'{arm}' cannot name an arm", where=at(lines, key),
                       hint=f"use letters, digits, '-' and '_', not '{CONTROL_ARM}'")
    diff = dict(mapping(raw, key, lines, "config sections"))
    arm_presets = mapping(diff.pop("presets", None), f"{key}.presets", lines, "preset names")
    for section in SHARED_SECTIONS:
        if section in diff:
            raise BvrError(f"'{section}' is shared by every arm: set it in base or presets, not in an arm",
                           where=at(lines, f"{key}.{section}"))
    declared = set(flatten(diff))
    layers = [_config_layer(diff, key, lines)]
    for name, block in arm_presets.items():
        block_key = f"{key}.presets.{name}"
        _known_preset(name, block_key, lines)
        block = mapping(block, block_key, lines, "config sections")
        for dotted in flatten(block):
            if dotted not in declared:
                raise BvrError(f"arm '{arm}' changes '{dotted}' for preset '{name}' but does not declare it",
                               where=at(lines, f"{block_key}.{dotted}"),
                               hint=f"set {dotted} in the arm's main diff too, or move it to the shared "
                                    f"presets.{name}")
        if name == preset:
            layers.append(_config_layer(block, block_key, lines))
    return declared, layers


def _resolve(arm: str, layers: list[Layer]) -> Config:
    """Merge the layers of one arm into a Config named after the arm."""
    try:
        return build_config([*layers, ({"name": arm}, {})])
    except BvrError as err:
        if arm == CONTROL_ARM:  # the shared layers alone
            raise
        raise BvrError(err.message, where=f"{err.where} (arm '{arm}')", hint=err.hint) from None


def _finetune_hparams(layers: list[Layer]) -> dict[str, Any]:
    """The fine-tuning hyperparameters ``layers`` set (``KEY``, ``per_task.TASK.KEY``), each moved to the end when
    set again, so that applying them in order gives what the layers give."""
    out: dict[str, Any] = {}
    for data, _where in layers:
        section = data.get("finetune") or {}
        items = [(k, v) for k, v in section.items() if k in HYPERPARAMETERS]
        items += [(f"per_task.{task}.{k}", v) for task, block in (section.get("per_task") or {}).items()
                  for k, v in (block or {}).items()]
        for key, value in items:
            out.pop(key, None)
            out[key] = value
    return out


def _seed_list(value: Any, key: str, lines: dict[str, str]) -> list[int]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in value)
            or len(set(value)) != len(value)):
        raise BvrError(f"expected a non-empty list of distinct integers, got {value!r}", where=at(lines, key))
    return list(value)


def _located(key: str, layers: list[Layer]) -> str:
    """``file:line: key`` of the last layer that set ``key`` (just ``key`` when none did)."""
    origin = next((where[key] for _data, where in reversed(layers) if key in where), None)
    return f"{origin}: {key}" if origin else key


def _task_names(names: list[str], key: str, layers: list[Layer]) -> list[str]:
    """Task names resolved in the registry; an unknown one is refused at the file and line that set ``key``."""
    resolved = []
    for name in names:
        try:
            resolved.append(get_task(name).name)
        except BvrError as err:
            raise BvrError(err.message, where=_located(key, layers), hint=err.hint) from None
    return resolved


def _check_per_task(cfg: Config, layers: list[Layer]) -> None:
    """Refuse a ``finetune.per_task`` block of a task the registry does not have (it would never apply)."""
    for task in cfg.finetune.per_task:
        try:
            check_task_names([task], list(TASKS), "finetune.per_task")
        except BvrError as err:
            raise BvrError(err.message, where=_located(f"finetune.per_task.{task}", layers), hint=err.hint) from None


# ---------------------------------------------------------------------------------------------------------------
# Checks
