"""What every ``bvr`` command shares: the consoles, the configuration options and their help, built from the
registries (tasks, presets, experiment files, formats) so that it never goes stale. Only light modules are imported
here: building the help must not load torch or Lightning.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from bvr.ablation.declare import list_experiments
from bvr.config import FAMILIES, INPUT_FORMATS, MASKING_MODES, preset_names
from bvr.config.loading import NAME_RULE, is_name
from bvr.errors import BvrError
from bvr.tasks.registry import TASK_KINDS, TASKS
from bvr.write_checks import name_too_long


class LogConsole(Console):
    """A console that wraps lines to the width only on a terminal: written to a log or a pipe, each line stays
    whole (Rich would break it at 80 columns, mid-phrase), unless a print asks otherwise."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, **options: Any) -> None:
        """Rich's print, soft-wrapped (no line breaks added) where no terminal is attached."""
        super().print(*objects, soft_wrap=not self.is_terminal if soft_wrap is None else soft_wrap, **options)

    def plain(self, text: Any, *, wrap: bool = False, **options: Any) -> None:
        """``text`` as it is (no markup, no highlighting), on one line even on a terminal unless ``wrap``."""
        self.print(text, markup=False, highlight=False, soft_wrap=None if wrap else True, **options)


console = LogConsole(emoji=False)  # ":100:" in a file:line stays text, not an emoji
err_console = LogConsole(stderr=True, emoji=False)
state: dict[str, Any] = {"debug": False, "command": None}
"""Set by the app's callback: ``debug`` (``--debug``: show the traceback of a :class:`~bvr.errors.BvrError` instead
of one line) and ``command``, the command being run (``config``, ``pretrain``, ...), for what an interrupt says."""


def one_of(names: Iterable[str], last: str = "or") -> str:
    """Names as prose.

    >>> one_of(["tiny", "small", "base"]), one_of(["bert"]), one_of(["a", "b"], last="and")
    ('tiny, small or base', 'bert', 'a and b')
    """
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


def tasks_help(kinds: Iterable[str] = TASK_KINDS) -> str:
    """The registered tasks of these kinds, grouped by kind, e.g. ``classification: cola, sst2; tagging: conll2003``."""
    groups = {kind: [name for name, spec in TASKS.items() if spec.kind == kind] for kind in kinds}
    return "; ".join(f"{kind}: {', '.join(names)}" for kind, names in groups.items() if names)


PRESETS_HELP = f"Named preset from experiments/presets: {one_of(preset_names())}."
EXPERIMENTS_HELP = f"{one_of(list_experiments())} (experiments/NAME.yaml)"
FORMATS_HELP = "|".join(INPUT_FORMATS)
FAMILIES_HELP = "|".join(FAMILIES)
DATA_FOLDERS_HELP = ", ".join(["corpus/", *dict.fromkeys(spec.folder.split("/")[0] + "/" for spec in TASKS.values())])


def folder_option(what: str) -> Callable[[Path | None], Path | None]:
    """The callback of a folder option (``what``: ``"output folder (--output-dir)"``), run on the value given or read
    from its environment variable: ``~`` becomes the home folder (a shell leaves it in ``--output-dir=~/runs`` and in
    quotes), and a name longer than the file system allows is refused before any command stats the path."""
    def check(value: Path | None) -> Path | None:
        if value is None:
            return None
        value = value.expanduser()
        reason = name_too_long(value)
        if reason:
            raise BvrError(f"cannot use it as the {what}: {reason}", where=value, hint="choose a shorter name")
        return value
    return check


def label_option(option: str, what: str) -> Callable[[str | None], str | None]:
    """The callback of an ``option`` that takes a label (``--arm``, ``--experiment``; ``what``: ``"an arm"``): held to
    the rule of run and experiment names (:func:`~bvr.config.loading.is_name`), as an ablation's arms and experiments
    are, since a label names MLflow runs and experiments as theirs do."""
    def check(value: str | None) -> str | None:
        if value is not None and not is_name(value):
            raise BvrError(f"{value!r} cannot name {what}", where=option, hint=NAME_RULE)
        return value
    return check


# Options shared by every command that reads a configuration.
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML file of config sections (see experiments/).")
]
PresetOpt = Annotated[str | None, typer.Option("--preset", "-p", help=PRESETS_HELP)]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help=f"Override one key, e.g. --set masking.mode={MASKING_MODES[0]} (repeatable; "
                 "YAML values)."),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar="BVR_DATA_DIR", callback=folder_option("data folder (--data-dir)"),
                 help=f"Folder with the datasets ({DATA_FOLDERS_HELP}). Env: BVR_DATA_DIR."),
]
OutputDirOpt = Annotated[
    Path | None,
    typer.Option("--output-dir", envvar="BVR_OUTPUT_DIR", callback=folder_option("output folder (--output-dir)"),
                 help="Where prepared data and checkpoints are cached (default: ./outputs). Env: BVR_OUTPUT_DIR."),
]


