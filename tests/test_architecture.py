"""The layering in ARCHITECTURE.md holds in the code: no import points up, and the document names the real tree.

ARCHITECTURE.md's ``layers`` block lists, lowest first, one layer per line (``N  module-or-package ...``); its
``apart`` block lists pairs of same-layer packages that must not import each other. Every import in ``bvr/``
(function-level ones included; ``if TYPE_CHECKING:`` blocks excluded) must go to the module's own layer or a lower
one, and every module must belong to a layer.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "ARCHITECTURE.md"


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


def imports_of(source: str, module: str, is_package: bool) -> set[str]:
    """The ``bvr`` modules that ``source`` (the text of ``module``) imports, relative imports resolved."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "bvr")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "bvr":
                # ``from bvr.x import y`` may name a submodule y: count it as bvr.x.y when that exists
                found.update(f"{target}.{alias.name}" for alias in node.names)
                found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "bvr").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def violations(layers: dict[str, int], apart: list[tuple[str, str]], tree: dict[str, str]) -> list[str]:
    """Every import in ``tree`` (``{module: source}``) that points up a layer or across an ``apart`` pair."""
    problems = []
    known = set(tree)
    for module, source in sorted(tree.items()):
        own = layer_of(module, layers)
        if own is None:
            problems.append(f"{module} is in no layer of ARCHITECTURE.md")
            continue
        is_package = source.startswith("#package")
        for target in sorted(imports_of(source, module, is_package)):
            if target not in known or target == module or module.startswith(target + "."):
                continue  # a name, not a module; or the module's own package
            theirs = layer_of(target, layers)
            if theirs is not None and theirs > own:
                problems.append(f"{module} (layer {own}) imports {target} (layer {theirs})")
            for first, second in apart:
                for a, b in ((first, second), (second, first)):
                    if (module == a or module.startswith(a + ".")) and (target == b or target.startswith(b + ".")):
                        problems.append(f"{module} imports {target}, but {a} and {b} must not import each other")
    return problems


def _tree() -> dict[str, str]:
    tree = {}
    for name, path in modules().items():
        text = path.read_text(encoding="utf-8")
        tree[name] = ("#package\n" + text) if path.name == "__init__.py" else text
    return tree


def test_no_import_points_up_a_layer():
    text = DOC.read_text(encoding="utf-8")
    assert violations(read_layers(text), read_apart(text), _tree()) == []


MAX_MODULE_LINES = 400


def test_no_module_is_over_400_lines():
    """A module past 400 lines holds more than one job: split it by responsibility."""
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_every_layer_entry_exists():
    existing = set(modules())
    missing = [name for name in read_layers(DOC.read_text(encoding="utf-8")) if name not in existing]
    assert missing == [], f"ARCHITECTURE.md names modules that do not exist: {missing}"


def test_every_path_the_document_names_exists():
    text = DOC.read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:bvr|tests|experiments|reports|benchmarks)/[\w./-]*)`", text))
    placeholder = re.compile(r"\b[A-Z]{3,}\b")  # experiments/NAME.yaml names a kind of file, not one file
    missing = sorted(p for p in paths if not placeholder.search(p) and not (ROOT / p.rstrip("/")).exists())
    assert missing == [], f"ARCHITECTURE.md names paths that do not exist: {missing}"


@pytest.mark.parametrize(("source", "expected"), [
    ("from bvr.cli import app\n", "bvr.low (layer 0) imports bvr.cli (layer 2)"),
    ("def f():\n    import bvr.cli\n", "bvr.low (layer 0) imports bvr.cli (layer 2)"),
    ("from bvr.b import x\n", "bvr.a imports bvr.b, but bvr.a and bvr.b must not import each other"),
])
def test_the_checker_catches_a_wrong_import(source, expected):
    layers = {"bvr.low": 0, "bvr.a": 1, "bvr.b": 1, "bvr.cli": 2}
    tree = {"bvr.low": "", "bvr.a": "", "bvr.b": "", "bvr.cli": ""}
    module = "bvr.a" if "bvr.b" in source else "bvr.low"
    tree[module] = source
    assert expected in violations(layers, [("bvr.a", "bvr.b")], tree)


def test_the_checker_ignores_type_checking_and_downward_imports():
    layers = {"bvr.low": 0, "bvr.cli": 2}
    tree = {"bvr.low": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bvr.cli import app\n",
            "bvr.cli": "from bvr.low import thing\n"}
    assert violations(layers, [], tree) == []
