"""The layering in ARCHITECTURE.md holds in the code: no import points up, no import goes round in a circle, the
science core imports nothing from the operations around it, and the document names the real tree.

ARCHITECTURE.md's ``layers`` block lists, lowest first, one layer per line (``N  module-or-package ...``); its
``apart`` block lists pairs of same-layer packages that must not import each other. Every import in ``bvr/``
(function-level ones included, and a module named by a string that ``import_module`` loads; ``if TYPE_CHECKING:``
blocks excluded) must go to the module's own layer or a lower one, and every module must belong to a layer. No
modules may import each other in a circle, counting every kind of import: ``if TYPE_CHECKING:`` blocks,
function-level imports and ``import_module`` strings hide a circle from Python, not from the design. Its
``operations`` block names the operations packages and its ``above`` block the packages above the core and the
operations both; every other module is the core, which imports nothing from the operations, by any kind of import.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "ARCHITECTURE.md"

IMPORT, TYPE_ONLY, BY_NAME = "import", "TYPE_CHECKING", "import_module"
"""How a module imports another: an import statement (at module or function level), one only inside an
``if TYPE_CHECKING:`` block, or a string that :func:`importlib.import_module` loads."""


def _block(text: str, name: str) -> list[str]:
    match = re.search(rf"```text {name}\n(.*?)```", text, flags=re.S)
    assert match, f"ARCHITECTURE.md has no ```text {name} block"
    return [line.split("#", 1)[0].strip() for line in match.group(1).splitlines() if line.split("#", 1)[0].strip()]


def read_layers(text: str) -> dict[str, int]:
    """``{module prefix: layer}`` from the document's layers block."""
    layers: dict[str, int] = {}
    for line in _block(text, "layers"):
        number, *names = line.split()
        for name in names:
            assert name not in layers, f"{name} is in two layers"
            layers[name] = int(number)
    return layers


def read_apart(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in _block(text, "apart"):
        first, second = line.split()
        pairs.append((first, second))
    return pairs


def read_rings(text: str) -> tuple[list[str], list[str]]:
    """The operations packages (the document's ``operations`` block) and the packages above the core and the
    operations (its ``above`` block)."""
    return ([name for line in _block(text, "operations") for name in line.split()],
            [name for line in _block(text, "above") for name in line.split()])


def _within(module: str, packages: list[str]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    """The layer of the longest prefix of ``module`` in ``layers`` (None: the module is in no layer)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in layers:
            return layers[prefix]
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _calls_import_module(tree: ast.AST) -> bool:
    """Whether the module calls ``import_module`` (or ``__import__``), under any spelling."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("import_module", "__import__"):
                return True
    return False


def import_target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module ``from ... import`` names, a relative one resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(source: str, module: str, is_package: bool, known: set[str] | None = None) -> dict[str, str]:
    """The ``bvr`` modules that ``source`` (the text of ``module``) imports, each with how (:data:`IMPORT`,
    :data:`TYPE_ONLY` or :data:`BY_NAME`), relative imports resolved.

    ``from bvr.x import y`` counts as importing ``bvr.x.y`` and ``bvr.x``; with the ``known`` modules, only
    ``bvr.x.y`` when that is a module (its package ``bvr.x`` is then only the way there).

    In a module that calls ``import_module``, every string that is a whole ``bvr`` module name counts as a
    :data:`BY_NAME` import (the name may sit in a table that the call reads, as lazy re-exports keep them).
    """
    found: dict[str, str] = {}
    tree = ast.parse(source)

    def add(target: str, how: str) -> None:
        if target.split(".")[0] == "bvr" and found.get(target) != IMPORT:  # a real import outweighs the others
            found[target] = how

    def visit(node: ast.AST, how: str) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, TYPE_ONLY)
            for child in node.orelse:
                visit(child, how)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, how)
        elif isinstance(node, ast.ImportFrom):
            target = import_target(node, module, is_package)
            names = [f"{target}.{alias.name}" for alias in node.names]
            for name in names:
                add(name, how)
            if known is None or any(name not in known for name in names):
                add(target, how)
        elif by_name and isinstance(node, ast.Constant) and re.fullmatch(r"bvr(\.\w+)+", str(node.value)):
            add(node.value, BY_NAME)
        for child in ast.iter_child_nodes(node):
            visit(child, how)

    by_name = _calls_import_module(tree)
    visit(tree, IMPORT)
    return found


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "bvr").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _edges(tree: dict[str, str], *, own_package: bool) -> dict[str, dict[str, str]]:
    """``{module: {imported module: how}}`` over the modules of ``tree``: names that are not modules dropped, and,
    unless ``own_package``, a module's import of its own package (which sits in the package's layer)."""
    known = set(tree)
    edges = {}
    for module, source in sorted(tree.items()):
        found = imports_of(source, module, source.startswith("#package"), known)
        edges[module] = {target: how for target, how in sorted(found.items()) if target in known and target != module
                         and (own_package or not module.startswith(target + "."))}
    return edges


