"""Reading an experiment file into an :class:`~bvr.ablation.declare.Ablation` (the schema is described in
:mod:`bvr.ablation.declare`): every block checked as a config layer, so a bad key, type or value names the file,
line and key, and the old forms say where their keys moved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bvr.ablation.arms import budget_tokens, check_arms
from bvr.ablation.declare import (
    ABLATION_KIND,
    ARM_NAME,
    BUDGET_KEYS,
    BUDGET_KIND,
    CONTROL_ARM,
    KINDS,
    MAX_ARMS,
    PUBLISHED_TABLES,
    SHARED_SECTIONS,
    TOP_KEYS,
    Ablation,
    Evaluations,
    experiment_path,
)
from bvr.config import (
    HYPERPARAMETERS,
    Config,
    Layer,
    at,
    build_config,
    check_task_names,
    flatten,
    mapping,
    override_layer,
    parse_override,
    preset_names,
    preset_path,
    read_yaml,
    sub_origins,
)
from bvr.config.loading import NAME_RULE, is_name
from bvr.errors import BvrError
from bvr.tasks.registry import TASKS, get_task


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


def load_ablation(name_or_path: str | Path, *, preset: str | None = None,
                  overrides: list[str] | None = None) -> Ablation:
    """Read an experiment file (a shipped experiment's name, or a YAML file) and resolve one config per arm, for
    ``preset`` (None: the dataclass defaults); :func:`~bvr.ablation.arms.check_arms` has passed on the result.
    ``overrides`` (``section.key=value``) apply to every arm and the control, last, as a preset's would: any config
    key but one some arm declares, which is refused, since setting it for every arm would erase the ablation.
    ``pretrain_seeds=[...]`` replaces the file's pretraining seeds. Every error names the file, line and key."""
    path = experiment_path(name_or_path)
    if not is_name(path.stem):  # it names the experiment's folders and goes into dvc.yaml's commands
        raise BvrError(f"the file's name '{path.stem}' cannot name an experiment", where=path,
                       hint=f"rename the file: {NAME_RULE}")
    data, lines = read_yaml(path, "experiment file")
    _check_top(data, lines)
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise BvrError("expected text", where=at(lines, "description"))
    published = data.get("published")
    if published is not None and not (isinstance(published, dict) and isinstance(published.get("ablation"), str)):
        raise BvrError("expected {ablation: NAME} or null", where=at(lines, "published"))
    if published is not None and published["ablation"] not in PUBLISHED_TABLES:  # else silently no comparison
        raise BvrError(f"no published table '{published['ablation']}' in reports/published.yaml",
                       where=at(lines, "published"),
                       hint=f"name one of {', '.join(PUBLISHED_TABLES)}, or write published: null")
    control = data.get("control", False)
    if not isinstance(control, bool):
        raise BvrError(f"expected true or false, got {control!r}", where=at(lines, "control"))
    pretrain_seeds = _seed_list(data.get("pretrain_seeds", [0]), "pretrain_seeds", lines)
    control_seeds = _seed_list(data["control_seeds"], "control_seeds", lines) if "control_seeds" in data else []
    control_seeds_at = at(lines, "control_seeds") if "control_seeds" in data else ""
    kind = data.get("kind", ABLATION_KIND)
    if kind not in KINDS:
        raise BvrError(f"expected one of {', '.join(KINDS)}, got {kind!r}", where=at(lines, "kind"))

    # Shared layers: preset file, experiment base, experiment presets[NAME] (its seed lists aside).
    shared: list[Layer] = [read_yaml(preset_path(preset))] if preset else []
    shared.append(_config_layer(mapping(data.get("base"), "base", lines, "config sections"), "base", lines))
    presets = mapping(data.get("presets"), "presets", lines, "preset names")
    for name, raw in presets.items():
        key = f"presets.{name}"
        _known_preset(name, key, lines)
        block = dict(mapping(raw, key, lines, "config sections"))
        seeds = _seed_list(block.pop("pretrain_seeds"), f"{key}.pretrain_seeds", lines) if "pretrain_seeds" in block \
            else None
        own = _seed_list(block.pop("control_seeds"), f"{key}.control_seeds", lines) if "control_seeds" in block \
            else None
        layer = _config_layer(block, key, lines)
        if name == preset:
            shared.append(layer)
            pretrain_seeds = seeds or pretrain_seeds
            if own:
                control_seeds, control_seeds_at = own, at(lines, f"{key}.control_seeds")
    override_layers: list[Layer] = []  # each --set a layer located at itself, but the seed lists (the last one wins)
    for text in overrides or []:
        nested, key = parse_override(text)
        if key == "pretrain_seeds":
            pretrain_seeds = _seed_list(nested[key], key, {key: f"--set {text}"})
        elif key == "control_seeds":
            control_seeds, control_seeds_at = _seed_list(nested[key], key, {key: f"--set {text}"}), f"--set {text}"
        else:
            override_layers.append(override_layer(text))

    arms_raw = mapping(data.get("arms"), "arms", lines, "arm names")
    if len(arms_raw) < 2:
        raise BvrError(f"an ablation needs at least two arms, found {len(arms_raw)}",
                       where=at(lines, "arms") if "arms" in lines else path)
    if len(arms_raw) > MAX_ARMS:
        raise BvrError(f"{len(arms_raw):,}, more than the {MAX_ARMS} arms an experiment file may declare (MAX_ARMS)",
                       where=at(lines, "arms"), hint="split the arms over several experiment files")
    base = _resolve(CONTROL_ARM, [*shared, *override_layers])  # a bad shared value is reported here, for no arm
    arms: dict[str, Config] = {}
    declared: dict[str, set[str]] = {}
    for arm, raw in arms_raw.items():
        arm = str(arm)
        declared[arm], arm_layers = _arm_layers(arm, raw, lines, preset)
        arms[arm] = _resolve(arm, [*shared, *arm_layers, *override_layers])

    experiment_layers = [*(shared[1:] if preset else shared), *override_layers]  # the preset file's finetune aside
    tasks = _task_names(base.finetune.tasks, "finetune.tasks", experiment_layers)
    for task in base.finetune.per_task:  # a block of a task the registry does not have would never apply
        check_task_names([task], list(TASKS), "finetune.per_task",
                         _located(f"finetune.per_task.{task}", [*shared, *override_layers]))
    _task_names(base.evaluate.probes.tasks, "evaluate.probes.tasks", experiment_layers)
    if control_seeds and not control:
        raise BvrError("control_seeds lists the no-pretraining control's initialisations, but the file has no control",
                       where=control_seeds_at, hint="set control: true, or drop control_seeds")
    if sorted(control_seeds) == sorted(pretrain_seeds):  # the arms' own seeds: the paired design
        control_seeds = []
    ablation = Ablation(
        name=path.stem, description=description.strip(), arms=arms, control=control,
        pretrain_seeds=list(pretrain_seeds), finetune_tasks=tasks, finetune_seeds=base.finetune.seeds,
        declared=declared, source=path, preset=preset, published=published,
        optional_tasks=[t for t in _task_names(base.finetune.optional, "finetune.optional", experiment_layers)
                        if t not in tasks],
        finetune_hparams=_finetune_hparams(experiment_layers), control_base=base if control else None,
        evaluations=Evaluations.from_config(base.evaluate), kind=kind, control_seeds=list(control_seeds),
    )
    declared_keys = set().union(*declared.values())  # the only keys arms may differ in
    for _nested, where in override_layers:
        (text,) = where  # the dotted key of the --set
        if text in declared_keys or any(k.startswith(f"{text}.") for k in declared_keys):
            raise BvrError("this key is what the arms differ in; setting it for every arm would erase the ablation",
                           where=f"--set {text}")
    if kind == BUDGET_KIND:
        _check_budget(ablation, lines)
    check_arms(ablation)
    return ablation


def _check_budget(ablation: Ablation, lines: dict[str, str]) -> None:
    """A budget curve's arms: only budget keys declared, budgets increasing in file order, and the control."""
    if not ablation.control:
        raise BvrError("a budget curve measures every budget against the no-pretraining control: set control: true",
                       where=at(lines, "control") if "control" in lines else at(lines, "kind"))
    for arm, keys in ablation.declared.items():
        others = sorted(keys - set(BUDGET_KEYS))
        if others:
            raise BvrError(f"arm '{arm}' changes {others[0]}, but the arms of a budget curve may differ only in "
                           f"{', '.join(BUDGET_KEYS)}", where=at(lines, f"arms.{arm}.{others[0]}"),
                           hint="set it in base for every arm, or drop kind: budget to make this an ablation")
    budgets = [(arm, budget_tokens(cfg)) for arm, cfg in ablation.arms.items()]
    for (before, smaller), (arm, tokens) in zip(budgets, budgets[1:], strict=False):
        if tokens <= smaller:
            raise BvrError(f"arm '{arm}' sees {tokens:,} tokens, no more than '{before}' before it ({smaller:,}): "
                           "list a budget curve's arms from the smallest budget up", where=at(lines, f"arms.{arm}"))


def _arm_layers(arm: str, raw: Any, lines: dict[str, str], preset: str | None) -> tuple[set[str], list[Layer]]:
    """An arm's declared keys and its layers: its diff, then its own ``presets: PRESET`` block."""
    key = f"arms.{arm}"
    if not ARM_NAME.fullmatch(arm) or arm == CONTROL_ARM:
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
                               hint=f"set {dotted} in the arm's main diff too, or move it to the shared presets.{name}")
        if name == preset:
            layers.append(_config_layer(block, block_key, lines))
    return declared, layers


def _resolve(arm: str, layers: list[Layer]) -> Config:
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
    """``file:line: key`` of the last layer that set ``key`` or a key under it (just ``key`` when none did)."""
    origin = next((origin for _data, where in reversed(layers) for set_key, origin in where.items()
                   if set_key == key or set_key.startswith(f"{key}.")), None)
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