def load(config: Path | None, preset: str | None, overrides: list[str] | None, data_dir: Path | None,
         output_dir: Path | None):
    """The resolved :class:`~bvr.config.Config` of a command's configuration options."""
    from bvr.config import load_config

    extra = {key: str(value) for key, value in (("data_dir", data_dir), ("output_dir", output_dir))
             if value is not None}
    return load_config(config, preset=preset, overrides=overrides, extra=extra)


def data_dir_or_env(value: Path | None) -> Path | None:
    """--data-dir, where an empty value (as DVC passes an unset param) falls back to BVR_DATA_DIR."""
    if value is not None and str(value) not in ("", "."):
        return value
    env = os.environ.get("BVR_DATA_DIR")
    return folder_option("data folder (BVR_DATA_DIR)")(Path(env)) if env else None


def ablation_plan(name: str, preset: str | None, overrides: Overrides, data_dir: Path | None,
                  output_dir: Path | None):
    """The plan of ablation ``name`` with these options, an error in one of ``overrides`` located (``bvr ablate``,
    ``bvr report``, ``bvr config show NAME``)."""
    from bvr.ablation.plan import make_plan

    with overrides.located():
        return make_plan(name, preset=preset, overrides=overrides.texts, data_dir=data_dir_or_env(data_dir),
                         output_dir=output_dir or Path("outputs"))


@dataclass
class Overrides:
    """``--config FILE`` and ``--set`` of a command whose configuration is an ablation's (``bvr ablate``, ``bvr
    report``, ``bvr config show NAME``): the file's keys as ``--set`` texts first (so that the manifest records them
    and the commands `bvr status` prints repeat them without the file), then the ``--set`` given. An error about one
    of the file's keys names the file and line (:meth:`located`)."""

    texts: list[str] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)
    """Dotted key -> where it was set (``file:line``, an option), for the keys an error should name that way."""

    @classmethod
    def of(cls, config: Path | None, overrides: list[str] | None) -> Overrides:
        """Read ``config`` (None: no file) and put ``overrides`` after it."""
        from bvr.config import flatten, read_yaml

        if config is None:
            return cls(list(overrides or []))
        if not config.is_file():
            raise BvrError("config file not found", where=config, hint="give a YAML file of config sections")
        data, lines = read_yaml(config)
        flat = flatten(data)
        given = {text.partition("=")[0].strip() for text in overrides or []}  # an error there names the --set
        origins = {key: lines.get(key, str(config)) for key in flat if key not in given}
        return cls([*(f"{key}={yaml_value(value)}" for key, value in flat.items()), *(overrides or [])], origins)

    @contextmanager
    def located(self) -> Iterator[None]:
        """Inside, an error at ``--set KEY...`` of one of :attr:`origins`' keys names the key's origin instead."""
        try:
            yield
        except BvrError as err:
            head, _, tail = (err.where or "").partition(": ")
            key = head.removeprefix("--set ").partition("=")[0]
            if not head.startswith("--set ") or key not in self.origins:
                raise
            raise BvrError(err.message, where=f"{self.origins[key]}: {tail or key}", hint=err.hint) from None


def shorthands(flags: dict[str, tuple[str, Any]]) -> Overrides:
    """Command options that stand for config keys, as ``--set`` texts: ``{"--seeds": ("evaluate.probes.seeds", 5)}``
    gives ``evaluate.probes.seeds=5``; an option not given (None) sets nothing. An error names the option.

    >>> shorthands({"--seeds": ("evaluate.probes.seeds", 5), "--seed": ("evaluate.blimp.seed", None)}).texts
    ['evaluate.probes.seeds=5']
    """
    given = {flag: (key, value) for flag, (key, value) in flags.items() if value is not None}
    return Overrides([f"{key}={yaml_value(value)}" for key, value in given.values()],
                     {key: flag for flag, (key, _) in given.items()})


def yaml_value(value: Any) -> str:
    """A value as ``--set`` reads it back (YAML, on one line).

    >>> yaml_value("static"), yaml_value([0.8, 0.1, 0.1]), yaml_value(None), yaml_value("yes")
    ('static', '[0.8, 0.1, 0.1]', 'null', "'yes'")
    """
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1_000_000).strip()
    return text.removesuffix("...").strip()