def violations(layers: dict[str, int], apart: list[tuple[str, str]], tree: dict[str, str]) -> list[str]:
    """Every import in ``tree`` (``{module: source}``) that points up a layer or across an ``apart`` pair
    (``if TYPE_CHECKING:`` imports aside: they name types for annotations)."""
    problems = []
    edges = _edges(tree, own_package=False)
    for module in sorted(tree):
        own = layer_of(module, layers)
        if own is None:
            problems.append(f"{module} is in no layer of ARCHITECTURE.md")
            continue
        for target, how in edges[module].items():
            if how == TYPE_ONLY:
                continue
            suffix = " by import_module" if how == BY_NAME else ""
            theirs = layer_of(target, layers)
            if theirs is not None and theirs > own:
                problems.append(f"{module} (layer {own}) imports {target} (layer {theirs}){suffix}")
            for first, second in apart:
                for a, b in ((first, second), (second, first)):
                    if (module == a or module.startswith(a + ".")) and (target == b or target.startswith(b + ".")):
                        problems.append(f"{module} imports {target}{suffix}, but {a} and {b} must not import "
                                        "each other")
    return problems


def core_violations(operations: list[str], above: list[str], tree: dict[str, str]) -> list[str]:
    """Every import in ``tree`` by a core module (one neither in ``operations`` nor ``above``) of an operations
    module, counting every kind: the core must read, run and be tested without the operations."""
    problems = []
    for module, targets in _edges(tree, own_package=True).items():
        if _within(module, operations) or _within(module, above):
            continue
        for target, how in targets.items():
            if _within(target, operations):
                suffix = "" if how == IMPORT else f" ({how})"
                problems.append(f"{module} imports {target}{suffix}, but the core imports nothing from the operations")
    return problems


