"""Ablations declared once: ``experiments/NAME.yaml`` parsed into one resolved :class:`~bvr.config.Config` per arm.

An experiment file states one decision under test (a RoBERTa or BERT ablation: masking, input format and NSP, batch
size, vocabulary) as small diffs over a shared base: an arm lists only what it changes::

    description: Static (BERT) vs dynamic (RoBERTa) masking.
    published: {ablation: masking}     # the table of reports/published.yaml it compares with (or null)
    base: {masking: {dupe_factor: 10}}  # config sections shared by every arm, over the chosen preset
    presets:                            # per-preset changes to the base (shared by every arm)
      tiny: {corpus: {max_documents: 800}}
    arms:                               # arm name -> the config keys this arm is about, nothing else
      static: {masking: {mode: static}}
      dynamic: {masking: {mode: dynamic}}
    control: true                       # add a 'no-pretraining' arm: same encoder, random init, same fine-tuning
    pretrain_seeds: [0]
    finetune:
      tasks: [sst2, mrpc]
      seeds: 5
      optional: [mnli, qnli]            # fine-tuned too where their files exist
      hparams: {}                       # fine-tuning hyperparameters for every arm (over experiments/finetune.yaml)
      presets:                          # per-preset tasks, seeds and hparams (a smaller suite for tiny)
        tiny: {tasks: [sst2], seeds: 3, hparams: {max_train_examples: 1000}}

An arm may carry its own ``presets: {NAME: {...}}`` block to scale its values to a preset (the batch-size
ablation does); such a block may only touch keys the arm already declares in its main diff.

Each arm's configuration is built in layers, each over the one before, with :mod:`bvr.config`'s merging so that a
bad key, type or value names the file, line and key:

1. the dataclass defaults;
2. the preset file ``experiments/presets/NAME.yaml``;
3. the experiment's ``base``;
4. the experiment's ``presets: NAME``;
5. the arm's diff, then the arm's ``presets: NAME``;
6. ``--set`` overrides (applied to every arm).

The arm's config ``name`` is the arm name. Nothing here trains or fine-tunes: this module only parses, expands and
checks. :func:`check_arms` refuses arms that differ in anything no arm declares; :func:`equal_passes` refuses a
batch-size ablation whose arms do not see the same number of sequences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bvr.config import (
    PRESETS_DIR,
    Config,
    build_dataclass,
    build_layered,
    parse_override,
    preset_path,
    read_yaml,
)
from bvr.errors import BvrError

EXPERIMENTS_DIR = PRESETS_DIR.parent
"""Folder of the shipped experiment files."""

NOT_EXPERIMENTS = ("finetune",)
"""YAML files in :data:`EXPERIMENTS_DIR` that are not ablations."""

CONTROL_ARM = "no-pretraining"
"""Name of the control arm added by ``control: true``."""

DEFAULT_FINETUNE_TASKS = ("sst2", "mrpc", "stsb", "rte", "cola", "conll2003", "squad")
"""Tasks every arm is fine-tuned on unless the file lists others."""

DEFAULT_OPTIONAL_TASKS = ("mnli", "qnli")
"""Tasks fine-tuned too when their files exist (large; the runner decides)."""

DEFAULT_FINETUNE_SEEDS = 5
"""Fine-tuning seeds per (arm, task)."""

TOP_KEYS = ("description", "published", "base", "presets", "arms", "control", "pretrain_seeds", "finetune", "evaluate")
"""Keys allowed at the top of an experiment file."""

FINETUNE_KEYS = ("tasks", "seeds", "optional", "hparams", "presets")
"""Keys allowed under ``finetune``."""

EVALUATE_KEYS = ("blimp", "probes", "presets")
"""Keys allowed under ``evaluate``."""

BLIMP_KEYS = ("per_paradigm", "seed")
PROBE_KEYS = ("tasks", "seeds", "features", "max_train_examples", "max_eval_examples", "heldout_examples")


@dataclass(frozen=True)
class Evaluations:
    """Evaluations run on every pretrained model and every control without fine-tuning (sensitive at small scale).

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

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

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
        finetune_tasks: tasks every arm is fine-tuned on.
        finetune_seeds: fine-tuning seeds per (arm, task).
        declared: arm name -> the dotted keys the arm's diff sets (what the arm is about).
        source: the experiment file.
        preset: the preset it was expanded for (None: dataclass defaults).
        published: the published table it compares with (``{'ablation': NAME}``), or None.
        optional_tasks: tasks fine-tuned too when their data files exist.
        finetune_hparams: fine-tuning hyperparameters shared by every arm (``KEY: VALUE`` over
            ``experiments/finetune.yaml`` and its preset).
        control_base: the control's config: the shared layers (preset, base, the base's preset block, ``--set``)
            without any arm's diff.
        evaluations: the zero-shot and probe evaluations every model gets (``evaluate:``).
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
        """:attr:`finetune_hparams` as ``KEY=VALUE`` strings for :func:`bvr.tasks.run.finetune`."""
        return [f"{key}={_yaml_scalar(value)}" for key, value in self.finetune_hparams.items()]


