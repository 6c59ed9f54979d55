"""No dead code in bvr/: every public function, class and method defined there is referenced from bvr/ itself.

Code that only tests call is dead weight: the tests keep it alive and it drifts from what runs. A module-level
function or class counts as referenced when its own module names it outside its body, when a module imports it
from where it is defined (or from the package that re-exports it), when anything reads an attribute of its name
(``figures.task_scores``) or when a string names it (a lazy ``__getattr__`` table; ``__all__`` does not count: it
exports, it does not use); a method or
property, when anything in bvr/ reads an attribute of its name. Entry
points (CLI commands registered by their decorator, hooks that torch, Lightning or the standard library call by
name) are allowed below, each with its reason. The check reads the source with ``ast``: a second or two.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tests.test_architecture import import_target

ROOT = Path(__file__).resolve().parent.parent

HOOKS = {
    "forward": "torch calls nn.Module.forward (and autograd.Function.forward/backward) through __call__",
    "backward": "autograd.Function's backward, called by autograd",
    "training_step": "Lightning's LightningModule hooks",
    "validation_step": "Lightning",
    "configure_optimizers": "Lightning",
    "train_dataloader": "Lightning's LightningDataModule hooks",
    "val_dataloader": "Lightning",
    "save_checkpoint": "Lightning's CheckpointIO",
    "log_hyperparams": "Lightning's Logger",
    "is_enabled": "Lightning's ProgressBar (whether the Trainer may draw it)",
    "disable": "Lightning's ProgressBar (on ranks other than zero)",
    "enable": "Lightning's ProgressBar",
    "handle_starttag": "html.parser.HTMLParser",
    "ignore_aliases": "yaml's Dumper",
}
"""Method names that a framework calls; ``on_*`` methods are Lightning's callbacks and hooks."""

ALLOWED = {
}
"""Definitions (``module.name``, ``module.Class.method``) referenced from nowhere in bvr/ on purpose, each with its
reason."""


@dataclass(frozen=True)
class Definition:
    module: str
    name: str
    """``function``, ``Class`` or ``Class.method``."""
    line: int
    method: bool
    named_in_module: bool
    """Whether another top-level statement of its module names it (a call, a use, a subclass)."""


@dataclass
class Tree:
    """What the dead-code check reads from bvr/'s sources."""

    definitions: list[Definition] = field(default_factory=list)
    imported: set[tuple[str, str]] = field(default_factory=set)
    """(module imported from, name) of every ``from ... import name``."""
    reexports: dict[tuple[str, str], str] = field(default_factory=dict)
    """(package, name) -> the module its ``__init__`` imports the name from."""
    attributes: set[str] = field(default_factory=set)
    """Every attribute name read anywhere."""
    strings: set[str] = field(default_factory=set)
    """Every string constant."""


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_registered(node: ast.stmt) -> bool:
    """Registered by a decorator such as ``@app.command()`` or ``@app.callback()`` (the CLI's commands)."""
    return any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr in ("command", "callback")
               for d in getattr(node, "decorator_list", ()))


def _definitions(module: str, parsed: ast.Module) -> list[Definition]:
    names = [{n.id for n in ast.walk(top) if isinstance(n, ast.Name)} for top in parsed.body]
    found = []
    for index, node in enumerate(parsed.body):
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or is_registered(node):
            continue
        elsewhere = any(node.name in other for k, other in enumerate(names) if k != index)
        if not node.name.startswith("_"):
            found.append(Definition(module, node.name, node.lineno, False, elsewhere))
        if isinstance(node, ast.ClassDef):
            found += [Definition(module, f"{node.name}.{sub.name}", sub.lineno, True, False) for sub in node.body
                      if isinstance(sub, ast.FunctionDef) and not sub.name.startswith("_")]
    return found


def read_tree(root: Path, sources: dict[str, str] | None = None) -> Tree:
    """Read every module under ``root / 'bvr'`` (or the ``{module: source}`` given, for tests of the checker)."""
    if sources is None:
        paths = sorted((root / "bvr").rglob("*.py"))
        sources = {module_name(p, root): p.read_text(encoding="utf-8") for p in paths}
    packages = {m for m in sources if any(other.startswith(m + ".") for other in sources)}
    tree = Tree()
    for module, source in sources.items():
        parsed = ast.parse(source)
        tree.definitions += _definitions(module, parsed)
        exports = {id(n) for top in parsed.body if isinstance(top, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "__all__" for t in top.targets) for n in ast.walk(top)}
        for node in ast.walk(parsed):
            if id(node) in exports:
                continue  # a name in __all__ is exported, not used
            if isinstance(node, ast.Attribute):
                tree.attributes.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                tree.strings.add(node.value)
            elif isinstance(node, ast.ImportFrom):
                source_module = import_target(node, module, module in packages)
                for alias in node.names:
                    tree.imported.add((source_module, alias.name))
                    if module in packages:
                        tree.reexports[(module, alias.name)] = source_module
    return tree


def is_referenced(tree: Tree, d: Definition) -> bool:
    if f"{d.module}.{d.name}" in ALLOWED:
        return True
    if d.method:
        short = d.name.split(".")[-1]
        return short in tree.attributes or short in HOOKS or short.startswith("on_")
    via_package = any(tree.reexports.get((package, d.name)) == d.module for package, name in tree.imported
                      if name == d.name)
    return (d.named_in_module or (d.module, d.name) in tree.imported or via_package or d.name in tree.attributes
            or d.name in tree.strings)


def unreferenced(tree: Tree) -> list[str]:
    """``module:line name`` of every public definition nothing in the tree refers to, allowed ones left out."""
    return [f"{d.module}:{d.line} {d.name}" for d in tree.definitions if not is_referenced(tree, d)]


def test_every_public_definition_in_bvr_is_referenced_from_bvr():
    dead = unreferenced(read_tree(ROOT))
    assert dead == [], ("referenced from nowhere in bvr/ (only tests, or nothing, call them): use them or remove "
                        "them with their tests; an entry point goes in ALLOWED or HOOKS with its reason:\n"
                        + "\n".join(dead))


def test_the_check_finds_what_only_tests_call():
    sources = {
        "bvr": "",
        "bvr.a": "def used():\n    return 1\n\ndef dead():\n    return used()\n\nclass Box:\n"
                 "    def size(self):\n        return 1\n    def forward(self):\n        return 2\n",
        "bvr.b": "from bvr.a import used\n\ndef caller():\n    return used()\n",
        "bvr.c": "import bvr.b\n\nbvr.b.caller()\nBOX = 'Box'\n",
        "bvr.d": "def recursive(n):\n    return recursive(n - 1) if n else 0\n\n__all__ = ['recursive']\n",
    }
    assert unreferenced(read_tree(ROOT, sources)) == ["bvr.a:4 dead", "bvr.a:8 Box.size", "bvr.d:1 recursive"]