def _components(edges: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _shortest_cycle(start: str, members: set[str], edges: dict[str, dict[str, str]]) -> list[str]:
    """The shortest path from ``start`` back to itself through ``members`` (breadth first, in name order)."""
    before: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in edges[node]:
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(before[path[-1]])
                return [*reversed(path), start]
            if child in members and child not in before:
                before[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is in no cycle")  # a strongly connected component always has one


def cycles(tree: dict[str, str]) -> list[str]:
    """One circle of imports per group of modules that import each other, counting every kind of import, as
    ``a -> b -> a`` with how each link imports when it is not a plain import (``b -(TYPE_CHECKING)-> a``), and the
    group's other modules."""
    edges = _edges(tree, own_package=True)
    out = []
    for component in _components(edges):
        path = _shortest_cycle(component[0], set(component), edges)
        text = path[0]
        for here, there in zip(path, path[1:], strict=False):
            how = edges[here][there]
            text += f" -> {there}" if how == IMPORT else f" -({how})-> {there}"
        others = [member for member in component if member not in path]
        out.append(text + (f" (in a circle with {', '.join(others)} too)" if others else ""))
    return out


def _tree() -> dict[str, str]:
    tree = {}
    for name, path in modules().items():
        text = path.read_text(encoding="utf-8")
        tree[name] = ("#package\n" + text) if path.name == "__init__.py" else text
    return tree


def test_no_import_points_up_a_layer():
    text = DOC.read_text(encoding="utf-8")
    assert violations(read_layers(text), read_apart(text), _tree()) == []


def test_the_core_imports_nothing_from_the_operations():
    assert core_violations(*read_rings(DOC.read_text(encoding="utf-8")), _tree()) == []


@pytest.mark.parametrize(("source", "expected"), [
    ("from bvr.ops.views import write_views\n", "bvr.report imports bvr.ops.views, but the core"),
    ("def f():\n    import bvr.ops.views\n", "bvr.report imports bvr.ops.views, but the core"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bvr.ops.views import Row\n",
     "bvr.report imports bvr.ops.views (TYPE_CHECKING), but the core"),
    ("from importlib import import_module\nWRITER = import_module('bvr.ops.views')\n",
     "bvr.report imports bvr.ops.views (import_module), but the core"),
])
def test_the_core_check_catches_an_import_of_the_operations(source, expected):
    tree = {"bvr.report": source, "bvr.ops": "#package\n", "bvr.ops.views": "from bvr.report import rows\n",
            "bvr.runner": "from bvr.ops.views import write_views\nfrom bvr.report import render\n"}
    problems = core_violations(["bvr.ops"], ["bvr.runner"], tree)
    assert len(problems) == 1 and problems[0].startswith(expected)  # the runner and the operations may import both


MAX_MODULE_LINES = 400


def test_no_module_is_over_400_lines():
    """A module past 400 lines holds more than one job: split it by responsibility."""
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


MAX_PARAMETERS = 8
"""The most parameters a function in bvr/ takes (``self`` and ``cls`` not counted). More is a group of values that
wants a name of its own: a config section, a :class:`~bvr.tracking.RunContext`, :class:`~bvr.training.TrainerSettings`.
A command-line command (``*_cmd`` in ``bvr/cli``) is exempt: each of its parameters is one of its options."""

WIDER: dict[str, int] = {}
"""Functions still over :data:`MAX_PARAMETERS`, with their count. The list only shrinks: a function brought within
the limit leaves it, and none joins it."""


def wide_functions(source: str, module: str) -> dict[str, int]:
    """``{module.[Class.]function: parameters}`` of the functions in ``source`` over :data:`MAX_PARAMETERS`."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                names = [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
                n = len(names) + (a.vararg is not None) + (a.kwarg is not None) - (names[:1] in (["self"], ["cls"]))
                command = module.startswith("bvr.cli.") and child.name.endswith("_cmd")
                if n > MAX_PARAMETERS and not command:
                    out[f"{module}.{prefix}{child.name}"] = n
                visit(child, f"{prefix}{child.name}.")
    visit(ast.parse(source), "")
    return out


def test_no_function_takes_more_than_eight_parameters():
    wide = {}
    for name, path in modules().items():
        wide.update(wide_functions(path.read_text(encoding="utf-8"), name))
    assert {k: v for k, v in wide.items() if WIDER.get(k) != v} == {}, (
        f"functions over {MAX_PARAMETERS} parameters: group the values that travel together (a context, settings)")
    assert sorted(set(WIDER) - set(wide)) == [], "within the limit now: take them out of WIDER"


def test_the_parameter_check_catches_a_wide_function_and_spares_commands():
    planted = ("def f(a, b, c, d, e, f, g, h, i):\n    pass\n"
               "class C:\n    def m(self, a, b, c, d, e, f, g, h):\n        pass\n")
    assert wide_functions(planted, "bvr.x") == {"bvr.x.f": 9}  # self is not counted
    assert wide_functions("def run_cmd(a, b, c, d, e, f, g, h, i):\n    pass\n", "bvr.cli.x") == {}
    assert wide_functions("def g(*args, a, b, c, d, e, f, g, **kw):\n    pass\n", "bvr.x") == {"bvr.x.g": 9}


def test_no_modules_import_each_other_in_a_circle():
    assert cycles(_tree()) == []


def test_every_layer_entry_exists():
    existing = set(modules())
    text = DOC.read_text(encoding="utf-8")
    missing = [name for name in [*read_layers(text), *sum(read_rings(text), [])] if name not in existing]
    assert missing == [], f"ARCHITECTURE.md names modules that do not exist: {missing}"


def test_every_path_the_document_names_exists():
    text = DOC.read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:bvr|tests|experiments|reports|benchmarks)/[\w./-]*)`", text))
    placeholder = re.compile(r"\b[A-Z]{3,}\b")  # experiments/NAME.yaml names a kind of file, not one file
    missing = sorted(p for p in paths if not placeholder.search(p) and not (ROOT / p.rstrip("/")).exists())
    assert missing == [], f"ARCHITECTURE.md names paths that do not exist: {missing}"


LAZY = """\
from importlib import import_module

_LAZY = {"app": "bvr.cli"}


def __getattr__(name):
    return getattr(import_module(_LAZY[name]), name)
"""
"""A lazy re-export, as ``bvr.ablation`` had one of its runner."""


@pytest.mark.parametrize(("source", "expected"), [
    ("from bvr.cli import app\n", "bvr.low (layer 0) imports bvr.cli (layer 2)"),
    ("def f():\n    import bvr.cli\n", "bvr.low (layer 0) imports bvr.cli (layer 2)"),
    ("from bvr.b import x\n", "bvr.a imports bvr.b, but bvr.a and bvr.b must not import each other"),
    (LAZY, "bvr.low (layer 0) imports bvr.cli (layer 2) by import_module"),
    ("import importlib\n\ndef f():\n    return importlib.import_module('bvr.cli').app\n",
     "bvr.low (layer 0) imports bvr.cli (layer 2) by import_module"),
])
def test_the_checker_catches_a_wrong_import(source, expected):
    layers = {"bvr.low": 0, "bvr.a": 1, "bvr.b": 1, "bvr.cli": 2}
    tree = {"bvr.low": "", "bvr.a": "", "bvr.b": "", "bvr.cli": ""}
    module = "bvr.a" if "bvr.b" in source else "bvr.low"
    tree[module] = source
    assert expected in violations(layers, [("bvr.a", "bvr.b")], tree)


def test_the_checker_ignores_type_checking_downward_and_same_layer_lazy_imports():
    layers = {"bvr.low": 0, "bvr.cli": 2}
    tree = {"bvr.low": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bvr.cli.app import App\n",
            "bvr.cli": "#package\nfrom bvr.low import thing\n" + LAZY.replace('"bvr.cli"', '"bvr.cli.app"'),
            "bvr.cli.app": "from bvr.cli import tool  # the submodule, not the package's __init__\n"
                           "NAME = 'bvr.low'  # a string, in a module that does not call import_module\n",
            "bvr.cli.tool": ""}
    assert violations(layers, [], tree) == []
    assert cycles(tree) == []


@pytest.mark.parametrize(("tree", "expected"), [
    ({"bvr.a": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from bvr.b import B\n",
      "bvr.b": "from bvr.a import A\n"}, "bvr.a -(TYPE_CHECKING)-> bvr.b -> bvr.a"),
    ({"bvr.a": "import typing\n\nif typing.TYPE_CHECKING:\n    from bvr.c import C\nelse:\n    C = None\n",
      "bvr.b": "from bvr.a import A\n", "bvr.c": "def f():\n    from bvr.b import B\n"},
     "bvr.a -(TYPE_CHECKING)-> bvr.c -> bvr.b -> bvr.a"),
    ({"bvr.a": "#package\n" + LAZY.replace("bvr.cli", "bvr.a.run"), "bvr.a.run": "from bvr.a import Plan\n"},
     "bvr.a -(import_module)-> bvr.a.run -> bvr.a"),
])
def test_the_checker_catches_a_hidden_cycle(tree, expected):
    assert cycles(tree) == [expected]
    layers = {name: 0 for name in tree}
    assert violations(layers, [], tree) == []  # the layers alone do not see it