def _yaml_scalar(value: Any) -> str:
    """A value written so that ``parse_override`` reads it back as it was (``null``, ``1.0e-4``, ``true``)."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


# ---------------------------------------------------------------------------------------------------------------
# Loading


def list_experiments() -> list[str]:
    """Names of the shipped experiment files."""
    return sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml") if p.stem not in NOT_EXPERIMENTS)


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
    if candidate.is_file() and text not in NOT_EXPERIMENTS:
        return candidate
    raise BvrError(f"unknown experiment '{text}'", where="experiment",
                   hint=f"known experiments: {', '.join(list_experiments())}, or give a path to a YAML file")


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> ``{dotted.key: leaf}``; lists are leaves."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{path}."))
        else:
            out[path] = value
    return out


def _sub_origins(lines: dict[str, str], prefix: str) -> dict[str, str]:
    """The ``file:line`` of the keys under ``prefix``, with the prefix removed (config-relative keys)."""
    return {k[len(prefix):]: v for k, v in lines.items() if k.startswith(prefix)}


def _mapping(value: Any, key: str, lines: dict[str, str], what: str) -> dict[str, Any]:
    """``value`` if it is a mapping (None counts as empty), else a BvrError at the key's line."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BvrError(f"expected a mapping of {what}, got {value!r}", where=_at(lines, key))
    return value


def _at(lines: dict[str, str], key: str) -> str:
    """``file:line: key`` for a key of the experiment file."""
    return f"{lines[key]}: {key}" if key in lines else key


def _check_config_sections(data: dict[str, Any], key: str, lines: dict[str, str]) -> None:
    """Refuse ``name`` among config sections: it is the arm name."""
    if "name" in data:
        raise BvrError("the config name is the arm name and cannot be set here", where=_at(lines, f"{key}.name"))


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
        The ablation with every arm resolved; :func:`check_arms` has passed on it.

    Raises:
        BvrError: naming the file, line and key of anything wrong (unknown key, bad type or value, no arms, an
            arm preset block touching an undeclared key), or the arms and keys :func:`check_arms` refuses.
    """
    path = experiment_path(name_or_path)
    data, lines = read_yaml(path)
    for key in data:
        if key not in TOP_KEYS:
            raise BvrError("unknown key", where=_at(lines, str(key)), hint=f"known keys: {', '.join(TOP_KEYS)}")

    description = data.get("description") or ""
    if not isinstance(description, str):
        raise BvrError("expected text", where=_at(lines, "description"))
    published = data.get("published")
    if published is not None and not (isinstance(published, dict) and isinstance(published.get("ablation"), str)):
        raise BvrError("expected {ablation: NAME} or null", where=_at(lines, "published"))
    control = data.get("control", False)
    if not isinstance(control, bool):
        raise BvrError(f"expected true or false, got {control!r}", where=_at(lines, "control"))
    pretrain_seeds = _pretrain_seeds(data.get("pretrain_seeds", [0]), lines, preset)
    tasks, optional, seeds, hparams = _finetune(data.get("finetune"), lines, preset)
    evaluations = _evaluations(data.get("evaluate"), lines, preset)

    base = _mapping(data.get("base"), "base", lines, "config sections")
    _check_config_sections(base, "base", lines)
    presets = _mapping(data.get("presets"), "presets", lines, "preset names")
    for name, block in presets.items():
        if not (PRESETS_DIR / f"{name}.yaml").is_file():
            raise BvrError(f"unknown preset '{name}'", where=_at(lines, f"presets.{name}"),
                           hint=f"known presets: {', '.join(sorted(p.stem for p in PRESETS_DIR.glob('*.yaml')))}")
        _check_config_sections(_mapping(block, f"presets.{name}", lines, "config sections"), f"presets.{name}", lines)

    arms_raw = _mapping(data.get("arms"), "arms", lines, "arm names")
    if len(arms_raw) < 2:
        raise BvrError(f"an ablation needs at least two arms, found {len(arms_raw)}",
                       where=_at(lines, "arms") if "arms" in lines else path)

    # Shared layers: preset file, experiment base, experiment presets[NAME].
    shared: list[tuple[dict[str, Any], dict[str, str]]] = []
    if preset:
        shared.append(read_yaml(preset_path(preset)))
    shared.append((base, _sub_origins(lines, "base.")))
    if preset and presets.get(preset):
        shared.append((presets[preset], _sub_origins(lines, f"presets.{preset}.")))

    override_layers = [parse_override(text) for text in overrides or []]

    arms: dict[str, Config] = {}
    declared: dict[str, set[str]] = {}
    for arm, raw in arms_raw.items():
        arm = str(arm)
        key = f"arms.{arm}"
        if not _ARM_NAME.match(arm) or arm == CONTROL_ARM:
            raise BvrError(f"'{arm}' cannot name an arm", where=_at(lines, key),
                           hint=f"use letters, digits, '-' and '_', not '{CONTROL_ARM}'")
        diff = dict(_mapping(raw, key, lines, "config sections"))
        arm_presets = _mapping(diff.pop("presets", None), f"{key}.presets", lines, "preset names")
        _check_config_sections(diff, key, lines)
        declared[arm] = set(flatten(diff))
        arm_layers = [(diff, _sub_origins(lines, f"{key}."))]
        for name, block in arm_presets.items():
            block_key = f"{key}.presets.{name}"
            if not (PRESETS_DIR / f"{name}.yaml").is_file():
                raise BvrError(f"unknown preset '{name}'", where=_at(lines, block_key))
            block = _mapping(block, block_key, lines, "config sections")
            for dotted in flatten(block):
                if dotted not in declared[arm]:
                    raise BvrError(f"arm '{arm}' changes '{dotted}' for preset '{name}' but does not declare it",
                                   where=_at(lines, f"{block_key}.{dotted}"),
                                   hint=f"set {dotted} in the arm's main diff too, or move it to the shared "
                                        f"presets.{name}")
            if name == preset:
                arm_layers.append((block, _sub_origins(lines, f"{block_key}.")))
        arms[arm] = _resolve(arm, [*shared, *arm_layers], override_layers)

    ablation = Ablation(
        name=path.stem, description=description.strip(), arms=arms, control=control,
        pretrain_seeds=list(pretrain_seeds), finetune_tasks=tasks, finetune_seeds=seeds, declared=declared,
        source=path, preset=preset, published=published, optional_tasks=optional, finetune_hparams=hparams,
        control_base=_resolve(CONTROL_ARM, shared, override_layers) if control else None,
        evaluations=evaluations,
    )
    for _nested, text in override_layers:
        if text in ablation.declared_keys or any(k.startswith(f"{text}.") for k in ablation.declared_keys):
            raise BvrError("this key is what the arms differ in; setting it for every arm would erase the ablation",
                           where=f"--set {text}")
    check_arms(ablation)
    return ablation


def _resolve(
    arm: str,
    layers: list[tuple[dict[str, Any], dict[str, str]]],
    overrides: list[tuple[dict[str, Any], str]],
) -> Config:
    """Merge the layers and overrides of one arm into a Config named after the arm."""
    named: list[tuple[dict[str, Any], dict[str, str]]] = [
        *layers, *(({**nested}, {key: f"--set {key}"}) for nested, key in overrides), ({"name": arm}, {})]
    try:
        return build_layered(Config, named)
    except BvrError as err:
        raise BvrError(err.message, where=f"{err.where} (arm '{arm}')", hint=err.hint) from None


def _finetune(
    raw: Any, lines: dict[str, str], preset: str | None
) -> tuple[list[str], list[str], int, dict[str, Any]]:
    """Parse the ``finetune`` block into (tasks, optional tasks, seeds, hparams), its ``presets: PRESET`` over it."""
    block = _mapping(raw, "finetune", lines, "fine-tuning settings")
    _known_keys(block, "finetune", lines, FINETUNE_KEYS)
    presets = _mapping(block.get("presets"), "finetune.presets", lines, "preset names")
    for name, sub in presets.items():
        where = f"finetune.presets.{name}"
        if not (PRESETS_DIR / f"{name}.yaml").is_file():
            raise BvrError(f"unknown preset '{name}'", where=_at(lines, where))
        _known_keys(_mapping(sub, where, lines, "fine-tuning settings"), where, lines,
                    tuple(k for k in FINETUNE_KEYS if k != "presets"))
    # Each key is read from the preset block when it sets it, else from the main block; hparams merge.
    chosen = presets.get(preset) or {} if preset else {}
    prefix = {key: f"finetune.presets.{preset}" if key in chosen else "finetune" for key in FINETUNE_KEYS}
    out: list[list[str]] = []
    for key, default in (("tasks", DEFAULT_FINETUNE_TASKS), ("optional", DEFAULT_OPTIONAL_TASKS)):
        names = chosen.get(key, block.get(key, list(default)))
        out.append(_task_names(names, f"{prefix[key]}.{key}", lines))
    tasks, optional = out
    if not tasks:
        raise BvrError("no fine-tuning tasks", where=_at(lines, f"{prefix['tasks']}.tasks"))
    optional = [t for t in optional if t not in tasks]
    seeds = chosen.get("seeds", block.get("seeds", DEFAULT_FINETUNE_SEEDS))
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
        raise BvrError(f"expected a positive integer, got {seeds!r}", where=_at(lines, f"{prefix['seeds']}.seeds"))
    hparams = {**_mapping(block.get("hparams"), "finetune.hparams", lines, "hyperparameters"),
               **_mapping(chosen.get("hparams"), f"finetune.presets.{preset}.hparams", lines, "hyperparameters")}
    _check_hparams(hparams, lines, preset)
    return tasks, optional, seeds, hparams


def _seed_list(value: Any, key: str, lines: dict[str, str]) -> list[int]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in value)
            or len(set(value)) != len(value)):
        raise BvrError(f"expected a non-empty list of distinct integers, got {value!r}", where=_at(lines, key))
    return list(value)


def _pretrain_seeds(value: Any, lines: dict[str, str], preset: str | None) -> list[int]:
    """``pretrain_seeds``: a list for every preset, or ``{default: [...], PRESET: [...]}``."""
    if not isinstance(value, dict):
        return _seed_list(value, "pretrain_seeds", lines)
    for name in value:
        if name != "default" and not (PRESETS_DIR / f"{name}.yaml").is_file():
            raise BvrError(f"unknown preset '{name}'", where=_at(lines, f"pretrain_seeds.{name}"),
                           hint="keys are 'default' and preset names")
    key = preset if preset in value else "default"
    if key not in value:
        raise BvrError(f"no seeds for preset '{preset}' and no 'default'", where=_at(lines, "pretrain_seeds"))
    return _seed_list(value[key], f"pretrain_seeds.{key}", lines)


def _optional_count(value: Any, key: str, lines: dict[str, str], *, minimum: int = 1) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BvrError(f"expected an integer >= {minimum} or null, got {value!r}", where=_at(lines, key))
    return value


def _evaluations(raw: Any, lines: dict[str, str], preset: str | None) -> Evaluations:
    """Parse ``evaluate:`` (``blimp``, ``probes``, and per-preset blocks of the same keys over them)."""
    block = _mapping(raw, "evaluate", lines, "evaluation settings")
    _known_keys(block, "evaluate", lines, EVALUATE_KEYS)
    presets = _mapping(block.get("presets"), "evaluate.presets", lines, "preset names")
    for name, sub in presets.items():
        if not (PRESETS_DIR / f"{name}.yaml").is_file():
            raise BvrError(f"unknown preset '{name}'", where=_at(lines, f"evaluate.presets.{name}"))
        _known_keys(_mapping(sub, f"evaluate.presets.{name}", lines, "evaluation settings"),
                    f"evaluate.presets.{name}", lines, ("blimp", "probes"))
    chosen = (presets.get(preset) or {}) if preset else {}
    merged: dict[str, Any] = {}
    for part, known in (("blimp", BLIMP_KEYS), ("probes", PROBE_KEYS)):
        main = block.get(part, {})
        over = chosen.get(part, {})
        if main is False or over is False:  # `blimp: false` turns an evaluation off
            merged[part] = False
            continue
        prefix = f"evaluate.presets.{preset}.{part}" if part in chosen else f"evaluate.{part}"
        main = _mapping(main, f"evaluate.{part}", lines, f"{part} settings")
        over = _mapping(over, prefix, lines, f"{part} settings")
        _known_keys(main, f"evaluate.{part}", lines, known)
        _known_keys(over, prefix, lines, known)
        merged[part] = {**{k: (v, f"evaluate.{part}.{k}") for k, v in main.items()},
                        **{k: (v, f"{prefix}.{k}") for k, v in over.items()}}
    return _build_evaluations(merged, lines)


def _build_evaluations(merged: dict[str, Any], lines: dict[str, str]) -> Evaluations:
    defaults = Evaluations()
    kwargs: dict[str, Any] = {}
    blimp = merged["blimp"]
    if blimp is False:
        kwargs["blimp"] = False
    else:
        if "per_paradigm" in blimp:
            kwargs["blimp_per_paradigm"] = _optional_count(blimp["per_paradigm"][0], blimp["per_paradigm"][1], lines)
        if "seed" in blimp:
            kwargs["blimp_seed"] = _optional_count(blimp["seed"][0], blimp["seed"][1], lines, minimum=0) or 0
    probes = merged["probes"]
    if probes is False:
        kwargs["probe_tasks"] = ()
        return Evaluations(**{**vars(defaults), **kwargs})
    if "tasks" in probes:
        kwargs["probe_tasks"] = tuple(_task_names(probes["tasks"][0], probes["tasks"][1], lines))
    if "seeds" in probes:
        kwargs["probe_seeds"] = _optional_count(probes["seeds"][0], probes["seeds"][1], lines)
    if "features" in probes:
        value, key = probes["features"]
        if value not in ("cls", "mean", "last4"):
            raise BvrError(f"expected cls, mean or last4, got {value!r}", where=_at(lines, key))
        kwargs["probe_features"] = value
    for name in ("max_train_examples", "max_eval_examples", "heldout_examples"):
        if name in probes:
            kwargs[f"probe_{name}"] = _optional_count(probes[name][0], probes[name][1], lines)
    return Evaluations(**{**vars(defaults), **kwargs})


def _known_keys(block: dict[str, Any], prefix: str, lines: dict[str, str], known: tuple[str, ...]) -> None:
    for key in block:
        if key not in known:
            raise BvrError("unknown key", where=_at(lines, f"{prefix}.{key}"), hint=f"known keys: {', '.join(known)}")


def _task_names(names: Any, key: str, lines: dict[str, str]) -> list[str]:
    from bvr.tasks.registry import get_task  # a light import; kept local so this module loads without it

    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BvrError(f"expected a list of task names, got {names!r}", where=_at(lines, key))
    resolved = []
    for name in names:
        try:
            resolved.append(get_task(name).name)
        except BvrError as err:
            raise BvrError(err.message, where=_at(lines, key), hint=err.hint) from None
    return resolved


def _check_hparams(hparams: dict[str, Any], lines: dict[str, str], preset: str | None) -> None:
    """Refuse a fine-tuning hyperparameter :class:`~bvr.tasks.run.FinetuneConfig` does not have."""
    from dataclasses import fields

    from bvr.tasks.run import FinetuneConfig

    known = {f.name for f in fields(FinetuneConfig)}
    for key in hparams:
        if key not in known:
            where = f"finetune.presets.{preset}.hparams.{key}"
            where = where if where in lines else f"finetune.hparams.{key}"
            raise BvrError("unknown fine-tuning hyperparameter", where=_at(lines, where),
                           hint=f"known: {', '.join(sorted(known))}")


# ---------------------------------------------------------------------------------------------------------------
# Checks


def arm_differences(ablation: Ablation) -> dict[tuple[str, str], set[str]]:
    """For each pair of arms (in file order), the dotted config keys whose resolved values differ (``name`` aside)."""
    flat = {arm: flatten(cfg.to_dict()) for arm, cfg in ablation.arms.items()}
    names = list(flat)
    out: dict[tuple[str, str], set[str]] = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            keys = set(flat[a]) | set(flat[b])
            out[(a, b)] = {k for k in keys if k != "name" and flat[a].get(k) != flat[b].get(k)}
    return out


def check_arms(ablation: Ablation) -> None:
    """Refuse arms that differ in anything neither of them declares.

    Two arms may differ only in keys one of them sets in its diff; an arm may declare a key and leave it as the
    other arms have it.

    Raises:
        BvrError: fewer than two arms, or a pair of arms differing in undeclared keys (arms, keys and values named).
    """
    if len(ablation.arms) < 2:
        raise BvrError(f"an ablation needs at least two arms, found {len(ablation.arms)}", where=ablation.source)
    for (a, b), keys in arm_differences(ablation).items():
        undeclared = sorted(keys - ablation.declared.get(a, set()) - ablation.declared.get(b, set()))
        if undeclared:
            fa, fb = flatten(ablation.arms[a].to_dict()), flatten(ablation.arms[b].to_dict())
            detail = ", ".join(f"{k} ({fa.get(k)!r} vs {fb.get(k)!r})" for k in undeclared)
            raise BvrError(f"arms '{a}' and '{b}' differ in undeclared keys: {detail}", where=ablation.source,
                           hint="declare the keys in the arms that change them, or make them equal")


def tokens_per_step(cfg: Config) -> int:
    """Tokens per optimiser step, an upper bound: ``batch_size x max_length`` (padding and short sequences aside)."""
    return cfg.training.batch_size * cfg.data.max_length


def sequences_seen(cfg: Config) -> int:
    """Sequences fed over the whole run: ``batch_size x max_steps``."""
    return cfg.training.batch_size * cfg.training.max_steps


def tokens_seen(cfg: Config) -> int:
    """Tokens fed over the whole run, an upper bound: ``tokens_per_step x max_steps`` (or ``max_tokens`` if lower)."""
    bound = tokens_per_step(cfg) * cfg.training.max_steps
    return min(bound, cfg.training.max_tokens) if cfg.training.max_tokens else bound


def epochs(cfg: Config, num_sequences: int) -> float:
    """Passes over a prepared dataset of ``num_sequences`` training sequences (how often a static mask repeats)."""
    if num_sequences < 1:
        raise BvrError("the prepared dataset has no sequences", where=cfg.name)
    return sequences_seen(cfg) / num_sequences


def equal_passes(ablation: Ablation) -> None:
    """Refuse arms that do not see the same number of sequences (``batch_size x max_steps``), as RoBERTa Table 3.

    Raises:
        BvrError: naming each arm's batch size, steps and product.
    """
    seen = {arm: sequences_seen(cfg) for arm, cfg in ablation.arms.items()}
    if len(set(seen.values())) > 1:
        detail = ", ".join(f"{arm}: {cfg.training.batch_size} x {cfg.training.max_steps} = {seen[arm]}"
                           for arm, cfg in ablation.arms.items())
        raise BvrError(f"arms see different numbers of sequences ({detail})", where=ablation.source,
                       hint="choose training.max_steps so that batch_size x max_steps is equal in every arm")
